"""The control loop every front end drives: the composition of the cycle's stages.  No ROS.

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
    loop.activate(now);  loop.deactivate()  # start (the law holds the first valid state, the safety
                                            # filter ramps from the last command sent) / stop (step()
                                            # returns the safe-command ramp; loop.output.safe_reached)
    loop.update_state(q, v, now, stamp=None, effort=None)   # a valid measurement (model order)
    loop.reject_state(reason, detail, now)  # an invalid one (counted; the safe command follows)
    ok, reason = loop.set_reference(ref)    # JointReference | JointTrajectory | CartesianReference |
                                            # CartesianTrajectory, applied at the next cycle
    tau, safe = loop.step(now, t=None)      # one cycle; tau in model order (a preallocated array, valid
                                            # until the next call); never raises
    loop.sent(now, t)                       # when the command left (the rate limit counts from there)
    ok, msg = loop.hold();  ok, msg = loop.resume(now)
    level, message, kv = loop.diagnostics() # level 0 ok, 1 warn, 2 error; kv [(key, text), ...]
    loop.counts, loop.info                  # exact counters; the law's reference / error (~/state)
    # the stages, for what belongs to one of them:
    loop.supervisor    # watchdog, stale / rejected states, the joint speed stop   (stages/supervisor.py)
    loop.references    # targets, goals, IK, set-point shaping, the feed-forward wrench (stages/references.py)
    loop.estimation    # the momentum observer, the F/T wrench: set_wrench, tare (stages/estimation.py)
    loop.runs          # payload / dynamics identification: start_payload_id, ... (runs/stage.py)
    loop.output        # the safe command and its ramp (stages/output.py)
    loop.safety, loop.envelope, loop.tank   # the safety filter, the envelope, the energy tank

One cycle, in this order (step): supervisor (may the law run?) -> clock (dt on the control clock) ->
references (the pending one to the law) -> runs (may take over: their brake) -> estimation (observer,
wrench) -> time scaling -> shaping (the tank sets the stiffness) -> law -> goal check -> envelope ->
safety filter -> envelope again (what the filter sent back within the rows) -> output.  The stages share
one preallocated cycle record (stages/cycle.py: state, clock, command, ramps) and talk back only through
the loop's ports: `stop` (a trip or a stop: identification runs abort, a goal ends), `collision` (the
observer's reaction), `abort_runs`, `end_goal`.

Two clocks, each with one job.  `t` is the control clock (the node's ROS clock: sim time under
use_sim_time; the robot's time on the Franka; default `now`): the laws' time and every stage's dt, so a
lockstep plant run faster or slower than real time gets the same commands (test_setpoint_shaping.py).
`now` is the steady clock [s] (monotonic, from the caller): only the watchdog, the log throttling and the
safe-command ramp run on it.
"""
from ..dynamics import make_backend
from .laws.base import check_vector
from .laws.friction import NOISE_DEADZONE
from .loop_params import LoopParams
from .runs.stage import Runs
from .stages.cycle import MAX_DT as MAX_HOLD, Cycle   # a hold longer than MAX_DT counts as MAX_DT
from .stages.envelope import EnvelopeStage
from .stages.estimation import Estimation
from .stages.output import Output
from .stages.references import References
from .stages.report import ERROR, OK, QUIET_SAFETY, WARN, Report
from .stages.safety import SafetyFilter, SafetyParams
from .stages.shaping import TankStage
from .stages.supervisor import Supervisor
from .trajectory_goal import INVALID_GOAL

import numpy as np


class ControlLoop:
    """See the module docstring."""

    GAIN_OMEGA_DT = 0.5            # a live gain's natural frequency x the control period at most this
    MIN_DAMPING_RATIO = 0.1        # a live damping ratio at least this (a spring without damping, one
                                   # cycle late, is unstable at any stiffness)
    HOLD_DECAY = 1.0               # s: the hold estimate forgets a long hold with this time constant
    HOLD_FREE = 1.5                # holds up to this x the period leave the law's gains alone

    @classmethod
    def from_params(cls, model, params=None, log=None, counts=None, labels=None):
        """Build from a flat parameter dict (see the module docstring).  `counts`: a dict-like counter
        to share (the node's, which lives across reconfigurations); `labels`: names of the inputs used
        in log lines, {'joint_states': '/joint_states', 'wrench': '/ft_sensor/wrench'}.  The loop takes
        `model` as its own: the `armature` parameter is set on it (and payloads are attached to it), so
        build each loop its own model (the nodes do; a test that shares one between loops copies it)."""
        return cls(model, params, log, counts, labels)

    def __init__(self, model, params=None, log=None, counts=None, labels=None):
        m = self.model = model
        self._params = LoopParams(params, model.nv)
        p = self._p = self._params.p
        self.report = Report(log, counts, p["log_throttle_period"])
        self.counts = self.report.counts
        if m.floating_base:
            raise ValueError("a floating-base model; the controller needs a fixed base")
        if m.nq != m.nv:
            raise ValueError(f"nq {m.nq} != nv {m.nv} (unsupported joint types)")
        mn = list(m.joint_names)
        self.joints = self._params.joints or mn
        if sorted(self.joints) != sorted(mn):
            raise ValueError(f"joints {self.joints} do not match the model's movable joints {mn}")
        n = self.n = m.nv
        self.perm = np.array([mn.index(j) for j in self.joints], dtype=np.intp)   # cmd[k] = tau[perm[k]]
        self._params.bind(self.perm)
        if p["armature"] is not None:                                             # joints -> model order
            arm = np.zeros(n)
            arm[self.perm] = check_vector("armature", p["armature"], n)
            m.set_armature(arm)
        self.backend = make_backend(m, p["backend"])
        self.gravity_backend = make_backend(m, "pinocchio")                     # for the safe command
        self.law_name = p["controller"]
        from . import make_law
        try:
            self.law = make_law(self.law_name, m, self.backend, self._params.law_params(self.law_name))
        except ValueError as e:
            raise ValueError(f"{self.law_name} parameters: {e}") from None
        self.cartesian = self.law_name == "cartesian_impedance"
        self.period = 1.0 / p["update_rate"]
        c = self.cycle = Cycle(n)
        self.q, self.v, self.state, self.tau = c.q, c.v, c.state, c.tau          # (the record's arrays)
        self.safety = SafetyFilter(m, self._params.safety_params(self.period, SafetyParams.__dataclass_fields__))
        self._envelope = EnvelopeStage(m, self._params.envelope_params(), self.safety, self.report, self._stop)
        self.envelope = self._envelope.env
        self._tank = TankStage(self.law, p["safety.tank_capacity"])
        self.tank = self._tank.tank
        self.runs = Runs(self, self._end_goal_for_run)
        self.supervisor = Supervisor(m, p, self.report, c, self.gravity_backend, self._stop, labels)
        self.references = References(m, self.law, p, self.report, c, self.safety, self.gravity_backend,
                                     self.runs.abort)
        self.estimation = Estimation(m, self.law, self.backend, self.gravity_backend, p, self.report, c,
                                     self._collision, self._params.to_model_order, labels)
        self.observer = self.estimation.observer
        self.output = Output(m, p, self.safety, self.gravity_backend, c, self.period)
        dag = p["observer.driver_adds_gravity"]
        self.driver_adds_gravity = (not self.law.params.get("compensate_gravity", True)) if dag == "auto" \
            else dag == "true"
        self.active = False
        self.need_reset = True                     # the law holds the current position at the next step
        self.total_steps = 0
        self.hold_time = self.period                    # s: how long a command is held (hold_omega)
        self.hold_longest = 0.0                    # s: the longest hold seen (diagnostics)
        self._deadzone_logged = 0.0                # N m: the stiction dead zone last logged (_noisy_wrench)
        self._hold_t = None                        # the control clock at the last step
        self._damped_ramp = False                  # the ramp after a trip / stop starts from a damped hold
        # the inputs go straight to the supervisor (no extra call per state): update_state(q, v, now,
        # stamp=None, effort=None), a valid state in model order (copied); reject_state(reason, detail,
        # now), an invalid one (counted, logged throttled; the next step sends the safe command)
        self.update_state = self.supervisor.update_state
        self.reject_state = self.supervisor.reject_state

    # ------------------------------------------------------------------ parameters
    @property
    def params(self):
        """The loop's current parameter values (a copy; law and safety values as last set)."""
        return dict(self._p)

    def param(self, name):
        """One parameter's current value (no copy of the table: for a per-step read)."""
        return self._p[name]

    def _gain_problem(self):
        """'' or why the law's gains (just changed live) are more than the sampling and the arm's inertia
        allow at the last valid q: a stiffness k on an inertia m oscillates at sqrt(k / m); at more than
        GAIN_OMEGA_DT / period rad/s a 1 kHz loop with one cycle of delay is near its stability edge (each
        law states its bound: ControlLaw.gain_problem), and a damping ratio below MIN_DAMPING_RATIO."""
        law = self.law
        key = law.damping_ratio_key
        if key is not None:
            z = law.param(key[0])
            if z is not None and z < self.MIN_DAMPING_RATIO and (key[1] is None or law.param(key[1]) is None):
                return (f"{self.law_name}.{key[0]}: {z:g} is below {self.MIN_DAMPING_RATIO} (an undamped spring "
                        "one cycle late is unstable): refused")
        w2 = (self.GAIN_OMEGA_DT / self.period) ** 2
        how = f"(GAIN_OMEGA_DT {self.GAIN_OMEGA_DT} / period {self.period:g} s)^2"
        gb, q = self.gravity_backend, self.q
        M = np.asarray(gb.mass_matrix(q), dtype=float)
        return law.gain_problem(M, lambda f: gb.frame_jacobian(q, f, "local_world_aligned"), w2, how)

    def set_params(self, params):
        """Live changes {name: value} (per-joint values in `joints` order).  All-or-nothing: on any bad
        value nothing changes.  Keys of other laws are validated only; keys that are not loop
        parameters are ignored; parameters read at construction only ('controller', 'joints',
        'backend', 'update_rate', the wrench processing) are rejected.  Returns (ok, reason)."""
        errors, law_updates, safety_updates, envelope_updates, plain = self._params.sort(params, self.law_name)
        if errors:
            return False, "; ".join(errors)
        old_safety, old_envelope = self.safety.params, self.envelope.params
        try:
            if envelope_updates:
                self.envelope.set_params(envelope_updates)
            if "observer.threshold" in plain or "observer.release" in plain:
                self.estimation.set_threshold(plain.get("observer.threshold", self._p["observer.threshold"]),
                                              plain.get("observer.release", self._p["observer.release"]))
            if safety_updates:
                self.safety.set_params(safety_updates)
            if law_updates:
                tank = self._tank.touches(law_updates)
                k_now = self._tank.stiffness() if tank else None
                old_law = self.law.params
                self.law.set_params(law_updates)               # validated whole
                problem = self._gain_problem()
                if problem:
                    self.law.set_params(old_law)
                    raise ValueError(problem)
                if tank:                                       # the stiffness: through the tank
                    self._tank.asked(k_now)
        except ValueError as e:
            self.safety.set_params(old_safety)
            self.envelope.set_params(old_envelope)
            return False, str(e)
        self._p.update(plain)
        if "safety.tank_capacity" in plain:
            self._tank.set_capacity(plain["safety.tank_capacity"])
        if "log_throttle_period" in plain:
            self.report.throttle.period = float(plain["log_throttle_period"])
        if "safety.joint_speed_stop" in plain:
            self.supervisor.speed_limits()
        return True, ""

    # ------------------------------------------------------------------ lifecycle and inputs
    def activate(self, now=None):
        """Start commanding: the law holds the first valid state; the safety filter ramps from the
        last command sent (the safe command of a previous deactivate, else zero)."""
        self.need_reset = True
        self.safety.reset(start=self.safety.prev)
        self.supervisor.activate()
        self.cycle.restart()
        self.hold_time, self._hold_t = self.period, None
        self._deadzone_logged = 0.0
        self.output.safe_reached = False
        self.active = True

    def deactivate(self):
        """Stop commanding: from now on step() returns the ramp to the safe command (output.safe_reached
        says when it has arrived).  An identification run aborts."""
        self.active = False
        self.runs.abort("deactivated")
        self.references.end_goal("aborted", INVALID_GOAL, "the controller was deactivated", hold=False)

    def set_reference(self, ref, what="reference", now=None, goal=None):
        """A new reference, applied at the next step (stages/references.py); `goal`: the GoalMonitor of the
        FollowJointTrajectory goal whose trajectory `ref` is.  Refused while inactive.  (ok, reason)"""
        if not self.active:
            return self.references.reject(what, "the controller is not active", now)
        return self.references.set(ref, what, now, goal)

    def hold(self):
        """Hold the current position (pose) as the reference.  (ok, message)"""
        if not self.active or not self.cycle.have_state or self.supervisor.watchdog != "ok":
            return False, "not active with a valid joint state"
        self.references.end_goal("aborted", INVALID_GOAL, "~/hold requested: holding the current position")
        self.references.hold()
        self.runs.abort("hold requested", restore=False)
        return True, "holding q = " + str(np.round(self.q, 4).tolist())

    def resume(self, now=None):
        """Leave a joint speed stop or a safety-envelope stop: the law then holds the current position
        and the command ramps from the one sent (as after a watchdog trip)."""
        left = self.supervisor.resume_speed_stop()
        if left is not None:
            if not left[0]:
                return left
            self._restart_law()
            if not self.envelope.stopping:
                return True, "resumed from the joint speed stop"
        ok, why = self.envelope.resume()
        if ok:
            self._restart_law()
            self.report.log("info", "safety envelope: resumed; holding the current position")
        return ok, why

    def _restart_law(self):
        """The law comes back (after a watchdog trip, a speed stop, the envelope's stop): it holds where the
        arm is, ramped in from a damped hold that follows the state (damped_ramp)."""
        self.need_reset = True
        self.safety.reset(start=self.safety.prev)
        self._damped_ramp = True

    def damped_ramp(self):
        """While the start ramp after a trip or a stop runs, the torque it ramps from is the safe command
        with the stops' damping at the current state, g(q) - D v (D: supervisor.stop_damping, within the
        hold bound), not the torque last sent: a ramp from a frozen torque leaves a moving arm undamped
        (its weight held at an old pose, the law's damping ramped down) for ramp_time, and on a starved
        host whose stalls trip the watchdog again and again that coasting grew to 20-190x the velocity
        limits (test_hold_bound.py)."""
        sf = self.safety
        if not sf.ramping:
            self._damped_ramp = False
            return
        start = self.output.safe_torque() - self.supervisor.stop_damping() * self.v
        np.clip(start, -sf.limit, sf.limit, out=sf.start)

    # ------------------------------------------------------------------ the ports stages raise
    def _stop(self, run_reason, goal_message, restore):
        """A trip or a stop started: identification runs abort, the goal followed ends."""
        self.runs.abort(run_reason, restore=restore)
        self.references.end_goal("aborted", INVALID_GOAL, goal_message)

    def _collision(self, hold):
        """The observer flagged a collision (hold: observer.on_collision 'hold')."""
        if hold:
            self.references.hold()
        if self.runs.busy:
            self.runs.abort("collision", restore=False)           # holds where it is
            self.law.reset(self.state)

    def _end_goal_for_run(self, message):
        self.references.end_goal("aborted", INVALID_GOAL, message, hold=False)

    # ------------------------------------------------------------------ the cycle
    def step(self, now, t=None):
        """One control cycle at `now`: (tau in model order, safe).  Never raises: an exception is
        counted (errors.control_step), logged (throttled) and answered with the safe command."""
        self.report.latest = now
        sup, out, cyc = self.supervisor, self.output, self.cycle
        last_pub = cyc.last_pub                          # when the last command left (see except)
        try:
            st = cyc.stamp                               # the plant's time of the state, when it has one
            tc = st if st is not None else (now if t is None else t)
            self.hold_omega(tc)
            self._hold_t = None                          # (set again below by a step with feedback)
            if not self.active or sup.stalled(now) or sup.check_watchdog(now):
                return out.safe_step(now), True
            self._hold_t = tc
            tc = now if t is None else t
            if sup.speed_watched and (sup.speed_stop or sup.overspeed(now, self.envelope)):
                return out.safe_step(now, damping=sup.stop_damping() * self.v), True
            return self._control(now, tc), False
        except Exception as e:                         # noqa: BLE001 (nothing may escape the loop)
            self.report.exception("control_step", e, now)
            try:
                # the cycle may have counted this step as sent (tick): the safe ramp's dt counts from
                # the command that did leave, or it would be 0 and the last torque held while the law
                # keeps failing on fresh states (no watchdog trips then)
                cyc.last_pub = last_pub
                return out.safe_step(now), True
            except Exception:                          # noqa: BLE001
                out.safe_out.fill(0.0)
                return out.safe_out, True

    def _control(self, now, t):
        """The law's cycle (the supervisor has passed), the stages in their order."""
        c, refs = self.cycle, self.references
        c.tick(now, t)
        if self.supervisor.fresh():                      # after a trip: ramp from the safe command sent
            self._restart_law()
        if self.need_reset:
            refs.reset_law(now, *self.supervisor.take_reset())
            self.need_reset = False
            self.estimation.restart()                    # activation / after a trip: observer restarts
        if self._damped_ramp:
            self.damped_ramp()
        # (each stage called when it has something to do: the guards are the stages' own public state)
        if self.observer is not None:
            self.estimation.observe(now)
        if refs.pending is not None:
            refs.apply(now)
        runs = self.runs
        if (runs.payload is not None or runs.dynamics is not None) and runs.step(now, t):
            c.tau[:] = self.brake_step(now, c.dt_rate)   # an aborted run's way back starts with its brake
            self.total_steps += 1
            return c.tau
        law = self.law
        if self.estimation.link_torque:
            self.estimation.measure_link_torque(now)
        if self.cartesian:
            if refs.pending_wrench:
                refs.apply_wrench()
            self.estimation.measure_wrench(now, t, c.dt)
        elif law.time_scalable and law.trajectory is not None:
            refs.scale_time(self.envelope, c.dt)
        tank = self._tank
        if tank.on:
            tank.before_law()
        tau = law.compute(c.state)
        if law.capped:
            self._capped(now)
        if law.friction.noisy and law.friction.sensed:
            self._noisy_wrench(now)
        if refs.goal is not None:
            refs.check_goal()
        if law.clipped:
            self.report.act("pose_error_clipped", now)
        if tank.on:
            tank.after_law(c.dt)
        env_on = self.envelope.enabled
        if env_on:
            tau = self._envelope.apply(tau, c.state, c.dt, self.law.gravity_enabled)
        fallback = self.output.safe_torque if self._p["safe_command"] == "gravity" else None
        # the rate limit from when the last command left, the start ramp by the step clock (the time since
        # the last command left leaves out each step's own duration: a busy loop ramped slower)
        prev = self.safety.prev
        tau = self.safety.apply(tau, c.state, c.dt_rate, fallback=fallback, ramp_dt=c.dt)
        for r in self.safety.reasons or ():
            if r not in QUIET_SAFETY:
                self.report.act(f"safety.{r}", now)
        if env_on:
            tau = self._envelope.enforce(tau, prev, c.dt_rate)
        c.tau[:] = tau
        self.output.safe_reached = False
        self.total_steps += 1
        return c.tau

    def hold_omega(self, tc):
        """The hold bound, measured at every step (`tc`: the stamp of the state stepped on, the plant's own
        time, else the control clock: under sim time a starved executor advances the ROS clock in jumps
        of tens of ms while the states, stamped by the plant, came 1 ms apart).  A command stays on the arm
        until the next one (a driver's zero-order hold), and a starved host holds it for many periods: a
        joint of natural frequency w, critically damped, held for T is unstable once w T > 1 (its damping
        torque, held, reverses the joint's speed and grows it: b = 2 w T > 2 in the sampled loop), which a
        light wrist (the UR5e's wrist 3: k 50 N m/rad on 0.017 kg m^2, w 54 rad/s) reaches at an 18 ms
        stall.  So the law's feedback is slowed to w <= GAIN_OMEGA_DT / T_hold (law.omega_cap), the
        joint-limit repulsion's stiffness to M_jj w^2 (safety.stiffness_cap) and every stop's damping rate
        to 2 w (supervisor.damping_rate_cap), T_hold the longest recent time between two steps (forgotten
        with HOLD_DECAY), as the live gains are bounded by the period: the sampled loop keeps b <= 1 and
        a = (w T)^2 <= 1/4.  Holds up to HOLD_FREE periods leave everything alone.  Only a command with
        feedback in it (the law's, a stop's damping) counts as held: the time after a safe command (no
        state, a stale one: republished every 50 ms by the node) is not measured, so a driver that stopped
        publishing for a while does not leave the law slowed when it comes back."""
        last = self._hold_t
        h = self.hold_time
        if last is not None:
            dt = tc - last
            if dt > 0.0:
                h -= h * min(dt / self.HOLD_DECAY, 1.0)
                if dt > h:
                    h = min(dt, MAX_HOLD)
                    if h > self.hold_longest:
                        self.hold_longest = h
        if h < self.period:
            h = self.period
        self.hold_time = h
        if h > self.HOLD_FREE * self.period and self._p["hold_bound"]:
            w = self.GAIN_OMEGA_DT / h
            self.law.omega_cap = w
            self.supervisor.damping_rate_cap = 2.0 * w
            self.safety.stiffness_cap = w * w * np.diagonal(self.gravity_backend.mass_matrix(self.q)) \
                if self.safety.repels else None
        elif self.law.omega_cap != np.inf:
            self.law.omega_cap = self.supervisor.damping_rate_cap = np.inf
            self.safety.stiffness_cap = None

    def _capped(self, now):
        """The hold bound slowed some of the law's feedback this step: counted, logged (info, throttled)."""
        self.counts["hold_capped_steps"] += 1
        self.report.throttled("hold_capped", "info", (
            f"commands held up to {1e3 * self.hold_time:.1f} ms (a stalled loop): the {self.law_name} feedback "
            f"slowed to {self.law.omega_cap:.3g} rad/s on {self.law.capped} joint(s) / mode(s) so that the "
            f"held command stays stable; the gains come back as the holds shorten"), now)

    def _noisy_wrench(self, now):
        """The F/T sensor's (or the joint torque sensors') noise widened the stiction term's dead zone past
        its tanh scale: logged (info) the first time and whenever it grows by half again (a sensor is
        always noisy: not every second)."""
        fr = self.law.friction
        j = int(np.argmax(fr.deadzone))
        if fr.deadzone[j] <= 1.5 * self._deadzone_logged:
            return
        self._deadzone_logged = float(fr.deadzone[j])
        self.report.log("info", (
            f"the {'joint torque sensors' if self.cycle.state.tau_ext is not None else 'wrench sensor'}'s noise "
            f"gives joint {self.model.joint_names[j]} {fr.deadzone[j] / NOISE_DEADZONE:.3g} "
            f"N m: the stiction term acts on pulls beyond {fr.deadzone[j]:.3g} N m there ({NOISE_DEADZONE:g} x that "
            f"noise; friction_stiction_torque {fr.pull_scale:g} N m)"))

    def brake_step(self, now, dt=None):
        """One step of an identification run's brake (its way back starts with it): g(q) when the law
        compensates gravity (else zero) minus D v, D as the joint speed stop's (stable with late commands,
        where a saturated joint law on a rate-limited command is not), through the safety envelope when it
        is on, clipped to the effort limits and rate-limited as the safe command.  `dt`: the time since the
        last command left (default: as the safe command's)."""
        target = self.gravity_backend.gravity(self.q) if self.law.gravity_enabled else np.zeros(self.n)
        target = target - self.supervisor.stop_damping() * self.v
        if self.envelope.enabled:                        # its planes hold during the brake as well
            target = self._envelope.apply(target, self.state, self.period if dt is None else dt,
                                          self.law.gravity_enabled)
        np.clip(target, -self.safety.limit, self.safety.limit, out=target)
        return self.output.ramp_to(target, now, dt)

    def sent(self, now, t=None):
        """The command of the last step left at `now` (steady clock) and `t` (the control clock, when
        the caller has it): the rate limit's dt counts from there."""
        self.cycle.sent(now, t)

    # ------------------------------------------------------------------ monitoring
    @property
    def info(self):
        return self.law.info

    def diagnostics(self):
        """(level, message, [(key, value text), ...]) of the loop."""
        sup = self.supervisor
        kv = [("steps_total", str(self.total_steps)), ("safe_commands_total", str(self.output.safe_published)),
              ("watchdog", sup.watchdog if self.active else "inactive"),
              ("watchdog_trips", str(self.counts["watchdog_trips"])),
              ("joint_speed_stops", str(self.counts.get("safety.joint_speed_stops", 0)))]
        kv += [(f"safety.{k}", str(val)) for k, val in sorted(dict(getattr(self.safety, "counts", {})).items())]
        reasons = getattr(self.safety, "reasons", None)
        if reasons:
            kv.append(("safety.last_reasons", ",".join(map(str, reasons))))
        kv += [("hold_ms", f"{1e3 * self.hold_time:.1f}"), ("hold_longest_ms", f"{1e3 * self.hold_longest:.1f}"),
               ("hold_capped_steps", str(self.counts.get("hold_capped_steps", 0)))]
        kv += self.estimation.diagnostics() + self.runs.diagnostics() + self._tank.diagnostics()
        kv += self._envelope.diagnostics()
        acts, acting = self.report.acts_status()
        kv += acts
        if not self.active:
            return OK, "inactive", kv
        status = sup.status() or self._envelope.status()
        if status is not None:
            return ERROR, status[1], kv
        if sup.watchdog == "waiting":
            return WARN, "waiting for joint states", kv
        if sup.rejecting:
            return WARN, f"rejecting joint states ({sup.rejecting})", kv
        if acting:
            return WARN, acting, kv
        return OK, "active", kv
