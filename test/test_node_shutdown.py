"""Every node process ends cleanly (exit code 0, no traceback) on SIGINT, on a second SIGINT during
its shutdown, and on SIGTERM (robot_dynamics/nodes/runner.py), and the controller still publishes
its safe command on the way out.

The processes are started as `python -m robot_dynamics.nodes.<node>` with SIGINT at its default
disposition (a background shell would start them with SIGINT ignored, hiding the bug), each in its
own session; the signals go to the whole process group, as a terminal's Ctrl-C does.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.system, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT = 90.0      # s: start-up on a loaded 2-core machine (controller self-check included)
EXIT_TIMEOUT = 30.0


def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(module, log_path, ros_args=()):
    env = dict(os.environ, PYTHONUNBUFFERED="1", RCUTILS_LOGGING_BUFFERED_STREAM="0")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    log = open(log_path, "w")
    p = subprocess.Popen([sys.executable, "-m", module, "--ros-args", *ros_args], stdout=log,
                         stderr=subprocess.STDOUT, env=env, cwd=str(ROOT), start_new_session=True,
                         preexec_fn=_default_sigint)
    p.log, p.log_path = log, log_path
    return p


def wait_for(p, text, timeout=READY_TIMEOUT):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        out = Path(p.log_path).read_text(errors="replace")
        if text in out:
            return out
        if p.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail(f"{text!r} not seen (exit {p.poll()}):\n{Path(p.log_path).read_text()[-3000:]}")


def end(p, signals, gap=0.05):
    """Send `signals` to the process group `gap` s apart; return (exit code, log)."""
    try:
        for k, sig in enumerate(signals):
            if k:
                time.sleep(gap)
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        rc = p.wait(EXIT_TIMEOUT)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
        p.log.close()
    return rc, Path(p.log_path).read_text(errors="replace")


CASES = [
    # (node module, ready text, ros args, signals)
    ("robot_dynamics.nodes.sim_node", "simulating", ["-p", "publish_rate:=200.0"], [signal.SIGINT]),
    ("robot_dynamics.nodes.sim_node", "simulating", ["-p", "publish_rate:=200.0"],
     [signal.SIGINT, signal.SIGINT, signal.SIGINT]),
    ("robot_dynamics.nodes.echo_node", "echo:", [], [signal.SIGTERM]),
    ("robot_dynamics.nodes.echo_node", "echo:", [], [signal.SIGINT, signal.SIGTERM]),
]


@pytest.mark.parametrize("module,ready,args,signals", CASES,
                         ids=lambda v: "+".join(s.name for s in v) if isinstance(v, list) and v and
                         isinstance(v[0], signal.Signals) else None)
def test_node_exits_cleanly(tmp_path, module, ready, args, signals):
    p = start(module, tmp_path / "node.log", args)
    wait_for(p, ready)
    rc, out = end(p, signals)
    assert rc == 0, f"exit code {rc}:\n{out[-3000:]}"
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]


def test_controller_publishes_safe_command_on_double_sigint(tmp_path):
    """The controller, active on a sim node, gets SIGINT twice (Ctrl-C + launch's own): exit 0, no
    traceback, and its last command on its command topic is the safe command (zero torque,
    safe_command: zero), published during shutdown."""
    import rclpy
    from std_msgs.msg import Float64MultiArray
    from robot_dynamics.nodes.processes import CONTROLLER_OVERRIDES, config_path, params_file

    topic = f"/safe_command_test_{os.getpid()}/commands"     # nobody else's commands on it
    sim = start("robot_dynamics.nodes.sim_node", tmp_path / "sim.log",
                ["-r", "__node:=mujoco_sim", "--params-file", str(config_path("sim_panda.yaml")),
                 "-p", "publish_rate:=500.0", "-p", f"command_topic:={topic}"])
    pf = params_file("torque_controller", {**CONTROLLER_OVERRIDES, "safe_command": "zero",
                                           "command_topic": topic}, str(tmp_path))
    ctl = start("robot_dynamics.nodes.controller", tmp_path / "ctl.log",
                ["-r", "__node:=torque_controller",
                 "--params-file", str(config_path("panda_gravity_compensation.yaml")), "--params-file", pf])
    got = []
    rclpy.init()
    node = rclpy.create_node("safe_command_probe")
    try:
        node.create_subscription(Float64MultiArray, topic,
                                 lambda m: got.append(list(m.data)), 100)
        wait_for(ctl, "active:")
        t_end = time.monotonic() + READY_TIMEOUT
        while not any(any(abs(x) > 1.0 for x in c) for c in got) and time.monotonic() < t_end:
            rclpy.spin_once(node, timeout_sec=0.1)
        assert any(any(abs(x) > 1.0 for x in c) for c in got), "the controller never held the arm"
        n_before = len(got)
        try:
            os.killpg(ctl.pid, signal.SIGINT)
            time.sleep(0.05)
            os.killpg(ctl.pid, signal.SIGINT)
            ctl.wait(EXIT_TIMEOUT)
        finally:
            rc, out = end(ctl, [])
        t_end = time.monotonic() + 2.0
        while time.monotonic() < t_end:
            rclpy.spin_once(node, timeout_sec=0.1)
        assert rc == 0, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        assert len(got) > n_before and got[-1] == [0.0] * 7, f"last command {got[-1]}"
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        end(sim, [signal.SIGINT])


HANG_SCRIPT = '''
import ctypes, sys
from rclpy.node import Node
from robot_dynamics.nodes.runner import run

WHERE = sys.argv[1]


def hang_holding_the_gil(where):
    # a C call made through PyDLL keeps the interpreter lock for its whole duration, as a middleware
    # destructor blocked inside a binding does: no other Python thread runs meanwhile
    print(f"hanging in {where}", flush=True)
    ctypes.PyDLL(None).sleep(600)


class HangingNode(Node):
    def destroy_node(self):
        if WHERE == "destroy_node":
            hang_holding_the_gil("destroy_node")
        return super().destroy_node()


def on_exit(node):
    if WHERE == "on_exit":
        hang_holding_the_gil("on_exit")


def factory():
    node = HangingNode("hang_probe")
    print("spinning", flush=True)
    return node


sys.exit(run(factory, on_exit=on_exit, exit_process=True, exit_grace=3.0))
'''


@pytest.mark.parametrize("where,code", [("destroy_node", 0), ("on_exit", 1)])
def test_shutdown_hung_holding_the_gil_still_ends(tmp_path, where, code):
    """A clean-up blocked in a C call that holds the interpreter lock (the hang a CI run saw: the
    controller outlived SIGINT, SIGTERM and runner's 12 s Python watchdog, SIGKILLed by ros2 launch)
    still ends the process: the kernel-timer backstop fires exit_grace + 1 s after the signal, with
    exit code 0 once on_exit (the safe command) has returned and 1 before, after a stack dump that
    names the hung function.  Without the backstop the process lives the 600 s of the hang (the Python
    watchdog never gets the lock), and end() times out."""
    script = tmp_path / "hang_node.py"
    script.write_text(HANG_SCRIPT)
    env = dict(os.environ, PYTHONUNBUFFERED="1", RCUTILS_LOGGING_BUFFERED_STREAM="0")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    log_path = tmp_path / "node.log"
    log = open(log_path, "w")
    p = subprocess.Popen([sys.executable, str(script), where], stdout=log, stderr=subprocess.STDOUT,
                         env=env, cwd=str(ROOT), start_new_session=True, preexec_fn=_default_sigint)
    p.log, p.log_path = log, log_path
    wait_for(p, "spinning")
    try:
        os.killpg(p.pid, signal.SIGINT)
        wait_for(p, f"hanging in {where}")
        rc = p.wait(EXIT_TIMEOUT)
    finally:
        rc, out = end(p, [])
    assert rc == code, f"exit code {rc}:\n{out[-3000:]}"
    assert "most recent call first" in out and "hang_holding_the_gil" in out, out[-3000:]
