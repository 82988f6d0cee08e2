"""The references stage: what the law is to follow.  Pending references (set between cycles, applied at
the next one), set-point shaping, far and out-of-reach Cartesian targets, the feed-forward wrench, the
FollowJointTrajectory goal being followed, the inverse kinematics of Cartesian goals for a joint law, the
envelope's time scaling of a trajectory, and holding the current position after a trip or a stop.

Reads: the cycle's state and have_state; the parameters setpoint_shaping, safety.time_scaling, ik.*; the
law's declared offers (approach_gains, time_scalable, param); the safety filter's rate limit; the
envelope stage's speed ratio.  Writes: the law's reference (law.set_reference / reset / time_scale), its
own pending reference and goal.  Raises: `abort_runs(reason, restore)` (the loop's port) when a joint
reference replaces an identification run's.

Guarantees: a reference is applied at a cycle boundary, never mid-cycle; a refused one is counted
(rejected.<what>) and logged throttled with its reason; a joint reference with a velocity past a joint's
velocity limit is refused (the joint, its velocity and the limit said), and so is a joint trajectory whose
points or spline between them are (TRAJ_SPLINE_TOLERANCE between points); a Cartesian target beyond the law frame's reach
bound is refused (the arm keeps its target); a joint set-point (no velocity, no acceleration) is approached
on a rest-to-rest quintic whose speed keeps the law's torque change K_j v_j (D_j a_j) within
SHAPING_RATE_SHARE of the torque-rate limit (so the rate limit never lags inside the loop) and within
SHAPING_VELOCITY_SHARE of the velocity limits; after a trip the law holds where the arm is and what arrived
meanwhile is refused with that reason.
"""
import dataclasses
import math

import numpy as np

from ..cartesian_trajectory import CartesianTrajectory
from ..laws.base import CartesianReference, JointReference, as_vec
from ..trajectory import JointTrajectory
from ..trajectory_goal import INVALID_GOAL, SUCCESSFUL

# with max_pos_error / max_rot_error off, a Cartesian target farther than this from the frame's pose
# is stepped to at the full stiffness: a WARN says so
FAR_UNCLIPPED_POS, FAR_UNCLIPPED_ROT = 0.1, 0.5     # m, rad
SHAPING_RATE_SHARE = 0.5       # of the torque-rate limit, for a shaped set-point's speed (and again for its
                               # acceleration through the damping)
SHAPING_VELOCITY_SHARE = 0.8   # of each joint's velocity limit, for the approach's peak speed (room for the
                               # tracking error)
SHAPING_STEP_TIME = 0.01       # s: a pose step whose spring torque the rate limit passes in this time (at
                               # SHAPING_RATE_SHARE) is stepped to; a larger one approached
TRAJ_SPLINE_TOLERANCE = 0.02  # a joint trajectory's spline between its points may pass a velocity limit by this
TIME_SCALE_RATE = (20.0, 2.0)  # 1/s: how fast a trajectory's time scale may fall and rise


def _quat_to_matrix(x, y, z, w):
    n = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


class References:
    """See the module docstring."""

    def __init__(self, model, law, p, report, cycle, safety, gravity_backend, abort_runs):
        self.model, self.law, self._p, self.report, self.c = model, law, p, report, cycle
        self.safety, self.gravity_backend = safety, gravity_backend
        self._abort_runs = abort_runs
        self.cartesian = law.name == "cartesian_impedance"
        self.pending = None                     # the reference applied at the next cycle
        self.pending_what = "reference"
        self.goal = None                        # the FollowJointTrajectory goal followed (GoalMonitor)
        self.pose_target = None                 # (R, p) of the Cartesian target held
        self.wrench_target = None               # the feed-forward wrench [f; n] (cartesian_impedance)
        self.pending_wrench = False
        self._reach = (None,)
        self._ik_ref = None
        if law.time_scalable:
            law.approach_cap = self.approach_cap
        if self.cartesian:
            law.shaping = self.cartesian_cap

    # ------------------------------------------------------------------ accepting references
    def reject(self, what, reason, now=None):
        """Count and log (throttled per `what`) a reference refused."""
        self.report.counts[f"rejected.{what}"] += 1
        self.report.act(f"rejected.{what}", now, reason)
        self.report.throttled(f"ref.{what}", "warn", f"{what} rejected: {reason}", now)
        return False, reason

    def set(self, ref, what="reference", now=None, goal=None):
        """A new reference, applied at the next cycle (see ControlLoop.set_reference).  (ok, reason)"""
        name = self.law.name
        if isinstance(ref, CartesianTrajectory):
            if not self.cartesian:
                return self.reject(what, f"{name} takes no Cartesian trajectory", now)
            far = self.beyond_reach(ref.positions)
            if far:
                return self.reject(what, far, now)
            self.pose_target = None                  # the law keeps its wrench reference
        elif isinstance(ref, CartesianReference):
            if not self.cartesian:
                return self.reject(what, f"{name} takes no Cartesian reference", now)
            far = self.beyond_reach(np.reshape(np.asarray(ref.p, dtype=float), (1, -1)))
            if far:
                return self.reject(what, far, now)
            self._far_target(what, ref.R, ref.p, now)
            self.pose_target = (np.array(ref.R, dtype=float), np.array(ref.p, dtype=float))
            if ref.wrench is None and self.wrench_target is not None:
                ref = dataclasses.replace(ref, wrench=self.wrench_target)   # keeps twist and accel
        elif isinstance(ref, (JointReference, JointTrajectory)):
            if self.cartesian:
                return self.reject(what, f"{name} takes no joint reference", now)
            try:
                fast = self.velocity_check(ref, what) if isinstance(ref, JointReference) else \
                    self.trajectory_velocity_check(ref)
            except ValueError as e:
                return self.reject(what, str(e), now)
            if fast:
                return self.reject(what, fast, now)
            if isinstance(ref, JointReference) and self._p["setpoint_shaping"]:
                try:
                    ref = self.shaped(ref)
                except ValueError as e:
                    return self.reject(what, str(e), now)
            self._abort_runs(f"a new {what} arrived (it is followed)", False)
        else:
            return self.reject(what, f"unknown reference type {type(ref).__name__}", now)
        if self.goal is not None:
            self.end_goal("aborted", INVALID_GOAL, f"preempted by a new {what}" +
                          (" goal" if goal is not None else " message"), hold=False)
        self.goal = goal
        self.pending = ref
        self.pending_what = what
        self.report.counts[f"accepted.{what}"] += 1     # (on /diagnostics: a sender can see it arrived)
        return True, ""

    def velocity_check(self, ref, what="reference"):
        """A joint reference's velocity (a streamed JointState: position and velocity) against each
        joint's velocity limit (the model's, from the URDF): "" when within them (or no velocity), else
        the reason to refuse it, naming each joint past its limit, its velocity and the limit.  A
        velocity at the limit is not clamped and followed instead: the law's damping would pull the arm
        towards it, and on franky-sim a set-point with joint 1's velocity clamped to its limit took the
        joint to 1.09 x the limit (test_franka_steps.py).  Joints without a velocity limit (none,
        <= 0, not finite) are not checked.  ValueError (as_vec) for a velocity of the wrong length or
        not finite."""
        if ref.v is None:
            return ""
        v = as_vec(ref.v, self.model.nv, "reference v")
        lim = self._velocity_limits()
        over = np.flatnonzero(np.abs(v) > lim)
        if not len(over):
            return ""
        names = self.model.joint_names
        text = ", ".join(f"{names[j]!r} {v[j]:+.3f} rad/s (limit {lim[j]:.3f})" for j in over)
        return (f"velocity past the joint's velocity limit (URDF): {text}; not followed, the arm keeps its "
                "present reference")

    def _velocity_limits(self):
        vl = np.asarray(self.model.velocity_limits, dtype=float)
        return np.where(np.isfinite(vl) & (vl > 0), vl, np.inf)

    def trajectory_velocity_check(self, tr):
        """A joint trajectory's velocities against each joint's velocity limit (the URDF's): the
        velocities its points give (as a streamed JointState's: past the limit is refused), and the
        spline followed between the points (JointTrajectory.peak_rates), which may pass the limit by
        TRAJ_SPLINE_TOLERANCE (a spline through points at the limit rounds a corner a little faster);
        points too close in time for the distance between them need more.  "" when within them, else
        the reason to refuse it (the first point and joint past the limit, its velocity and the limit).
        Joints without a velocity limit are not checked."""
        lim = self._velocity_limits()
        names = self.model.joint_names
        rest = "; not followed, the arm keeps its present reference"
        if tr.velocities is not None:
            over = np.argwhere(np.abs(tr.velocities) > lim)
            if len(over):
                i, j = map(int, over[0])
                return (f"velocity past the joint's velocity limit (URDF): point {i}: {names[j]!r} "
                        f"{tr.velocities[i, j]:+.3f} rad/s (limit {lim[j]:.3f}){rest}")
        v_pk, _, t_v, _ = tr.peak_rates()
        over = np.flatnonzero(v_pk > lim * (1.0 + TRAJ_SPLINE_TOLERANCE))
        if len(over):
            j = int(over[np.argmax(v_pk[over] / lim[over])])
            return (f"the trajectory between its points needs {names[j]!r} at {v_pk[j]:.3f} rad/s at "
                    f"t = {t_v[j]:.3f} s, past its velocity limit {lim[j]:.3f} rad/s (URDF; points too close "
                    f"in time for the distance between them){rest}")
        return ""

    def beyond_reach(self, points):
        """The reason to refuse Cartesian target points (N x 3, base frame) one of which is beyond the
        law frame's reach bound (control/reach.py: the URDF's link lengths from the first joint's axis
        origin, + REACH_MARGIN), or "" when all are within it (or the points are malformed: the law
        says so)."""
        from ..reach import REACH_MARGIN, reach_bound
        frame = self.law.frame
        if self._reach[0] != frame:
            try:
                self._reach = (frame, *reach_bound(self.model, frame))
            except ValueError:
                self._reach = (frame, None, math.inf)
        _, origin, length = self._reach
        P = np.asarray(points, dtype=float)
        if origin is None or P.ndim != 2 or P.shape[1] != 3 or not np.all(np.isfinite(P)):
            return ""
        d = np.linalg.norm(P - origin, axis=1)
        k = int(np.argmax(d))
        if d[k] <= length + REACH_MARGIN:
            return ""
        where = f"point {k} " if len(P) > 1 else ""
        return (f"{where}({', '.join(f'{x:.3f}' for x in P[k])}) m out of reach for {frame!r}: "
                f"{d[k]:.3f} m from the first joint's axis origin, beyond the reach bound {length:.3f} m "
                f"(the URDF's link lengths) + {REACH_MARGIN} m margin; the arm keeps its present target")

    def _far_target(self, what, R, p, now):
        """WARN (throttled) when an accepted pose target is farther from the law frame's present pose
        than max_pos_error / max_rot_error: it is approached with the pose error clipped (or, with the
        clipping off, stepped to at the full stiffness: said too)."""
        if not self.c.have_state:
            return
        frame = self.law.frame
        Rn, pn = self.gravity_backend.frame_placement(self.c.q, frame)
        dp = float(np.linalg.norm(np.asarray(p, dtype=float) - pn))
        c = (np.trace(np.asarray(R, dtype=float) @ np.asarray(Rn).T) - 1.0) / 2.0
        dr = float(math.acos(min(1.0, max(-1.0, c))))
        mp, mr = self.law.param("max_pos_error", 0.0), self.law.param("max_rot_error", 0.0)
        clipped = (mp > 0.0 and dp > mp) or (mr > 0.0 and dr > mr)
        if not clipped and not ((mp <= 0.0 and dp > FAR_UNCLIPPED_POS) or (mr <= 0.0 and dr > FAR_UNCLIPPED_ROT)):
            return
        where = f"{dp:.3f} m, {dr:.3f} rad from {frame!r}"
        self.report.counts["far_targets"] += 1
        if clipped:
            detail = f"{what} {where}: approached with the pose error clipped"
            text = (f"{what}: {where} (max_pos_error {mp} m, max_rot_error {mr} rad): approached with the pose "
                    "error clipped")
        else:
            detail = f"{what} {where} with the pose error clipping off"
            text = (f"{what}: {where} with the pose error clipping off (max_pos_error {mp}, max_rot_error "
                    f"{mr}): the law pulls at its full stiffness")
        self.report.act("far_target", now, detail)
        self.report.throttled(f"far.{what}", "warn", text, now)

    # ------------------------------------------------------------------ set-point shaping
    def shaped(self, ref):
        """A set-point (no velocity, no acceleration) -> a one-point JointTrajectory, approached from the
        reference being followed within the law's approach bounds (see approach_cap); a reference with a
        velocity or an acceleration (a streamed trajectory) is passed on as it is.  ValueError for a
        position outside the joint limits (as a trajectory's points)."""
        n = self.model.nv
        v = as_vec(ref.v, n, "reference v")
        a = as_vec(ref.a, n, "reference a")
        if np.any(v) or np.any(a):
            return ref
        q = as_vec(ref.q, n, "reference q")
        return JointTrajectory([0.0], q[None, :], lower=self.model.lower_limits, upper=self.model.upper_limits)

    def approach_cap(self, q):
        """(max_velocity, max_acceleration) per joint for the approach of a trajectory's first point and a
        shaped set-point: the law's torque change from following the approach at speed v_j is about
        K_j v_j (+ D_j a_j), K_j and D_j as the law declares them (approach_gains: joint impedance k_j and
        2 zeta sqrt(k_j M_jj); computed torque M_jj kp_j and M_jj kd_j): each kept at SHAPING_RATE_SHARE of
        the torque-rate limit, the speed also within SHAPING_VELOCITY_SHARE of the velocity limits.  None
        when set-point shaping is off or the law declares no such gains."""
        if not self._p["setpoint_shaping"]:
            return None
        gains = self.law.approach_gains(np.diagonal(self.gravity_backend.mass_matrix(q)))
        if gains is None:
            return None
        k, d = gains
        n = self.model.nv
        share = SHAPING_RATE_SHARE * np.broadcast_to(np.asarray(self.safety.rate, dtype=float), (n,))
        vl = np.asarray(self.model.velocity_limits, dtype=float)
        vl = np.where(np.isfinite(vl) & (vl > 0), SHAPING_VELOCITY_SHARE * vl, np.inf)
        with np.errstate(divide="ignore"):
            vcap = np.minimum(np.where(k > 0, share / np.maximum(k, 1e-300), np.inf), vl)
            acap = np.where(d > 0, share / np.maximum(d, 1e-300), np.inf)
        return vcap, acap

    def cartesian_cap(self):
        """Set-point shaping for the Cartesian law, at the last valid q: (jump_pos [m], jump_rot [rad],
        v_lin [m/s], v_ang [rad/s]).  A pose step dp changes joint j's spring torque by about
        k_pos |J_lin,j| dp (k_rot |J_ang,j| for a rotation; k the largest of the law's three): the step is
        approached when that exceeds SHAPING_RATE_SHARE x the rate limit x SHAPING_STEP_TIME, and the
        approach's speeds keep k |J| v at half that share each (linear and angular).  Streamed poses
        (a 100 Hz stream of a path) move far less per message and are followed as sent.  None when
        shaping is off or no state has arrived."""
        if not self._p["setpoint_shaping"] or not self.c.have_state:
            return None
        law = self.law
        J = np.asarray(self.gravity_backend.frame_jacobian(self.c.q, law.frame), dtype=float)
        jl = float(np.max(np.linalg.norm(J[:3], axis=0)))
        ja = float(np.max(np.linalg.norm(J[3:], axis=0)))
        kp, kr = float(np.max(law.K[:3])), float(np.max(law.K[3:]))
        share = SHAPING_RATE_SHARE * float(np.min(self.safety.rate))
        big = 1e300
        tp = share / max(kp * jl, 1e-300) if kp > 0 else big
        tr = share / max(kr * ja, 1e-300) if kr > 0 else big
        return tp * SHAPING_STEP_TIME, tr * SHAPING_STEP_TIME, 0.5 * tp, 0.5 * tr

    # ------------------------------------------------------------------ the feed-forward wrench
    def set_target_wrench(self, w, what="target_wrench", now=None):
        """cartesian_impedance: the feed-forward wrench [f; n] the robot exerts, base-frame axes."""
        if not self.cartesian:
            return self.reject(what, f"{self.law.name} takes no wrench reference", now)
        try:
            w = np.array(w, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            return self.reject(what, f"{what}: not numeric", now)
        if w.shape != (6,) or not np.all(np.isfinite(w)):
            return self.reject(what, f"{what}: values must be 6 finite numbers", now)
        self.wrench_target = w
        self.pending_wrench = True
        return True, ""

    def _apply_target_wrench(self):
        if getattr(self.law, "trajectory", None) is not None:   # a Cartesian trajectory goes on
            self.law.set_wrench_reference(self.wrench_target)
            return
        if self.pose_target is None:                     # keep the pose being held
            ref = self.law.info.reference
            if ref is None or len(ref) != 7:
                return
            self.pose_target = (_quat_to_matrix(*ref[3:7]), np.array(ref[:3]))
        self.law.set_reference(CartesianReference(self.pose_target[0], self.pose_target[1],
                                                  wrench=self.wrench_target))

    # ------------------------------------------------------------------ per cycle
    def apply(self, now):
        """The cycle's pending reference to the law (a refusal counted; a goal whose trajectory the law
        refused ends)."""
        if self.pending is not None:
            ref, self.pending = self.pending, None
            try:
                self.law.set_reference(ref)
            except ValueError as e:
                self.reject(self.pending_what, str(e), now)
                if self.goal is not None and self.goal.trajectory is ref:
                    self.end_goal("aborted", INVALID_GOAL, f"the law refused the trajectory: {e}")

    def apply_wrench(self):
        if self.pending_wrench:
            self.pending_wrench = False
            self._apply_target_wrench()

    def scale_time(self, envelope, dt):
        """The safety envelope's time scaling of a joint law's trajectory: s -> the largest value in
        [0, 1] that keeps the reference's frame speeds (its nominal velocity, the last step's, at the
        measured q) at 0.9 x their limits, falling and rising at TIME_SCALE_RATE at most."""
        law = self.law
        if not law.time_scalable or law.trajectory is None or not (envelope.speed_rows or law.time_scale != 1.0):
            return
        target = 1.0
        if self._p["safety.time_scaling"] and envelope.speed_rows and law.trajectory.started and \
                law.info.status != "trajectory done":
            ratio = envelope.reference_speed_ratio(self.c.q, law.v_nominal)
            if ratio > 0.9:
                target = 0.9 / ratio
        s = law.time_scale
        down, up = TIME_SCALE_RATE
        s_new = min(max(target, s - down * dt), s + up * dt, 1.0)
        law.time_scale_rate = (s_new - s) / dt if dt > 0 else 0.0
        law.time_scale = s_new

    def hold(self):
        """Hold the current position (pose): nothing pending, the law reset at the measured state."""
        self.pending = None
        self.pose_target = None
        self.law.reset(self.c.state)

    def reset_law(self, now, tripped, cause):
        """Activation, or the first step after a trip or a stop: the law holds the current position.
        After a trip, what it was following or was handed meanwhile is not followed (the arm may be
        anywhere by now): a pending reference is rejected with that reason (counted as
        rejected.<what>, logged), an abandoned trajectory is logged and counted.  After activation a
        reference that came before the first valid state is followed from it."""
        law = self.law
        tr = getattr(law, "trajectory", None)
        if tripped and tr is not None and getattr(tr, "started", False) and not tr.done(self.c.state.t):
            self.report.counts["abandoned.trajectory"] += 1
            self.report.throttled("ref.abandoned", "warn", f"the trajectory being followed is abandoned ("
                                  f"{cause}); holding the current position (send it again)", now)
        law.reset(self.c.state)
        if tripped and self.pending is not None:
            if self.goal is not None and self.goal.trajectory is self.pending:
                self.end_goal("aborted", INVALID_GOAL, f"arrived while {cause}: not followed", hold=False)
            what, self.pending = self.pending_what, None
            self.reject(what, f"arrived while {cause}: not followed; the arm holds its position, send it "
                        "again", now)

    # ------------------------------------------------------------------ the FollowJointTrajectory goal
    def check_goal(self):
        """After the law: the goal's monitor on this step's measured state and reference (its path
        tolerance, its goal tolerance and time); a trajectory no longer followed ends the goal."""
        g, law, c = self.goal, self.law, self.c
        if g.done:
            self.goal = None
            return
        if law.trajectory is not g.trajectory:
            if self.pending is not g.trajectory:           # replaced by something that did not say so
                self.end_goal("aborted", INVALID_GOAL, "the trajectory is no longer followed")
            return
        if g.check(law.trajectory_time(c.state.t), c.q, c.v, law.q_d, law.v_d):
            self._goal_ended(g, g.hold)

    def end_goal(self, status, code, message, hold=True):
        """End the running goal (if any) with status 'succeeded' | 'aborted' | 'canceled', its error code
        and reason; `hold`: the arm holds the current position (JTC's set_hold_position) when the goal's
        trajectory is being followed (not on a preemption: the new reference starts from the one
        followed, without a jump).  The caller (the node) reports the end."""
        g = self.goal
        if g is not None and g.end(status, code, message):
            self._goal_ended(g, hold)

    def cancel_goal(self, goal):
        """The client cancelled `goal`: it ends canceled and the arm holds where it is (JTC).  False if
        it had already ended."""
        if self.goal is not goal or goal.done:
            return False
        goal.end("canceled", SUCCESSFUL, "canceled: holding the current position")
        self._goal_ended(goal, True)
        return True

    def _goal_ended(self, g, hold):
        o = g.outcome
        self.goal = None
        self.report.counts[f"follow_joint_trajectory.{o.status}"] += 1
        self.report.log("info" if o.status == "succeeded" else "warn",
                        f"follow_joint_trajectory goal {o.status}: {o.message}")
        if o.status == "succeeded":
            return
        if self.pending is g.trajectory:                 # not started yet: never followed
            self.pending = None
        elif hold and self.law.trajectory is g.trajectory and self.c.have_state:
            self.law.reset(self.c.state)                 # hold the current position

    # ------------------------------------------------------------------ Cartesian goals for a joint law
    def cartesian_goal(self, ref):
        """A CartesianReference (its pose) or CartesianTrajectory for a joint law -> a JointTrajectory
        through the inverse kinematics of `ik.frame` (control/ik_reference.py), seeded with the law's
        reference (where the arm is headed) or the measured q.  ValueError (the reason) when the pose or
        a point is unreachable or the path is infeasible.  100-200 ms for an unreachable pose: call it
        off the control path (the node does, on its executor, before taking its lock); it reads the
        loop's state without changing it."""
        from ..ik_reference import IKReference
        if self.cartesian or self.law.name == "gravity_compensation":
            raise ValueError(f"{self.law.name}: the inverse kinematics is for the joint laws")
        frame = self._p["ik.frame"] or self.model.frame_names[-1]
        self.model.check_frame(frame)
        conv = self._ik_ref
        a_max = float(np.min(self.law.approach_bounds()["max_acceleration"]))
        if conv is None or conv.frame != frame or conv.min_sv != self._p["ik.min_singular_value"] \
                or conv.a_max != a_max:
            conv = self._ik_ref = IKReference(self.model, frame, self._p["ik.min_singular_value"], a_max)
        q_d = getattr(self.law, "q_d", None)
        seed = np.array(q_d if q_d is not None and self.c.have_state else self.c.q, dtype=float)
        if isinstance(ref, CartesianTrajectory):
            return conv.trajectory(seed, ref)
        return conv.pose(seed, ref.R, ref.p)
