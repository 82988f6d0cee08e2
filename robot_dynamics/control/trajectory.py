"""Joint trajectory interpolation (what a trajectory_msgs/JointTrajectory carries), no ROS.

    traj = JointTrajectory(times, positions, velocities=None, accelerations=None)
    traj.start(t0, q0, v0)          # prepend the current state at t0 (absolute time, the State's clock)
    q, v, a = traj.sample(t)        # t absolute; holds the last point (v = a = 0) after the end

Each segment [t_i, t_i+1] is a polynomial in s = t - t_i, stored as 6 coefficients per joint:
- positions, velocities and accelerations given: quintic Hermite (q, v, a continuous at the knots);
- positions and velocities: cubic Hermite (q, v continuous);
- positions only: C2 cubic spline through the points with the start velocity (v0 of `start`, else
  zero) and zero velocity at the end (clamped spline; q, v, a continuous).
Ends: the reference starts and ends with zero acceleration whatever the kind (the hold after the end
has v = a = 0, and computed torque feeds a_d in as M a_d).  For the two cubic kinds the first and the
last segments are quintics instead of cubics: same positions and velocities at their knots, zero
acceleration at the trajectory's ends, and at the inner knot the acceleration of the neighbouring
cubic (so the spline stays C2 everywhere; cubic Hermite is C1 at its interior knots, C2 at the knots
next to the end segments; a one- or two-segment cubic Hermite uses the mean of the two cubic
accelerations at the middle knot).  A rest-to-rest single segment of length d in time T is then the
minimum-jerk quintic: peak velocity 15/8 d/T, peak acceleration 10/sqrt(3) d/T^2, a(0) = a(T) = 0.
The prepended start point carries q0, v0 and a0 (zero unless given: a trajectory that replaces
another one starts with the old one's acceleration, so nothing of the reference jumps).

Timing (`stamp`): the ROS convention of a JointTrajectory's header.stamp (as ros2_controllers'
JointTrajectoryController reads it): None (a zero stamp) starts the points at the start time; a
stamp in the future starts them then, the current state held until the first point (the approach
ends there); a stamp in the past skips the points already due, the rest followed at their times.

Start and the approach to the first point: `start(t0, q0, v0, continuous=, max_velocity=,
max_acceleration=)`.  When the first time is 0 and the first point is the current state (within
1e-9) nothing is prepended (ROS trajectories often repeat the current state at time 0).  Otherwise the
current state is prepended and, when bounds are given, the approach segment lasts at least the time a
rest-to-rest quintic needs to cover the largest joint distance d_j within them,
T_a = max_j max(15/8 d_j / max_velocity_j, sqrt(10/sqrt(3) d_j / max_acceleration)); if the first
time is shorter, the whole trajectory is delayed by the difference (a single point at t = 0 is
approached in T_a instead of being stepped to).  Without bounds (the default for a bare
JointTrajectory) a first time of 0 keeps the old meaning (the first point is the start, no approach).
The control laws always pass bounds: the model's velocity limits (1 rad/s where it has none) and
5 rad/s^2 (JointLaw.approach_bounds).  For continuous joints (mask `continuous`) the start angle is
replaced by the equivalent angle nearest the first point, so the approach takes the shortest way.
"""
import math
import bisect

import numpy as np
from scipy.linalg import solve_banded


def _hermite5(p0, v0, a0, p1, v1, a1, h):
    """Coefficients c0..c5 of the quintic with value, slope, curvature (p, v, a) at s = 0 and s = h
    (shape (6,) + p0.shape: also for K segments at once, p0 (K, n) and h (K, 1))."""
    d = p1 - p0
    return np.array([
        p0, v0, 0.5 * a0,
        (20 * d - (8 * v1 + 12 * v0) * h - (3 * a0 - a1) * h * h) / (2 * h ** 3),
        (-30 * d + (14 * v1 + 16 * v0) * h + (3 * a0 - 2 * a1) * h * h) / (2 * h ** 4),
        (12 * d - 6 * (v1 + v0) * h + (a1 - a0) * h * h) / (2 * h ** 5)])


def _hermite3(p0, v0, p1, v1, h):
    """Coefficients c0..c5 (c4 = c5 = 0) of the cubic with (p, v) at s = 0 and s = h (as _hermite5)."""
    d = p1 - p0
    z = np.zeros_like(p0)
    return np.array([p0, v0, (3 * d / h - 2 * v0 - v1) / h, (-2 * d / h + v0 + v1) / (h * h), z, z])


def _spline_velocities(t, P, v_first):
    """Knot velocities of the C2 cubic spline through P (K+1, n) at times t, clamped: v_0 = v_first,
    v_K = 0.  Interior knots k: v_{k-1}/h_{k-1} + 2 v_k (1/h_{k-1} + 1/h_k) + v_{k+1}/h_k
    = 3 (d_{k-1}/h_{k-1}^2 + d_k/h_k^2), a tridiagonal system."""
    K = len(t) - 1
    V = np.zeros_like(P)
    V[0] = v_first
    if K < 2:
        return V
    h = np.diff(t)
    d = np.diff(P, axis=0)
    m = K - 1
    ab = np.zeros((3, m))                # banded storage: super-, main and sub-diagonal
    ab[0, 1:] = 1.0 / h[1:m]
    ab[1] = 2.0 * (1.0 / h[:m] + 1.0 / h[1:])
    ab[2, :-1] = 1.0 / h[1:m]
    rhs = 3.0 * (d[:m] / (h[:m] ** 2)[:, None] + d[1:] / (h[1:] ** 2)[:, None])
    rhs[0] -= V[0] / h[0]
    V[1:K] = solve_banded((1, 1), ab, rhs)      # diagonally dominant: O(K), no pivoting needed
    return V


class JointTrajectory:
    """A joint trajectory: `times` (N,) relative to the start [s], strictly increasing and >= 0;
    `positions` (N, nv); optional `velocities`, `accelerations` (N, nv) (accelerations need
    velocities); optional `lower`/`upper` position limits (nv,) checked on the points.  ValueError on
    any bad input."""

    def __init__(self, times, positions, velocities=None, accelerations=None, lower=None, upper=None):
        t = self._arr(times, "times", ndim=1)
        if t.size == 0:
            raise ValueError("times: the trajectory has no point")
        if np.any(t < 0):
            raise ValueError(f"times: must be >= 0, got {t.min()}")
        if t.size > 1 and np.any(np.diff(t) <= 0):
            i = int(np.flatnonzero(np.diff(t) <= 0)[0])
            raise ValueError(f"times: must be strictly increasing, got {t[i]} then {t[i + 1]} at point {i + 1}")
        P = self._arr(positions, "positions", ndim=2)
        N, n = P.shape
        if N != t.size or n == 0:
            raise ValueError(f"positions: expected shape ({t.size}, nv), got {P.shape}")
        V = None if velocities is None else self._arr(velocities, "velocities", shape=P.shape)
        A = None if accelerations is None else self._arr(accelerations, "accelerations", shape=P.shape)
        if A is not None and V is None:
            raise ValueError("accelerations given without velocities")
        for name, lim, bad in (("lower", lower, lambda x, b: x < b - 1e-9),
                               ("upper", upper, lambda x, b: x > b + 1e-9)):
            if lim is None:
                continue
            lim = np.asarray(lim, dtype=float)
            if lim.shape != (n,):
                raise ValueError(f"{name}: expected {n} limits, got shape {lim.shape}")
            out = bad(P, lim)
            if np.any(out):
                i, j = map(int, np.argwhere(out)[0])
                raise ValueError(f"positions: point {i}, joint {j} = {P[i, j]} is outside the {name} limit {lim[j]}")
        self.times, self.positions, self.velocities, self.accelerations = t, P, V, A
        self.nv = n
        self.kind = "quintic" if A is not None else ("cubic_hermite" if V is not None else "cubic_spline")
        self.started = False
        self.delay = 0.0            # s the trajectory was delayed at start to bound the approach
        self.stamp = None           # absolute time of time 0 (None: the start time); see start()
        self.skipped = 0            # points already due at the start (stamp in the past)
        self._build(0.0, None, None)

    @staticmethod
    def _arr(x, what, ndim=None, shape=None):
        try:
            a = np.array(x, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{what}: not numeric") from None
        if ndim is not None and a.ndim != ndim:
            raise ValueError(f"{what}: expected a {ndim}-D array, got shape {a.shape}")
        if shape is not None and a.shape != shape:
            raise ValueError(f"{what}: expected shape {shape}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{what}: values must be finite")
        return a

    def start(self, t0, q0, v0=None, continuous=None, max_velocity=None, max_acceleration=None, a0=None):
        """Start at absolute time t0 from the current state (q0, v0, a0): prepends (q0, v0, a0 or 0) at
        t0 unless the first time is 0 and q0 is the first point; bounds the approach (see the module
        doc).  With `stamp` set (the absolute time of the trajectory's time 0, e.g. a ROS header stamp
        on the same clock), the points are at stamp + times: those due by t0 are dropped (all but the
        last when every point is due), the rest keep their times, and the approach from the current
        state to the first of them starts at t0 (a stamp in the future: the current state is held
        until the first point's time, reached then).  Can be called again to restart.  Returns self."""
        t0 = float(t0)
        if not np.isfinite(t0):
            raise ValueError("start: t0 must be finite")
        n = self.nv
        q0 = self._arr(q0, "q0", shape=(n,)).copy()
        v0 = np.zeros(n) if v0 is None else self._arr(v0, "v0", shape=(n,))
        a0 = np.zeros(n) if a0 is None else self._arr(a0, "a0", shape=(n,))
        if self.stamp is not None:
            self._retime(float(self.stamp) - t0)
        P0 = self.positions[0]
        if continuous is not None:
            c = np.asarray(continuous, dtype=bool)
            if c.shape != (n,):
                raise ValueError(f"continuous: expected {n} booleans, got shape {c.shape}")
            d = P0[c] - q0[c]
            q0[c] = P0[c] - (np.mod(d + math.pi, 2.0 * math.pi) - math.pi)   # nearest equivalent angle
        t_first = float(self.times[0])
        far = float(np.abs(P0 - q0).max()) > 1e-9
        T_a = 0.0
        if far and (max_velocity is not None or max_acceleration is not None):
            d = np.abs(P0 - q0)
            if max_velocity is not None:
                vm = self._arr(np.broadcast_to(max_velocity, (n,)), "max_velocity", shape=(n,))
                if np.any(vm <= 0):
                    raise ValueError("max_velocity: must be > 0")
                T_a = max(T_a, float(np.max(15.0 / 8.0 * d / vm)))
            if max_acceleration is not None:
                am = self._arr(np.broadcast_to(max_acceleration, (n,)), "max_acceleration", shape=(n,))
                if np.any(am <= 0):
                    raise ValueError("max_acceleration: must be > 0")
                T_a = max(T_a, float(np.max(np.sqrt(10.0 / math.sqrt(3.0) * d / am))))
        self.delay = max(T_a - t_first, 0.0) if T_a > 0.0 else 0.0
        # at rest on the first point: nothing to approach; it is held until its time (sample() before
        # the first knot), exactly (a prepended knot would let a spline wiggle there)
        at_rest = not far and not np.any(v0) and not np.any(a0)
        self._build(t0, q0, v0, prepend=((t_first > 0.0) or T_a > 0.0) and not at_rest, a0=a0)
        self.started = True
        return self

    def _retime(self, offset):
        """Times + offset (relative to the start time); the points at or before 0 (due) dropped,
        all but the last when every point is due (then at 0).  The original points are kept for a
        restart."""
        if not hasattr(self, "_orig"):
            self._orig = (self.times, self.positions, self.velocities, self.accelerations)
        t, P, V, A = self._orig
        t = t + offset
        keep = t > 0.0
        if not keep.any():
            keep[-1] = True
            t = t.copy()
            t[-1] = 0.0
        self.skipped = int(np.count_nonzero(~keep))
        self.times, self.positions = t[keep], P[keep]
        self.velocities = None if V is None else V[keep]
        self.accelerations = None if A is None else A[keep]

    def _build(self, t0, q0, v0, prepend=None, a0=None):
        t, P, V, A = self.times + t0 + getattr(self, "delay", 0.0), self.positions, self.velocities, \
            self.accelerations
        n = self.nv
        if prepend is None:
            prepend = self.times[0] > 0
        a_first = np.zeros(n) if a0 is None else a0
        if q0 is not None and prepend:
            t = np.concatenate([[t0], t])
            P = np.vstack([q0, P])
            V = None if V is None else np.vstack([v0, V])
            A = None if A is None else np.vstack([a_first, A])
        else:
            a_first = np.zeros(n)                  # the trajectory's own first point: at rest
        v_first = np.zeros(n) if v0 is None else v0
        if V is None:
            V = _spline_velocities(t, P, v_first)
        K = len(t) - 1
        C = np.zeros((max(K, 1), 6, n))
        if K >= 1:                                 # every segment at once (a 1000-point trajectory
            h = np.diff(t)[:, None]                # is built at its start, on the control thread)
            if A is not None:
                c = _hermite5(P[:-1], V[:-1], A[:-1], P[1:], V[1:], A[1:], h)
            else:
                c = _hermite3(P[:-1], V[:-1], P[1:], V[1:], h)
            C[:] = np.moveaxis(c, 0, 1)
        if A is None and K >= 1:
            # cubic kinds: quintic end segments, zero acceleration at both ends of the trajectory; at
            # the inner knot the neighbouring cubic's acceleration (mean of both when K <= 2)
            z = np.zeros(n)
            h0, hl = t[1] - t[0], t[K] - t[K - 1]
            if K == 1:
                C[0] = _hermite5(P[0], V[0], a_first, P[1], V[1], z, h0)
            else:
                a_end0 = 2 * C[0][2] + 6 * C[0][3] * h0          # cubic 0 at its end
                a_startl = 2 * C[K - 1][2]                       # last cubic at its start
                if K == 2:
                    a1 = a_l = 0.5 * (a_end0 + a_startl)
                else:
                    a1 = 2 * C[1][2]                             # cubic 1 at its start
                    hp = t[K - 1] - t[K - 2]
                    a_l = 2 * C[K - 2][2] + 6 * C[K - 2][3] * hp  # cubic K-2 at its end
                C[0] = _hermite5(P[0], V[0], a_first, P[1], V[1], a1, h0)
                C[K - 1] = _hermite5(P[K - 1], V[K - 1], a_l, P[K], V[K], z, hl)
        if K == 0:
            C[0, 0] = P[0]
        self._t, self._C, self._K = t, C, K
        self._tl = t.tolist()
        self._q_end = P[-1].copy()
        self._zero = np.zeros(n)

    @property
    def start_time(self):
        return float(self._t[0])

    @property
    def end_time(self):
        """Absolute time of the last point (relative when not started)."""
        return float(self._t[-1])

    @property
    def duration(self):
        return float(self._t[-1] - self._t[0])

    def done(self, t):
        return t >= self._t[-1]

    def peak_rates(self, samples=16):
        """(|v| max, |a| max, the times of each) per joint over the built spline, from `samples`
        evaluations per segment plus the knots (the relative times before start())."""
        if self._K == 0:
            z = np.zeros(self.nv)
            return z, z.copy(), z.copy(), z.copy()
        u = np.linspace(0.0, 1.0, samples + 1)                       # (S,) per segment
        h = np.diff(self._t)                                         # (K,)
        s = h[:, None] * u[None, :]                                  # (K, S)
        c = self._C                                                  # (K, 6, n)
        v = sum(k * c[:, k, None, :] * s[..., None] ** (k - 1) for k in range(1, 6))
        a = sum(k * (k - 1) * c[:, k, None, :] * s[..., None] ** (k - 2) for k in range(2, 6))
        t = (self._t[:-1, None] + s).reshape(-1)
        v, a = np.abs(v).reshape(-1, self.nv), np.abs(a).reshape(-1, self.nv)
        iv, ia = v.argmax(axis=0), a.argmax(axis=0)
        cols = np.arange(self.nv)
        return v[iv, cols], a[ia, cols], t[iv], t[ia]

    def sample(self, t):
        """(q, v, a) at absolute time t (new arrays).  Before the first knot: the first knot's
        values; after the last: the last position with zero velocity and acceleration."""
        tl = self._tl
        if t >= tl[-1] or self._K == 0:
            return self._q_end.copy(), self._zero.copy(), self._zero.copy()
        i = bisect.bisect_right(tl, t) - 1
        if i < 0:
            i, s = 0, 0.0
        else:
            s = t - tl[i]
        s2 = s * s
        s3 = s2 * s
        # rows: d^k/ds^k of [1, s, s^2, s^3, s^4, s^5], k = 0, 1, 2
        B = np.array([[1.0, s, s2, s3, s2 * s2, s3 * s2],
                      [0.0, 1.0, 2.0 * s, 3.0 * s2, 4.0 * s3, 5.0 * s2 * s2],
                      [0.0, 0.0, 2.0, 6.0 * s, 12.0 * s2, 20.0 * s3]])
        out = B @ self._C[i]
        return out[0], out[1], out[2]
