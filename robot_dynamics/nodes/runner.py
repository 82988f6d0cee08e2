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
"""
import ctypes
import os
import signal
import sys
import threading

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Set by SIGINT / SIGTERM (as many times as they come); counts them."""

    def __init__(self):
        self.event = threading.Event()
        self.count = 0

    def __call__(self, signum, frame):       # a signal handler: no I/O, no exceptions
        self.count += 1
        self.event.set()

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
    load; and if the clean-up itself takes longer than `exit_grace` seconds, a watchdog thread ends the
    process the same way."""
    stop = install_stop_handlers()
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
        if node is not None and on_exit is not None:
            try:
                on_exit(node)
            except Exception as e:  # noqa: BLE001  (shut down anyway; say why)
                _log_error(node, f"shutdown: {e}")
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
