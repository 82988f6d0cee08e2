"""The package installs what a ROS 2 user expects, by the pip route (a wheel, as ./run.sh does) and
by colcon (setup.cfg): package.xml, the ament index marker, launch/ config/ urdf/ under
share/robot_dynamics, and the node executables in lib/robot_dynamics (where `ros2 run` looks)."""
import configparser
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODES = ("controller_node", "sim_node", "echo_node", "franka_bridge", "carry_node")
# the module each console script runs (the controller node is the package nodes/controller/)
MODULE = {"controller_node": "controller"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    for name in ("robot_dynamics", "launch", "config", "urdf", "resource"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", "setup.cfg", "package.xml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("robot_dynamics-*.whl")
    return zipfile.ZipFile(whl)


@pytest.mark.system
def test_wheel_installs_share_and_index(wheel):
    names = wheel.namelist()
    data = "robot_dynamics-0.1.0.data/data/"
    assert data + "share/robot_dynamics/package.xml" in names
    assert data + "share/ament_index/resource_index/packages/robot_dynamics" in names
    for sub, pattern in (("launch", "*.launch.py"), ("config", "*.yaml"), ("config", "*.xml"), ("urdf", "*.xacro")):
        shipped = {p.name for p in (ROOT / sub).glob(pattern)}
        assert shipped, f"no {sub}/{pattern} in the repository"
        installed = {Path(n).name for n in names if n.startswith(f"{data}share/robot_dynamics/{sub}/")}
        assert shipped <= installed, f"{sub}: not installed: {shipped - installed}"


@pytest.mark.system
def test_wheel_installs_executables_where_ros2_run_looks(wheel):
    for node in NODES:
        info = wheel.getinfo(f"robot_dynamics-0.1.0.data/data/lib/robot_dynamics/{node}")
        assert (info.external_attr >> 16) & 0o111, f"{node} is not executable"
        text = wheel.read(info).decode()
        # the interpreter that built (and installs) it, not `#!/usr/bin/env python3`, which finds the
        # system Python outside an activated venv
        assert text.splitlines()[0] == "#!" + sys.executable, text.splitlines()[0]
        assert f"robot_dynamics.nodes.{MODULE.get(node, node)} import main" in text
    entry_points = wheel.read("robot_dynamics-0.1.0.dist-info/entry_points.txt").decode()
    for node in NODES + ("robot_dynamics_demo",):
        assert f"{node} = " in entry_points


def test_colcon_route_puts_scripts_in_lib():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["develop"]["script_dir"] == "$base/lib/robot_dynamics"
    assert cfg["install"]["install_scripts"] == "$base/lib/robot_dynamics"


def test_package_xml_format3_declares_runtime_dependencies():
    root = ET.parse(ROOT / "package.xml").getroot()
    assert root.get("format") == "3" and root.findtext("name") == "robot_dynamics"
    assert root.find("export/build_type").text == "ament_python"
    deps = {e.text for e in root.iter() if e.tag.endswith("depend")}
    for needed in ("rclpy", "sensor_msgs", "geometry_msgs", "std_msgs", "trajectory_msgs", "diagnostic_msgs",
                   "visualization_msgs", "std_srvs", "lifecycle_msgs", "rosgraph_msgs", "pinocchio", "python3-numpy",
                   "python3-scipy", "python3-yaml", "launch", "launch_ros", "python3-pytest", "launch_testing"):
        assert needed in deps, f"package.xml does not declare {needed}"


def test_every_executable_a_launch_file_starts_is_installed():
    """Each `executable="..."` of the shipped launch files has its wrapper in resource/lib (installed to
    lib/robot_dynamics, where `ros2 launch` looks) and is among the NODES checked in the wheel above
    (cell.launch.py's controller:=carry failed with "executable 'carry_node' not found" without it)."""
    import ast

    def ours(call):                    # Node(package=PACKAGE or "robot_dynamics", executable="...")
        kw = {k.arg: k.value for k in call.keywords}
        pkg = kw.get("package")
        return isinstance(kw.get("executable"), ast.Constant) and (
            (isinstance(pkg, ast.Name) and pkg.id == "PACKAGE") or
            (isinstance(pkg, ast.Constant) and pkg.value == "robot_dynamics"))
    started = {next(k.value.value for k in n.keywords if k.arg == "executable")
               for p in (ROOT / "launch").glob("*.launch.py") for n in ast.walk(ast.parse(p.read_text()))
               if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Node" and ours(n)}
    assert started, "no executable found in launch/"
    wrappers = {p.name for p in (ROOT / "resource" / "lib").iterdir()}
    assert started <= wrappers, f"not installed for ros2 launch: {started - wrappers}"
    assert started <= set(NODES), f"not checked in the wheel: {started - set(NODES)}"
