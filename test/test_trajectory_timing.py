"""Trajectory timing the ROS way (issue 24.3), over DDS, on a clock the test controls: the controller
runs with use_sim_time and this test publishes /clock and the joint states in lockstep (2 ms of sim
time per 2 ms of wall time), so every time below is sim time and exact to a step.

header.stamp, as ros2_controllers' JointTrajectoryController reads it (on the node's clock):
- zero: start on receipt (the other tests of the package);
- 0.5 s in the future: the reference (the controller's ~/state position) stays where it is until the
  stamp, then moves, and reaches the last point at stamp + its time_from_start;
- 0.5 s in the past: the part already due is skipped: the reference starts at once and reaches the
  last point at stamp + time_from_start, 0.5 s after receipt instead of 1.0 s;
- entirely in the past: rejected with its reason (rejected.joint_trajectory on /diagnostics), the
  reference does not move.
A MultiDOFJointTrajectory naming another frame than the controlled one is rejected with its reason;
naming it, with a stamp in the future, it starts then.  Expected times come from the stamps and
time_from_start this test sets."""
import threading
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import Transform  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from trajectory_msgs.msg import (JointTrajectory, JointTrajectoryPoint, MultiDOFJointTrajectory,  # noqa: E402
                                 MultiDOFJointTrajectoryPoint)

from robustness_harness import ARM, Q0, rig, wait_for  # noqa: E402,F401 (rig: the fixture)

pytestmark = pytest.mark.slow

STEP = 0.002              # s of sim time per step (500 Hz: this test process also runs the controller
                          # and records its commands and ~/state; at 1 kHz it fell behind on a slow host)
T0 = 1000.0               # s: the sim clock's start
DQ = 0.05                 # rad on joint 1 over DURATION (rest to rest): a past stamp's approach to the
                          # last point (0.5 s) stays within the laws' approach bounds (5 rad/s^2): no delay
DURATION = 1.0
TOL = 0.025               # s of sim time, upper sides only: the node reads /clock on its executor thread
                          # and the joint states on its control thread, so its clock can trail the state
                          # by a few steps on a loaded host (seen: 5 ms); never ahead (the lower bounds
                          # are exact: nothing moves before its stamp)


class SimClock:
    """/clock and the joint states at q, one sim STEP per STEP of wall time; ~/state recorded."""

    def __init__(self, rig, node):
        self.rig, self.t = rig, T0
        self.lock = threading.Lock()
        self.states = []                      # (sim stamp, position of ~/state)
        self.pub_clock = rig.h.create_publisher(Clock, "/clock", 10)
        rig.h.create_subscription(JointState, f"/{node.get_name()}/state", self._on_state, 10000)
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _on_state(self, msg):
        with self.lock:
            self.states.append((msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec, np.array(msg.position)))

    def _run(self):
        msg = self.rig.js(ARM, Q0)
        clock = Clock()
        while not self._stop.is_set():
            with self.lock:
                self.t += STEP
                t = self.t
            sec, nsec = divmod(int(round(t * 1e9)), 1_000_000_000)
            clock.clock.sec, clock.clock.nanosec = sec, nsec
            self.pub_clock.publish(clock)
            msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nsec
            self.rig.js_pub.publish(msg)
            time.sleep(STEP)

    def now(self):
        with self.lock:
            return self.t

    def latest(self):
        with self.lock:
            return self.states[-1] if self.states else None

    def since(self, t):
        with self.lock:
            return [(s, p) for s, p in self.states if s >= t]

    def start(self):
        self._th.start()
        return self

    def stop(self):
        self._stop.set()
        self._th.join(10)


def stamp_msg(msg, t):
    sec, nsec = divmod(int(round(t * 1e9)), 1_000_000_000)
    msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nsec


def joint_traj(stamp):
    msg = JointTrajectory(joint_names=list(ARM))
    for t, dq in ((0.0, 0.0), (DURATION, DQ)):
        q = Q0.copy()
        q[0] += dq
        msg.points.append(JointTrajectoryPoint(positions=q.tolist(), velocities=[0.0] * 7,
                                               accelerations=[0.0] * 7))
        msg.points[-1].time_from_start.sec, msg.points[-1].time_from_start.nanosec = int(t), int((t % 1) * 1e9)
    if stamp is not None:
        stamp_msg(msg, stamp)
    return msg


def motion_times(clk, t_from, ref0, axis, end_value, moved=1e-10):
    """(sim time of the first ~/state whose reference left ref0 on `axis`, of the first at end_value)."""
    start = end = None
    for s, p in clk.since(t_from):
        if p.size <= axis or not np.isfinite(p[axis]):
            continue
        if start is None and abs(p[axis] - ref0) > moved:
            start = s
        if end is None and abs(p[axis] - end_value) < 1e-9:
            end = s
    return start, end


def send_and_time(rig, clk, pub, msg_of_stamp, offset, ref0, axis, end_value):
    t_now = clk.now()
    stamp = None if offset is None else t_now + offset
    pub.publish(msg_of_stamp(stamp))
    wait_for(lambda: motion_times(clk, t_now, ref0, axis, end_value)[1] is not None, timeout=60.0,
             what="the reference reaching the trajectory's last point")
    start, end = motion_times(clk, t_now, ref0, axis, end_value)
    return t_now, stamp, start, end


def test_joint_trajectory_header_stamp(rig):
    node = rig.controller(controller="joint_impedance", use_sim_time=True, watchdog_timeout=2.0,
                          ramp_time=0.0, torque_rate_limit=1e9)
    clk = SimClock(rig, node).start()
    try:
        wait_for(lambda: len(clk.since(T0 + 0.05)) > 20, what="~/state on the sim clock")
        pub = rig.pub(JointTrajectory, f"/{node.get_name()}/joint_trajectory")
        # 0.5 s in the future: still until the stamp, at the last point at stamp + DURATION
        t_now, stamp, start, end = send_and_time(rig, clk, pub, joint_traj, 0.5, Q0[0], 0, Q0[0] + DQ)
        print(f"\nfuture stamp {stamp - t_now:+.3f} s: moved at {start - stamp:+.4f} s, last point at "
              f"{end - stamp:+.4f} s from the stamp")
        assert stamp <= start <= stamp + TOL, (start - stamp)
        assert stamp + DURATION - TOL <= end <= stamp + DURATION + TOL, (end - stamp)
        # back to the start, then 0.5 s in the past: starts at once, at the last point at stamp + DURATION
        back = joint_traj(None)
        back.points = back.points[::-1]
        back.points[0].time_from_start.sec = 0
        back.points[1].time_from_start.sec = 1
        pub.publish(back)
        wait_for(lambda: clk.latest() is not None and abs(clk.latest()[1][0] - Q0[0]) < 1e-12, timeout=60.0,
                 what="the reference back at Q0 (the end of the return trajectory)")
        t_now, stamp, start, end = send_and_time(rig, clk, pub, joint_traj, -0.5, Q0[0], 0, Q0[0] + DQ)
        print(f"past stamp {stamp - t_now:+.3f} s: moved {start - t_now:+.4f} s after sending, last point at "
              f"{end - stamp:+.4f} s from the stamp")
        assert start <= t_now + 0.1, "it starts on receipt"
        assert stamp + DURATION - TOL <= end <= stamp + DURATION + TOL, (end - stamp)
        # entirely in the past: rejected, nothing moves
        n0 = int(rig.diagnostics().get("rejected.joint_trajectory", 0))
        t_now = clk.now()
        pub.publish(joint_traj(t_now - 5.0))
        wait_for(lambda: int(rig.diagnostics().get("rejected.joint_trajectory", 0)) == n0 + 1,
                 what="rejected.joint_trajectory counted")
        assert rig.log_count("it ends in the past") >= 1
        wait_for(lambda: len(clk.since(t_now + 0.3)) > 10, what=f"0.3 s of sim time after {t_now} (the test's "
                 f"clock; the node's ~/state stamps: {[round(s, 3) for s, _ in clk.states[-3:]]}; {rig.diagnostics()})")
        assert all(abs(p[0] - (Q0[0] + DQ)) < 1e-9 for _, p in clk.since(t_now)), "a rejected one moved"
    finally:
        clk.stop()
    rig.assert_invariants()


def cart_traj(frame_names, stamp, p0, dz=0.05):
    msg = MultiDOFJointTrajectory(joint_names=list(frame_names))
    msg.header.frame_id = ""
    for t, d in ((0.0, 0.0), (DURATION, dz)):
        tf = Transform()
        tf.translation.x, tf.translation.y, tf.translation.z = float(p0[0]), float(p0[1]), float(p0[2] + d)
        tf.rotation.x, tf.rotation.y, tf.rotation.z, tf.rotation.w = (float(x) for x in p0[3:7])
        pt = MultiDOFJointTrajectoryPoint(transforms=[tf])
        pt.time_from_start.sec = int(t)
        msg.points.append(pt)
    if stamp is not None:
        stamp_msg(msg, stamp)
    return msg


def test_cartesian_trajectory_frame_and_stamp(rig):
    frame = "panda_link8"
    node = rig.controller(controller="cartesian_impedance", use_sim_time=True, watchdog_timeout=2.0,
                          ramp_time=0.0, torque_rate_limit=1e9, **{"cartesian_impedance.frame": frame})
    clk = SimClock(rig, node).start()
    try:
        wait_for(lambda: len(clk.since(T0 + 0.05)) > 20, what="~/state on the sim clock")
        p0 = clk.since(T0 + 0.05)[-1][1]                   # the pose held: x y z qx qy qz qw
        pub = rig.pub(MultiDOFJointTrajectory, f"/{node.get_name()}/cartesian_trajectory")
        n0 = int(rig.diagnostics().get("rejected.cartesian_trajectory", 0))
        pub.publish(cart_traj(["not_the_frame"], None, p0))
        wait_for(lambda: int(rig.diagnostics().get("rejected.cartesian_trajectory", 0)) == n0 + 1,
                 what="the trajectory for another frame rejected")
        assert rig.log_count("do not name the controlled frame") >= 1
        t_now, stamp, start, end = send_and_time(rig, clk, pub, lambda s: cart_traj([frame], s, p0), 0.5,
                                                 p0[2], 2, p0[2] + 0.05)
        print(f"\nCartesian, future stamp: moved at {start - stamp:+.4f} s, last point at {end - stamp:+.4f} s "
              "from the stamp")
        assert stamp <= start <= stamp + TOL, (start - stamp)
        assert stamp + DURATION - TOL <= end <= stamp + DURATION + TOL, (end - stamp)
    finally:
        clk.stop()
    rig.assert_invariants()


def test_cartesian_trajectory_for_a_joint_law_starts_at_its_stamp(rig):
    """The same Cartesian trajectory sent to joint_impedance (through the IK, ik.frame panda_link8),
    stamped 0.5 s in the future.  Bug: the stamp dropped on the way through the IK (the joint
    trajectory started on receipt).  ~/state's position is the law's joint reference; its pose is
    read with Pinocchio's forward kinematics (the oracle, on the URDF): until the stamp it stays at
    the held pose (within 0.1 mm; started on receipt it is 25 mm along by then), and it first reaches
    the last point (within 10 nm: the IK's tolerance is 1 nm) at stamp + DURATION (upper side TOL as
    above; started on receipt: 0.5 s early)."""
    import pinocchio as pin
    from robot_dynamics.dynamics import robots
    frame = "panda_link8"
    pm = pin.buildModelFromUrdf(str(robots.robot_urdf_path("panda")))
    pd, fid = pm.createData(), pm.getFrameId(frame)
    iq = [pm.joints[pm.getJointId(j)].idx_q for j in ARM]

    def pose(q_arm):
        q = pin.neutral(pm)
        q[iq] = q_arm
        pin.framesForwardKinematics(pm, pd, q)
        M = pd.oMf[fid]
        return M.translation.copy(), M.rotation.copy()

    p_held, R_held = pose(Q0)
    p0 = np.r_[p_held, pin.Quaternion(R_held).coeffs()]    # x y z qx qy qz qw
    p_end = p_held + [0.0, 0.0, 0.05]
    node = rig.controller(controller="joint_impedance", use_sim_time=True, watchdog_timeout=2.0,
                          ramp_time=0.0, torque_rate_limit=1e9, **{"ik.frame": frame})
    clk = SimClock(rig, node).start()
    try:
        wait_for(lambda: len(clk.since(T0 + 0.05)) > 20, what="~/state on the sim clock")
        assert np.abs(clk.latest()[1] - Q0).max() < 1e-12, "the reference held at the stream's state"
        pub = rig.pub(MultiDOFJointTrajectory, f"/{node.get_name()}/cartesian_trajectory")
        t_now = clk.now()
        stamp = t_now + 0.5
        pub.publish(cart_traj([frame], stamp, p0))

        def reached():
            for s, q in clk.since(t_now):
                if q.size == 7 and np.all(np.isfinite(q)) and np.linalg.norm(pose(q)[0] - p_end) < 1e-8:
                    return s
            return None
        wait_for(reached, timeout=60.0, what="the reference's pose at the trajectory's last point")
        end = reached()
        before = [np.linalg.norm(pose(q)[0] - p_held) for s, q in clk.since(t_now) if s < stamp and q.size == 7]
        print(f"\njoint law, Cartesian trajectory, future stamp: moved {1000 * max(before):.4f} mm before the "
              f"stamp ({len(before)} states), last point at {end - stamp:+.4f} s from the stamp")
        assert before and max(before) < 1e-4, f"the reference moved {1000 * max(before):.1f} mm before its stamp"
        assert stamp + DURATION - TOL <= end <= stamp + DURATION + TOL, (end - stamp)
        assert not int(rig.diagnostics().get("rejected.cartesian_trajectory", 0))
    finally:
        clk.stop()
    rig.assert_invariants()
