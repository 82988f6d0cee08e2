"""The control loop every front end drives: law + safety filter + supervisor.  No ROS.

The controller node runs it from its subscriptions and timers (over DDS); a hardware bridge runs the
very same object inside the robot's own 1 kHz callback (in-process).  Everything here is numpy in
model order; the caller maps names and converts messages.

    loop = ControlLoop.from_params(model, params, log=None)
        # params: a flat dict with the controller node's parameter names ('controller', 'joints',
        # 'joint_impedance.k_gains', 'effort_limits', 'watchdog_timeout', 'safe_command',
        # 'update_rate', ... see control.params.loop_param_specs()), validated as the node validates
        # them; per-joint values in `joints` order (reordered to model order inside); missing keys take
        # their defaults, keys that are not loop parameters are ignored.  ValueError naming the key.
        # log: a callable log(level, text), level 'info' | 'warn' | 'error'; None: Python logging.
        # (with an rclpy logger use one call site per severity: rclpy raises "Logger severity
        # cannot be changed between calls" when one line logs at several severities)
    loop.joints, loop.perm                  # command order; cmd[k] = tau_model[perm[k]]
    ok, reason = loop.set_params({...})     # live changes, validated, all-or-nothing
    loop.activate(now)                      # start: the law holds the first valid state, the safety
                                            # filter ramps from the last command sent
    loop.deactivate()                       # stop: step() returns the safe-command ramp from now on;
                                            # loop.safe_reached says when it has arrived
    loop.update_state(q, v, now, stamp=None, effort=None)   # a valid measurement (model order,
                                            # already mapped; effort: the measured joint torques)
    loop.reject_state(reason, detail, now)  # an invalid one (counted; the safe command follows)
    ok, reason = loop.set_reference(ref)    # JointReference | JointTrajectory | CartesianReference |
                                            # CartesianTrajectory (refused while inactive; one that
                                            # arrives while the watchdog is tripped is rejected at
                                            # the resume, with its reason: the resume holds)
    ok, reason = loop.set_target_wrench(w)  # cartesian_impedance: feed-forward wrench, base axes
    loop.set_wrench(raw, frame_id, now)     # the F/T sensor's raw reading (cartesian_impedance)
    tau, safe = loop.step(now, t=None)      # watchdog check; law -> safety filter, or one step of the
                                            # safe-command ramp; tau in model order (a preallocated
                                            # array, valid until the next call); never raises
    loop.sent(now, t)                       # optional: when the command left, steady and control
                                            # clock (the rate limit's dt counts from there; default:
                                            # the step's time)
    ok, msg = loop.hold();  ok, msg = loop.tare()
    loop.counts                             # rejected.*, errors.*, watchdog_trips: exact
    level, message, kv = loop.diagnostics() # level 0 ok, 1 warn, 2 error; kv [(key, text), ...]
    loop.info                               # the law's reference / error (for ~/state)
    ok, msg = loop.start_payload_id(now)    # payload identification run by the loop (control/runs/payload.py,
    ok, msg = loop.cancel_payload_id()      # payload_id.* parameters); the estimate in
    ok, msg = loop.payload_status()         # loop.payload_estimate, attached by
    ok, msg = loop.attach_payload_estimate();  ok, msg = loop.detach_payload_estimate()

Two clocks, each with one job.  `t` is the control clock (the node's ROS clock: sim time under
use_sim_time; the robot's time on the Franka; default `now`): the laws' time (trajectories) and every
stage's dt (the law's, the torque-rate limit's, the start and resume ramps', the envelope's timers and
damping, the energy tank's), so a lockstep plant run faster or slower than real time gets the same
commands (test_setpoint_shaping.py).  `now` is the steady clock [s] (monotonic, from the caller): only
the watchdog, the log throttling and the safe-command ramp run on it (a dead driver or a stalled caller
is a wall-clock event); the first law step after safe-command steps counts its dt from the last of them.

Set-point shaping (`setpoint_shaping`, on by default): a joint set-point (a JointReference without
velocity or acceleration: ~/target_joint_state) is approached on a rest-to-rest quintic from the
reference being followed, its speed and acceleration per joint bounded so that the law's torque change
K_j v_j (D_j a_j) stays within half the torque-rate limit (and the speed within the velocity limits):
a step no longer saturates the rate limit, whose lag inside the loop turned the shipped Panda joint
impedance into a limit cycle (a -0.6 rad step of joint 1: 26.7 x the velocity limit; now 0.59 x,
bench/setpoint_steps.py).  The same bounds apply to the approach of a trajectory's first point.

Supervisor: the watchdog trips when `now - last valid state > watchdog_timeout`, and also when two
control steps are more than watchdog_timeout apart (a stall of the caller); while tripped (or while
the latest state was rejected, or none arrived yet) the command ramps from the last one sent toward
the safe command (zero, or g(q) at the last valid q) at torque_rate_limit x one control period per
step.  Fresh states after a trip: the law holds the current position and the safety filter ramps
from the safe command (ramp_time), so control resumes without a jump.  The rate limit bounds the
change per command to torque_rate_limit / update_rate whatever the gap (SafetyParams.command_period).
Joint speed stop (a Franka's joint-velocity reflex): a valid state with a joint faster than
safety.joint_speed_stop x its velocity limit while the law runs replaces the law's command by the safe
command with joint damping (safety.stop_damping), latched as a Franka's reflex is, until resume() (at
rest); the law then holds the position reached, as after a trip (counted: safety.joint_speed_stops).

Logging: every per-message condition (joint states rejected, watchdog, wrench problems, rejected
references) logs at most one line per condition per `log_throttle_period` seconds, plus one line
when a logged episode ends; suppressed occurrences are summed into the next line.  `counts` are exact.
"""
import dataclasses
import logging
import math
import time
from collections import defaultdict

import numpy as np

from ..dynamics import make_backend
from .laws.base import CartesianReference, JointReference, State, as_vec, check_vector
from .cartesian_trajectory import CartesianTrajectory
from .stages.envelope import EnergyTank, SafetyEnvelope
from .params import ENVELOPE_KEYS, SAFETY_KEYS, SIX_KEYS, TANK_KEYS, Unset, check_value, loop_param_specs
from .stages.safety import SafetyFilter, SafetyParams, _any
from .trajectory import JointTrajectory
from .trajectory_goal import INVALID_GOAL, SUCCESSFUL
from .wrench import WrenchProcessor

LEVELS = {"info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
OK, WARN, ERROR = 0, 1, 2          # diagnostic levels (diagnostic_msgs/DiagnosticStatus bytes)
# with max_pos_error / max_rot_error off, a Cartesian target farther than this from the frame's pose
# is stepped to at the full stiffness: a WARN says so (set_reference)
FAR_UNCLIPPED_POS, FAR_UNCLIPPED_ROT = 0.1, 0.5     # m, rad
# diagnostics(): the safety layer "acts" when it changes what the law asked for or refuses what was
# sent: the safety filter's reasons but these two (the start ramp is the normal start; a configured
# velocity_damping acts on every step by design), the Cartesian law's pose-error clipping, watchdog
# trips, joint speed stops, refused references.  The level is WARN while it acts: an action since the
# previous diagnostics() call or within ACT_HOLD seconds (loop time) of the newest step
QUIET_SAFETY = ("start_ramp", "velocity_damping")
ACT_HOLD = 1.0          # s


def _python_log(level, text):
    logging.getLogger("robot_dynamics.control.loop").log(LEVELS.get(level, logging.INFO), text)


def _quat_to_matrix(x, y, z, w):
    n = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


class LogThrottle:
    """At most one line per condition key per `period` seconds (monotonic `now` from the caller).

        if th.allow(key, now): log(...)      # else the occurrence is counted as suppressed
        n = th.take_suppressed(key)          # occurrences suppressed since the last line of key
    """

    def __init__(self, period=1.0):
        self.period = float(period)
        self._last = {}
        self._suppressed = defaultdict(int)

    def allow(self, key, now, count=True):
        """True: log now.  False: suppressed (counted unless count=False, for a retry of the same
        occurrence)."""
        last = self._last.get(key)
        if last is None or now - last >= self.period or now < last:
            self._last[key] = now
            return True
        if count:
            self._suppressed[key] += 1
        return False

    def take_suppressed(self, key):
        return self._suppressed.pop(key, 0)


class _Episode:
    """A condition that starts, repeats per message and ends (joint states rejected, wrench unusable,
    watchdog tripped).  Its first line is throttled per key: when suppressed, the first occurrence
    after the period logs it (a lasting fault is never silent); the end is logged only for an episode
    whose start was.  A new reason starts a new episode."""

    def __init__(self, loop, key):
        self.loop, self.key = loop, key
        self.reason = ""              # "" = not in an episode
        self.count = 0                # occurrences in this episode
        self.logged = False           # the start of this episode was logged

    def occur(self, reason, now, level, text_fn, retry=False):
        """One occurrence (retry: the same one again, only to log a suppressed start); text_fn(extra)
        builds the line (extra: the suppressed-occurrences note)."""
        if reason != self.reason:
            self.reason, self.count, self.logged = reason, 0, False
        if not retry:
            self.count += 1
        if not self.logged:
            th = self.loop._throttle
            if th.allow(self.key, now, count=not retry):
                n = th.take_suppressed(self.key)
                extra = f" ({n} more occurrence(s) not logged since the last line)" if n else ""
                self.loop._log(level, text_fn(extra))
                self.logged = True

    def end(self, text_fn):
        """The condition cleared: text_fn(self) is logged if the episode's start was."""
        if self.reason and self.logged:
            self.loop._log("info", text_fn(self))
        self.reason, self.count, self.logged = "", 0, False


class ControlLoop:
    """See the module docstring."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_params(cls, model, params=None, log=None, counts=None, labels=None):
        """Build from a flat parameter dict (see the module docstring).  `counts`: a dict-like counter
        to share (the node's, which lives across reconfigurations); `labels`: names of the inputs used
        in log lines, {'joint_states': '/joint_states', 'wrench': '/ft_sensor/wrench'}."""
        return cls(model, params, log, counts, labels)

    def __init__(self, model, params=None, log=None, counts=None, labels=None):
        specs = {s.name: s for s in loop_param_specs()}
        self._specs = specs
        params = dict(params or {})
        joints = params.get("joints") or []
        joints = list(joints)
        if len(set(joints)) != len(joints):
            raise ValueError(f"joints: duplicate names in {joints}")
        p = {}
        for name, s in specs.items():
            v = params.get(name)
            if v is None:
                v = None if isinstance(s.default, Unset) else s.default
            if hasattr(v, "tolist"):
                v = v.tolist()
            err = self._check(s, v, len(joints) or model.nv)
            if err:
                raise ValueError(err)
            p[name] = v
        self._p = p
        self._log = log or _python_log
        self._throttle = LogThrottle(p["log_throttle_period"])
        self.counts = counts if counts is not None else defaultdict(int)
        labels = dict(labels or {})
        self._js_label = labels.get("joint_states", "the joint states")
        self._wrench_label = labels.get("wrench", "the wrench input")
        m = self.model = model
        if m.floating_base:
            raise ValueError("a floating-base model; the controller needs a fixed base")
        if m.nq != m.nv:
            raise ValueError(f"nq {m.nq} != nv {m.nv} (unsupported joint types)")
        mn = list(m.joint_names)
        self.joints = list(joints) if joints else mn
        if sorted(self.joints) != sorted(mn):
            raise ValueError(f"joints {self.joints} do not match the model's movable joints {mn}")
        n = self.n = m.nv
        self.perm = np.array([mn.index(j) for j in self.joints], dtype=np.intp)   # cmd[k] = tau[perm[k]]
        if p["armature"] is not None:                                             # joints -> model order
            arm = np.zeros(n)
            arm[self.perm] = check_vector("armature", p["armature"], n)
            m.set_armature(arm)
        self.backend = make_backend(m, p["backend"])
        self.gravity_backend = make_backend(m, "pinocchio")                     # for the safe command
        self.law_name = p["controller"]
        law_params = {}
        for name, s in specs.items():
            if s.law_key and name.startswith(self.law_name + ".") and p[name] is not None:
                law_params[s.law_key] = self._law_value(s, p[name])
        from . import make_law
        try:
            self.law = make_law(self.law_name, m, self.backend, law_params)
        except ValueError as e:
            raise ValueError(f"{self.law_name} parameters: {e}") from None
        self.period = 1.0 / p["update_rate"]
        self.safety = SafetyFilter(m, self._safety_params(p))
        if hasattr(self.law, "approach_cap"):
            self.law.approach_cap = self._approach_cap
        if hasattr(self.law, "shaping"):
            self.law.shaping = self._cartesian_cap
        self.envelope = SafetyEnvelope(m, {ENVELOPE_KEYS[k]: self._envelope_value(k, p[k]) for k in ENVELOPE_KEYS})
        self._tank_keys = TANK_KEYS.get(self.law_name, ())
        self.tank = EnergyTank(p["safety.tank_capacity"] if self._tank_keys else 0.0)
        self.law.track_damping_power = self.tank.capacity > 0
        self.cartesian = self.law_name == "cartesian_impedance"
        self.wrench_proc = None
        self.wrench_frame_error = None
        if self.cartesian and p["sensor_frame"]:
            self.wrench_proc = self._make_wrench_processor(p["sensor_frame"])
        self.state_seq, self.state_stamp = 0, None
        self._make_observer(p)
        dag = p["observer.driver_adds_gravity"]
        self.driver_adds_gravity = (not self.law.params.get("compensate_gravity", True)) if dag == "auto" \
            else dag == "true"
        self.payload_run = None                    # the current / last PayloadRun
        self.dynamics_run = None                   # the current / last DynamicsRun (control/runs/dynamics.py)
        self.payload_estimate = None               # the last successful PayloadEstimate
        self.effort = np.zeros(n)                  # the measured joint torques of the last state
        self.have_effort = False
        # state (model order), preallocated
        self.q, self.v = np.zeros(n), np.zeros(n)
        self.state = State(self.q, self.v, 0.0)
        self.have_state = False
        self.last_ok = -math.inf                   # time of the last valid joint state
        self.latest_rejected = False
        self.watchdog = "waiting"                  # waiting | ok | tripped
        self.active = False
        self.need_reset = True
        self.pending_ref = None
        self.pending_what = "reference"
        self.goal = None                           # the FollowJointTrajectory goal followed (GoalMonitor)
        self._tripped_since_reset = False
        self.pending_wrench = False
        self.pose_target = None
        self.wrench_target = None
        self.wrench_raw = None
        self.wrench_raw_frame = ""
        self.wrench_time = -math.inf
        self.last_step = None                      # `now` of the last step (the watchdog's stall check)
        self.last_t = None                         # control-clock time of the last law step (every dt)
        self.last_ramp = None                      # `now` of the last safe-command step since then
        self.last_pub = None                       # when the last command left (the rate limit's dt)
        self.last_sent_t = None                    # the same on the control clock (None: unknown)
        self.safe_reached = False
        self.waiting_logged = False
        self.tau = np.zeros(n)                     # the last filtered command (model order)
        self.safe = np.zeros(n)                    # the safe torque (target of the ramp)
        self.safe_out = np.zeros(n)                # the rate-limited step toward it actually sent
        self._zero = np.zeros(n)
        self.total_steps = 0
        self.safe_published = 0
        self._js_episode = _Episode(self, "joint_states")
        self._wrench_episode = _Episode(self, "wrench")
        self._wd_episode = _Episode(self, "watchdog")
        self.speed_stop = ""                       # the joint speed stop's reason while it acts, else ""
        self._acts = {}                            # what the safety layer did: name -> [count, when, detail]
        self._acts_reported = {}                   # the counts at the previous diagnostics() call
        self._last_act = None                      # (name, detail, when) of the newest action
        self._latest = None                        # the newest `now` given to step()
        self._trip_why = ""
        self._reset_cause = "the watchdog was tripped (no valid joint state)"
        self._speed_limits()

    # ------------------------------------------------------------------ parameters
    @staticmethod
    def _check(spec, v, n):
        if v is not None and spec.check is None:
            d = spec.default
            if isinstance(d, bool) and not isinstance(v, (bool, np.bool_)):
                return f"{spec.name}: expected true or false, got {v!r}"
            if isinstance(d, str) and not isinstance(v, str):
                return f"{spec.name}: expected a string, got {v!r}"
            if spec.name == "joints" and (isinstance(v, str) or not all(isinstance(x, str) for x in v)):
                return f"joints: expected a list of joint names, got {v!r}"
        return check_value(spec, v, 6 if spec.law_key in SIX_KEYS else n)

    @property
    def params(self):
        """The loop's current parameter values (a copy; law and safety values as last set)."""
        return dict(self._p)

    def param(self, name):
        """One parameter's current value (no copy of the table: for a per-step read)."""
        return self._p[name]

    def _to_model_order(self, a):
        """A per-joint array in `joints` order -> model order (1 value: broadcast)."""
        a = np.asarray(a, dtype=float)
        if a.size == 1:
            return np.full(self.n, float(a[0]))
        out = np.empty(self.n)
        out[self.perm] = a
        return out

    def _law_value(self, spec, v):
        if spec.check in ("per_joint", "per_joint_any"):
            a = np.asarray(v, dtype=float)
            if a.size == 1:
                return float(a[0])
            if spec.law_key in SIX_KEYS:
                return a.tolist()
            if a.size != self.n:
                return a.tolist()                      # the law names the wrong length
            return self._to_model_order(a).tolist()
        if isinstance(v, str) and spec.law_key == "frame":
            return v or None
        return v

    def _safety_value(self, key, v):
        if key == "effort_limits":
            return None if not v else self._to_model_order(v)
        return v

    @staticmethod
    def _envelope_value(key, v):
        if v is None:                                  # not set
            return "" if key == "safety.force_frame" else []
        return v

    def _safety_params(self, p):
        d = {SAFETY_KEYS[k]: self._safety_value(k, p[k]) for k in SAFETY_KEYS}
        if "command_period" in SafetyParams.__dataclass_fields__:
            d["command_period"] = self.period
        return d

    GAIN_OMEGA_DT = 0.5            # a live gain's natural frequency x the control period at most this
    MIN_DAMPING_RATIO = 0.1        # a live damping ratio at least this (a spring without damping, one
                                   # cycle late, is unstable at any stiffness)

    def _gain_problem(self):
        """'' or why the law's gains (just changed live) are more than the sampling and the arm's inertia
        allow at the last valid q: a stiffness k on an inertia m oscillates at sqrt(k / m); at more than
        GAIN_OMEGA_DT / period rad/s a 1 kHz loop with one cycle of delay is near its stability edge
        (joint impedance: k_j <= (GAIN_OMEGA_DT / period)^2 M_jj; computed torque: kp_j <= (GAIN_OMEGA_DT /
        period)^2; Cartesian impedance: k_pos <= the same x the smallest translational task-space
        inertia, k_rot the rotational one), and a damping ratio below MIN_DAMPING_RATIO."""
        law = self.law
        w2 = (self.GAIN_OMEGA_DT / self.period) ** 2
        names = self.model.joint_names
        p = law.params
        how = f"(GAIN_OMEGA_DT {self.GAIN_OMEGA_DT} / period {self.period:g} s)^2"
        for key, given in (("damping_ratio", "d_gains"), ("task.damping_ratio", None), ("zeta", "kd")):
            z = p.get(key)
            if z is not None and z < self.MIN_DAMPING_RATIO and (given is None or p.get(given) is None):
                return (f"{self.law_name}.{key}: {z:g} is below {self.MIN_DAMPING_RATIO} (an undamped spring one "
                        "cycle late is unstable): refused")
        M = np.asarray(self.gravity_backend.mass_matrix(self.q), dtype=float)
        if hasattr(law, "kp"):
            bad = np.flatnonzero(law.kp > w2)
            if bad.size:
                j = int(bad[0])
                return (f"computed_torque.kp: {law.kp[j]:g} on {names[j]} is above {w2:g} 1/s^2 = {how}: "
                        "refused")
        elif hasattr(law, "k") and not hasattr(law, "K"):
            m = np.diagonal(M)
            bad = np.flatnonzero(np.asarray(law.k) > w2 * m)
            if bad.size:
                j = int(bad[0])
                return (f"joint_impedance.k_gains: {law.k[j]:g} N m/rad on {names[j]} is above its bound "
                        f"{w2 * m[j]:.4g} = M_jj {m[j]:.4g} kg m^2 x {how} at the current pose: refused")
        elif hasattr(law, "K"):
            J = np.asarray(self.gravity_backend.frame_jacobian(self.q, law.frame, "local_world_aligned"))
            Minv_Jt = np.linalg.solve(M, J.T)
            for rows, what, unit in ((slice(0, 3), "pos", "N/m"), (slice(3, 6), "rot", "N m/rad")):
                A = J[rows] @ Minv_Jt[:, rows]                 # the inverse task-space inertia block
                lam = 1.0 / max(float(np.linalg.eigvalsh(A).max()), 1e-300)
                k = float(np.max(law.K[rows]))
                if k > w2 * lam:
                    return (f"cartesian_impedance.task.k_{what}_*: {k:g} {unit} is above its bound {w2 * lam:.4g} "
                            f"= the smallest task-space inertia {lam:.4g} x {how} at the current pose: refused")
        return ""

    def set_params(self, params):
        """Live changes {name: value} (per-joint values in `joints` order).  All-or-nothing: on any bad
        value nothing changes.  Keys of other laws are validated only; keys that are not loop
        parameters are ignored; parameters read at construction only ('controller', 'joints',
        'backend', 'update_rate', the wrench processing) are rejected.  Returns (ok, reason)."""
        errors, law_updates, safety_updates, envelope_updates, plain = [], {}, {}, {}, {}
        for name, v in params.items():
            s = self._specs.get(name)
            if s is None:
                continue
            if hasattr(v, "tolist"):
                v = v.tolist()
            if s.law_key and not name.startswith(self.law_name + "."):
                err = self._check(s, v, self.n)         # another law: checked, used at reconfigure
                if err:
                    errors.append(err)
                continue
            if not s.live and name != "sensor_frame":
                if v != self._p.get(name):
                    errors.append(f"{name}: read at configure only (reconfigure to change it)")
                continue
            if v is None and name in ENVELOPE_KEYS:
                v = self._envelope_value(name, v)
            if v is None and name != "effort_limits":         # effort_limits unset: the URDF's
                errors.append(f"{name}: cannot be unset while configured")
                continue
            err = self._check(s, v, self.n)
            if err:
                errors.append(err)
                continue
            if s.law_key:
                law_updates[s.law_key] = self._law_value(s, v)
            elif name in SAFETY_KEYS:
                safety_updates[SAFETY_KEYS[name]] = self._safety_value(name, v)
            elif name in ENVELOPE_KEYS:
                envelope_updates[ENVELOPE_KEYS[name]] = v
            plain[name] = v
        if errors:
            return False, "; ".join(errors)
        old_safety, old_envelope = self.safety.params, self.envelope.params
        try:
            if envelope_updates:
                self.envelope.set_params(envelope_updates)
            if self.observer is not None and ("observer.threshold" in plain or "observer.release" in plain):
                thr = self._obs_threshold(plain.get("observer.threshold", self._p["observer.threshold"]))
                self.observer.set_threshold(thr, plain.get("observer.release", self._p["observer.release"]))
            if safety_updates:
                self.safety.set_params(safety_updates)
            if law_updates:
                tank = self.tank.capacity > 0 and any(k in law_updates for k in self._tank_keys)
                k_now = self._stiffness() if tank else None
                old_law = self.law.params
                self.law.set_params(law_updates)               # validated whole
                problem = self._gain_problem()
                if problem:
                    self.law.set_params(old_law)
                    raise ValueError(problem)
                if tank:                                       # the stiffness: through the tank
                    self.tank.target = self._stiffness()
                    self._set_stiffness(k_now)
        except ValueError as e:
            self.safety.set_params(old_safety)
            self.envelope.set_params(old_envelope)
            return False, str(e)
        self._p.update(plain)
        if "safety.tank_capacity" in plain and self._tank_keys:
            self.tank.set_capacity(plain["safety.tank_capacity"])
            self.law.track_damping_power = self.tank.capacity > 0
        if "log_throttle_period" in plain:
            self._throttle.period = float(plain["log_throttle_period"])
        if "safety.joint_speed_stop" in plain:
            self._speed_limits()
        return True, ""

    def _speed_limits(self):
        """The joint speed stop's thresholds (model order): safety.joint_speed_stop x the model's
        velocity limits, inf for a joint without one (none, <= 0 or not finite: not watched)."""
        f = self._p["safety.joint_speed_stop"]
        vl = np.asarray(self.model.velocity_limits, dtype=float)
        watched = np.isfinite(vl) & (vl > 0) & (f > 0)
        self._v_stop = np.where(watched, f * np.where(watched, vl, 1.0), np.inf)
        self._inv_v_stop = 1.0 / self._v_stop          # 0 for a joint not watched
        self._v_abs = np.empty(self.n)
        self._speed_on = bool(watched.any())

    def _make_observer(self, p):
        """The momentum observer (observer.* parameters), built once; None when not enabled."""
        from .observer import MomentumObserver
        self.observer = None
        self.obs_wrench = None                     # the last wrench estimate [f; n] (None: none yet)
        self.obs_wrench_stamp = None               # the loop time `t` of the state it was computed at
        self.obs_edge = False                      # the flag changed at the last update
        self._obs_last = None                      # `now` of the last observer update (None: reset)
        self._obs_tau = np.zeros(self.n)
        self._obs_q_prev = np.zeros(self.n)
        self._obs_seq = -1                         # state_seq at the last observer update
        self._obs_stamp = None
        law_frame = self.law.params.get("frame") if self.cartesian else None
        self.wrench_source = p["cartesian_impedance.wrench_source"] if self.cartesian else "sensor"
        if not p["observer.enabled"]:
            if self.wrench_source == "observer":
                raise ValueError("cartesian_impedance.wrench_source: observer needs observer.enabled true")
            return
        frame = p["observer.frame"] or law_frame or self.model.frame_names[-1]
        if frame not in self.model.frame_names:
            raise ValueError(f"observer.frame: {frame!r} is not a frame of the model "
                             f"(frames: {list(self.model.frame_names)})")
        if self.wrench_source == "observer" and frame != (law_frame or self.model.frame_names[-1]):
            raise ValueError(f"cartesian_impedance.wrench_source: observer needs observer.frame ({frame!r}) = "
                             f"the law's frame ({law_frame!r})")
        thr = self._obs_threshold(p["observer.threshold"])
        try:
            self.observer = MomentumObserver(self.model, self.gravity_backend,
                                             gain=self._to_model_order(p["observer.gain"]), frame=frame,
                                             reference="local", threshold=thr, release=p["observer.release"])
        except ValueError as e:
            raise ValueError(f"observer: {e}") from None
        dag = p["observer.driver_adds_gravity"]
        self.obs_adds_gravity = (not self.law.params.get("compensate_gravity", True)) if dag == "auto" \
            else dag == "true"

    def _obs_threshold(self, v):
        """observer.threshold (joints order) -> model order, or None when all zero (no detection)."""
        a = self._to_model_order(v)
        if not np.any(a > 0):
            return None
        if np.any(a <= 0):
            raise ValueError(f"observer.threshold: every element must be > 0 (or all 0: off), got {list(v)}")
        return a

    def _observe(self, now):
        """One observer step with the torque applied since the last one (the command sent, + g(q) when
        the driver adds gravity).  Reset (r = 0) after any gap: activation, a watchdog trip, a control
        step more than watchdog_timeout after the last.  Never raises (errors.observer, reset)."""
        obs = self.observer
        self.obs_edge = False
        if self.state_seq == self._obs_seq:               # no new measurement since the last update
            return
        stamp, last_stamp = self.state_stamp, self._obs_stamp
        self._obs_seq, self._obs_stamp = self.state_seq, stamp
        try:
            if self._obs_last is None or now - self._obs_last > self._p["watchdog_timeout"] \
                    or now <= self._obs_last:
                self.obs_edge = obs.collision                 # a reset clears the flag
                obs.reset(self.q, self.v)
                self._obs_last = now
                return
            tau = self._obs_tau
            tau[:] = self.tau
            if self.obs_adds_gravity:
                tau += self.gravity_backend.gravity(self._obs_q_prev)
            was = obs.collision
            dt = now - self._obs_last
            if stamp is not None and last_stamp is not None and 0.0 < stamp - last_stamp <= \
                    self._p["watchdog_timeout"]:
                dt = stamp - last_stamp                       # when the states were measured
            obs.update(self.q, self.v, tau, dt)
            self._obs_last = now
            if obs.collision != was:
                self.obs_edge = True
                if obs.collision:
                    self.counts["observer.collisions"] += 1
                    k = int(np.argmax(np.abs(obs.r) / obs.threshold))
                    self._log("warn", f"collision: |r| of {self.model.joint_names[k]} = {abs(obs.r[k]):.2f} N m "
                                      f"> {obs.threshold[k]:.2f} N m (reaction: {self._p['observer.on_collision']})")
                    if self._p["observer.on_collision"] == "hold":
                        self.pending_ref = None
                        self.pose_target = None
                        self.law.reset(self.state)
                    if any(r is not None and r.busy for r in (self.payload_run, self.dynamics_run)):
                        self._abort_payload_run("collision", restore=False)       # holds where it is
                        self.law.reset(self.state)
        except ValueError as e:
            self.exception("observer", e, now)
            self._obs_last = None
        finally:
            self._obs_q_prev[:] = self.q

    def observer_wrench(self, t=None):
        """The wrench estimate [f; n] at observer.frame (local axes) at the current q; None without an
        observer.  Computed on call (an SVD): call it at the publish rate, not every step."""
        if self.observer is None:
            return None
        self.obs_wrench = self.observer.wrench(self.q)
        self.obs_wrench_stamp = t
        return self.obs_wrench

    def _make_wrench_processor(self, frame):
        self.model.check_frame(frame)
        target = self.law.params.get("frame") or self.model.frame_names[-1]
        fc = self._p["wrench_filter_cutoff_hz"]
        return WrenchProcessor(self.model, self.backend, frame, target, tool_mass=self._p["tool_mass"],
                               tool_com=tuple(self._p["tool_com"]), filter_cutoff_hz=fc if fc > 0 else None,
                               deadband=tuple(self._p["wrench_deadband"]))

    # ------------------------------------------------------------------ lifecycle
    def activate(self, now=None):
        """Start commanding: the law holds the first valid state; the safety filter ramps from the
        last command sent (the safe command of a previous deactivate, else zero)."""
        self.need_reset = True
        self.safety.reset(start=self.safety.prev)
        self.watchdog = "waiting"
        self.speed_stop = ""
        self.last_step = None
        self.last_t = None
        self.last_ramp = None
        self.last_pub = None
        self.last_sent_t = None
        self.safe_reached = False
        self.active = True

    def deactivate(self):
        """Stop commanding: from now on step() returns the ramp to the safe command (check
        `safe_reached`: once True, the caller may stop sending).  A payload identification run aborts
        (the arm goes back to the reference held before it once the loop is active again)."""
        self.active = False
        self._abort_payload_run("deactivated")
        self.end_goal("aborted", INVALID_GOAL, "the controller was deactivated")

    # ------------------------------------------------------------------ inputs
    def update_state(self, q, v, now, stamp=None, effort=None):
        """A valid joint state (model order; the values are copied).  `stamp` [s]: when it was measured
        (the message's header stamp), used for the observer's dt when given (DDS delivery jitter).
        `effort`: the measured joint torques (model order) or None (payload identification then uses
        the command sent)."""
        self.q[:] = q
        self.v[:] = v
        if effort is not None:
            self.effort[:] = effort
            self.have_effort = bool(np.all(np.isfinite(self.effort)))
        else:
            self.have_effort = False
        self.state_seq += 1
        self.state_stamp = stamp
        self.have_state = True
        self.last_ok = now
        self.latest_rejected = False
        if self._js_episode.reason:
            self._js_episode.end(lambda e: f"joint states valid again after {e.count} rejected "
                                                f"message(s) ({e.reason})")

    def reject_state(self, reason, detail, now):
        """An invalid joint state: counted (rejected.joint_states.<reason>), logged throttled; the next
        step publishes the safe command."""
        self.latest_rejected = True
        self.counts[f"rejected.joint_states.{reason}"] += 1
        self._js_episode.occur(reason, now, "error", lambda extra: (
            f"joint state rejected ({reason}): {detail}; publishing the safe command "
            f"({self._p['safe_command']}) until valid joint states arrive{extra}"))

    def stale_at(self):
        """When the latest valid state becomes stale (the watchdog may trip after this time)."""
        return self.last_ok + self._p["watchdog_timeout"]

    def stale(self, now):
        """True when the law must not run: no state yet, the latest rejected, or older than the
        watchdog timeout."""
        return (not self.have_state or self.latest_rejected
                or now - self.last_ok > self._p["watchdog_timeout"])

    def reject_reference(self, what, reason, now=None):
        """Count and log (throttled per `what`) a reference the caller could not convert."""
        self.counts[f"rejected.{what}"] += 1
        self._act(f"rejected.{what}", self._latest if now is None else now, reason)
        self._log_throttled(f"ref.{what}", "warn", f"{what} rejected: {reason}", now)
        return False, reason

    def _act(self, name, now, detail=""):
        """The safety layer acted (diagnostics(): WARN while it does, the count, the last one)."""
        a = self._acts.get(name)
        if a is None:
            self._acts[name] = [1, now, detail]
        else:
            a[0] += 1
            a[1] = now
            if detail:
                a[2] = detail
        self._last_act = (name, detail or (a[2] if a is not None else ""), now)

    def _log_throttled(self, key, level, text, now=None):
        """One line per `key` per throttle period; the next line says how many were suppressed."""
        now = time.monotonic() if now is None else now
        if self._throttle.allow(key, now):
            n = self._throttle.take_suppressed(key)
            extra = f" ({n} more not logged since the last line)" if n else ""
            self._log(level, text + extra)

    def set_reference(self, ref, what="reference", now=None, goal=None):
        """A new reference, applied at the next step: JointReference / JointTrajectory (joint laws)
        or CartesianReference / CartesianTrajectory (cartesian_impedance).  Returns (ok, reason); a
        rejection is counted as rejected.<what>.  `goal`: the GoalMonitor of a FollowJointTrajectory
        goal whose trajectory `ref` is (control/trajectory_goal.py): checked after the law every step
        from the one that starts it.  An accepted reference ends the goal being followed (preempted, as
        JTC aborts the running goal when a new one arrives)."""
        joint = isinstance(ref, (JointReference, JointTrajectory))
        if not self.active:
            return self.reject_reference(what, "the controller is not active", now)
        if isinstance(ref, CartesianTrajectory):
            if not self.cartesian:
                return self.reject_reference(what, f"{self.law_name} takes no Cartesian trajectory", now)
            far = self._beyond_reach(ref.positions)
            if far:
                return self.reject_reference(what, far, now)
            self.pose_target = None                  # the law keeps its wrench reference
        elif isinstance(ref, CartesianReference):
            if not self.cartesian:
                return self.reject_reference(what, f"{self.law_name} takes no Cartesian reference", now)
            far = self._beyond_reach(np.reshape(np.asarray(ref.p, dtype=float), (1, -1)))
            if far:
                return self.reject_reference(what, far, now)
            self._far_target(what, ref.R, ref.p, now)
            self.pose_target = (np.array(ref.R, dtype=float), np.array(ref.p, dtype=float))
            if ref.wrench is None and self.wrench_target is not None:
                ref = dataclasses.replace(ref, wrench=self.wrench_target)   # keeps twist and accel
        elif joint:
            if self.cartesian:
                return self.reject_reference(what, f"{self.law_name} takes no joint reference", now)
            if isinstance(ref, JointReference) and self._p["setpoint_shaping"]:
                try:
                    ref = self._shaped(ref)
                except ValueError as e:
                    return self.reject_reference(what, str(e), now)
            self._abort_payload_run(f"a new {what} arrived (it is followed)", restore=False)
        else:
            return self.reject_reference(what, f"unknown reference type {type(ref).__name__}", now)
        if self.goal is not None:
            self.end_goal("aborted", INVALID_GOAL, f"preempted by a new {what}" +
                          (" goal" if goal is not None else " message"), hold=False)
        self.goal = goal
        self.pending_ref = ref
        self.pending_what = what
        self.counts[f"accepted.{what}"] += 1          # (on /diagnostics: a sender can see it arrived)
        return True, ""

    def _beyond_reach(self, points):
        """The reason to refuse Cartesian target points (N x 3, base frame) one of which is beyond the
        law frame's reach bound (control/reach.py: the URDF's link lengths from the first joint's axis
        origin, + REACH_MARGIN), or "" when all are within it (or the points are malformed: the law
        says so)."""
        from .reach import REACH_MARGIN, reach_bound
        frame = self.law.frame
        if getattr(self, "_reach", (None,))[0] != frame:
            try:
                self._reach = (frame, *reach_bound(self.model, frame))
            except ValueError:
                self._reach = (frame, None, math.inf)
        _, origin, length = self._reach
        P = np.asarray(points, dtype=float)
        if origin is None or P.ndim != 2 or P.shape[1] != 3 or not np.all(np.isfinite(P)):
            return ""
        d = np.linalg.norm(P - origin, axis=1)
        k = int(np.argmax(d))
        if d[k] <= length + REACH_MARGIN:
            return ""
        where = f"point {k} " if len(P) > 1 else ""
        return (f"{where}({', '.join(f'{x:.3f}' for x in P[k])}) m out of reach for {frame!r}: "
                f"{d[k]:.3f} m from the first joint's axis origin, beyond the reach bound {length:.3f} m "
                f"(the URDF's link lengths) + {REACH_MARGIN} m margin; the arm keeps its present target")

    def _far_target(self, what, R, p, now):
        """WARN (throttled) when an accepted pose target is farther from the law frame's present pose
        than max_pos_error / max_rot_error: it is approached with the pose error clipped (or, with the
        clipping off, stepped to at the full stiffness: said too)."""
        if not self.have_state:
            return
        frame = self.law.frame
        Rn, pn = self.gravity_backend.frame_placement(self.q, frame)
        dp = float(np.linalg.norm(np.asarray(p, dtype=float) - pn))
        c = (np.trace(np.asarray(R, dtype=float) @ np.asarray(Rn).T) - 1.0) / 2.0
        dr = float(math.acos(min(1.0, max(-1.0, c))))
        lp = self.law._params                   # (not .params: no copy, this runs under the node's lock)
        mp, mr = lp.get("max_pos_error", 0.0), lp.get("max_rot_error", 0.0)
        if (mp > 0.0 and dp > mp) or (mr > 0.0 and dr > mr):
            self.counts["far_targets"] += 1
            self._act("far_target", self._latest if now is None else now,
                      f"{what} {dp:.3f} m, {dr:.3f} rad from {frame!r}: approached with the pose error clipped")
            self._log_throttled(f"far.{what}", "warn", (
                f"{what}: {dp:.3f} m, {dr:.3f} rad from {frame!r} (max_pos_error {mp} m, max_rot_error {mr} "
                f"rad): approached with the pose error clipped"), now)
        elif (mp <= 0.0 and dp > FAR_UNCLIPPED_POS) or (mr <= 0.0 and dr > FAR_UNCLIPPED_ROT):
            self.counts["far_targets"] += 1
            self._act("far_target", self._latest if now is None else now,
                      f"{what} {dp:.3f} m, {dr:.3f} rad from {frame!r} with the pose error clipping off")
            self._log_throttled(f"far.{what}", "warn", (
                f"{what}: {dp:.3f} m, {dr:.3f} rad from {frame!r} with the pose error clipping off "
                f"(max_pos_error {mp}, max_rot_error {mr}): the law pulls at its full stiffness"), now)

    SHAPING_RATE_SHARE = 0.5       # of the torque-rate limit, for a shaped set-point's speed (and again
                                   # for its acceleration through the damping)
    SHAPING_VELOCITY_SHARE = 0.8   # of each joint's velocity limit, for the approach's peak speed (room
                                   # for the tracking error)

    def _shaped(self, ref):
        """A set-point (no velocity, no acceleration) -> a one-point JointTrajectory, approached from the
        reference being followed within the law's approach bounds (see _approach_cap); a reference with
        a velocity or an acceleration (a streamed trajectory) is passed on as it is.  ValueError for a
        position outside the joint limits (as a trajectory's points)."""
        n = self.n
        v = as_vec(ref.v, n, "reference v")
        a = as_vec(ref.a, n, "reference a")
        if np.any(v) or np.any(a):
            return ref
        q = as_vec(ref.q, n, "reference q")
        return JointTrajectory([0.0], q[None, :], lower=self.model.lower_limits, upper=self.model.upper_limits)

    def _approach_cap(self, q):
        """(max_velocity, max_acceleration) per joint for the approach of a trajectory's first point and a
        shaped set-point: the law's torque change from following the approach at speed v_j is about
        K_j v_j (+ D_j a_j), K_j the law's stiffness on joint j (joint impedance: k_j; computed torque:
        M_jj kp_j), D_j its damping (2 zeta sqrt(k_j M_jj); M_jj kd_j): each kept at SHAPING_RATE_SHARE of
        the torque-rate limit, so following the approach leaves the limit unsaturated; the speed also within
        SHAPING_VELOCITY_SHARE of the velocity limits.  None when
        set-point shaping is off or the law has no such gains."""
        if not self._p["setpoint_shaping"]:
            return None
        law = self.law
        m = np.diagonal(self.gravity_backend.mass_matrix(q))
        if hasattr(law, "kp"):                         # computed torque
            k, d = m * law.kp, m * law.kd
        elif hasattr(law, "k"):                        # joint impedance
            k = np.asarray(law.k, dtype=float)
            d = law.d if law.d is not None else law._two_zeta * np.sqrt(k * m)
            d = np.asarray(d, dtype=float)
        else:
            return None
        share = self.SHAPING_RATE_SHARE * np.broadcast_to(np.asarray(self.safety.rate, dtype=float), (self.n,))
        vl = np.asarray(self.model.velocity_limits, dtype=float)
        vl = np.where(np.isfinite(vl) & (vl > 0), self.SHAPING_VELOCITY_SHARE * vl, np.inf)
        with np.errstate(divide="ignore"):
            vcap = np.minimum(np.where(k > 0, share / np.maximum(k, 1e-300), np.inf), vl)
            acap = np.where(d > 0, share / np.maximum(d, 1e-300), np.inf)
        return vcap, acap

    SHAPING_STEP_TIME = 0.01       # s: a pose step whose spring torque the rate limit passes in this
                                   # time (at SHAPING_RATE_SHARE) is stepped to; a larger one approached

    def _cartesian_cap(self):
        """Set-point shaping for the Cartesian law, at the last valid q: (jump_pos [m], jump_rot [rad],
        v_lin [m/s], v_ang [rad/s]).  A pose step dp changes joint j's spring torque by about
        k_pos |J_lin,j| dp (k_rot |J_ang,j| for a rotation; k the largest of the law's three): the step is
        approached when that exceeds SHAPING_RATE_SHARE x the rate limit x SHAPING_STEP_TIME, and the
        approach's speeds keep k |J| v at half that share each (linear and angular).  Streamed poses
        (a 100 Hz stream of a path) move far less per message and are followed as sent.  None when
        shaping is off or no state has arrived."""
        if not self._p["setpoint_shaping"] or not self.have_state:
            return None
        law = self.law
        J = np.asarray(self.gravity_backend.frame_jacobian(self.q, law.frame), dtype=float)
        jl = float(np.max(np.linalg.norm(J[:3], axis=0)))
        ja = float(np.max(np.linalg.norm(J[3:], axis=0)))
        kp, kr = float(np.max(law.K[:3])), float(np.max(law.K[3:]))
        share = self.SHAPING_RATE_SHARE * float(np.min(self.safety.rate))
        big = 1e300
        tp = share / max(kp * jl, 1e-300) if kp > 0 else big
        tr = share / max(kr * ja, 1e-300) if kr > 0 else big
        return tp * self.SHAPING_STEP_TIME, tr * self.SHAPING_STEP_TIME, 0.5 * tp, 0.5 * tr

    def set_target_wrench(self, w, what="target_wrench", now=None):
        """cartesian_impedance: the feed-forward wrench [f; n] the robot exerts, base-frame axes."""
        if not self.cartesian:
            return self.reject_reference(what, f"{self.law_name} takes no wrench reference", now)
        try:
            w = np.array(w, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            return self.reject_reference(what, f"{what}: not numeric", now)
        if w.shape != (6,) or not np.all(np.isfinite(w)):
            return self.reject_reference(what, f"{what}: values must be 6 finite numbers", now)
        self.wrench_target = w
        self.pending_wrench = True
        return True, ""

    def set_wrench(self, raw, frame_id, now):
        """The F/T sensor's raw reading [f; n] in `frame_id` (ignored unless cartesian_impedance or
        sensor_frame is set: payload identification from the F/T sensor).  A non-finite one is counted
        (rejected.wrench) and not used: force control runs open loop."""
        if not self.cartesian and not self._p["sensor_frame"]:
            return
        w = np.array(raw, dtype=float).reshape(-1)       # a new array: a step may be reading the old
        if w.shape != (6,) or not np.all(np.isfinite(w)):
            self.counts["rejected.wrench"] += 1
            self.wrench_raw = None
            self._wrench_problem("non_finite", "NaN or Inf in the wrench" if w.shape == (6,)
                                 else f"{w.size} values, expected 6", now)
            return
        self.wrench_raw_frame = frame_id
        self.wrench_raw = w
        self.wrench_time = now

    def _wrench_problem(self, reason, detail, now):
        self._wrench_episode.occur(reason, now, "warn", lambda extra: (
            f"wrench on {self._wrench_label} not used ({reason}): {detail}; force control runs open "
            f"loop until a valid wrench arrives{extra}"))

    # ------------------------------------------------------------------ services
    def hold(self):
        """Hold the current position (pose) as the reference.  (ok, message)"""
        if not self.active or not self.have_state or self.watchdog != "ok":
            return False, "not active with a valid joint state"
        self.end_goal("aborted", INVALID_GOAL, "~/hold requested: holding the current position")
        self.pending_ref = None
        self.pose_target = None
        self.law.reset(self.state)
        self._abort_payload_run("hold requested", restore=False)
        return True, "holding q = " + str(np.round(self.q, 4).tolist())

    def tare(self):
        """Tare the wrench sensor with the current reading.  (ok, message)"""
        if not self.cartesian:
            return False, "no wrench processing (configure with cartesian_impedance)"
        if self.wrench_raw is None or not self.have_state:
            return False, "no wrench or joint state received yet"
        if self.wrench_proc is None:
            self.wrench_proc = self._make_wrench_processor(self._p["sensor_frame"] or self.wrench_raw_frame)
        self.wrench_proc.tare(self.wrench_raw, self.q)
        return True, "tared with " + str(np.round(self.wrench_raw, 3).tolist())

    # ------------------------------------------------------------------ payload identification
    def _payload_params(self, overrides=None):
        p = {k[len("payload_id."):]: v for k, v in self._p.items() if k.startswith("payload_id.")}
        p.update(overrides or {})
        return p

    def start_payload_id(self, now, overrides=None):
        """Start a payload identification run with the payload_id.* parameters (overrides: {key without
        the prefix: value}).  Returns at once (ok, message: what it will do, or why it cannot start);
        the run then advances with every step()."""
        from .runs.payload import PayloadRun
        try:
            run = PayloadRun(self, self._payload_params(overrides))
        except ValueError as e:
            return False, f"refused: {e}"
        self.end_goal("aborted", INVALID_GOAL, "a payload identification run started", hold=False)
        msg = run.start(now, self.state.t)
        self.payload_run = run
        self._log("info", f"payload identification {msg}")
        return True, msg

    def _abort_payload_run(self, reason, restore=True):
        """Abort whichever identification run (payload, dynamics) is moving the arm."""
        for run in (self.payload_run, self.dynamics_run):
            if run is not None and run.busy:
                run.abort(reason, restore=restore)

    def start_dynamics_id(self, now, overrides=None):
        """Start an identification of the arm's own dynamics with the dynamics_id.* parameters
        (overrides: {key without the prefix: value}).  Returns at once (ok, message)."""
        from .runs.dynamics import DynamicsRun
        p = {k[len("dynamics_id."):]: v for k, v in self._p.items() if k.startswith("dynamics_id.")}
        p.update(overrides or {})
        try:
            run = DynamicsRun(self, p)
        except ValueError as e:
            return False, f"refused: {e}"
        self.end_goal("aborted", INVALID_GOAL, "a dynamics identification run started", hold=False)
        msg = run.start(now, self.state.t)
        self.dynamics_run = run
        self._log("info" if not run.done else "warn", f"dynamics identification {msg}")
        return not run.done, msg

    @staticmethod
    def _cancel_run(run, what):
        if run is None or not run.busy or run.done:
            return False, f"no {what} running"
        run.abort("cancelled")
        return True, run.message

    @staticmethod
    def _run_status(run, what):
        if run is None:
            return False, f"no {what} run yet"
        return bool(run.ok), run.status()

    def dynamics_request(self, what, now):
        """The dynamics identification services of a node in one place: what = identify (start at
        `now`, the loop's clock), status or cancel.  (ok, message)"""
        if what == "identify":
            return self.start_dynamics_id(now)
        if what == "status":
            return self.dynamics_status()
        if what == "cancel":
            return self.cancel_dynamics_id()
        raise ValueError(f"dynamics identification: unknown request {what!r}")

    def cancel_dynamics_id(self):
        """Abort a running dynamics identification (nothing applied).  (ok, message)"""
        return self._cancel_run(self.dynamics_run, "dynamics identification")

    def dynamics_status(self):
        """(a result is available, the running state or the last result / failure)."""
        return self._run_status(self.dynamics_run, "dynamics identification")

    def cancel_payload_id(self):
        """Abort a running identification (the reference held before it is restored).  (ok, message)"""
        return self._cancel_run(self.payload_run, "identification")

    def payload_status(self):
        """(a result is available, the running state or the last result / failure)."""
        return self._run_status(self.payload_run, "identification")

    def attach_payload_estimate(self):
        """Attach the last estimate to the model (law, safety fallback and observer use it from the
        next step).  Refused when there is none, a run is going, or its mass std is above
        payload_id.max_mass_std of its mass.  (ok, message)"""
        run = self.payload_run
        if run is not None and run.busy and not run.done:
            return False, "an identification is running"
        est = run.estimate if run is not None else None
        if est is None:
            return False, "no estimate (run ~/identify_payload first)"
        rel = est.mass_std / est.mass
        if rel > self._p["payload_id.max_mass_std"]:
            return False, (f"mass std {est.mass_std:.4f} kg is {100 * rel:.1f} % of the mass, above "
                           f"payload_id.max_mass_std {self._p['payload_id.max_mass_std']}")
        try:
            with_inertia = est.attach(self.model, name=run.name)
        except ValueError as e:
            return False, str(e)
        self.payload_estimate = est
        return True, (f"attached {run.name!r}: {est.mass:.4f} kg at {np.round(est.com, 4).tolist()} m ({est.frame})"
                      + ("" if with_inertia else ", a point mass (no physical inertia estimate)"))

    def detach_payload_estimate(self):
        """Detach the payload named payload_id.name from the model.  (ok, message)"""
        run = self.payload_run
        if run is not None and run.busy and not run.done:
            return False, "an identification is running"
        name = self._p["payload_id.name"] or "payload"
        if name not in self.model.payloads:
            return False, f"no payload named {name!r} attached (attached: {sorted(self.model.payloads)})"
        self.model.detach_payload(name)
        return True, f"detached {name!r}"

    # ------------------------------------------------------------------ watchdog
    def check_watchdog(self, now):
        """Trip the watchdog if the state is stale (counts, logs).  True when the law must not run."""
        timeout = self._p["watchdog_timeout"]
        age = now - self.last_ok
        if self.have_state and age <= timeout and not self.latest_rejected:
            return False
        if self.watchdog == "waiting" and not self.have_state:
            if not self.waiting_logged:
                self.waiting_logged = True
                what = "zero torque (the safe command 'gravity' needs a joint state)" \
                    if self._p["safe_command"] == "gravity" else "the safe command (zero torque)"
                self._log("warn", f"no joint state received on {self._js_label} yet: publishing {what}")
            return True
        if age > timeout and (self.watchdog != "tripped" or not self._wd_episode.logged):
            rejecting = self._js_episode.reason
            last = f"; the last message was rejected ({rejecting})" if rejecting else ""
            self._trip(now, f"no valid joint state on {self._js_label} for {age:.3f} s (watchdog_timeout "
                            f"{timeout} s){last}")
        return True

    def _trip(self, now, why):
        """Trip (counted once per trip) and log, throttled; called again while tripped only to log a
        trip whose line was suppressed."""
        retry = self.watchdog == "tripped"
        if not retry:
            self.watchdog = "tripped"
            self.counts["watchdog_trips"] += 1
            self._trip_why = why
            self._act("watchdog_trip", now, why)
            self._tripped_since_reset = True
            self._reset_cause = "the watchdog was tripped (no valid joint state)"
            self._abort_payload_run("watchdog tripped")
            self.end_goal("aborted", INVALID_GOAL, f"watchdog tripped: {why}")
        self._wd_episode.occur("tripped", now, "error", lambda extra: (
            f"watchdog: {why}: publishing the safe command ({self._p['safe_command']}){extra}"), retry)

    REST_VELOCITY = 0.02           # rad/s (m/s): ~/resume leaves a joint speed stop with every joint below this

    def _overspeed(self, now):
        """A valid state with a joint above safety.joint_speed_stop x its velocity limit: the joint
        speed stop starts (counted as safety.joint_speed_stops, logged, identification runs end).  The
        law's command is not sent from here on: the arm is faster than anything it may ask for, the
        closed loop is not what the law was designed for (a diverging loop: gains too high for the
        delays, a model far from the arm, a stalled caller)."""
        y = np.multiply(self.v, self._inv_v_stop, out=self._v_abs)
        if y.dot(y) <= 1.0:                          # sufficient: every |v_j| within its threshold
            return False
        va = np.abs(self.v, out=self._v_abs)
        if not _any(va > self._v_stop):
            return False
        env = self.envelope
        if env.state in ("stopping", "stopped"):
            return False                             # the envelope's stop is on: it goes on
        j = int(np.argmax(va / self._v_stop))
        vl = float(np.asarray(self.model.velocity_limits, dtype=float)[j])
        f = self._p["safety.joint_speed_stop"]
        why = f"{self.model.joint_names[j]} at {self.v[j]:+.3f} rad/s, above {f:g} x its velocity limit {vl:g}"
        self.counts["safety.joint_speed_stops"] += 1
        self._act("joint_speed_stop", now, why)
        self._abort_payload_run("joint speed stop", restore=False)
        self.end_goal("aborted", INVALID_GOAL, f"joint speed stop: {why}")
        if env.enabled:
            # the envelope's stop (its damping, its repulsion: the frames stay on their side of the
            # planes while the arm stops), left by ~/resume as well
            env.stop(f"joint speed stop: {why}")
            self._log_throttled("speed_stop", "error", f"joint speed stop: {why}: the safety envelope's "
                                "stop from now on (damping to rest, then a hold); ~/resume to go on", now)
            return False
        self.speed_stop = why
        self._tripped_since_reset = True
        self._reset_cause = "the joint speed stop acted"
        self._log_throttled("speed_stop", "error", f"joint speed stop: {why}: the safe command "
                            f"({self._p['safe_command']}) with joint damping from now on; ~/resume once the "
                            "arm is at rest", now)
        return True

    STOP_RATE = 25.0               # 1/s: the joint speed stop's damping is at most this x M_ii per joint

    def _speed_stop_step(self, now):
        """One step of the joint speed stop: the safe command minus D v (D = safety.stop_damping, at
        most STOP_RATE M_ii per joint: a time constant M_ii / D of 40 ms at least, so the damping stays
        stable with the command applied late (v' = -(D/M) v(t - tau) is stable for (D/M) tau < pi/2:
        tau < 60 ms): a loop that diverged has likely done so from such delays.  On a Panda plant whose
        commands arrive 4, 5, 10 or 20 ms late a joint impedance at 400 N m/rad diverges; this stop
        brings it to rest at each; at 50 M_ii the 20 ms case did not come to rest, and at the
        envelope's 0.5 M_ii / period (stable without delay) the 4 ms case did not),
        rate-limited as the safe command is.  It lasts until resume() (the stop latches, as a
        Franka's reflex does: a loop that diverged once diverges again when the law takes over)."""
        return self.safe_step(now, damping=self._stop_damping() * self.v)

    def _stop_damping(self):
        """The stops' joint damping at the current q: safety.stop_damping, at most STOP_RATE M_ii."""
        M = self.gravity_backend.mass_matrix(self.q)
        return np.minimum(self._p["safety.stop_damping"], self.STOP_RATE * np.diagonal(M))

    # ------------------------------------------------------------------ the step
    def step(self, now, t=None):
        """One control cycle at `now`: (tau in model order, safe).  Never raises: an exception is
        counted (errors.control_step), logged (throttled) and answered with the safe command."""
        self._latest = now
        try:
            if not self.active:
                return self.safe_step(now), True
            if self.last_step is not None and now - self.last_step > self._p["watchdog_timeout"] \
                    and self.watchdog == "ok":
                self._trip(now, f"no control step for {now - self.last_step:.3f} s (watchdog_timeout "
                                f"{self._p['watchdog_timeout']} s)")
                return self.safe_step(now), True
            if self.check_watchdog(now):
                return self.safe_step(now), True
            if self._speed_on and (self.speed_stop or self._overspeed(now)):
                return self._speed_stop_step(now), True
            return self._control(now, now if t is None else t), False
        except Exception as e:                         # noqa: BLE001 (nothing may escape the loop)
            self.exception("control_step", e, now)
            try:
                return self.safe_step(now), True
            except Exception:                          # noqa: BLE001
                self.safe_out.fill(0.0)
                return self.safe_out, True

    def exception(self, where, e, now=None):
        """Count (errors.<where>) and log an exception, throttled per `where`."""
        self.counts[f"errors.{where}"] += 1
        self._log_throttled(f"errors.{where}", "error",
                            f"{where}: {type(e).__name__}: {e} (publishing the safe command)", now)

    FIRST_DT = 0.001               # s: a step's dt when nothing before it is known (activation, after a
                                   # safe ramp on a clock the caller did not report)

    def _control(self, now, t):
        """state -> law -> safety filter (the watchdog has passed)."""
        # One clock for the cycle: every stage's dt (the law's, the rate limit's, the ramps', the
        # envelope's timers, the energy tank's) is the period of the control clock `t` (the node's clock:
        # sim time under use_sim_time; the robot's time on the Franka).  Only the watchdog runs on
        # `now` (the steady clock: a dead driver is a wall-clock event).
        tc = now if t is None else t
        if self.last_t is not None:
            dt = min(max(tc - self.last_t, 1e-6), 0.1)
        elif self.last_ramp is not None:             # after safe-command steps (they run on `now`)
            dt = min(max(now - self.last_ramp, 1e-6), 0.1)
        else:
            dt = self.FIRST_DT
        self.last_t = tc
        self.last_ramp = None
        self.last_step = now
        # the rate limit counts from when the last command left, on the same clock: sent(now, t) from
        # the caller (the node: after each publish), else this step's time; after a safe-command ramp
        # with no sent() report, from the steady clock's record of it
        if self.last_sent_t is not None:
            dt_rate = min(max(tc - self.last_sent_t, 1e-6), 0.1)
        elif self.last_pub is not None:
            dt_rate = min(max(now - self.last_pub, 1e-6), 0.1)
        else:
            dt_rate = self.FIRST_DT
        self.last_pub = now
        self.last_sent_t = tc
        if self.watchdog != "ok":
            if self.watchdog == "tripped":
                self._wd_episode.end(lambda e: (
                    f"watchdog: fresh joint states again; holding the current position, ramping up "
                    f"over {self._p['ramp_time']} s"))
                self.safety.reset(start=self.safety.prev)     # ramp from the safe command sent
                self.need_reset = True
            self.watchdog = "ok"
        st = self.state
        st.t = t
        if self.need_reset:
            self._reset_law(now)
            self.need_reset = False
            self._obs_last = None                        # activation / after a trip: observer restarts
        if self.observer is not None:
            self._observe(now)
        if self.pending_ref is not None:
            ref, self.pending_ref = self.pending_ref, None
            try:
                self.law.set_reference(ref)
            except ValueError as e:
                self.reject_reference(self.pending_what, str(e), now)
                if self.goal is not None and self.goal.trajectory is ref:
                    self.end_goal("aborted", INVALID_GOAL, f"the law refused the trajectory: {e}")
        for run, what in ((self.payload_run, "payload_id"), (self.dynamics_run, "dynamics_id")):
            if run is not None and run.busy:
                try:
                    run.step(now, t)
                except Exception as e:                   # noqa: BLE001 (never the loop's problem)
                    self.exception(what, e, now)
                    run.abort(f"{type(e).__name__}: {e}")
        for run in (self.payload_run, self.dynamics_run):
            if run is not None and run.phase == "brake":     # an aborted run's way back starts so
                self.tau[:] = self.brake_step(now, dt_rate)
                self.total_steps += 1
                return self.tau
        if self.pending_wrench:
            self.pending_wrench = False
            self._apply_target_wrench()
        if self.cartesian and self.wrench_source == "observer":
            st.wrench = self.observer_wrench(t) if self._obs_last is not None else None
            st.wrench_frame = ""                         # observer.frame = the law's frame, its axes
        elif self.cartesian:
            self._process_wrench(now, dt)
        if hasattr(self.law, "v_nominal") and self.law.trajectory is not None and \
                (self.envelope._speed_on or self.law.time_scale != 1.0):
            self._time_scale(st, dt)                     # joint laws only (they carry v_nominal)
        if self.tank.target is not None:
            self._set_stiffness(self.tank.step(self._stiffness(), self.law._e))
        tau = self.law.compute(st)
        if self.goal is not None:
            self._check_goal(st)
        if self.cartesian and self.law.clipped:
            self._act("pose_error_clipped", now)
        if self.tank.capacity > 0:
            self.tank.refill(self.law.damping_power * dt)
        env_on = self.envelope.enabled
        if env_on:
            tau = self._envelope(tau, st, dt, now)
        fallback = self._safe_torque if self._p["safe_command"] == "gravity" else None
        # the rate limit from when the last command left, the start ramp by the step clock (the time
        # since the last command left leaves out each step's own duration: a busy loop ramped slower)
        prev = self.safety.prev
        tau = self.safety.apply(tau, st, dt_rate, fallback=fallback, ramp_dt=dt)
        if self.safety.reasons:
            for r in self.safety.reasons:
                if r not in QUIET_SAFETY:
                    self._act(f"safety.{r}", now)
        if env_on:
            tau = self._envelope_sent(tau, prev, dt_rate)
        self.tau[:] = tau
        self.safe_reached = False
        self.total_steps += 1
        return self.tau

    # ------------------------------------------------------------------ FollowJointTrajectory goal
    def _check_goal(self, st):
        """After the law: the goal's monitor on this step's measured state and reference (its path
        tolerance, its goal tolerance and time); a trajectory no longer followed ends the goal."""
        g, law = self.goal, self.law
        if g.done:
            self.goal = None
            return
        if law.trajectory is not g.trajectory:
            if self.pending_ref is not g.trajectory:       # replaced by something that did not say so
                self.end_goal("aborted", INVALID_GOAL, "the trajectory is no longer followed")
            return
        if g.check(law.trajectory_time(st.t), self.q, self.v, law.q_d, law.v_d):
            self._goal_ended(g, g.hold)

    def end_goal(self, status, code, message, hold=True):
        """End the running goal (if any) with status 'succeeded' | 'aborted' | 'canceled', its error
        code and reason; `hold`: the arm holds the current position (JTC's set_hold_position) when the
        goal's trajectory is being followed (not on a preemption: the new reference starts from the
        one followed, without a jump).  The caller (the node) reports the end."""
        g = self.goal
        if g is not None and g.end(status, code, message):
            self._goal_ended(g, hold)

    def cancel_goal(self, goal):
        """The client cancelled `goal`: it ends canceled and the arm holds where it is (JTC).  False if
        it had already ended."""
        if self.goal is not goal or goal.done:
            return False
        goal.end("canceled", SUCCESSFUL, "canceled: holding the current position")
        self._goal_ended(goal, True)
        return True

    def _goal_ended(self, g, hold):
        o = g.outcome
        self.goal = None
        self.counts[f"follow_joint_trajectory.{o.status}"] += 1
        self._log("info" if o.status == "succeeded" else "warn",
                  f"follow_joint_trajectory goal {o.status}: {o.message}")
        if o.status == "succeeded":
            return
        if self.pending_ref is g.trajectory:             # not started yet: never followed
            self.pending_ref = None
        elif hold and self.law.trajectory is g.trajectory and self.active and self.have_state:
            self.law.reset(self.state)                   # hold the current position

    def _envelope(self, tau, st, dt, now):
        """The Cartesian envelope on the law's command; a stop that starts here is logged, counted and
        ends any identification run."""
        env = self.envelope
        was = env.state
        tau = env.apply(tau, st.q, st.v, dt, self.law.gravity_enabled, self.safety.limit)
        if env.state == "stopping" and was not in ("stopping", "stopped"):
            self.counts["envelope.stops"] += 1
            self._log("error", f"safety envelope: {env.stop_reason}: stopping the arm (damping to rest, "
                               "then holding); ~/resume to go on")
            self._abort_payload_run("safety envelope stop", restore=False)
            self.end_goal("aborted", INVALID_GOAL, f"safety envelope stop: {env.stop_reason}")
        return tau

    def _envelope_sent(self, tau, prev, dt_rate):
        """The safety filter's output back within the envelope (SafetyEnvelope.enforce: the rate limit
        must not undo the envelope's correction); the filter then rate-limits the next command from the
        one sent.  A step where the envelope's correction moved the command by more than the rate limit
        allows is counted (envelope.rate_exceeded): there the envelope wins."""
        out = self.envelope.enforce(tau, self.safety.limit)
        if out is tau:
            return tau
        self.safety.hold(out)
        if prev is not None:
            step = self.safety.rate * min(dt_rate, self.safety._p.command_period)
            if np.any(np.abs(out - prev) > step * (1.0 + 1e-9) + 1e-12):
                self.envelope.counts["rate_exceeded"] = self.envelope.counts.get("rate_exceeded", 0) + 1
        return out

    TIME_SCALE_RATE = (20.0, 2.0)   # 1/s: how fast a trajectory's time scale may fall and rise

    def _time_scale(self, st, dt):
        """The safety envelope's time scaling of a joint law's trajectory: s -> the largest value in
        [0, 1] that keeps the reference's frame speeds (its nominal velocity, the last step's, at the
        measured q) at 0.9 x their limits, falling and rising at TIME_SCALE_RATE at most."""
        law = self.law
        target = 1.0
        if self._p["safety.time_scaling"] and self.envelope._speed_on and law.trajectory.started and \
                law.info.status != "trajectory done":
            ratio = self.envelope.reference_speed_ratio(st.q, law.v_nominal)
            if ratio > 0.9:
                target = 0.9 / ratio
        s = law.time_scale
        down, up = self.TIME_SCALE_RATE
        s_new = min(max(target, s - down * dt), s + up * dt, 1.0)
        law.time_scale_rate = (s_new - s) / dt if dt > 0 else 0.0
        law.time_scale = s_new

    def _stiffness(self):
        """The law's stiffness under the energy tank, one vector (joint impedance: k_gains, model order;
        Cartesian impedance: the six task.k_*)."""
        p = self.law.params
        return np.concatenate([np.atleast_1d(np.asarray(p[k], dtype=float)) for k in self._tank_keys])

    def _set_stiffness(self, k):
        keys = self._tank_keys
        if len(keys) == 1:
            self.law.set_params({keys[0]: np.broadcast_to(k, (self.n,)).tolist()})
        else:
            self.law.set_params({key: float(k[i]) for i, key in enumerate(keys)})

    def cartesian_goal(self, ref):
        """A CartesianReference (its pose) or CartesianTrajectory for a joint law -> a JointTrajectory
        through the inverse kinematics of `ik.frame` (control/ik_reference.py), seeded with the law's
        reference (the measured state before one).  ValueError with the reason (out of reach, a
        singular configuration, a branch jump; a law that takes no joint reference).  Costs up to
        100-200 ms for an unreachable pose: call it off the control path (the node does, on its
        executor, before taking its lock); it reads the loop's state without changing it."""
        from .ik_reference import IKReference
        if self.cartesian or self.law_name == "gravity_compensation":
            raise ValueError(f"{self.law_name}: the inverse kinematics is for the joint laws")
        frame = self._p["ik.frame"] or self.model.frame_names[-1]
        self.model.check_frame(frame)
        conv = getattr(self, "_ik_ref", None)
        a_max = float(np.min(self.law.approach_bounds()["max_acceleration"]))
        if conv is None or conv.frame != frame or conv.min_sv != self._p["ik.min_singular_value"] \
                or conv.a_max != a_max:
            conv = self._ik_ref = IKReference(self.model, frame, self._p["ik.min_singular_value"], a_max)
        q_d = getattr(self.law, "q_d", None)
        seed = np.array(q_d if q_d is not None and self.have_state else self.q, dtype=float)
        if isinstance(ref, CartesianTrajectory):
            return conv.trajectory(seed, ref)
        return conv.pose(seed, ref.R, ref.p)

    def resume(self, now=None):
        """Leave a joint speed stop or a safety-envelope stop: the law then holds the current position
        and the command ramps from the one sent (as after a watchdog trip).  Refused while a joint is
        faster than REST_VELOCITY (speed stop) or a frame is still outside or too fast (envelope)."""
        if self.speed_stop:
            vmax = float(np.max(np.abs(self.v)))
            if vmax >= self.REST_VELOCITY:
                return False, (f"joint speed stop ({self.speed_stop}): the arm is not at rest yet ("
                               f"{vmax:.3f} rad/s, at rest below {self.REST_VELOCITY})")
            self._log("info", f"joint speed stop: resumed ({self.speed_stop} before); holding the "
                              "current position")
            self.speed_stop = ""
            self.need_reset = True
            self.safety.reset(start=self.safety.prev)
            if self.envelope.state not in ("stopping", "stopped"):
                return True, "resumed from the joint speed stop"
        ok, why = self.envelope.resume()
        if ok:
            self.need_reset = True
            self.safety.reset(start=self.safety.prev)
            self._log("info", "safety envelope: resumed; holding the current position")
        return ok, why

    def _reset_law(self, now):
        """Activation, or the first step after a watchdog trip: the law holds the current position.
        After a trip, what it was following or was handed meanwhile is not followed (the arm may be
        anywhere by now): a pending reference is rejected with that reason (counted as
        rejected.<what>, logged), an abandoned trajectory is logged and counted.  After activation a
        reference that came before the first valid state is followed from it."""
        law = self.law
        tripped, self._tripped_since_reset = self._tripped_since_reset, False
        tr = getattr(law, "trajectory", None)
        if tripped and tr is not None and getattr(tr, "started", False) and not tr.done(self.state.t):
            self.counts["abandoned.trajectory"] += 1
            self._log_throttled("ref.abandoned", "warn", f"the trajectory being followed is abandoned ("
                                f"{self._reset_cause}); holding the current position (send it again)", now)
        law.reset(self.state)
        if tripped and self.pending_ref is not None:
            if self.goal is not None and self.goal.trajectory is self.pending_ref:
                self.end_goal("aborted", INVALID_GOAL, f"arrived while {self._reset_cause}: not followed",
                              hold=False)
            what, self.pending_ref = self.pending_what, None
            self.reject_reference(what, f"arrived while {self._reset_cause}: not followed; the arm holds its "
                                  "position, send it again", now)

    def sent(self, now, t=None):
        """The command of the last step left at `now` (steady clock) and `t` (the control clock, when
        the caller has it): the rate limit's dt counts from there."""
        self.last_pub = now
        if t is not None:
            self.last_sent_t = t

    def _apply_target_wrench(self):
        if getattr(self.law, "trajectory", None) is not None:   # a Cartesian trajectory goes on
            self.law.set_wrench_reference(self.wrench_target)
            return
        if self.pose_target is None:                     # keep the pose being held
            ref = self.law.info.reference
            if ref is None or len(ref) != 7:
                return
            self.pose_target = (_quat_to_matrix(*ref[3:7]), np.array(ref[:3]))
        self.law.set_reference(CartesianReference(self.pose_target[0], self.pose_target[1],
                                                  wrench=self.wrench_target))

    def _process_wrench(self, now, dt):
        """The latest raw wrench -> State.wrench (tare, tool weight, filter, frame change)."""
        st = self.state
        if self.wrench_raw is None:
            st.wrench = None
            return
        age = now - self.wrench_time
        timeout = self._p["watchdog_timeout"]
        if age > timeout:                                # the sensor went silent
            if self._wrench_episode.reason != "stale":
                self.counts["rejected.wrench"] += 1
            self._wrench_problem("stale", f"no wrench for {age:.3f} s (watchdog_timeout {timeout} s)", now)
            st.wrench = None
            return
        frame = self._p["sensor_frame"] or self.wrench_raw_frame
        if self.wrench_proc is None or self.wrench_proc.sensor_frame != frame:
            if self.wrench_frame_error == frame:
                st.wrench = None
                return
            try:
                self.wrench_proc = self._make_wrench_processor(frame)
            except ValueError as e:
                self.wrench_frame_error = frame
                self.counts["rejected.wrench"] += 1
                self._wrench_problem("unknown_frame", f"sensor frame {frame!r}: {e}", now)
                st.wrench = None
                return
        if self._wrench_episode.reason:
            self._wrench_episode.end(lambda e: f"wrench on {self._wrench_label} valid again "
                                                    f"({e.reason} before)")
        st.wrench = self.wrench_proc.process(self.wrench_raw, st.q, dt)
        st.wrench_frame = self.wrench_proc.frame

    # ------------------------------------------------------------------ the safe command
    def _safe_torque(self):
        """The safe command in model order: zero, or g(q) at the last valid q, clipped to the limits."""
        if self._p["safe_command"] == "gravity" and self.have_state:
            self.safe[:] = self.gravity_backend.gravity(self.q)
            np.clip(self.safe, -self.safety.limit, self.safety.limit, out=self.safe)
        else:
            self.safe.fill(0.0)
        return self.safe

    def safe_step(self, now, damping=None):
        """One step of the safe command: from the last command sent toward the safe torque at the
        torque-rate limit, never more than rate x one control period per step (so a Franka-style rate
        check never sees a discontinuity).  Sets `safe_reached` once the command equals the safe
        torque.  `damping`: a torque subtracted from the safe torque (D v of a stop; the target is
        clipped to the effort limits).  Returns the command (model order)."""
        target = self._safe_torque()
        if damping is not None:
            target -= damping
            np.clip(target, -self.safety.limit, self.safety.limit, out=target)
        return self._ramp_to(target, now)

    def brake_step(self, now, dt=None):
        """One step of an identification run's brake (its way back starts with it: payload_run.needs_brake):
        g(q) when the law compensates gravity (else zero) minus D v, D as the joint speed stop's (at most
        STOP_RATE M_ii: stable with late commands, where a saturated joint law on a rate-limited command
        is not), through the safety envelope when it is on, clipped to the effort limits and rate-limited
        as the safe command.  The run ends it (payload_run.brake_done).  `dt`: the time since the last
        command left (default: as safe_step)."""
        target = self.gravity_backend.gravity(self.q) if self.law.gravity_enabled else np.zeros(self.n)
        target = target - self._stop_damping() * self.v
        if self.envelope.enabled:                        # its planes hold during the brake as well
            target = self._envelope(target, self.state, self.period if dt is None else dt, now)
        np.clip(target, -self.safety.limit, self.safety.limit, out=target)
        return self._ramp_to(target, now, dt)

    def _ramp_to(self, target, now, dt=None):
        """The command from the last one sent toward `target` at the torque-rate limit (see safe_step)."""
        prev = self.safety.prev
        tau = self.safe_out
        if prev is None:                                 # nothing sent yet: the drive holds zero
            prev = self._zero
        if dt is None:
            dt = self.period if self.last_pub is None else min(max(now - self.last_pub, 0.0), self.period)
        dt = min(dt, self.period)
        step = self.safety.rate * dt
        d = target - prev
        np.clip(d, -step, step, out=tau)
        tau += prev
        within = np.abs(d) <= step
        np.copyto(tau, target, where=within)             # exactly the target once within reach
        self.safe_reached = bool(within.all())
        self.safe_published += 1
        # the safe command bypasses the safety filter: the next filtered command must move from it at
        # the rate limit (not jump back to the last filtered one)
        self.safety.hold(tau)
        self.last_step = now
        self.last_t = None                               # the law's next step counts from here
        self.last_ramp = now
        self.last_pub = now
        self.last_sent_t = None                          # (the caller's sent(now, t) sets it)
        if self.observer is not None:
            self._obs_last = None                        # the applied torque left the law: restart
        return tau

    def safe_ramp_time(self):
        """Upper bound [s] of the ramp from any command to the safe one (the limit span / rate)."""
        return float(np.max(2.0 * self.safety.limit / np.maximum(self.safety.rate, 1e-9)))

    # ------------------------------------------------------------------ monitoring
    @property
    def info(self):
        return self.law.info

    def diagnostics(self):
        """(level, message, [(key, value text), ...]) of the loop."""
        kv = [("steps_total", str(self.total_steps)), ("safe_commands_total", str(self.safe_published)),
              ("watchdog", self.watchdog if self.active else "inactive"),
              ("watchdog_trips", str(self.counts["watchdog_trips"])),
              ("joint_speed_stops", str(self.counts.get("safety.joint_speed_stops", 0)))]
        for k, val in sorted(dict(getattr(self.safety, "counts", {})).items()):
            kv.append((f"safety.{k}", str(val)))
        reasons = getattr(self.safety, "reasons", None)
        if reasons:
            kv.append(("safety.last_reasons", ",".join(map(str, reasons))))
        if self.observer is not None:
            kv += [("observer.collision", str(self.observer.collision)),
                   ("observer.collisions", str(self.counts["observer.collisions"])),
                   ("observer.max_abs_r", f"{float(np.max(np.abs(self.observer.r))):.3f}")]
        run = self.payload_run
        if run is not None:
            kv.append(("payload_id.state", run.status()))
            if run.estimate is not None:
                kv.append(("payload_id.result", run.result_text()))
        if self.dynamics_run is not None:
            kv.append(("dynamics_id.state", self.dynamics_run.status()))
        if self.tank.capacity > 0:
            kv += [("tank.level", f"{self.tank.level:.4f}"), ("tank.paid", f"{self.tank.paid:.4f}"),
                   ("tank.change_pending", str(self.tank.target is not None))]
        env = self.envelope
        if env.enabled:
            kv += [("envelope.state", env.state), ("envelope.stops", str(env.counts.get("stops", 0))),
                   ("envelope.min_clearance", f"{env.min_clearance:.4f}"),
                   ("envelope.speed_ratio", f"{env.speed_ratio:.3f}")]
            kv += [(f"envelope.{k}", str(n)) for k, n in sorted(env.counts.items()) if k != "stops"]
        # what the safety layer did: counts in all, since the previous call, the newest action
        acts = self._acts.copy()                   # (atomic: the control thread may add a key)
        since = {k: a[0] - self._acts_reported.get(k, 0) for k, a in acts.items()
                 if a[0] != self._acts_reported.get(k, 0)}
        self._acts_reported = {k: a[0] for k, a in acts.items()}
        kv += [(f"acted.{k}", str(a[0])) for k, a in sorted(acts.items())]
        last = self._last_act
        if last is not None:
            kv.append(("acted.last", f"{last[0]}{': ' + last[1] if last[1] else ''}"))
        if not self.active:
            return OK, "inactive", kv
        trips = self.counts["watchdog_trips"]
        if self.watchdog == "tripped":
            return ERROR, (f"watchdog tripped ({trips} trip{'s' if trips != 1 else ''}): {self._trip_why}; "
                           f"publishing the safe command"), kv
        if self.speed_stop:
            n = self.counts.get("safety.joint_speed_stops", 0)
            return ERROR, (f"joint speed stop ({n} in all): {self.speed_stop}; damping to rest; ~/resume to "
                           f"go on"), kv
        if env.state in ("stopping", "stopped"):
            return ERROR, (f"safety envelope stop ({env.state}, {env.counts.get('stops', 0)} in all): "
                           f"{env.stop_reason}; ~/resume to go on"), kv
        if self.watchdog == "waiting":
            return WARN, "waiting for joint states", kv
        if self._js_episode.reason:
            return WARN, f"rejecting joint states ({self._js_episode.reason})", kv
        recent = last is not None and self._latest is not None and self._latest - last[2] <= ACT_HOLD
        if since or recent:
            what = ", ".join(f"{k} x{n}" for k, n in sorted(since.items(), key=lambda kn: -kn[1])) \
                or "nothing new"
            detail = f": {last[1]}" if last[1] else ""
            return WARN, (f"safety acting (since the last report: {what}); last: {last[0]}{detail}")[:400], kv
        return OK, "active", kv

    @property
    def rejecting(self):
        """The reason of the current joint-state rejection episode, or ""."""
        return self._js_episode.reason
