"""Real-time option for the processes that run a control loop (controller node, sim node, hardware
bridges).  ROS-free: plain os / gc / ctypes, usable from any front end.

    from robot_dynamics import realtime
    settings = realtime.Settings(sched_policy="fifo", sched_priority=50, lock_memory=True)
    report = realtime.apply(settings, log=print)        # once at start-up, on the loop thread
    ...
    gc_ctl = realtime.GcControl(settings)               # in the loop: gc_ctl.tick(now) once per cycle

Each setting is applied where the OS permits it; a refusal is logged once (`log`, a callable taking a
string, e.g. a node's `get_logger().warning`) and reported in the returned dict (for /diagnostics),
and start-up continues, unless `required` is true, in which case `RealtimeError` is raised.

What each setting does (Linux):
  sched_policy     'other' (default: no change), 'fifo' or 'rr': sched_setscheduler of every thread
                   of the process (scope 'process', the default: rclpy's executor and the DDS receive
                   threads alike) or of the calling thread only (scope 'thread'); Linux schedules
                   threads, and threads created afterwards inherit their creator's policy.  Needs CAP_SYS_NICE or an RLIMIT_RTPRIO >= priority
                   (e.g. `@realtime - rtprio 98` in /etc/security/limits.conf).
  sched_priority   1..99 for fifo/rr (ros2_control's controller_manager uses 50).
  lock_memory      mlockall(MCL_CURRENT | MCL_FUTURE): no page faults in the loop.  Needs
                   CAP_IPC_LOCK or an RLIMIT_MEMLOCK above the process size (a Python process with
                   rclpy, numpy and pinocchio maps ~0.5-1 GB: `memlock unlimited` in limits.conf).
  cpu_affinity     list of CPU ids (sched_setaffinity, same scope as the policy); empty: no change.
                   On a PREEMPT_RT machine pin the loop to an isolated core (isolcpus=/nohz_full=).
  gc_mode          'default' (no change), 'freeze' (gc.collect() then gc.freeze(): the objects built
                   at configure are never scanned again) or 'manual' (freeze, then gc.disable(); the
                   loop calls GcControl.tick() which runs a young-generation collection every
                   gc_period seconds, outside the time-critical part of the cycle).
  required         refuse to start (RealtimeError) when any requested setting could not be applied.

Defaults change nothing, so a laptop without privileges runs as before.  On a PREEMPT_RT machine:
sched_policy fifo, sched_priority 50-80 (below the NIC's threaded IRQs), lock_memory true, cpu_affinity
an isolated core, gc_mode manual; see the manual's page "Real time and two hosts" (doc/realtime.md).
"""
import ctypes
import ctypes.util
import gc
import os
import threading
import time
from dataclasses import asdict, dataclass, field

POLICIES = ("other", "fifo", "rr")
GC_MODES = ("default", "freeze", "manual")
SCOPES = ("process", "thread")
_POLICY_CONST = {"other": getattr(os, "SCHED_OTHER", 0), "fifo": getattr(os, "SCHED_FIFO", 1),
                 "rr": getattr(os, "SCHED_RR", 2)}
MCL_CURRENT, MCL_FUTURE = 1, 2           # <sys/mman.h> on Linux


class RealtimeError(RuntimeError):
    """A requested setting was refused and `required` is true."""


@dataclass
class Settings:
    sched_policy: str = "other"
    sched_priority: int = 0
    lock_memory: bool = False
    cpu_affinity: list = field(default_factory=list)
    gc_mode: str = "default"
    gc_period: float = 1.0
    required: bool = False
    scope: str = "process"      # 'process': every thread of the process now (DDS's receive threads
                                # too); 'thread': the calling thread only.  Later threads inherit.

    def validate(self):
        """A list of error strings (empty: fine).  Values out of range are errors here, not OS refusals."""
        err = []
        if self.sched_policy not in POLICIES:
            err.append(f"rt_sched_policy: {self.sched_policy!r} is not one of {list(POLICIES)}")
        if self.scope not in SCOPES:
            err.append(f"rt_scope: {self.scope!r} is not one of {list(SCOPES)}")
        if self.gc_mode not in GC_MODES:
            err.append(f"rt_gc_mode: {self.gc_mode!r} is not one of {list(GC_MODES)}")
        if isinstance(self.sched_priority, bool) or not isinstance(self.sched_priority, int):
            err.append(f"rt_sched_priority: expected an integer, got {self.sched_priority!r}")
        if not (isinstance(self.gc_period, (int, float)) and self.gc_period > 0):
            err.append(f"rt_gc_period: must be > 0, got {self.gc_period!r}")
        try:
            cpus = [int(c) for c in self.cpu_affinity]
            if any(c < 0 for c in cpus) or any(int(c) != c for c in self.cpu_affinity):
                raise ValueError
        except (TypeError, ValueError):
            err.append(f"rt_cpu_affinity: expected CPU ids >= 0, got {self.cpu_affinity!r}")
        return err


# Parameters a node declares for the option: (name, default, description, check, choices), the
# fields of robot_dynamics.nodes.common.ParamSpec (startup=True: read once when the node is created).
# A node builds them with `[ParamSpec(*p, startup=True) for p in realtime.PARAMS]`.
PARAMS = (
    ("rt_sched_policy", "other", "scheduling policy of the node's threads (see rt_scope): other (no change), fifo, "
     "rr; refused without CAP_SYS_NICE / RLIMIT_RTPRIO: logged and reported on /diagnostics", "choices",
     POLICIES),
    ("rt_sched_priority", 0, "real-time priority 1..99 for fifo/rr (ros2_control uses 50)", "nonneg", ()),
    ("rt_lock_memory", False, "mlockall (current and future pages) at start-up: no page faults in the loop", None, ()),
    ("rt_cpu_affinity", "", "CPU ids for the node's threads (see rt_scope), comma separated (e.g. '1' or '2,3'); "
     "empty: no change", None, ()),
    ("rt_gc_mode", "default", "garbage collector: default, freeze (gc.freeze after configure), manual "
     "(freeze + disable, young-generation collection every rt_gc_period s)", "choices", GC_MODES),
    ("rt_gc_period", 1.0, "seconds between collections in gc mode manual", "positive", ()),
    ("rt_required", False, "refuse to start when a requested real-time setting is refused", None, ()),
    ("rt_scope", "process", "process: policy and affinity for every thread of the node (DDS's receive "
     "threads too); thread: the control-loop thread only", "choices", SCOPES),
)
PARAM_TO_FIELD = {p[0]: p[0][3:] for p in PARAMS}


def settings_from(get):
    """Settings from a getter `get(param_name) -> value or None` (e.g. a node's parameter lookup);
    None keeps the default."""
    s = Settings()
    for pname, fname in PARAM_TO_FIELD.items():
        v = get(pname)
        if v is not None:
            if fname == "cpu_affinity":
                try:
                    v = parse_cpus(v)
                except ValueError:
                    pass                   # kept as given: validate() names it
            setattr(s, fname, v)
    return s


def parse_cpus(v):
    """'1,3' / '2-3' / [1, 3] -> [1, 3] (ValueError on anything else)."""
    if isinstance(v, str):
        out = []
        for part in v.replace(" ", "").split(","):
            if not part:
                continue
            if "-" in part:
                a, b = part.split("-", 1)
                out += list(range(int(a), int(b) + 1))
            else:
                out.append(int(part))
        return out
    return [int(c) for c in v]


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mlockall(flags):
    if _libc().mlockall(ctypes.c_int(flags)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _vmlck_kb():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _for_threads(scope, fn):
    """fn(0) for the calling thread, then (scope 'process') fn(tid) for every other thread of the
    process; a thread that ended meanwhile is skipped.  The calling thread's error propagates.
    Returns the number of threads changed."""
    fn(0)
    n = 1
    if scope != "process":
        return n
    me = threading.get_native_id()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return n
    for tid in tids:
        if tid == me:
            continue
        try:
            fn(tid)
            n += 1
        except ProcessLookupError:
            pass
    return n


def _why(e, setting):
    """A hint for an OS refusal."""
    import errno
    if getattr(e, "errno", None) == errno.EPERM:
        return {"sched": "needs CAP_SYS_NICE or RLIMIT_RTPRIO >= priority (limits.conf rtprio)",
                "mlock": "needs CAP_IPC_LOCK or a larger RLIMIT_MEMLOCK (limits.conf memlock unlimited)",
                "affinity": "not permitted"}[setting]
    if getattr(e, "errno", None) == errno.ENOMEM and setting == "mlock":
        return "RLIMIT_MEMLOCK too small for this process (limits.conf memlock unlimited)"
    if getattr(e, "errno", None) == errno.EINVAL:
        return "invalid value for this machine"
    return ""


THREAD_PARTS = ("sched", "affinity")       # what a thread has of its own (the rest is process-wide)
ALL_PARTS = ("sched", "mlock", "affinity", "gc")


def apply(settings, log=None, parts=ALL_PARTS):
    """Apply `settings` to the calling thread / process.  Returns a report dict (str -> str), one key
    per setting: 'ok ...', 'unchanged', or 'refused: ...'.  `log(text)` is called once with a summary
    when something was refused (and once with what was applied).  Raises RealtimeError when a setting
    was refused (or invalid) and settings.required is true; never otherwise.  `parts`: the settings
    to apply now (the others are reported 'deferred'; see apply_thread)."""
    log = log or (lambda text: None)
    report = {}
    refused = []
    errors = settings.validate()
    if errors:                                   # an invalid setting: nothing is applied
        for key in ("sched", "mlock", "affinity", "gc"):
            report[key] = "refused: invalid settings"
        report["status"] = "refused"
        text = "real-time settings refused (invalid): " + "; ".join(errors)
        if settings.required:
            log(text + " (rt_required: refusing to start)")
            raise RealtimeError(text)
        log(text + "; continuing without them")
        return report
    rt_policy = settings.sched_policy in ("fifo", "rr")

    # --- scheduling policy and priority (the calling thread)
    if "sched" not in parts:
        report["sched"] = "deferred (control thread)" if rt_policy else "unchanged (other)"
    elif not rt_policy:
        report["sched"] = "unchanged (other)"
    else:
        pol = _POLICY_CONST[settings.sched_policy]
        lo, hi = os.sched_get_priority_min(pol), os.sched_get_priority_max(pol)
        prio = settings.sched_priority
        if not lo <= prio <= hi:
            msg = f"rt_sched_priority {prio} outside {lo}..{hi} for {settings.sched_policy}"
            report["sched"] = "refused: " + msg
            refused.append(msg)
        else:
            try:
                n = _for_threads(settings.scope, lambda tid: os.sched_setscheduler(tid, pol, os.sched_param(prio)))
                report["sched"] = f"ok {settings.sched_policy} {prio} ({n} thread(s))"
            except OSError as e:
                msg = f"sched_setscheduler({settings.sched_policy}, {prio}): {e.strerror}; {_why(e, 'sched')}"
                report["sched"] = "refused: " + msg
                refused.append(msg)

    # --- memory locking
    if "mlock" not in parts:
        pass
    elif not settings.lock_memory:
        report["mlock"] = "unchanged"
    else:
        try:
            _mlockall(MCL_CURRENT | MCL_FUTURE)
            report["mlock"] = f"ok ({_vmlck_kb()} kB locked)"
        except OSError as e:
            msg = f"mlockall: {e.strerror}; {_why(e, 'mlock')}"
            report["mlock"] = "refused: " + msg
            refused.append(msg)

    # --- CPU affinity (the calling thread)
    if "affinity" not in parts:
        report["affinity"] = "deferred (control thread)" if settings.cpu_affinity else "unchanged"
    elif not settings.cpu_affinity:
        report["affinity"] = "unchanged"
    else:
        cpus = sorted({int(c) for c in settings.cpu_affinity})
        try:
            n = _for_threads(settings.scope, lambda tid: os.sched_setaffinity(tid, cpus))
            report["affinity"] = f"ok {sorted(os.sched_getaffinity(0))} ({n} thread(s))"
        except OSError as e:
            msg = f"sched_setaffinity({cpus}): {e.strerror}; {_why(e, 'affinity')} (online CPUs: " \
                  f"{sorted(os.sched_getaffinity(0))})"
            report["affinity"] = "refused: " + msg
            refused.append(msg)

    # --- garbage collector (process-wide)
    if "gc" not in parts:
        pass
    elif settings.gc_mode == "default":
        report["gc"] = "unchanged"
    else:
        gc.collect()
        gc.freeze()
        if settings.gc_mode == "manual":
            gc.disable()
            report["gc"] = f"ok manual (frozen {gc.get_freeze_count()} objects, collector disabled, " \
                           f"young collection every {settings.gc_period:g} s)"
        else:
            report["gc"] = f"ok freeze ({gc.get_freeze_count()} objects frozen)"

    report["status"] = "refused" if refused else "ok"
    applied = ", ".join(f"{k} {v}" for k, v in report.items() if k != "status" and v.startswith("ok"))
    if refused:
        text = "real-time settings refused: " + "; ".join(refused)
        if settings.required:
            log(text + " (rt_required: refusing to start)")
            raise RealtimeError(text)
        log(text + "; continuing without them" + (f" (applied: {applied})" if applied else ""))
    elif applied:
        log("real-time settings applied: " + applied)
    return report


def apply_thread(settings, log=None):
    """The calling thread's own part of `settings` (scheduling policy, priority, CPU affinity), for
    the thread that runs a node's control path (scope 'thread'; with scope 'process' the process
    already has them, and this changes nothing).  Report and errors as apply()."""
    return apply(Settings(**dict(asdict(settings), scope="thread")), log=log, parts=THREAD_PARTS)


def fifo_preexec(priority):
    """A subprocess `preexec_fn`: the child (and every thread it starts) under SCHED_FIFO `priority`
    where the OS permits; refused, it runs normally."""
    def pre():
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (OSError, AttributeError):
            pass
    return pre


# The middleware's timer threads, by the name it gives them: Fast DDS's timed-events thread (one per
# participant).  Fast DDS restarts two of its timers (NACK suppression, periodic heartbeat) for each
# sample a writer sends to a remote reliable reader, and each restart wakes that thread: on a 2-core
# machine the woken thread preempts the publisher, the control thread, two or three times per command
# (nonvoluntary context switches, /proc/<pid>/task/<tid>/status), and runs once per restart.
MIDDLEWARE_TIMER_THREADS = ("dds.ev.",)


def calm_middleware_timers():
    """Put the process's middleware timer threads (MIDDLEWARE_TIMER_THREADS) that run SCHED_OTHER
    under SCHED_BATCH: the same share of the CPU, but a wake-up no longer preempts the running thread
    (the timer runs on an idle core, or at the next scheduler tick, by when several restarts have
    coalesced).  Its timers (heartbeats, NACK responses, discovery announcements: milliseconds to
    seconds) can start up to a time slice late on a busy core.  A thread under another policy (the
    real-time option's rt_scope: process) is left alone; needs no privilege.  Returns the names of the
    timer threads under SCHED_BATCH now (put there by this call or an earlier one: a node that
    configures again starts its path again)."""
    batch = getattr(os, "SCHED_BATCH", None)
    if batch is None:
        return []
    calm = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return calm
    for t in tids:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                name = f.read().strip()
            if not name.startswith(MIDDLEWARE_TIMER_THREADS):
                continue
            tid = int(t)
            pol = os.sched_getscheduler(tid)
            if pol == os.SCHED_OTHER:
                os.sched_setscheduler(tid, batch, os.sched_param(0))
                pol = batch
            if pol == batch:
                calm.append(name)
        except (OSError, ValueError):          # ended meanwhile, or refused: left as it was
            pass
    return calm


def diagnostics_values(report):
    """[(key, value)] for a diagnostic_msgs/DiagnosticStatus (prefix 'rt.')."""
    return [(f"rt.{k}", str(v)) for k, v in report.items()]


class GcControl:
    """Periodic young-generation collection for gc_mode 'manual' (a no-op otherwise).  Call
    tick(now) once per cycle after the command is published; it collects generation 0 at most every
    gc_period seconds (a full collection every 10th time, for the cycles the young one misses)."""

    def __init__(self, settings):
        self.enabled = settings.gc_mode == "manual"
        self.period = float(settings.gc_period)
        self.next_t = None
        self.collections = 0

    def tick(self, now=None):
        if not self.enabled:
            return False
        now = time.monotonic() if now is None else now
        if self.next_t is None:
            self.next_t = now + self.period
            return False
        if now < self.next_t:
            return False
        self.collections += 1
        gc.collect(2 if self.collections % 10 == 0 else 0)
        self.next_t = now + self.period
        return True


def read_back():
    """What the OS says now about the calling thread (for tests, benchmarks and diagnostics)."""
    pol = os.sched_getscheduler(0)
    name = {v: k for k, v in _POLICY_CONST.items()}.get(pol, str(pol))
    return {"policy": name, "priority": os.sched_getparam(0).sched_priority,
            "affinity": sorted(os.sched_getaffinity(0)), "vmlck_kb": _vmlck_kb(),
            "gc_enabled": gc.isenabled(), "gc_frozen": gc.get_freeze_count()}


def as_dict(settings):
    return asdict(settings)


def main(argv=None):
    """Run a Python module (a node's main) under the real-time settings, until the nodes call apply()
    themselves:

        python -m robot_dynamics.realtime --policy fifo --priority 50 --lock-memory --gc freeze \
            -m robot_dynamics.nodes.controller_node --ros-args -p controller:=gravity_compensation

    The settings are applied to the main thread before the module runs, so every thread the node and
    DDS create afterwards inherits the policy, priority and affinity (gc 'manual' is not offered here:
    nothing would call GcControl.tick)."""
    import argparse
    import runpy
    import sys
    argv = sys.argv[1:] if argv is None else argv
    if "-m" not in argv:
        raise SystemExit("usage: python -m robot_dynamics.realtime [options] -m MODULE [args...]")
    i = argv.index("-m")
    ap = argparse.ArgumentParser(prog="python -m robot_dynamics.realtime")
    ap.add_argument("--policy", default="other", choices=POLICIES)
    ap.add_argument("--priority", type=int, default=0)
    ap.add_argument("--lock-memory", action="store_true")
    ap.add_argument("--cpus", default="")
    ap.add_argument("--gc", default="default", choices=("default", "freeze"))
    ap.add_argument("--required", action="store_true")
    a = ap.parse_args(argv[:i])
    module, rest = argv[i + 1], argv[i + 2:]
    settings = Settings(sched_policy=a.policy, sched_priority=a.priority, lock_memory=a.lock_memory,
                        cpu_affinity=parse_cpus(a.cpus), gc_mode=a.gc, required=a.required)
    try:
        report = apply(settings, log=lambda t: print(f"[realtime] {t}", file=sys.stderr, flush=True))
    except RealtimeError:
        return 1
    print(f"[realtime] {report}", file=sys.stderr, flush=True)
    sys.argv = [module] + rest
    if module.endswith(".py"):                     # a script path instead of a module name
        runpy.run_path(module, run_name="__main__")
    else:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
