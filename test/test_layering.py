"""Data flows one way: dynamics/ and control/ (and sim/, and hardware/: the robots' protocol loops, e.g.
hardware/franka_loop.py) never import rclpy or ROS messages."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "robot_dynamics"
ROS_MODULES = ("rclpy", "sensor_msgs", "geometry_msgs", "std_msgs", "trajectory_msgs", "diagnostic_msgs",
               "std_srvs", "lifecycle_msgs", "rosgraph_msgs", "builtin_interfaces", "robot_dynamics.nodes")


def _imports(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.ImportFrom) and node.level > 0 and node.module == "nodes":
            yield "robot_dynamics.nodes"


@pytest.mark.parametrize("layer", ["dynamics", "control", "sim", "hardware"])
def test_pure_layers_import_no_ros(layer):
    files = sorted((PKG / layer).rglob("*.py"))
    assert files, f"no source in {layer}/"
    offenders = [(f.relative_to(PKG), m) for f in files for m in _imports(f)
                 if m.split(".")[0] in ROS_MODULES or m.startswith("robot_dynamics.nodes")]
    assert not offenders, f"ROS imported from a pure layer: {offenders}"


def test_importing_pure_layers_loads_no_ros():
    code = ("import sys, robot_dynamics.dynamics, robot_dynamics.control, robot_dynamics.sim, "
            "robot_dynamics.hardware.franka_loop; "
            f"bad = [m for m in sys.modules if m.split('.')[0] in {ROS_MODULES!r}]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=PKG.parent)
    assert r.returncode == 0, r.stdout + r.stderr
