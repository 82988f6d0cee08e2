"""Identification of the arm's own dynamics run by the control loop (issue 21).  No ROS.

Like the payload identification (control/runs/payload.py), a state machine `ControlLoop` steps every control
cycle, so every front end has it (the controller node over DDS, the Franka bridge in-process):

    excite     the Fourier excitation (dynamics.identification.fourier_excitation, through the held
               position, at rest at both ends) is the law's reference for `periods` periods; every
               control cycle records the state and the torque
    validate   one period of a second excitation, not used for the estimate
    slow       the short extra excitation for the dry friction's shape near rest (`slow_speed` > 0 and
               fit_band): every joint out and back, slowly, three times at peak speeds slow_speed / 16,
               / 4 and slow_speed (friction_bands.slow_excitation; 7 s at the defaults): each joint's
               velocity scale vs from it (fit_bands_slow), the fast rows' fit (fit_bands) without it;
               each vs at least BAND_NOISE x the joint velocity noise the record shows (_band_floor)
    solve      on a thread of its own (seconds of numpy: not on the control thread, whose watchdog would
               trip), the arm holding where it started: dataset() + solve(): the per-joint rotor inertia and friction (the URDF's inertials
               trusted; `inertial` true: all base parameters), the validation torque RMS before
               (URDF only) and after; the result as controller parameters (controller_params), written
               to `output` when set
    back       the excitation ends where it started, at rest: the held reference stays

    run = DynamicsRun(loop, params)       # ValueError with the reason when it cannot start
    run.start(now, t); run.step(now, t); run.abort(reason, restore=True)
    run.done, run.ok, run.message, run.estimate, run.params, run.validation, run.status()

Aborted with the reason (nothing applied, the held reference restored by a move back) on: a watchdog
trip, a new reference, a hold, deactivation, a collision (the observer), a torque at the effort limit
(the safety filter clamped it: the data would not be the law's), a position limit approached closer
than `margin`, or a solve that fails (a joint not excited, NaN).

Torques: the measured effort when the joint states carry it (a Franka's tau_J: measured at the
state's instant; `torque_timing` held_before for a simulator's applied effort, held over the period
before the state), else the command sent (+ g(q) when the driver adds gravity), which is held over the
next control period; a held torque is paired with the state in the middle of its period (paired with the state at its
start, the data carry a half-period lag that reads as extra viscous friction and rotor inertia).  The
samples are put on a uniform grid of the control period (the steps come when the states do) before
the zero-phase filtering.
"""
import threading

import numpy as np

from ...dynamics import friction_bands as bands
from ...dynamics import identification as idn
from ..laws.base import JointReference
from .payload import brake_done, check_can_start, effort_limited_joint, move_back, needs_brake, velocity_caps

SLOW_PERIOD = 2.0          # [s] each sweep of the slow excitation
BAND_NOISE = 4.0           # vs written at least this many x the joint's velocity noise (std)


class DynamicsRun:
    """See the module docstring.  `params`: the loop's `dynamics_id.*` values (without the prefix)."""

    def __init__(self, loop, params):
        p = dict(params)
        check_can_start(loop, "the identification", "follow the excitation")
        if "start_ramp" in (loop.safety.reasons or []):
            raise ValueError("the start ramp is on (ramp_time): identify once it has ended")
        for key in ("period", "acc_max", "vel_frac", "cutoff"):
            if not p[key] > 0:
                raise ValueError(f"dynamics_id.{key}: {p[key]} must be > 0")
        if not 0 <= p.get("stiction", 0.0) <= 1:
            raise ValueError(f"dynamics_id.stiction: {p['stiction']} must be within [0, 1]")
        if not 0 < p["vel_frac"] <= 1:
            raise ValueError(f"dynamics_id.vel_frac: {p['vel_frac']} must be in (0, 1]")
        for key in ("periods", "harmonics"):
            if float(p[key]) != int(p[key]) or int(p[key]) < 1:
                raise ValueError(f"dynamics_id.{key}: {p[key]} must be an integer >= 1")
        self.slow_speed = float(p["slow_speed"]) if p["fit_band"] else 0.0
        if self.slow_speed > 0.0:
            m, q = loop.model, np.asarray(loop.law.q_d if loop.law.q_d is not None else loop.q, dtype=float)
            room = bands.slow_direction(m.lower_limits, m.upper_limits, q)[1] - p["margin"]
            travel = bands.slow_reach(self.slow_speed, SLOW_PERIOD)
            if np.any(travel > room):
                j = int(np.argmin(room))
                raise ValueError(f"dynamics_id.slow_speed: {p['slow_speed']} rad/s takes every joint {travel:.3f} "
                                 f"rad from where it holds, {m.joint_names[j]} has {max(room[j], 0.0):.3f} rad "
                                 f"to its limit beyond the margin: lower it (0: no slow excitation)")
            cap, acc = float(velocity_caps(m, p["vel_frac"]).min()), self.slow_speed * 2.0 * np.pi / SLOW_PERIOD
            if self.slow_speed > cap or acc > p["acc_max"]:
                raise ValueError(f"dynamics_id.slow_speed: {p['slow_speed']} rad/s is over the excitation's speed "
                                 f"cap {cap:.3f} rad/s (vel_frac) or its {acc:.3f} rad/s^2 over acc_max "
                                 f"{p['acc_max']:g}: lower it (0: no slow excitation)")
        self.loop, self.p, self.model = loop, p, loop.model
        self.inertial = bool(p["inertial"])
        self.measured = loop.cycle.have_effort
        if not self.measured and not loop.total_steps:
            raise ValueError("no command sent yet and no measured effort: nothing to take torques from")
        self.adds_gravity = loop.driver_adds_gravity
        self.done, self.ok, self.message = False, False, ""
        self.estimate, self.params, self.notes, self.validation = None, None, [], None
        self.phase = "idle"
        self.restore_pending = False
        self.path = None
        self.gaps = ""
        self.bands = idn.FRICTION_BAND
        self.v_noise, self.band_note = None, ""
        self.stuck = None                      # the joints the slow excitation found held (fit_bands_slow)

    # ------------------------------------------------------------------ start
    def start(self, now, t):
        """Returns at once: the excitations are chosen on a thread of their own (some 0.5 s of numpy,
        not under the caller's lock nor on the control thread), the arm holding meanwhile; the first
        step after that starts the excitation."""
        p = self.p
        self.q_ref = np.array(self.loop.law.q_d if self.loop.law.q_d is not None else self.loop.q, dtype=float).copy()
        self._prepared = None
        self.phase = "preparing"
        threading.Thread(target=self._prepare, name="dynamics_id_prepare", daemon=True).start()
        return (f"started: {int(p['periods'])} x {p['period']:.1f} s excitation + one period of another for "
                f"the validation, {'all base parameters' if self.inertial else 'rotor inertia and friction per joint'}, "
                f"torques from {'the measured effort' if self.measured else 'the command sent'}")

    def _prepare(self):
        p, m = self.p, self.model
        try:
            kw = dict(period=p["period"], harmonics=int(p["harmonics"]), v_max=velocity_caps(m, p["vel_frac"]),
                      a_max=p["acc_max"], margin=p["margin"], inertial=self.inertial)
            exc = idn.fourier_excitation(m, self.q_ref, candidates=30, seed=int(p["seed"]), **kw)
            val = idn.fourier_excitation(m, self.q_ref, candidates=3, seed=int(p["seed"]) + 1, **kw)
            self._prepared = (exc, val)
        except Exception as e:                 # noqa: BLE001 (reported by the next step)
            self._prepared = e

    def _begin_excitation(self, t):
        exc, val = self._prepared
        self.exc, self.val = exc, val
        self.T_id = int(self.p["periods"]) * 2 * np.pi / exc[3]
        self.T_val = 2 * np.pi / val[3]
        self.T_slow = 0.0
        if self.slow_speed > 0.0:
            self.slow_dir = bands.slow_direction(self.model.lower_limits, self.model.upper_limits, self.q_ref)[0]
            self.T_slow = bands.slow_duration(SLOW_PERIOD)
        self.t0 = t
        self.rec = []                                   # (t, q, tau, v) per control cycle
        self._g_applied = None                          # g(q) at the state the held command was sent at
        self.phase = "excite"
        slow = f" + {self.T_slow:.1f} s slow" if self.T_slow else ""
        self.loop.report.log("info", f"dynamics identification: excitation started (condition number {exc[4]:.1f}, "
                               f"{self.T_id:.1f} s + {self.T_val:.1f} s validation{slow})")

    @property
    def busy(self):
        return self.phase in ("preparing", "excite", "brake", "return") or self.restore_pending

    # ------------------------------------------------------------------ per step
    def step(self, now, t):
        loop = self.loop
        if self.restore_pending:
            self.restore_pending = False
            if needs_brake(loop, self._vmax()):
                self.phase, self.brake_start = "brake", now     # the loop brakes; then the way back
            else:
                self._begin_move(self.q_ref)
            return
        if self.phase == "brake":
            if brake_done(loop, self._vmax(), now - self.brake_start):
                self._begin_move(self.q_ref)
            return
        if self.phase == "return":
            if self.traj.started and self.traj.done(t):
                loop.law.set_reference(JointReference(self.q_ref.copy()))
                self.phase = "finished"
            return
        if self.phase == "preparing":
            if isinstance(self._prepared, Exception):
                e = self._prepared
                self.abort(str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}", restore=False)
            elif self._prepared is not None:
                self._begin_excitation(t)
            return
        if self.phase != "excite":
            return
        te = t - self.t0
        sat = effort_limited_joint(loop)
        if sat is not None:
            j, tau_j, lim_j = sat
            # the joint law's errors at that step (which term made the torque: a next occurrence of
            # an unexplained one, 775-1490 N m on the first step of a restarted excitation in a
            # loaded run, says so)
            e, ed = getattr(loop.law, "_e", None), getattr(loop.law, "_ed", None)
            errs = (f"; q_d - q {e[j]:+.3f} rad, v_d - v {ed[j]:+.3f} rad/s, q {loop.q[j]:+.3f}, "
                    f"{te:.3f} s into the excitation" if e is not None and ed is not None else "")
            self.abort(f"the law's command reached the effort limit of {self.model.joint_names[j]} "
                       f"({tau_j:.2f} N m, limit {lim_j:.2f}{errs}; the data would not be the law's): "
                       f"lower dynamics_id.acc_max or vel_frac")
            return
        lo, hi = self.model.lower_limits + 0.5 * self.p["margin"], self.model.upper_limits - 0.5 * self.p["margin"]
        if np.any(loop.q < lo) or np.any(loop.q > hi):
            j = int(np.flatnonzero((loop.q < lo) | (loop.q > hi))[0])
            self.abort(f"{self.model.joint_names[j]} at {loop.q[j]:.3f} rad, within half of dynamics_id.margin "
                       f"of its limit")
            return
        ts = loop.cycle.stamp if loop.cycle.stamp is not None else t
        if not self.rec or ts > self.rec[-1][0]:
            tau = loop.cycle.effort.copy() if self.measured else loop.tau.copy()     # the command held since
            if not self.measured and self.adds_gravity:                      # the last step
                # the driver added g at the state the command was applied at (the previous step's),
                # not at this one, which the held period led to (issue 43: paired here, joint 2's fv
                # came out 19 % low in test_friction.py, 47 % in the issue's simulation)
                g_now = loop.gravity_backend.gravity(loop.q).copy()
                tau += self._g_applied if self._g_applied is not None else g_now
                self._g_applied = g_now
            self.rec.append((ts, loop.q.copy(), tau, np.array(loop.v, dtype=float)))
        if te < self.T_id:
            ref = idn.fourier_trajectory(*self.exc[:4], np.array([te]))
        elif te < self.T_id + self.T_val:
            ref = idn.fourier_trajectory(*self.val[:4], np.array([te - self.T_id]))
        elif te < self.T_id + self.T_val + self.T_slow:
            ref = bands.slow_excitation(self.q_ref, self.slow_speed, SLOW_PERIOD, self.slow_dir,
                                      te - self.T_id - self.T_val)[:3]
        else:                                   # done: hold, and solve off the control thread
            loop.law.set_reference(JointReference(self.q_ref.copy()))
            self.phase = "solving"
            threading.Thread(target=self._solve, name="dynamics_id_solve", daemon=True).start()
            return
        loop.law.set_reference(JointReference(ref[0][0], ref[1][0], ref[2][0]))

    def _grid(self, t0, t1):
        """(t, q, tau, valid) on a uniform grid of the control period over [t0, t1); valid False where
        the grid point lies in a gap of the record longer than dynamics_id.max_gap (states the loop
        did not see: interpolated across, then left out by dataset())."""
        ts = np.array([r[0] for r in self.rec])
        Q = np.array([r[1] for r in self.rec])
        tau = np.array([r[2] for r in self.rec])
        if not self.measured or self.p["torque_timing"] == "held_before":
            # tau recorded at k was held over [k-1, k]: pair it with the state in the middle (a
            # continuous-time plant), or with the state at its start (hold_pairing start: a plant
            # integrated by semi-implicit Euler, q+ = q + h v+, v+ = v + h a, whose position second
            # difference at k-1 is the acceleration that torque gave)
            if self.p["hold_pairing"] == "start":
                ts, Q, tau = ts[:-1], Q[:-1], tau[1:]
            else:
                ts, Q, tau = 0.5 * (ts[:-1] + ts[1:]), 0.5 * (Q[:-1] + Q[1:]), tau[1:]
        h = self.loop.period
        g = np.arange(t0, t1, h)
        g = g[(g >= ts[0]) & (g <= ts[-1])]
        i = np.clip(np.searchsorted(ts, g), 1, len(ts) - 1)
        valid = (ts[i] - ts[i - 1]) <= self.p["max_gap"] + 0.5 * h
        return g, np.column_stack([np.interp(g, ts, Q[:, j]) for j in range(Q.shape[1])]), \
            np.column_stack([np.interp(g, ts, tau[:, j]) for j in range(tau.shape[1])]), valid

    def _velocity_noise(self):
        """The joint velocity noise of the run's record (friction_bands.velocity_noise), per joint; 0
        where it could not be measured."""
        self.v_noise = bands.velocity_noise([r[3] for r in self.rec], [r[0] for r in self.rec])
        return np.nan_to_num(self.v_noise)

    def _band_floor(self, vs, stuck=None):
        """The fitted scales vs kept on the safe side: a joint's too few rows to fit (NaN) -> BAND_MAX, the
        widest (the compensation's dry part rises over it); each at least BAND_NOISE x the joint's
        velocity noise, v_noise as _velocity_noise() measured it on the run's record (a band narrower
        than the noise makes the compensation chatter).  stuck: the joints fit_bands_slow gave band_min
        for not sliding both ways (named in the note).  Returns (vs, the status note, '' if none)."""
        m, notes = self.model, []
        lost = ~np.isfinite(vs)
        if np.any(lost):
            notes.append(f"vs not identified for {', '.join(m.joint_names[j] for j in np.flatnonzero(lost))} "
                         f"(too few samples away from the record's gaps): {bands.BAND_MAX:g} rad/s, the widest")
            vs = np.where(lost, bands.BAND_MAX, vs)
        if stuck is not None and np.any(stuck):
            names = ", ".join(m.joint_names[j] for j in np.flatnonzero(stuck))
            notes.append(f"{names} did not slide both ways in the slow excitation (held at rest by static "
                         f"friction): vs {float(vs[stuck].min()):g} rad/s, the floor (band_min)")
        if not np.all(np.isfinite(self.v_noise)):
            notes.append("the joint velocity noise could not be measured (too few distinct joint states): vs not "
                         "checked against it")
        floor = BAND_NOISE * np.nan_to_num(self.v_noise)
        if np.any(floor > vs):
            raised = [f"{m.joint_names[j]} {vs[j]:.4f} -> {floor[j]:.4f}" for j in np.flatnonzero(floor > vs)]
            notes.append(f"vs held at {BAND_NOISE:g} x the joint velocity noise (its std "
                         f"{np.array2string(self.v_noise, precision=5)} rad/s): {', '.join(raised)}")
            vs = np.maximum(vs, floor)
        return vs, "; ".join(notes)

    def _solve(self):
        p, m = self.p, self.model
        try:
            if len(self.rec) < 100:
                raise ValueError(f"{len(self.rec)} samples: the joint states did not come")
            s0 = self.rec[0][0]                # the windows on the states' own clock (their stamps)
            t, q, tau, valid = self._grid(s0, s0 + self.T_id)
            kw = dict(derivative_cutoff=p["derivative_cutoff"], cutoff=p["cutoff"], v_min=p["v_min"])
            W, y, mask = idn.dataset(m, t, q, tau, inertial=self.inertial, valid=valid, **kw)
            self.gaps = self._gap_text(valid, mask)
            base = idn.base_parameters(m, inertial=self.inertial)
            prior = idn.prior_parameters(m, inertial=self.inertial)
            est = idn.solve(W, y, base, theta_prior=prior, mask=mask)
            self.bands = idn.FRICTION_BAND
            if p["fit_band"]:                  # the dry friction's velocity scale per joint, then again
                fkw = dict(inertial=self.inertial, est=est, derivative_cutoff=p["derivative_cutoff"],
                           cutoff=p["cutoff"], band_min=p["band_min"])
                noise = self._velocity_noise()
                if self.T_slow:                # from the slow excitation (sliding: past the noise floor)
                    t0s = s0 + self.T_id + self.T_val
                    ts, qs, taus, vals = self._grid(t0s, t0s + self.T_slow)
                    self.bands, _, self.stuck = bands.fit_bands_slow(m, ts, qs, taus, valid=vals,
                                                                     slide=BAND_NOISE * noise, **fkw)
                else:
                    self.bands, _ = bands.fit_bands(m, t, q, tau, valid=valid, **fkw)
                self.bands, self.band_note = self._band_floor(self.bands, self.stuck)
                kw["band"] = self.bands
                W, y, mask = idn.dataset(m, t, q, tau, inertial=self.inertial, valid=valid, **kw)
                est = idn.solve(W, y, base, theta_prior=prior, mask=mask)
            tv, qv, tauv, vv = self._grid(s0 + self.T_id, s0 + self.T_id + self.T_val)
            kw["v_min"] = -1.0                        # the validation: every row but those near a gap
            Wj, yj, mj = idn.dataset(m, tv, qv, tauv, inertial=False, valid=vv, **kw)   # tau - URDF model
            rows = mj[:, 0]
            if rows.sum() < 10:
                raise ValueError("the validation period lost too many states (gaps in the record)")
            yj = yj[rows]
            before = np.sqrt(np.mean(yj ** 2, axis=0))
            if self.inertial:
                Wf, tf, _ = idn.dataset(m, tv, qv, tauv, inertial=True, **kw)
                after = np.sqrt(np.mean((tf[rows] - est.predict(Wf[rows])) ** 2, axis=0))
            else:
                after = np.sqrt(np.mean((yj - est.predict(Wj[rows])) ** 2, axis=0))
        except Exception as e:                 # noqa: BLE001 (a thread of its own: reported, never raised)
            self.done, self.ok, self.phase = True, False, "aborted"
            self.message = f"aborted: {e if isinstance(e, ValueError) else f'{type(e).__name__}: {e}'}; nothing applied"
            self.loop.report.log("warn", f"dynamics identification {self.message}")
            return
        self.estimate = est
        self.validation = {"rms_urdf": before, "rms_identified": after}
        self.params, self.notes = idn.controller_params(est, m, self.loop.joints, scale=p["scale"], band=self.bands,
                                                        stiction=p["stiction"])
        if self.band_note:
            self.notes.append(self.band_note)
        message = self.result_text()
        if p["output"]:
            try:
                self.path = idn.write_params_yaml(p["output"], self.params, comment=message)
                message += f"; written to {self.path}"
            except OSError as e:
                message += f"; not written to {p['output']}: {e}"
        self.message = message
        self.ok = self.done = True
        self.phase = "finished"
        self.loop.report.log("info", f"dynamics identification: {self.message}")

    @staticmethod
    def _gap_text(valid, mask):
        """What the gaps in the record cost: '' when the loop saw every state."""
        if valid.all():
            return ""
        starts = int(np.sum(valid[:-1] & ~valid[1:])) + int(not valid[0])
        return (f"{int((~valid).sum())} samples in {starts} gap(s) of the record filled in, "
                f"{100.0 * (1.0 - mask.any(axis=1).mean()):.0f} % of the rows left out near them")

    def _vmax(self):
        return velocity_caps(self.model, self.p["vel_frac"])

    def _begin_move(self, target):
        self.traj = move_back(self.loop, target, self._vmax(), 1.0)
        self.phase = "return"

    # ------------------------------------------------------------------ ending
    def abort(self, reason, restore=True):
        if not self.busy and self.phase != "idle":
            return
        if self.phase in ("brake", "return"):          # interrupted on the way back
            self.restore_pending = restore
            if not restore and self.phase == "brake":
                self.phase = "aborted"                  # no brake, no move: what stopped it takes over
            return
        self.done, self.ok = True, False
        self.message = f"aborted: {reason}; nothing applied"
        self.phase = "aborted"
        self.restore_pending = restore
        if restore:
            self.message += "; returning to the previous reference"
        self.loop.report.log("warn", f"dynamics identification {self.message}")

    # ------------------------------------------------------------------ reporting
    def status(self):
        if self.phase == "preparing":
            return "choosing the excitation"
        if self.phase == "excite":
            te = self.loop.state.t - self.t0
            what = ("excitation" if te < self.T_id else "validation" if te < self.T_id + self.T_val
                    else "slow excitation")
            return f"{what} {te:.1f} / {self.T_id + self.T_val + self.T_slow:.1f} s"
        if self.phase == "brake":
            return f"{self.message} (braking before moving back)"
        if self.phase == "return":
            return f"{self.message} (moving back)"
        if self.phase == "solving":
            return "solving (the arm holds the position the excitation started from)"
        return self.message or self.phase

    def result_text(self):
        terms = self.estimate.joint_terms(self.model)
        f = lambda a: np.array2string(np.asarray(a), precision=3, suppress_small=True)  # noqa: E731

        def g(term):                                    # relative std [%] of a term, per joint
            val, sd = term
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.array2string(100.0 * np.asarray(sd) / np.abs(val), precision=1, suppress_small=True)
        v = self.validation
        ratio = np.max(v["rms_identified"] / np.maximum(v["rms_urdf"], 1e-12))
        vs = f"vs {np.array2string(np.asarray(self.bands), precision=4)} rad/s, " if np.ndim(self.bands) else ""
        return (f"Ia {f(terms['Ia'][0])} kg m^2, fv {f(terms['fv'][0])} N m s/rad, fc {f(terms['fc'][0])} N m, {vs}"
                f"offset {f(terms['off'][0])} N m (model order); relative std [%] Ia {g(terms['Ia'])}, "
                f"fv {g(terms['fv'])}, fc {g(terms['fc'])}; validation torque RMS {f(v['rms_identified'])} "
                f"N m against {f(v['rms_urdf'])} with the URDF alone (worst ratio {ratio:.2f}); "
                f"cond {self.estimate.cond:.0f}" + (f"; {self.gaps}" if self.gaps else "")
                + (f"; {'; '.join(self.notes)}" if self.notes else ""))
