"""The one interface every control law implements: (state, reference, measured wrench) -> tau.

No ROS here.  A law is built once with the model and a backend (whose Data it reuses every cycle),
keeps its own preallocated buffers, and its `compute` does no allocation-heavy work beyond what the
math needs.  The ROS node converts messages into `State` / references and calls:

    law = make_law("joint_impedance", model, backend, params)   # at configure
    law.reset(state)                                            # at activate: hold where we are
    law.set_reference(JointReference(...))                      # when a reference message arrives
    tau = law.compute(state)                                    # every cycle, then the SafetyFilter

Vectors are in model order (`model.joint_names`), length model.nv (fixed-base arms).

Parameters are a flat dict (nested dicts such as {"task": {"k_pos_x": 1}} are flattened to
"task.k_pos_x").  `set_params` validates the merged result before touching anything: on a bad value
(NaN, negative gain, wrong length, unknown key, wrong type, a gain above GAIN_MAX) it raises ValueError
naming the key and the old parameters stay in force.  A vector parameter is a list of nv numbers or one number (or a
one-element list, as a ROS double array carries it) used for every joint.  Parameters that default
to "derived" (d_gains, task.d_*, nullspace_damping, q_nullspace, kp/kd) take None or [] for that.

Non-finite state: `compute` does not raise; it returns NaN torques (and NaN in `info.error`), which
the SafetyFilter turns into its defined safe command.

Fast path: when the backend is a PinocchioBackend and `model.q_identity` (revolute/prismatic joints
in Pinocchio's order, so q needs no conversion), the laws call `pin.*` directly on `backend.pm` /
`backend.data`; this skips the backend's per-call input checks (about 1 us per call, measured) after
the law has checked the state once.  Otherwise they go through the backend's methods.
"""
import math
from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin

from ...dynamics.backends import PinocchioBackend
from .friction import FrictionCompensation

_TWO_PI = 2.0 * math.pi

GAIN_MAX = 1e12
"""The largest gain, stiffness, damping or damping ratio a law takes (and kp = omega^2, the largest
posture magnitude): far above any arm's loop (a Panda joint runs at 1e2-1e4 N m/rad), far below where
the laws' squares and products overflow (about 1e154; omega = 1e155 raised OverflowError out of
set_params, task stiffnesses of 1e155 gave NaN torques)."""

def wrap_angle(x, out=None):
    """x wrapped to [-pi, pi) (elementwise): the shortest signed angle equivalent to x."""
    out = np.add(x, math.pi, out=out)
    np.mod(out, _TWO_PI, out=out)
    out -= math.pi
    return out


def continuous_mask(model):
    """Boolean mask over v (fixed base: over the joints) of the continuous joints, whose angle is
    known only modulo 2 pi (drivers report it wrapped to (-pi, pi]); None when there is none."""
    types = model.joint_types
    if model.floating_base or len(types) != model.nv:
        return None
    m = np.array([t == "continuous" for t in types], dtype=bool)
    return m if m.any() else None


def shortest_error(q_d, q, cont, out=None):
    """q_d - q, with the continuous joints (mask `cont`, or None) wrapped to [-pi, pi)."""
    out = np.subtract(q_d, q, out=out)
    if cont is not None:
        out[cont] = wrap_angle(out[cont])
    return out


@dataclass
class State:
    """Measured robot state at time t [s]: q [rad | m], v [rad/s | m/s], optional measured wrench
    [f; n] (N, N m).  The wrench is the one the environment exerts on the robot (what a force/torque
    sensor reports for a tool it carries, after tare and tool-gravity removal), about the origin of
    the controlled frame, in the axes named by `wrench_frame`: "" or the controlled frame's name
    (its local axes) or "world" (world-aligned axes), as WrenchProcessor produces it.  tau_ext
    [N m]: the environment's torque on each joint, the same sign (a wrench w at the frame gives
    J^T w), from link-side joint torque sensors (stages/estimation.py)."""
    q: np.ndarray
    v: np.ndarray
    t: float = 0.0
    wrench: np.ndarray = None
    wrench_frame: str = ""
    wrench_source: str = "sensor"       # "sensor" (measured) or "observer" (estimated from the motor torques)
    wrench_cov: np.ndarray = None       # 6x6 covariance of the noise on `wrench`, its axes (None: not known)
    tau_ext: np.ndarray = None          # the environment's torque on each joint, measured by link-side joint
    tau_ext_sd: np.ndarray = None       # torque sensors (effort_link_side), and its noise's spread per joint


@dataclass
class JointReference:
    """Desired joint position, velocity and acceleration (model order); v, a default to zero."""
    q: np.ndarray
    v: np.ndarray = None
    a: np.ndarray = None


@dataclass
class CartesianReference:
    """Desired pose of the controlled frame in the world (R 3x3, p 3), optional twist [v; w] and
    feed-forward wrench [f; n] (exerted by the robot on the environment) in local-world-aligned axes;
    optional acceleration [a; alpha] (d/dt of the twist), fed forward as Lambda accel."""
    R: np.ndarray
    p: np.ndarray
    twist: np.ndarray = None
    wrench: np.ndarray = None
    accel: np.ndarray = None


@dataclass
class LawInfo:
    """What a law reports each cycle for the controller-state topic (the torque is what compute returns).
    Joint laws: reference = q_d, error = q_d - q (nv; continuous joints: the shortest angle, in [-pi, pi)).
    Cartesian: reference = [p_d; quat_d (x y z w)]
    (7), error = [p_d - p; log3(R_d R^T)] (6).  `status` is "" or a short note (e.g. "trajectory done",
    "nonfinite state")."""
    reference: np.ndarray = field(default_factory=lambda: np.zeros(0))
    error: np.ndarray = field(default_factory=lambda: np.zeros(0))
    status: str = ""


# ---------------------------------------------------------------- parameter checking
def flatten_params(params):
    """{"task": {"k_pos_x": 1}} -> {"task.k_pos_x": 1}."""
    out = {}
    for k, v in dict(params or {}).items():
        if isinstance(v, dict):
            for k2, v2 in flatten_params(v).items():
                out[f"{k}.{k2}"] = v2
        else:
            out[str(k)] = v
    return out


def check_bool(key, x):
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)) and x in (0, 1):
        return bool(x)
    raise ValueError(f"{key}: expected true or false, got {x!r}")


def check_scalar(key, x, lo=0.0, lo_open=False, allow_none=False, hi=None):
    """A finite number >= lo (> lo when lo_open), <= hi when given.  lo=None: any finite number."""
    if x is None and allow_none:
        return None
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise ValueError(f"{key}: expected a number, got {x!r}")
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{key}: {x} is not finite")
    if lo is not None and (x < lo or (lo_open and x == lo)):
        raise ValueError(f"{key}: {x} must be {'>' if lo_open else '>='} {lo}")
    if hi is not None and x > hi:
        raise ValueError(f"{key}: {x} must be <= {hi:g}")
    return x


def check_vector(key, x, n, lo=0.0, allow_none=False, hi=None):
    """n finite numbers >= lo (lo=None: any sign), <= hi when given; one number (or a one-element list)
    is used for all n."""
    if x is None:
        if allow_none:
            return None
        raise ValueError(f"{key}: missing")
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_)):
        x = [x] * n
    try:
        a = np.array(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{key}: expected {n} numbers, got {x!r}") from None
    if a.shape == (1,) and n != 1:
        a = np.full(n, a[0])                  # a one-element list (a ROS double array) = one number
    if a.shape != (n,):
        raise ValueError(f"{key}: expected {n} values, got {a.size} (shape {a.shape})")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{key}: values must be finite, got {a.tolist()}")
    if lo is not None and np.any(a < lo):
        i = int(np.flatnonzero(a < lo)[0])
        raise ValueError(f"{key}: element {i} is {a[i]}, must be >= {lo}")
    if hi is not None and np.any(a > hi):
        i = int(np.flatnonzero(a > hi)[0])
        raise ValueError(f"{key}: element {i} is {a[i]}, must be <= {hi:g}")
    return a


def check_gain(key, x, allow_none=False):
    """A gain, stiffness, damping or damping ratio: a finite number in [0, GAIN_MAX]."""
    return check_scalar(key, x, 0.0, allow_none=allow_none, hi=GAIN_MAX)


def check_gains(key, x, n, allow_none=False):
    """n gains (or one for all), each in [0, GAIN_MAX]."""
    return check_vector(key, x, n, allow_none=allow_none, hi=GAIN_MAX)


# common parameters of every law: key -> default
COMMON_DEFAULTS = {
    "compensate_gravity": True,     # False for robots whose driver compensates gravity (Franka, Gazebo Franka)
    "friction_compensation": False,
    "friction_viscous": 0.0,        # N m s/rad per joint
    "friction_coulomb": 0.0,        # N m per joint
    "friction_smoothing": 0.01,     # rad/s: tau_c = f_c tanh(v / smoothing) where no velocity scale is set
    "friction_velocity_scale": 0.0,  # rad/s per joint: the identified vs of f_c tanh(v / vs); 0: smoothing
    "friction_band_margin": 1.5,    # >= 1: the compensation's band is this x the model's (control/laws/friction.py)
    "friction_stiction": 0.0,       # [0, 1]: at rest, this x f_c along the law's pull (control/laws/friction.py)
    "friction_stiction_torque": 0.05,  # N m: the pull at which that reaches 76 % (tanh scale)
    "friction_stiction_sensed": 1.0,   # [0, 1]: the same where a sensor measures the environment's torque
    "friction_offset": 0.0,         # N m per joint, any sign (dynamics.identification's `off`)
    "friction_scale": 1.0,          # [0, 1]: the fraction of the model compensated
}


class ControlLaw:
    """Base class.  Subclasses set `name`, `DEFAULTS` (their own keys and defaults), implement
    `_validate(p)` (check/normalise the merged flat dict in place, raise ValueError), `_apply(p)`,
    `reset`, `set_reference` and `compute`."""
    name = "base"
    DEFAULTS = {}
    # what a law offers the loop's stages (declared, never probed):
    time_scalable = False       # a trajectory with a nominal speed (v_nominal, time_scale): the envelope's
                                # time scaling may slow it
    stiffness_keys = ()         # the parameters an energy tank may lower (live changes pass through it)
    damping_ratio_key = None    # (its damping-ratio key, the explicit damping gains key that overrides it)
    clipped = False             # the last compute clipped its error (the safety layer acted)
    # the hold bound (rad/s): no feedback mode of the law faster than this, set before each compute by the
    # loop from how long its commands are held (ControlLoop: hold_omega); inf: none.  A law that honours
    # it sets `capped` to the number of joints (or task modes) it slowed in the last compute
    omega_cap = float("inf")
    capped = 0

    def param(self, key, default=None):
        """One parameter's current value, no copy (a per-step read)."""
        return self._params.get(key, default)

    @property
    def stiffness_error(self):
        """The error the stiffness acts on (the energy tank's storage function)."""
        return self._e

    def approach_gains(self, m):
        """(K_j, D_j) per joint, the torque change per unit speed and acceleration of a reference followed
        (m: the mass matrix diagonal), for set-point shaping; None: the law follows no joint reference."""
        return None

    def gain_problem(self, M, jacobian, w2, how):
        """'' or why the gains are more than the sampling allows: a stiffness k on an inertia m oscillates
        at sqrt(k / m); w2 = (GAIN_OMEGA_DT / period)^2 bounds k / m (M: the mass matrix at the current q;
        jacobian(frame): that frame's Jacobian there, world-aligned; how: the bound in words)."""
        return ""

    def __init__(self, model, backend, params=None):
        self.model = model
        self.dyn = backend
        self.nv = model.nv
        self._state_shapes = ((model.nq,), (model.nv,))      # _state_ok, per step (model.nq is a property chain)
        self.info = LawInfo()
        self.track_damping_power = False               # impedance laws: set damping_power each compute
        self.damping_power = 0.0                       # [W] their damping's dissipation (energy tank)
        self.fast = isinstance(backend, PinocchioBackend) and model.q_identity
        if self.fast:
            self.pm, self.pdata = backend.pm, backend.data
        self._tau = np.zeros(self.nv)
        self.friction = FrictionCompensation(self.nv)
        self._q_last = np.zeros(model.nq)              # the state's q, for the stiction term's g(q)
        self._pull_ext = None                          # J^T w of a sensed wrench for the stiction term
        self._tau_ext = self._tau_ext_sd = None        # the state's measured joint torques (they take precedence)
        self._t_state, self._dt = -math.inf, 0.0       # the state's time, its step (the stiction's slip)
        self._il = np.tril_indices(self.nv, -1)
        self.continuous = continuous_mask(model)      # None or a mask: errors wrapped to [-pi, pi)
        self._params = {}
        defaults = dict(COMMON_DEFAULTS)
        defaults.update(self.DEFAULTS)
        self._params = self._checked(defaults, {})
        self.set_params(params or {})

    @property
    def command(self):
        """The law's last command, before the safety filter (its output buffer: read it, do not keep it)."""
        return self._tau

    # ---- parameters ----
    @property
    def params(self):
        """A copy of the current (validated, normalised) parameters."""
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self._params.items()}

    def _checked(self, old, new):
        new = flatten_params(new)
        known = set(COMMON_DEFAULTS) | set(self.DEFAULTS)
        unknown = sorted(set(new) - known)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {unknown}; known: {sorted(known)}")
        p = dict(old)
        p.update(new)
        self._preprocess_merged(p, new)
        n = self.nv
        p["compensate_gravity"] = check_bool("compensate_gravity", p["compensate_gravity"])
        p["friction_compensation"] = check_bool("friction_compensation", p["friction_compensation"])
        p["friction_viscous"] = check_vector("friction_viscous", p["friction_viscous"], n)
        p["friction_coulomb"] = check_vector("friction_coulomb", p["friction_coulomb"], n)
        p["friction_smoothing"] = check_scalar("friction_smoothing", p["friction_smoothing"], 0.0, lo_open=True)
        p["friction_offset"] = check_vector("friction_offset", p["friction_offset"], n, lo=None)
        p["friction_velocity_scale"] = check_vector("friction_velocity_scale", p["friction_velocity_scale"], n)
        p["friction_band_margin"] = check_scalar("friction_band_margin", p["friction_band_margin"], 1.0, hi=1e6)
        p["friction_stiction"] = check_scalar("friction_stiction", p["friction_stiction"], 0.0, hi=1.0)
        p["friction_stiction_sensed"] = check_scalar("friction_stiction_sensed", p["friction_stiction_sensed"], 0.0,
                                                     hi=1.0)
        p["friction_stiction_torque"] = check_scalar("friction_stiction_torque", p["friction_stiction_torque"], 0.0,
                                                     lo_open=True, hi=1e6)
        p["friction_scale"] = check_scalar("friction_scale", p["friction_scale"], 0.0)
        if p["friction_scale"] > 1.0:
            raise ValueError(f"friction_scale: {p['friction_scale']} must be within [0, 1]")
        self._validate(p)
        return p

    def _preprocess_merged(self, p, new):
        """Hook: adjust the merged dict given the keys of this update (e.g. omega replaces kp)."""

    def _validate(self, p):
        pass

    def _apply(self, p):
        pass

    def set_params(self, params):
        """Validate and apply new parameters atomically: raise ValueError and keep the old ones on
        any bad value.  Keys not given keep their current values."""
        p = self._checked(self._params, params)
        self._params = p
        self.gravity_enabled = p["compensate_gravity"]
        self.friction.set(p)
        self._apply(p)

    # ---- interface ----
    def reset(self, state):
        """Called on activation: take the current state as the reference (hold position)."""

    def set_reference(self, ref):
        raise ValueError(f"{self.name} takes no reference of type {type(ref).__name__}")

    def compute(self, state):
        raise NotImplementedError

    # ---- helpers for subclasses ----
    def _state_ok(self, state):
        """q, v as float arrays of length nv and finite.  On a bad state fill tau/info with NaN."""
        q, v = state.q, state.v
        if type(q) is not np.ndarray or q.dtype != np.float64:
            q = np.asarray(q, dtype=float)
        if type(v) is not np.ndarray or v.dtype != np.float64:
            v = np.asarray(v, dtype=float)
        if q.shape != self._state_shapes[0] or v.shape != self._state_shapes[1]:
            raise ValueError(f"{self.name}: state q has shape {q.shape}, v {v.shape}; "
                             f"expected ({self.model.nq},), ({self.nv},)")
        if not math.isfinite(q.dot(q) + v.dot(v)):
            self._tau.fill(np.nan)
            self.info.error = np.full_like(self.info.error, np.nan)
            self.info.status = "nonfinite state"
            return None, None
        self._q_last = q
        self._tau_ext = getattr(state, "tau_ext", None)          # measured by link-side sensors (or None)
        self._tau_ext_sd = getattr(state, "tau_ext_sd", None)
        t = state.t
        if t is None:
            self._dt = 0.0
        else:
            dt = t - self._t_state
            self._dt = dt if 0.0 < dt < 0.1 else 0.0
            self._t_state = t
        return q, v

    def _add_friction(self, tau, v):
        """tau += the friction compensation (control/laws/friction.py: at most the identified model at
        every speed) when friction_compensation is on."""
        fr = self.friction
        ext = self._pull_ext
        if self._tau_ext is not None and fr.stiction_sensed > 0.0:   # link-side joint torque sensors: every
            ext = self._tau_ext                                      # contact on the arm, not only the tool's
            fr.joint_deadzone(self._tau_ext_sd)
        fr.sensed = ext is not None
        if fr.active and (fr.stiction > 0.0 or fr.sensed):   # the law's own torque without gravity: its
            fr.pull[:] = tau                                 # pull, and the environment's where measured
            if self.gravity_enabled:
                fr.pull -= self._g(self._q_last)
            if fr.sensed:
                fr.pull += ext
        return fr.add(tau, v, self._dt)

    def friction_torque(self, v):
        """The friction compensation alone, as added (for tests and plots)."""
        return self.friction.torque(v)

    # dynamics: direct Pinocchio calls on the fast path, the backend otherwise.  Returned arrays are
    # views into Data, valid until the next call.
    def _g(self, q):
        if self.fast:
            return pin.computeGeneralizedGravity(self.pm, self.pdata, q)
        return self.dyn.gravity(q)

    def _rnea(self, q, v, a):
        if self.fast:
            return pin.rnea(self.pm, self.pdata, q, v, a)
        return self.dyn.rnea(q, v, a)

    def _mass(self, q, out):
        """Full symmetric M(q) copied into `out`."""
        if self.fast:
            M = pin.crba(self.pm, self.pdata, q)
            out[...] = M
            il = self._il
            out[il] = out.T[il]                # Pinocchio fills the upper triangle only
            return out
        out[...] = self.dyn.mass_matrix(q)
        return out

    def _coriolis(self, q, v):
        if self.fast:
            return pin.computeCoriolisMatrix(self.pm, self.pdata, q, v)
        return self.dyn.coriolis_matrix(q, v)


def as_vec(x, n, what, default=0.0):
    """A float vector of length n (None -> default); ValueError otherwise."""
    if x is None:
        return np.full(n, default)
    a = np.array(x, dtype=float).reshape(-1)
    if a.shape != (n,):
        raise ValueError(f"{what}: expected {n} values, got {a.size}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: values must be finite")
    return a


class JointLaw(ControlLaw):
    """A law tracking a joint reference: a fixed JointReference or a JointTrajectory (started at the
    first compute after it is set, from the reference being followed then: q_d, v_d, a_d, which is
    the measured state held since activation or a reset, or the previous trajectory's sample, so a
    trajectory that replaces another one moves on without a jump)."""

    time_scalable = True

    def __init__(self, model, backend, params=None):
        super().__init__(model, backend, params)
        n = self.nv
        self.q_d, self.v_d, self.a_d = None, np.zeros(n), np.zeros(n)
        self.trajectory = None
        # time scaling of a trajectory (the safety envelope's speed limit): the trajectory's clock runs
        # at time_scale s in [0, 1] (set by the caller each step, ds/dt = time_scale_rate); the
        # reference is sampled at t - lag and its velocity and acceleration scaled: v_d = s v,
        # a_d = s^2 a + s' v.  lag stays exactly 0 while s = 1 (the unscaled path is untouched).
        self.time_scale, self.time_scale_rate = 1.0, 0.0
        self.v_nominal = np.zeros(n)         # the trajectory's own velocity at the sampled time
        self._lag, self._t_prev = 0.0, None
        self._e = np.zeros(n)
        self._ed = np.zeros(n)
        self.info.error = np.zeros(n)
        self.info.reference = np.zeros(n)

    def reset(self, state):
        """Hold the current position: q_d = q, v_d = a_d = 0; drops any trajectory."""
        q = np.array(state.q, dtype=float).reshape(-1)
        if q.shape != (self.nv,) or not np.all(np.isfinite(q)):
            raise ValueError(f"{self.name}.reset: q must be {self.nv} finite values")
        self.q_d = q.copy()
        self.v_d[:] = 0.0
        self.a_d[:] = 0.0
        self.trajectory = None
        self.time_scale, self.time_scale_rate = 1.0, 0.0
        self.info.status = "holding"

    def set_reference(self, ref):
        # imported here to keep base importable on its own
        from ..trajectory import JointTrajectory
        n = self.nv
        if isinstance(ref, JointTrajectory):
            if ref.nv != n:
                raise ValueError(f"{self.name}: trajectory has {ref.nv} joints, the model {n}")
            self.trajectory = ref
            self._lag, self._t_prev = 0.0, None
            self.time_scale, self.time_scale_rate = 1.0, 0.0
            self.info.status = "trajectory"
            return
        if not isinstance(ref, JointReference):
            raise ValueError(f"{self.name} takes a JointReference or JointTrajectory, not {type(ref).__name__}")
        q_d = as_vec(ref.q, n, "reference q")
        v_d = as_vec(ref.v, n, "reference v")
        a_d = as_vec(ref.a, n, "reference a")
        self.q_d, self.v_d[:], self.a_d[:] = q_d, v_d, a_d
        self.trajectory = None
        self.info.status = "reference"

    def trajectory_time(self, t):
        """The trajectory's clock at the law's time t (behind t by what the time scaling held back)."""
        return t - self._lag

    # bounds of the approach from the measured state to a trajectory's first point (see
    # JointTrajectory.start): the model's velocity limits (APPROACH_DEFAULT_VELOCITY where it has none)
    # scaled by approach_velocity_scale, and approach_acceleration
    APPROACH_DEFAULT_VELOCITY = 1.0     # rad/s | m/s
    approach_velocity_scale = 1.0
    approach_acceleration = 5.0         # rad/s^2 | m/s^2

    # set by the caller (ControlLoop): q -> (max_velocity, max_acceleration) per joint or None, the
    # bounds that keep the torque-rate limit unsaturated while the approach is followed
    approach_cap = None

    def approach_bounds(self, q=None):
        vl = np.array(self.model.velocity_limits, dtype=float)
        vl = np.where(np.isfinite(vl) & (vl > 0), vl, self.APPROACH_DEFAULT_VELOCITY)
        vmax = vl * self.approach_velocity_scale
        amax = np.full(self.nv, float(self.approach_acceleration))
        cap = None if self.approach_cap is None or q is None else self.approach_cap(q)
        if cap is not None:
            vmax = np.minimum(vmax, cap[0])
            amax = np.minimum(amax, cap[1])
        return {"max_velocity": vmax, "max_acceleration": amax}

    def _desired(self, state, q, v):
        """(q_d, v_d, a_d) for this cycle; also fills info.reference / info.error and the error
        buffers self._e = q_d - q, self._ed = v_d - v."""
        if self.q_d is None:                 # never reset: hold where we are
            self.reset(State(q=q, v=v, t=state.t))
        tr = self.trajectory
        if tr is not None:
            if not tr.started:               # from the reference being followed (held: the state
                tr.start(state.t, self.q_d, self.v_d, a0=self.a_d,  # at activation), so nothing jumps
                         continuous=self.continuous, **self.approach_bounds(q))
            sc = self.time_scale
            if self._t_prev is not None and (sc != 1.0 or self._lag):
                self._lag += (1.0 - sc) * (state.t - self._t_prev)
            self._t_prev = state.t
            t_tr = state.t - self._lag if self._lag else state.t
            q_d, v_d, a_d = tr.sample(t_tr)
            self.v_nominal[:] = v_d
            if sc != 1.0 or self._lag:
                a_d = sc * sc * a_d + self.time_scale_rate * v_d
                v_d = sc * v_d
            self.q_d, self.v_d[:], self.a_d[:] = q_d, v_d, a_d
            if tr.done(t_tr):
                self.info.status = "trajectory done"
        shortest_error(self.q_d, q, self.continuous, out=self._e)   # continuous joints: shortest angle
        np.subtract(self.v_d, v, out=self._ed)
        self.info.reference[:] = self.q_d
        self.info.error[:] = self._e
        return self.q_d, self.v_d, self.a_d
