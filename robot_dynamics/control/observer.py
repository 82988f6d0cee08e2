"""Generalized-momentum observer: external joint torques, a wrench estimate and a collision flag,
without a force sensor.  No ROS.

    obs = MomentumObserver(model, backend, gain=50.0, frame="panda_hand_tcp",
                           threshold=5.0, release=0.5)
    obs.reset(q, v)                          # at start: r = 0
    r = obs.update(q, v, tau, dt)            # every cycle: external joint torques [N m]
    w = obs.wrench(q)                        # [f; n] the environment exerts at `frame`
    obs.collision                            # bool, with hysteresis

The residual (De Luca's observer)

    r(t) = K (p(t) - p(0) - integral_0^t (tau + C^T(q, v) v - g(q) + r) ds),     p = M(q) v

obeys r' = K (tau_ext - r): a first-order low-pass of the external joint torque with time constant
1/K per joint (no acceleration needed).  It rests on M' = C + C^T (which is what M' - 2C skew
means), so p' = tau + tau_ext + C^T v - g.

Discrete form.  Per step, the integral grows by dt (beta + r_prev), beta = tau + C^T v - g, so
    r_k - r_(k-1) = K (dp - dt beta) - K dt r_(k-1) = K dt (w_k - r_(k-1)),   w_k = dp/dt - beta,
i.e. exactly the continuous law with the integral updated each step.  We use 1 - exp(-K dt) in place
of K dt (the exact hold-equivalent of the first-order filter: the same figure for small K dt, stable
for any dt), and beta averaged over the step ends (trapezoid) with `tau` the torque applied during
the step (zero-order hold).  The state is r itself, so nothing accumulates: no drift.

`tau` is the TOTAL joint torque the motors applied (measured tau_J, or the command plus what the
driver adds itself: a Franka adds gravity, so pass command + g(q) there).  Unmodelled joint friction
and model errors (a payload not attached to the model) appear in r: attach the payload (see
payload_id.py) and set the collision threshold above the friction level.

Wrench estimate: tau_ext = J^T F for a contact at `frame`, so F solves the damped least squares
    min |J^T F - r|^2 + lambda^2 |F|^2,   F = sum_i s_i / (s_i^2 + lambda^2) u_i (v_i . r)
over the SVD J = U S V^T, with lambda^2 = lambda_max^2 (1 - (s_min / eps)^2) when the smallest
singular value s_min drops below eps (and 0 otherwise): exact away from singularities, bounded near
them.  reference "local_world_aligned" (default): force and torque about the frame origin in world
axes (State.wrench_frame "world"); "local": in the frame's own axes (State.wrench_frame "").

Collision flag: set when any |r_i| > threshold_i, cleared when every |r_i| < release * threshold_i
(0 < release < 1: hysteresis, no chattering at the threshold).
"""
import math

import numpy as np

from .laws.base import check_scalar, check_vector


class MomentumObserver:
    def __init__(self, model, backend, gain=50.0, frame=None, reference="local_world_aligned",
                 threshold=None, release=0.5, damping_max=0.05, singular_eps=0.05):
        self.model, self.dyn = model, backend
        self.nv = n = model.nv
        self.gain = check_vector("gain", gain, n)
        if np.any(self.gain <= 0):
            raise ValueError(f"gain: every element must be > 0 (1/s), got {self.gain.tolist()}")
        if frame is not None:
            model.check_frame(frame)
        if reference not in ("local", "local_world_aligned"):
            raise ValueError(f"reference: use 'local' or 'local_world_aligned', got {reference!r}")
        self.frame, self.reference = frame, reference
        self.set_threshold(threshold, release)
        self.damping_max = check_scalar("damping_max", damping_max)
        self.singular_eps = check_scalar("singular_eps", singular_eps, 0.0, lo_open=True)
        self.r = np.zeros(n)
        self.collision = False
        self.n_collisions = 0          # rising edges of the flag since reset
        self._p = None
        self._b = None                 # C^T v - g at the last update
        self.t = 0.0

    def set_threshold(self, threshold, release=0.5):
        """threshold: None (no collision detection), one number or nv numbers [N m]; release in (0, 1)."""
        self.threshold = None if threshold is None else check_vector("threshold", threshold, self.nv)
        if self.threshold is not None and np.any(self.threshold <= 0):
            raise ValueError(f"threshold: every element must be > 0, got {self.threshold.tolist()}")
        release = check_scalar("release", release, 0.0, lo_open=True)
        if release >= 1.0:
            raise ValueError(f"release: must be < 1 (a fraction of the threshold), got {release}")
        self.release = release

    def _terms(self, q, v):
        """p = M v and b = C^T v - g at (q, v)."""
        M = self.dyn.mass_matrix(q)
        p = M @ v
        C = self.dyn.coriolis_matrix(q, v)
        b = C.T @ v
        b -= self.dyn.gravity(q)
        return p, b

    def reset(self, q, v, t=0.0):
        """Start (or restart) at the state (q, v): r = 0, flag cleared."""
        q, v = np.asarray(q, dtype=float), np.asarray(v, dtype=float)
        self._p, self._b = self._terms(q, v)
        self.r[:] = 0.0
        self.collision = False
        self.n_collisions = 0
        self.t = float(t)

    def update(self, q, v, tau, dt):
        """Advance one step to the measured state (q, v), `tau` being the joint torque applied since
        the previous update, dt [s] the time since then.  Returns r (a copy), the external joint torque
        estimate [N m].  A non-finite input raises ValueError and leaves the observer unchanged."""
        if self._p is None:
            raise RuntimeError("MomentumObserver: call reset(q, v) first")
        dt = float(dt)
        if not (math.isfinite(dt) and dt > 0.0):
            raise ValueError(f"dt: must be a finite number > 0, got {dt}")
        tau = np.asarray(tau, dtype=float)
        if tau.shape != (self.nv,) or not np.all(np.isfinite(tau)):
            raise ValueError(f"tau: expected {self.nv} finite values")
        p, b = self._terms(np.asarray(q, dtype=float), np.asarray(v, dtype=float))  # checks q, v
        w = (p - self._p) / dt - tau - 0.5 * (b + self._b)        # dp/dt - beta over the step
        a = -np.expm1(-self.gain * dt)                              # 1 - exp(-K dt)
        self.r += a * (w - self.r)
        self._p, self._b = p, b
        self.t += dt
        self._flag()
        return self.r.copy()

    def _flag(self):
        if self.threshold is None:
            return
        x = np.abs(self.r)
        if not self.collision and np.any(x > self.threshold):
            self.collision = True
            self.n_collisions += 1
        elif self.collision and np.all(x < self.release * self.threshold):
            self.collision = False

    def wrench(self, q, r=None, frame=None):
        """Wrench [f; n] (N, N m) the environment exerts at `frame` (default: the observer's frame),
        explaining r (default: the current residual) by damped least squares; afterwards
        `last_singular` holds the smallest singular value of J (6 x nv) at this q."""
        frame = frame or self.frame
        if frame is None:
            raise ValueError("wrench: no frame (give frame= here or to the observer)")
        r = self.r if r is None else np.asarray(r, dtype=float)
        J = self.dyn.frame_jacobian(np.asarray(q, dtype=float), frame, self.reference)   # 6 x nv
        U, s, Vt = np.linalg.svd(J, full_matrices=False)
        smin = s[-1] if s.size == 6 else 0.0       # fewer than 6 joints: the wrench is not determined
        self.last_singular = smin
        lam2 = 0.0
        if smin < self.singular_eps:
            lam2 = self.damping_max ** 2 * (1.0 - (smin / self.singular_eps) ** 2)
        lam2 = max(lam2, 1e-12)
        return U @ (s / (s * s + lam2) * (Vt @ r))
