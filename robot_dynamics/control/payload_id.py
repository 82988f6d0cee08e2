"""Payload identification: mass, centre of mass (and rotational inertia where the motion excites it)
of a load rigidly held at a frame, by linear least squares.  No ROS.

    pid = PayloadIdentifier(model, backend, frame="panda_hand_tcp")
    for q in static_poses(model, q_home):            # or samples along excitation_trajectory(...)
        ... hold q, then:
        pid.add_ft(q, wrench)                        # F/T sensor at `frame`, and/or
        pid.add_torques(q, tau)                      # measured joint torques (total)
    est = pid.solve()                                # PayloadEstimate: mass, com, inertia, std, cond
    est.attach(model)                                # Model.attach_payload(frame, mass, com, inertia)

Parameters (the load's, about the frame origin, in the frame's axes):
    phi = [m, m cx, m cy, m cz, Ixx, Ixy, Ixz, Iyy, Iyz, Izz]        (I about the frame origin)
The wrench the load exerts on the frame (what a sensor at the frame reads: `MujocoSim.ft_wrench`
convention, a static mass reads f = m g) is linear in phi.  With b = g - a_o (g: gravity, a_o: the
classical acceleration of the frame origin; angular velocity w, acceleration wd; all in frame axes),
Newton-Euler for the load gives
    f = m b - wd x (m c) - w x (w x (m c))
    n = (m c) x b - I wd - w x (I w)
i.e. w = A(b, w, wd) phi with A 6 x 10 (`load_regressor`).  Joint torques see it through the
frame Jacobian: the motors supply the load's wrench, RNEA_model(q, v, a) - tau_meas = J_local(q)^T A phi
(the model without this load).

Static poses (v = a = 0) give b = R^T g only: m and m c are identifiable when the frame takes at
least two orientations with respect to gravity that are not about the same axis (the solver uses
phi[:4] then); the inertia needs angular velocity/acceleration (an excitation trajectory), and is
estimated when `inertia=True`.  With F/T data an unknown sensor bias (6 constants) may be estimated
alongside (`ft_bias=True`): that needs more orientations (the bias is constant, the weight rotates).

The estimate is ordinary least squares on the stacked rows (each source optionally weighted by
1/sigma); its covariance is s^2 (A^T A)^-1 with s^2 = |residual|^2 / (rows - params), propagated
to the centre of mass and reported as standard deviations; the condition number is that of A with
unit-norm columns (scale-free: large means the poses do not separate the parameters).
"""
from dataclasses import dataclass, field

import numpy as np

from .laws.base import check_scalar

PARAM_NAMES = ("m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Ixz", "Iyy", "Iyz", "Izz")


def _skew(x):
    return np.array([[0.0, -x[2], x[1]], [x[2], 0.0, -x[0]], [-x[1], x[0], 0.0]])


def _lmat(x):
    """L(x) with I x = L(x) [Ixx Ixy Ixz Iyy Iyz Izz] for a symmetric I."""
    return np.array([[x[0], x[1], x[2], 0.0, 0.0, 0.0],
                     [0.0, x[0], 0.0, x[1], x[2], 0.0],
                     [0.0, 0.0, x[0], 0.0, x[1], x[2]]])


def load_regressor(b, w=None, wd=None):
    """6 x 10 A with [f; n] = A phi: the wrench a rigid load exerts on its frame (see module doc).
    b = g - a_o, w, wd: frame axes (w = wd = 0 for a static pose)."""
    b = np.asarray(b, dtype=float)
    w = np.zeros(3) if w is None else np.asarray(w, dtype=float)
    wd = np.zeros(3) if wd is None else np.asarray(wd, dtype=float)
    A = np.zeros((6, 10))
    Sw = _skew(w)
    A[:3, 0] = b                                         # f = m b
    A[:3, 1:4] = -_skew(wd) - Sw @ Sw                    #   - wd x mc - w x (w x mc)
    A[3:, 1:4] = -_skew(b)                               # n = mc x b = -b x mc
    A[3:, 4:] = -_lmat(wd) - Sw @ _lmat(w)               #   - I wd - w x I w
    return A


def inertial_params(mass, com=(0.0, 0.0, 0.0), inertia=None):
    """phi (10) of a body: mass, centre of mass c and inertia about c (3x3, or 6 numbers ixx ixy ixz
    iyy iyz izz) in the frame's axes.  I about the origin = I_c + m (|c|^2 1 - c c^T)."""
    c = np.asarray(com, dtype=float)
    Ic = np.zeros((3, 3)) if inertia is None else np.asarray(inertia, dtype=float)
    if Ic.shape == (6,):
        ixx, ixy, ixz, iyy, iyz, izz = Ic
        Ic = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    Io = Ic + mass * (c @ c * np.eye(3) - np.outer(c, c))
    return np.array([mass, *(mass * c), Io[0, 0], Io[0, 1], Io[0, 2], Io[1, 1], Io[1, 2], Io[2, 2]])


@dataclass
class PayloadEstimate:
    """Result of PayloadIdentifier.solve().  com in the frame's axes; inertia about the com (3x3) or
    None when not identified; *_std one standard deviation from the residuals; cond the condition
    number of the column-normalised regressor; bias the F/T bias [f; n] when estimated."""
    frame: str
    mass: float
    com: np.ndarray
    inertia: np.ndarray = None
    mass_std: float = 0.0
    com_std: np.ndarray = field(default_factory=lambda: np.zeros(3))
    params: np.ndarray = None
    covariance: np.ndarray = None
    cond: float = 0.0
    residual_rms: dict = field(default_factory=dict)
    rows: int = 0
    bias: np.ndarray = None

    def attach(self, model, name="payload", with_inertia=True):
        """Model.attach_payload with this estimate (the inertia only if identified and physical,
        else a point mass at the com)."""
        inertia = self.inertia if (with_inertia and self.inertia is not None) else None
        if inertia is not None:
            ev = np.linalg.eigvalsh(inertia)
            if ev[0] < 0 or ev[2] > ev[0] + ev[1] + 1e-12:
                inertia = None               # not a physical inertia (poor excitation): point mass
        model.attach_payload(self.frame, self.mass, self.com, inertia, name=name)
        return inertia is not None

    def summary(self):
        s = (f"mass {self.mass:.4f} +- {self.mass_std:.4f} kg, com {np.array2string(self.com, precision=4)} "
             f"+- {np.array2string(self.com_std, precision=4)} m ({self.frame}), cond {self.cond:.1f}, "
             f"{self.rows} rows")
        if self.inertia is not None:
            s += f", inertia diag {np.array2string(np.diag(self.inertia), precision=4)} kg m^2"
        return s


class PayloadIdentifier:
    """Collects F/T and/or joint-torque samples of a load at `frame`, then solves for its parameters.

    The F/T sensor is taken to sit at `frame` (its origin and axes); it reads the wrench the distal
    side exerts on it.  `tool` (a 10-vector from `inertial_params`) is a known load beyond the sensor
    that is not part of the payload (e.g. a gripper): it is subtracted from the F/T rows.  Joint
    torques are compared with the model's own RNEA, so the model must not already carry this payload
    (detach it first); payloads it does carry count as known."""

    def __init__(self, model, backend, frame, tool=None, sigma_ft=1.0, sigma_tau=1.0):
        model.check_frame(frame)
        self.model, self.dyn, self.frame = model, backend, frame
        self.tool = np.zeros(10) if tool is None else np.asarray(tool, dtype=float)
        if self.tool.shape != (10,) or not np.all(np.isfinite(self.tool)):
            raise ValueError("tool: expected 10 finite inertial parameters (see inertial_params)")
        self.sigma = {"ft": check_scalar("sigma_ft", sigma_ft, 0.0, lo_open=True),
                      "tau": check_scalar("sigma_tau", sigma_tau, 0.0, lo_open=True)}
        self.clear()

    def clear(self):
        self._rows = {"ft": [], "tau": []}      # lists of (A block, y block)
        self._moving = False                    # any sample with v given (the inertia terms matter)

    @property
    def n_samples(self):
        return {k: len(v) for k, v in self._rows.items()}

    def _kinematics(self, q, v, a):
        """b = g - a_o, w, wd in frame axes."""
        R, _ = self.dyn.frame_placement(q, self.frame)
        g = R.T @ self.model.gravity
        if v is None:
            return g, None, None
        a = np.zeros(self.model.nv) if a is None else a
        tw = self.dyn.frame_velocity(q, v, self.frame, "local")                   # [v_o; w]
        J = self.dyn.frame_jacobian(q, self.frame, "local").copy()
        dJ = self.dyn.frame_jacobian_dot(q, v, self.frame, "local")
        acc = J @ a + dJ @ v                                                       # spatial [a; wd]
        w = tw[3:]
        a_o = acc[:3] + np.cross(w, tw[:3])                                        # classical
        return g - a_o, w, acc[3:]

    def _state(self, q, v, a):
        q = self.dyn._q(q)
        v = None if v is None else self.dyn._v(v).copy()
        a = None if a is None else self.dyn._v(a, "a").copy()
        return q.copy(), v, a

    def add_ft(self, q, wrench, v=None, a=None):
        """A sample from the F/T sensor at `frame`: wrench [f; n] (sensor axes, about its origin) at
        the joint state q (and v, a for a moving sample; None = static)."""
        q, v, a = self._state(q, v, a)
        y = np.asarray(wrench, dtype=float).reshape(-1)
        if y.shape != (6,) or not np.all(np.isfinite(y)):
            raise ValueError("add_ft: wrench must be 6 finite numbers [f; n]")
        A = load_regressor(*self._kinematics(q, v, a))
        self._rows["ft"].append((A, y - A @ self.tool))
        self._moving |= v is not None

    def add_torques(self, q, tau, v=None, a=None):
        """A sample of measured joint torques tau (the total the motors apply, model order) at q (and
        v, a for a moving sample; None = static)."""
        q, v, a = self._state(q, v, a)
        tau = self.dyn._v(tau, "tau").copy()
        n = self.model.nv
        vv = np.zeros(n) if v is None else v
        aa = np.zeros(n) if a is None else a
        y = self.dyn.rnea(q, vv, aa) - tau            # = J^T (wrench of the load on the frame)
        J = self.dyn.frame_jacobian(q, self.frame, "local")
        A = J.T @ load_regressor(*self._kinematics(q, v, a))
        self._rows["tau"].append((A, y))
        self._moving |= v is not None

    def solve(self, inertia=None, ft_bias=False):
        """Least squares over every sample.  inertia: also estimate the 6 inertia parameters (needs
        rotation in the samples); None (default) = when any sample is moving, since leaving the inertia
        out of moving samples biases m c.  ft_bias: also a constant F/T bias.  ValueError when there
        are too few rows or the regressor is rank deficient (poses that do not separate the parameters)."""
        if inertia is None:
            inertia = self._moving
        npar = 10 if inertia else 4
        blocks, ys, src = [], [], []
        nft = len(self._rows["ft"])
        if ft_bias and nft == 0:
            raise ValueError("solve: ft_bias needs F/T samples")
        for k, rows in self._rows.items():
            for A, y in rows:
                A = A[:, :npar]
                if ft_bias:
                    A = np.hstack([A, np.eye(6) if k == "ft" else np.zeros((A.shape[0], 6))])
                blocks.append(A / self.sigma[k])
                ys.append(y / self.sigma[k])
                src += [k] * len(y)
        if not blocks:
            raise ValueError("solve: no samples")
        A, y, src = np.vstack(blocks), np.concatenate(ys), np.array(src)
        p = A.shape[1]
        if A.shape[0] <= p:
            raise ValueError(f"solve: {A.shape[0]} rows for {p} parameters; add poses")
        scale = np.linalg.norm(A, axis=0)
        if np.any(scale == 0):
            raise ValueError("solve: a parameter is not excited at all by these samples")
        As = A / scale
        s = np.linalg.svd(As, compute_uv=False)
        cond = float(s[0] / s[-1]) if s[-1] > 0 else np.inf
        if not np.isfinite(cond) or cond > 1e8:
            raise ValueError(f"solve: the samples do not separate the parameters (condition number "
                             f"{cond:.3g}); use more varied orientations" +
                             ("" if not inertia else ", or motion that rotates the frame"))
        xs, *_ = np.linalg.lstsq(As, y, rcond=None)
        x = xs / scale
        res = y - A @ x
        s2 = float(res @ res) / (A.shape[0] - p)
        # cov = s^2 (A^T A)^-1, through the SVD of the scaled problem (never an explicit inverse of A^T A)
        _, sv, Vt = np.linalg.svd(As, full_matrices=False)
        cov = s2 * ((Vt.T / sv ** 2) @ Vt) / np.outer(scale, scale)
        m = float(x[0])
        if not m > 0:
            raise ValueError(f"solve: identified mass {m:.4g} kg is not positive (no payload, or bad data)")
        mc = x[1:4]
        c = mc / m
        G = np.zeros((3, p))                                          # d c / d (m, mc)
        G[:, 0] = -mc / m ** 2
        G[:, 1:4] = np.eye(3) / m
        com_cov = G @ cov @ G.T
        Ic = None
        if inertia:
            ixx, ixy, ixz, iyy, iyz, izz = x[4:10]
            Io = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
            Ic = Io - m * (c @ c * np.eye(3) - np.outer(c, c))       # parallel axis back to the com
        rms = {k: float(np.sqrt(np.mean((res[src == k] * self.sigma[k]) ** 2)))
               for k in ("ft", "tau") if np.any(src == k)}
        return PayloadEstimate(frame=self.frame, mass=m, com=c, inertia=Ic,
                               mass_std=float(np.sqrt(cov[0, 0])), com_std=np.sqrt(np.diag(com_cov)),
                               params=x, covariance=cov, cond=cond, residual_rms=rms, rows=A.shape[0],
                               bias=x[npar:npar + 6] if ft_bias else None)


# ---------------------------------------------------------------- motions the node can run itself
def static_poses(model, q_center, n=8, wrist_span=1.2, margin=0.1):
    """n poses around q_center that turn the last three joints (the wrist) through +-wrist_span rad
    in a fixed pattern, clipped into the joint limits shrunk by `margin`: the frame sees gravity from
    several directions, which is what static identification needs.  Returns an (n, nq) array."""
    q_center = np.asarray(q_center, dtype=float)
    lo, hi = model.lower_limits + margin, model.upper_limits - margin
    pattern = np.array([[0, 0, 0], [1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1],
                        [1, -1, 1], [-1, 1, -1], [1, 1, -1], [-1, -1, 1], [0.5, -0.5, -1], [-0.5, 0.5, 1]])
    out = []
    for k in range(n):
        q = q_center.copy()
        q[-3:] += wrist_span * pattern[k % len(pattern)] * (1.0 if k < len(pattern) else 0.5)
        out.append(np.clip(q, lo, hi))
    return np.array(out)


class ExcitationTrajectory:
    """A bounded, slow excitation: joint j follows q_center_j + A_j s(t) sin(w_j t + p_j), with distinct
    frequencies w_j (default 0.25-0.6 Hz) and s(t) a raised-cosine fade in and out over `fade` s, so
    the motion starts and ends at rest (q, v, a continuous).  Amplitudes are reduced so that
    position (within limits shrunk by margin), velocity (<= vel_frac of the limit) and acceleration
    (<= acc_max) bounds hold.  sample(t) -> (q, v, a); `duration` s."""

    def __init__(self, model, q_center, duration=6.0, amplitude=0.6, freqs=None, vel_frac=0.3,
                 acc_max=4.0, margin=0.1, fade=1.0, joints=None):
        n = model.nv
        self.q0 = np.asarray(q_center, dtype=float).copy()
        self.duration, self.fade = float(duration), float(fade)
        if not (self.duration > 2 * self.fade > 0):
            raise ValueError("excitation: duration must exceed twice the fade time (> 0)")
        self.w = 2 * np.pi * (np.linspace(0.25, 0.6, n) if freqs is None else np.asarray(freqs, float))
        self.ph = np.linspace(0, np.pi, n)
        amp = np.full(n, float(amplitude))
        if joints is not None:                       # only these joints move
            mask = np.zeros(n, bool)
            mask[list(joints)] = True
            amp[~mask] = 0.0
        room = np.minimum(self.q0 - (model.lower_limits + margin), model.upper_limits - margin - self.q0)
        if np.any(room < 0):
            raise ValueError("excitation: q_center is outside the joint limits (minus margin)")
        amp = np.minimum(amp, room)
        # |s'| <= 1.875 / fade, |s''| <= 5.78 / fade^2: |v| <= A (w + 1.875 / f), |a| <= A (w + 2.41 / f)^2
        amp = np.minimum(amp, vel_frac * model.velocity_limits / (self.w + 1.875 / self.fade))
        amp = np.minimum(amp, acc_max / (self.w + 2.41 / self.fade) ** 2)
        self.amp = amp

    def _fade(self, t):
        """s, ds/dt, d2s/dt2 of the envelope: smoothstep 10x^3 - 15x^4 + 6x^5 (x = t / fade) in, its
        mirror out; s' and s'' vanish at both ends of each fade, so q, v and a are continuous."""
        T, f = self.duration, self.fade
        if t <= 0 or t >= T:
            return 0.0, 0.0, 0.0
        if t < f:
            x, sgn = t / f, 1.0
        elif t > T - f:
            x, sgn = (T - t) / f, -1.0
        else:
            return 1.0, 0.0, 0.0
        s = x ** 3 * (10 - 15 * x + 6 * x * x)
        sd = 30 * x * x * (1 - x) ** 2 / f
        sdd = 60 * x * (1 - x) * (1 - 2 * x) / (f * f)
        return s, sgn * sd, sdd

    def sample(self, t):
        s, sd, sdd = self._fade(t)
        ph = self.w * t + self.ph
        y, yd, ydd = np.sin(ph), self.w * np.cos(ph), -self.w ** 2 * np.sin(ph)
        q = self.q0 + self.amp * s * y
        v = self.amp * (sd * y + s * yd)
        a = self.amp * (sdd * y + 2 * sd * yd + s * ydd)
        return q, v, a
