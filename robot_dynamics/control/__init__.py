"""Control laws (no ROS): gravity compensation, computed torque, joint and Cartesian impedance,
trajectory interpolation, wrench processing and the safety filter."""
