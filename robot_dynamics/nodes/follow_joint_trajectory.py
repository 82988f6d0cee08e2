"""`~/follow_joint_trajectory` (control_msgs/action/FollowJointTrajectory) on the torque controller node,
for joint_impedance and computed_torque, with ros2_controllers' JointTrajectoryController semantics
(the checks, the tolerances and the ends: control/trajectory_goal.py).  A mixin of
TorqueControllerNode and of the Franka bridge in in_process mode (nodes/franka_in_process.py: its
loop runs on the robot's time, `_fjt_times`); the ROS plumbing only:

- goal callback (executor): rejected while the controller is not active (as JTC), else accepted;
- execute callback (executor, a coroutine): the goal message -> plain values -> prepare_goal
  (validation, the partial-goal fill, the spline), then, under the node's lock, the trajectory and its
  GoalMonitor handed to the ControlLoop (ControlLoop.set_reference), which switches to it at the next
  control step and checks it after the law every step.  A goal the checks refuse is aborted at once
  with its error_code and error_string (JTC rejects it at the goal callback, which carries no reason);
- a steady-clock timer at `action_monitor_rate` (JTC's parameter, 20 Hz): feedback (desired, actual,
  error, in `joints` order) of the running goal, and the result of each goal the loop has ended;
- cancel callback: accepted (as JTC); the goal ends canceled and the arm holds where it is;
- `~/controller_state` (control_msgs/msg/JointTrajectoryControllerState, as JTC publishes it) at
  `controller_state_rate`, from the executor, filled and sent only while it has subscribers.

Where control_msgs is not importable the node says so once at configure and runs without the action.
"""
import re
import time

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.task import Future
from rclpy.time import Time

from ..control.trajectory_goal import INVALID_GOAL, GoalError, GoalMonitor, default_tolerances, prepare_goal
from .common import ParamSpec

ACTION_LAWS = ("joint_impedance", "computed_torque")

FJT_PARAMS = [
    ParamSpec("action_monitor_rate", 20.0, "FollowJointTrajectory: rate [Hz] of the feedback and of the "
              "results of ended goals (JTC's parameter)", "positive"),
    ParamSpec("controller_state_rate", 50.0, "~/controller_state (control_msgs/JointTrajectoryControllerState): "
              "rate [Hz] (from the executor, while it has subscribers; JTC's former state_publish_rate)",
              "positive"),
    ParamSpec("allow_partial_joints_goal", True, "FollowJointTrajectory: a goal may name a subset of the "
              "joints (the others hold the reference they follow); JTC's default is false", live=True),
    ParamSpec("allow_nonzero_velocity_at_trajectory_end", False, "FollowJointTrajectory: accept a last "
              "point with a velocity (JTC's parameter)", live=True),
    ParamSpec("constraints.stopped_velocity_tolerance", 0.01, "FollowJointTrajectory: default goal "
              "velocity tolerance [rad/s] (JTC's parameter; 0: not checked)", "nonneg", live=True),
    ParamSpec("constraints.goal_time", 0.0, "FollowJointTrajectory: default goal_time_tolerance [s] after "
              "the last point's time (0: wait without limit, as JTC)", "nonneg", live=True),
]
JOINT_CONSTRAINT = re.compile(r"^constraints\.(.+)\.(trajectory|goal)$")


def joint_constraint_specs(joint):
    return [ParamSpec(f"constraints.{joint}.trajectory", 0.0, "FollowJointTrajectory: default path position "
                      "tolerance [rad] of the joint (0: not checked)", "nonneg", live=True),
            ParamSpec(f"constraints.{joint}.goal", 0.0, "FollowJointTrajectory: default goal position "
                      "tolerance [rad] of the joint (0: not checked)", "nonneg", live=True)]


def _sec(d):
    return float(d.sec) + 1e-9 * float(d.nanosec)


class _Goal:
    """One accepted goal: its handle, its monitor (None until handed to the loop), the future its execute
    coroutine awaits."""

    def __init__(self, handle, future):
        self.handle, self.monitor, self.future = handle, None, future


class FollowJointTrajectoryServer:
    """The action server part of the controller node (see the module docstring)."""

    def _fjt_declare(self):
        """Declare the per-joint constraints.<joint>.trajectory / .goal parameters for the `joints`
        parameter's names and for every such key the parameter overrides name (called in __init__)."""
        self._fjt_server = None
        self._fjt_timer = None
        self._cs_pub = self._cs_timer = None
        self._fjt_goals = []
        self._fjt_warned = False
        names = list(self._p("joints") or [])
        for key in getattr(self, "_parameter_overrides", {}):
            m = JOINT_CONSTRAINT.match(key)
            if m and m.group(1) not in names:
                names.append(m.group(1))
        self._fjt_declare_joints(names)

    def _fjt_declare_joints(self, names):
        for j in names:
            for s in joint_constraint_specs(j):
                if s.name not in self._specs:
                    self._specs[s.name] = s
                    if not self.has_parameter(s.name):
                        self.declare_parameter(s.name, s.default, s.descriptor())

    # ---------------------------------------------------------------- configure / cleanup
    def _fjt_configure(self, c):
        """At configure (under the lock): the action server for the joint laws, when control_msgs is there."""
        if c.law_name not in ACTION_LAWS:
            return
        try:
            from control_msgs.action import FollowJointTrajectory
        except ImportError as e:
            if not self._fjt_warned:
                self._fjt_warned = True
                self._log.warning(f"control_msgs is not installed ({e}): no ~/follow_joint_trajectory action "
                                  "(MoveIt cannot drive this controller); ~/joint_trajectory works")
            return
        from rclpy.action import ActionServer, CancelResponse, GoalResponse
        self._FJT, self._GoalResponse, self._CancelResponse = FollowJointTrajectory, GoalResponse, CancelResponse
        names = list(c.model.joint_names)
        self._fjt_declare_joints(names)
        extra = sorted({m.group(1) for k in self._specs for m in [JOINT_CONSTRAINT.match(k)] if m} - set(names))
        if extra:
            self._log.warning(f"constraints for joints the controller does not have ignored: {extra}")
        c.fjt_names = names
        self._fjt_server = ActionServer(
            self, FollowJointTrajectory, "~/follow_joint_trajectory", execute_callback=self._fjt_execute,
            goal_callback=self._fjt_goal, cancel_callback=self._fjt_cancel,
            callback_group=ReentrantCallbackGroup())
        self._fjt_timer = self.create_timer(1.0 / self._p("action_monitor_rate"), self._guard(self._fjt_tick, "fjt"),
                                            clock=self._steady)
        self._fjt_timer.cancel()                   # runs while goals are open
        from control_msgs.msg import JointTrajectoryControllerState
        self._cs_msg = JointTrajectoryControllerState()
        self._cs_pub = self.create_publisher(JointTrajectoryControllerState, "~/controller_state", 10)
        self._cs_timer = self.create_timer(1.0 / self._p("controller_state_rate"),
                                           self._guard(self._publish_controller_state, "controller_state"),
                                           clock=self._steady)

    def _fjt_teardown(self):
        """At cleanup / shutdown (under the lock): open goals end aborted, the server goes."""
        for g in list(self._fjt_goals):
            if g.monitor is not None:
                g.monitor.end("aborted", INVALID_GOAL, "the controller was cleaned up")
        self._fjt_tick()
        if self._fjt_timer is not None:
            self.destroy_timer(self._fjt_timer)
            self._fjt_timer = None
        if self._fjt_server is not None:
            self._fjt_server.destroy()
            self._fjt_server = None
        if self._cs_timer is not None:
            self.destroy_timer(self._cs_timer)
            self.destroy_publisher(self._cs_pub)
            self._cs_pub = self._cs_timer = None

    # ---------------------------------------------------------------- action callbacks (executor)
    def _fjt_goal(self, goal):
        if not self.active or self.c is None:
            self._log.error("follow_joint_trajectory: goal rejected: the controller is not active")
            return self._GoalResponse.REJECT
        return self._GoalResponse.ACCEPT

    def _fjt_cancel(self, handle):
        with self._lock:
            for g in self._fjt_goals:
                if g.handle is handle and g.monitor is not None and self.c is not None:
                    self.c.loop.references.cancel_goal(g.monitor)
        return self._CancelResponse.ACCEPT

    def _fjt_prepare(self, c, goal):
        """The goal message -> (JointTrajectory, Tolerances) (GoalError with the code and reason)."""
        tr = goal.trajectory
        names = c.fjt_names
        n = len(names)
        p = self._p
        defaults = default_tolerances(
            n, [p(f"constraints.{j}.trajectory") for j in names], [p(f"constraints.{j}.goal") for j in names],
            p("constraints.stopped_velocity_tolerance"), p("constraints.goal_time"))
        with self._lock:                           # the reference the joints the goal leaves out hold
            law = c.loop.law
            hold = np.array(law.q_d if law.q_d is not None else c.loop.q, dtype=float)
        pts = tr.points
        st = tr.header.stamp
        stamp, now = self._fjt_times((st.sec + 1e-9 * st.nanosec) if (st.sec or st.nanosec) else None)
        return prepare_goal(
            names, list(tr.joint_names), [_sec(x.time_from_start) for x in pts], [x.positions for x in pts],
            [x.velocities for x in pts], [x.accelerations for x in pts], [x.effort for x in pts], hold, defaults,
            [(t.name, t.position, t.velocity, t.acceleration) for t in goal.path_tolerance],
            [(t.name, t.position, t.velocity, t.acceleration) for t in goal.goal_tolerance],
            _sec(goal.goal_time_tolerance), stamp, now,
            allow_partial=bool(p("allow_partial_joints_goal")),
            allow_nonzero_end_velocity=bool(p("allow_nonzero_velocity_at_trajectory_end")),
            lower=c.model.lower_limits, upper=c.model.upper_limits)

    def _fjt_refused_now(self, c):
        """'' or why no goal is taken now beyond the loop's own checks: the controller node's partner
        arms (partners.py: one lost, this arm holds and refuses every target); a front end without
        partners has none."""
        lost = getattr(self, "_partner_lost", None)
        return lost(c) if lost is not None else ""

    def _fjt_times(self, stamp):
        """(header.stamp, now) on the loop's clock [s]: the node's ROS clock, which the controller
        node's loop runs on (a front end whose loop runs on another clock converts both)."""
        return stamp, self._clock_handle.get_now().nanoseconds * 1e-9

    def _fjt_result(self, code, message):
        return self._FJT.Result(error_code=int(code), error_string=message)

    async def _fjt_execute(self, handle):
        c = self.c
        try:
            if c is None or not self.active:
                raise GoalError(INVALID_GOAL, "the controller is not active")
            traj, tol = self._fjt_prepare(c, handle.request)
        except GoalError as e:
            self._log.warning(f"follow_joint_trajectory: goal refused ({e.code}): {e}")
            handle.abort()
            return self._fjt_result(e.code, str(e))
        except Exception as e:                        # noqa: BLE001 (a message nothing above expected)
            self.counts["errors.follow_joint_trajectory"] += 1
            self._log.error(f"follow_joint_trajectory: goal refused: {type(e).__name__}: {e}")
            handle.abort()
            return self._fjt_result(INVALID_GOAL, f"{type(e).__name__}: {e}")
        if handle.is_cancel_requested:             # canceled while it was being prepared
            handle.canceled()
            return self._fjt_result(0, "canceled before it started")
        g = _Goal(handle, Future(executor=self.executor))
        monitor = GoalMonitor(traj, tol, c.fjt_names, c.loop.law.continuous)
        with self._lock:
            if c is not self.c or not self.active:
                ok, reason = False, "the controller is not active"
            elif c.loop.supervisor.watchdog == "tripped":
                ok, reason = False, "no valid joint state (the watchdog is tripped): the arm is not followed"
            elif lost := self._fjt_refused_now(c):         # a cell's partner arm lost: holding, as the topics
                ok, reason = False, lost
            else:
                ok, reason = c.loop.set_reference(traj, "follow_joint_trajectory", time.monotonic(), goal=monitor)
            if ok:
                g.monitor = monitor
                self._fjt_goals.append(g)
                if self._fjt_timer is not None and self._fjt_timer.is_canceled():
                    self._fjt_timer.reset()
        if not ok:
            handle.abort()
            return self._fjt_result(INVALID_GOAL, reason)
        return await g.future

    # ---------------------------------------------------------------- feedback and results (executor)
    def _fjt_tick(self):
        """Feedback of the running goal, the result of each ended one (JTC's action_monitor_rate)."""
        ended, fb = [], None
        with self._lock:
            c = self.c
            for g in self._fjt_goals:
                if g.monitor.done:
                    ended.append(g)
                elif c is not None and fb is None and c.loop.law.trajectory is g.monitor.trajectory:
                    fb = (g, self._fjt_feedback(c))
            for g in ended:
                self._fjt_goals.remove(g)
            if not self._fjt_goals and self._fjt_timer is not None:
                self._fjt_timer.cancel()
        for g in ended:
            o, h = g.monitor.outcome, g.handle
            try:
                if h.is_active:
                    if o.status == "succeeded":
                        h.succeed()
                    elif o.status == "canceled" and h.is_cancel_requested:
                        h.canceled()
                    else:
                        h.abort()
            except Exception as e:                    # noqa: BLE001 (a state the handle refuses)
                self._log.warning(f"follow_joint_trajectory: ending the goal: {type(e).__name__}: {e}")
            if not g.future.done():
                g.future.set_result(self._fjt_result(o.code, o.message))
        if fb is not None and fb[0].handle.is_active:
            fb[0].handle.publish_feedback(fb[1])

    def _fjt_feedback(self, c):
        """Feedback (under the lock): the law's reference, the measured state and their difference, in
        `joints` order, stamped with the node's clock."""
        FB = self._FJT.Feedback
        loop, law = c.loop, c.loop.law
        k = loop.perm
        qd, vd, ad = np.array(law.q_d)[k], np.array(law.v_d)[k], np.array(law.a_d)[k]
        q, v = loop.q[k].copy(), loop.v[k].copy()
        fb = FB()
        fb.header.stamp = Time(nanoseconds=self._clock_handle.get_now().nanoseconds).to_msg()
        fb.joint_names = list(loop.joints)
        fb.desired.positions, fb.desired.velocities, fb.desired.accelerations = qd.tolist(), vd.tolist(), ad.tolist()
        fb.actual.positions, fb.actual.velocities = q.tolist(), v.tolist()
        e = np.array(law.info.error)[k] if law.info.error is not None else qd - q
        fb.error.positions, fb.error.velocities = e.tolist(), (vd - v).tolist()
        return fb

    def _publish_controller_state(self):
        """~/controller_state as JTC fills it: reference = the law's reference, feedback = the measured
        state, error = reference - feedback (continuous joints: the
        shortest angle), output = the command last sent (effort), speed_scaling_factor = the trajectory's
        time scale (the safety envelope's speed scaling; 1 otherwise); `joints` order."""
        pub = self._cs_pub
        if pub is None or pub.get_subscription_count() == 0:
            return
        m = self._cs_msg
        with self._lock:
            c = self.c
            if c is None:
                return
            loop, law = c.loop, c.loop.law
            k = loop.perm
            if law.q_d is None:
                return
            qd, vd, ad = np.array(law.q_d)[k], np.array(law.v_d)[k], np.array(law.a_d)[k]
            q, v = loop.q[k].copy(), loop.v[k].copy()
            e = np.array(law.info.error)[k]
            out = np.array(c.out.cmd_np, dtype=float)
            scale = float(law.time_scale)
            joints = list(loop.joints)
        m.header.stamp = Time(nanoseconds=self._clock_handle.get_now().nanoseconds).to_msg()
        m.joint_names = joints
        m.reference.positions, m.reference.velocities, m.reference.accelerations = \
            qd.tolist(), vd.tolist(), ad.tolist()
        m.feedback.positions, m.feedback.velocities = q.tolist(), v.tolist()
        m.error.positions, m.error.velocities = e.tolist(), (vd - v).tolist()
        m.output.effort = out.tolist()
        m.speed_scaling_factor = scale
        pub.publish(m)
