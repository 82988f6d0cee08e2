"""Payload identification run by the control loop itself (issue 17).  No ROS.

A small state machine that `ControlLoop` steps every control cycle (so every front end gets it: the
controller node over DDS, a hardware bridge in-process).  Static mode:

    for each pose of static_poses(model, q_ref, poses, wrist_span, margin):
        move    a rest-to-rest quintic from where the arm is (JointTrajectory), lasting at least
                move_time and long enough that no joint exceeds vel_frac of its velocity limit
        settle  wait until every |v_i| < settle_velocity, then average q, the joint torques (and the
                F/T wrench) over settle_time s of rest; not at rest within max_hold s: abort
        sample  PayloadIdentifier.add_torques / add_ft with the averages
    solve       PayloadIdentifier.solve() (m, c; a ValueError aborts with its text)
Excitation mode (payload_id.mode excitation): instead of the poses, an ExcitationTrajectory around the
held reference (duration, vel_frac of the velocity limits, acc_max, margin) is the law's reference,
sampled every sample_period with the measured q, v and the acceleration by a central difference of the
measured v over two control periods (the torque averaged over the same two periods); the solve then
includes the inertia (about the com).
    return      a rest-to-rest move back to the reference held before the run (restored)

    run = PayloadRun(loop, params)        # ValueError with the reason when it cannot start
    run.start(now, t)                     # remembers the reference being held
    run.step(now, t)                      # from ControlLoop._control, before the law runs
    run.abort(reason, restore=True)       # cancel, watchdog trip, deactivate, a user reference, ...
    run.done, run.ok, run.message, run.estimate, run.status()

Torque source: the measured effort of the joint states when they carry one (ControlLoop.update_state
effort=), else the command sent (+ g(q) when the driver adds gravity: a Franka adds it itself).  The
joint-torque rows compare with the model's RNEA, so an attached payload of the same name is detached
for the run and re-attached when the run fails.
"""
import numpy as np

from ..laws.base import JointReference
from ..payload_id import ExcitationTrajectory, PayloadIdentifier, inertial_params, static_poses
from ..trajectory import JointTrajectory

JOINT_LAWS = ("computed_torque", "joint_impedance")
SOURCES = ("torques", "ft", "both")


def _default_frame(model):
    names = list(model.frame_names)
    return "panda_hand_tcp" if "panda_hand_tcp" in names else names[-1]


def effort_limited_joint(loop):
    """(joint index, the law's command on it, its limit) when the safety filter clipped the last
    command at an effort limit (the joint whose command is largest relative to its limit), else None."""
    if "effort_limit" not in loop.safety.reasons:
        return None
    lim = loop.safety.limit
    tau = loop.law.command                             # the law's command before the filter
    j = int(np.argmax(np.abs(tau) / lim))
    return j, float(tau[j]), float(lim[j])


def velocity_caps(model, frac):
    """`frac` x the model's velocity limits per joint (1 rad/s where a joint has none: not finite or
    <= 0): the speeds the identification runs move the arm at."""
    vl = np.asarray(model.velocity_limits, dtype=float)
    return frac * np.where(np.isfinite(vl) & (vl > 0), vl, 1.0)


def move_time(a, b, vmax, t_min):
    """The duration of a quintic move from `a` to `b` (rest to rest): `t_min` at least, and long enough
    that no joint passes `vmax` (a quintic's peak speed is 15/8 of its mean)."""
    d = np.abs(np.asarray(b, dtype=float) - np.asarray(a, dtype=float))
    return max(t_min, 15.0 / 8.0 * float(np.max(d / vmax)))


# the largest excursion of a quintic's start-velocity term, T v0 (s - 6 s^3 + 8 s^4 - 3 s^5) for s in
# [0, 1], is 16/81 T v0 at s = 1/3 (a cubic's, T v0 (s - 2 s^2 + s^3), 4/27): rounded up
OVERSHOOT = 0.2


def move_back(loop, target, vmax, t_min):
    """The way back after an aborted run (either identification): a trajectory to `target` at rest
    starting from the arm's measured state (q, v), not from the reference it may have left.  A run
    aborts when the law's command reached an effort limit, the arm behind its reference: resumed from
    there, the law stays saturated and, its command moving at most torque_rate_limit per step, the
    torque turns too late for a light joint, which overshoots further each swing (ROS-free, a Panda
    with its commands 4-8 ms late: 30-100 rad/s after such an abort, bench/abort_return.py; over DDS
    on a loaded host the arm ended 3.2 rad from its reference).  From the measured state the law's
    error starts at zero.  The duration: `t_min` at least, the largest distance at 8/15 of `vmax`, and
    2 |v| / vmax per joint (a run left moving fast comes to rest gently).  A joint moving toward a
    position limit carries on before it turns, by at most OVERSHOOT T |v0| (the quintic's start-velocity
    term): its start velocity is cut so that the reference stays within the limit (after an abort near
    the limit the reference brakes harder than the arm, rather than leave the range).  A state not
    finite: from the reference, as before.  Returns the trajectory (set as the law's reference)."""
    law = loop.law
    q, v = np.asarray(loop.q, dtype=float), np.asarray(loop.v, dtype=float)
    target = np.asarray(target, dtype=float)
    if np.all(np.isfinite(q)) and np.all(np.isfinite(v)):
        T = max(move_time(q, target, vmax, t_min), 2.0 * float(np.max(np.abs(v) / vmax)))
        m = loop.model
        room = np.where(v > 0.0, np.asarray(m.upper_limits, dtype=float) - q,
                        q - np.asarray(m.lower_limits, dtype=float))
        v0 = np.sign(v) * np.minimum(np.abs(v), np.maximum(room, 0.0) / (OVERSHOOT * T))
        law.q_d = q.copy()
        law.v_d[:] = v0
        law.a_d[:] = 0.0
    else:
        T = move_time(law.q_d, target, vmax, t_min)
    traj = JointTrajectory([T], [target], lower=None, upper=None)
    law.set_reference(traj)                     # starts at the next compute, from (q_d, v_d) set here
    return traj


# the brake before the way back (needs_brake) ends once every joint is slower than BRAKE_FRAC x the
# run's speed (move_back takes the arm from there), or after BRAKE_MAX [s] whatever its speed (a
# brake holds no position: an arm whose weight the model misses sinks at a steady speed under it)
BRAKE_FRAC = 0.5
BRAKE_MAX = 3.0


def needs_brake(loop, vmax):
    """Whether the way back after an aborted run (either identification) starts with a brake (the
    loop's brake_step: g(q) minus a joint damping) rather than at once from the arm's measured state:
    the law's last command at an effort limit, or a joint faster than the run's own speed `vmax`.  From
    there a joint law on a torque-rate-limited command may not bring the arm back: its saturated
    command turns at the rate limit, too late, and the arm swings further each time (a Panda whose
    controller stalled 0.4 s 2.5 s into the excitation: 98-133 rad/s on the way back, ROS-free, and over
    DDS not back 200 s later; bench/abort_return.py).  A state not finite: no brake (the way back
    starts from the reference)."""
    v = np.asarray(loop.v, dtype=float)
    if not np.all(np.isfinite(v)):
        return False
    return effort_limited_joint(loop) is not None or bool(np.any(np.abs(v) > vmax))


def brake_done(loop, vmax, braking_for):
    """The brake before the way back is over: every joint slower than BRAKE_FRAC x `vmax`, or it has
    gone on `braking_for` >= BRAKE_MAX seconds."""
    v = np.abs(np.asarray(loop.v, dtype=float))
    return bool(np.all(v < BRAKE_FRAC * np.asarray(vmax))) or braking_for >= BRAKE_MAX


def check_can_start(loop, what, purpose):
    """The conditions every identification run needs of the loop before it may move the arm (ValueError
    with the reason): a joint law, active, a valid joint state, no other run going, no trajectory being
    followed or pending."""
    if loop.law_name not in JOINT_LAWS:
        raise ValueError(f"the active law is {loop.law_name}; {what} needs a joint "
                         f"law ({' or '.join(JOINT_LAWS)}) to {purpose}")
    if not loop.active:
        raise ValueError("the controller is not active")
    if not loop.cycle.have_state or loop.supervisor.watchdog != "ok" or loop.supervisor.latest_rejected:
        raise ValueError("no valid joint state (watchdog not ok)")
    for run in (loop.runs.payload, loop.runs.dynamics):
        if run is not None and run.busy:
            raise ValueError(f"an identification is already running ({run.status()})")
    law = loop.law
    if law.trajectory is not None and not law.trajectory.done(loop.state.t) and law.trajectory.started:
        raise ValueError("a joint trajectory is being followed; identify once it has ended")
    if loop.references.pending is not None or law.trajectory is not None and not law.trajectory.started:
        raise ValueError("a new reference is pending; identify once it is being held")
    sat = effort_limited_joint(loop)
    if sat is not None:
        # the arm far from its reference (still moving back after an aborted run, or pushed away): a
        # run started now would abort on its first step (its excitation starts at the reference; a
        # loaded run restarted so twice, 775 and 1490 N m on the FR3's joint 3, and never ran)
        j, tau_j, lim_j = sat
        raise ValueError(f"the law's command is at the effort limit of {loop.model.joint_names[j]} "
                         f"({tau_j:.1f} N m, limit {lim_j:.1f}: the arm is "
                         f"{abs(loop.q[j] - law.q_d[j]) if law.q_d is not None else float('nan'):.3f} rad "
                         f"from its reference); identify once it holds its reference")


class PayloadRun:
    """See the module docstring.  `params`: the loop's `payload_id.*` values (without the prefix)."""

    def __init__(self, loop, params):
        p = dict(params)
        check_can_start(loop, "payload identification", "move the arm through its poses")
        n = int(p["poses"]) if float(p["poses"]) == int(p["poses"]) else -1
        if n < 3:
            raise ValueError(f"payload_id.poses: {p['poses']} must be an integer >= 3")
        if not 0 < p["vel_frac"] <= 1:
            raise ValueError(f"payload_id.vel_frac: {p['vel_frac']} must be in (0, 1]")
        self.mode = p.get("mode", "static")
        if self.mode not in ("static", "excitation"):
            raise ValueError(f"payload_id.mode: {self.mode!r} is not one of ['static', 'excitation']")
        self.source = p["source"]
        if self.source not in SOURCES:
            raise ValueError(f"payload_id.source: {self.source!r} is not one of {list(SOURCES)}")
        m = self.model = loop.model
        self.loop, self.p, self.n_poses = loop, p, n
        self.use_ft = self.source in ("ft", "both")
        self.use_tau = self.source in ("torques", "both")
        sensor = loop.params["sensor_frame"] or loop.estimation.wrench_raw_frame
        frame = p["frame"]
        if self.use_ft:
            if loop.estimation.wrench_raw is None:
                raise ValueError(f"payload_id.source {self.source}: no F/T wrench received (set sensor_frame "
                                 f"and publish on the wrench topic)")
            if frame and frame != sensor:
                raise ValueError(f"payload_id.frame {frame!r}: with source {self.source} it must be the F/T "
                                 f"sensor frame {sensor!r} (or empty)")
            frame = sensor
        elif not frame:
            obs = loop.estimation.observer
            frame = obs.frame if obs is not None else _default_frame(m)
        if frame not in m.frame_names:
            raise ValueError(f"payload_id.frame: {frame!r} is not a frame of the model")
        self.frame = frame
        self.name = p["name"] or "payload"
        tool = None
        if self.use_ft and loop.params["tool_mass"] > 0:
            tool = inertial_params(loop.params["tool_mass"], loop.params["tool_com"])
        self.pid = PayloadIdentifier(m, loop.gravity_backend, frame, tool=tool)
        # torques: the measured effort when the states carry it, else the command (+ g(q) when the driver
        # adds gravity); decided at start and kept for the whole run
        self.measured = self.use_tau and loop.cycle.have_effort
        if self.use_tau and not self.measured and not loop.total_steps:
            raise ValueError("no command sent yet and no measured effort: nothing to take torques from")
        self.adds_gravity = loop.driver_adds_gravity
        self.done, self.ok, self.message, self.estimate = False, False, "", None
        self.phase = "idle"
        self.k = 0
        self.restore_pending = False
        self.detached = None
        self.duration_estimate = None

    # ------------------------------------------------------------------ start
    def start(self, now, t):
        loop, law = self.loop, self.loop.law
        self.q_ref = np.array(law.q_d if law.q_d is not None else loop.q, dtype=float).copy()
        self.poses = static_poses(self.model, self.q_ref, self.n_poses, self.p["wrist_span"], self.p["margin"])
        self.t_start = now
        if self.name in self.model.payloads:           # the rows compare with the payload-free model
            self.detached = self.model.payloads[self.name]
            self.model.detach_payload(self.name)
        vmax = self._vmax()
        est, prev = 0.0, self.q_ref
        for pose in list(self.poses) + [self.q_ref]:
            est += self._move_time(prev, pose, vmax) + self.p["settle_time"] + 0.5
            prev = pose
        if self.mode == "excitation":
            p = self.p
            try:
                self.exc = ExcitationTrajectory(self.model, self.q_ref, duration=p["duration"],
                                                vel_frac=p["vel_frac"], acc_max=p["acc_max"], margin=p["margin"])
            except ValueError as e:
                self.abort(str(e), restore=False)
                return f"refused: {e}"
            self.t_exc0, self.buf, self.last_sample = t, [], -np.inf
            self.phase = "excite"
            est = p["duration"] + self._move_time(loop.q, self.q_ref, vmax)
            self.duration_estimate = est
            return (f"started: excitation, {p['duration']:.1f} s at {self.frame}, source {self.source}"
                    f"{' (measured effort)' if self.measured else ' (command sent)' if self.use_tau else ''}")
        self.duration_estimate = est
        self._begin_move(now, t, self.poses[0])
        return (f"started: static, {self.n_poses} poses at {self.frame}, source {self.source}"
                f"{' (measured effort)' if self.measured else ' (command sent)' if self.use_tau else ''}, "
                f"about {est:.0f} s")

    def _vmax(self):
        return velocity_caps(self.model, self.p["vel_frac"])

    def _move_time(self, a, b, vmax):
        return move_time(a, b, vmax, self.p["move_time"])

    def _begin_move(self, now, t, target):
        loop = self.loop
        T = self._move_time(loop.q, target, self._vmax())
        traj = JointTrajectory([T], [target], lower=None, upper=None)
        loop.law.set_reference(traj)                   # starts at the next compute, from the state then
        self.traj = traj
        self.phase = "move"
        self.target = np.array(target, dtype=float)

    # ------------------------------------------------------------------ per step
    @property
    def busy(self):
        """Moving the arm (poses, settling, the way back) or about to move it back."""
        return self.phase in ("move", "settle", "excite", "brake", "return") or self.restore_pending

    def step(self, now, t):
        """One control cycle (the state is fresh; the law runs right after)."""
        if self.restore_pending:
            self._restore(now, t)
            return
        loop = self.loop
        if self.phase == "excite":
            self._excite(now, t)
            return
        if self.phase == "move":
            if self.traj.started and self.traj.done(t):
                self.phase = "settle"
                self.hold_start = now
                self._reset_window(now)
            return
        if self.phase == "settle":
            v = loop.v
            if float(np.max(np.abs(v))) >= self.p["settle_velocity"]:
                self._reset_window(now)
            else:
                if self.win_n == 0:
                    self.win_start = now
                self.win_n += 1
                self.win_q += loop.q
                if self.use_tau:
                    self.win_tau += self._torques()
                if self.use_ft:
                    if loop.estimation.wrench_raw is None or now - loop.estimation.wrench_time > loop.params["watchdog_timeout"]:
                        self.abort("the F/T wrench went stale")
                        return
                    self.win_ft += loop.estimation.wrench_raw
                if now - self.win_start >= self.p["settle_time"] and self.win_n >= 2:
                    self._sample(now, t)
                    return
            if now - self.hold_start > self.p["max_hold"]:
                self.abort(f"pose {self.k + 1}/{self.n_poses} not at rest within max_hold "
                           f"{self.p['max_hold']} s (|v| max {float(np.max(np.abs(v))):.4f} rad/s, "
                           f"settle_velocity {self.p['settle_velocity']})")
            return
        if self.phase == "brake":
            if brake_done(loop, self._vmax(), now - self.brake_start):
                self._move_back()
            return
        if self.phase == "return":
            if self.traj.started and self.traj.done(t):
                loop.law.set_reference(JointReference(self.q_ref.copy()))   # the reference restored
                self.phase = "finished"
                loop.report.log("info", f"payload identification: back at the previous reference after "
                                  f"{now - self.t_start:.1f} s")

    def _torques(self):
        loop = self.loop
        if self.measured:
            return loop.cycle.effort
        tau = loop.tau.copy()
        if self.adds_gravity:
            tau += loop.gravity_backend.gravity(loop.q)
        return tau

    def _reset_window(self, now):
        n = self.model.nv
        self.win_n, self.win_start = 0, now
        self.win_q, self.win_tau, self.win_ft = np.zeros(n), np.zeros(n), np.zeros(6)

    def _excite(self, now, t):
        loop, te = self.loop, t - self.t_exc0
        qd, vd, ad = self.exc.sample(te)
        loop.law.set_reference(JointReference(qd, vd, ad))
        ts = loop.cycle.stamp if loop.cycle.stamp is not None else now     # when it was measured
        ft = None
        if self.use_ft:
            if loop.estimation.wrench_raw is None or now - loop.estimation.wrench_time > loop.params["watchdog_timeout"]:
                self.abort("the F/T wrench went stale")
                return
            ft = loop.estimation.wrench_raw.copy()
        buf = self.buf
        if buf and ts <= buf[-1][0]:
            return                                     # no new measurement
        buf.append((ts, loop.q.copy(), loop.v.copy(), self._torques().copy() if self.use_tau else None, ft))
        if len(buf) > 3:
            del buf[0]
        if len(buf) == 3 and buf[1][0] - self.last_sample >= self.p["sample_period"]:
            (t0, _, v0, _, _), (t1, q1, v1, tau1, ft1), (t2, _, v2, tau2, _) = buf
            a1 = (v2 - v0) / (t2 - t0)
            try:
                if self.use_tau:                       # the torque applied over [t0, t2]
                    self.pid.add_torques(q1, 0.5 * (tau1 + tau2), v1, a1)
                if self.use_ft:
                    self.pid.add_ft(q1, ft1, v1, a1)
            except ValueError as e:
                self.abort(f"excitation sample: {e}")
                return
            self.last_sample = t1
        if te >= self.exc.duration:
            self._solve(now, t)

    def _sample(self, now, t):
        k = self.win_n
        q = self.win_q / k
        try:
            if self.use_tau:
                self.pid.add_torques(q, self.win_tau / k)
            if self.use_ft:
                self.pid.add_ft(q, self.win_ft / k)
        except ValueError as e:
            self.abort(f"pose {self.k + 1}: {e}")
            return
        self.k += 1
        if self.k < self.n_poses:
            self._begin_move(now, t, self.poses[self.k])
            return
        self._solve(now, t)

    def _solve(self, now, t):
        try:
            est = self.pid.solve()
        except ValueError as e:
            self.abort(str(e))
            return
        self.estimate = est
        self.ok = self.done = True
        self.message = self.result_text()
        self._begin_move(now, t, self.q_ref)           # back to the reference held before the run
        self.phase = "return"
        if self.p["attach"]:
            ok, msg = self.loop.runs.attach_payload_estimate()
            self.message += f"; {msg}" if ok else f"; not attached: {msg}"
        elif self.detached is not None:                # the run replaced the old estimate: keep it
            self.message += f"; the previous {self.name!r} stays detached (call attach to use the new one)"
        self.loop.report.log("info", f"payload identification: {self.message}")

    # ------------------------------------------------------------------ ending
    def abort(self, reason, restore=True):
        """End the run without a result: `reason` goes into the message; restore: move back to the
        reference held before the run at the next control step the law runs (False when the user's
        own reference or hold takes over)."""
        if not self.busy:
            return
        if self.done:                                  # interrupted on the way back: go back again later
            self.restore_pending = restore
            self.phase = "finished"
            return
        self.done, self.ok = True, False
        self.message = f"aborted: {reason}"
        self.phase = "aborted"
        if self.detached is not None and self.name not in self.model.payloads:
            frame, mass, com, Ic = self.detached
            self.model.attach_payload(frame, mass, com, Ic, name=self.name)
            self.message += f" ({self.name!r} re-attached)"
        self.restore_pending = restore
        if restore:
            self.message += "; returning to the previous reference"
        self.loop.report.log("warn", f"payload identification {self.message}")

    def _restore(self, now, t):
        self.restore_pending = False
        if needs_brake(self.loop, self._vmax()):
            self.phase, self.brake_start = "brake", now     # the loop brakes; then _move_back
        else:
            self._move_back()

    def _move_back(self):
        self.traj = move_back(self.loop, self.q_ref, self._vmax(), self.p["move_time"])
        self.phase = "return"

    # ------------------------------------------------------------------ reporting
    def status(self):
        if self.phase == "move":
            return f"pose {self.k + 1}/{self.n_poses} moving"
        if self.phase == "settle":
            return f"pose {self.k + 1}/{self.n_poses} settling"
        if self.phase == "excite":
            return f"excitation {self.loop.state.t - self.t_exc0:.1f} / {self.exc.duration:.1f} s"
        if self.phase == "brake":
            return f"{self.message} (braking before moving back)"
        if self.phase == "return" and not self.ok:
            return f"{self.message} (moving back)"
        if self.phase == "return":
            return f"returning to the previous reference; {self.message}"
        return self.message or self.phase

    def result_text(self):
        e = self.estimate
        rms = ", ".join(f"{'ft' if k == 'ft' else 'tau'} {v:.3g} {'N' if k == 'ft' else 'N m'}"
                        for k, v in e.residual_rms.items())
        how = f"{self.n_poses} poses" if self.mode == "static" else f"excitation, {e.rows} rows"
        inertia = "" if e.inertia is None else \
            f", inertia diag {np.array2string(np.diag(e.inertia), precision=4)} kg m^2"
        return (f"mass {e.mass:.4f} +- {e.mass_std:.4f} kg, com {np.array2string(e.com, precision=4)} "
                f"+- {np.array2string(e.com_std, precision=4)} m ({e.frame}){inertia}, cond {e.cond:.1f}, "
                f"residual rms {rms}, {how}")
