"""The output stage: the safe command and the ramp toward it, the last word on what leaves the loop when
the law does not run (inactive, no or stale state, a trip, a speed stop, an identification run's brake).

Reads: the cycle's q, v, have_state and clock (last_pub); the parameter safe_command; the safety filter's
effort limits, rate limit and last command sent (`prev`).  Writes: the command (a preallocated buffer),
the safety filter's `prev` (safety.hold: the next filtered command moves from the one sent), the cycle's
clock (ramped: the law's next dt counts from here) and `ramps`.

Guarantees: the safe command is zero or g(q) at the last valid q, clipped to the effort limits; every
step moves from the last command sent toward it at the torque-rate limit x at most one control period
(a Franka-style rate check never sees a discontinuity), exactly onto it once within reach
(`safe_reached`).  The stops' damping torque is subtracted from the safe torque and clipped likewise.
"""
import numpy as np


class Output:
    """See the module docstring."""

    def __init__(self, model, p, safety, gravity_backend, cycle, period):
        n = model.nv
        self._p, self.safety, self.gravity_backend, self.c, self.period = p, safety, gravity_backend, cycle, period
        self.safe = np.zeros(n)                    # the safe torque (target of the ramp)
        self.safe_out = np.zeros(n)                # the rate-limited step toward it actually sent
        self._zero = np.zeros(n)
        self.safe_reached = False
        self.safe_published = 0

    def safe_torque(self):
        """The safe command in model order: zero, or g(q) at the last valid q, clipped to the limits."""
        if self._p["safe_command"] == "gravity" and self.c.have_state:
            self.safe[:] = self.gravity_backend.gravity(self.c.q)
            np.clip(self.safe, -self.safety.limit, self.safety.limit, out=self.safe)
        else:
            self.safe.fill(0.0)
        return self.safe

    def safe_step(self, now, damping=None):
        """One step of the safe command (`damping`: a torque subtracted from the safe torque, D v of a
        stop; the target clipped to the effort limits).  Returns the command (model order)."""
        target = self.safe_torque()
        if damping is not None:
            target -= damping
            np.clip(target, -self.safety.limit, self.safety.limit, out=target)
        return self.ramp_to(target, now)

    def ramp_to(self, target, now, dt=None):
        """The command from the last one sent toward `target` at the torque-rate limit (see safe_step)."""
        prev = self.safety.prev
        tau = self.safe_out
        if prev is None:                                 # nothing sent yet: the drive holds zero
            prev = self._zero
        c = self.c
        if dt is None:
            dt = self.period if c.last_pub is None else min(max(now - c.last_pub, 0.0), self.period)
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
        c.ramped(now)
        return tau

    def ramp_time(self):
        """Upper bound [s] of the ramp from any command to the safe one (the limit span / rate)."""
        return float(np.max(2.0 * self.safety.limit / np.maximum(self.safety.rate, 1e-9)))
