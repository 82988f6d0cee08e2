"""The torque controller node's inputs other than the joint states and the F/T wrench (those go to its
control thread): the references (~/joint_trajectory, ~/target_joint_state, ~/target_pose,
~/target_twist, ~/cartesian_trajectory, ~/target_wrench), each converted from its message on the
executor thread, before the node's lock is taken, then handed to the ControlLoop under it (a
conversion error is counted as rejected.<topic> with its reason).  The two trajectories are taken as
bytes and read by nodes/cdr_trajectory.py (rclpy's message objects for 1000 points cost 20-60 ms of
the interpreter the control thread shares; another encapsulation, or bytes that reader refuses, go
through rclpy's deserialization).  A mixin of TorqueControllerNode."""
import time

import numpy as np
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from geometry_msgs.msg import PoseStamped, Transform, Twist, TwistStamped, WrenchStamped
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory as JointTrajectoryMsg
from trajectory_msgs.msg import JointTrajectoryPoint, MultiDOFJointTrajectory, MultiDOFJointTrajectoryPoint

from ...control import CartesianReference, JointReference, JointTrajectory
from ..cartesian_refs import cartesian_trajectory_from_msg, twist_from_msg
from ..cdr_trajectory import read_joint_trajectory, read_multidof_trajectory
from ..common import map_joint_values, pose_to_rp, trajectory_arrays, wrench_to_array

# the joint-state input and the command output take their QoS from parameters (qos_*, output_qos_*).
# QOS_SENSOR is the wrench input's; QOS_LATCHED the robot description's (and ~/payload_estimate's).
QOS_SENSOR = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
QOS_REFERENCE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
QOS_LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
TARGET_TWIST_MAX_AGE = 0.1       # s: a ~/target_twist older than this is not paired with a ~/target_pose


def warm_type_supports():
    """Serialize and deserialize one message of every reference type (with a point each), so that the
    first reference a user sends does not pay rclpy's lazy import of the nested types' conversion code
    (50-80 ms for a MultiDOFJointTrajectory) in the executor while the control thread waits."""
    jt = JointTrajectoryMsg(points=[JointTrajectoryPoint(positions=[0.0], velocities=[0.0])])
    mt = MultiDOFJointTrajectory(points=[MultiDOFJointTrajectoryPoint(
        transforms=[Transform()], velocities=[Twist()], accelerations=[Twist()])])
    for m in (jt, mt, PoseStamped(), TwistStamped(), WrenchStamped(), JointState()):
        deserialize_message(serialize_message(m), type(m))


class ReferenceInputs:
    """The subscription callbacks of the references (see the module docstring)."""

    def _reference(self, what, convert):
        """convert() -> a reference for the loop, or ValueError (counted as rejected.<what>).  The
        conversion runs before the lock is taken: the control thread steps on meanwhile."""
        c = self.c
        if c is None:
            return
        lost = self._partner_lost(c)                   # a cell's partner arm lost: holding (partners.py)
        if lost:
            with self._lock:
                if c is self.c:
                    c.loop.references.reject(what, lost, time.monotonic())
            return
        try:
            ref = convert(c)
        except ValueError as e:
            with self._lock:
                if c is self.c:
                    c.loop.references.reject(what, str(e), time.monotonic())
            return
        with self._lock:
            if c is not self.c:
                return
            if what == "target_wrench":
                c.loop.references.set_target_wrench(ref, what, time.monotonic())
            else:
                c.loop.set_reference(ref, what, time.monotonic())

    def _read_trajectory(self, raw, read, msg_type):
        """Serialized bytes -> TrajectoryData (cdr_trajectory), or the rclpy message when that reader
        does not take them (another encapsulation; a ValueError, counted as
        cdr_reference_fallbacks: rclpy decides).  ValueError when rclpy cannot read them either."""
        try:
            d = read(raw)
        except ValueError:
            d = None
            self.cdr_reference_fallbacks += 1
        if d is not None:
            return d
        try:
            return deserialize_message(raw, msg_type)
        except Exception as e:                      # noqa: BLE001 (whatever rclpy raises on bad bytes)
            raise ValueError(f"unreadable message ({e})") from None

    @staticmethod
    def _header(msg):
        """(stamp sec, nanosec, frame_id) of a message or of a TrajectoryData."""
        if hasattr(msg, "times"):
            return msg.sec, msg.nanosec, msg.frame_id
        h = msg.header
        return h.stamp.sec, h.stamp.nanosec, h.frame_id

    def _trajectory_stamp(self, msg, last_time, what):
        """header.stamp as ros2_controllers' JointTrajectoryController reads it, on this node's clock
        (sim time with use_sim_time): zero = start now (None); else the start time of the points,
        ValueError when the whole trajectory is already in the past."""
        sec, nsec, _ = self._header(msg)
        if not (sec or nsec):
            return None
        stamp = sec + 1e-9 * nsec
        now = self._clock_handle.get_now().nanoseconds * 1e-9
        if stamp + last_time < now:
            raise ValueError(f"{what}: it ends in the past (header.stamp {stamp:.3f} s + last "
                             f"time_from_start {last_time:.3f} s < now {now:.3f} s on the node's clock); "
                             "stamp it 0 to start on receipt")
        return stamp

    def _on_trajectory(self, raw):
        def convert(c):
            if c.cartesian:
                raise ValueError(f"{c.law_name} takes no joint trajectory")
            msg = self._read_trajectory(raw, read_joint_trajectory, JointTrajectoryMsg)
            times, P, V, A = trajectory_arrays(list(c.model.joint_names), msg)
            tr = JointTrajectory(times, P, V, A, lower=c.model.lower_limits, upper=c.model.upper_limits)
            tr.stamp = self._trajectory_stamp(msg, float(times[-1]), "joint_trajectory")
            return tr
        self._reference("joint_trajectory", convert)

    def _on_target_joint_state(self, msg):
        def convert(c):
            if c.cartesian:
                raise ValueError(f"{c.law_name} takes no joint reference")
            names = list(c.model.joint_names)
            q = map_joint_values(names, msg.name, msg.position, "target_joint_state position")
            v = (map_joint_values(names, msg.name, msg.velocity, "target_joint_state velocity")
                 if len(msg.velocity) else None)
            return JointReference(q, v)
        self._reference("target_joint_state", convert)

    def _check_base_frame(self, c, frame_id, what):
        ok = ("", "world", c.model.frame_names[0])
        if frame_id not in ok:
            raise ValueError(f"{what}: frame {frame_id!r} is not the robot base "
                             f"({c.model.frame_names[0]!r}); no tf lookup in this node")

    def _on_target_pose(self, msg):
        def convert(c):
            self._check_base_frame(c, msg.header.frame_id, "target_pose")
            R, p = pose_to_rp(msg.pose)
            if not c.cartesian:                # a joint law: the pose of ik.frame, through the IK
                return c.loop.references.cartesian_goal(CartesianReference(R, p))
            tw = self._target_twist            # the latest ~/target_twist, if at most 0.1 s old
            if tw is not None and time.monotonic() - tw[0] <= TARGET_TWIST_MAX_AGE:
                return CartesianReference(R, p, twist=tw[1])
            return CartesianReference(R, p)
        self._reference("target_pose", convert)

    def _on_target_twist(self, msg):
        """Stored (base-frame axes, [linear; angular]) and sent with the next ~/target_pose."""
        c = self.c
        if c is None:
            return
        try:
            if not c.cartesian:
                raise ValueError(f"{c.law_name} takes no Cartesian reference")
            self._check_base_frame(c, msg.header.frame_id, "target_twist")
            tw = twist_from_msg(msg)
        except ValueError as e:
            self._target_twist = None
            with self._lock:
                c.loop.references.reject("target_twist", str(e), time.monotonic())
            return
        self._target_twist = (time.monotonic(), tw)

    def _on_cartesian_trajectory(self, raw):
        def convert(c):
            msg = self._read_trajectory(raw, read_multidof_trajectory, MultiDOFJointTrajectory)
            self._check_base_frame(c, self._header(msg)[2], "cartesian_trajectory")
            frame = c.law.frame if c.cartesian else (c.loop.param("ik.frame") or c.model.frame_names[-1])
            names = list(msg.joint_names)
            if names and frame not in names:
                raise ValueError(f"cartesian_trajectory: joint_names {names} do not name the controlled "
                                 f"frame {frame!r} (empty: the controlled frame)")
            tr = cartesian_trajectory_from_msg(msg, names.index(frame) if names else 0)
            tr.stamp = self._trajectory_stamp(msg, float(tr.times[-1]), "cartesian_trajectory")
            return tr if c.cartesian else c.loop.references.cartesian_goal(tr)     # a joint law: through the IK
        self._reference("cartesian_trajectory", convert)

    def _on_target_wrench(self, msg):
        def convert(c):
            if not c.cartesian:
                raise ValueError(f"{c.law_name} takes no wrench reference")
            self._check_base_frame(c, msg.header.frame_id, "target_wrench")
            w = wrench_to_array(msg.wrench)
            if not np.all(np.isfinite(w)):
                raise ValueError("target_wrench: values must be finite")
            return w
        self._reference("target_wrench", convert)
