"""The cycle record: what one control cycle reads and writes, preallocated once (Pinocchio's Data idea).

    c = Cycle(n)
    c.q, c.v, c.state          # the latest valid measurement (model order; State views q and v)
    c.effort, c.have_effort    # the measured joint torques of that state (payload identification)
    c.seq, c.stamp             # how many valid states so far; the latest one's header stamp [s] or None
    c.have_state               # a valid state has arrived since construction
    c.now, c.t                 # this cycle's steady-clock and control-clock time [s]
    c.dt, c.dt_rate            # the control period (the law's, the ramps', the envelope's, the tank's) and
                               # the time since the last command left (the torque-rate limit's)
    c.tau                      # the command sent last (model order); the output stage writes it
    c.ramps                    # safe-command steps so far (a stage that integrates the applied torque,
                               # the observer, restarts when it changed: the torque left the law)

Who writes what: the supervisor writes the state fields (update_state); the loop's clock (tick, ramped,
sent) writes the times; the output stage writes tau and ramps.  Every other stage reads them.

One clock for the cycle: every stage's dt is the period of the control clock `t` (the node's clock: sim
time under use_sim_time; the robot's time on the Franka), so a lockstep plant run faster or slower than
real time gets the same commands.  Only the watchdog, the log throttling and the safe-command ramp run
on `now` (the steady clock: a dead driver is a wall-clock event); the first law step after safe-command
steps counts its dt from the last of them on `now` (they carry no control-clock time).
"""
import numpy as np

from ..laws.base import State

FIRST_DT = 0.001       # s: a step's dt when nothing before it is known (activation, after a safe ramp on a
                       # clock the caller did not report)
MAX_DT = 0.1           # s: a dt is clamped to [1e-6, MAX_DT] (a stall is the watchdog's business)


class Cycle:
    """See the module docstring."""

    def __init__(self, n):
        self.q, self.v = np.zeros(n), np.zeros(n)
        self.state = State(self.q, self.v, 0.0)
        self.effort = np.zeros(n)
        self.have_effort = False
        self.have_state = False
        self.seq, self.stamp = 0, None
        self.tau = np.zeros(n)
        self.ramps = 0
        self.now, self.t = 0.0, 0.0
        self.dt = self.dt_rate = FIRST_DT
        self.restart()

    def restart(self):
        """Activation: nothing is known about the previous command's time."""
        self.last_step = None          # `now` of the last step (the watchdog's stall check)
        self.last_t = None             # control-clock time of the last law step
        self.last_ramp = None          # `now` of the last safe-command step since then
        self.last_pub = None           # `now` when the last command left
        self.last_sent_t = None        # the same on the control clock (None: unknown)

    def tick(self, now, t):
        """A law step at `now` (steady) and `t` (control clock): sets dt and dt_rate.  The rate limit
        counts from when the last command left, on the same clock: sent(now, t) from the caller (the
        node: after each publish), else this step's time; after a safe-command ramp with no sent()
        report, from the steady clock's record of it."""
        tc = now if t is None else t
        # (each clamped to [1e-6, MAX_DT]; inline: this runs every cycle)
        if self.last_t is not None:
            self.dt = min(max(tc - self.last_t, 1e-6), MAX_DT)
        elif self.last_ramp is not None:                  # after safe-command steps (they run on `now`)
            self.dt = min(max(now - self.last_ramp, 1e-6), MAX_DT)
        else:
            self.dt = FIRST_DT
        if self.last_sent_t is not None:
            self.dt_rate = min(max(tc - self.last_sent_t, 1e-6), MAX_DT)
        elif self.last_pub is not None:
            self.dt_rate = min(max(now - self.last_pub, 1e-6), MAX_DT)
        else:
            self.dt_rate = FIRST_DT
        self.now, self.t = now, t
        self.state.t = t
        self.last_t = tc
        self.last_ramp = None
        self.last_step = now
        self.last_pub = now
        self.last_sent_t = tc

    def ramped(self, now):
        """A safe-command step left at `now` (steady clock only): the law's next step counts from here."""
        self.ramps += 1
        self.last_step = now
        self.last_t = None
        self.last_ramp = now
        self.last_pub = now
        self.last_sent_t = None                           # (the caller's sent(now, t) sets it)

    def sent(self, now, t=None):
        """The command of the last step left at `now` (steady clock) and `t` (the control clock, when the
        caller has it): the rate limit's dt counts from there."""
        self.last_pub = now
        if t is not None:
            self.last_sent_t = t
