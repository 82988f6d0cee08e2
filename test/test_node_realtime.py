"""The real-time option in the node processes (controller node, sim node): the rt_* parameters are
applied by main() once the node exists.  Checked against the OS (os.sched_getscheduler /
sched_getparam of every thread of the child, /proc/<pid>/task) and on /diagnostics; with the
defaults nothing changes; rt_required with a refused setting ends the process with exit code 1 and
the reason in its log."""
import os
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402

from robot_dynamics.nodes.processes import NodeProcesses, config_path  # noqa: E402
from robot_dynamics.realtime import MIDDLEWARE_TIMER_THREADS  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.slow]

START_TIMEOUT = 40.0
PRIO = 30                    # below the system tests' 40 and ros2_control's 50

SIM = ("robot_dynamics.nodes.sim_node", "mujoco_sim", {"robot": "panda", "publish_rate": 200.0,
                                                       "diagnostics_period": 0.3})
CTL = ("robot_dynamics.nodes.controller", "torque_controller",
       {"robot": "panda", "robot_description_timeout": 0.0, "diagnostics_period": 0.3})


def _fifo_permitted():
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:                                   # try in a child: this process stays as it is
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(PRIO))
            os._exit(0)
        except OSError:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0


def _threads(pid):
    """{tid: (policy, priority)} of every thread of process `pid`, from the OS."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(t)] = (os.sched_getscheduler(int(t)), os.sched_getparam(int(t)).sched_priority)
        except ProcessLookupError:
            pass
    return out


def _diag_rt(node, status_prefix, procs, timeout=START_TIMEOUT):
    """The rt.* values of the first /diagnostics status named `status_prefix...` that carries them."""
    got = {}

    def cb(msg):
        for st in msg.status:
            kv = {v.key: v.value for v in st.values}
            if st.name.startswith(status_prefix) and "rt.status" in kv:
                got.update({k: v for k, v in kv.items() if k.startswith("rt.")})
    sub = node.create_subscription(DiagnosticArray, "/diagnostics", cb, 10)
    t_end = time.monotonic() + timeout
    try:
        while not got and time.monotonic() < t_end:
            rclpy.spin_once(node, timeout_sec=0.1)
            procs.check_alive()
    finally:
        node.destroy_subscription(sub)
    return got


@pytest.fixture(scope="module")
def listener(ros):
    node = rclpy.create_node("rt_listener")
    yield node
    node.destroy_node()


@pytest.mark.parametrize("which", [SIM, CTL], ids=["sim_node", "controller_node"])
def test_fifo_applied_to_every_thread(listener, which, tmp_path):
    if not _fifo_permitted():
        pytest.skip("SCHED_FIFO not permitted here (no CAP_SYS_NICE / RLIMIT_RTPRIO)")
    module, name, params = which
    extra = {"rt_sched_policy": "fifo", "rt_sched_priority": PRIO, "rt_gc_mode": "manual",
             "rt_gc_period": 0.2}
    files = [config_path("panda_gravity_compensation.yaml")] if name == "torque_controller" else []
    with NodeProcesses(log_dir=tmp_path) as procs:
        p = procs.start(module, name=name, params={**params, **extra}, params_files=files)
        rt = _diag_rt(listener, name, procs)
        assert rt, f"no rt.* on /diagnostics from {name}:\n{procs.log(p)[-3000:]}"
        assert rt["rt.status"] == "ok" and rt["rt.sched"].startswith(f"ok fifo {PRIO}"), rt
        assert rt["rt.gc"].startswith("ok manual"), rt
        threads = _threads(p.pid)
        assert len(threads) > 1
        # every thread (executor, DDS receive threads, the sim's physics thread) runs under the policy
        assert set(threads.values()) == {(os.SCHED_FIFO, PRIO)}, threads


@pytest.mark.parametrize("which", [SIM, CTL], ids=["sim_node", "controller_node"])
def test_defaults_change_nothing(listener, which, tmp_path):
    module, name, params = which
    files = [config_path("panda_gravity_compensation.yaml")] if name == "torque_controller" else []
    with NodeProcesses(log_dir=tmp_path) as procs:
        p = procs.start(module, name=name, params=params, params_files=files)
        rt = _diag_rt(listener, name, procs)
        assert rt, f"no rt.* on /diagnostics from {name}:\n{procs.log(p)[-3000:]}"
        assert rt["rt.sched"].startswith("unchanged") and rt["rt.gc"] == "unchanged", rt
        mine = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
        # every thread as started, but the middleware's timer thread, which the control path takes
        # off wake-up preemption (realtime.calm_middleware_timers): SCHED_BATCH, still priority 0
        # (when its control path has started: configure may come after the first diagnostics)
        end = time.monotonic() + START_TIMEOUT
        while True:
            names, pols = _thread_names(p.pid), _threads(p.pid)
            timers = {t for t, n in names.items() if n.startswith(MIDDLEWARE_TIMER_THREADS)}
            calmed = {pols[t] for t in timers if t in pols} == {(os.SCHED_BATCH, 0)}
            if calmed or time.monotonic() > end:
                break
            time.sleep(0.05)
        assert timers, f"no Fast DDS timed-events thread in {sorted(names.values())}"
        assert calmed, {names[t]: pols.get(t) for t in timers}
        assert {pols[t] for t in pols if t not in timers} == {mine}


@pytest.mark.parametrize("which", [SIM, CTL], ids=["sim_node", "controller_node"])
def test_rt_required_refusal_exits_1(which, tmp_path):
    """fifo at priority 0 is outside 1..99: refused; with rt_required the node must not start."""
    module, name, params = which
    with NodeProcesses(log_dir=tmp_path) as procs:
        p = procs.start(module, name=name, params={**params, "rt_sched_policy": "fifo",
                                                   "rt_sched_priority": 0, "rt_required": True})
        try:
            code = p.wait(START_TIMEOUT)
        except Exception:  # noqa: BLE001
            code = None
        log = procs.log(p)
        assert code == 1, f"exit code {code}:\n{log[-3000:]}"
        assert "cannot start" in log and "rt_sched_priority 0 outside" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]


def _thread_names(pid):
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(t)] = open(f"/proc/{pid}/task/{t}/comm").read().strip()
        except OSError:
            pass
    return out


def test_scope_thread_puts_the_control_thread_alone_under_fifo(listener, tmp_path):
    """rt_scope thread: the controller's control thread (the one that waits on the joint states, steps
    the loop and publishes: named 'control' for the OS) runs under SCHED_FIFO, the executor and the
    DDS threads do not; the report says which thread got it."""
    if not _fifo_permitted():
        pytest.skip("SCHED_FIFO not permitted here (no CAP_SYS_NICE / RLIMIT_RTPRIO)")
    module, name, params = CTL
    extra = {"rt_sched_policy": "fifo", "rt_sched_priority": PRIO, "rt_scope": "thread"}
    with NodeProcesses(log_dir=tmp_path) as procs:
        p = procs.start(module, name=name, params={**params, **extra},
                        params_files=[config_path("panda_gravity_compensation.yaml")])
        t_end = time.monotonic() + START_TIMEOUT
        rt = {}
        while time.monotonic() < t_end:                  # until configured (before: 'deferred')
            rt = _diag_rt(listener, name, procs)
            if rt and not rt["rt.sched"].startswith("deferred"):
                break
        assert rt, f"no rt.* on /diagnostics from {name}:\n{procs.log(p)[-3000:]}"
        assert rt["rt.status"] == "ok" and rt["rt.sched"] == f"ok fifo {PRIO} (1 thread(s))", rt
        threads, names = _threads(p.pid), _thread_names(p.pid)
        fifo = {t for t, pol in threads.items() if pol == (os.SCHED_FIFO, PRIO)}
        assert [names[t] for t in fifo] == ["control"], (names, threads)
        assert len(threads) > 2
