"""What the torque controller node publishes per control step, preallocated at configure and published
from its control thread: the command (a serialized std_msgs/Float64MultiArray, nodes/cdr.py), and
when wanted ~/joint_command (sensor_msgs/JointState efforts), ~/state (only while it has subscribers),
the Cartesian law's ~/current_pose, ~/desired_pose and ~/pose_error (the same) and the momentum observer's ~/external_wrench, ~/external_torque and ~/collision; and, from the
executor, the safety envelope's limits as markers on ~/safety_markers (latched).

    out = Outputs(node, loop, command_topic, qos_out, publish_joint_command)
    out.command(tau, stamp_ns, safe, publish_state)    # tau in model order
    out.observer(loop, now, stamp_ns, safe)            # after a control step
    out.safety_markers(loop, frame_id)                 # at configure and after a safety.* change
    out.destroy()
"""
import time
from array import array

import numpy as np
import pinocchio as pin
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from visualization_msgs.msg import Marker, MarkerArray

from ..cdr import Float64ArrayCdr

STATE_SUBS_CHECK_PERIOD = 0.1        # s between get_subscription_count() calls on ~/state
QOS_COLLISION = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)


def bind_array(msg, field, n):
    """Give msg.<field> (float64[]) n zeros and return a numpy view writing into the message's own
    array (the setter may copy, so the view is taken from what the message holds)."""
    setattr(msg, field, array("d", bytes(8 * n)))
    return np.frombuffer(getattr(msg, field), dtype=np.float64)


class StateOutput:
    """~/state (sensor_msgs/JointState, one per control step: position = the law's reference, velocity
    = its error, effort = the command, all in `joints` order; position/velocity NaN while the safe
    command is out), filled and published only while it has subscribers (counted every
    STATE_SUBS_CHECK_PERIOD s).  The controller node and the Franka bridge's in-process loop."""

    def __init__(self, node, loop):
        self.perm = loop.perm
        self.pub = node.create_publisher(JointState, "~/state", 10)
        self.msg = JointState(name=list(loop.joints))
        self.eff = bind_array(self.msg, "effort", loop.n)
        self.pos = bind_array(self.msg, "position", 0)
        self.vel = bind_array(self.msg, "velocity", 0)
        self.subs, self.checked = 0, -float("inf")

    def wanted(self):
        now = time.monotonic()
        if now - self.checked >= STATE_SUBS_CHECK_PERIOD:
            self.checked = now
            self.subs = self.pub.get_subscription_count()
        return self.subs > 0

    def publish(self, cmd, sec, nanosec, info, safe):
        """cmd in `joints` order; info: the law's (reference, error) in model order."""
        sm = self.msg
        stamp = sm.header.stamp
        stamp.sec, stamp.nanosec = sec, nanosec
        self.pos = self._fill(sm, "position", self.pos, info.reference, safe)
        self.vel = self._fill(sm, "velocity", self.vel, info.error, safe)
        self.eff[:] = cmd
        self.pub.publish(sm)

    def _fill(self, msg, field, view, x, safe):
        """msg.<field> <- x (per-joint vectors reordered to `joints` order; NaN while the safe command
        is out).  Rebinds the preallocated array only when the size changes."""
        x = np.asarray(x, dtype=float)
        if view.shape != x.shape:
            view = bind_array(msg, field, x.size)
        if safe:
            view.fill(np.nan)
        elif x.shape == self.perm.shape:
            x.take(self.perm, out=view)
        else:
            view[:] = x
        return view


class PoseStateOutput:
    """The Cartesian law's state on messages made for it (as cartesian_controllers publishes its
    current_pose), in the model's base frame, stamped like the command, published only while each has
    subscribers: ~/current_pose (geometry_msgs/PoseStamped: the controlled frame's pose, from the law's
    reference and error), ~/desired_pose (PoseStamped: the reference being followed) and ~/pose_error
    (geometry_msgs/TwistStamped: linear p_d - p [m], angular log3(R_d R^T) [rad], base axes).  Nothing
    while the safe command is out (the law's values are stale then)."""

    def __init__(self, node, loop):
        frame = loop.model.frame_names[0]
        self.pubs = {}
        for name, typ in (("current_pose", PoseStamped), ("desired_pose", PoseStamped), ("pose_error", TwistStamped)):
            msg = typ()
            msg.header.frame_id = frame
            self.pubs[name] = (node.create_publisher(typ, f"~/{name}", 10), msg)
        self.subs, self.checked = {k: 0 for k in self.pubs}, -float("inf")

    def wanted(self):
        now = time.monotonic()
        if now - self.checked >= STATE_SUBS_CHECK_PERIOD:
            self.checked = now
            self.subs = {k: pub.get_subscription_count() for k, (pub, _) in self.pubs.items()}
        return any(self.subs.values())

    @staticmethod
    def _pose(msg, p, q):
        pos, ori = msg.pose.position, msg.pose.orientation
        pos.x, pos.y, pos.z = (float(x) for x in p)
        ori.x, ori.y, ori.z, ori.w = (float(x) for x in q)

    def publish(self, sec, nanosec, info):
        ref, err = np.asarray(info.reference, dtype=float), np.asarray(info.error, dtype=float)
        if ref.shape != (7,) or err.shape != (6,):
            return
        p_d, q_d = ref[:3], ref[3:]
        for name, (pub, msg) in self.pubs.items():
            if not self.subs[name]:
                continue
            msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
            if name == "desired_pose":
                self._pose(msg, p_d, q_d)
            elif name == "pose_error":
                tw = msg.twist
                tw.linear.x, tw.linear.y, tw.linear.z = (float(x) for x in err[:3])
                tw.angular.x, tw.angular.y, tw.angular.z = (float(x) for x in err[3:])
            else:                          # R = exp3(e_r)^T R_d, p = p_d - e_p
                R_d = pin.Quaternion(float(q_d[3]), float(q_d[0]), float(q_d[1]), float(q_d[2])).toRotationMatrix()
                R = pin.exp3(err[3:]).T @ R_d
                self._pose(msg, p_d - err[:3], pin.Quaternion(R).coeffs())
            pub.publish(msg)

    def destroy(self, node):
        for pub, _ in self.pubs.values():
            node.destroy_publisher(pub)


class Outputs:
    """See the module docstring.  `cmd_np` is the command as last published, in `joints` order."""

    def __init__(self, node, loop, command_topic, qos_out, publish_joint_command):
        self.node = node
        n = loop.n
        self.perm = loop.perm
        joints = list(loop.joints)
        self.cmd = Float64ArrayCdr(n, "joints")
        self.cmd_np = self.cmd.data
        self.cmd_pub = node.create_publisher(Float64MultiArray, command_topic, qos_out)
        # the rcl publisher itself: Publisher.publish adds a type test and the handle's context
        # manager per message; the node stops its control thread before it destroys this publisher
        self._publish_raw = self.cmd_pub.handle.publish_raw
        self.state = StateOutput(node, loop)
        self.state_pub = self.state.pub
        self.pose_state = PoseStateOutput(node, loop) if getattr(loop, "cartesian", False) else None
        self.jc_pub = self.jc_msg = self.jc_eff = None
        if publish_joint_command:
            self.jc_pub = node.create_publisher(JointState, "~/joint_command", qos_out)
            self.jc_msg = JointState(name=joints)
            self.jc_eff = bind_array(self.jc_msg, "effort", n)
        self.markers_pub = node.create_publisher(MarkerArray, "~/safety_markers", QOS_COLLISION)
        self.obs_wrench_pub = self.obs_torque_pub = self.collision_pub = None
        obs = loop.observer
        if obs is not None:
            self.obs_wrench_pub = node.create_publisher(WrenchStamped, "~/external_wrench", 1)
            self.obs_torque_pub = node.create_publisher(JointState, "~/external_torque", 1)
            self.collision_pub = node.create_publisher(Bool, "~/collision", QOS_COLLISION)
            self.obs_wrench_msg = WrenchStamped()
            self.obs_wrench_msg.header.frame_id = obs.frame
            self.obs_torque_msg = JointState(name=joints)
            self.obs_last_pub = -float("inf")
            self.collision_pub.publish(Bool(data=False))

    def command(self, tau, stamp_ns, safe, publish_state, info):
        """tau (model order) -> the command in `joints` order on command_topic; ~/joint_command and
        ~/state too when enabled (~/state only while it has subscribers)."""
        tau.take(self.perm, out=self.cmd_np)
        self._publish_raw(self.cmd.bytes())
        jc = self.jc_pub is not None
        state = publish_state and self.state.wanted()
        pose = publish_state and not safe and self.pose_state is not None and self.pose_state.wanted()
        if not (jc or state or pose):
            return
        sec, nanosec = divmod(stamp_ns, 1_000_000_000)
        if pose:
            self.pose_state.publish(sec, nanosec, info)
        if jc:
            stamp = self.jc_msg.header.stamp
            stamp.sec, stamp.nanosec = sec, nanosec
            self.jc_eff[:] = self.cmd_np
            self.jc_pub.publish(self.jc_msg)
        if state:
            self.state.publish(self.cmd_np, sec, nanosec, info, safe)

    def observer(self, loop, now, stamp_ns, safe):
        """After a control step: ~/collision on a change, the wrench and r at observer.publish_rate."""
        if self.obs_wrench_pub is None or safe or loop.estimation.obs_last is None:
            return
        obs = loop.observer
        if loop.estimation.obs_edge:
            self.collision_pub.publish(Bool(data=bool(obs.collision)))
        rate = loop.param("observer.publish_rate")
        if rate > 0 and now - self.obs_last_pub < 1.0 / rate:
            return
        self.obs_last_pub = now
        sec, nanosec = divmod(stamp_ns, 1_000_000_000)
        w = loop.estimation.observer_wrench(stamp_ns * 1e-9)
        m = self.obs_wrench_msg
        m.header.stamp.sec, m.header.stamp.nanosec = sec, nanosec
        f, t = m.wrench.force, m.wrench.torque
        f.x, f.y, f.z, t.x, t.y, t.z = (float(x) for x in w)
        self.obs_wrench_pub.publish(m)
        tm = self.obs_torque_msg
        tm.header.stamp.sec, tm.header.stamp.nanosec = sec, nanosec
        tm.effort = obs.r[loop.perm].tolist()
        self.obs_torque_pub.publish(tm)

    def safety_markers(self, loop, frame_id):
        """The envelope's planes (thin squares) and boxes (translucent cubes) as a MarkerArray; the
        markers of the last publication are deleted first (DELETEALL)."""
        msgs = [Marker(action=Marker.DELETEALL)]
        for k, shape in enumerate(loop.envelope.shapes()):
            m = Marker(ns="safety_envelope", id=k, type=Marker.CUBE, action=Marker.ADD)
            m.header.frame_id = frame_id
            m.frame_locked = True
            if shape[0] == "plane":
                _, point, n, size = shape
                m.scale.x = m.scale.y = float(size)
                m.scale.z = 0.002
                z = np.array([0.0, 0.0, 1.0])              # the square's normal z turned onto n
                axis = np.cross(z, n)
                s_, c_ = np.linalg.norm(axis), float(z @ n)
                axis = axis / s_ if s_ > 1e-12 else np.array([1.0, 0.0, 0.0])
                half = 0.5 * np.arctan2(s_, c_)
                qx, qy, qz = np.sin(half) * axis
                m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z = float(qx), float(qy), float(qz)
                m.pose.orientation.w = float(np.cos(half))
                center = point
                m.color.r, m.color.g, m.color.b, m.color.a = 1.0, 0.4, 0.0, 0.35
            else:
                _, center, extent = shape
                m.scale.x, m.scale.y, m.scale.z = (float(x) for x in extent)
                m.pose.orientation.w = 1.0
                m.color.r, m.color.g, m.color.b, m.color.a = 0.0, 0.6, 1.0, 0.12
            m.pose.position.x, m.pose.position.y, m.pose.position.z = (float(x) for x in center)
            msgs.append(m)
        self.markers_pub.publish(MarkerArray(markers=msgs))

    def flush(self, timeout=0.5):
        """Wait (bounded) until reliable subscribers have acknowledged the last commands."""
        from rclpy.duration import Duration
        for pub in (self.cmd_pub, self.jc_pub):
            if pub is not None:
                try:
                    pub.wait_for_all_acked(Duration(seconds=timeout))
                except Exception:                      # noqa: BLE001 (best effort on the way out)
                    pass

    def destroy(self):
        if self.pose_state is not None:
            self.pose_state.destroy(self.node)
        for pub in (self.cmd_pub, self.state_pub, self.jc_pub, self.obs_wrench_pub, self.obs_torque_pub,
                    self.collision_pub, self.markers_pub):
            if pub is not None:
                self.node.destroy_publisher(pub)
