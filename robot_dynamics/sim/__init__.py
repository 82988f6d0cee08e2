"""MuJoCo simulator built from the same URDF as the controller's model."""
