"""The envelope stage: the Cartesian safety envelope (control/envelope.py: workspace planes, frame speed and
force limits, the controlled stop) in the cycle, before and after the safety filter.

Reads: the cycle's state (q, v) and dt, the law's command, whether the law compensates gravity, the safety
filter's effort limits, rate limit and command period.  Writes: the command (apply: the filter's target;
enforce: the command sent back within this step's rows).  Raises: `stop(run_reason, goal_message, restore)`
(the loop's port) when a controlled stop starts.

Guarantees (control/envelope.py says how): no push outward across a plane or beyond a speed limit; the
repulsion and damping continuous; the force limit last; violations adding up to stop_time become a stop
(damping to rest, then a hold) that only resume() leaves.  After the filter the envelope wins over the
torque-rate limit (its correction of the command sent is not rate-limited; a step where it moved the
command by more than the rate allows is counted: envelope.rate_exceeded) and the filter then rate-limits
the next command from the one sent.
"""
import numpy as np

from ..envelope import SafetyEnvelope


class EnvelopeStage:
    """See the module docstring."""

    def __init__(self, model, params, safety, report, stop):
        self.env = SafetyEnvelope(model, params)
        self.safety, self.report, self._stop = safety, report, stop

    @property
    def enabled(self):
        return self.env.enabled

    @property
    def speed_rows(self):
        return self.env.speed_rows

    @property
    def stopping(self):
        return self.env.stopping

    def stop(self, reason):
        self.env.stop(reason)

    def resume(self):
        return self.env.resume()

    def reference_speed_ratio(self, q, v):
        return self.env.reference_speed_ratio(q, v)

    def apply(self, tau, st, dt, gravity_in_tau):
        """The envelope on the law's command; a stop that starts here is logged, counted and raised."""
        env = self.env
        was = env.state
        tau = env.apply(tau, st.q, st.v, dt, gravity_in_tau, self.safety.limit)
        if env.state == "stopping" and was not in ("stopping", "stopped"):
            self.report.counts["envelope.stops"] += 1
            self.report.log("error", f"safety envelope: {env.stop_reason}: stopping the arm (damping to rest, "
                                     "then holding); ~/resume to go on")
            self._stop("safety envelope stop", f"safety envelope stop: {env.stop_reason}", False)
        return tau

    def enforce(self, tau, prev, dt_rate):
        """The safety filter's output back within the envelope (SafetyEnvelope.enforce: the rate limit
        must not undo the envelope's correction); the filter then rate-limits the next command from the
        one sent."""
        out = self.env.enforce(tau, self.safety.limit)
        if out is tau:
            return tau
        self.safety.hold(out)
        if prev is not None:
            step = self.safety.rate * min(dt_rate, self.safety.command_period)
            if np.any(np.abs(out - prev) > step * (1.0 + 1e-9) + 1e-12):
                self.env.counts["rate_exceeded"] = self.env.counts.get("rate_exceeded", 0) + 1
        return out

    def status(self):
        """(2, text) during a stop, else None."""
        env = self.env
        if env.stopping:
            return 2, (f"safety envelope stop ({env.state}, {env.counts.get('stops', 0)} in all): "
                       f"{env.stop_reason}; ~/resume to go on")
        return None

    def diagnostics(self):
        env = self.env
        if not env.enabled:
            return []
        kv = [("envelope.state", env.state), ("envelope.stops", str(env.counts.get("stops", 0))),
              ("envelope.min_clearance", f"{env.min_clearance:.4f}"),
              ("envelope.speed_ratio", f"{env.speed_ratio:.3f}")]
        return kv + [(f"envelope.{k}", str(n)) for k, n in sorted(env.counts.items()) if k != "stops"]
