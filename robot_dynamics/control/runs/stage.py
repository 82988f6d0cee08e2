"""The runs stage: identification runs as plug-ins that may take over the command.  A payload
identification (runs/payload.py) or an identification of the arm's own dynamics (runs/dynamics.py) moves
the arm through the law's reference while it lasts; aborted, it first brakes (the loop's brake step:
g(q) - D v through the envelope, rate-limited), then goes back to where it started.

Reads: the loop's public state (a run is handed the loop: q, v, law, safety, the estimation's wrench, the
supervisor's mode), the parameters payload_id.*, dynamics_id.*.  Writes: the law's reference (the run's
trajectory), the model's payloads (attach / detach).  Raises: `end_goal(message)` (the loop's port) when
a run starts over a FollowJointTrajectory goal.

Guarantees: at most one run moves the arm; a run never raises into the cycle (errors.payload_id /
errors.dynamics_id, the run aborted); any stop of the loop (a trip, a speed stop, an envelope stop, a
collision, a new reference, ~/hold, deactivation) aborts it; while its brake is on the loop sends the
brake, not the law.
"""
import numpy as np


class Runs:
    """See the module docstring."""

    def __init__(self, loop, end_goal):
        self.loop = loop
        self._end_goal = end_goal
        self.payload = None                        # the current / last PayloadRun
        self.dynamics = None                       # the current / last DynamicsRun
        self.payload_estimate = None               # the last successful PayloadEstimate

    def _params(self, prefix, overrides):
        p = {k[len(prefix):]: v for k, v in self.loop.params.items() if k.startswith(prefix)}
        p.update(overrides or {})
        return p

    def _log(self, level, text):
        self.loop.report.log(level, text)

    # ------------------------------------------------------------------ starting and ending
    def start_payload_id(self, now, overrides=None):
        """Start a payload identification run with the payload_id.* parameters (overrides: {key without
        the prefix: value}).  Returns at once (ok, message: what it will do, or why it cannot start);
        the run then advances with every step()."""
        from .payload import PayloadRun
        return self._start(PayloadRun, "payload_id.", "payload", "payload identification", now, overrides)

    def start_dynamics_id(self, now, overrides=None):
        """Start an identification of the arm's own dynamics with the dynamics_id.* parameters
        (overrides: {key without the prefix: value}).  Returns at once (ok, message)."""
        from .dynamics import DynamicsRun
        return self._start(DynamicsRun, "dynamics_id.", "dynamics", "dynamics identification", now, overrides)

    def _start(self, cls, prefix, attr, what, now, overrides):
        """Build the run from the `prefix` parameters (a ValueError refuses it), end a goal in
        progress, start it, keep it as self.<attr> and log what it does.  (ok, message): ok false also
        when the run ended at its start (e.g. nothing to identify)."""
        try:
            run = cls(self.loop, self._params(prefix, overrides))
        except ValueError as e:
            return False, f"refused: {e}"
        self._end_goal(f"a {what} run started")
        msg = run.start(now, self.loop.state.t)
        setattr(self, attr, run)
        self._log("warn" if run.done else "info", f"{what} {msg}")
        return not run.done, msg

    def abort(self, reason, restore=True):
        """Abort whichever identification run (payload, dynamics) is moving the arm."""
        for run in (self.payload, self.dynamics):
            if run is not None and run.busy:
                run.abort(reason, restore=restore)

    @property
    def busy(self):
        return any(r is not None and r.busy for r in (self.payload, self.dynamics))

    @staticmethod
    def _cancel(run, what):
        if run is None or not run.busy or run.done:
            return False, f"no {what} running"
        run.abort("cancelled")
        return True, run.message

    @staticmethod
    def _status(run, what):
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

    def cancel_payload_id(self):
        """Abort a running identification (the reference held before it is restored).  (ok, message)"""
        return self._cancel(self.payload, "identification")

    def payload_status(self):
        """(a result is available, the running state or the last result / failure)."""
        return self._status(self.payload, "identification")

    def cancel_dynamics_id(self):
        """Abort a running dynamics identification (nothing applied).  (ok, message)"""
        return self._cancel(self.dynamics, "dynamics identification")

    def dynamics_status(self):
        """(a result is available, the running state or the last result / failure)."""
        return self._status(self.dynamics, "dynamics identification")

    def attach_payload_estimate(self):
        """Attach the last estimate to the model (law, safety fallback and observer use it from the
        next step).  Refused when there is none, a run is going, or its mass std is above
        payload_id.max_mass_std of its mass.  (ok, message)"""
        run = self.payload
        if run is not None and run.busy and not run.done:
            return False, "an identification is running"
        est = run.estimate if run is not None else None
        if est is None:
            return False, "no estimate (run ~/identify_payload first)"
        rel = est.mass_std / est.mass
        limit = self.loop.param("payload_id.max_mass_std")
        if rel > limit:
            return False, (f"mass std {est.mass_std:.4f} kg is {100 * rel:.1f} % of the mass, above "
                           f"payload_id.max_mass_std {limit}")
        try:
            with_inertia = est.attach(self.loop.model, name=run.name)
        except ValueError as e:
            return False, str(e)
        self.payload_estimate = est
        return True, (f"attached {run.name!r}: {est.mass:.4f} kg at {np.round(est.com, 4).tolist()} m "
                      f"({est.frame})" + ("" if with_inertia else ", a point mass (no physical inertia estimate)"))

    def detach_payload_estimate(self):
        """Detach the payload named payload_id.name from the model.  (ok, message)"""
        run = self.payload
        if run is not None and run.busy and not run.done:
            return False, "an identification is running"
        name = self.loop.param("payload_id.name") or "payload"
        model = self.loop.model
        if name not in model.payloads:
            return False, f"no payload named {name!r} attached (attached: {sorted(model.payloads)})"
        model.detach_payload(name)
        return True, f"detached {name!r}"

    # ------------------------------------------------------------------ per cycle
    def step(self, now, t):
        """Advance the busy runs; True when one is braking (the loop sends its brake, not the law)."""
        for run, what in ((self.payload, "payload_id"), (self.dynamics, "dynamics_id")):
            if run is not None and run.busy:
                try:
                    run.step(now, t)
                except Exception as e:                   # noqa: BLE001 (never the loop's problem)
                    self.loop.report.exception(what, e, now)
                    run.abort(f"{type(e).__name__}: {e}")
        return any(run is not None and run.phase == "brake" for run in (self.payload, self.dynamics))

    def diagnostics(self):
        kv = []
        run = self.payload
        if run is not None:
            kv.append(("payload_id.state", run.status()))
            if run.estimate is not None:
                kv.append(("payload_id.result", run.result_text()))
        if self.dynamics is not None:
            kv.append(("dynamics_id.state", self.dynamics.status()))
        return kv
