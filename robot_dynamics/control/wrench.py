"""Force/torque sensor processing (geometry_msgs/WrenchStamped -> the wrench a law uses).  No ROS.

    wp = WrenchProcessor(model, backend, sensor_frame, target_frame, tool_mass=0, tool_com=(0, 0, 0),
                         filter_cutoff_hz=None, deadband=(0.0, 0.0))
    wp.tare(raw, q)                 # bias = raw - tool weight at q  (do it with no contact)
    w = wp.process(raw, q, dt)      # [f; n] about target_frame's origin, in its axes

Sensor model: raw = bias + W_tool(q) + W_ext, all [f; n] in the sensor frame about its origin, where
W_tool is the weight of the tool carried beyond the sensor, f = R_s^T m g (g = model.gravity) applied
at the tool's centre of mass c (sensor frame): n = c x f.  W_ext is the wrench the environment
exerts on the tool, which is what `process` returns (the State.wrench convention).

Steps: bias and tool weight removed -> first-order low-pass (cutoff filter_cutoff_hz, none if None)
-> deadband on the force and torque magnitudes (|f| < d_f -> 0, else shrunk by d_f along f; same for
the torque) -> change of frame.  The frame change is the force transform of the placements given by
the model's kinematics at q: with sensor origin p and axes R relative to the target,
    f_t = R f_s,    n_t = R n_s + p x f_t
which conserves power with the rigid-body twist.  expressed_in="local_world_aligned" gives the
wrench about the target origin in world axes instead (`frame` is then "world").
"""
import functools
import math

import numpy as np

from .laws.base import check_scalar


NOISE_TIME = 1.0          # s: the averaging time of the sensor noise estimate
NOISE_CLIP = 4.0          # a second difference counts at most this many x its expected size (an impact)
NOISE_GAP = 10.0          # samples further apart than this many x the usual interval restart the chain
NOISE_FLOOR = 1e-4        # N, N m: the clip never below this (an estimate near zero is not locked there)
NOISE_LAG = 0.01          # s: the second differences' lag (samples of a sensor that low-passes on board decorrelated)
NOISE_LAG_MAX = 64        # samples: the lag at most (a sensor faster than 6.4 kHz: a shorter lag)


class NoiseEstimate:
    """The noise on a sensor's reading, from its samples as they arrive: the covariance [6x6] from second
    differences d = x_k - 2 x_k-l + x_k-2l over a lag of l samples spanning NOISE_LAG (at least one; at
    most NOISE_LAG_MAX), E[d d^T] = 6 C for noise of covariance C whose samples l apart are independent:
    white noise, and near enough the noise of a sensor that low-passes on board (first order, at 1 kHz:
    1.00 of its spread at 100 Hz on board, 0.97 at 50, 0.90 at 30, 0.62 at 10, where consecutive
    samples, l = 1, gave 0.62, 0.46, 0.35, 0.20).  A reading that moves along a straight line adds
    nothing, one that bends slowly next to the lag next to nothing.  Averaged over NOISE_TIME (weighted
    by the time between samples; bias-corrected while it fills, from the consecutive-sample differences
    d0 = x_k - 2 x_k-1 + x_k-2 until then: no event can be told without an estimate, so a sensor that
    low-passes on board starts low: at 30 Hz 0.6 of its spread after 1 s, 0.88 after 3 s).  Then a
    d0 beyond NOISE_CLIP x its own spread on any axis is an event (a contact's or an impact's step, the
    noise rising): while d holds it (2 l samples, and for as long as d stays beyond its clip, a step
    that the sensor's own low-pass spreads out) d0 counts instead, scaled by the ratio of the two
    spreads; every difference clipped at NOISE_CLIP x its expected size, never below NOISE_FLOOR (an
    estimate near zero, after a noise-free stretch, grows back: by (1 + 15 a) a sample at most, about
    1.5 s from the floor to 0.03 N at 1 kHz).  A sample equal to the previous one on every axis is a
    repeat (a driver publishing faster than its sensor) and is skipped; after a gap (more than
    NOISE_GAP usual intervals, or NOISE_TIME) or a non-finite difference the chain of samples restarts;
    the lag comes from the mean interval, the chain refilled when that settles 0.75 sample or more
    from it (a late first sample, a driver's rate).  A sensor that low-passes further on board still
    comes out low.  `interval`: the mean time between samples [s]."""

    def __init__(self, n=6):
        self._cov, self._weight = np.zeros((n, n)), 0.0
        self._var = self._cov.reshape(-1)[::n + 1]     # a view of the diagonal
        self._v0 = np.zeros(n)                         # the consecutive-sample differences' mean square
        self._buf = np.zeros((2 * NOISE_LAG_MAX + 1, n))   # the chain's last 2 l + 1 samples, a ring
        self._t = None
        self._chain = 0                                # samples held in the ring (up to 2 l + 1)
        self._lag, self._pos = 1, 0                    # l; the ring's row of the last sample
        self._W = _lag_weights(1)
        self._D, self._lim, self._lim0 = np.zeros((2, n)), np.zeros(n), np.zeros(n)
        self._e, self._e1, self._over = np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool)
        self._dd = np.zeros((n, n))
        self._mute = 0                                 # samples the lag's difference still holds an event
        self.interval = None

    def add(self, sample, t):
        buf, over = self._buf, self._over
        if self._chain and not np.not_equal(sample, buf[self._pos], out=over).any():
            return                                     # a repeat of the last sample
        if self._t is None or t <= self._t or t - self._t >= NOISE_TIME or (
                self.interval is not None and t - self._t > NOISE_GAP * self.interval):
            self._restart(sample, t)                   # the first sample, a clock that restarted, a gap
            return
        dt = t - self._t
        a = min(dt / NOISE_TIME, 1.0)
        if self.interval is None:
            self.interval = dt
        else:
            self.interval += a * (dt - self.interval)
        target = NOISE_LAG / self.interval             # the lag the interval so far asks for
        lag = min(max(int(round(target)), 1), NOISE_LAG_MAX)
        if self._chain == 1 and lag != self._lag:
            self._lag, self._W = lag, _lag_weights(lag)
        m = 2 * self._lag + 1
        self._pos = p = (self._pos + 1) % m
        buf[p] = sample
        self._t = t
        if self._chain < m:
            self._chain += 1
            if self._chain < m:
                return                                 # the ring fills first
            if self._weight > 0.5:
                self._mute = 2 * self._lag             # a step while it filled: not seen in d1
        elif lag != self._lag and abs(target - self._lag) > 0.75:
            self._chain, self._pos = 1, 0              # the interval has settled elsewhere: another lag
            buf[0] = sample
            return
        D = self._D
        np.matmul(self._W[p], buf[:m], out=D)          # [x_k - 2 x_k-1 + x_k-2; x_k - 2 x_k-l + x_k-2l]
        if not math.isfinite(D.sum()):
            self._restart(sample, t)
            return
        d0, d, e0 = D[0], D[1], self._e
        np.multiply(d0, d0, out=e0)
        if self._weight <= 0.5:                       # filling: no event can be told yet
            d = d0
        else:
            # an event (a contact's or an impact's step, the noise rising) shows in d0 at once, measured
            # against d0's own spread (a sensor that low-passes on board makes it small), and in d for
            # 2 l samples and for as long as d stays beyond its clip: meanwhile d0 counts instead,
            # scaled to d's spread; each clipped
            lim, lim0 = self._lim, self._lim0
            floor = NOISE_FLOOR * NOISE_FLOOR
            np.multiply(self._var, 6.0 * NOISE_CLIP * NOISE_CLIP / self._weight, out=lim)
            np.maximum(lim, floor, out=lim)                               # squared
            np.multiply(self._v0, NOISE_CLIP * NOISE_CLIP / self._weight, out=lim0)
            np.maximum(lim0, floor, out=lim0)
            if np.greater(e0, lim0, out=over).any():
                self._mute = 2 * self._lag
            elif self._mute:
                e1 = self._e1
                np.multiply(d, d, out=e1)
                if np.greater(e1, lim, out=over).any():
                    self._mute += 1                    # d still holds it
            np.minimum(e0, lim0, out=e0)
            np.sqrt(lim, out=lim)
            if self._mute:
                self._mute -= 1
                np.sqrt(lim0, out=lim0)
                np.clip(d0, -lim0, lim0, out=d0)
                np.divide(lim, lim0, out=lim0)
                d = np.multiply(d0, lim0, out=d0)      # d0 at d's spread
            np.clip(d, -lim, lim, out=d)
        self._v0 *= 1.0 - a
        e0 *= a
        self._v0 += e0
        dd = self._dd
        np.multiply(d[:, None], d, out=dd)
        dd *= a / 6.0
        self._cov *= 1.0 - a
        self._cov += dd
        self._weight += a * (1.0 - self._weight)

    def _restart(self, sample, t):
        """A new chain from `sample`; the interval (and the lag) found again from the next one (after a
        burst of two samples microseconds apart every later one would otherwise count as a gap)."""
        self._pos, self._mute = 0, 0
        self._buf[0] = sample
        self._t, self._chain = t, 1
        self.interval = None

    @property
    def covariance(self):
        """[6x6] in the reading's axes [N^2, N^2 m, (N m)^2]; None before the first second difference."""
        return self._cov / self._weight if self._weight > 0.0 else None


@functools.lru_cache(maxsize=None)
def _lag_weights(lag):
    """W[p] (2 x m, m = 2 lag + 1): the rows of NoiseEstimate's ring combined into the consecutive
    samples' and the lag's second differences when the last sample sits in row p (made once per lag)."""
    m = 2 * lag + 1
    W = np.zeros((m, 2, m))
    for p in range(m):
        for row, step in ((0, 1), (1, lag)):
            W[p, row, p] += 1.0
            W[p, row, (p - step) % m] -= 2.0
            W[p, row, (p - 2 * step) % m] += 1.0
    W.setflags(write=False)
    return W


def _cross(a, b):
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def _force_matrix(R, p):
    """6x6 X with [f'; n'] = X [f; n], f' = R f, n' = R n + p x R f."""
    X = np.zeros((6, 6))
    X[:3, :3] = R
    X[3:, 3:] = R
    px = np.array([[0.0, -p[2], p[1]], [p[2], 0.0, -p[0]], [-p[1], p[0], 0.0]])
    X[3:, :3] = px @ R
    return X


def _vec6(x, what):
    try:
        w = np.array(x, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: not numeric") from None
    if w.shape != (6,) or not np.all(np.isfinite(w)):
        raise ValueError(f"{what}: expected 6 finite numbers [fx fy fz nx ny nz], got {x!r}")
    return w


class WrenchProcessor:
    def __init__(self, model, backend, sensor_frame, target_frame, tool_mass=0.0, tool_com=(0.0, 0.0, 0.0),
                 filter_cutoff_hz=None, deadband=(0.0, 0.0), expressed_in="local"):
        self.model, self.dyn = model, backend
        for f in (sensor_frame, target_frame):
            model.check_frame(f)
        if expressed_in not in ("local", "local_world_aligned"):
            raise ValueError(f"expressed_in: use 'local' or 'local_world_aligned', got {expressed_in!r}")
        self.sensor_frame, self.target_frame, self.expressed_in = sensor_frame, target_frame, expressed_in
        self.frame = target_frame if expressed_in == "local" else "world"
        self.set_tool(tool_mass, tool_com)
        self.filter_cutoff_hz = check_scalar("filter_cutoff_hz", filter_cutoff_hz, 0.0, lo_open=True,
                                             allow_none=True)
        try:
            df, dn = deadband
        except (TypeError, ValueError):
            raise ValueError(f"deadband: expected (force, torque), got {deadband!r}") from None
        self.deadband = (check_scalar("deadband force", df), check_scalar("deadband torque", dn))
        self.bias = np.zeros(6)
        self._y = None
        self._Rp = (np.eye(3), np.zeros(3))      # the frame change of the last `process`

    def set_tool(self, mass, com):
        m = check_scalar("tool_mass", mass)
        c = np.array(com, dtype=float).reshape(-1)
        if c.shape != (3,) or not np.all(np.isfinite(c)):
            raise ValueError(f"tool_com: expected 3 finite numbers, got {com!r}")
        self.tool_mass, self.tool_com = m, c

    def tool_wrench(self, q):
        """Weight of the tool as the sensor sees it at q: [R_s^T m g; c x R_s^T m g]."""
        if self.tool_mass == 0.0:
            return np.zeros(6)
        R, _ = self.dyn.frame_placement(q, self.sensor_frame)
        f = np.asarray(R).T @ (self.tool_mass * self.model.gravity)
        return np.concatenate([f, _cross(self.tool_com, f)])

    def tare(self, raw_wrench, q):
        """Store the bias from a reading without contact: bias = raw - tool weight at q.  Resets the
        filter."""
        self.bias = _vec6(raw_wrench, "raw wrench") - self.tool_wrench(q)
        self._y = None

    def reset(self):
        self._y = None

    def force_transform(self, q):
        """6x6 X with w_target = X w_sensor (the dual of the motion transform target <- sensor)."""
        Rs, ps = (np.array(x) for x in self.dyn.frame_placement(q, self.sensor_frame))
        Rt, pt = (np.array(x) for x in self.dyn.frame_placement(q, self.target_frame))
        if self.expressed_in == "local":
            R, p = Rt.T @ Rs, Rt.T @ (ps - pt)
        else:
            R, p = Rs, ps - pt
        return _force_matrix(R, p)

    def process(self, raw_wrench, q, dt):
        """External wrench on the tool, about the target frame origin, in the target axes (or world
        axes).  ValueError on a non-finite reading."""
        w = _vec6(raw_wrench, "raw wrench") - self.bias - self.tool_wrench(q)
        # low-pass, first order: y += alpha (w - y), alpha = dt / (dt + 1 / (2 pi fc))
        fc = self.filter_cutoff_hz
        if fc is not None:
            if self._y is None:
                self._y = w.copy()
            elif dt is not None and math.isfinite(dt) and dt > 0:
                alpha = dt / (dt + 1.0 / (2.0 * math.pi * fc))
                self._y += alpha * (w - self._y)
            w = self._y.copy()
        # deadband on magnitudes (continuous: shrink toward zero)
        for sl, d in ((slice(0, 3), self.deadband[0]), (slice(3, 6), self.deadband[1])):
            if d > 0.0:
                nrm = float(np.linalg.norm(w[sl]))
                w[sl] = 0.0 if nrm <= d else w[sl] * (1.0 - d / nrm)
        return self._to_target(q, w)

    def _to_target(self, q, w):
        """force_transform(q) @ w without forming X: f' = R f, n' = R n + p x f' (one step of the
        Cartesian law's, every cycle)."""
        Rs, ps = self.dyn.frame_placement(q, self.sensor_frame)
        Rs, ps = np.array(Rs), np.array(ps)          # (the backend's buffers: copied before the next call)
        Rt, pt = self.dyn.frame_placement(q, self.target_frame)
        if self.expressed_in == "local":
            R, p = Rt.T @ Rs, Rt.T @ (ps - pt)
        else:
            R, p = Rs, ps - pt
        out = np.empty(6)
        f = R @ w[:3]
        out[:3] = f
        out[3:] = R @ w[3:] + _cross(p, f)
        self._Rp = (R, p)
        return out

    def noise_covariance(self, cov, dt, interval):
        """The covariance [6x6] of the noise on what `process` returned last, from the raw reading's white
        noise (`cov`, 6x6, NoiseEstimate.covariance), its samples `interval` s apart, the loop's step `dt`:
        the frame change X (f' = R f, n' = R n + p x R f) and the low-pass's noise gain (alpha / (2 - alpha)
        for a sample each step, over the steps a held sample lasts otherwise).  The
        tare and the tool's weight do not change it; the deadband only lowers it (not counted)."""
        if self.sensor_frame == self.target_frame and self.expressed_in == "local":
            cov = cov.copy()                                 # no frame change
        else:
            X = _force_matrix(*self._Rp)
            cov = X @ cov @ X.T
        fc = self.filter_cutoff_hz
        if fc is not None and dt is not None and dt > 0.0:
            # y += a (x - y) each step, x white and held m steps: at a sample's last step the variance is
            # V = (1 - b^m) / (1 + b^m) (b = 1 - a) of x's; j steps into a sample (1 - b^j)^2 + b^2j V;
            # the mean over the m steps is what the law meets
            b = 1.0 - dt / (dt + 1.0 / (2.0 * math.pi * fc))
            m = max(1.0, (interval or dt) / dt)
            bm = b ** m
            V = (1.0 - bm) / (1.0 + bm)
            s1 = b * (1.0 - bm) / (1.0 - b)                 # sum_j b^j, j = 1..m
            s2 = b * b * (1.0 - bm * bm) / (1.0 - b * b)    # sum_j b^2j
            cov *= (m - 2.0 * s1 + s2 + V * s2) / m
        return cov
