"""The torque controller node over real DDS (rclpy, the session's own ROS_DOMAIN_ID).

Most tests run the node in-process with its own context and executor spun in a thread; one starts it
as a separate process (the console-script module with sys.executable) and ends its process group.
No timed assertions: every wait is a bounded poll with a generous timeout.  Each test uses its own
topic names and node name, so a late message of one test never reaches another.
"""
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from robustness_harness import SpinThread, call_service
from robustness_harness import wait_for as _wait_for

from robot_dynamics.dynamics import Model, PinocchioBackend, robots
from robot_dynamics.nodes.controller import TorqueControllerNode

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PANDA_URDF = robots.robot_urdf_path("panda").read_text()
ARM = [f"panda_joint{i}" for i in range(1, 8)]
FINGERS = ["panda_finger_joint1", "panda_finger_joint2"]
Q0 = np.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.5, 0.3])
TIMEOUT = 30.0           # generous bound on every wait (never reached when things work)
TOL = 1e-9               # commands vs Pinocchio [N m]: same computation, only float round-off

_MODEL = Model.from_robot("panda")         # the 7-DoF arm, fingers locked, joints in ARM order
_DYN = PinocchioBackend(_MODEL)


def gravity(q):
    return _DYN.gravity(np.asarray(q, dtype=float)).copy()


def wait_for(pred, timeout=TIMEOUT, what="condition", every=None):
    return _wait_for(pred, timeout, what, every, poll=0.02)


class Rig:
    """One rclpy context: controller node(s) built on demand + a test node, spun in a thread."""

    def __init__(self):
        self.ns = "t" + uuid.uuid4().hex[:10]
        self.js_topic = f"/{self.ns}/joint_states"
        self.cmd_topic = f"/{self.ns}/commands"
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.h = rclpy.create_node(f"{self.ns}_tester", context=self.ctx)
        self.ex.add_node(self.h)
        self.lock = threading.Lock()
        self.cmds = []
        self.diag = {}
        self.h.create_subscription(Float64MultiArray, self.cmd_topic, self._on_cmd, 1000)
        self.h.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 100)
        self.js_pub = self.h.create_publisher(JointState, self.js_topic, 10)
        self.nodes = []
        self.spinner = SpinThread(self.ex)

    def _on_cmd(self, msg):
        with self.lock:
            self.cmds.append(np.array(msg.data))

    def _on_diag(self, msg):
        for st in msg.status:
            with self.lock:
                self.diag[st.name.split(":")[0]] = ({kv.key: kv.value for kv in st.values}, st.message)

    def controller(self, name="tc", **params):
        base = dict(robot_description=PANDA_URDF, joints=ARM, joint_states_topic=self.js_topic,
                    command_topic=self.cmd_topic, diagnostics_period=0.2)
        base.update(params)
        node = TorqueControllerNode(f"{self.ns}_{name}", context=self.ctx,
                                    parameter_overrides=[Parameter(k, value=v) for k, v in base.items()])
        self.ex.add_node(node)
        self.nodes.append(node)
        return node

    def close(self):
        self.spinner.stop()
        for n in self.nodes + [self.h]:
            n.destroy_node()
        rclpy.shutdown(context=self.ctx)

    # ---- helpers ----
    def n_cmds(self):
        with self.lock:
            return len(self.cmds)

    def last_cmd(self):
        with self.lock:
            return self.cmds[-1] if self.cmds else None

    def publish(self, names, q, v=None):
        v = np.zeros(len(q)) if v is None else v
        self.js_pub.publish(JointState(name=list(names), position=[float(x) for x in q],
                                       velocity=[float(x) for x in v]))

    def command_for(self, names, q, v=None, timeout=TIMEOUT):
        """Publish one joint state (again every 0.2 s if lost) and return the next command."""
        k0 = self.n_cmds()
        state = {"t": time.monotonic()}
        self.publish(names, q, v)

        def again():
            if time.monotonic() - state["t"] > 0.2:
                state["t"] = time.monotonic()
                self.publish(names, q, v)
        wait_for(lambda: self.n_cmds() > k0, timeout, "a command", again)
        with self.lock:
            return self.cmds[k0].copy()

    def settle(self, names, q, pred, what):
        """Publish the joint state at ~100 Hz until pred(last command) holds; return that command."""
        out = {}

        def check():
            c = self.last_cmd()
            if c is not None and pred(c):
                out["c"] = c
                return True
            return False
        wait_for(check, TIMEOUT, what, lambda: (self.publish(names, q), time.sleep(0.01)))
        return out["c"]

    def diagnostics(self, node):
        with self.lock:
            return self.diag.get(node.get_name(), ({}, ""))

    def call(self, srv_type, name, request, timeout=TIMEOUT):
        return call_service(self.h, srv_type, name, request, timeout)

    def lifecycle_state(self, node):
        return self.call(GetState, f"/{node.get_name()}/get_state", GetState.Request()).current_state.label

    def change_state(self, node, transition_id):
        req = ChangeState.Request()
        req.transition.id = transition_id
        return self.call(ChangeState, f"/{node.get_name()}/change_state", req).success

    def param_client(self, node):
        pc = AsyncParameterClient(self.h, node.get_name())
        assert pc.wait_for_services(timeout_sec=TIMEOUT)
        return pc

    def get_params(self, pc, names):
        fut = pc.get_parameters(names)
        wait_for(fut.done, TIMEOUT, "get_parameters")
        return [rclpy.parameter.parameter_value_to_python(v) for v in fut.result().values]

    def set_params(self, pc, params):
        fut = pc.set_parameters(params)
        wait_for(fut.done, TIMEOUT, "set_parameters")
        return fut.result().results


@pytest.fixture
def rig():
    r = Rig()
    try:
        yield r
    finally:
        r.close()


def wait_active(rig, node):
    wait_for(lambda: node.lifecycle_state == "active", TIMEOUT, f"{node.get_name()} active")


# no start ramp, no rate limit, the gains whatever the hold (the states here come one by one, each held
# for as long as the test takes: the hold bound would slow the law): command = law
FAST = dict(ramp_time=0.0, torque_rate_limit=1e9, hold_bound=False)


# ------------------------------------------------------------------------------------------------
def test_name_mapping_shuffled_order_and_extra_joints(rig):
    """Shuffled order and extra joints give the same command; the output follows `joints`."""
    joints = [ARM[i] for i in (3, 0, 6, 2, 5, 1, 4)]
    node = rig.controller(joints=joints, watchdog_timeout=5.0, **FAST)
    wait_active(rig, node)
    g = gravity(Q0)
    expected = np.array([g[ARM.index(j)] for j in joints])
    # the first state's answer (settle: until a state comes the node sends the safe command every 50 ms)
    c1 = rig.settle(ARM, Q0, lambda c: np.allclose(c, expected, atol=TOL), "the command in `joints` order")
    perm = [6, 2, 0, 5, 3, 1, 4]
    names2 = FINGERS[:1] + [ARM[i] for i in perm] + ["some_other_joint"] + FINGERS[1:]
    q2 = np.r_[0.02, Q0[perm], 7.0, 0.03]
    c2 = rig.command_for(names2, q2)
    np.testing.assert_allclose(c1, expected, atol=TOL)
    np.testing.assert_allclose(c2, expected, atol=TOL)
    assert len(c2) == 7


def test_gravity_command_after_the_start_ramp(rig):
    """Default safety (0.5 s ramp, rate limit): the command converges to Pinocchio's g(q)."""
    node = rig.controller()
    wait_active(rig, node)
    g = gravity(Q0)
    c = rig.settle(ARM, Q0, lambda c: np.allclose(c, g, atol=TOL, rtol=0), "the ramped command to reach g(q)")
    np.testing.assert_allclose(c, g, atol=TOL)


@pytest.mark.parametrize("safe_command", ["zero", "gravity"])
def test_bad_joint_states_rejected_with_safe_command(rig, safe_command):
    node = rig.controller(watchdog_timeout=10.0, safe_command=safe_command, **FAST)
    wait_active(rig, node)
    g = gravity(Q0)
    safe = np.zeros(7) if safe_command == "zero" else g
    q1 = Q0 + 0.3
    bad = {
        "missing_joint": (ARM[:6], q1[:6], None),
        "non_finite": (ARM, np.r_[q1[:3], np.nan, q1[4:]], None),
        "wrong_length": (ARM, q1, np.zeros(5)),
        "duplicate_name": (ARM + [ARM[2]], np.r_[q1, q1[2]], None),
    }
    for reason, (names, q, v) in bad.items():
        np.testing.assert_allclose(rig.command_for(ARM, Q0), g, atol=TOL)      # valid: g(Q0)
        c = rig.command_for(names, q, v)
        np.testing.assert_allclose(c, safe, atol=TOL, err_msg=reason)          # rejected: safe command
        np.testing.assert_allclose(rig.command_for(ARM, Q0), g, atol=TOL)      # and back
    # every rejection is counted in the diagnostics
    wait_for(lambda: all(int(rig.diagnostics(node)[0].get(f"rejected.joint_states.{r}", 0)) >= 1 for r in bad),
             what="rejection counts in /diagnostics")
    assert int(rig.diagnostics(node)[0]["rejected.joint_states"]) >= 4


def test_watchdog_fires_and_recovers(rig):
    node = rig.controller(watchdog_timeout=0.2, **FAST)
    wait_active(rig, node)
    g = gravity(Q0)
    rig.settle(ARM, Q0, lambda c: np.allclose(c, g, atol=TOL), "g(q) while joint states flow")
    # stop publishing: the watchdog publishes the safe command (zero) from its timer
    k0 = rig.n_cmds()
    wait_for(lambda: rig.n_cmds() > k0 + 3 and not np.any(rig.last_cmd()), what="watchdog safe commands")
    wait_for(lambda: rig.diagnostics(node)[0].get("watchdog") == "tripped", what="watchdog tripped in diagnostics")
    assert int(rig.diagnostics(node)[0]["watchdog_trips"]) >= 1
    # fresh data again: commanding resumes
    rig.settle(ARM, Q0, lambda c: np.allclose(c, g, atol=TOL), "g(q) after recovery")
    wait_for(lambda: rig.diagnostics(node)[0].get("watchdog") == "ok",
             what="watchdog ok in diagnostics", every=lambda: (rig.publish(ARM, Q0), time.sleep(0.02)))


def test_rejected_parameter_changes_keep_the_old_gains(rig):
    """joint_impedance with v = 0: command = g(q) + K (q_hold - q); bad sets leave K in force.  The
    `joints` order is not the model's, so per-joint gains must be reordered to land on their joints."""
    k = [100.0, 90.0, 80.0, 70.0, 60.0, 50.0, 40.0]      # in `joints` order
    joints = [ARM[i] for i in (3, 0, 6, 2, 5, 1, 4)]
    idx = [ARM.index(j) for j in joints]                  # model index of each command entry
    node = rig.controller(controller="joint_impedance", watchdog_timeout=10.0, joints=joints,
                          **{"joint_impedance.k_gains": k, "joint_impedance.d_gains": [0.0]}, **FAST)
    wait_active(rig, node)
    rig.command_for(ARM, Q0)                              # first valid state: hold Q0
    dq = np.full(7, 0.01)
    q = Q0 + dq

    def k_observed():                                     # per command entry (`joints` order)
        return -(rig.command_for(ARM, q) - gravity(q)[idx]) / dq
    np.testing.assert_allclose(k_observed(), k, rtol=1e-6)
    pc = rig.param_client(node)
    for bad in ([-1.0] + k[1:], k[:3], [float("nan")] * 7):
        res = rig.set_params(pc, [Parameter("joint_impedance.k_gains", value=bad)])
        assert not res[0].successful and res[0].reason, bad
        assert rig.get_params(pc, ["joint_impedance.k_gains"])[0] == k
        np.testing.assert_allclose(k_observed(), k, rtol=1e-6)
    # a rejected change of another parameter in the same request leaves both unchanged
    res = rig.set_params(pc, [Parameter("joint_impedance.damping_ratio", value=-0.5)])
    assert not res[0].successful
    assert rig.get_params(pc, ["joint_impedance.damping_ratio"])[0] == 1.0
    # a good change is applied live (one value: all joints)
    res = rig.set_params(pc, [Parameter("joint_impedance.k_gains", value=[30.0])])
    assert res[0].successful, res[0].reason
    np.testing.assert_allclose(k_observed(), np.full(7, 30.0), rtol=1e-6)
    # gains per joint follow the `joints` order, not the model order
    res = rig.set_params(pc, [Parameter("joint_impedance.k_gains", value=k[::-1])])
    assert res[0].successful
    np.testing.assert_allclose(k_observed(), k[::-1], rtol=1e-6)


def test_references_hold_and_deactivate(rig):
    """~/target_joint_state, ~/joint_trajectory and ~/hold move the reference; deactivate publishes
    the safe command."""
    K = 50.0
    node = rig.controller(controller="joint_impedance", watchdog_timeout=10.0, safe_command="gravity",
                          **{"joint_impedance.k_gains": [K]}, **FAST)
    wait_active(rig, node)
    rig.command_for(ARM, Q0)
    g = gravity(Q0)
    target = Q0 + np.linspace(0.01, 0.07, 7)
    pub = rig.h.create_publisher(JointState, f"/{node.get_name()}/target_joint_state", 10)
    shuffled = ARM[::-1]
    wait_for(lambda: pub.get_subscription_count() > 0, what="target subscriber")
    pub.publish(JointState(name=shuffled, position=[float(target[ARM.index(j)]) for j in shuffled]))
    states = []
    rig.h.create_subscription(JointState, f"/{node.get_name()}/state", states.append, 100)
    c = rig.settle(ARM, Q0, lambda c: np.allclose(c, g + K * (target - Q0), atol=1e-9),
                   "the command toward the joint target")
    # ~/state: name = joints, position = reference, velocity = error, effort = command
    wait_for(lambda: states and np.allclose(states[-1].position, target, atol=1e-12),
             what="~/state with the reference", every=lambda: (rig.publish(ARM, Q0), time.sleep(0.02)))
    s = states[-1]
    assert list(s.name) == ARM
    np.testing.assert_allclose(s.velocity, target - Q0, atol=1e-12)
    np.testing.assert_allclose(s.effort, c, atol=1e-9)
    # hold: the reference becomes the current position
    res = rig.call(Trigger, f"/{node.get_name()}/hold", Trigger.Request())
    assert res.success, res.message
    np.testing.assert_allclose(rig.command_for(ARM, Q0), g, atol=1e-9)
    # a one-point trajectory, reached after its time_from_start
    goal = Q0 - 0.02
    tpub = rig.h.create_publisher(JointTrajectory, f"/{node.get_name()}/joint_trajectory", 10)
    tmsg = JointTrajectory(joint_names=shuffled, points=[JointTrajectoryPoint(
        positions=[float(goal[ARM.index(j)]) for j in shuffled])])
    tmsg.points[0].time_from_start.nanosec = 200_000_000
    wait_for(lambda: tpub.get_subscription_count() > 0, what="trajectory subscriber")
    tpub.publish(tmsg)
    rig.settle(ARM, Q0, lambda c: np.allclose(c, g + K * (goal - Q0), atol=1e-9), "the trajectory's end")
    # deactivate: the configured safe command (gravity at the last valid q), then silence
    assert rig.change_state(node, Transition.TRANSITION_DEACTIVATE)
    wait_for(lambda: np.allclose(rig.last_cmd(), g, atol=1e-9), what="the safe command on deactivate")
    assert rig.lifecycle_state(node) == "inactive"
    assert rig.change_state(node, Transition.TRANSITION_ACTIVATE)
    rig.settle(ARM, Q0, lambda c: np.allclose(c, g, atol=1e-9), "commanding after re-activation (hold)")


def test_wrong_robot_description_fails_configure_and_the_node_keeps_running(rig):
    broken = rig.controller("broken", robot_description="<robot name='x'><link name='a'></robot")
    missing = rig.controller("missing", joints=ARM[:6] + ["no_such_joint"])
    for node, words in ((broken, ["robot_description"]), (missing, ["no_such_joint"])):
        wait_for(lambda node=node: node.config_error, what=f"{node.get_name()} configure failure")
        for w in words:
            assert w in node.config_error, node.config_error
        assert rig.lifecycle_state(node) == "unconfigured"          # still running, answering services
        wait_for(lambda node=node: "not configured" in rig.diagnostics(node)[1], what="diagnostics")
    assert "URDF" in broken.config_error or "parse" in broken.config_error.lower() or \
        "XML" in broken.config_error, broken.config_error
    # fix the parameter and configure again through the lifecycle service
    pc = rig.param_client(missing)
    assert rig.set_params(pc, [Parameter("joints", value=ARM)])[0].successful
    assert rig.change_state(missing, Transition.TRANSITION_CONFIGURE)
    assert rig.change_state(missing, Transition.TRANSITION_ACTIVATE)
    rig.settle(ARM, Q0, lambda c: np.allclose(c, gravity(Q0), atol=TOL), "g(q) after the fix")


def test_self_check_failure_refuses_configure(rig, monkeypatch):
    from robot_dynamics.dynamics import SelfCheckError
    from robot_dynamics.nodes.controller import node as cn

    def bad_check(model, **kw):
        raise SelfCheckError("backend self-check failed: rnea differs by 0.1 at panda_joint4")
    monkeypatch.setattr(cn, "self_check", bad_check)
    node = rig.controller()
    wait_for(lambda: node.config_error, what="configure failure")
    assert "self-check" in node.config_error and "panda_joint4" in node.config_error
    # config_error is set inside the configuring transition: the failed transition then ends in
    # unconfigured (never inactive)
    wait_for(lambda: node.lifecycle_state != "configuring", what="the end of the configuring transition")
    assert node.lifecycle_state == "unconfigured"


# ------------------------------------------------------------------------------------------------
@pytest.mark.system
def test_node_as_a_process_from_the_robot_description_topic(rig):
    """The console-script module in its own process: URDF from a TRANSIENT_LOCAL topic, gravity
    commands after the ramp, the safe command (zero) on SIGTERM, clean exit."""
    rd_topic = f"/{rig.ns}/robot_description"
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    rd_pub = rig.h.create_publisher(String, rd_topic, latched)
    rd_pub.publish(String(data=PANDA_URDF))
    joints = ARM[::-1]
    name = f"{rig.ns}_proc"
    cmd = [sys.executable, "-m", "robot_dynamics.nodes.controller", "--ros-args",
           "-r", f"__node:={name}", "-p", f"robot_description_topic:={rd_topic}",
           "-p", "joints:=[" + ",".join(joints) + "]", "-p", f"joint_states_topic:={rig.js_topic}",
           "-p", f"command_topic:={rig.cmd_topic}", "-p", "watchdog_timeout:=5.0"]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        g = gravity(Q0)[::-1]
        rig.settle(ARM, Q0, lambda c: np.allclose(c, g, atol=TOL), "g(q) from the process")
        k0 = rig.n_cmds()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT) == 0
        wait_for(lambda: rig.n_cmds() > k0 and not np.any(rig.last_cmd()), what="the safe command on SIGTERM")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=TIMEOUT)
        out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        proc.stdout and proc.stdout.close()
    assert "configured: gravity_compensation" in out, out


def test_cartesian_references_wrench_and_tare(rig):
    """cartesian_impedance: a non-unit quaternion is normalised, a zero one rejected; a wrench in an
    unknown frame is ignored with a count; ~/tare succeeds once a wrench and a state have arrived
    (that it tares with the current reading is checked numerically in test_loop_oracles.py)."""
    from geometry_msgs.msg import PoseStamped, WrenchStamped
    node = rig.controller(controller="cartesian_impedance", watchdog_timeout=10.0,
                          wrench_topic=f"/{rig.ns}/wrench", **FAST)
    wait_active(rig, node)
    g = gravity(Q0)
    np.testing.assert_allclose(rig.command_for(ARM, Q0), g, atol=1e-6)        # holding: tau = g(q)
    T = _DYN.frame_pose(Q0, _MODEL.frame_names[-1])
    pose_pub = rig.h.create_publisher(PoseStamped, f"/{node.get_name()}/target_pose", 10)
    wait_for(lambda: pose_pub.get_subscription_count() > 0, what="target_pose subscriber")

    def pose(dz, quat):
        m = PoseStamped()
        m.pose.position.x, m.pose.position.y, m.pose.position.z = float(T[0, 3]), float(T[1, 3]), float(T[2, 3] + dz)
        m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z, m.pose.orientation.w = quat
        return m
    import pinocchio as pin
    qx, qy, qz, qw = pin.Quaternion(T[:3, :3]).coeffs()
    # zero quaternion: rejected, counted, command unchanged
    pose_pub.publish(pose(0.05, (0.0, 0.0, 0.0, 0.0)))
    wait_for(lambda: int(rig.diagnostics(node)[0].get("rejected.target_pose", 0)) >= 1,
             what="rejected.target_pose in diagnostics")
    np.testing.assert_allclose(rig.command_for(ARM, Q0), g, atol=1e-6)
    # same orientation given as 3 x the unit quaternion, 5 cm up: an upward force J^T [0 0 k dz]
    pose_pub.publish(pose(0.05, (3 * qx, 3 * qy, 3 * qz, 3 * qw)))
    J = _DYN.frame_jacobian(Q0, _MODEL.frame_names[-1], "local_world_aligned").copy()
    expected = g + J.T @ np.r_[0.0, 0.0, 200.0 * 0.05, 0.0, 0.0, 0.0]
    rig.settle(ARM, Q0, lambda c: np.allclose(c, expected, atol=1e-3), "the command toward the target pose")
    # wrench in a frame the model does not have: ignored with a warning and a count
    wpub = rig.h.create_publisher(WrenchStamped, f"/{rig.ns}/wrench", 10)
    w = WrenchStamped()
    w.header.frame_id = "not_a_frame"
    w.wrench.force.z = 5.0
    wait_for(lambda: int(rig.diagnostics(node)[0].get("rejected.wrench", 0)) >= 1, what="rejected.wrench",
             every=lambda: (wpub.publish(w), rig.publish(ARM, Q0), time.sleep(0.02)))
    # a known frame: tare with the current reading
    w.header.frame_id = "panda_hand"
    for _ in range(5):
        wpub.publish(w)
        rig.publish(ARM, Q0)
        time.sleep(0.02)
    res = wait_for(lambda: (lambda r: r if r.success else None)(
        rig.call(Trigger, f"/{node.get_name()}/tare", Trigger.Request())), what="a successful tare")
    assert "tared" in res.message


def test_timer_trigger_and_no_exception_escapes(rig):
    """trigger: timer runs the step at update_rate on the latest state; an exception in the law is
    caught, counted, and answered with the safe command while the states stay fresh (the watchdog,
    10 s here, is not what takes the torque off)."""
    node = rig.controller(trigger="timer", update_rate=100.0, watchdog_timeout=10.0, **FAST)
    wait_active(rig, node)
    g = gravity(Q0)
    rig.publish(ARM, Q0)
    k0 = rig.n_cmds()
    wait_for(lambda: rig.n_cmds() > k0 + 20 and np.allclose(rig.last_cmd(), g, atol=TOL),
             what="timer-driven commands", every=lambda: (rig.publish(ARM, Q0), time.sleep(0.1)))

    def boom(state):
        raise RuntimeError("law exploded")
    node.c.law.compute = boom
    fresh = lambda: (rig.publish(ARM, Q0), time.sleep(0.01))              # noqa: E731
    wait_for(lambda: not np.any(rig.last_cmd()), what="the safe command after an exception", every=fresh)
    assert node.c.loop.supervisor.watchdog == "ok" and node.c.loop.counts["watchdog_trips"] == 0
    wait_for(lambda: int(rig.diagnostics(node)[0].get("errors.control_step", 0)) >= 1, what="errors counted")


@pytest.mark.system
def test_flood_of_alternating_bad_and_good_joint_states_logs_throttled(rig):
    """Issue 11: bad and good joint states alternating at up to 1 kHz for 3 s against the node in its
    own process.  Its log (the child's output) stays within the throttle (log_throttle_period 1 s: one
    episode start per second at most, and the end of a logged episode), and every rejection is
    counted exactly in /diagnostics (reliable QoS with deep queues: every message sent arrives)."""
    import re
    name = f"{rig.ns}_flood"
    cmd = [sys.executable, "-m", "robot_dynamics.nodes.controller", "--ros-args", "-r", f"__node:={name}",
           "-p", "robot:=panda", "-p", "robot_description_timeout:=0.0",
           "-p", "joints:=[" + ",".join(ARM) + "]", "-p", f"joint_states_topic:={rig.js_topic}",
           "-p", f"command_topic:={rig.cmd_topic}", "-p", "watchdog_timeout:=10.0", "-p", "ramp_time:=0.0",
           "-p", "qos_reliability:=reliable", "-p", "qos_depth:=10000", "-p", "diagnostics_period:=0.2"]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # (a process start on a loaded 2-core machine can take long: a longer bound than TIMEOUT)
        wait_for(lambda: rig.last_cmd() is not None and np.any(rig.last_cmd()), 4 * TIMEOUT,
                 "a command from the process", lambda: (rig.publish(ARM, Q0), time.sleep(0.01)))
        pub = rig.h.create_publisher(JointState, rig.js_topic,
                                     QoSProfile(depth=10000, reliability=ReliabilityPolicy.RELIABLE))
        wait_for(lambda: pub.get_subscription_count() > 0, what="the node on the flood publisher")
        good = JointState(name=ARM, position=[float(x) for x in Q0], velocity=[0.0] * 7)
        bad = JointState(name=ARM, position=[float(x) for x in Q0[:3]] + [float("nan")] +
                         [float(x) for x in Q0[4:]], velocity=[0.0] * 7)
        sent_bad, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 3.0:
            pub.publish(bad)
            pub.publish(good)
            sent_bad += 1
            delay = t0 + 0.002 * sent_bad - time.monotonic()   # one pair per 2 ms at most
            if delay > 0:
                time.sleep(delay)

        def counted():
            d = rig.diag.get(name, ({}, ""))[0]
            return int(d.get("rejected.joint_states.non_finite", -1)) == sent_bad
        wait_for(counted, what=f"all {sent_bad} rejections counted in /diagnostics")
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=TIMEOUT)
        out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        proc.stdout and proc.stdout.close()
    stamp = re.compile(r"^\[\w+\] \[(\d+\.\d+)\] \[[^\]]*\]: (.*)$")
    lines = [(float(m.group(1)), m.group(2)) for m in map(stamp.match, out.splitlines())
             if m and ("joint state rejected" in m.group(2) or "joint states valid again" in m.group(2))]
    t = np.array([x for x, _ in lines])
    assert len(lines) >= 2, out[-3000:]
    per_s = np.bincount(np.floor(t - t.min()).astype(int))
    span = t.max() - t.min()
    print(f"{sent_bad} bad + {sent_bad} good joint states in {time.monotonic() - t0:.1f} s: {len(lines)} "
          f"log lines over {span:.1f} s, per second {per_s.tolist()}")
    # starts >= 1 s apart, each followed by at most one end: <= 2 per started second of the span, and
    # per 1 s bin at most 2 starts (bin phase) + their ends
    assert per_s.max() <= 4, per_s
    assert len(lines) <= 2 * (int(span + 0.01) + 1), (len(lines), span)


def test_reconfigure_ramps_from_the_command_the_driver_holds(rig):
    """deactivate -> cleanup -> configure -> activate: the driver still holds the safe command g(q)
    of the deactivation, so the new configuration's first command starts from it (within one
    rate-limit step: torque_rate_limit / update_rate), not from zero."""
    rate, f = 500.0, 1000.0                           # N m/s, Hz: one step is 0.5 N m (g(Q0) reaches 21.5)
    node = rig.controller(controller="gravity_compensation", watchdog_timeout=10.0, safe_command="gravity",
                          torque_rate_limit=rate, update_rate=f, ramp_time=0.0)
    wait_active(rig, node)
    g = gravity(Q0)
    rig.settle(ARM, Q0, lambda c: np.allclose(c, g, atol=1e-9), "gravity compensation after the ramp")
    assert rig.change_state(node, Transition.TRANSITION_DEACTIVATE)
    wait_for(lambda: np.allclose(rig.last_cmd(), g, atol=1e-9), what="the safe command on deactivate")
    assert rig.change_state(node, Transition.TRANSITION_CLEANUP)
    assert rig.change_state(node, Transition.TRANSITION_CONFIGURE)
    assert rig.change_state(node, Transition.TRANSITION_ACTIVATE)
    first = rig.command_for(ARM, Q0)
    step = rate / f
    assert np.max(np.abs(first - g)) <= step + 1e-9, (first, g)


def test_safety_envelope_over_ros_parameters_stop_and_resume(rig):
    """The Cartesian envelope set live by ROS parameters (safety.*: a string[] and double[]s), on
    gravity compensation at rest: with the tcp 2 cm under a plane the command is g(q) + J_v^T n k
    (margin - s) (reference backend: its FK and Jacobian, the numbers set here); the violation lasting
    safety.stop_time stops the arm (ERROR on /diagnostics); ~/resume is refused while the tcp is
    outside and accepted once a state puts it inside.  A bad value is refused with its reason."""
    from robot_dynamics.dynamics import make_backend
    ref = make_backend(_MODEL, "reference")
    node = rig.controller(watchdog_timeout=5.0, **FAST)
    wait_active(rig, node)
    tcp = "panda_hand_tcp"
    _, p = ref.frame_placement(Q0, tcp)
    k, margin, d = 800.0, 0.05, float(p[2]) + 0.02          # the plane z >= d: the tcp 2 cm under it
    pc = rig.param_client(node)
    res = rig.set_params(pc, [Parameter("safety.planes", value=[0.0, 0.0, 1.0])])
    assert not res[0].successful and "4 numbers per entry" in res[0].reason, res[0].reason
    res = rig.set_params(pc, [Parameter("safety.frames", value=[tcp]), Parameter("safety.planes", value=[0.0, 0.0, 1.0, d]),
                              Parameter("safety.stiffness", value=k), Parameter("safety.margin", value=margin),
                              Parameter("safety.stop_time", value=0.3)])
    assert all(r.successful for r in res), [r.reason for r in res]
    # the limits as markers (latched): the plane's square at (0, 0, d) in the base frame
    from visualization_msgs.msg import Marker, MarkerArray
    got = []
    rig.h.create_subscription(MarkerArray, f"/{node.get_name()}/safety_markers", got.append,
                              QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                         durability=DurabilityPolicy.TRANSIENT_LOCAL))

    def plane_marker():
        ms = got[-1].markers if got else []
        return len(ms) == 2 and ms[0].action == Marker.DELETEALL and ms[1].type == Marker.CUBE and \
            np.allclose([ms[1].pose.position.x, ms[1].pose.position.y, ms[1].pose.position.z], [0, 0, d]) and \
            ms[1].header.frame_id == _MODEL.frame_names[0]
    wait_for(plane_marker, what="the plane's marker on ~/safety_markers")
    J = ref.frame_jacobian(Q0, tcp, "local_world_aligned")[:3]
    expected = gravity(Q0) + J.T @ (np.array([0.0, 0.0, 1.0]) * k * (margin - (p[2] - d)))
    rig.settle(ARM, Q0, lambda c: np.allclose(c, expected, atol=1e-6), "the repulsion on top of g(q)")
    wait_for(lambda: rig.diagnostics(node)[0].get("envelope.state") in ("stopping", "stopped"), what="an envelope stop",
             every=lambda: (rig.publish(ARM, Q0), time.sleep(0.01)))
    assert "safety envelope stop" in rig.diagnostics(node)[1]
    res = rig.call(Trigger, f"/{node.get_name()}/resume", Trigger.Request())
    assert not res.success and "still violated" in res.message, res.message
    q_in = Q0.copy()
    q_in[3] += 0.3                                        # the elbow bent: the tcp higher, inside
    assert ref.frame_placement(q_in, tcp)[1][2] > d
    rig.command_for(ARM, q_in)
    res = rig.call(Trigger, f"/{node.get_name()}/resume", Trigger.Request())
    assert res.success, res.message


def test_joint_impedance_takes_a_target_pose_through_the_ik(rig):
    """joint_impedance with ik.frame = panda_hand_tcp: ~/target_pose 2 m away is refused with its
    reason (rejected.target_pose); the pose of the tcp at a nearby configuration is accepted and the
    command, with the state held at Q0, turns into K (q_d - Q0) + g(Q0) with q_d moving toward an IK
    solution of that pose (checked once settled: the reference's tcp pose, reference FK, is the
    goal); a NaN pose refused, the reference kept.  ~/cartesian_trajectory on the same joint law:
    a point out of reach and a trajectory naming another frame refused (rejected.cartesian_trajectory),
    a one-point trajectory followed to an IK solution of its pose."""
    from geometry_msgs.msg import PoseStamped
    import pinocchio as pin
    from robot_dynamics.dynamics import make_backend
    ref = make_backend(_MODEL, "reference")
    k = 50.0
    node = rig.controller(controller="joint_impedance", watchdog_timeout=10.0, **{"ik.frame": "panda_hand_tcp",
                          "joint_impedance.k_gains": [k], "joint_impedance.d_gains": [0.0]}, **FAST)
    wait_active(rig, node)
    rig.command_for(ARM, Q0)
    pose_pub = rig.h.create_publisher(PoseStamped, f"/{node.get_name()}/target_pose", 10)
    wait_for(lambda: pose_pub.get_subscription_count() > 0, what="target_pose subscriber")

    def pose(R, p):
        m = PoseStamped()
        m.pose.position.x, m.pose.position.y, m.pose.position.z = (float(x) for x in p)
        (m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z,
         m.pose.orientation.w) = (float(x) for x in pin.Quaternion(R).coeffs())
        return m
    R0, p0 = ref.frame_placement(Q0, "panda_hand_tcp")
    pose_pub.publish(pose(R0, p0 + [2.0, 0.0, 0.0]))
    wait_for(lambda: int(rig.diagnostics(node)[0].get("rejected.target_pose", 0)) >= 1,
             what="rejected.target_pose (out of reach)", every=lambda: (rig.publish(ARM, Q0), time.sleep(0.02)))
    Rg, pg = ref.frame_placement(Q0 + 0.1, "panda_hand_tcp")
    pose_pub.publish(pose(Rg, pg))
    wait_for(lambda: int(rig.diagnostics(node)[0].get("accepted.target_pose", 0)) >= 1,
             what="accepted.target_pose", every=lambda: (rig.publish(ARM, Q0), time.sleep(0.02)))

    def at(Rg, pg):                  # c = K (q_d - Q0) + g: q_d from the command, its tcp at the goal?
        def ok(c):
            q_d = Q0 + (c - gravity(Q0)) / k
            R, p = ref.frame_placement(q_d, "panda_hand_tcp")
            return np.linalg.norm(p - pg) < 1e-6 and np.linalg.norm(pin.log3(Rg.T @ R)) < 1e-6
        return ok
    rig.settle(ARM, Q0, at(Rg, pg), "the reference at an IK solution of the pose")
    # a NaN pose: refused, the reference kept
    bad = pose(Rg, pg)
    bad.pose.position.y = float("nan")
    pose_pub.publish(bad)
    wait_for(lambda: int(rig.diagnostics(node)[0].get("rejected.target_pose", 0)) >= 2,
             what="rejected.target_pose (NaN)", every=lambda: (rig.publish(ARM, Q0), time.sleep(0.02)))
    rig.settle(ARM, Q0, at(Rg, pg), "the reference kept after the NaN pose")
    # ~/cartesian_trajectory on the joint law: a point 2 m away refused, one naming another frame
    # refused, a one-point trajectory (1 s) to the pose at Q0 - 0.1 followed to its IK solution
    from geometry_msgs.msg import Transform
    from trajectory_msgs.msg import MultiDOFJointTrajectory, MultiDOFJointTrajectoryPoint
    traj_pub = rig.h.create_publisher(MultiDOFJointTrajectory, f"/{node.get_name()}/cartesian_trajectory", 10)
    wait_for(lambda: traj_pub.get_subscription_count() > 0, what="cartesian_trajectory subscriber")

    def traj(R, p, frame="panda_hand_tcp"):
        m = MultiDOFJointTrajectory()
        m.joint_names = [frame]
        pt = MultiDOFJointTrajectoryPoint()
        tf = Transform()
        tf.translation.x, tf.translation.y, tf.translation.z = (float(x) for x in p)
        tf.rotation.x, tf.rotation.y, tf.rotation.z, tf.rotation.w = (float(x) for x in pin.Quaternion(R).coeffs())
        pt.transforms = [tf]
        pt.time_from_start.sec = 1
        m.points = [pt]
        return m
    R3, p3 = ref.frame_placement(Q0 - 0.1, "panda_hand_tcp")
    for i, m in enumerate((traj(R3, p3 + [2.0, 0.0, 0.0]), traj(R3, p3, frame="panda_link3"))):
        traj_pub.publish(m)
        wait_for(lambda: int(rig.diagnostics(node)[0].get("rejected.cartesian_trajectory", 0)) >= i + 1,
                 what=f"rejected.cartesian_trajectory ({i + 1})", every=lambda: (rig.publish(ARM, Q0), time.sleep(0.02)))
    rig.settle(ARM, Q0, at(Rg, pg), "the reference kept after the refused trajectories")
    traj_pub.publish(traj(R3, p3))
    wait_for(lambda: int(rig.diagnostics(node)[0].get("accepted.cartesian_trajectory", 0)) >= 1,
             what="accepted.cartesian_trajectory", every=lambda: (rig.publish(ARM, Q0), time.sleep(0.02)))
    rig.settle(ARM, Q0, at(R3, p3), "the reference at an IK solution of the trajectory's point")


def test_a_silent_publisher_is_named_with_its_likely_cause(rig, monkeypatch):
    """Issue 24: active, with a publisher of the joint-state topic in its graph and nothing received
    (what a controller restarted after a kill -9 saw of a live publisher over Fast DDS's shared
    memory), the node says so and what works around it, not only that no joint state came; once
    states come, it says no more."""
    from robot_dynamics.nodes.controller import services as controller_services
    monkeypatch.setattr(controller_services, "SILENT_AFTER", 0.5)
    node = rig.controller(watchdog_timeout=5.0, **FAST)
    warned, real = [], node._log

    class Recorder:
        def __getattr__(self, name):
            return getattr(real, name)

        def warn(self, text, *a, **kw):
            warned.append(text)
            return real.warn(text, *a, **kw)
    node._log = Recorder()
    wait_active(rig, node)
    wait_for(lambda: rig.js_pub.get_subscription_count() > 0, what="the node on the joint-state topic")
    wait_for(lambda: any(rig.js_topic in m and "FASTDDS_BUILTIN_TRANSPORTS=UDPv4" in m for m in warned),
             what="the silent publisher named")
    # the law once states come (settle, not the next command: without states the node sends the safe
    # command again every 50 ms, and a loaded run had one of those come before the answer to the state)
    rig.settle(ARM, Q0, lambda c: np.allclose(c, gravity(Q0), atol=TOL), "gravity once states come")
    n = len(warned)
    node._js_silent_logged = -1e9          # (its own throttle would hide a line)
    for _ in range(2):                     # two diagnostics periods with states: no more of it
        t = node._diag_last
        wait_for(lambda: node._diag_last > t, what="a diagnostics period")
    assert not any("FASTDDS" in m for m in warned[n:]), warned[n:]
