"""One way to run a node process of this package: spin until SIGINT or SIGTERM, then shut down cleanly.

    def main(args=None):
        return run(MyNode, args=args)

What it guarantees (the nodes' `main()` all use it; test/test_ros2_tools.py checks it under
`ros2 launch`): exit code 0 and no traceback on SIGINT, on a second (third, ...) SIGINT or a SIGTERM
arriving while the node is shutting down, and on SIGTERM.  A terminal's Ctrl-C sends SIGINT to the
whole process group and `ros2 launch` then sends its own SIGINT (and SIGTERM after a timeout), so
repeated signals are the normal case, not an edge case.

How: rclpy's own signal handlers are not installed (rclpy.init(signal_handler_options=NO)); ours only
set an event, so a signal never raises KeyboardInterrupt in the middle of `destroy_node` or of the
node's shutdown work, and once the node is down they are ignored (Python's finalisation would
otherwise restore the default, fatal, disposition).  The spin loop polls the event every `poll` seconds.  `on_exit(node)` runs
first on the way out (the controller publishes its safe command there), then the executor, the node
and the context are shut down.  A node that fails to construct (bad parameters: ValueError /
RuntimeError) logs the reason and the process exits with 1, without a traceback.

A process ends before `ros2 launch` escalates to SIGKILL (15 s after its SIGINT), with two guards
armed on the way out (both need the main thread to run Python once after the signal, to arm them).
A Python thread ends it (flushed, exit code as below) when the clean-up takes longer than
`exit_grace`.  That thread needs the interpreter lock, and a clean-up blocked inside
a C call that holds the lock (a middleware destructor) starves it: a CI run under load saw the
controller outlive SIGINT, SIGTERM and the 12 s Python guard, killed at 15 s.  So the first stop
request also arms a kernel timer whose expiry runs `_exit` on a thread of its own (POSIX timer,
SIGEV_THREAD: no interpreter, no lock), `exit_grace` + 1 s after the request, preceded by
faulthandler's dump of every thread's stack (also lock-free) to stderr so the log says where it
hung.  Its exit code is 1 until `on_exit` has returned (the safe command is out), 0 after.
"""
import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Set by SIGINT / SIGTERM (as many times as they come); counts them.  `on_first()` (when set)
    runs once, at the first request."""

    def __init__(self):
        self.event = threading.Event()
        self.count = 0
        self.on_first = None

    def __call__(self, signum, frame):       # a signal handler: no I/O, no exceptions
        self.count += 1
        self.event.set()
        if self.count == 1 and self.on_first is not None:
            try:
                self.on_first()
            except Exception:  # noqa: BLE001  (a guard that cannot be armed must not stop the stop)
                pass

    def is_set(self):
        return self.event.is_set()


def install_stop_handlers(signals=EXIT_SIGNALS):
    """Replace the handlers of `signals` with one that only records the request; returns it."""
    stop = StopRequest()
    for sig in signals:
        signal.signal(sig, stop)
    return stop


def _log_error(node, text):
    if node is not None:
        try:
            node.get_logger().error(text)
            return
        except Exception:  # noqa: BLE001  (the context may be gone)
            pass
    print(text, file=sys.stderr, flush=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("interval", _Timespec), ("value", _Timespec)]


class _SigevThread(ctypes.Structure):
    _fields_ = [("function", ctypes.c_void_p), ("attribute", ctypes.c_void_p)]


class _Sigevent(ctypes.Structure):       # glibc's struct sigevent (64 bytes)
    class _Un(ctypes.Union):
        _fields_ = [("pad", ctypes.c_int * 12), ("thread", _SigevThread)]
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int), ("un", _Un)]


_SIGEV_THREAD, _CLOCK_MONOTONIC, _TIMER_ABSTIME = 2, 1, 1


class ExitBackstop:
    """End the process at a monotonic deadline without the interpreter: a POSIX timer whose
    SIGEV_THREAD notification calls libc's `_exit(code)` (the union sigval carrying the code is passed
    as the function's one integer argument), so it fires even while another thread holds the GIL
    and blocks.  faulthandler dumps every thread's stack to stderr half a second before.  Where the
    timer cannot be made (not glibc), faulthandler's own exit (code 1) stands in.  No stdio flush:
    what the process logged through C stdio after its last flush may be lost."""

    DUMP_LEAD = 0.5

    def __init__(self):
        self._timer = None
        self.deadline = None
        try:
            self._libc = ctypes.CDLL(None, use_errno=True)
            self._exit_fn = ctypes.cast(self._libc._exit, ctypes.c_void_p).value
            self._libc.timer_create.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
            self._libc.timer_settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
            self._libc.timer_delete.argtypes = [ctypes.c_void_p]
        except (OSError, AttributeError):
            self._libc = None

    def arm(self, seconds, code):
        """(Re)arm: exit with `code` `seconds` from now, or at the deadline already set (the earlier
        arm's) when there is one."""
        if self.deadline is None:
            self.deadline = time.monotonic() + seconds
        self.disarm()
        left = max(self.deadline - time.monotonic(), 0.01)
        faulthandler.dump_traceback_later(max(left - self.DUMP_LEAD, 0.005), exit=self._libc is None)
        if self._libc is None:
            return
        ev = _Sigevent()
        ev.value, ev.notify = code, _SIGEV_THREAD
        ev.un.thread.function = self._exit_fn
        timer = ctypes.c_void_p()
        if self._libc.timer_create(_CLOCK_MONOTONIC, ctypes.byref(ev), ctypes.byref(timer)) != 0:
            faulthandler.dump_traceback_later(max(left - self.DUMP_LEAD, 0.005), exit=True)
            return
        sec = int(self.deadline)
        spec = _Itimerspec(value=_Timespec(sec, int((self.deadline - sec) * 1e9)))
        self._timer = timer
        self._libc.timer_settime(timer, _TIMER_ABSTIME, ctypes.byref(spec), None)

    def disarm(self):
        faulthandler.cancel_dump_traceback_later()
        if self._timer is not None:
            self._libc.timer_delete(self._timer)
            self._timer = None


def _flush_and_exit(code):
    """Leave now with `code`: flush Python's and C's stdio (rcutils logs through C stdio), then
    os._exit, skipping interpreter finalisation and the DDS library's static destructors."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)


def run(node_factory, args=None, executor_factory=None, on_exit=None, poll=0.1, exit_process=False,
        exit_grace=12.0):
    """Create the node (`node_factory()`, after rclpy.init), spin it with `executor_factory(node)`
    (default: a SingleThreadedExecutor) until SIGINT / SIGTERM or an external shutdown, call
    `on_exit(node)`, clean up.  Returns the process exit code: 0, or 1 if the node or its executor
    could not be created.

    exit_process=True (the nodes' main()): once everything is shut down the process ends at once with
    that code (os._exit after flushing), instead of returning into interpreter finalisation, where a
    DDS participant's destructor was seen to hang past launch's SIGTERM and SIGKILL (15 s) under
    load; if the clean-up itself takes longer than `exit_grace` seconds, a watchdog thread ends the
    process the same way, and an ExitBackstop armed at the first signal ends it 1 s later whatever
    holds the interpreter (the module doc)."""
    stop = install_stop_handlers()
    backstop = None
    if exit_process:
        backstop = ExitBackstop()
        stop.on_first = lambda: backstop.arm(exit_grace + 1.0, 1)
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = executor = None
    code = 0
    handled = False            # False while an unexpected exception propagates (its traceback must show)
    try:
        node = node_factory()
        executor = executor_factory(node) if executor_factory else SingleThreadedExecutor()
        executor.add_node(node)
        while not stop.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=poll)
        handled = True
    except ExternalShutdownException:
        handled = True
    except (ValueError, RuntimeError) as e:
        if node is None or executor is None:      # construction failed: the reason, no traceback
            _log_error(node, f"cannot start: {e}")
            code, handled = 1, True
        else:
            raise
    finally:
        # signals keep arriving here (Ctrl-C twice, launch's own SIGINT / SIGTERM): our handler only
        # records them, so none of this is interrupted
        if exit_process:
            guard = threading.Timer(exit_grace, _flush_and_exit, args=(code if handled else 1,))
            guard.daemon = True
            guard.start()
        if backstop is not None and backstop.deadline is None:    # a way out without a signal
            backstop.arm(exit_grace + 1.0, 1)
        if node is not None and on_exit is not None:
            try:
                on_exit(node)
            except Exception as e:  # noqa: BLE001  (shut down anyway; say why)
                _log_error(node, f"shutdown: {e}")
        if backstop is not None:              # the safe command is out: a forced exit is a clean one now
            backstop.arm(exit_grace + 1.0, code if handled else 1)
        if executor is not None:
            try:
                executor.shutdown(timeout_sec=1.0)
            except Exception:  # noqa: BLE001  (best effort at exit)
                pass
        if node is not None:
            try:
                node.destroy_node()
            except Exception as e:  # noqa: BLE001
                _log_error(None, f"destroy_node: {e}")
        rclpy.try_shutdown()
        # Python's finalisation puts SIG_DFL back for the handlers it installed, so a signal arriving
        # while the interpreter exits would still kill the process (exit -2 after a clean shutdown);
        # ignored handlers are left alone
        for sig in EXIT_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if exit_process and handled:
            _flush_and_exit(code)
    return code
