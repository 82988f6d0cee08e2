"""Inverse kinematic model (MCI) of one frame, q' = G(X'), and the position IK that iterates it.  No ROS.

    ik = DifferentialIK(model, "panda_hand_tcp")        # task "pose" (6 x n) or "position" (3 x n)
    r = ik.step(q, twist, dt=1e-3)                      # r.qd, r.case, r.s_min, r.manipulability, r.damping
    res = PositionIK(model, "panda_hand_tcp").solve(q0, p_d, R_d)    # res.status, res.q, res.p, res.R

Task twist X' = [v; w] (Pinocchio's order): with reference "local_world_aligned" (the default) the
velocity of the frame's origin and the angular velocity, both in world axes; with "local" both in the
frame's own axes.  J is the frame Jacobian in the same reference (its 3 linear rows for "position").

Differential IK, damped least squares through the SVD (k = min(m, n) singular values):

    J = U S V^T                                    s_1 >= ... >= s_k = s_min
    lambda^2 = (1 - (s_min/eps)^2) lambda_max^2    if s_min < eps, else 0     (Nakamura, Maciejewski)
    J^# = V diag(s_i / (s_i^2 + lambda^2)) U^T     = J^+ when lambda = 0 (singular values <= tol: 0)
    N   = I - V_r V_r^T  = I - J^+ J               projector onto null(J), r = rank(J) (s_i > tol)
    q'  = J^# X' + N z                             z: secondary joint velocity, moves the frame by J N z = 0
    z   = k_p (q_rest - q) - k_l dH/dq + q'_0      posture, joint-limit distance, the caller's own
    H   = 1/(2n) sum_i ((q_i - qbar_i) / (q_max,i - q_min,i))^2        qbar: middle of the range

The three cases of the MCI (`case`): "redundant" (n > m, rank m: infinitely many solutions, J^+ X' is
the minimum-norm one and N z adds any other), "regular" (n = m, rank m: the one solution J^-1 X'),
"singular" (s_min < eps, or n < m: in general no exact solution; the result is the damped least-
squares one, J q' != X', `residual` = |J q' - X'| says by how much).  manipulability = sqrt(det(J J^T))
= prod(s_i) (0 when n < m).

Joint limits (`step(..., dt)`): every joint velocity within

    lo_i = max(-qd_max,i, min(0, (q_min,i - q_i)/dt)),   hi_i = min(qd_max,i, max(0, (q_max,i - q_i)/dt))

so that q + q' dt stays within the position limits (a joint already outside may not go further out)
and |q'| within the velocity limits; q' = 0 is always feasible.  Enforced by saturation in the null
space (Flacco, De Luca, Khatib 2012, without the task scaling): the joint that overshoots its bound
most is fixed at it, its column removed, X' - J_s q'_s re-solved by the others (with their z), until
none overshoots; at most n re-solves, and the result is within bounds by construction.

Position IK (`PositionIK`), Newton / Gauss-Newton on the pose error in world-aligned axes:

    e  = [p_d - p; log3(R_d R^T)]                  ([p_d - p] for "position")
    dq = G(e) over "dt = 1" (bounds q_min - q, q_max - q), then scaled: dq *= min(1, max_step/max|dq_i|)
    q <- q + dq                                    until |e_p| <= tol_p and |e_r| <= tol_r

Stationary points of |e|^2 with e != 0 (J^T e = 0) have a singular J or an active limit.  When the
error stops decreasing the solver looks along the lost directions (V's rows with s_i < eps): if a step
of `escape_step` there lowers |e| the stall was a saddle (stuck at a singularity: it steps there and
goes on, `escapes` times at most, then reports "singular"); if none does, the pose is a local minimum
of the error.  A run that ends so is followed by runs from `restarts` random seeds; when none
converges: "out_of_reach", with the closest pose found.  A run may also run out of iterations while
creeping toward such a minimum (on the xarm7 and the UR10, 5-25 % of targets 2 m out of reach): its
rate, the mean relative decrease of |e| per iteration over its last `window` = max(patience,
max_iterations // 4) iterations, below `creep_rate` (2 %: a metre of error would need a thousand
iterations to reach 1e-9 m at that rate) counts as a stall.  "max_iterations" only when some start ran
out still improving at creep_rate or faster; else the closest run's label (out_of_reach, singular).
Local descent cannot prove a target unreachable: a reachable one whose every start ends at a local
minimum (joint limits make them) is reported so too (from random seeds, one start converged on 43-56 % of random Panda and UR5 targets,
eleven starts on 197 of 200 Panda targets).  Statuses: converged, out_of_reach, singular,
max_iterations.

Bad input (NaN, wrong length, unknown frame, R not a rotation) raises ValueError before anything is
computed.  Fixed-base models only (nq = nv).  Cost: one frame Jacobian and one LAPACK SVD (dgesvd) per
step, plus one SVD per saturated joint.
"""
import math
from dataclasses import dataclass

import numpy as np
import pinocchio as pin
from scipy.linalg.lapack import dgesvd

from .backends import PinocchioBackend

TASKS = {"pose": 6, "position": 3}
IK_REFERENCES = ("local_world_aligned", "local")
_EPS = np.finfo(float).eps


@dataclass
class DiffIKResult:
    """One differential IK step.  qd: joint velocity (model order); case: "redundant" | "regular" |
    "singular"; s_min, manipulability, damping (lambda) and rank of the task Jacobian J; residual
    |J qd - twist|; saturated: joints (indices) held at a position or velocity bound."""
    qd: np.ndarray
    case: str
    s_min: float
    manipulability: float
    damping: float
    rank: int
    residual: float
    saturated: tuple


@dataclass
class IKResult:
    """A position IK solve.  status: "converged" | "out_of_reach" | "singular" | "max_iterations";
    q: the solution, or the closest configuration found; R, p: the frame's pose there; error: e there
    ([e_p; e_r] or [e_p]); position_error, rotation_error: |e_p| [m], |e_r| [rad]; iterations: over
    all starts; starts: the seed and the random restarts tried; s_min: the smallest singular value of
    the task Jacobian at q (0 with fewer joints than task rows), whatever the iterations saw."""
    status: str
    q: np.ndarray
    R: np.ndarray
    p: np.ndarray
    error: np.ndarray
    position_error: float
    rotation_error: float
    iterations: int
    starts: int
    s_min: float
    message: str

    @property
    def success(self):
        return self.status == "converged"


def _finite_vector(x, n, what):
    try:
        x = np.array(x, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: not a numeric vector") from None
    if x.shape != (n,):
        raise ValueError(f"{what}: expected {n} values, got {x.size}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what}: {x[~np.isfinite(x)][0]} at index {int(np.flatnonzero(~np.isfinite(x))[0])} "
                         "(values must be finite)")
    return x


def _nonnegative(x, what):
    x = float(x)
    if not (math.isfinite(x) and x >= 0.0):
        raise ValueError(f"{what} must be a finite number >= 0, got {x}")
    return x


def check_rotation(R, what="R", tol=1e-6):
    """R as a 3x3 float array; ValueError unless it is a finite rotation matrix (R^T R = I, det R = +1)."""
    try:
        R = np.array(R, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: not a numeric 3x3 matrix") from None
    if R.shape != (3, 3) or not np.all(np.isfinite(R)):
        raise ValueError(f"{what}: expected a finite 3x3 rotation matrix, got shape {R.shape}")
    err = float(np.abs(R.T @ R - np.eye(3)).max())
    if err > tol or np.linalg.det(R) < 0.0:
        raise ValueError(f"{what} is not a rotation matrix (max |R^T R - I| = {err:.2e}, "
                         f"det = {np.linalg.det(R):.3f}; need R^T R = I within {tol:g} and det = +1)")
    return R


class DifferentialIK:
    """q' = G(X') for one frame: damped least squares (SVD), nullspace objectives, joint limits.

    eps: singular-value threshold below which damping starts [same unit as J: m/rad for the linear
    rows, 1 for the angular ones]; lambda_max: the damping at s_min = 0.  With lambda_max >= eps,
    s / (s^2 + lambda^2) <= 1/eps for every s, so |J^# X'| <= |X'| / eps everywhere.  q_rest (default:
    the middle of the ranges), posture_gain k_p [1/s] and limit_gain k_l [1/s] define z (zero gains:
    the minimum-norm solution); velocity_limits default to the model's (<= 0 or inf: none).  With
    limits active, `damping`, `s_min` and `case` describe the full J; the re-solves after a saturation
    apply the same damping rule to the Jacobian of the free joints.
    """

    def __init__(self, model, frame, backend=None, task="pose", reference="local_world_aligned",
                 eps=0.05, lambda_max=0.1, q_rest=None, posture_gain=0.0, limit_gain=0.0,
                 velocity_limits=None):
        if model.nq != model.nv or model.floating_base:
            raise ValueError("DifferentialIK: fixed-base models only (nq = nv)")
        self.model, self.frame = model, model.check_frame(frame)
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; use one of {sorted(TASKS)}")
        if reference not in IK_REFERENCES:
            raise ValueError(f"unknown reference {reference!r}; use one of {IK_REFERENCES}")
        self.task, self.reference, self.m, self.n = task, reference, TASKS[task], model.nv
        self.backend = PinocchioBackend(model) if backend is None else backend
        self.eps = _nonnegative(eps, "eps")
        self.lambda_max = _nonnegative(lambda_max, "lambda_max")
        self.posture_gain = _nonnegative(posture_gain, "posture_gain")
        self.limit_gain = _nonnegative(limit_gain, "limit_gain")
        n = self.n
        self.q_min, self.q_max = model.lower_limits.astype(float), model.upper_limits.astype(float)
        bounded = np.isfinite(self.q_min) & np.isfinite(self.q_max) & (self.q_max > self.q_min)
        lo, hi = np.where(bounded, self.q_min, 0.0), np.where(bounded, self.q_max, 1.0)
        self.q_mid = np.where(bounded, 0.5 * (lo + hi), 0.0)
        # dH/dq_i = (q_i - qbar_i) / (n (q_max,i - q_min,i)^2), 0 for an unbounded joint
        self._h_scale = np.where(bounded, 1.0 / (n * (hi - lo) ** 2), 0.0)
        self.q_rest = self.q_mid.copy() if q_rest is None else _finite_vector(q_rest, n, "q_rest")
        vl = model.velocity_limits if velocity_limits is None else velocity_limits
        vl = np.array(vl, dtype=float).reshape(-1)
        if vl.shape != (n,) or np.any(np.isnan(vl)):
            raise ValueError(f"velocity_limits: expected {n} numbers, got {vl.tolist()}")
        self.qd_max = np.where(vl > 0.0, vl, np.inf)
        # bounds() as one (2, n) array: rows lo, hi
        self._qlim = np.array([self.q_min, self.q_max])
        self._blo = np.array([-self.qd_max, np.zeros(n)])
        self._bhi = np.array([np.zeros(n), self.qd_max])

    # ---- the pieces ----
    def jacobian(self, q):
        """The task Jacobian J (m x n) at q, in the IK's reference."""
        J = self.backend.frame_jacobian(q, self.frame, self.reference)
        return J[:3] if self.m == 3 else J

    def secondary(self, q, qd0=None):
        """z = k_p (q_rest - q) - k_l dH/dq + qd0, or None when there is none."""
        z = None
        if self.posture_gain:
            z = self.posture_gain * (self.q_rest - q)                       # k_p (q_rest - q)
        if self.limit_gain:
            g = self.limit_gain * self._h_scale * (q - self.q_mid)           # k_l dH/dq
            z = -g if z is None else z - g
        if qd0 is not None:
            z = qd0 if z is None else z + qd0
        return z

    def nullspace(self, q):
        """N = I - J^+ J (n x n) at q, from the SVD: the joint velocities that leave the frame still."""
        J = self.jacobian(q)
        _, s, Vt = self._svd(J)
        Vr = Vt[:self._rank(s, J.shape)]
        return np.eye(self.n) - Vr.T @ Vr

    def bounds(self, q, dt):
        """(lo, hi): joint velocity bounds over dt from the position and velocity limits."""
        B = (self._qlim - q) / dt                 # [(q_min - q)/dt; (q_max - q)/dt]
        np.maximum(B, self._blo, out=B)           # lo = clip((q_min - q)/dt, -qd_max, 0)
        np.minimum(B, self._bhi, out=B)           # hi = clip((q_max - q)/dt, 0, qd_max)
        return B[0], B[1]

    # ---- the step ----
    def step(self, q, twist, dt=None, qd0=None):
        """q' for the task twist at q.  dt: None for the pure MCI (no limits), else the step over which
        q + q' dt must stay within the position limits (and |q'| within the velocity limits).
        qd0: an extra secondary joint velocity, projected into the nullspace."""
        if type(q) is not np.ndarray or q.dtype != np.float64 or q.shape != (self.n,):
            q = self.backend._q(q)             # ValueError on a wrong length; NaN: the Jacobian names it
        x = twist
        if type(x) is not np.ndarray or x.dtype != np.float64 or x.shape != (self.m,) or not math.isfinite(x @ x):
            x = _finite_vector(twist, self.m, "twist")
        if qd0 is not None:
            qd0 = _finite_vector(qd0, self.n, "qd0")
        if dt is not None and not (math.isfinite(dt) and dt > 0.0):
            raise ValueError(f"dt must be a finite number > 0 (or None for no limits), got {dt}")
        J = self.jacobian(q)                   # checks q (ValueError naming the joint)
        z = self.secondary(q, qd0)
        lo, hi = (None, None) if dt is None else self.bounds(q, dt)
        return self._solve(J, x, z, lo, hi)

    def _svd(self, J):
        U, s, Vt, info = dgesvd(J, full_matrices=0)          # J = U S V^T, thin
        if info != 0:
            raise ValueError(f"SVD of the Jacobian failed (LAPACK info {info})")
        return U, s, Vt

    @staticmethod
    def _rank(s, shape):
        return int(np.count_nonzero(s > max(shape) * _EPS * s[0])) if s.size else 0

    def _dls(self, J, x, z, fade=1.0):
        """q' = J^# x + N z with the damping rule (lambda_max^2 scaled by fade); returns q', s, lambda^2,
        rank."""
        U, s, Vt = self._svd(J)
        k = s.size
        if k == 0:
            return np.zeros(J.shape[1]), s, 0.0, 0
        s_min = float(s[-1])
        lam2 = (1.0 - (s_min / self.eps) ** 2) * self.lambda_max ** 2 * fade if s_min < self.eps else 0.0
        if s_min > max(J.shape) * _EPS * s[0]:                 # full rank r = k (the usual case)
            r, w = k, s / (s * s + lam2)                       # s_i / (s_i^2 + lambda^2)
        else:
            r = self._rank(s, J.shape)
            w = np.zeros(k)
            w[:r] = s[:r] / (s[:r] * s[:r] + lam2)             # singular values <= tol: 0
        qd = Vt.T @ (w * (U.T @ x))                            # J^# x
        if z is not None:
            Vr = Vt if r == k else Vt[:r]
            qd += z - Vr.T @ (Vr @ z)                          # + (I - V_r V_r^T) z
        return qd, s, lam2, r

    def _solve(self, J, x, z, lo, hi, fade=1.0):
        m, n = J.shape
        qd, s, lam2, r = self._dls(J, x, z, fade)
        sat = []
        if lo is not None:
            over = np.maximum(qd - hi, lo - qd)                # > 0: outside [lo, hi]
            if over.max() > 0.0:
                free = np.ones(n, dtype=bool)
                xs = x.copy()
                while True:
                    j = int(np.argmax(over))                   # the worst free joint (saturated ones: 0)
                    if over[j] <= 0.0:
                        break
                    qd[j] = hi[j] if qd[j] > hi[j] else lo[j]  # saturate it at its bound
                    free[j] = False
                    sat.append(j)
                    if len(sat) == n:
                        break
                    xs -= J[:, j] * qd[j]                      # X' - J_s q'_s
                    qd[free] = self._dls(J[:, free], xs, None if z is None else z[free], fade)[0]
                    over = np.maximum(qd - hi, lo - qd)
                    over[sat] = 0.0
        sl = s.tolist()
        s_min = sl[-1] if sl else 0.0
        if n < m or s_min < self.eps or r < m:
            case = "singular"
        else:
            case = "redundant" if n > m else "regular"
        e = J @ qd - x
        return DiffIKResult(qd, case, s_min, math.prod(sl) if n >= m else 0.0, math.sqrt(lam2), r,
                            math.sqrt(e @ e), tuple(sat))


class PositionIK:
    """q with FK(q) = the target pose, by iterating DifferentialIK on the pose error (see the module doc).

    tol_p [m], tol_r [rad]: convergence; max_step [rad]: largest joint change per iteration;
    fade_error [m | rad]: the damping is lambda^2 min(1, |e|^2 / fade_error^2), so that it vanishes
    near the solution (quadratic convergence there, Levenberg-Marquardt style), and z is scaled by the
    same factor (a nullspace step moves the frame to second order: it would stop the convergence);
    escape_step [rad],
    escapes: the saddle escape; restarts: random seeds (within the limits, drawn from `seed`) tried
    after the caller's when it does not converge; creep_rate: a run that runs out of iterations while
    |e| shrinks by less than this fraction per iteration (mean over its last quarter) was creeping
    toward a local minimum (out_of_reach), not getting there (max_iterations); posture_gain, limit_gain: per-iteration gains of the
    nullspace objectives; limits=False ignores the position limits.  Other arguments as DifferentialIK's
    (the reference is local_world_aligned).
    """

    def __init__(self, model, frame, backend=None, task="pose", tol_p=1e-9, tol_r=1e-9, max_iterations=100,
                 max_step=0.3, eps=0.05, lambda_max=0.1, fade_error=0.1, q_rest=None, posture_gain=0.0,
                 limit_gain=0.0, escape_step=0.1, escapes=5, patience=8, restarts=10, seed=0, limits=True,
                 creep_rate=0.02):
        self.diff = d = DifferentialIK(model, frame, backend, task, "local_world_aligned", eps, lambda_max,
                                       q_rest, posture_gain, limit_gain)
        self.tol_p, self.tol_r = _nonnegative(tol_p, "tol_p"), _nonnegative(tol_r, "tol_r")
        self.max_step, self.escape_step = _nonnegative(max_step, "max_step"), _nonnegative(escape_step, "escape_step")
        self.fade_error = _nonnegative(fade_error, "fade_error")
        if not (self.max_step > 0.0):
            raise ValueError("max_step must be > 0")
        self.max_iterations, self.escapes, self.patience = int(max_iterations), int(escapes), int(patience)
        self.restarts, self.seed = int(restarts), seed
        if self.max_iterations < 1 or self.escapes < 0 or self.patience < 1 or self.restarts < 0:
            raise ValueError("max_iterations and patience must be >= 1, escapes and restarts >= 0")
        self.window = max(self.patience, self.max_iterations // 4)     # iterations the rate is judged over
        self.creep_rate = float(creep_rate)
        if not (0.0 <= self.creep_rate < 1.0):
            raise ValueError(f"creep_rate must be in [0, 1) (a relative decrease of |e| per iteration), "
                             f"got {creep_rate}")
        self.limits = bool(limits)
        inf = np.full(d.n, np.inf)
        self.q_min, self.q_max = (d.q_min, d.q_max) if limits else (-inf, inf)

    def error(self, q, p_d, R_d):
        """(e, R, p) at q: e = [p_d - p; log3(R_d R^T)] ([p_d - p] for a position task)."""
        R, p = self.diff.backend.frame_placement(q, self.diff.frame)
        R, p = R.copy(), p.copy()
        if R_d is None:
            return p_d - p, R, p
        return np.concatenate([p_d - p, pin.log3(R_d @ R.T)]), R, p

    def solve(self, q0, p, R=None):
        """Solve for the frame at position p (and rotation R for a "pose" task) from the seed q0
        (clipped into the joint limits), then from `restarts` random seeds until one converges.
        Returns an IKResult (the run that came closest); ValueError on bad input."""
        d = self.diff
        q = _finite_vector(q0, d.n, "q0")
        p_d = _finite_vector(p, 3, "p (target position)")
        if d.task == "pose":
            if R is None:
                raise ValueError("a 'pose' task needs the target rotation R (or use task='position')")
            R_d = check_rotation(R, "R (target rotation)")
        elif R is not None:
            raise ValueError("a 'position' task takes no target rotation R")
        else:
            R_d = None
        rng = None
        best, total, fastest = None, 0, -1.0
        for start in range(self.restarts + 1):
            if start:
                rng = np.random.default_rng(self.seed) if rng is None else rng
                q = self._random_seed(rng)
            run = self._descend(np.clip(q, self.q_min, self.q_max), p_d, R_d)
            total += run[2]
            if run[0] == "max_iterations":
                fastest = max(fastest, run[5])             # the quickest improvement of a run that ran out
            if best is None or run[1][0] < best[1][0] or run[0] == "converged":
                best = run
            if run[0] == "converged":
                break
        status, (f, q, e, Rq, pq), _, _, escapes, _ = best
        if status != "converged":
            # no start converged: "max_iterations" only when a start ran out still improving at
            # creep_rate or faster (more iterations might converge); the others stalled at a local
            # minimum, at a saddle, or crept toward a minimum slower than that: the best one's status
            if fastest >= self.creep_rate:
                status = "max_iterations"
            elif status == "max_iterations":
                status = "out_of_reach"
        s_min = self._s_min(q)
        ep = float(np.linalg.norm(e[:3]))
        er = float(np.linalg.norm(e[3:])) if e.size > 3 else 0.0
        starts = start + 1
        msg = {"converged": f"converged in {total} iterations ({starts} start{'s' if starts > 1 else ''})",
               "out_of_reach": f"target out of reach{' (within the joint limits)' if self.limits else ''}: "
                               f"the closest pose found is {ep:.3g} m, {er:.3g} rad away ({starts} starts, each "
                               "ended at a local minimum of the error or crept toward one, |e| shrinking by less "
                               f"than {100 * self.creep_rate:g} % per iteration: local descent cannot prove that "
                               "none is closer)",
               "singular": f"stuck at a singular configuration (s_min = {s_min:.2g}): {ep:.3g} m, {er:.3g} rad "
                           f"from the target after {escapes} escapes ({starts} starts)",
               "max_iterations": f"not converged in {self.max_iterations} iterations: {ep:.3g} m, "
                                 f"{er:.3g} rad from the target ({starts} starts; one was still getting "
                                 f"closer by {100 * fastest:.2g} % per iteration)"}[status]
        return IKResult(status, q.copy(), Rq, pq, e, ep, er, total, starts, s_min, msg)

    def _s_min(self, q):
        """The smallest singular value of the task Jacobian at q (0 with fewer joints than task rows)."""
        J = self.diff.jacobian(q)
        if J.shape[1] < J.shape[0]:
            return 0.0
        return float(self.diff._svd(J)[1][-1])

    def _random_seed(self, rng):
        lo = np.where(np.isfinite(self.q_min), self.q_min, -np.pi)
        hi = np.where(np.isfinite(self.q_max), self.q_max, np.pi)
        return rng.uniform(lo, hi)

    def _descend(self, q, p_d, R_d):
        """One run from q: (status, (|e|^2, q, e, R, p) of the best iterate, iterations, s_min, escapes,
        rate): rate, for a run that ran out of iterations, the mean relative decrease of |e| per iteration
        over its last `window` iterations (else 0)."""
        d = self.diff
        e, Rq, pq = self.error(q, p_d, R_d)
        best = (e @ e, q, e, Rq, pq)             # the lowest |e|^2 so far
        it = since = escapes = 0
        s_min, status = float("nan"), "max_iterations"
        fade2 = self.fade_error ** 2
        w = self.window
        hist = [best[0]] * (w + 1)               # the lowest |e|^2 at the last w + 1 iterations (a ring)
        while True:
            if self._converged(e):
                best, status = (e @ e, q, e, Rq, pq), "converged"
                break
            if it == self.max_iterations:
                break
            hist[it % (w + 1)] = best[0]
            it += 1
            fade = min(1.0, (e @ e) / fade2) if fade2 > 0.0 else 1.0        # min(1, |e|^2/fade_error^2)
            z = d.secondary(q)
            z = None if z is None else fade * z                            # z faded, lambda^2 faded
            r = d._solve(d.jacobian(q), e, z, self.q_min - q, self.q_max - q, fade)   # G(e) over dt = 1
            dq, s_min = r.qd, r.s_min
            big = np.abs(dq).max()
            if big > self.max_step:
                dq *= self.max_step / big                              # same direction, shorter
            q = np.clip(q + dq, self.q_min, self.q_max)
            e, Rq, pq = self.error(q, p_d, R_d)
            if e @ e < best[0] * (1.0 - 1e-6):
                best, since = (e @ e, q, e, Rq, pq), 0
            else:
                since += 1
            if since < self.patience and big > 1e-14:
                continue
            # stalled: a local minimum of |e|^2 (out of reach), or a saddle at a singularity
            f, q = best[0], best[1]
            _, s, Vt = d._svd(d.jacobian(q))
            s_min = float(s[-1])
            q_esc = self._descent(q, f, Vt[s < d.eps], p_d, R_d)       # along the lost directions
            if q_esc is None:
                status = "out_of_reach"
                break
            if escapes == self.escapes:
                status = "singular"
                break
            escapes += 1
            q = q_esc
            e, Rq, pq = self.error(q, p_d, R_d)
            best, since = (e @ e, q, e, Rq, pq), 0
        rate = 0.0
        if status == "max_iterations":
            # ran out: how fast was it still improving?  |e| over the last k <= w iterations shrank
            # by rho^k: rate = 1 - rho, the mean relative decrease of |e| per iteration
            k = min(w, it)
            f_then = hist[(it - k) % (w + 1)]
            rate = 1.0 - (best[0] / f_then) ** (0.5 / k) if f_then > 0.0 else 0.0
        return status, best, it, s_min, escapes, rate

    def _converged(self, e):
        return e[:3] @ e[:3] <= self.tol_p ** 2 and (e.size == 3 or e[3:] @ e[3:] <= self.tol_r ** 2)

    def _descent(self, q, f, lost, p_d, R_d):
        """A configuration escape_step away along a lost direction (+ or -) with a lower error, or None."""
        best_f, best_q = f * (1.0 - 1e-9), None
        for v in lost:
            dv = self.escape_step * v / np.abs(v).max()
            for qt in (q + dv, q - dv):
                qt = np.clip(qt, self.q_min, self.q_max)
                e = self.error(qt, p_d, R_d)[0]
                if e @ e < best_f:
                    best_f, best_q = e @ e, qt
        return best_q
