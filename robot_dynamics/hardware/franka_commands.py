"""The Franka bridge's command path in topic mode, without ROS: what it applies of the controller's
commands and when it stops the arm.

- `GravityGuard` / `guard_reason`: refuses commands that carry g(q) (the Franka adds gravity itself; a
  law with `compensate_gravity: true` would lift the arm with twice its weight), and says what it measured.
- `CommandGate`: start ramp, the bridge's own watchdog on the controller's commands (then a damping
  stop), explicit resume without a torque jump.
- the bridge's states (WAITING, RUNNING, STOPPED, REFUSED, ERROR, IDLE).

Reads: the commands (7 torques, robot joint order [N m], WITHOUT gravity), the joint speeds, g(q),
`time.monotonic()` times.  Writes: the torque to apply.  Guarantees: a non-finite or wrong-length
command is rejected and counted, never applied; every output is clipped to the effort limits; a
stop is left only by an explicit `resume()`, and what follows is blended in from the torque applied.
"""
import threading

import numpy as np

N = 7


class GravityGuard:
    """Trips when the commanded torque looks like g(q): its component along g(q) is more than
    `fraction` of |g(q)| and what is left is smaller than `residual` of the command, for `persist`
    seconds, at joint speeds up to `max_speed`.  Off where |g(q)| < `min_gravity` N m (arm folded over
    its base: g tells nothing).  The Franka adds gravity itself, so such a command lifts the arm with
    its weight: the arm soon moves fast, so there is no speed limit by default (with one of 0.5 rad/s,
    an arm thrown while commands arrived late was only caught at its joint limits, 1.4 rad away)."""

    def __init__(self, fraction=0.5, residual=0.5, min_gravity=3.0, max_speed=np.inf, persist=0.02):
        self.fraction, self.residual, self.min_gravity = fraction, residual, min_gravity
        self.max_speed, self.persist = max_speed, persist
        self.since = None
        self.ratio = 0.0

    def check(self, tau, g, dq, now):
        gg = float(g @ g)
        if gg < self.min_gravity ** 2 or float(np.max(np.abs(dq))) > self.max_speed:
            self.since = None
            return False
        r = float(tau @ g) / gg
        self.ratio = r
        resid = tau - r * g
        looks_like_g = r > self.fraction and float(resid @ resid) < (self.residual ** 2) * float(tau @ tau)
        if not looks_like_g:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since >= self.persist

    def reset(self):
        self.since = None


def guard_reason(ratio, dq, gravity_checked_false, controller="", velocity_limits=None):
    """The gravity guard's stop message from what it measured: the fraction of g(q) the commands
    carried (`ratio`), the fastest joint and its speed (`dq`, and its velocity limit when given).  Where
    the controller's compensate_gravity was read and is false (`gravity_checked_false`), double
    compensation is ruled out and the message says what the measurement points at instead: a law
    pushing the arm along gravity (diverging, or far from its target)."""
    dq = np.abs(np.asarray(dq, float))
    j = int(np.argmax(dq))
    speed = f"joint {j + 1} at {dq[j]:.2f} rad/s"
    if velocity_limits is not None and np.isfinite(velocity_limits[j]) and velocity_limits[j] > 0:
        speed += f" ({dq[j] / velocity_limits[j]:.1f} x its velocity limit)"
    measured = f"the commands carried g(q) (fraction {ratio:.2f}) for 20 ms, {speed}"
    if gravity_checked_false:
        return (f"gravity guard: {measured}; {controller or 'the controller'} reports compensate_gravity "
                "false, so not double compensation: its law pushes the arm along gravity (unstable gains "
                "or a set-point step too large, or a far target it lags); stopping")
    return (f"gravity guard: {measured}, but the Franka adds gravity itself: set <controller>."
            "compensate_gravity: false (or gravity_guard: false where a law legitimately commands "
            "torques along g(q)); stopping")


# ------------------------------------------------------------------------------------------------
# the command path of topic mode
# ------------------------------------------------------------------------------------------------
WAITING, RUNNING, STOPPED, REFUSED, ERROR, IDLE = "waiting", "running", "stopped", "refused", "error", "idle"


class CommandGate:
    """What the bridge applies, from the controller's commands (topic mode).

    waiting  -> no command yet: the damping safe command (zero at rest: the robot holds its weight)
    running  -> the command, blended in from the torque applied when it started over `ramp_time`
    stopped  -> no command for `command_timeout` (controller or its topics died), or the gravity
                guard tripped: damping safe command -D dq, until `resume()` (an explicit service)
    Resume blends from the torque being applied to the command over `ramp_time`: no jump.
    """

    def __init__(self, command_timeout=0.1, ramp_time=0.5, stop_damping=None, effort_limits=None):
        self.command_timeout = float(command_timeout)
        self.ramp_time = float(ramp_time)
        self.stop_damping = np.asarray(stop_damping if stop_damping is not None
                                       else [20.0, 20.0, 20.0, 20.0, 5.0, 5.0, 2.0], float)
        self.effort_limits = np.asarray(effort_limits if effort_limits is not None
                                        else [87.0] * 4 + [12.0] * 3, float)
        self.state = WAITING
        self.reason = ""
        self.permitted = True           # False: commands are not applied yet (checks pending / failed)
        self.last_cmd = None
        self.last_cmd_time = None
        self.applied = np.zeros(N)
        self.blend_from = np.zeros(N)
        self.blend_start = None
        self.n_watchdog = 0
        self.n_rejected = 0
        self.stop_time = None           # monotonic time of the last watchdog trip
        self.stop_q = None              # joint positions at the last stop (when the caller gave them)
        self.stop_dq = None             # and the joint speeds then
        self.lock = threading.Lock()

    def _safe(self, dq):
        return np.clip(-self.stop_damping * dq, -self.effort_limits, self.effort_limits)

    def on_command(self, tau, now):
        """A command arrived; returns the torque to apply now, or None (not running)."""
        tau = np.asarray(tau, float)
        with self.lock:
            if tau.shape != (N,) or not np.all(np.isfinite(tau)):
                self.n_rejected += 1
                return None
            self.last_cmd = np.clip(tau, -self.effort_limits, self.effort_limits)
            self.last_cmd_time = now
            if self.state == WAITING and self.permitted:
                self.state = RUNNING
                self.blend_from = self.applied.copy()
                self.blend_start = now
            if self.state != RUNNING:
                return None
            out = self._blend(now)
            self.applied = out
            return out

    def _blend(self, now):
        a = 1.0 if self.ramp_time <= 0 else min(1.0, (now - self.blend_start) / self.ramp_time)
        if a >= 1.0:
            return self.last_cmd
        return self.blend_from + a * (self.last_cmd - self.blend_from)

    def on_cycle(self, dq, now, q=None):
        """Every robot cycle: returns the torque to apply, or None when the last command stands.
        `q` (optional): the joint positions, kept as `stop_q` (and dq as `stop_dq`) when the watchdog
        trips."""
        with self.lock:
            if self.state == RUNNING:
                if now - self.last_cmd_time > self.command_timeout:
                    self.state, self.reason = STOPPED, (f"no command for {self.command_timeout} s "
                                                        "(controller or its topics down): stopping")
                    self.n_watchdog += 1
                    self.stop_time = now
                    self.stop_q = None if q is None else np.array(q, float)
                    self.stop_dq = np.array(dq, float)
                else:
                    return None
            out = self._safe(dq)
            self.applied = out
            return out

    def stop(self, reason, now, q=None, dq=None):
        with self.lock:
            if self.state != STOPPED:
                self.stop_time = now
                self.stop_q = None if q is None else np.array(q, float)
                self.stop_dq = None if dq is None else np.array(dq, float)
            self.state, self.reason = STOPPED, reason

    def resume(self, now):
        """Explicit resume (service): back to waiting; the next command is blended in from the torque
        applied now.  Returns False if not stopped."""
        with self.lock:
            if self.state not in (STOPPED, WAITING):
                return False
            self.state, self.reason = WAITING, ""
            self.last_cmd = None
            return True

    def restart(self):
        """After the torque motion was (re)started from zero torque."""
        with self.lock:
            self.state, self.reason = WAITING, ""
            self.applied = np.zeros(N)
            self.last_cmd = None


