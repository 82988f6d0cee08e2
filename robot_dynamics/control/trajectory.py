"""Joint trajectory interpolation (what a trajectory_msgs/JointTrajectory carries), no ROS.

    traj = JointTrajectory(times, positions, velocities=None, accelerations=None)
    traj.start(t0, q0, v0)          # prepend the current state at t0 (absolute time, the State's clock)
    q, v, a = traj.sample(t)        # t absolute; holds the last point (v = a = 0) after the end

Each segment [t_i, t_i+1] is a polynomial in s = t - t_i, stored as 6 coefficients per joint:
- positions, velocities and accelerations given: quintic Hermite (q, v, a continuous at the knots);
- positions and velocities: cubic Hermite (q, v continuous);
- positions only: C2 cubic spline through the points with the start velocity (v0 of `start`, else
  zero) and zero velocity at the end (clamped spline; q, v, a continuous).
The prepended start point carries q0, v0 and zero acceleration.  When the first time is 0 the first
point is the start point and nothing is prepended (ROS trajectories often repeat the current state
at time 0).
"""
import bisect

import numpy as np


def _hermite5(p0, v0, a0, p1, v1, a1, h):
    """Coefficients c0..c5 of the quintic with value, slope, curvature (p, v, a) at s = 0 and s = h."""
    d = p1 - p0
    return np.array([
        p0, v0, 0.5 * a0,
        (20 * d - (8 * v1 + 12 * v0) * h - (3 * a0 - a1) * h * h) / (2 * h ** 3),
        (-30 * d + (14 * v1 + 16 * v0) * h + (3 * a0 - 2 * a1) * h * h) / (2 * h ** 4),
        (12 * d - 6 * (v1 + v0) * h + (a1 - a0) * h * h) / (2 * h ** 5)])


def _hermite3(p0, v0, p1, v1, h):
    """Coefficients c0..c5 (c4 = c5 = 0) of the cubic with (p, v) at s = 0 and s = h."""
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
    A = np.zeros((m, m))
    rhs = np.empty((m, P.shape[1]))
    for j in range(m):
        k = j + 1
        A[j, j] = 2.0 * (1.0 / h[k - 1] + 1.0 / h[k])
        if j > 0:
            A[j, j - 1] = 1.0 / h[k - 1]
        if j < m - 1:
            A[j, j + 1] = 1.0 / h[k]
        rhs[j] = 3.0 * (d[k - 1] / h[k - 1] ** 2 + d[k] / h[k] ** 2)
    rhs[0] -= V[0] / h[0]
    V[1:K] = np.linalg.solve(A, rhs)     # diagonally dominant, small: one solve at start
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

    def start(self, t0, q0, v0=None):
        """Start at absolute time t0 from the current state (q0, v0): prepends (q0, v0, 0) at t0 unless
        the first time is 0.  Can be called again to restart.  Returns self."""
        t0 = float(t0)
        if not np.isfinite(t0):
            raise ValueError("start: t0 must be finite")
        q0 = self._arr(q0, "q0", shape=(self.nv,))
        v0 = np.zeros(self.nv) if v0 is None else self._arr(v0, "v0", shape=(self.nv,))
        self._build(t0, q0, v0)
        self.started = True
        return self

    def _build(self, t0, q0, v0):
        t, P, V, A = self.times + t0, self.positions, self.velocities, self.accelerations
        n = self.nv
        if q0 is not None and self.times[0] > 0:
            t = np.concatenate([[t0], t])
            P = np.vstack([q0, P])
            V = None if V is None else np.vstack([v0, V])
            A = None if A is None else np.vstack([np.zeros(n), A])
        v_first = np.zeros(n) if v0 is None else v0
        if V is None:
            V = _spline_velocities(t, P, v_first)
        K = len(t) - 1
        C = np.zeros((max(K, 1), 6, n))
        for i in range(K):
            h = t[i + 1] - t[i]
            if A is not None:
                C[i] = _hermite5(P[i], V[i], A[i], P[i + 1], V[i + 1], A[i + 1], h)
            else:
                C[i] = _hermite3(P[i], V[i], P[i + 1], V[i + 1], h)
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
