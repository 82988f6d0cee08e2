"""The supervisor stage: is the law allowed to run this cycle?  The watchdog, stale and rejected input,
a stalled caller, the joint speed stop.  The first stage of every cycle.

Reads: the cycle's state (q, v), `now`, the parameters watchdog_timeout, safe_command,
safety.joint_speed_stop, safety.stop_damping.  Writes: the cycle's state fields (update_state), its own
mode (`watchdog`: waiting | ok | tripped; `speed_stop`: the reason while the joint speed stop acts).
Raises: `stop(run_reason, goal_message, restore)` (the loop's port: identification runs abort, a goal
ends) when a trip or a speed stop starts.

Guarantees: the law never runs on a state older than watchdog_timeout (steady clock), on a rejected
state, before the first state, or after two steps more than watchdog_timeout apart (a stall of the
caller); each trip is counted once (watchdog_trips) and logged throttled.  Joint speed stop (a Franka's
joint-velocity reflex): a valid state with a joint faster than safety.joint_speed_stop x its velocity limit
replaces the law's command by the safe command with joint damping (safety.stop_damping, at most STOP_RATE
M_ii), latched until resume() at rest (REST_VELOCITY); with the envelope on, its stop takes over instead
(its damping and its planes).
"""
import numpy as np

from .safety import _any

REST_VELOCITY = 0.02       # rad/s (m/s): ~/resume leaves a joint speed stop with every joint below this
STOP_RATE = 25.0           # 1/s: the joint speed stop's damping is at most this x M_ii per joint


class Supervisor:
    """See the module docstring."""

    def __init__(self, model, p, report, cycle, gravity_backend, stop, labels=None):
        self.model, self._p, self.report, self.c = model, p, report, cycle
        self.gravity_backend = gravity_backend
        self._stop = stop
        labels = dict(labels or {})
        self.js_label = labels.get("joint_states", "the joint states")
        self.last_ok = -float("inf")               # time of the last valid joint state
        self.latest_rejected = False
        self.watchdog = "waiting"                  # waiting | ok | tripped
        self.waiting_logged = False
        self.speed_stop = ""                       # the joint speed stop's reason while it acts, else ""
        self.damping_rate_cap = float("inf")       # 1/s: the loop's hold bound on D / M_ii (hold_omega)
        self.tripped_since_reset = False
        self.reset_cause = "the watchdog was tripped (no valid joint state)"
        self.trip_why = ""
        self.js_episode = report.episode("joint_states")
        self.wd_episode = report.episode("watchdog")
        self.speed_limits()

    def activate(self):
        self.watchdog = "waiting"
        self.speed_stop = ""

    # ------------------------------------------------------------------ inputs
    def update_state(self, q, v, now, stamp=None, effort=None):
        """A valid joint state (model order; the values are copied into the cycle record)."""
        c = self.c
        c.q[:] = q
        c.v[:] = v
        if effort is not None:
            c.effort[:] = effort
            c.have_effort = bool(np.all(np.isfinite(c.effort)))
        else:
            c.have_effort = False
        c.seq += 1
        c.stamp = stamp
        c.have_state = True
        self.last_ok = now
        self.latest_rejected = False
        if self.js_episode.reason:
            self.js_episode.end(lambda e: f"joint states valid again after {e.count} rejected "
                                          f"message(s) ({e.reason})")

    def reject_state(self, reason, detail, now):
        """An invalid joint state: counted (rejected.joint_states.<reason>), logged throttled; the next
        step publishes the safe command."""
        self.latest_rejected = True
        self.report.counts[f"rejected.joint_states.{reason}"] += 1
        self.js_episode.occur(reason, now, "error", lambda extra: (
            f"joint state rejected ({reason}): {detail}; publishing the safe command "
            f"({self._p['safe_command']}) until valid joint states arrive{extra}"))

    @property
    def rejecting(self):
        """The reason of the current joint-state rejection episode, or ""."""
        return self.js_episode.reason

    def stale_at(self):
        """When the latest valid state becomes stale (the watchdog may trip after this time)."""
        return self.last_ok + self._p["watchdog_timeout"]

    def stale(self, now):
        """True when the law must not run: no state yet, the latest rejected, or older than the timeout."""
        return (not self.c.have_state or self.latest_rejected
                or now - self.last_ok > self._p["watchdog_timeout"])

    # ------------------------------------------------------------------ the watchdog
    def stalled(self, now):
        """Two control steps more than watchdog_timeout apart while running: a trip (True)."""
        last = self.c.last_step
        if last is not None and now - last > self._p["watchdog_timeout"] and self.watchdog == "ok":
            self.trip(now, f"no control step for {now - last:.3f} s (watchdog_timeout "
                           f"{self._p['watchdog_timeout']} s)")
            return True
        return False

    def check_watchdog(self, now):
        """Trip the watchdog if the state is stale (counts, logs).  True when the law must not run."""
        timeout = self._p["watchdog_timeout"]
        age = now - self.last_ok
        if self.c.have_state and age <= timeout and not self.latest_rejected:
            return False
        if self.watchdog == "waiting" and not self.c.have_state:
            if not self.waiting_logged:
                self.waiting_logged = True
                what = "zero torque (the safe command 'gravity' needs a joint state)" \
                    if self._p["safe_command"] == "gravity" else "the safe command (zero torque)"
                self.report.log("warn", f"no joint state received on {self.js_label} yet: publishing {what}")
            return True
        if age > timeout and (self.watchdog != "tripped" or not self.wd_episode.logged):
            rejecting = self.js_episode.reason
            last = f"; the last message was rejected ({rejecting})" if rejecting else ""
            self.trip(now, f"no valid joint state on {self.js_label} for {age:.3f} s (watchdog_timeout "
                           f"{timeout} s){last}")
        return True

    def trip(self, now, why):
        """Trip (counted once per trip) and log, throttled; called again while tripped only to log a
        trip whose line was suppressed."""
        retry = self.watchdog == "tripped"
        if not retry:
            self.watchdog = "tripped"
            self.report.counts["watchdog_trips"] += 1
            self.trip_why = why
            self.report.act("watchdog_trip", now, why)
            self.tripped_since_reset = True
            self.reset_cause = "the watchdog was tripped (no valid joint state)"
            self._stop("watchdog tripped", f"watchdog tripped: {why}", True)
        self.wd_episode.occur("tripped", now, "error", lambda extra: (
            f"watchdog: {why}: publishing the safe command ({self._p['safe_command']}){extra}"), retry)

    def fresh(self):
        """The law runs this cycle: True when it follows a trip (the caller resets the law and ramps)."""
        if self.watchdog == "ok":
            return False
        was = self.watchdog == "tripped"
        if was:
            self.wd_episode.end(lambda e: (
                f"watchdog: fresh joint states again; holding the current position, ramping up "
                f"over {self._p['ramp_time']} s"))
        self.watchdog = "ok"
        return was

    def take_reset(self):
        """(tripped since the law last held, why): read and cleared when the law is reset."""
        tripped, self.tripped_since_reset = self.tripped_since_reset, False
        return tripped, self.reset_cause

    # ------------------------------------------------------------------ the joint speed stop
    def speed_limits(self):
        """The joint speed stop's thresholds (model order): safety.joint_speed_stop x the model's
        velocity limits, inf for a joint without one (none, <= 0 or not finite: not watched)."""
        f = self._p["safety.joint_speed_stop"]
        vl = np.asarray(self.model.velocity_limits, dtype=float)
        watched = np.isfinite(vl) & (vl > 0) & (f > 0)
        self._v_stop = np.where(watched, f * np.where(watched, vl, 1.0), np.inf)
        self._inv_v_stop = 1.0 / self._v_stop          # 0 for a joint not watched
        self._v_abs = np.empty(self.model.nv)
        self.speed_watched = bool(watched.any())

    def overspeed(self, now, envelope):
        """A valid state with a joint above safety.joint_speed_stop x its velocity limit: the joint speed
        stop starts (counted as safety.joint_speed_stops, logged, identification runs end).  The law's
        command is not sent from here on: the arm is faster than anything it may ask for, the closed loop
        is not what the law was designed for (a diverging loop: gains too high for the delays, a model far
        from the arm, a stalled caller).  With the envelope on, its stop (its damping, its repulsion: the
        frames stay on their side of the planes while the arm stops) takes over: False."""
        v = self.c.v
        y = np.multiply(v, self._inv_v_stop, out=self._v_abs)
        if y.dot(y) <= 1.0:                          # sufficient: every |v_j| within its threshold
            return False
        va = np.abs(v, out=self._v_abs)
        if not _any(va > self._v_stop):
            return False
        if envelope.stopping:
            return False                             # the envelope's stop is on: it goes on
        j = int(np.argmax(va / self._v_stop))
        vl = float(np.asarray(self.model.velocity_limits, dtype=float)[j])
        f = self._p["safety.joint_speed_stop"]
        why = f"{self.model.joint_names[j]} at {v[j]:+.3f} rad/s, above {f:g} x its velocity limit {vl:g}"
        self.report.counts["safety.joint_speed_stops"] += 1
        self.report.act("joint_speed_stop", now, why)
        self._stop("joint speed stop", f"joint speed stop: {why}", False)
        if envelope.enabled:
            envelope.stop(f"joint speed stop: {why}")
            self.report.throttled("speed_stop", "error", f"joint speed stop: {why}: the safety envelope's "
                                  "stop from now on (damping to rest, then a hold); ~/resume to go on", now)
            return False
        self.speed_stop = why
        self.tripped_since_reset = True
        self.reset_cause = "the joint speed stop acted"
        self.report.throttled("speed_stop", "error", f"joint speed stop: {why}: the safe command "
                              f"({self._p['safe_command']}) with joint damping from now on; ~/resume once the "
                              "arm is at rest", now)
        return True

    def stop_damping(self):
        """The stops' joint damping at the current q: safety.stop_damping, at most STOP_RATE M_ii (a time
        constant M_ii / D of 40 ms at least, so the damping stays stable with the command applied late:
        v' = -(D/M) v(t - tau) is stable for (D/M) tau < pi/2, tau < 60 ms; on a Panda plant whose
        commands arrive 4, 5, 10 or 20 ms late a joint impedance at 400 N m/rad diverges and this stop
        brings it to rest at each; at 50 M_ii the 20 ms case did not come to rest, at the envelope's
        0.5 M_ii / period the 4 ms case did not); on a starved host at most damping_rate_cap M_ii (the loop's
        hold bound: D T / M_ii <= 1 for commands held T)."""
        M = self.gravity_backend.mass_matrix(self.c.q)
        return np.minimum(self._p["safety.stop_damping"], min(STOP_RATE, self.damping_rate_cap) * np.diagonal(M))

    def resume_speed_stop(self):
        """Leave the joint speed stop: (True, '') when left, (False, why) while the arm is not at rest,
        None when there is none."""
        if not self.speed_stop:
            return None
        vmax = float(np.max(np.abs(self.c.v)))
        if vmax >= REST_VELOCITY:
            return False, (f"joint speed stop ({self.speed_stop}): the arm is not at rest yet ("
                           f"{vmax:.3f} rad/s, at rest below {REST_VELOCITY})")
        self.report.log("info", f"joint speed stop: resumed ({self.speed_stop} before); holding the "
                                "current position")
        self.speed_stop = ""
        return True, ""

    def status(self):
        """(level, text) of the supervisor's mode while active, or None when it has nothing to say."""
        counts = self.report.counts
        if self.watchdog == "tripped":
            trips = counts["watchdog_trips"]
            return 2, (f"watchdog tripped ({trips} trip{'s' if trips != 1 else ''}): {self.trip_why}; "
                       f"publishing the safe command")
        if self.speed_stop:
            n = counts.get("safety.joint_speed_stops", 0)
            return 2, f"joint speed stop ({n} in all): {self.speed_stop}; damping to rest; ~/resume to go on"
        return None
