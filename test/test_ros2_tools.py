"""The real ROS 2 tools against this package, as subprocesses: `ros2 launch` of every launch file,
`launch_test` of the launch_testing files, and ros2cli (lifecycle, param, service, topic) against the
running nodes.

They need the upstream launch / ros2cli packages (a ROS 2 Jazzy install, or the wheels of
../shared/ros-wheels that `./run.sh setup` installs) and this package installed in the interpreter's
prefix (share/robot_dynamics, lib/robot_dynamics: `./run.sh setup` does it); otherwise the module is
skipped with that reason.  Every process a test starts runs in its own session and is ended (the test
checks that none outlives its launch); the ROS_DOMAIN_ID is this run's (conftest.py).

Lean on purpose (each launch costs seconds): each law once and each robot once, across the sim.launch
runs: panda + cartesian_impedance (robot_state_publisher left at its default: absent here, skipped with
a warning), ur5e + joint_impedance (the ros2cli checks run against it), kinova + computed_torque; the
gravity_compensation law runs under launch_test (test/test_launch_testing.py).
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.system, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
PREFIX = Path(sys.prefix)
BIN = Path(sys.executable).parent
READY_TIMEOUT = 120.0     # s: both nodes up and the controller active, on a loaded 2-core machine
EXIT_TIMEOUT = 40.0       # s: launch's SIGINT -> SIGTERM escalation is 5 s per stage
CLI_TIMEOUT = 60.0

for mod in ("launch", "launch_ros", "launch_testing", "ros2cli", "ros2launch"):
    pytest.importorskip(mod, reason=f"{mod} is not importable: install the ROS 2 launch tools "
                                    "(./run.sh setup does it from ../shared/ros-wheels, or a ROS 2 install)")
if not (PREFIX / "share" / "robot_dynamics" / "launch" / "sim.launch.py").is_file() or \
        not (BIN / "ros2").is_file():
    pytest.skip(f"robot_dynamics (or ros2) is not installed in {PREFIX}: ./run.sh setup installs it",
                allow_module_level=True)


def tool_env():
    env = dict(os.environ, PYTHONUNBUFFERED="1", RCUTILS_LOGGING_BUFFERED_STREAM="0")
    env["AMENT_PREFIX_PATH"] = str(PREFIX) + (os.pathsep + env["AMENT_PREFIX_PATH"]
                                              if env.get("AMENT_PREFIX_PATH") else "")
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)          # the installed package, not the source tree
    return env


def _default_sigint():
    # a background shell starts children with SIGINT ignored; a terminal does not
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def group_pids(pgid):
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    pids.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return pids


class Launch:
    """`ros2 launch ...` in its own session; `stop()` signals it like a terminal would."""

    def __init__(self, args, log_path, env=None):
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")
        self.p = subprocess.Popen([str(BIN / "ros2"), "launch", *args], stdout=self._log,
                                  stderr=subprocess.STDOUT, env=env or tool_env(), cwd=str(self.log_path.parent),
                                  start_new_session=True, preexec_fn=_default_sigint)

    def out(self):
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern, timeout=READY_TIMEOUT, since=0):
        """Wait for `pattern` in the output (after its first `since` characters)."""
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            if re.search(pattern, self.out()[since:]):
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.25)
        self.kill()
        pytest.fail(f"{pattern!r} not seen (launch exit {self.p.poll()}):\n{self.out()[-4000:]}")

    def stop(self, how):
        """'sigint': SIGINT to ros2 launch; 'ctrl-c': SIGINT to the whole group (nodes included), then
        launch's own SIGINT to the nodes a moment later.  Returns launch's exit code."""
        try:
            if how == "ctrl-c":
                os.killpg(self.p.pid, signal.SIGINT)
            else:
                self.p.send_signal(signal.SIGINT)
            return self.p.wait(EXIT_TIMEOUT)
        finally:
            self.kill()

    def kill(self):
        """Whatever still runs in the group is an orphan: record it, then end it."""
        self.leftover = group_pids(self.p.pid) if self.p.poll() is not None else []
        if self.p.poll() is None or self.leftover:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait(10)
        self._log.close()


def assert_clean_exit(launch, rc, nodes):
    out = launch.out()
    assert rc == 0, f"ros2 launch exit code {rc}:\n{out[-4000:]}"
    assert not launch.leftover, f"processes outlived the launch: {launch.leftover}"
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-4000:]
    for node in nodes:
        assert re.search(rf"\[{node}-\d+\]: process has finished cleanly", out), \
            f"{node} did not exit with 0:\n{out[-4000:]}"
    assert "process has died" not in out, out[-4000:]


def have_package(name):
    """Is ROS package `name` in the ament index of the tools' AMENT_PREFIX_PATH (read from disk)?"""
    return any((Path(p) / "share" / "ament_index" / "resource_index" / "packages" / name).is_file()
               for p in tool_env()["AMENT_PREFIX_PATH"].split(os.pathsep) if p)


def ros2(*args, timeout=CLI_TIMEOUT):
    """Run `ros2 *args`; (exit code, stdout + stderr)."""
    r = subprocess.run([str(BIN / "ros2"), *args], capture_output=True, text=True, env=tool_env(),
                       timeout=timeout, preexec_fn=_default_sigint)
    return r.returncode, r.stdout + r.stderr


# A service verb against a node that is up can fail three ways on a loaded host, none of them the
# node's: the graph the verb reads (the daemon's, or its own after --spin-time) has not discovered the
# node yet ("Node not found"); the rmw drops the response: rmw_fastrtps sends a response only once the
# client's response reader is matched and waits 100 ms for that; the node then logs "failed to send
# response (timeout): client will not receive response" and the verb, which has no timeout, waits
# forever (seen in CI on `ros2 lifecycle get`); or the verb is still discovering the node's services
# when its time is up (it waits for them without a timeout: a loaded run beside a CPU hog saw
# `ros2 lifecycle set ... deactivate` go 20 s without the node receiving the request or dropping a
# response, after param set / get and a service call to the same node had answered).  A user re-runs
# the command, after checking the state for a transition; so does this.  A node that does not answer
# at all still fails: every repeat hangs until `timeout`.
DROPPED = "client will not receive response"
# `ros2 lifecycle get` prints the state as "<label> [<id>]"; the tool's rmw may print errors of its own
# before it on stderr (Fast-DDS "Failed init_port fastrtps_port7002: open_and_lock_file failed" when
# another process holds its shared-memory port lock: seen in a loaded run), which are not the answer
LIFECYCLE_STATE = re.compile(r"^(\w+) \[\d+\]\s*$", re.M)


def lifecycle_state(out):
    """The state label `ros2 lifecycle get` printed, or None."""
    m = LIFECYCLE_STATE.search(out or "")
    return m.group(1) if m else None
HUNG = "(the verb hung)"
NO_DAEMON = ("--no-daemon", "--spin-time", "3")    # its own graph, after 3 s of discovery
CALL_TIMEOUT = 20.0                                # s: one verb's run, then it counts as hung


# what a verb prints when it gave up before it asked the node anything: it has not discovered the node
# in the graph yet, or (`ros2 param`, which waits a fixed 5 s for them, whatever --timeout says) the
# node's parameter services ("Wait for service timed out waiting for parameter services": one loaded
# run, param set, the node up and answering the other verbs)
NOT_YET = ("Node not found", "Wait for service timed out")


def ros2_query(*args, launch, timeout=READY_TIMEOUT, repeatable=True, not_yet=()):
    """`ros2 *args`, repeated over NOT_YET (and the caller's `not_yet`: answers that say "not now")
    and over a hang (no output in CALL_TIMEOUT) for up to `timeout`; a call that is not `repeatable`
    (a transition) returns (None, HUNG) on a hang instead, for the caller to check what happened.
    Each hang, and each answer in `not_yet`, is printed (a hang with whether the node's log (`launch`)
    shows a dropped response (DROPPED) during it)."""
    deadline = time.monotonic() + timeout
    out, hangs = "", []
    while time.monotonic() < deadline:
        dropped = launch.out().count(DROPPED)
        try:
            rc, out = ros2(*args, timeout=CALL_TIMEOUT)
        except subprocess.TimeoutExpired:
            why = ("the node's rmw dropped a response" if launch.out().count(DROPPED) > dropped
                   else "no response dropped: the verb still discovering, or its request late")
            hangs.append(why)
            print(f"`ros2 {' '.join(args)}` hung {CALL_TIMEOUT:.0f} s ({why})" +
                  ("" if repeatable else ": the caller checks the state"), flush=True)
            if not repeatable:
                return None, HUNG
            continue
        if not any(m in out for m in NOT_YET + tuple(not_yet)):
            return rc, out
        if any(m in out for m in not_yet):
            print(f"`ros2 {' '.join(args)}`: not now ({out.strip().splitlines()[-1][:200]}); again", flush=True)
    pytest.fail(f"`ros2 {' '.join(args)}` got no answer from the node in {timeout:.0f} s (hangs: {hangs or 'none'}; "
                f"last output: {out!r}):\n{launch.out()[-4000:]}")


@pytest.fixture(scope="module", autouse=True)
def no_daemon_left():
    yield
    # ros2cli verbs start a per-domain daemon: stop it (ours: this run's ROS_DOMAIN_ID)
    subprocess.run([str(BIN / "ros2"), "daemon", "stop"], capture_output=True, env=tool_env(), timeout=60)


ACTIVE = r"\[torque_controller\]: active: {law}"
# `ros2 param` looks the node up in the graph first and gives up after --timeout (1 s by default):
# a CLI process that has just started discovers a running node in more than that on a loaded host
# ("Node not found" in 3 of 9 runs alone, the node up and answering), so it is told to wait longer,
# as a user on a busy machine would
PARAM_WAIT = ("--timeout", "20")


# --------------------------------------------------------------------------------------------------
# sim.launch.py
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("robot,law,how", [("panda", "cartesian_impedance", "sigint"),
                                           ("kinova", "computed_torque", "ctrl-c")])
def test_sim_launch(tmp_path, robot, law, how):
    """ros2 launch sim.launch.py comes up (controller active with the law asked for) and ends cleanly
    on launch's SIGINT, or on Ctrl-C (SIGINT to the group, then launch's own SIGINT): exit 0 for
    ros2 launch and every node, no traceback, nothing left running.  robot_state_publisher stays at
    its default (true): its package is missing here, so it is skipped with a warning."""
    launch = Launch(["robot_dynamics", "sim.launch.py", f"robot:={robot}", f"controller:={law}"],
                    tmp_path / "launch.log")
    launch.wait_for(ACTIVE.format(law=law))                    # (wait_for ends the launch when it fails)
    launch.wait_for(r"\[mujoco_sim\]: simulating")
    rc = launch.stop(how)
    assert_clean_exit(launch, rc, ["sim_node", "controller_node"])
    if not have_package("robot_state_publisher"):
        assert "robot_state_publisher is not installed" in launch.out()


def test_sim_launch_ros2cli(tmp_path):
    """ur5e + joint_impedance under ros2 launch, then ros2cli against the running nodes:
    `ros2 topic echo --once ~/state`, `ros2 param set` good (read back by `ros2 param get`) and bad
    (a negative stiffness: rejected with its reason, the old value kept), `ros2 service call ~/hold`,
    `ros2 lifecycle set deactivate` (then `get` says inactive) ... and a Ctrl-C at the end.  Started
    with `dynamics:=` an identification's parameters file (written by the identification's writer),
    whose values the node then has over its config's."""
    from robot_dynamics.dynamics import identification as idn
    fc = [0.31, 0.32, 0.23, 0.14, 0.15, 0.06]                      # the config has none (0)
    identified = idn.write_params_yaml(tmp_path / "ur5e_dynamics.yaml", {"joint_impedance.friction_coulomb": fc})
    launch = Launch(["robot_dynamics", "sim.launch.py", "robot:=ur5e", "controller:=joint_impedance",
                     "robot_state_publisher:=false", f"dynamics:={identified}"], tmp_path / "launch.log")
    try:
        launch.wait_for(ACTIVE.format(law="joint_impedance"))
        rc, out = ros2_query("param", "get", *PARAM_WAIT, "/torque_controller", "joint_impedance.friction_coulomb",
                             launch=launch)
        assert str(fc) in out.replace("array('d', ", "").replace(")", ""), out
        rc, out = ros2("topic", "echo", "--once", "/torque_controller/state", "sensor_msgs/msg/JointState")
        assert rc == 0 and "shoulder_pan_joint" in out and "effort:" in out, out

        good = "[1400.0, 1400.0, 900.0, 140.0, 140.0, 45.0]"      # config: 1500 1500 1000 150 150 50
        rc, out = ros2_query("param", "set", *PARAM_WAIT, "/torque_controller", "joint_impedance.k_gains", good,
                             launch=launch)
        assert rc == 0 and "Set parameter successful" in out, out
        rc, out = ros2_query("param", "get", *PARAM_WAIT, "/torque_controller", "joint_impedance.k_gains",
                             launch=launch)
        assert good in out.replace("array('d', ", "").replace(")", ""), out

        rc, out = ros2_query("param", "set", *PARAM_WAIT, "/torque_controller", "joint_impedance.k_gains",
                             "[-1.0, 1400.0, 900.0, 140.0, 140.0, 45.0]", launch=launch)
        assert "Setting parameter failed" in out and "must be >= 0" in out, out
        rc, out = ros2_query("param", "get", *PARAM_WAIT, "/torque_controller", "joint_impedance.k_gains",
                             launch=launch)
        assert good in out.replace("array('d', ", "").replace(")", ""), out     # unchanged

        # ~/hold refuses while the watchdog is tripped (the law not running: nothing to hold from).  A
        # fresh-clone run (quiet host) called it 0.1 s into one: the sim node's joint states paused
        # > 0.1 s (the ur5e config's watchdog_timeout) as each ros2cli process started on the 2 cores.
        # The answer is right; a user calls again once the states are back, as this does
        rc, out = ros2_query("service", "call", "/torque_controller/hold", "std_srvs/srv/Trigger", launch=launch,
                             not_yet=("not active with a valid joint state",))
        assert rc == 0 and "success=True" in out, out

        # a transition is not repeated blindly (a second deactivate is refused): after a hang the
        # state says whether it happened, and it is asked again only when it did not
        for _ in range(3):
            rc, out = ros2_query("lifecycle", "set", *NO_DAEMON, "/torque_controller", "deactivate",
                                 launch=launch, repeatable=False)
            if out != HUNG:
                break
            _, state = ros2_query("lifecycle", "get", *NO_DAEMON, "/torque_controller", launch=launch)
            if lifecycle_state(state) != "active":
                break
        assert out == HUNG or (rc == 0 and "Transitioning successful" in out), out
        rc, out = ros2_query("lifecycle", "get", *NO_DAEMON, "/torque_controller", launch=launch)
        assert rc == 0 and lifecycle_state(out) == "inactive", out
    except BaseException:
        launch.kill()
        raise
    rc = launch.stop("ctrl-c")
    assert_clean_exit(launch, rc, ["sim_node", "controller_node"])


def test_failed_launch_leaves_no_process(tmp_path):
    """A launch whose sim node cannot start (a parameters file with an invalid bad_command_policy: the
    node says why and exits with 1): the controller that did start is ended by the launch, which exits
    on its own; no process of it is left."""
    bad = tmp_path / "bad_sim.yaml"
    bad.write_text((PREFIX / "share" / "robot_dynamics" / "config" / "sim_panda.yaml").read_text()
                   + "\n    bad_command_policy: explode\n")
    launch = Launch(["robot_dynamics", "sim.launch.py", "robot_state_publisher:=false", f"sim_config:={bad}"],
                    tmp_path / "launch.log")
    try:
        launch.p.wait(READY_TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    running = launch.p.poll() is None
    launch.kill()
    out = launch.out()
    assert not running, f"the launch kept running after its controller failed:\n{out[-4000:]}"
    assert re.search(r"\[controller_node-\d+\]: process started", out), out[-4000:]
    assert "cannot start: bad_command_policy must be 'hold' or 'zero'" in out, out[-4000:]
    assert not launch.leftover, f"processes outlived the failed launch: {launch.leftover}\n{out[-4000:]}"


# --------------------------------------------------------------------------------------------------
# real_robot.launch.py, gazebo.launch.py
# --------------------------------------------------------------------------------------------------
def test_launch_refuses_a_bad_dynamics_file(tmp_path):
    """`dynamics:=` naming a file that is not a parameters file (a typo'd path, a bare dict): the launch
    stops with an error naming it before any node starts, and leaves nothing running."""
    flat = tmp_path / "flat.yaml"
    flat.write_text("joint_impedance.friction_coulomb: [0.5]\n")
    for path in (tmp_path / "missing.yaml", flat):
        launch = Launch(["robot_dynamics", "real_robot.launch.py", "robot:=ur5e", "controller:=joint_impedance",
                         f"dynamics:={path}"], tmp_path / f"launch_{path.stem}.log")
        try:
            rc = launch.p.wait(READY_TIMEOUT)
        finally:
            launch.kill()
        out = launch.out()
        assert rc != 0 and f"dynamics:={path}" in out, out[-4000:]
        assert "process started" not in out and not launch.leftover, out[-4000:]


def test_real_robot_launch(tmp_path):
    """real_robot.launch.py with its hardware defaults (autostart false: the controller waits,
    unconfigured, for a lifecycle manager) and the topic remappings; with no robot description
    published, configure is refused (ERROR, how to pass one); ends on SIGINT with exit 0."""
    launch = Launch(["robot_dynamics", "real_robot.launch.py", "robot:=ur5e", "controller:=gravity_compensation",
                     "joint_states_topic:=/ur/joint_states"], tmp_path / "launch.log")
    try:
        launch.wait_for(r"\[torque_controller\]: executor:")
        rc, out = ros2_query("lifecycle", "get", *NO_DAEMON, "/torque_controller", launch=launch)
        assert rc == 0 and lifecycle_state(out) == "unconfigured", out
        # no robot description published and no fallback_robot named: configure is refused with an
        # ERROR saying how to pass one (issue 42: it configured on example-robot-data's UR5 before)
        ros2_query("lifecycle", "set", *NO_DAEMON, "/torque_controller", "configure", launch=launch,
                   repeatable=False)
        launch.wait_for(r"configure failed: no robot description.*fallback_robot")
        rc, out = ros2_query("lifecycle", "get", *NO_DAEMON, "/torque_controller", launch=launch)
        assert rc == 0 and lifecycle_state(out) == "unconfigured", out
    except BaseException:
        launch.kill()                     # a failed check must not leave the launch running
        raise
    rc = launch.stop("sigint")
    assert_clean_exit(launch, rc, ["controller_node"])


def test_gazebo_launch_arguments_and_missing_packages(tmp_path):
    """gazebo.launch.py as far as it goes without Gazebo: its arguments (--show-args) and, since
    ros_gz_sim & co are not installed here, a clear error naming them before anything starts."""
    rc, out = ros2("launch", "robot_dynamics", "gazebo.launch.py", "--show-args")
    assert rc == 0, out
    for arg, default in (("robot", "panda"), ("controller", "cartesian_impedance"), ("gz_args", "-r empty.sdf")):
        assert re.search(rf"'{arg}':.*?\(default: '{re.escape(default)}'\)", out, re.S), out
    missing = [pkg for pkg in ("ros_gz_sim", "ros_gz_bridge", "controller_manager", "robot_state_publisher")
               if not have_package(pkg)]
    if not missing:
        pytest.skip("Gazebo packages are installed: the full launch is a manual bring-up (README)")
    launch = Launch(["robot_dynamics", "gazebo.launch.py", "robot:=ur5e"], tmp_path / "launch.log")
    try:
        rc = launch.p.wait(READY_TIMEOUT)
    finally:
        launch.kill()
    out = launch.out()
    assert rc != 0, out
    assert str(missing) in out and "nothing was started" in out, out[-4000:]
    assert "process started" not in out and not launch.leftover, out[-4000:]


# --------------------------------------------------------------------------------------------------
# launch_testing files
# --------------------------------------------------------------------------------------------------
LAUNCH_TESTS = sorted(p.name for p in (ROOT / "test").glob("test_*.py")
                      if re.search(r"^def generate_test_description\(", p.read_text(errors="replace"), re.M))


@pytest.mark.parametrize("name", LAUNCH_TESTS)
def test_launch_testing_file(tmp_path, name):
    """`launch_test test/<file>`: its active and post-shutdown tests pass (the junit report says how
    many ran, none skipped or failed)."""
    xml = tmp_path / "result.xml"
    log = open(tmp_path / "launch_test.log", "w")
    p = subprocess.Popen([str(BIN / "launch_test"), str(ROOT / "test" / name), "--junit-xml", str(xml)],
                         stdout=log, stderr=subprocess.STDOUT, env=tool_env(), cwd=str(tmp_path),
                         start_new_session=True, preexec_fn=_default_sigint)
    try:
        rc = p.wait(300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        leftover = group_pids(p.pid)
        if leftover:
            os.killpg(p.pid, signal.SIGKILL)
        log.close()
    out = (tmp_path / "launch_test.log").read_text(errors="replace")
    assert rc == 0, out[-4000:]
    assert not leftover, f"processes outlived launch_test: {leftover}"
    import xml.etree.ElementTree as ET
    suites = ET.parse(xml).getroot()
    tests = sum(int(s.get("tests", 0)) for s in suites.iter("testsuite"))
    bad = sum(int(s.get(k, 0)) for s in suites.iter("testsuite") for k in ("failures", "errors", "skipped"))
    assert tests >= 2 and bad == 0, out[-4000:]
