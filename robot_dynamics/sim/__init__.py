"""MuJoCo simulator built from the same URDF as the controller's model."""
from .mujoco_sim import MujocoSim, mujoco_urdf

__all__ = ["MujocoSim", "mujoco_urdf"]
