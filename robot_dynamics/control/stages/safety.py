"""Safety filter: the last step before a torque leaves the controller.  No ROS.

    sf = SafetyFilter(model, SafetyParams(...) or dict)
    sf.reset()                                   # on activation: output restarts from zero torque
    sf.reset(start=tau_sent)                     # ... or ramps from the torque last sent (safe command)
    sf.hold(tau_sent)                            # a command sent around the filter (the safe command):
                                                 # the next output is rate-limited from it
    tau_safe = sf.apply(tau, state, dt, fallback=None)

Per cycle, in this order:
1. non-finite command (NaN/Inf anywhere, or wrong length) -> the target is the fallback (e.g. g(q)
   from the caller) if it is finite and the right length, else zero torque;
2. optional repulsive torque within `position_margin` of a position limit,
   k (q_lim +- margin - q), and optional velocity damping -velocity_damping v (when the state is finite);
3. clamp to the effort limits (model.effort_limits unless overridden; scaled by effort_scale);
4. start ramp: for ramp_time seconds after reset the target moves from the start torque (zero unless
   reset(start=...)) toward the target by the fraction (time since reset)/ramp_time
   (time since reset = the sum of the dt given to apply);
5. rate limit: the output moves at most rate_limit * min(dt, command_period) per joint from the
   previous output (which is zero after reset), so a NaN cycle rate-limits the last good command
   toward the fallback.  The bound is per command, as libfranka bounds the torque change per 1 ms
   cycle: a late call (a stall, dt = 0.1 s) still moves at most one command period's worth, never
   rate_limit * 0.1 s.  Set command_period to the period at which apply() is called (1/update_rate);
6. final clamp to the effort limits (only acts if the limits were lowered live).

The output is always a new finite array within the effort limits.  `reasons` lists what acted in this
cycle, `counts` counts cycles per reason since construction (or reset(clear_counts=True)).
A bad dt (non-finite or <= 0) is treated as 0: the output holds the previous value ("bad_dt").
"""
import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from ..laws.base import check_scalar, check_vector

_any = np.logical_or.reduce        # ndarray.any() without its Python wrapper

REASONS = ("nonfinite_command", "bad_fallback", "nonfinite_state", "bad_dt", "position_limit",
           "velocity_damping", "effort_limit", "start_ramp", "rate_limit")


@dataclass
class SafetyParams:
    effort_limits: object = None        # N m per joint (or one number); None: model.effort_limits
    effort_scale: float = 1.0           # fraction of the effort limits actually allowed (0, 1]
    rate_limit: float = 1000.0          # N m/s per joint (or one number per joint as a list)
    ramp_time: float = 0.5              # s; 0: no ramp
    position_margin: float = 0.0        # rad | m from a position limit where the repulsion starts; 0: off
    position_stiffness: float = 0.0     # N m/rad of the repulsive torque
    velocity_damping: float = 0.0       # N m s/rad; 0: off
    command_period: float = 0.001       # s, nominal time between commands: the rate limit allows at most
                                        # rate_limit * min(dt, command_period) per apply() (> 0)


def merged_params(cls, current, params, what):
    """The fields of dataclass `cls` as a dict: `params` itself (a cls), or the current values (cls()
    when None) updated by `params` (a dict of its fields).  ValueError naming unknown keys."""
    if isinstance(params, cls):
        return asdict(params)
    if not isinstance(params, dict):
        raise ValueError(f"{what}: params must be {cls.__name__} or dict, got {type(params).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"{what}: unknown parameter(s) {unknown}; known: {sorted(known)}")
    return dict(asdict(current if current is not None else cls()), **params)


class SafetyFilter:
    def __init__(self, model, params=None):
        self.model = model
        self.nv = model.nv
        self._fin_w = np.full(self.nv, 2.0 ** -1000)     # the finiteness test of _finite_vec
        self._fin_abs = np.empty(self.nv)
        self.lower = np.asarray(model.lower_limits, dtype=float)
        self.upper = np.asarray(model.upper_limits, dtype=float)
        self._p = None
        self.stiffness_cap = None      # per-joint bound of the repulsion's stiffness (the loop's hold bound)
        self.set_params(params if params is not None else SafetyParams())
        self.counts = {}
        self.reasons = []
        self.reset()

    # ---- parameters ----
    @property
    def params(self):
        d = asdict(self._p)
        for k, v in d.items():
            if isinstance(v, np.ndarray):
                d[k] = v.tolist()
        return d

    def set_params(self, params):
        """A SafetyParams or a dict of its fields (a dict updates the current values).  Validated as a
        whole: ValueError and the old parameters kept on any bad value."""
        new = merged_params(SafetyParams, self._p, params, "safety")
        n = self.nv
        el = new["effort_limits"]
        if el is None or (hasattr(el, "__len__") and len(el) == 0):
            el = np.asarray(self.model.effort_limits, dtype=float)
            if el.shape != (n,) or not np.all(np.isfinite(el)) or np.any(el <= 0):
                raise ValueError(f"safety: the model's effort limits {el.tolist()} are not all finite and "
                                 "positive; give effort_limits")
            new["effort_limits"] = None
        else:
            el = check_vector("effort_limits", el, n)
            if np.any(el <= 0):
                raise ValueError("effort_limits: must be > 0")
            new["effort_limits"] = el
        scale = check_scalar("effort_scale", new["effort_scale"], 0.0, lo_open=True)
        if scale > 1.0:
            raise ValueError(f"effort_scale: {scale} must be <= 1")
        new["effort_scale"] = scale
        rate = check_vector("rate_limit", new["rate_limit"], n)
        if np.any(rate <= 0):
            raise ValueError("rate_limit: must be > 0")
        new["rate_limit"] = rate if not np.isscalar(new["rate_limit"]) else float(new["rate_limit"])
        for k in ("ramp_time", "position_margin", "position_stiffness", "velocity_damping"):
            new[k] = check_scalar(k, new[k])
        new["command_period"] = check_scalar("command_period", new["command_period"], 0.0, lo_open=True)
        self._p = SafetyParams(**new)
        self.limit = el * scale
        self._neg_limit = -self.limit
        self.rate = rate
        self._use_state = (new["position_margin"] > 0 and new["position_stiffness"] > 0) or new["velocity_damping"] > 0
        self._zero = np.zeros(n)
        self._inv_limit = 1.0 / self.limit              # the fast path of apply()
        self._inv_rate = 1.0 / np.broadcast_to(np.asarray(rate, dtype=float), (n,))
        self._ya = np.empty(n)
        self._yb = np.empty(n)
        self._step = np.empty(n)                        # scratch arrays of apply()
        self._delta = np.empty(n)
        self._absd = np.empty(n)

    # ---- state ----
    @property
    def command_period(self):
        return self._p.command_period

    @property
    def ramping(self):
        """The start ramp is running."""
        return self.elapsed < self._p.ramp_time

    @property
    def repels(self):
        """The joint-limit repulsion is on."""
        return self._p.position_margin > 0.0 and self._p.position_stiffness > 0.0

    def reset(self, clear_counts=False, start=None):
        """Restart: the next output ramps from zero torque, or from `start` (the torque last sent, e.g.
        the safe command, clipped to the limits; ignored unless nv finite numbers)."""
        s = None if start is None else self._finite_vec(start)
        self.prev = np.zeros(self.nv) if s is None else np.clip(s, self._neg_limit, self.limit)
        self.start = self.prev.copy()
        self.elapsed = 0.0
        self.reasons = []
        if clear_counts:
            self.counts = {}

    def hold(self, tau):
        """A torque was sent without this filter (the safe command): the next output moves from it
        at the rate limit.  Non-finite or wrong-length input is ignored."""
        t = self._finite_vec(tau)
        if t is not None:
            self.prev = np.clip(t, self._neg_limit, self.limit)

    def _flag(self, reason):
        self.reasons.append(reason)
        self.counts[reason] = self.counts.get(reason, 0) + 1

    def _finite_vec(self, x):
        """x as a float array of length nv if it is one and finite, else None."""
        try:
            if type(x) is not np.ndarray or x.dtype != np.float64:
                x = np.asarray(x, dtype=float)
        except (TypeError, ValueError):
            return None
        if x.shape != (self.nv,):
            return None
        # one dot product: |x| . 2^-1000 is finite exactly when every element is (|x_i| <= 1.8e308
        # makes each term <= 1.7e7: no overflow; a NaN or Inf makes it NaN or +Inf; no inf - inf, so
        # no floating-point warning either)
        if math.isfinite(np.abs(x, out=self._fin_abs).dot(self._fin_w)):
            return x
        return None

    def apply(self, tau, state, dt, fallback=None, ramp_dt=None):
        """Filtered torque (new array, finite, within the effort limits, within
        rate_limit * min(dt, command_period) of the previous output).  `fallback` may be a callable: it is then evaluated only when the command is
        not finite, so a g(q) fallback costs nothing on good cycles.  `ramp_dt`: the time the start
        ramp advances by (default dt); a caller whose dt is the time since the last command left
        passes the time since its last step here, so that the ramp lasts ramp_time of its clock
        however long each step takes."""
        if self.reasons:
            self.reasons = []
        p = self._p
        if ramp_dt is None:
            ramp_dt = dt
        out = self._fast(tau, dt, p, ramp_dt)
        if out is not None:
            return out
        # 1. command
        t = self._finite_vec(tau)
        if t is None:
            self._flag("nonfinite_command")
            if callable(fallback):
                fallback = fallback()
            fb = None if fallback is None else self._finite_vec(fallback)
            if fb is None:
                if fallback is not None:
                    self._flag("bad_fallback")
                t = self._zero
            else:
                t = fb
        # dt
        try:
            dt = float(dt)
        except (TypeError, ValueError):
            dt = float("nan")
        if not (dt > 0.0 and math.isfinite(dt)):
            self._flag("bad_dt")
            dt = 0.0
        # 2. position limits and velocity damping (only when enabled: the state is not read otherwise)
        if self._use_state:
            t = self._state_terms(t, state, p)
        # 3. effort limits (t is finite here; the limits are symmetric and > 0, so the clamp acts
        # exactly when some |t_i| > limit_i)
        lim = self.limit
        target = np.minimum(t, lim)                     # a new array: becomes self.prev
        np.maximum(target, self._neg_limit, out=target)
        if _any(target != t):
            self._flag("effort_limit")
        # 4. start ramp
        try:
            ramp_dt = float(ramp_dt)
        except (TypeError, ValueError):
            ramp_dt = 0.0
        self.elapsed += ramp_dt if ramp_dt > 0.0 and math.isfinite(ramp_dt) else 0.0
        if self.elapsed < p.ramp_time:
            self._flag("start_ramp")
            target -= self.start
            target *= self.elapsed / p.ramp_time
            target += self.start
        # 5. rate limit (+ 6. the final clamp, which only acts if the limits were lowered live):
        # clip(delta, -step, step) changes delta exactly when some |delta_i| > step_i
        step = np.multiply(self.rate, min(dt, p.command_period), out=self._step)
        delta = np.subtract(target, self.prev, out=self._delta)
        if _any(np.abs(delta, out=self._absd) > step):
            self._flag("rate_limit")
            np.minimum(delta, step, out=delta)
            np.maximum(delta, np.negative(step, out=step), out=delta)
            np.add(delta, self.prev, out=target)
            np.minimum(target, lim, out=target)
            np.maximum(target, self._neg_limit, out=target)
        self.prev = target
        return target.copy()

    def _fast(self, tau, dt, p, ramp_dt):
        """The common cycle in a few vector operations, or None for the general path: a finite command
        within the effort limits, no state terms, the start ramp over, a change within the rate limit.
        Sufficient conditions (sum of squares): y = tau / limit with |y|^2 <= 1 makes every
        |tau_i| <= limit_i (and tau finite); x = (tau - prev) / rate with |x|^2 <= h^2, h = min(dt,
        command_period), makes every |tau_i - prev_i| <= rate_i h.  Nothing acts then: the output is
        tau itself, as the general path would give it.  When a condition fails the general path
        decides, element by element."""
        if type(tau) is not np.ndarray or tau.shape != self._zero.shape or tau.dtype != np.float64 \
                or self._use_state or self.elapsed < p.ramp_time:
            return None
        if not (0.0 < dt < math.inf) or not (0.0 < ramp_dt < math.inf):
            return None
        y = np.multiply(tau, self._inv_limit, out=self._ya)
        if not y.dot(y) <= 1.0:                          # (NaN compares false)
            return None
        x = np.subtract(tau, self.prev, out=self._yb)
        x *= self._inv_rate
        h = dt if dt < p.command_period else p.command_period
        if not x.dot(x) <= h * h:
            return None
        self.elapsed += ramp_dt
        target = tau.copy()
        self.prev = target
        return target.copy()

    def _state_terms(self, t, state, p):
        q = v = None
        if state is not None:
            q = self._finite_vec(getattr(state, "q", None))
            v = self._finite_vec(getattr(state, "v", None))
        if q is None or v is None:
            self._flag("nonfinite_state")
            return t
        t = t.copy()
        m, k = p.position_margin, p.position_stiffness
        if m > 0.0 and k > 0.0:
            lo = self.lower + m
            hi = self.upper - m
            if self.stiffness_cap is not None:          # the loop's hold bound (ControlLoop.hold_omega)
                k = np.minimum(k, self.stiffness_cap)
            push = np.where(q < lo, k * (lo - q), 0.0) + np.where(q > hi, k * (hi - q), 0.0)
            push[~np.isfinite(push)] = 0.0
            if np.any(push != 0.0):
                self._flag("position_limit")
                t += push
        if p.velocity_damping > 0.0 and np.any(v != 0.0):
            self._flag("velocity_damping")
            t -= p.velocity_damping * v
        if not np.isfinite(t).all():                # overflow from huge inputs
            self._flag("nonfinite_command")
            t = np.nan_to_num(t, nan=0.0, posinf=0.0, neginf=0.0)
        return t
