"""robot_dynamics: real-time torque control of robot arms for ROS 2.

Layers (data flows one way): ``nodes`` (rclpy adapters) -> ``control`` (pure control laws) ->
``dynamics`` (Model/Data, Pinocchio and in-repo reference backends).  ``dynamics`` and ``control``
never import rclpy.
"""

__version__ = "0.1.0"
