"""A FollowJointTrajectory goal without ROS: its validation, its tolerances and the monitor that ends it,
with ros2_controllers' JointTrajectoryController (JTC) semantics.  The node's action server
(nodes/follow_joint_trajectory.py) converts the goal message to plain values, calls `prepare_goal` on
its executor thread (validation, the partial-goal fill, the spline: a JointTrajectory) and hands the
trajectory and its `GoalMonitor` to the ControlLoop, whose control step calls `GoalMonitor.check` after
the law (the cheap part, on the control thread) and ends the goal on the step that decides it.

    traj, tol = prepare_goal(model_names, goal_names, times, P, V, A, efforts, hold_q, defaults, ...)
    monitor = GoalMonitor(traj, tol, model_names, continuous)
    monitor.check(t, q, v, q_d, v_d)     # per step: True when the goal just ended (monitor.outcome)

Error codes: the values of control_msgs/action/FollowJointTrajectory's Result (checked against the
message package by the tests).  Where JTC has no code of its own for an end (preemption, deactivation)
it answers INVALID_GOAL with the reason in error_string; so does this module for the ends JTC does not
have (watchdog trip, safety stops).

Tolerances (control_msgs/msg/JointTolerance): per joint (position, velocity, acceleration); 0 = not
checked.  Defaults as JTC's `constraints.*` parameters: path position = constraints.<joint>.trajectory,
goal position = constraints.<joint>.goal, goal velocity = constraints.stopped_velocity_tolerance,
goal_time = constraints.goal_time.  A goal's values: > 0 replaces the default, 0 keeps it, -1 erases it
(0), any other negative value is illegal (INVALID_GOAL here; JTC logs it and falls back to every
default).  The acceleration error is 0: the state carries no measured acceleration (JTC without an
acceleration state interface does the same).
"""
import math
from dataclasses import dataclass, field

import numpy as np

from .laws.base import wrap_angle
from .trajectory import JointTrajectory

SUCCESSFUL = 0
INVALID_GOAL = -1
INVALID_JOINTS = -2
OLD_HEADER_TIMESTAMP = -3
PATH_TOLERANCE_VIOLATED = -4
GOAL_TOLERANCE_VIOLATED = -5
CODE_NAMES = {SUCCESSFUL: "SUCCESSFUL", INVALID_GOAL: "INVALID_GOAL", INVALID_JOINTS: "INVALID_JOINTS",
              OLD_HEADER_TIMESTAMP: "OLD_HEADER_TIMESTAMP", PATH_TOLERANCE_VIOLATED: "PATH_TOLERANCE_VIOLATED",
              GOAL_TOLERANCE_VIOLATED: "GOAL_TOLERANCE_VIOLATED"}

_ERASE = -1.0
_FLOAT_EPS = float(np.finfo(np.float32).eps)     # JTC's "is -1" and "velocity is zero" tests use it


class GoalError(ValueError):
    """A goal refused: `code` (one of the error codes) and the readable reason (str(e))."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


@dataclass
class Tolerances:
    """path (n, 3) and goal (n, 3): [position, velocity, acceleration] per joint, model order, 0 = not
    checked; goal_time [s], 0 = wait for the goal tolerance without limit (JTC)."""
    path: np.ndarray
    goal: np.ndarray
    goal_time: float = 0.0


def default_tolerances(n, trajectory=0.0, goal=0.0, stopped_velocity=0.01, goal_time=0.0):
    """JTC's defaults from its constraints.* parameters (trajectory, goal: per joint, model order, or one
    value for all)."""
    path, g = np.zeros((n, 3)), np.zeros((n, 3))
    path[:, 0] = trajectory
    g[:, 0] = goal
    g[:, 1] = stopped_velocity
    for what, v in (("trajectory", path[:, 0]), ("goal", g[:, 0]), ("stopped_velocity_tolerance", g[:, 1])):
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"constraints: {what} must be finite and >= 0")
    if not math.isfinite(goal_time) or goal_time < 0:
        raise ValueError("constraints: goal_time must be finite and >= 0")
    return Tolerances(path, g, float(goal_time))


def resolve_tolerance(default, value, what):
    """JointTolerance.msg's rule (JTC's resolve_tolerance_source): > 0 the value, 0 the default, -1 none."""
    value = float(value)
    if not math.isfinite(value):
        raise GoalError(INVALID_GOAL, f"{what}: {value} is not a tolerance (finite, > 0, 0 = default, -1 = none)")
    if value > 0.0:
        return value
    if abs(value - _ERASE) < _FLOAT_EPS:
        return 0.0
    if value < 0.0:
        raise GoalError(INVALID_GOAL, f"{what}: {value} is illegal (> 0, 0 = default, -1 = none)")
    return float(default)


def goal_tolerances(defaults, names, path_tolerance=(), goal_tolerance=(), goal_time_tolerance=0.0):
    """The goal's tolerances over the defaults.  path_tolerance / goal_tolerance: (joint name, position,
    velocity, acceleration) tuples; names: the model's joint names (the rows)."""
    tol = Tolerances(defaults.path.copy(), defaults.goal.copy(), defaults.goal_time)
    tol.goal_time = resolve_tolerance(defaults.goal_time, goal_time_tolerance, "goal_time_tolerance")
    index = {n: i for i, n in enumerate(names)}
    for field_name, rows, table in (("path_tolerance", path_tolerance, tol.path),
                                    ("goal_tolerance", goal_tolerance, tol.goal)):
        for name, *values in rows:
            if name not in index:
                raise GoalError(INVALID_JOINTS, f"{field_name}: joint {name!r} is not one of the controller's "
                                                f"joints {list(names)}")
            i = index[name]
            for k, (kind, v) in enumerate(zip(("position", "velocity", "acceleration"), values)):
                table[i, k] = resolve_tolerance(table[i, k], v, f"{field_name} {name} {kind}")
    return tol


def prepare_goal(names, goal_names, times, positions, velocities, accelerations, efforts, hold_q,
                 defaults, path_tolerance=(), goal_tolerance=(), goal_time_tolerance=0.0, stamp=None,
                 now=0.0, allow_partial=True, allow_nonzero_end_velocity=False, lower=None, upper=None):
    """Validate a goal and build its trajectory, in JTC's order of checks.  names: the model's joints
    (model order); goal_names, times (N,), and per point the sequences positions / velocities /
    accelerations / efforts (each of len(goal_names) values, or empty); hold_q: the position the joints
    the goal leaves out hold (model order: the reference followed when the goal is prepared, as JTC fills
    them with the last command); stamp: header.stamp [s] or None (zero: start on arrival), now: the
    node's clock.  Returns (JointTrajectory with .stamp set, Tolerances); GoalError otherwise."""
    names = list(names)
    goal_names = list(goal_names)
    n, m = len(names), len(goal_names)
    if m == 0:
        raise GoalError(INVALID_JOINTS, "empty joint_names in the trajectory")
    if len(set(goal_names)) != m:
        dup = sorted({x for x in goal_names if goal_names.count(x) > 1})
        raise GoalError(INVALID_JOINTS, f"joint_names: {dup} repeated")
    unknown = [x for x in goal_names if x not in names]
    if unknown:
        raise GoalError(INVALID_JOINTS, f"joint(s) {unknown} are not the controller's joints {names}")
    if m != n and not allow_partial:
        raise GoalError(INVALID_JOINTS, f"the goal names {m} of the controller's {n} joints and "
                                        "allow_partial_joints_goal is false")
    N = len(times)
    if N == 0:
        raise GoalError(INVALID_GOAL, "empty trajectory: no points")
    t = np.asarray(times, dtype=float)
    for i in range(N):
        for what, seq, required in (("positions", positions, True), ("velocities", velocities, False),
                                    ("accelerations", accelerations, False)):
            k = len(seq[i])
            if k != m and (required or k != 0):
                raise GoalError(INVALID_GOAL, f"point {i}: {k} {what} for {m} joints")
        if len(efforts[i]):
            raise GoalError(INVALID_GOAL, f"point {i}: effort given; this controller computes the torque "
                                          "itself (effort fields are not supported)")
    if not np.all(np.isfinite(t)):
        raise GoalError(INVALID_GOAL, "time_from_start: not finite")
    if np.any(t < 0):
        raise GoalError(INVALID_GOAL, f"time_from_start: negative ({t.min():.6f} s)")
    if N > 1 and np.any(np.diff(t) <= 0):
        i = int(np.flatnonzero(np.diff(t) <= 0)[0])
        raise GoalError(INVALID_GOAL, f"time_from_start not strictly increasing: point {i} at {t[i]:.6f} s, "
                                      f"point {i + 1} at {t[i + 1]:.6f} s")
    has_v = all(len(x) == m for x in velocities)
    has_a = has_v and all(len(x) == m for x in accelerations)
    P = np.array([list(p) for p in positions], dtype=float).reshape(N, m)
    V = np.array([list(p) for p in velocities], dtype=float).reshape(N, m) if has_v else None
    A = np.array([list(p) for p in accelerations], dtype=float).reshape(N, m) if has_a else None
    for what, arr in (("positions", P), ("velocities", V), ("accelerations", A)):
        if arr is not None and not np.all(np.isfinite(arr)):
            i, j = map(int, np.argwhere(~np.isfinite(arr))[0])
            raise GoalError(INVALID_GOAL, f"point {i}: {what} of {goal_names[j]} is {arr[i, j]} (not finite)")
    if V is not None and not allow_nonzero_end_velocity and np.any(np.abs(V[-1]) > _FLOAT_EPS):
        j = int(np.argmax(np.abs(V[-1])))
        raise GoalError(INVALID_GOAL, f"the last point's velocity of {goal_names[j]} is {V[-1, j]:.6g}, not zero "
                                      "(allow_nonzero_velocity_at_trajectory_end is false)")
    if stamp is not None and stamp + t[-1] < now:
        raise GoalError(OLD_HEADER_TIMESTAMP, f"header.stamp {stamp:.3f} s + the last time_from_start "
                                              f"{t[-1]:.3f} s is before now ({now:.3f} s on the controller's "
                                              "clock): the trajectory ends in the past")
    tol = goal_tolerances(defaults, names, path_tolerance, goal_tolerance, goal_time_tolerance)
    # model order; the joints the goal leaves out hold hold_q (velocity, acceleration 0)
    cols = [goal_names.index(x) if x in goal_names else -1 for x in names]
    hold_q = np.asarray(hold_q, dtype=float).reshape(n)

    def full(arr, fill):
        if arr is None:
            return None
        out = np.empty((N, n))
        for k, c in enumerate(cols):
            out[:, k] = arr[:, c] if c >= 0 else fill[k]
        return out
    zero = np.zeros(n)
    try:
        traj = JointTrajectory(t, full(P, hold_q), full(V, zero), full(A, zero), lower=lower, upper=upper)
    except ValueError as e:
        raise GoalError(INVALID_GOAL, str(e)) from None
    traj.stamp = stamp
    return traj, tol


@dataclass
class Outcome:
    """How a goal ended: status 'succeeded' | 'aborted' | 'canceled', the error code and its reason."""
    status: str
    code: int
    message: str


@dataclass
class GoalMonitor:
    """The running goal's checks (JTC's update()): before the last point (and on the first sample) the
    path tolerance, after it the goal tolerance, until goal_time past the last point's time (0: no
    limit).  `hold` is True when an abort asks the arm to hold where it is (path / goal violations)."""
    trajectory: JointTrajectory
    tolerances: Tolerances
    names: list
    continuous: object = None            # mask of continuous joints (shortest angle), or None
    outcome: Outcome = None
    first: bool = True
    e_pos: np.ndarray = field(default=None, repr=False)
    e_vel: np.ndarray = field(default=None, repr=False)

    def __post_init__(self):
        n = len(self.names)
        self._e = np.zeros(2 * n)                  # [q_d - q; v_d - v]
        self._y = np.zeros(2 * n)
        self.e_pos, self.e_vel = self._e[:n], self._e[n:]
        tp, tg = self.tolerances.path, self.tolerances.goal
        self._path_on = bool(np.any(tp[:, :2] > 0))
        self._pp, self._pv = np.where(tp[:, 0] > 0, tp[:, 0], np.inf), np.where(tp[:, 1] > 0, tp[:, 1], np.inf)
        self._gp, self._gv = np.where(tg[:, 0] > 0, tg[:, 0], np.inf), np.where(tg[:, 1] > 0, tg[:, 1], np.inf)
        # 1 / tolerance (0: not checked): every |e_i| <= tol_i when sum (e_i / tol_i)^2 <= 1, one dot product
        # a step; the exact test only when that sum is above 1
        self._inv_path = 1.0 / np.concatenate([self._pp, self._pv])
        self._inv_goal = 1.0 / np.concatenate([self._gp, self._gv])
        self._end = None

    @property
    def done(self):
        return self.outcome is not None

    def end(self, status, code, message):
        """End the goal (the first end stands).  True if this call ended it."""
        if self.outcome is not None:
            return False
        self.outcome = Outcome(status, code, message)
        return True

    def _violation(self, pos_tol, vel_tol, inv):
        y = np.multiply(self._e, inv, out=self._y)
        if y.dot(y) <= 1.0:
            return ""
        bad_p = np.abs(self.e_pos) > pos_tol
        bad_v = np.abs(self.e_vel) > vel_tol
        if not (bad_p.any() or bad_v.any()):
            return ""
        parts = []
        for j in np.flatnonzero(bad_p | bad_v):
            if bad_p[j]:
                parts.append(f"{self.names[j]} position error {self.e_pos[j]:+.4f} (tolerance {pos_tol[j]:g})")
            if bad_v[j]:
                parts.append(f"{self.names[j]} velocity error {self.e_vel[j]:+.4f} (tolerance {vel_tol[j]:g})")
        return "; ".join(parts)

    def check(self, t, q, v, q_d, v_d):
        """One control step at trajectory time t (the law's, on the trajectory's clock) with the measured
        (q, v) and the reference (q_d, v_d) the law used.  True when the goal ended here."""
        if self.outcome is not None:
            return False
        np.subtract(q_d, q, out=self.e_pos)
        if self.continuous is not None:
            self.e_pos[self.continuous] = wrap_angle(self.e_pos[self.continuous])
        np.subtract(v_d, v, out=self.e_vel)
        end = self._end
        if end is None:                            # the trajectory has started (its first step)
            end = self._end = self.trajectory.end_time
        before_last = t < end
        if (before_last or self.first) and self._path_on:
            why = self._violation(self._pp, self._pv, self._inv_path)
            if why:
                return self.end("aborted", PATH_TOLERANCE_VIOLATED,
                                f"path tolerance violated {max(end - t, 0.0):.3f} s before the last point's "
                                f"time: {why}; holding the current position")
        self.first = False
        if before_last:
            return False
        why = self._violation(self._gp, self._gv, self._inv_goal)
        if not why:
            return self.end("succeeded", SUCCESSFUL, f"goal reached {t - end:.3f} s after the last point's time")
        gt = self.tolerances.goal_time
        if gt > 0.0 and t - end > gt:
            return self.end("aborted", GOAL_TOLERANCE_VIOLATED,
                            f"goal tolerance not reached {t - end:.3f} s after the last point's time "
                            f"(goal_time_tolerance {gt:g} s): {why}; holding the current position")
        return False

    @property
    def hold(self):
        """The end asks the arm to hold where it is (JTC's set_hold_position)."""
        o = self.outcome
        return o is not None and o.code in (PATH_TOLERANCE_VIOLATED, GOAL_TOLERANCE_VIOLATED)
