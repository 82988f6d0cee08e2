"""Hardware adapters without ROS: what a bridge node needs to drive a real arm (see nodes/).

    from robot_dynamics.hardware.franka import FrankaArm, cross_check, prepare_urdf, GravityGuard
"""
