"""Issue 42 over DDS: the shipped sim launch files, swept with the targets a new user may send.

For each shipped robot (panda, ur5e, kinova) with each law that takes a target (cartesian_impedance,
and joint_impedance and computed_torque, whose ~/target_pose goes through the inverse kinematics),
the real `ros2 launch robot_dynamics sim.launch.py robot:=R
controller:=L` runs (test_ros2_tools.Launch: its own session, this run's ROS_DOMAIN_ID).  Once the
controller is active and the arm held (events: the controller's /diagnostics OK "active", the sim's
brakes off, the plant at rest), targets go in sequence on /torque_controller/target_pose, each
delivered (the controller's accepted./rejected.target_pose count goes up on /diagnostics), and the
arm is let come to rest before the next:

- out of reach: (2, 0, 0.5) m;
- behind the base: the start TCP mirrored through the base's vertical axis (-x, -y, z);
- through the base: (0, 0, -0.2) m;
- at a singularity: the TCP of the straight-up pose SINGULAR[robot], the arm fully stretched along the
  shoulder's vertical (UR5: its shoulder and wrist offsets put it 0.19 m beside it).  That pose is the
  highest point the TCP reaches (a numerical maximisation of z over the joint limits found the same
  height to 1 mm), so it lies on the boundary of the reach, where the position Jacobian loses rank:
  the test checks with Pinocchio that its smallest singular value there is below 1e-4 (a target the
  arm can reach only at a singular configuration).  The orientation is that pose's.
Every other target keeps the start orientation.

Oracles, per target, over the joint states the sim (the plant) published from the target's delivery
until the arm is at rest (REST for REST_STATES states in a row):
- every |velocity| within the velocity limit the URDF's XML states (the /robot_description the sim
  publishes), or the controller's joint speed stop engaged (its /diagnostics count) and the arm at rest
  at the end (then ~/resume before the next target);
- every position within the URDF's limits + the sim's end-stop overshoot (test_sim.py STOP_OVERSHOOT);
- the launch's output has a WARN (or ERROR) line naming the cause, from the controller: out of reach
  (the out-of-reach target; the Cartesian law's reach bound or the IK's), "clipped" (a Cartesian
  target farther than max_pos_error / max_rot_error), "singular", "speed stop"; a joint law's target
  the IK solves within the limits is accepted with no warning, and then only bounded (it is approached
  by the law's quintic within the velocity limits): the table printed says which it was;
- /diagnostics carries a WARN (or ERROR) status of the controller after the target (for an accepted
  joint-law target: not required).
Watched fail with the shipped safety broken (each put in, run, reverted): panda cartesian_impedance with
max_pos_error = max_rot_error = 0 and safety.joint_speed_stop = 0 in a copied config (config:=): through
the base at 1.96 x the URDF velocity limit with no speed stop, and behind the base / at the singularity
no WARN naming the clipping; ur5e joint_impedance with ik.min_singular_value = 0: the singular target
accepted; the reach check removed from the package (References.beyond_reach): (2, 0, 0.5) accepted.
"""
import re
import threading
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from test_ros2_tools import Launch, assert_clean_exit  # noqa: E402  (skips the module without the tools)

rclpy = pytest.importorskip("rclpy")
pin = pytest.importorskip("pinocchio")

pytestmark = [pytest.mark.system, pytest.mark.slow]

# every shipped robot x every law that takes a target (gravity compensation takes none)
CASES = [(r, law) for law in ("cartesian_impedance", "joint_impedance", "computed_torque")
         for r in ("panda", "ur5e", "kinova")]
# the frame the law places: the Cartesian law's `frame`, the joint laws' IK frame (ik.frame unset in the
# shipped configs: the model's last frame, the same frame for these two robots)
FRAME = {"panda": "panda_hand_tcp", "ur5e": "tool0", "kinova": "j2s6s200_end_effector"}
# the straight-up pose (arm fully stretched, see the docstring)
SINGULAR = {"panda": [0.0, -0.255, 0.0, -0.467, 0.0, 2.957, 0.785],
            "ur5e": [0.0, -np.pi / 2, 0.0, -np.pi / 2, 0.0, 0.0],
            "kinova": [0.0, np.pi, np.pi, 0.0, np.pi, 0.0]}
TARGETS = ("out_of_reach", "behind_the_base", "through_the_base", "singularity")
WAIT = 120.0                # s: event waits on a loaded 2-core machine (start-up, delivery)
REST_WAIT = 60.0            # s: the arm at rest after a target
REST = 0.01                 # rad/s: every joint slower than this ...
REST_STATES = 300           # ... for this many joint states in a row: at rest
MOVING = 0.05               # rad/s: the arm has started to move toward an accepted target
ONSET_WAIT = 10.0           # s: ... at the latest this long after its delivery (else judged as it is)
RESENDS = 2                 # a target abandoned by a watchdog trip (a late joint state) is sent again
LIMIT_SLACK = 5e-3          # rad past a URDF position limit (test_sim.py STOP_OVERSHOOT)
OK, WARN = 0, 1
WATCHDOG_REFUSAL = "arrived while the watchdog was tripped"     # the controller's refusal: send it again
THROTTLE = 1.1              # s: log_throttle_period (1 s, its default: the shipped configs leave it) + margin
# a controller log line at WARN or ERROR
CTL_WARN = re.compile(r"^\[controller_node-\d+\] \[(WARN|ERROR)\] \[[\d.]+\] \[torque_controller\]: (.*)$", re.M)
CAUSE = {"out_of_reach": r"out of reach|not reach|unreachable|did not converge|not converged",
         "clipped": r"clipped", "singular": r"singular", "speed_stop": r"speed stop"}


def urdf_limits(urdf, joints):
    """(lower, upper, velocity) per joint from the URDF's XML (continuous: no position limits)."""
    lim = {}
    for j in ET.fromstring(urdf).findall("joint"):
        e = j.find("limit")
        if e is None:
            continue
        lo, hi = (float(e.get("lower", "-inf")), float(e.get("upper", "inf"))) \
            if j.get("type") in ("revolute", "prismatic") else (-np.inf, np.inf)
        lim[j.get("name")] = (lo, hi, float(e.get("velocity", "inf")))
    return np.array([[lim[n][k] for n in joints] for k in range(3)])


class Kinematics:
    """Pinocchio's forward kinematics of the URDF the sim publishes (the oracle, not the package's)."""

    def __init__(self, urdf, joints, frame):
        self.m = pin.buildModelFromXML(urdf)
        self.d = self.m.createData()
        self.fid = self.m.getFrameId(frame)
        assert self.fid < len(self.m.frames), frame
        self.idx = [self.m.getJointId(n) for n in joints]

    def _q(self, q):
        qp = pin.neutral(self.m)
        for jid, x in zip(self.idx, q):
            j = self.m.joints[jid]
            if j.nq == 2:                        # continuous: (cos, sin)
                qp[j.idx_q:j.idx_q + 2] = np.cos(x), np.sin(x)
            else:
                qp[j.idx_q] = x
        return qp

    def pose(self, q):
        qp = self._q(q)
        pin.framesForwardKinematics(self.m, self.d, qp)
        M = self.d.oMf[self.fid]
        return M.rotation.copy(), M.translation.copy()

    def position_singular_values(self, q):
        qp = self._q(q)
        J = pin.computeFrameJacobian(self.m, self.d, qp, self.fid, pin.LOCAL_WORLD_ALIGNED)
        cols = [self.m.joints[jid].idx_v for jid in self.idx]
        return np.linalg.svd(J[:3, cols], compute_uv=False)


def quat_xyzw(R):
    q = pin.Quaternion(np.asarray(R))
    return [q.x, q.y, q.z, q.w]


class Watch:
    """The plant's /joint_states (every one, taken on a thread of its own: control_path.TakeAll, the
    one 1 kHz topic recorded, so the test's own load stays small), /diagnostics (the controller's and
    the sim's statuses, with their levels), /robot_description (transient local), the controller's
    ~/target_pose and ~/resume; the rest spun in a thread of its own."""

    def __init__(self):
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PoseStamped
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String
        from std_srvs.srv import Trigger
        from robot_dynamics.nodes.control_path import TakeAll, TakeSubscription
        self.node = rclpy.create_node("launch_sweep_watch")
        self.lock = threading.Lock()
        self.ctl = []                 # (monotonic, level, message, {key: value})
        self.sim = {}
        self.urdf = None
        self.joints = None            # set once the URDF is in: the order of the recorded q, v
        self.js_log = []              # (monotonic receipt, q, v)
        self._recorder = TakeAll(self.node, [(TakeSubscription(self.node, JointState, "/joint_states",
                                                               QoSProfile(depth=50)), self._on_js)],
                                 name="sweep_js")
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        self._pose = PoseStamped
        self.pub_pose = self.node.create_publisher(PoseStamped, "/torque_controller/target_pose", 10)
        qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(String, "/robot_description", self._on_urdf, qos)
        self.resume_client = self.node.create_client(Trigger, "/torque_controller/resume")
        self._trigger = Trigger
        self._ex = SingleThreadedExecutor()
        self._ex.add_node(self.node)
        self._run = True
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        self._recorder.start()

    def _on_js(self, msg):
        now = time.monotonic()
        joints = self.joints
        if joints is None or len(msg.velocity) != len(msg.name):
            return
        idx = {n: i for i, n in enumerate(msg.name)}
        try:
            k = [idx[j] for j in joints]
        except KeyError:
            return
        q = np.array([msg.position[i] for i in k])
        v = np.array([msg.velocity[i] for i in k])
        with self.lock:
            self.js_log.append((now, q, v))

    def publish_pose(self, p, quat_xyzw):
        msg = self._pose()
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(x) for x in p)
        o = msg.pose.orientation
        o.x, o.y, o.z, o.w = (float(x) for x in quat_xyzw)
        self.pub_pose.publish(msg)

    def _spin(self):
        while self._run and rclpy.ok():
            self._ex.spin_once(timeout_sec=0.05)

    def _on_diag(self, msg):
        now = time.monotonic()
        for st in msg.status:
            kv = {x.key: x.value for x in st.values}
            lvl = st.level if isinstance(st.level, int) else int.from_bytes(st.level, "little")
            with self.lock:
                if st.name.startswith("torque_controller:"):
                    self.ctl.append((now, lvl, st.message, kv))
                elif st.name.startswith("mujoco_sim:"):
                    self.sim = kv

    def _on_urdf(self, msg):
        with self.lock:
            self.urdf = msg.data

    def wait(self, pred, timeout):
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            with self.lock:
                if pred():
                    return True
            time.sleep(0.02)
        return False

    def count(self, key):
        with self.lock:
            return int(self.ctl[-1][3].get(key, 0)) if self.ctl else 0

    def since(self, t0):
        with self.lock:
            return [e for e in self.ctl if e[0] >= t0]

    def resume(self, timeout=WAIT):
        assert self.resume_client.wait_for_service(timeout_sec=timeout), "no /torque_controller/resume"
        fut = self.resume_client.call_async(self._trigger.Request())
        t_end = time.monotonic() + timeout
        while not fut.done() and time.monotonic() < t_end:
            time.sleep(0.02)
        assert fut.done(), "~/resume did not answer"
        return fut.result()

    def close(self):
        self._recorder.stop()
        self._recorder.destroy()
        self._run = False
        self._thread.join(timeout=2.0)
        self._ex.shutdown(timeout_sec=1.0)
        self.node.destroy_node()


def wait_rest(watch, start, timeout=REST_WAIT):
    """Index (into watch.js_log) of the joint state at which the arm has been at rest (every |v| <
    REST) for REST_STATES states in a row, counting from `start`; None after `timeout`."""
    t_end = time.monotonic() + timeout
    k, run = start, 0
    while time.monotonic() < t_end:
        with watch.lock:
            new = watch.js_log[k:]
        for e in new:
            k += 1
            run = run + 1 if np.max(np.abs(e[2])) < REST else 0
            if run >= REST_STATES:
                return k
        time.sleep(0.02)
    return None


def wait_moving(watch, start, timeout=ONSET_WAIT):
    """Index of the first joint state from `start` on with a joint faster than MOVING; None after
    `timeout`."""
    t_end = time.monotonic() + timeout
    k = start
    while time.monotonic() < t_end:
        with watch.lock:
            new = watch.js_log[k:]
        for e in new:
            if np.max(np.abs(e[2])) > MOVING:
                return k
            k += 1
        time.sleep(0.02)
    return None


def deliver(watch, p, quat, timeout=WAIT, again_after=3.0):
    """Publish the target until the controller counted it (accepted. or rejected.target_pose up on its
    /diagnostics).  Returns (monotonic time of the publish it took, 'accepted' | 'rejected')."""
    a0, r0 = watch.count("accepted.target_pose"), watch.count("rejected.target_pose")
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        t_pub = time.monotonic()
        watch.publish_pose(p, quat)
        if watch.wait(lambda: bool(watch.ctl) and (int(watch.ctl[-1][3].get("accepted.target_pose", 0)) > a0 or
                                                   int(watch.ctl[-1][3].get("rejected.target_pose", 0)) > r0),
                      again_after):
            return t_pub, ("accepted" if watch.count("accepted.target_pose") > a0 else "rejected")
    raise AssertionError(f"target {p} not counted by the controller in {timeout} s")


def js_index(watch, t):
    """Index of the first joint state received at or after monotonic time t."""
    with watch.lock:
        log = list(watch.js_log)
    return next((i for i, e in enumerate(log) if e[0] >= t), len(log))


def run_case(robot, law, tmp_path, config=None):
    """The launch, the targets in sequence; a list of per-target results (dicts)."""
    args = ["robot_dynamics", "sim.launch.py", f"robot:={robot}", f"controller:={law}",
            "robot_state_publisher:=false"] + ([f"config:={config}"] if config else [])
    launch = Launch(args, tmp_path / "launch.log")
    t_start = time.monotonic()
    watch = None
    results = []
    try:
        launch.wait_for(rf"\[torque_controller\]: active: {law}", WAIT)
        watch = Watch()
        assert watch.wait(lambda: watch.urdf is not None, WAIT), "no /robot_description"
        joints = [j.get("name") for j in ET.fromstring(watch.urdf).findall("joint")
                  if j.get("type") in ("revolute", "continuous", "prismatic")]
        lo, hi, vl = urdf_limits(watch.urdf, joints)
        kin = Kinematics(watch.urdf, joints, FRAME[robot])
        with watch.lock:
            watch.joints = joints
        # held: the controller active and OK, the sim's brakes open, the arm at rest
        assert watch.wait(lambda: bool(watch.ctl) and watch.ctl[-1][1] == OK and watch.sim.get("brakes") == "off",
                          WAIT), f"not held: {watch.ctl[-1:] if watch.ctl else None} {watch.sim}\n{launch.out()[-3000:]}"
        k = wait_rest(watch, 0)
        assert k is not None, f"the arm did not come to rest after the start:\n{launch.out()[-3000:]}"
        print(f"\n{robot} {law}: held and at rest {time.monotonic() - t_start:.1f} s after the launch", flush=True)
        with watch.lock:
            q0 = watch.js_log[k - 1][1].copy()
        R0, p0 = kin.pose(q0)
        qs = np.array(SINGULAR[robot])
        sv = kin.position_singular_values(qs)
        assert sv[-1] < 1e-4, f"{robot}: the straight-up pose is not singular ({sv})"
        Rs, ps = kin.pose(qs)
        goals = {"out_of_reach": (np.array([2.0, 0.0, 0.5]), R0),
                 "behind_the_base": (np.array([-p0[0], -p0[1], p0[2]]), R0),
                 "through_the_base": (np.array([0.0, 0.0, -0.2]), R0),
                 "singularity": (ps, Rs)}
        last_pub = None
        for name in TARGETS:
            p, R = goals[name]
            stops0 = watch.count("joint_speed_stops")
            n_out = len(launch.out())
            t_target = time.monotonic()
            log, diag, sends = [], [], []
            for attempt in range(1 + RESENDS):
                # the controller logs a refusal once per log_throttle_period per reference kind: a
                # second refusal sooner would be counted but not logged (the next line says so)
                if last_pub is not None:
                    time.sleep(max(0.0, last_pub + THROTTLE - time.monotonic()))
                trips0 = watch.count("watchdog_trips")
                n_send = len(launch.out())
                t_pub, verdict = deliver(watch, p, quat_xyzw(R))
                last_pub = t_pub
                i0 = js_index(watch, t_pub)
                # an accepted far target: the arm starts to move (after a watchdog trip the law ramps
                # in first), then comes to rest; a refused one: at rest from the start
                moved = wait_moving(watch, i0) if verdict == "accepted" else None
                k = wait_rest(watch, i0 if moved is None else moved)
                with watch.lock:
                    log += watch.js_log[i0:k if k is not None else len(watch.js_log)]
                # the diagnostics of the window (one more report after the rest, to catch the last act)
                # the controller's report after the rest (its counts: a watchdog trip, a speed stop)
                t_rest = time.monotonic()
                watch.wait(lambda: bool(watch.ctl) and watch.ctl[-1][0] > t_rest, 10.0)
                diag += watch.since(t_pub)
                trips = watch.count("watchdog_trips") - trips0
                refused_tripped = WATCHDOG_REFUSAL in launch.out()[n_send:]
                sends.append((verdict, trips) + (("moved",) if moved is not None else ()) +
                             (("refused: watchdog tripped",) if refused_tripped else ()))
                # a joint state late by more than watchdog_timeout (a loaded host) trips the watchdog,
                # which abandons the target and holds, or refuses a target that arrives meanwhile:
                # sent again, as the controller's WARN asks (counted, printed)
                if k is None or not ((verdict == "accepted" and trips) or refused_tripped):
                    break
            stops = watch.count("joint_speed_stops") - stops0
            Q = np.array([e[1] for e in log])
            V = np.array([e[2] for e in log])
            _, p_end = kin.pose(Q[-1])
            r = dict(target=name, goal=p, verdict=verdict, states=len(log), rested=k is not None,
                     sends=sends, speed_ratio=float(np.max(np.abs(V) / vl)),
                     past=float(np.max(np.maximum(Q - hi, lo - Q))),
                     end_speed=float(np.max(np.abs(V[-1]))), stops=stops,
                     warns=[m.group(1) + ": " + m.group(2) for m in CTL_WARN.finditer(launch.out()[n_out:])],
                     diag_max=max((e[1] for e in diag), default=-1),
                     diag_msgs=sorted({e[2][:120] for e in diag if e[1] >= WARN}),
                     dist=float(np.linalg.norm(p_end - p)), seconds=time.monotonic() - t_target)
            results.append(r)
            if stops and r["rested"]:
                res = watch.resume()
                r["resumed"] = (res.success, res.message)
            print(f"\n{robot} {law} {name} {np.round(p, 3)}: {verdict} (sends, watchdog trips: {sends}); "
                  f"{len(log)} states in {r['seconds']:.1f} s, at rest {r['rested']}; "
                  f"peak |v| {r['speed_ratio']:.2f} x the URDF limit, end {r['end_speed']:.4f} rad/s; speed stops "
                  f"{stops}; deepest past a limit {r['past'] * 1e3:.2f} mrad; {r['dist']:.3f} m from the goal; "
                  f"diag max {r['diag_max']} {r['diag_msgs'][:2]}; WARN {[w[:160] for w in r['warns'][:3]]}",
                  flush=True)
    except BaseException:
        launch.kill()
        raise
    finally:
        if watch is not None:
            watch.close()
    rc = launch.stop("sigint")
    assert_clean_exit(launch, rc, ["sim_node", "controller_node"])
    return results


def check(robot, law, r):
    """The oracles of the module docstring on one target's result."""
    what = f"{robot} {law} {r['target']}"
    cartesian = law == "cartesian_impedance"
    assert r["rested"], f"{what}: the arm did not come to rest within {REST_WAIT} s"
    assert r["speed_ratio"] <= 1.0 or (r["stops"] > 0 and r["end_speed"] < REST), \
        f"{what}: joint speed {r['speed_ratio']:.2f} x the URDF limit, speed stops {r['stops']}"
    assert r["past"] < LIMIT_SLACK, f"{what}: {r['past']:.4f} rad past a URDF position limit"
    warns = " | ".join(r["warns"])
    if r["target"] == "out_of_reach":
        assert r["verdict"] == "rejected", f"{what}: a target at {r['goal']} accepted"
        assert re.search(CAUSE["out_of_reach"], warns), f"{what}: no WARN naming the reach: {r['warns']}"
    elif r["target"] == "singularity" and not cartesian:
        # the joint laws' IK refuses a solution at a singular configuration (ik.min_singular_value), or
        # does not converge to it (then: out of reach, with the closest distance)
        assert r["verdict"] == "rejected", f"{what}: a target at {r['goal']} accepted"
        assert re.search(CAUSE["singular"] + "|" + CAUSE["out_of_reach"], warns), \
            f"{what}: no WARN naming the singularity or the reach: {r['warns']}"
    elif r["verdict"] == "rejected":
        assert re.search("|".join(CAUSE.values()), warns), f"{what}: refused without a WARN naming why: {r['warns']}"
    elif cartesian or r["stops"]:
        assert re.search(CAUSE["clipped"] + "|" + CAUSE["speed_stop"], warns), \
            f"{what}: no WARN naming the clipping or the speed stop: {r['warns']}"
    if r["verdict"] == "rejected" or cartesian or r["stops"]:
        assert r["diag_max"] >= WARN, f"{what}: no WARN on /diagnostics ({r['diag_max']})"


@pytest.mark.parametrize("robot, law", CASES)
def test_shipped_launch_bounds_far_targets(ros, tmp_path, robot, law):
    results = run_case(robot, law, tmp_path)
    assert [r["target"] for r in results] == list(TARGETS)
    for r in results:
        check(robot, law, r)
