"""Shared fixtures.  Every test session gets its own ROS_DOMAIN_ID (set before rclpy is imported) so
parallel or leftover processes never cross-talk."""
import os
import random

if "ROBOT_DYNAMICS_TEST_DOMAIN" not in os.environ:
    os.environ["ROBOT_DYNAMICS_TEST_DOMAIN"] = str(random.SystemRandom().randint(1, 100))
    os.environ["ROS_DOMAIN_ID"] = os.environ["ROBOT_DYNAMICS_TEST_DOMAIN"]
os.environ.setdefault("ROS_LOCALHOST_ONLY", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
