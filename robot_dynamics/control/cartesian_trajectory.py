"""Cartesian (SE(3)) trajectory interpolation: what a trajectory_msgs/MultiDOFJointTrajectory carries for
one frame.  No ROS.

    traj = CartesianTrajectory(times, positions, rotations, twists=None, accels=None)
    traj.start(t0, R0, p0, twist0, max_velocity=(0.25, 1.0), max_acceleration=(1.0, 4.0))
    R, p, twist, accel = traj.sample(t)      # t absolute; holds the last pose (twist = accel = 0) after the end

Points: times (N,) relative to the start [s], positions (N, 3) [m], rotations (N, 3, 3) (or quaternions
(N, 4) x y z w through `from_quaternions`), optional twists (N, 6) [v; w] and accels (N, 6) [a; alpha]
in world-aligned axes (v, a: of the frame's origin; w, alpha: angular velocity and its derivative) --
the project's local_world_aligned convention, the one the Cartesian impedance law uses.

Coordinates.  The path is interpolated in six coordinates x = [p; phi] with

    R = R_ref Exp(phi)          R_ref: the first point's rotation; phi unwrapped along the points

(each point's phi = Log(R_ref^T R_k), replaced by the equivalent rotation vector phi + 2 pi m phi/|phi|
nearest the previous point's, so the path never takes the long way round).  p and phi go through the
joint-space JointTrajectory (control/trajectory.py) with its knot rules: accelerations given -> quintic
Hermite (p, v, a continuous); twists only -> cubic Hermite; poses only -> C2 clamped spline; zero
acceleration at both ends; before the first point / after the last: that pose at rest.  Between two
points with the same rotation axis about R_ref (e.g. two points) the orientation is the geodesic (slerp),
time-scaled like the position.  Velocities map through the right Jacobian Jr of Exp (pinocchio's
Jexp3):  R^T w = Jr(phi) phi',  R^T alpha = Jr(phi) phi'' + (d/dt Jr(phi)) phi'  (the last term by a
central difference of Jr along phi', 1e-6 relative).  Limitation: Jr is singular at |phi| = 2 pi, so the
orientation of every point must stay within less than a full turn of the first one (checked: ValueError
beyond 1.9 pi).

Start and approach (`start`): the current pose, twist and acceleration are prepended at t0 (unless the first time is 0
and the first point is the current pose within 1e-9).  With bounds, the approach segment lasts at
least the time a rest-to-rest quintic needs to cover the distance within them, separately for the
translation (|dp| with max_velocity[0], max_acceleration[0]) and the rotation (|dphi| with index 1):
T_a = max(15/8 d / v_max, sqrt(10/sqrt(3) d / a_max)); if the first time is shorter the whole trajectory
is delayed by the difference.  So a single point at t = 0 (a target that jumps) is approached along a
straight line (and the geodesic in rotation) with peak speed <= max_velocity and peak acceleration <=
max_acceleration, never stepped to.  (On the straight segment the bound is on |v|, not per axis: each
axis gets the share |d_i| / |d| of the bound.)  `stamp`: the absolute time of the points' time 0 (a
ROS header stamp), with JointTrajectory's rules: a future stamp holds until then, a past one skips
the points already due.
"""
import math

import numpy as np
import pinocchio as pin

from .trajectory import JointTrajectory

_EPS_JR = 1e-6


def _jr(phi):
    return pin.Jexp3(phi)


def _jr_dot(phi, dphi):
    """(d/dt Jr(phi(t))) dphi at phi' = dphi, by a central difference along dphi."""
    n = float(np.linalg.norm(dphi))
    if n == 0.0:
        return np.zeros(3)
    h = _EPS_JR / n
    return (_jr(phi + h * dphi) - _jr(phi - h * dphi)) @ dphi / (2.0 * h)


def _jr_dot_batch(phi, dphi):
    """_jr_dot for N points at once: phi, dphi (N, 3) -> (N, 3) (the same central difference)."""
    out = np.zeros_like(phi)
    n = np.linalg.norm(dphi, axis=1)
    for k in np.flatnonzero(n > 0.0):
        h = _EPS_JR / n[k]
        out[k] = (_jr(phi[k] + h * dphi[k]) - _jr(phi[k] - h * dphi[k])) @ dphi[k] / (2.0 * h)
    return out


def _unwrap(phi):
    """phi (N, 3) rotation vectors (each of norm <= pi, as log3 gives them), in place: each replaced by
    _nearest_equivalent of itself to the previous one (already replaced), as floats (no small arrays)."""
    tau = 2.0 * math.pi
    rows = phi.tolist()
    px, py, pz = rows[0]
    for k in range(1, len(rows)):
        x, y, z = rows[k]
        th = math.sqrt(x * x + y * y + z * z)
        if th < 1e-12:
            r = math.sqrt(px * px + py * py + pz * pz)
            cands = [(x, y, z)]
            if r > math.pi:
                s = tau / max(r, 1e-300)
                cands += [(s * px, s * py, s * pz), (-s * px, -s * py, -s * pz)]
        else:
            s = tau / th
            cands = [(x - s * x, y - s * y, z - s * z), (x, y, z), (x + s * x, y + s * y, z + s * z)]
        best = min(cands, key=lambda c: (c[0] - px) ** 2 + (c[1] - py) ** 2 + (c[2] - pz) ** 2)
        px, py, pz = best
        rows[k] = best
    phi[:] = rows


def _nearest_equivalent(phi, ref):
    """The rotation vector equivalent to phi (same rotation) nearest ref."""
    th = float(np.linalg.norm(phi))
    if th < 1e-12:
        a = ref / max(np.linalg.norm(ref), 1e-300)
        cands = [phi] + ([2 * math.pi * a, -2 * math.pi * a] if np.linalg.norm(ref) > math.pi else [])
    else:
        a = phi / th
        cands = [phi + 2 * math.pi * m * a for m in (-1, 0, 1)]
    return min(cands, key=lambda c: float(np.linalg.norm(c - ref)))


def quat_to_matrix(q):
    """x y z w (normalised here) -> 3x3; ValueError on a zero or non-finite quaternion."""
    q = np.asarray(q, dtype=float).reshape(-1)
    n = float(np.linalg.norm(q)) if q.shape == (4,) else float("nan")
    if not math.isfinite(n) or n < 1e-9:
        raise ValueError(f"quaternion {q.tolist()} is not a rotation (zero or not finite)")
    x, y, z, w = q / n
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def quats_to_matrices(Q):
    """quat_to_matrix for (N, 4) quaternions at once -> (N, 3, 3); the same ValueError for the first
    zero or non-finite one."""
    Q = np.asarray(Q, dtype=float).reshape(-1, 4)
    n = np.linalg.norm(Q, axis=1)
    bad = ~np.isfinite(n) | (n < 1e-9)
    if bad.any():
        quat_to_matrix(Q[int(np.flatnonzero(bad)[0])])             # raises, naming it
    x, y, z, w = (Q / n[:, None]).T
    return np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                     2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                     2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=1).reshape(-1, 3, 3)


class CartesianTrajectory:
    """A trajectory of one frame's pose: see the module doc.  ValueError on any bad input."""

    def __init__(self, times, positions, rotations, twists=None, accels=None):
        P = np.array(positions, dtype=float)
        Rs = np.array(rotations, dtype=float)
        N = P.shape[0] if P.ndim == 2 else -1
        if P.ndim != 2 or P.shape[1] != 3:
            raise ValueError(f"positions: expected shape (N, 3), got {P.shape}")
        if Rs.shape != (N, 3, 3):
            raise ValueError(f"rotations: expected shape ({N}, 3, 3), got {Rs.shape}")
        if not (np.all(np.isfinite(P)) and np.all(np.isfinite(Rs))):
            raise ValueError("positions / rotations: values must be finite")
        # (per point work batched: a 1000-point trajectory is converted on the node's executor while
        # its control thread needs the interpreter every millisecond)
        bad = (np.abs(np.matmul(np.swapaxes(Rs, 1, 2), Rs) - np.eye(3)).max(axis=(1, 2)) > 1e-6) \
            | (np.linalg.det(Rs) < 0) if N > 0 else np.zeros(0, dtype=bool)
        if bad.any():
            raise ValueError(f"rotations: point {int(np.flatnonzero(bad)[0])} is not a rotation matrix")
        Tw = None if twists is None else self._six(twists, N, "twists")
        Ac = None if accels is None else self._six(accels, N, "accels")
        if Ac is not None and Tw is None:
            raise ValueError("accels given without twists")
        self.R_ref = Rs[0].copy()
        rel = np.matmul(self.R_ref.T, Rs)
        phi = np.array([pin.log3(r) for r in rel]).reshape(N, 3)
        _unwrap(phi)
        norms = np.linalg.norm(phi, axis=1)
        if np.any(norms > 1.9 * math.pi):
            k = int(np.flatnonzero(norms > 1.9 * math.pi)[0])
            raise ValueError(f"rotations: point {k} is {norms[k]:.2f} rad from the first "
                             "along the path; at most 1.9 pi (split the trajectory)")
        X = np.hstack([P, phi])
        V = A = None
        RT = np.swapaxes(Rs, 1, 2)
        if Tw is not None:
            Jr = np.array([_jr(f) for f in phi]).reshape(N, 3, 3)
            V = np.zeros((N, 6))
            V[:, :3] = Tw[:, :3]
            V[:, 3:] = np.linalg.solve(Jr, (RT @ Tw[:, 3:, None]))[..., 0]
        if Ac is not None:
            A = np.zeros((N, 6))
            A[:, :3] = Ac[:, :3]
            rhs = (RT @ Ac[:, 3:, None])[..., 0] - _jr_dot_batch(phi, V[:, 3:])
            A[:, 3:] = np.linalg.solve(Jr, rhs[..., None])[..., 0]
        self._jt = JointTrajectory(times, X, V, A)    # checks the times
        self.times = self._jt.times
        self.positions, self.rotations = P, Rs
        self.kind = self._jt.kind
        self.delay = 0.0
        self.stamp = None           # absolute time of time 0 (None: the start time); see start()
        self.skipped = 0

    @classmethod
    def from_quaternions(cls, times, positions, quaternions, twists=None, accels=None):
        Q = np.array(quaternions, dtype=float)
        if Q.ndim != 2 or Q.shape[1] != 4:
            raise ValueError(f"quaternions: expected shape (N, 4), got {Q.shape}")
        return cls(times, positions, quats_to_matrices(Q), twists, accels)

    @staticmethod
    def _six(x, N, what):
        a = np.array(x, dtype=float)
        if a.shape != (N, 6):
            raise ValueError(f"{what}: expected shape ({N}, 6), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{what}: values must be finite")
        return a

    # ---- coordinates ----
    def _coords(self, R, p, twist, near, accel=None):
        """(x, x', x'') of a pose, twist and acceleration (world-aligned) in the path coordinates:
        phi' = Jr^-1 R^T w, phi'' = Jr^-1 (R^T alpha - (d/dt Jr) phi')."""
        phi = _nearest_equivalent(pin.log3(self.R_ref.T @ np.asarray(R, dtype=float)), near)
        x = np.concatenate([np.asarray(p, dtype=float).reshape(3), phi])
        v = np.zeros(6)
        a = np.zeros(6)
        if twist is not None:
            tw = np.asarray(twist, dtype=float).reshape(6)
            v[:3] = tw[:3]
            v[3:] = np.linalg.solve(_jr(phi), np.asarray(R).T @ tw[3:])
        if accel is not None:
            ac = np.asarray(accel, dtype=float).reshape(6)
            a[:3] = ac[:3]
            a[3:] = np.linalg.solve(_jr(phi), np.asarray(R).T @ ac[3:] - _jr_dot(phi, v[3:]))
        return x, v, a

    @property
    def started(self):
        return self._jt.started

    def start(self, t0, R0, p0, twist0=None, max_velocity=None, max_acceleration=None, accel0=None):
        """Start at absolute time t0 from the current pose (R0, p0), twist and acceleration (so a
        trajectory that replaces another one continues its pose, twist and acceleration); bounds
        (linear, angular) and `stamp` (the absolute time of time 0): see the module doc and
        JointTrajectory.start.  Returns self."""
        if self.stamp is not None:
            self._jt.stamp = self.stamp
            self._jt._retime(float(self.stamp) - float(t0))         # (start() repeats it, the same)
        x0, v0, a0 = self._coords(R0, p0, twist0, self._jt.positions[0, 3:], accel0)
        d = np.abs(self._jt.positions[0] - x0)
        mv = ma = None
        if max_velocity is not None:
            mv = self._split(d, max_velocity, "max_velocity")
        if max_acceleration is not None:
            ma = self._split(d, max_acceleration, "max_acceleration")
        self._jt.start(t0, x0, v0, max_velocity=mv, max_acceleration=ma, a0=a0)
        self.delay = self._jt.delay
        self.skipped = self._jt.skipped
        return self

    @staticmethod
    def _split(d, bounds, what):
        """Per-coordinate bounds whose rest-to-rest quintic time equals the one for |d| within the
        (linear, angular) bound: coordinate i gets bound * d_i / |d| (the whole bound where d = 0)."""
        b = np.array(bounds, dtype=float).reshape(-1)
        if b.shape != (2,) or not np.all(np.isfinite(b)) or np.any(b <= 0):
            raise ValueError(f"{what}: expected (linear, angular) > 0, got {bounds!r}")
        out = np.empty(6)
        for lo, bi in ((0, b[0]), (3, b[1])):
            seg = d[lo:lo + 3]
            n = float(np.linalg.norm(seg))
            out[lo:lo + 3] = bi if n == 0.0 else np.maximum(bi * seg / n, 1e-300)
        return out

    @property
    def start_time(self):
        return self._jt.start_time

    @property
    def end_time(self):
        return self._jt.end_time

    @property
    def duration(self):
        return self._jt.duration

    def done(self, t):
        return self._jt.done(t)

    def sample(self, t):
        """(R, p, twist, accel) at absolute time t (new arrays); world-aligned twist [v; w] and
        acceleration [a; alpha]."""
        x, xd, xdd = self._jt.sample(t)
        phi, dphi, ddphi = x[3:], xd[3:], xdd[3:]
        R = self.R_ref @ pin.exp3(phi)
        Jr = _jr(phi)
        twist = np.concatenate([xd[:3], R @ (Jr @ dphi)])
        accel = np.concatenate([xdd[:3], R @ (Jr @ ddphi + _jr_dot(phi, dphi))])
        return R, x[:3].copy(), twist, accel
