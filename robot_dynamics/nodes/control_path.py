"""The per-message path of the nodes that run at the robot's rate: a thread of its own that waits on
one subscription itself, takes each message and hands it to the node, with no executor work per
message (as rclcpp real-time controllers do).  The node's executor keeps everything else (parameters,
services, references, lifecycle, diagnostics, timers) on its own thread.

    sub = TakeSubscription(node, JointState, "/joint_states", qos)    # no executor ever waits on it
    msg = sub.take()                                                   # the next message, or None

    path = ControlPath(node, sub, on_message, on_wakeup=None, name="control")   # on_message(msg, now, last)
                                                                                # spin=s: see below
    path.start(rt_settings)      # the thread (real-time policy / affinity applied to it when given)
    path.wake_at(t)              # call on_wakeup(now) at monotonic time t if no message came first
    path.stop()                  # ends the thread (joins it); then sub.destroy()

Why not `node.create_subscription`: every rclpy executor waits on the subscriptions it finds in the
node, and its wait-set rebuild, task and callback bookkeeping per message cost 2-3x what the message
itself does (bench/node_cost.py: a loop waiting on the subscription costs about 0.4x rclpy's minimal
echo).  A TakeSubscription is a full rcl subscription of the node (remappings, the namespace, `~/`
names, QoS, the graph: `ros2 topic info` and `ros2 node info` list it), created through rclpy's own
binding, but kept out of the node's entity lists, so no executor sees it.

The thread waits on an rcl wait set holding that subscription and a guard condition (wake-ups and
stop), with a timeout when a wake-up time is set; the wait releases the GIL.  When it wakes it takes
every message that is there and hands each to `on_message(msg, now, last)`, `last` True for the newest
(a node steps on the newest only: the older ones are stale states, counted in `superseded`, as a
real-time buffer keeps only the latest; but it may still look at each, e.g. to count a rejection);
then, when the wake-up time has been reached (with or without messages), `on_wakeup(now)`.  The handlers decide the next wake-up (`wake_at`).  An exception
in a handler is counted and passed to `on_error(where, exc)` (the node logs it and publishes its safe
command); the thread never dies of it.

`start()` also takes the middleware's timer thread off wake-up preemption (realtime.
calm_middleware_timers: Fast DDS's timed-events thread under SCHED_BATCH).  Each command a reliable
writer sends restarts two of that thread's timers and wakes it; on two cores it preempted the control
thread two to three times per command (2900 nonvoluntary context switches a second at 1 kHz, 700
with it; bench/node_cost.py, 2 rounds each way: the control path's echo 253 -> 219 us of CPU per
state, the controller's rows within the rounds' spread, gravity compensation 263 -> 262).

`spin` (seconds, default 0): the thread sleeps only until that long before a wake-up time and polls
the wait set (without blocking) for the rest.  On a machine whose timer wake-ups are late (a shared
virtual machine here: a 0.5 ms sleep ended 0.8 ms later at p90, 2 ms at p99, under SCHED_FIFO) this
keeps a 1 kHz cycle on time for the CPU of the spin window; the sim node offers it (`spin_wait`).
"""
import sys
import threading
import time

from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.type_support import check_is_valid_msg_type

from .. import realtime

# Python's GIL hand-over: a thread woken by a message waits for the running one to drop the GIL,
# which it is asked to do after sys.getswitchinterval() (5 ms by default).  The control thread must
# not wait behind the executor converting a 1000-point trajectory: the nodes lower the interval to
# this when their control path starts (the cost is a GIL request check every 0.2 ms while two threads
# compete; bench/node_cost.py --section gap measures the step gap with both values).
SWITCH_INTERVAL = 2e-4


def _set_thread_name(name):
    """The OS name of the calling thread (top -H, /proc/<pid>/task/<tid>/comm), best effort."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)      # PR_SET_NAME
    except (OSError, AttributeError):
        pass


class TakeSubscription:
    """An rcl subscription of `node` whose messages the caller takes (`take()`); see the module doc."""

    def __init__(self, node, msg_type, topic, qos, raw=False):
        check_is_valid_msg_type(msg_type)           # imports the type support
        qos = node._validate_qos_or_depth_parameter(qos)
        with node.handle:
            self.handle = _rclpy.Subscription(node.handle, msg_type, topic, qos.get_c_qos_profile())
        self.msg_type = msg_type
        self.raw = bool(raw)
        self.topic_name = self.handle.get_topic_name()
        self._take = self.handle.take_message

    def take(self):
        """The next message (a new message object, or its serialized bytes with raw=True), or None
        when there is none."""
        r = self._take(self.msg_type, self.raw)
        return None if r is None else r[0]

    def get_publisher_count(self):
        return self.handle.get_publisher_count()

    def destroy(self):
        h, self.handle = self.handle, None
        if h is not None:
            h.destroy_when_not_in_use()


class ControlPath:
    """One thread per node waiting on a TakeSubscription (see the module doc)."""

    def __init__(self, node, sub, on_message, on_wakeup=None, on_error=None, name="control_path", spin=0.0,
                 extra=(), wait_extra=False):
        self.node = node
        self.sub = sub
        # more subscriptions the thread takes from at each wake-up, before the main one (polled, never
        # waited on: they add no wake-up): (TakeSubscription, handler); handler(msg, now) gets the newest
        # message (e.g. /clock, so that a step reads the time of its own cycle); wait_extra=True: they
        # are waited on as well (a message on any wakes the thread: several arms' commands in one sim)
        self.extra = list(extra)
        self.wait_extra = bool(wait_extra)
        self.on_message = on_message
        self.on_wakeup = on_wakeup
        self.on_error = on_error or (lambda where, e: print(f"[{name}] {where}: {e!r}", file=sys.stderr))
        self.name = name
        self.spin = float(spin)               # s before a wake-up time when the thread stops sleeping
        ctx = node.context.handle             # and polls instead (wake-up precision for CPU)
        self._gc = _rclpy.GuardCondition(ctx)
        self._ws = _rclpy.WaitSet(1 + (len(self.extra) if self.wait_extra else 0), 1, 0, 0, 0, 0, ctx)
        self._wake_t = None                   # monotonic time of the next on_wakeup (None: none)
        self._stop = False
        self._thread = None
        self._ident = None                    # the thread's threading.get_ident() while it runs
        self.rt_report = None                 # realtime.apply_thread's report (when rt settings given)
        self.native_id = None
        self.calmed = []                      # the middleware timer threads under SCHED_BATCH at start()
        self.messages = 0                     # wake-ups with messages (the newest one handled)
        self.superseded = 0                   # taken, but a newer one was there
        self.wakeups = 0
        self.errors = 0

    # ---- control (any thread)
    def start(self, rt_settings=None, timeout=10.0):
        """Start the thread; with `rt_settings` (realtime.Settings) its scheduling policy, priority and
        affinity are applied to the thread itself before it waits (realtime.apply_thread).  Returns
        the report (None without settings); realtime.RealtimeError when a setting was refused and
        rt_settings.required (the thread is then not running)."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name}: already started")
        if sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)
        self.calmed = realtime.calm_middleware_timers()    # (realtime.py: no preemption per command)
        started = threading.Event()
        result = {}

        def run():
            self._ident = threading.get_ident()
            self.native_id = threading.get_native_id()
            _set_thread_name(self.name)
            if rt_settings is not None:
                try:
                    result["report"] = realtime.apply_thread(rt_settings)
                except realtime.RealtimeError as e:
                    result["error"] = e
                    started.set()
                    return
            started.set()
            self._run()

        self._stop = False
        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not started.wait(timeout):
            raise RuntimeError(f"{self.name}: the thread did not start within {timeout} s")
        if "error" in result:
            self._thread.join()
            self._thread = None
            raise result["error"]
        self.rt_report = result.get("report")
        return self.rt_report

    def wake_at(self, t):
        """on_wakeup(now) at monotonic time `t` unless a message comes first (None: no wake-up).  From
        the control thread itself (a handler) this only records it; from another thread it also wakes
        the waiting thread so the new time is used at once."""
        self._wake_t = t
        if threading.get_ident() != self._ident:
            self._gc.trigger_guard_condition()

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    @property
    def on_control_thread(self):
        return self._thread is not None and threading.get_ident() == self._thread.ident

    def stop(self, timeout=5.0):
        """End the thread and wait for it (not from the thread itself, and not while holding a lock
        its handlers take).  True when it ended."""
        th = self._thread
        self._stop = True
        self._gc.trigger_guard_condition()
        if th is None:
            return True
        if th.ident == threading.get_ident():
            return False
        th.join(timeout)
        ended = not th.is_alive()
        if ended:
            self._thread = self._ident = None
        return ended

    def destroy(self):
        """Stop the thread, then release the wait set, guard condition and subscription."""
        self.stop()
        if self._thread is not None:               # still running (a handler blocked): leave them
            return
        for h in (self._ws, self._gc):
            try:
                h.destroy_when_not_in_use()
            except Exception:                      # noqa: BLE001 (best effort at teardown)
                pass
        self.sub.destroy()
        for sub, _ in self.extra:
            sub.destroy()

    # ---- the thread
    def _run(self):
        ws, gc_h, sub = self._ws, self._gc, self.sub
        spin = self.spin
        take = sub.take
        sub_handle = sub.handle
        extra = [(s.handle, s.take, h) for s, h in self.extra]
        mono = time.monotonic
        while not self._stop:
            ws.clear_entities()
            ws.add_subscription(sub_handle)
            if self.wait_extra:
                for xh, _, _ in extra:
                    ws.add_subscription(xh)
            ws.add_guard_condition(gc_h)
            wt = self._wake_t
            if wt is None:
                timeout_ns = -1
            else:                                  # (spin: poll the last stretch instead of sleeping)
                timeout_ns = max(0, int((wt - spin - mono()) * 1e9))
            try:
                ws.wait(timeout_ns)
            except Exception as e:                 # noqa: BLE001 (the context was shut down)
                if self._stop:
                    break
                self.errors += 1
                self.on_error("wait", e)
                time.sleep(0.01)
                continue
            if self._stop:
                break
            for _, xtake, handler in extra:        # polled, not waited on: no wake-up of their own
                try:
                    last, m = None, xtake()
                    while m is not None:
                        last, m = m, xtake()
                    if last is not None:
                        handler(last, mono())
                except Exception as e:             # noqa: BLE001 (nothing may end the thread)
                    self.errors += 1
                    self.on_error("extra", e)
            msgs = []
            try:
                m = take()
                while m is not None:
                    msgs.append(m)
                    m = take()
            except Exception as e:                 # noqa: BLE001 (a message that cannot be taken)
                self.errors += 1
                self.on_error("take", e)
            if msgs:
                now = mono()
                last = len(msgs) - 1
                self.messages += 1
                self.superseded += last
                for i, m in enumerate(msgs):
                    try:
                        self.on_message(m, now, i == last)
                    except Exception as e:         # noqa: BLE001 (nothing may end the thread)
                        self.errors += 1
                        self.on_error("handler", e)
            try:                                   # the wake-up time may have passed meanwhile (a
                if self.on_wakeup is not None:     # timer step while messages keep coming)
                    wt = self._wake_t
                    if wt is not None:
                        now = mono()
                        if spin and not msgs and now < wt <= now + spin:
                            continue               # the spin window: poll again (wait(0))
                        if now >= wt:
                            self._wake_t = None
                            self.wakeups += 1
                            self.on_wakeup(now)
            except Exception as e:                 # noqa: BLE001 (nothing may end the thread)
                self.errors += 1
                self.on_error("handler", e)

    def stats(self):
        return {"messages": self.messages, "superseded": self.superseded, "wakeups": self.wakeups,
                "errors": self.errors, "batch_timer_threads": len(self.calmed)}


class TakeAll:
    """A thread that waits on several TakeSubscriptions at once and hands every message it takes to
    that subscription's handler, none skipped (the recording side of a probe or a driver: each state,
    command and reply with its receipt time, at 1 kHz per topic, without the executor's bookkeeping per
    message: rclpy's minimal echo costs about 0.4 ms of CPU a message in bench/node_cost.py).

        rec = TakeAll(node, [(TakeSubscription(node, JointState, "/joint_states", 50), on_js), ...])
        rec.start()      # handler(msg) on the thread: each topic's messages in order, the topics in turn
        rec.destroy()    # stops the thread (joins it), then releases the subscriptions

    An exception in a handler is counted (`errors`) and printed; the thread goes on."""

    def __init__(self, node, subs, name="take_all"):
        self.subs = list(subs)
        self.name = name
        ctx = node.context.handle
        self._gc = _rclpy.GuardCondition(ctx)
        self._ws = _rclpy.WaitSet(len(self.subs), 1, 0, 0, 0, 0, ctx)
        self._stop = False
        self._thread = None
        self.errors = 0

    def start(self):
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        _set_thread_name(self.name)
        ws, gc_h = self._ws, self._gc
        subs = [(s.handle, s.take, h) for s, h in self.subs]
        while not self._stop:
            ws.clear_entities()
            for handle, _, _ in subs:
                ws.add_subscription(handle)
            ws.add_guard_condition(gc_h)
            try:
                ws.wait(-1)
            except Exception:                      # noqa: BLE001 (the context was shut down)
                break
            # one message per subscription per pass, until every one is empty: a topic that comes
            # faster than its handler runs (a loaded host) cannot starve the others (a loaded suite
            # run, draining each topic in turn: no /clock for the Franka tests behind 1 kHz states)
            pending = subs
            while pending and not self._stop:
                more = []
                for entry in pending:
                    try:
                        m = entry[1]()
                        if m is not None:
                            more.append(entry)
                            entry[2](m)
                    except Exception as e:         # noqa: BLE001 (nothing may end the thread)
                        self.errors += 1
                        print(f"[{self.name}] {e!r}", file=sys.stderr)
                pending = more

    def stop(self, timeout=5.0):
        th, self._stop = self._thread, True
        self._gc.trigger_guard_condition()
        if th is not None and th.ident != threading.get_ident():
            th.join(timeout)
            if not th.is_alive():
                self._thread = None
        return self._thread is None

    def destroy(self):
        if not self.stop():                        # a handler still blocked: leave the handles
            return
        for h in (self._ws, self._gc):
            h.destroy_when_not_in_use()
        for s, _ in self.subs:
            s.destroy()
        self.subs = []
