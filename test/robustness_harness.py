"""Shared harness of the robustness suite (test_robustness_inputs.py, test_robustness_faults.py).

- `case(category)`: a context manager counting one attacked case per category and its failure; the
  counts are printed at the end of the session by `pytest_terminal_summary` (this module is a pytest
  plugin, registered from conftest.py), e.g. "robustness: joint_state 240 cases, 0 failures; ...".
- `Rig`: one rclpy context with an in-process TorqueControllerNode (Panda arm, unique topics) and a
  tester node, spun by a SingleThreadedExecutor in a thread.
- `NodeMonitor`: wraps the node's `_step` / `_publish` and checks, on every command the node sends,
  finite, within the effort limits, and within the rate limit of the command sent before it
  (|tau_k - tau_{k-1}| <= rate_limit * dt_k, dt_k as the node computes it from its step clock); the
  safe command too, which ramps from the last command at the rate limit, never more than rate_limit x
  one control period per message.  dt_k is the time from the end of the previous publish to the end of
  this one (an upper bound of the node's own dt), capped as the node caps it.
- `CommandRecorder` (inside Rig): the same invariants on what arrives over DDS: every
  Float64MultiArray on the command topic is finite, of length n and within the limits; every
  ~/state message (effort = the command, position NaN while the safe command is out) is within
  rate_limit * (stamp_k - stamp_{k-1}) + rate_limit * STAMP_SLACK of the one before (stamps are taken
  at publish, the node's dt at the start of the callback: STAMP_SLACK covers that latency).
- The node's log is read from /rosout (what it really emitted, after throttling) to count rejection
  lines per episode.
No timed assertions: every wait is a bounded poll with a generous timeout.
"""
import math
import threading
import time
import uuid
from contextlib import contextmanager

import numpy as np
import pytest

# ------------------------------------------------------------------------------------------------
# summary
# ------------------------------------------------------------------------------------------------
SUMMARY = {}          # category -> [cases, failures]
_SUMMARY_LOCK = threading.Lock()


def count(category, cases=1, failures=0):
    with _SUMMARY_LOCK:
        c = SUMMARY.setdefault(category, [0, 0])
        c[0] += cases
        c[1] += failures


@contextmanager
def case(category):
    """One attacked case: counted; an exception (assertion) inside counts as a failure and re-raises."""
    try:
        yield
    except Exception:                  # a failure; BaseException (hypothesis' StopTest, ...) is not a case
        count(category, 1, 1)
        raise
    count(category, 1, 0)


def summary_line():
    with _SUMMARY_LOCK:
        items = sorted(SUMMARY.items())
    if not items:
        return ""
    return "robustness: " + "; ".join(f"{k} {c} cases, {f} failures" for k, (c, f) in items)


def hand_over_counts(session):
    """Under pytest-xdist (-n N) a worker hands its counts to the controller (workeroutput; called from
    conftest's pytest_sessionfinish)."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        with _SUMMARY_LOCK:
            out["robustness"] = {k: list(c) for k, c in SUMMARY.items()}


def pytest_testnodedown(node, error):
    """The controller adds up what each xdist worker counted (a hook of pytest-xdist's)."""
    for k, (c, f) in getattr(node, "workeroutput", {}).get("robustness", {}).items():
        count(k, c, f)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    line = summary_line()
    if line:
        terminalreporter.write_sep("-", "robustness summary")
        terminalreporter.write_line(line)


# ------------------------------------------------------------------------------------------------
# waits
# ------------------------------------------------------------------------------------------------
TIMEOUT = 30.0            # generous bound on every wait (never reached when things work)
STAMP_SLACK = 25e-3       # s: publish-time stamps vs the node's callback-start clock (GIL stalls under load)
ABS_TOL = 1e-9            # N m


def wait_for(pred, timeout=TIMEOUT, what="condition", every=None, poll=0.005):
    """Poll pred() until true (calling every() between polls, e.g. to re-publish); fail after timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = pred()
        if r:
            return r
        if every is not None:
            every()
        time.sleep(poll)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def poll_until(pred, timeout, poll=0.05, check=None):
    """Poll pred() until true (check() between polls, e.g. that the processes under test live): True,
    or False on timeout.  Unlike Probe.wait_for it holds no lock, so pred may call services."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        if check is not None:
            check()
        time.sleep(poll)
    return False


NO_RESPONSE = "no response"
LOST_START = "started by the call whose response was lost"


def call_trigger(cli, name, timeout=TIMEOUT, check=None, lost_ok=False):
    """One std_srvs/Trigger call on the client `cli` (spun elsewhere): (success, message); fails when
    the service is missing or does not answer within timeout (lost_ok: (False, "<name>: no
    response") instead)."""
    from std_srvs.srv import Trigger
    assert cli.wait_for_service(timeout_sec=TIMEOUT), f"no {name} service"
    fut = cli.call_async(Trigger.Request())
    if not poll_until(fut.done, timeout, 0.01, check):
        assert lost_ok, f"{name}: {NO_RESPONSE}"
        return False, f"{name}: {NO_RESPONSE}"
    r = fut.result()
    return r.success, r.message


def started_if_lost(ok, msg, lost):
    """A start's answer after an earlier call of it went unanswered (`lost`): "already running" says
    the unanswered call started the run (its response lost: seen in loaded suite runs, rmw_fastrtps
    dropping a response whose reader it has not matched yet, though the request ran)."""
    if not ok and lost and "already running" in msg:
        return True, f"{LOST_START} ({msg})"
    return ok, msg


def start_trigger(cli, name, check=None, lost_after=10.0):
    """A Trigger that starts a run (identify_payload): (success, message); a response that has not
    come after `lost_after` s is asked for again (started_if_lost)."""
    ok, msg = call_trigger(cli, name, lost_after, check, lost_ok=True)
    if ok or not msg.endswith(NO_RESPONSE):
        return ok, msg
    print(f"{name}: no response in {lost_after} s; asked again", flush=True)
    return started_if_lost(*call_trigger(cli, name, check=check), lost=True)


def run_identification(call, timeout, check=None, again_on_effort_limit=2, poll=1.0):
    """An identification run through its Trigger services, started again after an effort-limit abort
    (`again_on_effort_limit` times, printed), as a user would.  call(srv) -> (success, message) for
    srv in identify_dynamics / identify_dynamics_status, (False, "... no response") when none came;
    check() between polls (the processes live); a start whose response was lost: started_if_lost.
    Returns (ok, the status message); AssertionError when a run does not start from the measured
    effort.  Why the restarts: on a loaded host a late control step (the plant stepping on with the
    last torque: franky-sim, or a sim node whose states stall) puts the excitation's reference ahead
    of the arm, the law's command reaches an effort limit and the run aborts, its safe answer (seen
    in loaded suite runs: franky-sim joints 1 or 3 at 87 N m in 3 of 8 runs, the sim node's joint 5
    at 32 N m of its 12 in 1 of 1)."""
    t_end = time.monotonic() + timeout
    for attempt in range(again_on_effort_limit + 1):
        lost = False
        while True:                              # refused while an aborted run moves the arm back
            ok, msg = started_if_lost(*call("identify_dynamics"), lost)
            lost = lost or msg.endswith(NO_RESPONSE)
            if ok or time.monotonic() > t_end:
                break
            if check is not None:
                check()
            time.sleep(poll)
        assert ok, msg
        assert "measured effort" in msg or msg.startswith(LOST_START), msg
        while True:                              # the run: excitation, validation, the solve
            if check is not None:
                check()
            ok, msg = call("identify_dynamics_status")
            if ok or "aborted" in msg or "failed" in msg or time.monotonic() > t_end:
                break
            time.sleep(poll)
        if ok or "effort limit" not in msg or attempt == again_on_effort_limit:
            return ok, msg
        print(f"identification: {msg}; started again", flush=True)


class SpinThread:
    """An executor spun in a thread that stop() ends before the executor is shut down.  A rig that
    called `executor.shutdown()` while `executor.spin()` ran in its thread raced rclpy: the shutdown
    destroyed the guard condition the spinning thread was about to wait on (`InvalidHandle`, or
    `gc.handle` on None: a PytestUnhandledThreadExceptionWarning at teardown, seen in loaded runs)."""

    def __init__(self, executor, period=0.05):
        self.executor, self.period = executor, period
        self._stop = threading.Event()
        self._free = threading.Event()                 # cleared while paused(): the loop waits at the top
        self._free.set()
        self._turn = threading.Lock()                  # held through each turn
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            self._free.wait()
            with self._turn:
                if self._stop.is_set():
                    break
                self.executor.spin_once(timeout_sec=self.period)

    @contextmanager
    def paused(self):
        """Holds the loop between two turns: the turn in progress finishes (at most `period` waiting,
        the loop waits at its top until the block ends).  A test that drives a lifecycle transition
        which destroys entities (cleanup, shutdown) from its own thread does it here: rclpy's executor
        collects the node's waitables, then adds them to its wait set, and one destroyed in between
        raised out of spin ("action server pointer is invalid", InvalidHandle on an event handler;
        ros2/rclpy#1385).  A node spun by one executor, as ours are, takes its transitions in that
        thread and never meets it.  Not from a callback of this executor (it would wait for itself),
        and nothing inside may wait for one (nothing is spun meanwhile) or call stop()."""
        self._free.clear()
        try:
            with self._turn:
                yield
        finally:
            self._free.set()

    def stop(self, timeout=10.0):
        """Ends the loop, waits for it (a callback in progress finishes), then shuts the executor down."""
        self._stop.set()
        self._free.set()
        self.thread.join(timeout)
        self.executor.shutdown(timeout_sec=timeout)


def call_service(node, srv_type, name, request, timeout=TIMEOUT):
    """Call a service from `node` (spun elsewhere) and return the response; fail after timeout."""
    cli = node.create_client(srv_type, name)
    try:
        assert cli.wait_for_service(timeout_sec=timeout), f"service {name} not available"
        fut = cli.call_async(request)
        wait_for(fut.done, timeout, f"{name} response")
        return fut.result()
    finally:
        node.destroy_client(cli)


# ------------------------------------------------------------------------------------------------
# invariants on the node's own sends (in-process)
# ------------------------------------------------------------------------------------------------
class InvariantError(AssertionError):
    pass


class NodeMonitor:
    """Instruments a TorqueControllerNode (in this process) and checks every command it sends.

    records: list of dicts (t = the node's step clock, cmd in `joints` order, safe, dt, limit, rate).
    violations: list of strings (checked by `assert_ok`)."""

    def __init__(self, node):
        self.node = node
        self.lock = threading.Lock()
        self.records = []
        self.violations = []
        self._lp, self._cap, self._first = None, 0.1, 0.001   # see _record
        self._prev = None                        # the last record (any kind)
        self._activated = False
        orig_step, orig_publish = node._step, node._publish

        orig_safe = node._publish_safe

        def step(now):
            c = node.c
            with self.lock:
                self._activated = c.cycle.last_step is None          # the first step after activation
            self._lp, self._cap, self._first = c.cycle.last_pub, 0.1, 0.001
            return orig_step(now)

        def publish_safe():
            c = node.c
            if c is not None:
                self._lp, self._cap, self._first = c.cycle.last_pub, c.safe_period, c.safe_period
            return orig_safe()

        def publish(tau, safe=False):
            r = orig_publish(tau, safe)
            try:
                self._record(safe)
            except Exception as e:               # noqa: BLE001 (never break the node under test)
                with self.lock:
                    self.violations.append(f"monitor: {type(e).__name__}: {e}")
            return r

        node._step, node._publish, node._publish_safe = step, publish, publish_safe

    def _record(self, safe):
        c = self.node.c
        perm = c.perm
        cmd = c.cmd_np.copy()
        limit = np.asarray(c.safety.limit, dtype=float)[perm]
        rate = np.broadcast_to(np.asarray(c.safety.rate, dtype=float), (c.n,))[perm]
        t = time.monotonic()
        # the time between the end of the previous publish (the node's c.last_pub, read before this
        # step) and now, after this publish: an upper bound of the node's rate-limit dt, and the real
        # interval between the two commands; capped as the node caps it (one period for the safe ramp)
        dt = self._first if self._lp is None else min(t - self._lp, self._cap)
        rec = dict(t=t, cmd=cmd, safe=safe, dt=dt, limit=limit.copy(), rate=rate.copy())
        v = []
        if cmd.shape != (c.n,):
            v.append(f"command of length {cmd.size}, expected {c.n}")
        elif not np.all(np.isfinite(cmd)):
            v.append(f"non-finite command {cmd.tolist()}")
        elif np.any(np.abs(cmd) > limit * (1 + 1e-12) + ABS_TOL):
            v.append(f"command {cmd.tolist()} beyond the effort limits {limit.tolist()}")
        with self.lock:
            activated, self._activated = self._activated, False
            prev = self._prev
            if cmd.shape == (c.n,) and np.all(np.isfinite(cmd)):
                before = np.zeros(c.n) if prev is None else prev["cmd"]
                same_params = prev is None or (np.array_equal(prev["limit"], limit)
                                               and np.array_equal(prev["rate"], rate))
                if same_params:
                    bound = rate * rec["dt"] * (1 + 1e-9) + ABS_TOL
                    jump = np.abs(cmd - before)
                    if np.any(jump > bound):
                        i = int(np.argmax(jump - bound))
                        v.append(f"torque jump {jump[i]:.6g} N m on joint {c.joints[i]} > rate limit "
                                 f"{rate[i]} x dt {rec['dt']:.6g} s (previous command "
                                 f"{'safe' if prev and prev['safe'] else 'filtered'}"
                                 f"{', first after activation' if activated else ''})")
            self.records.append(rec)
            self._prev = rec
            self.violations.extend(v)

    def n(self):
        with self.lock:
            return len(self.records)

    def since(self, k):
        with self.lock:
            return list(self.records[k:])

    def assert_ok(self):
        with self.lock:
            v = list(self.violations)
        if v:
            raise InvariantError(f"{len(v)} invariant violation(s), first: " + "; ".join(v[:5]))


# ------------------------------------------------------------------------------------------------
# the rig: an in-process controller + a tester node over DDS
# ------------------------------------------------------------------------------------------------
class Rig:
    """One rclpy context: a controller (built by `controller(**params)`), a tester node with the
    command recorder, the /rosout log reader and /diagnostics; spun in a thread."""

    def __init__(self):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rcl_interfaces.msg import Log
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        self.rclpy = rclpy
        self.ns = "r" + uuid.uuid4().hex[:10]
        self.js_topic = f"/{self.ns}/joint_states"
        self.cmd_topic = f"/{self.ns}/commands"
        self.wrench_topic = f"/{self.ns}/wrench"
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.h = rclpy.create_node(f"{self.ns}_tester", context=self.ctx)
        self.ex.add_node(self.h)
        self.lock = threading.Lock()
        self.cmds = []                        # (np.array) as received
        self.cmd_violations = []
        self.states = []                      # (stamp, effort, safe)
        self.state_violations = []
        self.logs = []                        # (level, msg) of the controller node, from /rosout
        self.diag = {}
        self.node = None
        self.monitor = None
        self.limit = None                     # effort limits (`joints` order) for the DDS checks
        self.rate = None
        self.h.create_subscription(Float64MultiArray, self.cmd_topic, self._on_cmd, 10000)
        self.h.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 100)
        rosout_qos = QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE,
                                durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.h.create_subscription(Log, "/rosout", self._on_log, rosout_qos)
        self.js_pub = self.h.create_publisher(JointState, self.js_topic, 10)
        self._state_sub = None
        self._keep = []                       # parameter clients (see param_client)
        self.spinner = SpinThread(self.ex)

    # ---- the controller ----
    def controller(self, name="tc", **params):
        from rclpy.parameter import Parameter
        from sensor_msgs.msg import JointState

        from robot_dynamics.nodes.controller import TorqueControllerNode
        from robot_dynamics.dynamics import robots
        base = dict(robot_description=robots.robot_urdf_path("panda").read_text(), joints=ARM,
                    joint_states_topic=self.js_topic, command_topic=self.cmd_topic,
                    wrench_topic=self.wrench_topic, diagnostics_period=0.2,
                    # one log line per episode (the suites count them); the throttled default is
                    # tested in test_control_loop.py and test_controller_node.py
                    log_throttle_period=0.0)
        base.update(params)
        node = TorqueControllerNode(f"{self.ns}_{name}", context=self.ctx, parameter_overrides=[
            Parameter(k, value=v) for k, v in base.items()])
        self.monitor = NodeMonitor(node)
        self.node = node
        self._state_sub = self.h.create_subscription(JointState, f"/{node.get_name()}/state",
                                                     self._on_state, 10000)
        self.ex.add_node(node)
        wait_for(lambda: node.active, what="controller active (autostart)")
        # the DDS-side limits from the parameters set here and the URDF text (an oracle independent
        # of the node): effort_limits (or the URDF's effort by joint name) x effort_scale, and
        # torque_rate_limit; the node's own values must equal them
        joints = list(base["joints"])
        el = base.get("effort_limits")
        if el:
            el = np.broadcast_to(np.asarray(el, dtype=float), (len(joints),))
        else:
            urdf = urdf_effort_limits(base["robot_description"])
            el = np.array([urdf[j] for j in joints])
        self.limit = el * float(base.get("effort_scale", 1.0))
        self.rate = np.full(len(joints), float(base.get("torque_rate_limit", 1000.0)))
        c = node.c
        np.testing.assert_allclose(np.asarray(c.safety.limit)[c.perm], self.limit, rtol=1e-12,
                                   err_msg="the node's effort limits vs the URDF x effort_scale")
        np.testing.assert_allclose(np.broadcast_to(np.asarray(c.safety.rate, dtype=float), (c.n,))[c.perm],
                                   self.rate, rtol=1e-12, err_msg="the node's rate limit vs torque_rate_limit")
        return node

    def close(self):
        self.spinner.stop()
        for n in ([self.node] if self.node else []) + [self.h]:
            try:
                n.destroy_node()
            except Exception:                     # noqa: BLE001
                pass
        self.rclpy.try_shutdown(context=self.ctx)

    # ---- receivers (the DDS-side checks) ----
    def _on_cmd(self, msg):
        a = np.array(msg.data)
        with self.lock:
            self.cmds.append(a)
            lim = self.limit
            if lim is None:
                return
            if a.shape != lim.shape:
                self.cmd_violations.append(f"command of length {a.size}")
            elif not np.all(np.isfinite(a)):
                self.cmd_violations.append(f"non-finite command {a.tolist()}")
            elif np.any(np.abs(a) > lim * (1 + 1e-12) + ABS_TOL):
                self.cmd_violations.append(f"command {a.tolist()} beyond the limits {lim.tolist()}")

    def _on_state(self, msg):
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        eff = np.array(msg.effort)
        pos = np.array(msg.position)
        safe = pos.size > 0 and bool(np.all(np.isnan(pos)))
        with self.lock:
            if self.states and self.rate is not None:
                t0, e0, _ = self.states[-1]
                if e0.shape == eff.shape:
                    bound = self.rate * (max(stamp - t0, 0.0) + STAMP_SLACK) + ABS_TOL
                    jump = np.abs(eff - e0)
                    if np.any(jump > bound):
                        self.state_violations.append(
                            f"~/state effort jump {jump.max():.6g} N m > {bound[np.argmax(jump - bound)]:.6g} "
                            f"(stamps {t0:.6f} -> {stamp:.6f})")
            self.states.append((stamp, eff, safe))

    def _on_log(self, msg):
        if self.node is not None and msg.name == self.node.get_logger().name:
            with self.lock:
                self.logs.append((msg.level, msg.msg))

    def _on_diag(self, msg):
        for st in msg.status:
            with self.lock:
                self.diag[st.name.split(":")[0]] = {kv.key: kv.value for kv in st.values}

    # ---- checks ----
    def assert_invariants(self):
        self.monitor.assert_ok()
        with self.lock:
            v = self.cmd_violations + self.state_violations
        if v:
            raise InvariantError(f"{len(v)} DDS-side violation(s), first: " + "; ".join(v[:5]))

    def log_count(self, text):
        with self.lock:
            return sum(1 for _, m in self.logs if text in m)

    def diagnostics(self):
        with self.lock:
            return dict(self.diag.get(self.node.get_name(), {}))

    # ---- publishing ----
    def pub(self, msg_type, topic):
        """A cached publisher (never destroyed while the executor spins: rclpy races on that)."""
        if not hasattr(self, "_pubs"):
            self._pubs = {}
        if topic not in self._pubs:
            self._pubs[topic] = self.h.create_publisher(msg_type, topic, 10)
            wait_for(lambda: self._pubs[topic].get_subscription_count() > 0, what=f"a subscriber on {topic}")
        return self._pubs[topic]

    def js(self, names, q, v=None, effort=None, stamp=None):
        from sensor_msgs.msg import JointState
        m = JointState(name=list(names), position=[float(x) for x in q],
                       velocity=[float(x) for x in (np.zeros(len(q)) if v is None else v)],
                       effort=[float(x) for x in (effort or [])])
        if stamp is not None:
            m.header.stamp.sec, m.header.stamp.nanosec = int(stamp[0]), int(stamp[1])
        return m

    def send(self, msg, pub=None, timeout=TIMEOUT):
        """Publish one message that the node answers with exactly one command (a joint state), and
        wait until the node has sent a command after it (re-publishing every 0.2 s if lost)."""
        pub = pub or self.js_pub
        k0 = self.monitor.n()
        state = {"t": time.monotonic()}
        pub.publish(msg)

        def again():
            if time.monotonic() - state["t"] > 0.2:
                state["t"] = time.monotonic()
                pub.publish(msg)
        wait_for(lambda: self.monitor.n() > k0, timeout, "a command after the message", again)
        return self.monitor.since(k0)

    def valid_command(self, q=None, timeout=TIMEOUT):
        """Valid joint states until a filtered (non-safe) command comes back: the node still controls."""
        q = Q0 if q is None else q
        k0 = self.monitor.n()
        msg = self.js(ARM, q)

        def got():
            return any(not r["safe"] for r in self.monitor.since(k0))
        wait_for(got, timeout, "a filtered command for a valid joint state",
                 lambda: (self.js_pub.publish(msg), time.sleep(0.005)))
        return [r for r in self.monitor.since(k0) if not r["safe"]][-1]

    # ---- services ----
    def call(self, srv_type, name, request, timeout=TIMEOUT):
        return call_service(self.h, srv_type, name, request, timeout)

    def lifecycle_state(self):
        from lifecycle_msgs.srv import GetState
        return self.call(GetState, f"/{self.node.get_name()}/get_state", GetState.Request()).current_state.label

    def change_state(self, transition_id):
        from lifecycle_msgs.srv import ChangeState
        req = ChangeState.Request()
        req.transition.id = transition_id
        return self.call(ChangeState, f"/{self.node.get_name()}/change_state", req).success

    def param_client(self):
        from rclpy.parameter_client import AsyncParameterClient
        pc = AsyncParameterClient(self.h, self.node.get_name())
        self._keep.append(pc)                 # kept until close(): a client collected while the
        assert pc.wait_for_services(timeout_sec=TIMEOUT)     # executor spins races on its handles
        return pc

    def set_params(self, pc, params):
        fut = pc.set_parameters(params)
        wait_for(fut.done, TIMEOUT, "set_parameters")
        return fut.result().results

    def get_params(self, pc, names):
        fut = pc.get_parameters(names)
        wait_for(fut.done, TIMEOUT, "get_parameters")
        return [self.rclpy.parameter.parameter_value_to_python(v) for v in fut.result().values]

    def alive(self):
        """The node answers: lifecycle get_state is 'active' and a valid state gives a filtered command."""
        assert self.lifecycle_state() == "active"
        self.valid_command()


@pytest.fixture
def rig():
    """A Rig per test, closed at the end (import it into a test module to use it)."""
    r = Rig()
    try:
        yield r
    finally:
        r.close()


def urdf_effort_limits(urdf_text):
    """{joint name: effort limit} read from the URDF text (ElementTree, not the model loader)."""
    import xml.etree.ElementTree as ET
    out = {}
    for j in ET.fromstring(urdf_text).iter("joint"):
        lim = j.find("limit")
        if lim is not None and lim.get("effort") is not None:
            out[j.get("name")] = float(lim.get("effort"))
    return out


ARM = [f"panda_joint{i}" for i in range(1, 8)]
Q0 = np.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.5, 0.3])
NAN, INF = math.nan, math.inf
