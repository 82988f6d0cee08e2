"""The cooperative carry on the graph: one node commanding both arms of a cell (issue 47), the law of
control/cooperative.py against sim_node with `arms` (nodes/cell_sim.py) or two drivers of the same
interface.

    ros2 run robot_dynamics carry_node --ros-args -p use_sim_time:=true
    (with: ros2 run robot_dynamics sim_node --ros-args -p arms:="[left, right]")

Per arm <ns> of `arms` (two):  subscribes /<ns>/joint_states, publishes /<ns>/effort_controller/commands
(Float64MultiArray in `<ns>.joints` order, default the model's).  Subscribes box_pose_topic
(/cell/box_pose, geometry_msgs/PoseStamped) once, for the box's start pose.  Publishes ~/phase
(std_msgs/String, transient local): waiting, approach, carry, hold (partner lost).

Why one node for both arms (and not one per arm sharing states): bench/cell_carry.py and the module
docstring of control/cooperative.py (the same cost per cycle, both states of one instant, no DDS hop
between the two halves of the internal-force loop).

Phases.  waiting: until both arms' states and the box pose have come (nothing published: the sim's
brakes hold the arms).  approach: each hand from where it is to its pre-grasp pose (3 cm outside the
box face, at the height of its centre) and in to the face (HandApproach along HandPath, at
approach_speed), then carry: CooperativeCarry from that instant (squeeze set at once, 1 s still, the
lift, the travel and back, set down; then it keeps holding the box on the table).  The geometry is
control.cooperative.plan_grasp's from the box's pose and `box_size` and each arm's base pose
(`<ns>.base_xyz` / `base_rpy`, by default the cell sim's facing pair).

Timing.  The control thread (nodes/control_path.py) waits on the first arm's joint states and takes
the second arm's newest at each step; the law's clock is the first arm's state stamp (sim time under
the cell sim).  If the first arm goes silent, a wake-up 2 x stale_after later steps with the clock's
time (/clock).  A state with joints missing or non-finite values is dropped with a warning (that
arm's state then goes stale).  An arm whose state is older than `stale_after` is lost: the law holds
the other hand where it is (its feed-forward ramped out) and ~/phase says hold; the node stays there
until restarted.  Commands are clipped to the URDF effort limits.
"""
import math
import sys
import time

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

from ..control.cooperative import CarryObject, CarryTrajectory, CooperativeCarry, HandApproach, HandPath, plan_grasp
from .cell_sim import default_base
from .control_path import ControlPath, TakeSubscription
from .runner import run
from .sim_node import load_model

GAP_WARN = 0.1                 # [s] monotonic: a longer gap between two commands is logged (WARN, 1 s throttle)

PARAMS = {
    "arms": (["left", "right"], "the two arm namespaces"),
    "box_pose_topic": ("/cell/box_pose", "geometry_msgs/PoseStamped of the box (its start pose)"),
    "box_size": ([0.3, 0.3, 0.3], "[m] edge lengths"),
    "box_mass": (1.0, "[kg] (given: its inertia is a uniform box's)"),
    "squeeze": (30.0, "[N] internal force set value"),
    "lift": (0.05, "[m]"),
    "travel": ([0.0, 0.2, 0.0], "[m] world, from the lifted pose and back"),
    "speed": (0.1, "[m/s] peak speed of the carry's legs"),
    "approach_speed": (0.1, "[m/s] peak speed of the hands' approach"),
    "stale_after": (0.05, "[s] an arm whose state is older is lost"),
    "hand_frame": ("panda_hand_tcp", "grasp frame of each arm"),
}
ARM_PARAMS = {
    "robot": ("panda", "example-robot-data name"),
    "urdf_path": ("", "URDF file; overrides robot"),
    "joints": (Parameter.Type.STRING_ARRAY, "command order (default: model order)"),
    "base_xyz": (Parameter.Type.DOUBLE_ARRAY, "[m] (default: the cell sim's facing pair)"),
    "base_rpy": (Parameter.Type.DOUBLE_ARRAY, "[rad]"),
    "contact_offset": (0.06, "[m] grasp frame origin outside the box face (the cell's link capsule radius)"),
}


def _rpy(rpy):
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr], [-sp, cp * sr, cp * cr]])


def _quat(x, y, z, w):
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


class CarryNode(Node):
    def __init__(self, node_name="carry_node", **kw):
        super().__init__(node_name, **kw)
        for k, (default, desc) in PARAMS.items():
            self.declare_parameter(k, default)
        gp = lambda k: self.get_parameter(k).value  # noqa: E731
        self.ns = list(gp("arms"))
        if len(self.ns) != 2:
            raise ValueError(f"arms: two namespaces, got {self.ns}")
        self.models, self.bases, self.offsets, self.order = [], [], [], []
        for i, ns in enumerate(self.ns):
            for k, (default, desc) in ARM_PARAMS.items():
                self.declare_parameter(f"{ns}.{k}", default)
            def ap(k, ns=ns):
                try:
                    return self.get_parameter(f"{ns}.{k}").value
                except ParameterUninitializedException:
                    return None
            model = load_model(ap("robot"), ap("urdf_path"))
            xyz, rpy = default_base(i)
            xyz = list(ap("base_xyz") or xyz)
            rpy = list(ap("base_rpy") or rpy)
            joints = list(ap("joints") or model.joint_names)
            if sorted(joints) != sorted(model.joint_names):
                raise ValueError(f"{ns}.joints must list the model's joints {model.joint_names}, got {joints}")
            self.models.append(model)
            self.bases.append((_rpy(rpy), np.array(xyz, float)))
            self.offsets.append(float(ap("contact_offset")))
            self.order.append([model.joint_names.index(j) for j in joints])
        self.p = {k: gp(k) for k in PARAMS}
        self.stale_after = float(self.p["stale_after"])
        self.lim = [m.effort_limits for m in self.models]
        self.state = [None, None]          # (q, v, t) per arm, model order
        self._names = [None, None]         # the last JointState name list and its index map
        self._idx = [None, None]
        self.box = None
        self.phase = None
        self.law = None
        self.approach = None
        self.warned = 0.0
        self.steps, self.step_time, self.step_times = 0, 0.0, []
        self._last_sent = None             # monotonic time of the last commands (a gap is logged)
        self._via = "joint states"         # what the step now running was woken by
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self.phase_pub = self.create_publisher(String, "~/phase", latched)
        self.pubs = [self.create_publisher(Float64MultiArray, f"/{ns}/effort_controller/commands", 1)
                     for ns in self.ns]
        # the box's start pose only (the cell sim sends it at up to 1 kHz: unsubscribed once it came)
        self._box_sub = self.create_subscription(PoseStamped, self.p["box_pose_topic"], self._on_box, 1)
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
        self.subs = [TakeSubscription(self, JointState, f"/{ns}/joint_states", qos) for ns in self.ns]
        self._msg = Float64MultiArray()
        self._set_phase("waiting")
        self.path = ControlPath(self, self.subs[0], self._on_state, on_wakeup=self._on_wakeup,
                                on_error=self._on_error, name="carry")
        self.path.start()
        self.path.wake_at(time.monotonic() + 2 * self.stale_after)

    # ---- inputs
    def _on_box(self, msg):
        if self.box is None:
            o, p = msg.pose.orientation, msg.pose.position
            self.box = (_quat(o.x, o.y, o.z, o.w), np.array([p.x, p.y, p.z]))
            self.destroy_subscription(self._box_sub)

    def _convert(self, i, msg):
        if msg.name != self._names[i]:
            try:
                idx = [list(msg.name).index(j) for j in self.models[i].joint_names]
            except ValueError:
                self._warn(f"/{self.ns[i]}/joint_states lacks joints of {self.models[i].joint_names}: dropped")
                return None
            self._names[i], self._idx[i] = list(msg.name), idx
        idx = self._idx[i]
        try:
            q = np.asarray(msg.position, float)[idx]
            v = np.asarray(msg.velocity, float)[idx]
        except IndexError:
            self._warn(f"/{self.ns[i]}/joint_states: position / velocity shorter than its names: dropped")
            return None
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(v))):
            self._warn(f"/{self.ns[i]}/joint_states: non-finite position or velocity: dropped")
            return None
        t = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        return q, v, t

    def _warn(self, text):
        now = time.monotonic()
        if now - self.warned > 1.0:
            self.warned = now
            self.get_logger().warning(text)

    def _on_error(self, where, e):
        self.get_logger().error(f"carry step failed in {where}: {e!r}")

    # ---- the step
    def _on_state(self, msg, now, last):
        s = self._convert(0, msg)
        if s is not None:
            self.state[0] = s
        if not last:
            return
        m = None
        while True:                                    # the second arm's newest state
            x = self.subs[1].take()
            if x is None:
                break
            m = x
        if m is not None:
            s = self._convert(1, m)
            if s is not None:
                self.state[1] = s
        if self.state[0] is not None:
            c0 = time.perf_counter()
            self._step(self.state[0][2])
            dt = time.perf_counter() - c0
            self.steps += 1
            self.step_time += dt
            if len(self.step_times) < 100000:
                self.step_times.append(dt)
        self.path.wake_at(time.monotonic() + 2 * self.stale_after)

    def _on_wakeup(self, now):
        """The first arm silent: step on the clock (the law sees that arm stale and holds)."""
        t = self.get_clock().now().nanoseconds * 1e-9
        if self.phase in ("approach", "carry", "hold"):
            self._via = f"a wake-up, the clock at {t:.3f}"
            self._step(t)
            self._via = "joint states"
        self.path.wake_at(time.monotonic() + 2 * self.stale_after)

    def _step(self, t):
        if self.phase == "waiting":
            if self.box is None or any(s is None for s in self.state):
                return
            self._plan(t)
        st = [s if s is not None else None for s in self.state]
        if self.phase == "approach":
            if any(s is None or t - s[2] > self.stale_after for s in st):
                self._start_carry(t)                    # the law sees the stale arm and holds
            elif t >= self.approach.end + 0.2:
                self._start_carry(t)
            else:
                self._publish(self.approach.compute(t, st))
                return
        taus = self.law.compute(t, st)
        if any(self.law.lost) and self.phase != "hold":
            self._set_phase("hold")
            self.get_logger().warning(f"arm {[self.ns[i] for i in range(2) if self.law.lost[i]]} lost "
                                      f"(state older than {self.stale_after} s): holding the other hand")
        self._publish([None if self.law.lost[i] else taus[i] for i in range(2)])

    def _publish(self, taus):
        now = time.monotonic()
        if self._last_sent is not None and now - self._last_sent > GAP_WARN:
            # (which side stalled: this node, woken late or not at all, or the commands' way to the sim)
            st = [f"{self.ns[i]} t={s[2]:.3f}" if s is not None else f"{self.ns[i]} none" for i, s in enumerate(self.state)]
            self.get_logger().warning(f"commands resumed after {now - self._last_sent:.3f} s without any "
                                      f"(this step woken by {self._via}; newest states: {', '.join(st)})",
                                      throttle_duration_sec=1.0)
        self._last_sent = now
        for i, tau in enumerate(taus):
            if tau is None:
                continue
            tau = np.clip(tau, -self.lim[i], self.lim[i])
            self._msg.data = [float(x) for x in tau[self.order[i]]]
            self.pubs[i].publish(self._msg)

    def _plan(self, t):
        p = self.p
        arms, qs, pre = plan_grasp(self.models, self.bases, self.box, p["box_size"], self.offsets,
                                   hand_frame=p["hand_frame"])
        for a, ns in zip(arms, self.ns):
            a.name = ns
        self.arms = arms
        R_o, p_o = self.box
        up = p_o + [0.0, 0.0, float(p["lift"])]
        self.traj = CarryTrajectory(p_o, R_o, [up, up + np.asarray(p["travel"], float), up, p_o],
                                    max_speed=float(p["speed"]))
        self.obj = CarryObject.box(float(p["box_mass"]), p["box_size"])
        paths = []
        for i, a in enumerate(arms):
            k = a.kinematics(self.state[i][0], self.state[i][1], dynamics=False)
            R_g, p_pre = pre[i]
            paths.append(HandPath([(k.R, k.p), (R_g, p_pre), (R_g, p_pre + 0.03 * R_g[:, 1])], t0=t + 0.2,
                                  max_speed=float(p["approach_speed"])))
        self.approach = HandApproach(arms, paths, [s[0] for s in self.state])
        self._set_phase("approach")

    def _start_carry(self, t):
        self.law = CooperativeCarry(self.arms, self.obj, self.traj, squeeze=float(self.p["squeeze"]),
                                    stale_after=self.stale_after)
        self.law.reset(t, [self.state[i][:2] for i in range(2)])
        self._set_phase("carry")

    def _set_phase(self, phase):
        if phase != self.phase:
            self.phase = phase
            self.phase_pub.publish(String(data=phase))
            self.get_logger().info(f"phase: {phase}")

    def destroy_node(self):
        self.path.stop()
        for s in self.subs:
            s.destroy()
        return super().destroy_node()


def main(args=None):
    def report(node):
        st = np.array(node.step_times or [0.0]) * 1e6
        node.get_logger().info(f"{node.steps} steps, us per step: mean {st.mean():.0f}, median "
                               f"{np.median(st):.0f}, p99 {np.percentile(st, 99):.0f}, max {st.max():.0f}; "
                               f"{node.path.superseded} states superseded, phase {node.phase}")
    return run(CarryNode, args=args, on_exit=report, exit_process=True)


if __name__ == "__main__":
    sys.exit(main())
