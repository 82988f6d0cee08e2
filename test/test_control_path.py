"""The per-message path (nodes/control_path.py) and the controller node on it, over real DDS.

The path alone: its subscription is a real subscription of the node (the graph lists it, remappings
apply) that no executor ever takes from; it hands every message taken to the handler (`last` on the
newest), wakes the handler at the time asked when no message comes, survives a handler that raises,
and ends on stop().  The node, fed joint states at 1 kHz by a publisher thread: every command it sends
keeps the safety invariants (robustness_harness.NodeMonitor); a parameter change in the middle of the
stream applies whole between two steps (every command is the law with the old gains or with the new
ones, computed here from the parameters and Pinocchio, and after the first new one never an old one);
the watchdog trips when the stream stops and control resumes when it comes back; deactivate and
activate in the middle of the stream ramp to the safe command and back.  No timed assertion: every wait
is for an event."""
import threading
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.duration import Duration  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

from robustness_harness import ARM, Q0, SpinThread, rig, wait_for  # noqa: E402,F401 (rig: the fixture)
from robot_dynamics.dynamics import Model, PinocchioBackend  # noqa: E402
from robot_dynamics.nodes.control_path import ControlPath, TakeSubscription  # noqa: E402

pytestmark = pytest.mark.slow


# ------------------------------------------------------------------------------------------------ the path
@pytest.fixture
def ctx():
    c = rclpy.Context()
    rclpy.init(context=c)
    yield c
    rclpy.try_shutdown(context=c)


def test_path_takes_what_no_executor_sees(ctx):
    node = rclpy.create_node("cp_node", context=ctx, cli_args=["--ros-args", "-r", "/cp_in:=/cp_remapped"])
    talker = rclpy.create_node("cp_talker", context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    ex.add_node(talker)
    got, lasts, errors, wakes = [], [], [], []
    lock = threading.Lock()

    def on_message(msg, now, last):
        with lock:
            got.append(list(msg.data))
            lasts.append(last)
        if msg.data[0] == -1.0:
            raise RuntimeError("boom")

    sub = TakeSubscription(node, Float64MultiArray, "/cp_in", 100)
    path = ControlPath(node, sub, on_message, on_wakeup=lambda now: wakes.append(now),
                       on_error=lambda where, e: errors.append((where, str(e))), name="cp_test")
    assert sub.topic_name == "/cp_remapped"                # the node's remapping applied
    path.start()
    spin = None
    try:
        spin = SpinThread(ex)
        pub = talker.create_publisher(Float64MultiArray, "/cp_remapped", 100)
        wait_for(lambda: pub.get_subscription_count() > 0, what="the path's subscription matched")
        # the graph sees it as the node's subscription
        infos = node.get_subscriptions_info_by_topic("/cp_remapped")
        assert [i.node_name for i in infos] == ["cp_node"]
        assert list(node.subscriptions) == [], "the executor has nothing of it to wait on"
        for k in range(50):
            pub.publish(Float64MultiArray(data=[float(k)]))
        wait_for(lambda: len(got) == 50, what="all 50 messages handed over")
        assert [g[0] for g in got] == [float(k) for k in range(50)]
        assert lasts.count(True) == path.messages >= 1 and path.messages + path.superseded == 50
        # a handler that raises: reported, and the thread goes on
        pub.publish(Float64MultiArray(data=[-1.0]))
        pub.publish(Float64MultiArray(data=[7.0]))
        wait_for(lambda: got[-1] == [7.0], what="a message after the failing one")
        assert errors and errors[0][0] == "handler" and "boom" in errors[0][1]
        assert path.errors == 1
        # a wake-up at a time, set from another thread: called once, not before that time
        t = time.monotonic() + 0.05
        path.wake_at(t)
        wait_for(lambda: len(wakes) == 1, what="the wake-up")
        assert wakes[0] >= t
        path.wake_at(None)
    finally:
        assert path.stop(), "the thread ended"
        path.destroy()
        if spin is not None:
            spin.stop()
        node.destroy_node()
        talker.destroy_node()
    assert not path.running


def _timer_threads():
    """{tid: (name, policy)} of this process's middleware timer threads (realtime.MIDDLEWARE_TIMER_THREADS)."""
    import os
    from robot_dynamics.realtime import MIDDLEWARE_TIMER_THREADS
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                name = f.read().strip()
            if name.startswith(MIDDLEWARE_TIMER_THREADS):
                out[int(t)] = (name, os.sched_getscheduler(int(t)))
        except OSError:
            pass
    return out


def test_path_start_takes_the_timer_thread_off_wakeup_preemption(ctx):
    """Starting a control path puts Fast DDS's timed-events thread under SCHED_BATCH (read back from
    the OS): the timer restarts of each reliable command no longer preempt the control thread.  A
    timer thread the real-time option made SCHED_FIFO (rt_scope: process) keeps that policy."""
    import os
    node = rclpy.create_node("cp_batch", context=ctx)
    ctx2 = rclpy.Context()                            # a second participant: a second timer thread
    rclpy.init(context=ctx2)
    node2 = rclpy.create_node("cp_batch_rt", context=ctx2)
    path = None
    fifo_tid = None
    try:
        # each participant's timed-events thread (dds.ev.*) is started and named by Fast DDS on its own
        # thread: on a loaded host the second's can appear after create_node returns
        def both():
            found = _timer_threads()
            return found if sum(pol == os.SCHED_OTHER for _, pol in found.values()) >= 2 else None
        before = wait_for(both, what="a Fast DDS timed-events thread (dds.ev.*) per participant")
        others = [tid for tid, (_, pol) in before.items() if pol == os.SCHED_OTHER]
        fifo_tid = others[0]                          # as the real-time option leaves it (needs root, as
        try:                                          # rt_scope: process does)
            os.sched_setscheduler(fifo_tid, os.SCHED_FIFO, os.sched_param(1))
        except PermissionError:
            fifo_tid = None
        sub = TakeSubscription(node, Float64MultiArray, "/cp_batch_in", 1)
        path = ControlPath(node, sub, lambda msg, now, last: None, name="cp_batch")
        path.start()
        after = _timer_threads()
        for tid, (name, pol) in after.items():
            if tid == fifo_tid:
                assert pol == os.SCHED_FIFO, f"{name}: the real-time option's policy was replaced"
            else:
                assert pol == os.SCHED_BATCH, f"{name}: policy {pol}, not SCHED_BATCH"
        assert sorted(path.calmed) == sorted(name for tid, (name, _) in after.items() if tid != fifo_tid)
        assert len(path.calmed) >= 1 and path.stats()["batch_timer_threads"] == len(path.calmed)
        # a path started again (a node configured again) reports them again, already under SCHED_BATCH
        path.destroy()
        path = ControlPath(node, TakeSubscription(node, Float64MultiArray, "/cp_batch_in", 1),
                           lambda msg, now, last: None, name="cp_batch")
        path.start()
        assert sorted(path.calmed) == sorted(name for tid, (name, _) in after.items() if tid != fifo_tid)
    finally:
        if fifo_tid is not None:
            try:
                os.sched_setscheduler(fifo_tid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass
        if path is not None:
            path.destroy()
        node.destroy_node()
        node2.destroy_node()
        rclpy.try_shutdown(context=ctx2)


def test_take_all_hands_every_message_of_every_topic(ctx):
    """TakeAll (the probe's and the benchmark driver's receive path): every message of each of its
    subscriptions reaches that subscription's handler, in the order published, none skipped (two
    topics published interleaved faster than a handler runs); a handler that raises is counted and the
    thread goes on; destroy() ends the thread and releases the subscriptions."""
    from sensor_msgs.msg import JointState
    from robot_dynamics.nodes.control_path import TakeAll
    node = rclpy.create_node("ta_node", context=ctx)
    talker = rclpy.create_node("ta_talker", context=ctx)
    got = {"a": [], "b": []}

    def on_a(msg):
        if msg.data and msg.data[0] == -1.0:
            raise RuntimeError("boom")
        got["a"].append(msg.data[0])

    def on_b(msg):
        time.sleep(1e-4)                                   # slower than the publisher: a backlog
        got["b"].append(msg.position[0])

    sa = TakeSubscription(node, Float64MultiArray, "/ta_a", 200)
    sb = TakeSubscription(node, JointState, "/ta_b", 200)
    rec = TakeAll(node, [(sa, on_a), (sb, on_b)], name="ta_test").start()
    try:
        pa = talker.create_publisher(Float64MultiArray, "/ta_a", 200)
        pb = talker.create_publisher(JointState, "/ta_b", 200)
        wait_for(lambda: pa.get_subscription_count() > 0 and pb.get_subscription_count() > 0,
                 what="both subscriptions matched")
        assert list(node.subscriptions) == [], "no executor has anything of it to wait on"
        for k in range(150):
            pa.publish(Float64MultiArray(data=[float(k)]))
            pb.publish(JointState(position=[float(k)]))
        wait_for(lambda: len(got["a"]) == 150 and len(got["b"]) == 150, what="all 2 x 150 messages handed over")
        assert got["a"] == [float(k) for k in range(150)] and got["b"] == got["a"]
        pa.publish(Float64MultiArray(data=[-1.0]))
        pa.publish(Float64MultiArray(data=[7.0]))
        wait_for(lambda: got["a"][-1] == 7.0, what="a message after the failing one")
        assert rec.errors == 1
    finally:
        rec.destroy()
        talker.destroy_node()
        node.destroy_node()
    assert rec._thread is None and rec.subs == [], "the thread ended and the subscriptions were released"


def test_the_probe_spins_on_after_a_callback_raises(ros):
    """Bug: the probe's executor thread (the tests' and the demo's window on the nodes) ended on the
    first exception out of spin_once, and the probe went deaf in silence: a test then waited out its
    whole timeout for a state it had stopped hearing.  A callback that raises once is counted
    (spin_errors) and a message after it is still handled."""
    from std_msgs.msg import String
    from robot_dynamics.nodes.probe import Probe
    probe = Probe(joints=["j1"], name="spin_on_probe")
    talker = rclpy.create_node("spin_on_talker")
    got = []

    def on_msg(msg):
        if msg.data == "boom":
            raise RuntimeError("boom")
        got.append(msg.data)

    probe.create_subscription(String, "/spin_on", on_msg, 10)
    probe.start()
    try:
        pub = talker.create_publisher(String, "/spin_on", 10)
        wait_for(lambda: pub.get_subscription_count() > 0, what="the probe's subscription matched")
        # (re)published until seen: a volatile message right after matching can be lost
        wait_for(lambda: probe.spin_errors >= 1, what="the callback's exception counted", poll=0.05,
                 every=lambda: probe.spin_errors == 0 and pub.publish(String(data="boom")))
        wait_for(lambda: "after" in got, what="a message after the failing one", poll=0.05,
                 every=lambda: pub.publish(String(data="after")))
        assert probe._thread.is_alive()
    finally:
        probe.stop()
        probe.destroy_node()
        talker.destroy_node()


def test_take_all_serves_a_topic_behind_a_flood(ctx):
    """A topic that comes faster than its handler runs (a 1 kHz state on a loaded host) does not starve
    the others: a message on a second topic is handed over while the flood goes on (the flood stops
    when it is, or after 30 s)."""
    from robot_dynamics.nodes.control_path import TakeAll
    node = rclpy.create_node("taf_node", context=ctx)
    talker = rclpy.create_node("taf_talker", context=ctx)
    flooding = threading.Event()
    got_b = []

    def on_a(msg):
        time.sleep(2e-3)                                   # slower than the flood below

    rec = TakeAll(node, [(TakeSubscription(node, Float64MultiArray, "/taf_a", 50), on_a),
                         (TakeSubscription(node, Float64MultiArray, "/taf_b", 10),
                          lambda m: got_b.append(flooding.is_set()))], name="taf_test").start()
    pa = talker.create_publisher(Float64MultiArray, "/taf_a", 50)
    pb = talker.create_publisher(Float64MultiArray, "/taf_b", 10)

    def flood():
        flooding.set()
        t_end = time.monotonic() + 30.0
        while not got_b and time.monotonic() < t_end:
            for _ in range(20):
                pa.publish(Float64MultiArray(data=[1.0]))
            time.sleep(2e-3)                               # ~10 messages per ms
        flooding.clear()
    th = threading.Thread(target=flood, daemon=True)
    try:
        wait_for(lambda: pa.get_subscription_count() > 0 and pb.get_subscription_count() > 0,
                 what="both subscriptions matched")
        th.start()
        wait_for(flooding.is_set, what="the flood started")
        pb.publish(Float64MultiArray(data=[2.0]))
        wait_for(lambda: got_b, timeout=60.0, what="the second topic's message")
        assert got_b == [True], "handed over only after the flood ended"
    finally:
        flooding.clear()
        th.join(40)
        rec.destroy()
        talker.destroy_node()
        node.destroy_node()


# ------------------------------------------------------------------------------------------------ the node at 1 kHz
class Stream:
    """Joint states at `rate` Hz from a thread (absolute deadlines) at q = `q` (settable)."""

    def __init__(self, rig, rate=1000.0):
        self.rig, self.period = rig, 1.0 / rate
        self.q = Q0.copy()
        self.sent = 0
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        msg = self.rig.js(ARM, self.q)
        t0 = time.monotonic()
        k = 0
        while not self._stop.is_set():
            k += 1
            msg.position = [float(x) for x in self.q]
            self.rig.js_pub.publish(msg)
            self.sent += 1
            d = t0 + k * self.period - time.monotonic()
            if d > 0:
                time.sleep(d)
            elif d < -0.05:                                # far behind (a loaded host): re-anchor
                t0, k = time.monotonic(), 0

    def start(self):
        self._th.start()
        return self

    def stop(self):
        self._stop.set()
        self._th.join(10)


def _joint_impedance_oracle(k, q_ref, q):
    """tau = K (q_ref - q) + g(q) at v = 0 (d_gains given: no M-dependent damping), model order =
    ARM order here; g from Pinocchio on the Panda the test loads itself."""
    m = Model.from_robot("panda")
    g = PinocchioBackend(m).gravity(np.asarray(q, dtype=float)).copy()
    return np.asarray(k) * (np.asarray(q_ref) - np.asarray(q)) + g


def test_parameter_change_mid_stream_applies_whole(rig):
    """Every command is the law with the old gains or with the new ones, never a mix. The hold bound
    is off: on a loaded host a late state (7 ms in a hog run) rightly lowers joint 1's 300 N m/rad,
    and the command is then neither oracle's (the bound has its own tests, test_hold_bound.py)."""
    k_old, k_new = [100.0] * 7, [300.0, 250.0, 200.0, 150.0, 60.0, 40.0, 20.0]
    node = rig.controller(controller="joint_impedance", watchdog_timeout=0.5, torque_rate_limit=1e9,
                          ramp_time=0.0, hold_bound=False, **{"joint_impedance.k_gains": k_old,
                                            "joint_impedance.d_gains": [1.0] * 7})
    s = Stream(rig).start()
    try:
        wait_for(lambda: node.c.loop.supervisor.watchdog == "ok" and rig.monitor.n() > 50, what="control on the stream")
        q_ref = Q0                                         # the state held at activation: the stream's
        s.q = Q0 + np.array([0.02, -0.03, 0.01, 0.04, -0.02, 0.03, -0.01])
        want_old = _joint_impedance_oracle(k_old, q_ref, s.q)
        want_new = _joint_impedance_oracle(k_new, q_ref, s.q)
        wait_for(lambda: np.allclose(rig.monitor.since(rig.monitor.n() - 1)[0]["cmd"], want_old, atol=1e-9),
                 what="the law with the old gains at the new q")
        k0 = rig.monitor.n()
        pc = rig.param_client()
        res = rig.set_params(pc, [Parameter("joint_impedance.k_gains", value=k_new)])
        assert res[0].successful, res[0].reason
        wait_for(lambda: any(np.allclose(r["cmd"], want_new, atol=1e-9) for r in rig.monitor.since(k0)),
                 what="a command with the new gains")
        time.sleep(0.2)                                    # more steps after the change, at 1 kHz
    finally:
        s.stop()
    recs = [r for r in rig.monitor.since(k0) if not r["safe"]]
    kinds = []
    for r in recs:
        if np.allclose(r["cmd"], want_old, atol=1e-9):
            kinds.append("old")
        elif np.allclose(r["cmd"], want_new, atol=1e-9):
            kinds.append("new")
        else:
            kinds.append(f"neither: {r['cmd'].tolist()}")
    assert all(k in ("old", "new") for k in kinds), [k for k in kinds if k not in ("old", "new")][:3]
    first_new = kinds.index("new")
    assert "old" not in kinds[first_new:], "an old-gains command after a new-gains one"
    assert len(kinds) - first_new > 20, "steps went on after the change"
    rig.assert_invariants()
    assert not [k for k in node.counts if k.startswith("errors.")]


def test_watchdog_and_lifecycle_mid_stream(rig):
    from lifecycle_msgs.msg import Transition
    node = rig.controller(controller="joint_impedance", watchdog_timeout=0.1, safe_command="gravity",
                          torque_rate_limit=200.0, ramp_time=0.2, **{"joint_impedance.k_gains": [200.0]})
    s = Stream(rig).start()
    try:
        wait_for(lambda: node.c.loop.supervisor.watchdog == "ok" and rig.monitor.n() > 100, what="control on the stream")
        # the stream stops: the watchdog trips, the safe command ramps and is held
        s.stop()
        wait_for(lambda: node.c.loop.supervisor.watchdog == "tripped", what="the watchdog tripped")
        wait_for(lambda: node.c.output.safe_reached, what="the safe ramp reaching g(q)")
        assert node.counts["watchdog_trips"] >= 1
        # it resumes: filtered commands again, no jump (the monitor checks every command)
        s = Stream(rig).start()
        k0 = rig.monitor.n()
        wait_for(lambda: sum(not r["safe"] for r in rig.monitor.since(k0)) > 100, what="control resumed")
        # deactivate / activate in the middle of the stream
        for _ in range(2):
            assert rig.change_state(Transition.TRANSITION_DEACTIVATE)
            assert node.c.output.safe_reached and rig.monitor.since(rig.monitor.n() - 1)[0]["safe"]
            n_inactive = rig.monitor.n()
            time.sleep(0.1)                                # states keep coming: nothing is sent
            assert rig.monitor.n() == n_inactive, "commands while inactive"
            assert rig.change_state(Transition.TRANSITION_ACTIVATE)
            k1 = rig.monitor.n()
            wait_for(lambda: sum(not r["safe"] for r in rig.monitor.since(k1)) > 50, what="active again")
    finally:
        s.stop()
    rig.assert_invariants()
    assert not [k for k in node.counts if k.startswith("errors.")]
    d = node.c.path.stats()
    assert d["errors"] == 0 and d["messages"] > 0


# ------------------------------------------------------------------------------------------------ a queued burst
def _pin_gravity_panda(q_arm):
    """g(q) of the Panda's 7 arm joints from Pinocchio on the URDF (fingers at 0, as the node's model
    locks them): the oracle, independent of the package's model loader and backends."""
    import pinocchio as pin
    from robot_dynamics.dynamics import robots
    pm = pin.buildModelFromUrdf(str(robots.robot_urdf_path("panda")))
    q = pin.neutral(pm)
    for name, x in zip(ARM, q_arm):
        q[pm.joints[pm.getJointId(name)].idx_q] = x
    g = pin.computeGeneralizedGravity(pm, pm.createData(), q)
    return np.array([g[pm.joints[pm.getJointId(name)].idx_v] for name in ARM])


def test_the_node_steps_on_the_newest_state_of_a_queued_burst(rig):
    """Joint states that queue while the control thread is busy are taken together at its next
    wake-up; the node must step on the newest of them (the older ones are stale states), not on the
    oldest.  Deterministic: the path's handler is held on a first state P (a gate around it, the
    node's own handler inside) while a burst B1..B5 of distinct q is published into the reliable,
    depth-10 subscription (in-process delivery: queued when publish returns; acknowledged too); then
    the gate opens and the thread takes B1..B5 in one batch.  The commands after P must be exactly
    one for the burst, equal to Pinocchio's g(q_B5) (gravity compensation, rate limit and start ramp
    out of the way), and unequal to g(q_B1) by far more than the tolerance."""
    node = rig.controller(controller="gravity_compensation", qos_reliability="reliable", qos_depth=10,
                          watchdog_timeout=30.0, torque_rate_limit=1e9, ramp_time=0.0)
    pub = rig.h.create_publisher(type(rig.js(ARM, Q0)), rig.js_topic, 10)     # reliable, depth 10
    wait_for(lambda: pub.get_subscription_count() > 0, what="the node's joint-state subscription matched")
    path = node.c.path
    inner = path.on_message
    gate, held = threading.Event(), threading.Event()

    def gated(msg, now, last):                      # holds the control thread on its first message
        held.set()
        gate.wait(60.0)
        return inner(msg, now, last)

    path.on_message = gated
    try:
        qs = [Q0 + np.array([0.0, 0.15 * k, 0.0, 0.2 * k, 0.0, -0.1 * k, 0.0]) for k in range(6)]
        p, burst = qs[0], qs[1:]
        m0, s0, k0 = path.messages, path.superseded, rig.monitor.n()
        pub.publish(rig.js(ARM, p))
        wait_for(held.is_set, what="the control thread holding P")
        for q in burst:
            pub.publish(rig.js(ARM, q))
        assert pub.wait_for_all_acked(Duration(seconds=30.0)), "the burst acknowledged"
        gate.set()
        wait_for(lambda: path.messages >= m0 + 2, what="P and the burst handled")
        wait_for(lambda: sum(not r["safe"] for r in rig.monitor.since(k0)) >= 2, what="two control steps")
    finally:
        gate.set()
        path.on_message = inner
    assert (path.messages - m0, path.superseded - s0) == (2, len(burst) - 1), \
        "P alone, then the burst of 5 in one batch (the test's premise)"
    steps = [r["cmd"] for r in rig.monitor.since(k0) if not r["safe"]]
    assert len(steps) == 2, f"one step for P, one for the whole burst: {len(steps)}"
    g_p, g_newest, g_oldest = (_pin_gravity_panda(q) for q in (p, burst[-1], burst[0]))
    assert np.max(np.abs(g_newest - g_oldest)) > 1.0                      # the premise: far apart
    np.testing.assert_allclose(steps[0], g_p, atol=1e-6, err_msg="the step on P: g(q_P)")
    np.testing.assert_allclose(steps[1], g_newest, atol=1e-6,
                               err_msg=f"the burst's step is not g(newest q); g(oldest q) = {g_oldest.tolist()}")
    rig.assert_invariants()
    assert not [k for k in node.counts if k.startswith("errors.")]
