"""The colcon route, as a ROS 2 user builds this package: `colcon build` and `colcon test` of it in a
scratch workspace, then `ros2 launch` from that install space.

Needs colcon-core + colcon-ros + colcon-python-setup-py (requirements-ros-tools.lock) and the launch
tools (../shared/ros-wheels or a ROS 2 install); `./run.sh setup` installs both.  The workspace gets
the package's tracked files (`git ls-files`; the whole tree when git is not there) and, to keep CI
short, one fast test file (test_layering.py) for `colcon test`: the point is that colcon's pytest
step runs and reports, the suite itself runs in the main pytest command.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.system, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
for mod in ("colcon_core", "colcon_ros", "colcon_python_setup_py", "ros2launch"):
    pytest.importorskip(mod, reason=f"{mod} is not installed: ./run.sh setup installs the colcon route "
                                    "(requirements-ros-tools.lock) with the ROS 2 launch wheels")
if not (BIN / "colcon").is_file():
    pytest.skip(f"no colcon executable in {BIN}", allow_module_level=True)

PACKAGE_PATHS = ("setup.py", "setup.cfg", "package.xml", "pytest.ini", "resource/", "robot_dynamics/",
                 "launch/", "config/", "urdf/")
TEST_FILES = ("test/conftest.py", "test/robustness_harness.py", "test/test_layering.py")
READY_TIMEOUT = 120.0


def package_files():
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        files = [f for f in out.splitlines() if f.startswith(PACKAGE_PATHS)]
    except (OSError, subprocess.CalledProcessError):
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and str(p.relative_to(ROOT)).startswith(PACKAGE_PATHS) and "__pycache__" not in p.parts]
    return files + list(TEST_FILES)


def env():
    e = dict(os.environ, PYTHONUNBUFFERED="1")
    e["PATH"] = str(BIN) + os.pathsep + e.get("PATH", "")
    e.pop("PYTHONPATH", None)
    e.pop("AMENT_PREFIX_PATH", None)        # only what the install space's setup script adds
    e.pop("COLCON_PREFIX_PATH", None)
    return e


def run(cmd, cwd, timeout=600):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env(), timeout=timeout,
                       shell=isinstance(cmd, str), executable="/bin/bash" if isinstance(cmd, str) else None)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = tmp_path_factory.mktemp("colcon_ws")
    src = ws / "src" / "robot_dynamics"
    for f in package_files():
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    rc, out = run([str(BIN / "colcon"), "build", "--base-paths", "src"], ws)
    assert rc == 0, out[-4000:]
    return ws


def test_colcon_build_installs_package(workspace):
    """The install space has the ament index marker, share/ (package.xml, launch, config) and the node
    executables in lib/robot_dynamics, which run with the interpreter that built them (this venv's)."""
    prefix = workspace / "install" / "robot_dynamics"
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / "robot_dynamics").is_file()
    for f in ("package.xml", "launch/sim.launch.py", "launch/real_robot.launch.py", "config/sim_panda.yaml"):
        assert (prefix / "share" / "robot_dynamics" / f).is_file(), f
    for exe in ("controller_node", "sim_node", "echo_node"):
        path = prefix / "lib" / "robot_dynamics" / exe
        assert os.access(path, os.X_OK), path
        shebang = path.read_text().splitlines()[0]
        # colcon's interpreter (bin/python3.11 of this venv), not `/usr/bin/env python3`
        assert shebang.startswith("#!/") and Path(shebang[2:]).parent == BIN, shebang


def test_colcon_test(workspace):
    """`colcon test` runs the package's pytest step; `colcon test-result` reports it all passed."""
    rc, out = run([str(BIN / "colcon"), "test", "--base-paths", "src"], workspace)
    assert rc == 0, out[-4000:]
    rc, out = run([str(BIN / "colcon"), "test-result", "--verbose"], workspace)
    assert rc == 0, out[-4000:]
    m = re.search(r"Summary: (\d+) tests?, (\d+) errors?, (\d+) failures?, (\d+) skipped", out)
    assert m, out[-4000:]
    tests, errors, failures, skipped = map(int, m.groups())
    assert tests >= 3 and errors == failures == skipped == 0, out[-4000:]


def test_ros2_launch_from_install_space(workspace, tmp_path):
    """`. install/setup.sh; ros2 launch robot_dynamics real_robot.launch.py`: the controller
    that starts is the install space's executable, and it ends with exit 0 on SIGINT."""
    log_path = tmp_path / "launch.log"
    log = open(log_path, "w")
    p = subprocess.Popen(["/bin/bash", "-c", ". install/setup.sh && exec ros2 launch robot_dynamics "
                          "real_robot.launch.py robot:=kinova controller:=joint_impedance"],
                         cwd=workspace, stdout=log, stderr=subprocess.STDOUT, env=env(),
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        t_end = time.monotonic() + READY_TIMEOUT
        pid = None
        while time.monotonic() < t_end and p.poll() is None:
            out = log_path.read_text(errors="replace")
            m = re.search(r"\[controller_node-\d+\]: process started with pid \[(\d+)\]", out)
            if m and "[torque_controller]: executor:" in out:
                pid = int(m.group(1))
                break
            time.sleep(0.25)
        assert pid, log_path.read_text(errors="replace")[-4000:]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        exe = workspace / "install" / "robot_dynamics" / "lib" / "robot_dynamics" / "controller_node"
        assert Path(cmdline[0].decode()).parent == BIN and cmdline[1] == str(exe).encode(), cmdline
        p.send_signal(signal.SIGINT)
        rc = p.wait(40)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        log.close()
    out = log_path.read_text(errors="replace")
    assert rc == 0, out[-4000:]
    assert re.search(r"\[controller_node-\d+\]: process has finished cleanly", out), out[-4000:]
    assert "Traceback" not in out, out[-4000:]
