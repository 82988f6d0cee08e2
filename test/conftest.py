"""Shared fixtures.  Every test session gets its own ROS_DOMAIN_ID (set before rclpy is imported) so
parallel or leftover processes never cross-talk."""
import os
import random

if "ROBOT_DYNAMICS_TEST_DOMAIN" not in os.environ:
    os.environ["ROBOT_DYNAMICS_TEST_DOMAIN"] = str(random.SystemRandom().randint(1, 100))
    os.environ["ROS_DOMAIN_ID"] = os.environ["ROBOT_DYNAMICS_TEST_DOMAIN"]
os.environ.setdefault("ROS_LOCALHOST_ONLY", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: see robot_dynamics/__init__.py

# the robustness suite's end-of-session summary (cases per category, failures)
from robustness_harness import pytest_terminal_summary  # noqa: E402,F401
