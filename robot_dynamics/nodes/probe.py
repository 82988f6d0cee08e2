"""A ROS node that watches and pokes a running sim + controller: records /joint_states, /clock, the
F/T wrench and the effort commands (with receipt times) and publishes references and pushes.  Those
1 kHz topics are taken on a thread of their own (control_path.TakeAll); the rest (diagnostics,
services) spins in a background executor thread.  Used by the demo and by the tests that run nodes as
separate processes.

    probe = Probe(joints=model.joint_names).start()
    probe.wait_for(lambda: probe.q is not None, 10)
    probe.publish_pose([0.4, 0, 0.5], [1, 0, 0, 0]); probe.push("panda_hand_tcp", [0, 10, 0, 0, 0, 0])
    probe.stop()
"""
import sys
import threading
import time

import numpy as np
import rclpy
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from .control_path import TakeAll, TakeSubscription


def _stamp_to_sec(stamp):
    return stamp.sec + 1e-9 * stamp.nanosec


class Probe(Node):
    """Records what a torque-controlled arm does, from the topics only."""

    def __init__(self, joints, name="probe", joint_states_topic="/joint_states",
                 command_topic="/effort_controller/commands", wrench_topic="/ft_sensor/wrench",
                 controller_ns="/torque_controller", sim_ns="/mujoco_sim", keep=True, diag_prefix=""):
        super().__init__(name)
        self.joints = list(joints)
        self.keep = keep
        self.lock = threading.Lock()
        self.q = self.v = self.effort = None
        self.js_stamp = None
        self.clock = None
        self.wrench = None
        self.command = None
        self.n_js = self.n_clock = self.n_wrench = self.n_cmd = 0
        self.ctl_ref = self.ctl_err = None
        self.n_state = 0
        self.js_log = []          # (receipt time, stamp, q, v, effort)
        self.spin_errors = 0      # exceptions out of the executor (a callback's, a take's): printed
        self.state_log = []       # (receipt time, reference, error, command) from the controller's ~/state
        self.cmd_log = []         # (receipt time, last joint-state receipt time, command)
        self._last_js_rx = None
        # the 1 kHz topics on a thread of their own that takes every message (TakeAll): through an
        # executor (about 0.4 ms of CPU a message) the demo's probe received 332 joint states a second
        # of the sim's ~1000 and took CPU the sim and the controller needed; taken so, 933-941
        qos = QoSProfile(depth=50)
        self._recorder = TakeAll(self, [
            (TakeSubscription(self, JointState, joint_states_topic, qos), self._on_js),
            (TakeSubscription(self, Float64MultiArray, command_topic, qos), self._on_cmd),
            (TakeSubscription(self, JointState, f"{controller_ns}/state", qos), self._on_state),
            (TakeSubscription(self, WrenchStamped, wrench_topic, qos), self._on_wrench),
            (TakeSubscription(self, Clock, "/clock", qos), self._on_clock)], name="probe_rx")
        # the controller's /diagnostics (name '<node>: ...'; keys with `diag_prefix`, e.g. 'loop.' for a
        # bridge running the loop in-process): its accepted.<reference> counts confirm a delivery
        from diagnostic_msgs.msg import DiagnosticArray
        self._ctl_diag_name = controller_ns.strip("/") + ":"   # (the controller's, namespace included)
        self.diag_prefix = diag_prefix
        self.ctl_diag, self.n_ctl_diag = {}, 0
        self.create_subscription(DiagnosticArray, "/diagnostics", self._on_ctl_diag, 50)
        self.pub_traj = self.create_publisher(JointTrajectory, f"{controller_ns}/joint_trajectory", 10)
        self.pub_pose = self.create_publisher(PoseStamped, f"{controller_ns}/target_pose", 10)
        self.pub_push = self.create_publisher(WrenchStamped, f"{sim_ns}/apply_wrench", 10)
        self.pub_cmd = self.create_publisher(Float64MultiArray, command_topic, 10)
        self._executor = None
        self._thread = None

    # ---- subscriptions ----
    def _on_js(self, msg):
        now = time.monotonic()
        idx = {n: i for i, n in enumerate(msg.name)}
        try:
            k = [idx[j] for j in self.joints]
        except KeyError:
            return
        q = np.array([msg.position[i] for i in k])
        v = np.array([msg.velocity[i] for i in k]) if len(msg.velocity) == len(msg.name) else None
        e = np.array([msg.effort[i] for i in k]) if len(msg.effort) == len(msg.name) else None
        with self.lock:
            self.q, self.v, self.effort = q, v, e
            self.js_stamp = _stamp_to_sec(msg.header.stamp)
            self.n_js += 1
            self._last_js_rx = now
            if self.keep:
                self.js_log.append((now, self.js_stamp, q, v, e))

    def _on_clock(self, msg):
        with self.lock:
            self.clock = _stamp_to_sec(msg.clock)
            self.n_clock += 1

    def _on_wrench(self, msg):
        f, t = msg.wrench.force, msg.wrench.torque
        with self.lock:
            self.wrench = np.array([f.x, f.y, f.z, t.x, t.y, t.z])
            self.wrench_frame = msg.header.frame_id
            self.n_wrench += 1

    def _on_cmd(self, msg):
        now = time.monotonic()
        with self.lock:
            self.command = np.array(msg.data)
            self.n_cmd += 1
            if self.keep:
                self.cmd_log.append((now, self._last_js_rx, self.command))

    def _on_state(self, msg):
        now = time.monotonic()
        ref, err = np.array(msg.position), np.array(msg.velocity)
        with self.lock:
            self.ctl_ref, self.ctl_err = ref, err
            self.n_state += 1
            if self.keep:
                self.state_log.append((now, ref, err, np.array(msg.effort)))

    def _on_ctl_diag(self, msg):
        for st in msg.status:
            if st.name.startswith(self._ctl_diag_name):
                with self.lock:
                    self.ctl_diag = {kv.key: kv.value for kv in st.values}
                    self.n_ctl_diag += 1

    def accepted(self, what):
        """How many <what> references the controller has accepted (its /diagnostics accepted.<what>)."""
        with self.lock:
            return int(self.ctl_diag.get(f"{self.diag_prefix}accepted.{what}", 0))

    def renew_publisher(self, attr, msg_type, why, timeout=10.0):
        """The publisher self.<attr> made anew (a new writer, announced afresh; same topic and QoS),
        once it sees a subscription again (up to `timeout`); printed with `why`.  Returns it."""
        pub = getattr(self, attr)
        topic, qos = pub.topic_name, pub.qos_profile
        self.destroy_publisher(pub)
        pub = self.create_publisher(msg_type, topic, qos)
        setattr(self, attr, pub)
        print(f"probe: {why}; publisher on {topic} made anew", flush=True)
        self.wait_for(lambda: pub.get_subscription_count() > 0, timeout)
        return pub

    def publish_confirmed(self, attr, msg, what, timeout=60.0, again_after=3.0, renew_after=15.0):
        """Publish a reference on the publisher self.<attr> and make sure the controller took it: its
        accepted.<what> count (on /diagnostics) goes up, or the message is sent again after
        `again_after` seconds and three more diagnostics without it.  One volatile message can be lost
        even after the publisher saw the subscription (discovery is not symmetric: the reader may not
        know this writer yet).  After `renew_after` seconds without it the publisher is made anew (a
        new writer, announced afresh: a loaded CI run saw 20 copies over 60 s never reach a controller
        whose diagnostics came through all along).  A copy sent again replaces the first if that one
        only came late: give trajectories a header stamp (then a copy is the same trajectory).  Returns
        the time.monotonic() of the publish it took; AssertionError after `timeout`, with what the
        publisher saw of the subscription."""
        t0 = time.monotonic()
        t_end, t_renew = t0 + timeout, t0 + renew_after
        k0 = self.accepted(what)
        renewed = 0
        while time.monotonic() < t_end:
            pub = getattr(self, attr)
            if time.monotonic() >= t_renew:
                t_renew = time.monotonic() + renew_after
                renewed += 1
                pub = self.renew_publisher(attr, type(msg), f"{what} not accepted after "
                                                              f"{time.monotonic() - t0:.0f} s",
                                           max(0.0, t_end - time.monotonic()))
            with self.lock:
                n0 = self.n_ctl_diag
            t_pub = time.monotonic()
            pub.publish(msg)
            self.wait_for(lambda: int(self.ctl_diag.get(f"{self.diag_prefix}accepted.{what}", 0)) > k0
                          or (self.n_ctl_diag >= n0 + 3 and time.monotonic() - t_pub >= again_after),
                          max(0.0, t_end - time.monotonic()))
            if self.accepted(what) > k0:
                return t_pub
        pub = getattr(self, attr)
        raise AssertionError(f"the controller did not accept the {what} within {timeout} s (the "
                             f"publisher on {pub.topic_name} saw {pub.get_subscription_count()} "
                             f"subscription(s), made anew {renewed} time(s); the controller's "
                             f"diagnostics: {self.ctl_diag or 'none received'})")

    # ---- publishing ----
    def publish_command(self, tau):
        self.pub_cmd.publish(Float64MultiArray(data=[float(x) for x in tau]))

    def publish_trajectory(self, times, positions, velocities=None, joints=None, confirm=False, stamp=None,
                           accelerations=None):
        """JointTrajectory with points at `times` [s] from `stamp` (seconds on the controller's clock;
        None: header stamp zero, start on receipt); `confirm`: sent again until the controller accepted
        it (publish_confirmed).  Returns the time.monotonic() of the publish (the one accepted, with
        confirm)."""
        msg = JointTrajectory()
        if stamp is not None:
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(round(stamp * 1e9)), 1_000_000_000)
        msg.joint_names = list(joints or self.joints)
        for k, t in enumerate(times):
            pt = JointTrajectoryPoint()
            pt.positions = [float(x) for x in positions[k]]
            if velocities is not None:
                pt.velocities = [float(x) for x in velocities[k]]
            if accelerations is not None:
                pt.accelerations = [float(x) for x in accelerations[k]]
            pt.time_from_start.sec = int(t)
            pt.time_from_start.nanosec = int(round((t - int(t)) * 1e9))
            msg.points.append(pt)
        if confirm:
            return self.publish_confirmed("pub_traj", msg, "joint_trajectory")
        t = time.monotonic()
        self.pub_traj.publish(msg)
        return t

    def publish_pose(self, p, quat_xyzw, frame_id=""):
        msg = PoseStamped()
        msg.header.frame_id = frame_id
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(x) for x in p)
        o = msg.pose.orientation
        o.x, o.y, o.z, o.w = (float(x) for x in quat_xyzw)
        self.pub_pose.publish(msg)

    def push(self, frame, wrench):
        """External wrench [f; n] (world axes, about the frame origin) on `frame`; zeros clear it."""
        msg = WrenchStamped()
        msg.header.frame_id = frame
        f, t = msg.wrench.force, msg.wrench.torque
        f.x, f.y, f.z, t.x, t.y, t.z = (float(x) for x in wrench)
        self.pub_push.publish(msg)

    # ---- spinning ----
    def start(self):
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        self._recorder.start()
        return self

    def _spin(self):
        """The executor until stop() or the context's shutdown.  An exception out of spin_once (a
        callback's, a message that cannot be taken) is printed and counted, and the probe spins on:
        a probe whose thread ended on one went deaf in silence, and a test waited out its timeout."""
        while self._executor is not None:
            try:
                if not rclpy.ok(context=self.context):
                    return
                self._executor.spin_once(timeout_sec=0.05)
            except Exception as e:  # noqa: BLE001
                if self._executor is None or not rclpy.ok(context=self.context):
                    return                     # stopped or shut down under us
                self.spin_errors += 1
                if self.spin_errors <= 5:
                    print(f"[probe {self.get_name()}] {type(e).__name__}: {e} (spinning on)", file=sys.stderr,
                          flush=True)
                time.sleep(0.01)

    def stop(self):
        self._recorder.stop()
        ex, self._executor = self._executor, None
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if ex is not None:
            ex.shutdown(timeout_sec=1.0)

    def destroy_node(self):
        self._recorder.destroy()
        return super().destroy_node()

    def wait_for(self, pred, timeout, poll=0.01, check=None):
        """Wait until `pred()` is true; False on timeout.  `check()` is called each poll (e.g. to
        raise if a child process died).  `pred()` runs under `self.lock` (so it reads a consistent
        state): it must not wait for anything this probe's callbacks deliver (a service response, a
        message), which need the same lock; poll such things in a loop of your own."""
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            with self.lock:
                ok = pred()
            if ok:
                return True
            if check is not None:
                check()
            time.sleep(poll)
        return False

    def snapshot(self):
        with self.lock:
            return (None if self.q is None else self.q.copy(),
                    None if self.v is None else self.v.copy())

    def clear_logs(self):
        with self.lock:
            self.js_log.clear()
            self.cmd_log.clear()
            self.state_log.clear()
