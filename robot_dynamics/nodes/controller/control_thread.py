"""The controller node's control thread (nodes/control_path.py waits on the joint-state subscription):
each joint state (its serialized bytes, read in place by nodes/cdr.py) is mapped and handed to the
ControlLoop, the loop steps on the newest of those taken together and the command is published
(nodes/controller/outputs.py); the thread's wake-ups without a message run the `trigger: timer`
clock, the watchdog (stale input: the safe command, repeated) and the safe-command ramp.  With
use_sim_time it takes /clock itself, and it takes the F/T wrench, each before the step of the same
wake-up.

Reads: the joint states, /clock, the wrench (bytes), the node's configured state `c`.  Writes: the
command, ~/state and the other outputs, the loop's state and wrench.  Guarantees: everything here
runs under the node's lock, so a reference, parameter change or lifecycle transition from the
executor applies whole between two steps; an exception is counted and answered with the safe
command (`_on_exception`), never raised into the thread.  A mixin of TorqueControllerNode."""
import struct
import time

import numpy as np
from geometry_msgs.msg import WrenchStamped
from rclpy.clock import ClockType
from rclpy.serialization import deserialize_message
from rclpy.time import Time
from sensor_msgs.msg import JointState

from ..cdr import read_wrench_stamped
from ..common import wrench_to_array

SAFE_REPUBLISH_PERIOD = 0.05     # s: while the input is stale the safe command is sent again at this period
_STAMP = struct.Struct("<iI")   # a serialized builtin_interfaces/Time after the 4-byte CDR header


class ControlThread:
    """The control thread's handlers and the step (see the module docstring)."""

    def _on_clock(self, raw, now):
        """/clock (serialized) on the control thread: the node's ROS time, as rclpy's TimeSource sets it."""
        sec, nsec = _STAMP.unpack_from(raw, 4)
        t = Time(seconds=sec, nanoseconds=nsec, clock_type=ClockType.ROS_TIME)
        ts = self._time_source
        ts._last_time_set = t
        for clock in ts._associated_clocks:
            clock.set_ros_time_override(t)

    def _on_wrench_raw(self, raw, now):
        """The F/T sensor's newest WrenchStamped (serialized), on the control thread, before the step
        of the same wake-up; another encapsulation goes through rclpy."""
        c = self.c
        if c is None:
            return
        r = read_wrench_stamped(raw)
        if r is None:
            msg = deserialize_message(raw, WrenchStamped)
            r = msg.header.frame_id, wrench_to_array(msg.wrench)
        with self._lock:
            if c is self.c:
                c.loop.estimation.set_wrench(np.array(r[1]), r[0], now)


    # ---------------------------------------------------------------- the control thread
    def _on_joint_state(self, raw, now, last=True):
        """A joint state (serialized bytes), on the control thread: map, hand to the loop, and step on
        the newest of those taken together (`last`; the older ones are counted, not stepped on)."""
        c = self.c
        if c is None:
            return
        with self._lock:
            if c is not self.c:                         # cleaned up while this message waited
                return
            r, mapper = c.cdr, c.mapper
            try:
                parsed = r.parse(raw)
            except (ValueError, IndexError) as e:       # a truncated or inconsistent buffer
                parsed = False
                if c.cdr_fallbacks == 0:
                    self._log.warning(f"joint state bytes not read ({e}): deserialising with rclpy instead")
            if parsed:
                ok = mapper.map_cdr(r)
                sec, nsec = r.sec, r.nanosec
            else:                                       # another encapsulation: rclpy reads it
                c.cdr_fallbacks += 1
                msg = deserialize_message(raw, JointState)
                ok = mapper.map(msg)
                st = msg.header.stamp
                sec, nsec = st.sec, st.nanosec
            loop = c.loop
            if self.active and not c.timer_trigger:
                self._overdue_watchdog(loop, now)
            if ok:                                     # (the effort: measured torques, for the
                loop.update_state(mapper.q, mapper.v, now,      # identification runs, effort_link_side)
                                  (sec + nsec * 1e-9) if (sec or nsec) else None,
                                  mapper.effort if mapper.have_effort else None)
            else:
                loop.reject_state(mapper.reason, mapper.detail, now)
            if last:
                if self.active and not c.timer_trigger:
                    if ok:
                        self._step(now)
                    else:
                        self._publish_safe()
                self._schedule(now)

    def _overdue_watchdog(self, loop, now):
        """Before a state is taken: the watchdog's wake-up (stale_at, `_schedule`) that was due before
        `now` and has not run (the thread woke late, or woke for this message first: the path hands
        the messages over before an overdue wake-up) runs now, as it would have on time: the trip and
        its safe command, so that the state taken next is a fresh state after a trip (the law restarts
        and ramps, `Supervisor.fresh`).  Without this the step on that state found two steps more than
        watchdog_timeout apart (`Supervisor.stalled`) and sent the safe command instead: a fresh state
        went unanswered whenever the thread's wake-up lost the race with the next state (issue 45: a
        lockstep driver giving up after watchdog_timeout lost two states for one dropped on the wire)."""
        sup = loop.supervisor
        if sup.watchdog == "ok" and loop.cycle.have_state and not sup.latest_rejected and now > sup.stale_at():
            sup.check_watchdog(now)
            self._publish_safe()

    def _on_wakeup(self, now):
        """The control thread's wake-up without a message: a `trigger: timer` step, or the watchdog
        (stale input: the safe command, again every SAFE_REPUBLISH_PERIOD), or the next step of the
        safe-command ramp."""
        c = self.c
        if c is None:
            return
        with self._lock:
            if c is not self.c or not self.active:
                return
            loop = c.loop
            if c.timer_trigger and now >= c.next_tick:
                c.next_tick += c.loop.period
                if c.next_tick <= now:                  # late by a period or more: re-anchor
                    c.next_tick = now + c.loop.period
                if loop.supervisor.stale(now):
                    loop.supervisor.check_watchdog(now)
                    self._publish_safe()
                else:
                    self._step(now)
            elif c.safe_ramping:
                self._publish_safe()
            elif loop.supervisor.check_watchdog(now) and (loop.supervisor.watchdog != "ok" or not loop.cycle.have_state):
                self._publish_safe()
            self._schedule(now)

    def _schedule(self, now):
        """The control thread's next wake-up (under the lock): the next timer step; the next safe-ramp
        step; the moment the latest state goes stale (the watchdog trips on time, not on a poll);
        while stale, the next repeat of the safe command.  None while inactive."""
        c = self.c
        if not self.active:
            c.path.wake_at(None)
            return
        loop = c.loop
        if c.timer_trigger:
            t = c.next_tick
        elif c.safe_ramping:
            t = now + c.safe_period
        elif loop.cycle.have_state and loop.supervisor.watchdog == "ok" and not loop.supervisor.latest_rejected:
            t = loop.supervisor.stale_at() + 1e-4
        else:
            t = now + min(SAFE_REPUBLISH_PERIOD, 0.5 * loop.param("watchdog_timeout"))
        c.path.wake_at(t)

    def _step(self, now):
        """The loop's step (law -> safety filter, or the safe command) -> publish.  Under the lock."""
        c = self.c
        t0 = time.perf_counter()
        try:
            if c.partners:                                                # a cell's other arms
                self._partners_step(c, now)
            c.stamp_ns = ns = self._clock_handle.get_now().nanoseconds   # the one clock read: the law's
            tau, safe = c.loop.step(now, ns * 1e-9)                       # time and the message stamps
            self._send(tau, safe)
            c.out.observer(c.loop, now, ns, safe)
            run = c.loop.runs.payload
            if run is not None and run.ok and run is not self._payload_published:
                self._publish_payload(run)
        except Exception as e:                         # noqa: BLE001
            self._on_exception("control_step", e)
            return
        self._gc_ctl.tick(now)                         # rt_gc_mode manual: after the command left
        if safe:
            return
        lat = time.perf_counter() - t0
        c.stats_steps += 1
        c.stats_lat_sum += lat
        if lat > c.stats_lat_max:
            c.stats_lat_max = lat

    def _send(self, tau, safe):
        """Publish, tell the loop when the command left (the rate limit counts from there), and keep
        the safe ramp going (control-thread wake-ups) while a safe command has not reached its target."""
        c = self.c
        self._publish(tau, safe)
        c.loop.sent(time.monotonic(), self._clock_handle.get_now().nanoseconds * 1e-9)
        if safe:
            c.safe_ramping = not c.loop.output.safe_reached
        return c.loop.output.safe_reached if safe else True

    def _safe_torque(self):
        """The safe command in model order: zero, or g(q) at the last valid q, clipped to the limits."""
        return self.c.loop.output.safe_torque()

    def _publish_safe(self):
        """Publish one step of the safe command (ControlLoop.safe_step: from the last command sent
        toward zero or g(q) at the torque-rate limit, at most rate x one control period per message).
        Until it is reached, the control thread publishes the next steps at the control period.
        Returns True once the command equals the safe torque."""
        c = self.c
        if c is None:
            return True
        tau = c.loop.output.safe_step(time.monotonic())
        c.stamp_ns = self._clock_handle.get_now().nanoseconds
        return self._send(tau, True)

    def _publish(self, tau, safe=False):
        """tau in model order -> the command (and ~/joint_command, ~/state) in `joints` order, stamped
        with c.stamp_ns (the caller's clock read)."""
        c = self.c
        if not safe:
            c.safe_ramping = False                     # a control step took over from the safe ramp
        c.out.command(tau, c.stamp_ns, safe, self._publish_state, c.loop.info)

