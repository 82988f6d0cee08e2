"""What the loop tells its user: log lines (throttled), exact counts, and what the safety layer did.

    r = Report(log, counts, throttle_period)
    r.log(level, text)                    # level 'info' | 'warn' | 'error'
    r.throttled(key, level, text, now)    # one line per key per throttle period, suppressed ones summed
    r.episode(key)                        # an Episode: a condition that starts, repeats and ends
    r.act(name, now, detail)              # the safety layer acted (diagnostics: WARN while it does)
    r.exception(where, e, now)            # counted (errors.<where>) and logged, throttled
    r.counts                              # exact counters (dict-like; the node's survives reconfigures)
    kv, level, text = r.acts_status(latest)   # the acted.* diagnostics rows and the WARN they raise

Every per-message condition (joint states rejected, watchdog, wrench problems, rejected references) logs at
most one line per condition per throttle period, plus one line when a logged episode ends; suppressed
occurrences are summed into the next line.  Reads nothing of the cycle; every stage writes to it.
"""
import logging
import time
from collections import defaultdict

LEVELS = {"info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
OK, WARN, ERROR = 0, 1, 2          # diagnostic levels (diagnostic_msgs/DiagnosticStatus bytes)
# the safety layer "acts" when it changes what the law asked for or refuses what was sent: the safety
# filter's reasons but these two (the start ramp is the normal start; a configured velocity_damping acts on
# every step by design), the Cartesian law's pose-error clipping, watchdog trips, joint speed stops, refused
# references.  The level is WARN while it acts: an action since the previous diagnostics call or within
# ACT_HOLD seconds (loop time) of the newest step
QUIET_SAFETY = ("start_ramp", "velocity_damping")
ACT_HOLD = 1.0          # s


def python_log(level, text):
    logging.getLogger("robot_dynamics.control.loop").log(LEVELS.get(level, logging.INFO), text)


class LogThrottle:
    """At most one line per condition key per `period` seconds (monotonic `now` from the caller).

        if th.allow(key, now): log(...)      # else the occurrence is counted as suppressed
        n = th.take_suppressed(key)          # occurrences suppressed since the last line of key
    """

    def __init__(self, period=1.0):
        self.period = float(period)
        self._last = {}
        self._suppressed = defaultdict(int)

    def allow(self, key, now, count=True):
        """True: log now.  False: suppressed (counted unless count=False, for a retry of the same
        occurrence)."""
        last = self._last.get(key)
        if last is None or now - last >= self.period or now < last:
            self._last[key] = now
            return True
        if count:
            self._suppressed[key] += 1
        return False

    def take_suppressed(self, key):
        return self._suppressed.pop(key, 0)


class Episode:
    """A condition that starts, repeats per message and ends (joint states rejected, wrench unusable,
    watchdog tripped).  Its first line is throttled per key: when suppressed, the first occurrence
    after the period logs it (a lasting fault is never silent); the end is logged only for an episode
    whose start was.  A new reason starts a new episode."""

    def __init__(self, report, key):
        self.report, self.key = report, key
        self.reason = ""              # "" = not in an episode
        self.count = 0                # occurrences in this episode
        self.logged = False           # the start of this episode was logged

    def occur(self, reason, now, level, text_fn, retry=False):
        """One occurrence (retry: the same one again, only to log a suppressed start); text_fn(extra)
        builds the line (extra: the suppressed-occurrences note)."""
        if reason != self.reason:
            self.reason, self.count, self.logged = reason, 0, False
        if not retry:
            self.count += 1
        if not self.logged:
            th = self.report.throttle
            if th.allow(self.key, now, count=not retry):
                n = th.take_suppressed(self.key)
                extra = f" ({n} more occurrence(s) not logged since the last line)" if n else ""
                self.report.log(level, text_fn(extra))
                self.logged = True

    def end(self, text_fn):
        """The condition cleared: text_fn(self) is logged if the episode's start was."""
        if self.reason and self.logged:
            self.report.log("info", text_fn(self))
        self.reason, self.count, self.logged = "", 0, False


class Report:
    """See the module docstring."""

    def __init__(self, log=None, counts=None, throttle_period=1.0):
        self.sink = log or python_log
        self.counts = counts if counts is not None else defaultdict(int)
        self.throttle = LogThrottle(throttle_period)
        self.latest = None                  # the newest `now` given to a step (for acts without a time)
        self._acts = {}                     # what the safety layer did: name -> [count, when, detail]
        self._acts_reported = {}            # the counts at the previous acts_status() call
        self.last_act = None                # (name, detail, when) of the newest action

    def log(self, level, text):
        self.sink(level, text)

    def episode(self, key):
        return Episode(self, key)

    def throttled(self, key, level, text, now=None):
        """One line per `key` per throttle period; the next line says how many were suppressed."""
        now = time.monotonic() if now is None else now
        if self.throttle.allow(key, now):
            n = self.throttle.take_suppressed(key)
            extra = f" ({n} more not logged since the last line)" if n else ""
            self.log(level, text + extra)

    def act(self, name, now=None, detail=""):
        """The safety layer acted (the diagnostics: WARN while it does, the count, the last one)."""
        now = self.latest if now is None else now
        a = self._acts.get(name)
        if a is None:
            self._acts[name] = [1, now, detail]
        else:
            a[0] += 1
            a[1] = now
            if detail:
                a[2] = detail
        self.last_act = (name, detail or (a[2] if a is not None else ""), now)

    def exception(self, where, e, now=None):
        """Count (errors.<where>) and log an exception, throttled per `where`."""
        self.counts[f"errors.{where}"] += 1
        self.throttled(f"errors.{where}", "error",
                       f"{where}: {type(e).__name__}: {e} (publishing the safe command)", now)

    def acts_status(self):
        """(the acted.* diagnostics rows, the WARN text while the safety layer acts or None): counts in all,
        since the previous call, the newest action; WARN for an action since the previous call or within
        ACT_HOLD of the newest step."""
        acts = self._acts.copy()                   # (atomic: the control thread may add a key)
        since = {k: a[0] - self._acts_reported.get(k, 0) for k, a in acts.items()
                 if a[0] != self._acts_reported.get(k, 0)}
        self._acts_reported = {k: a[0] for k, a in acts.items()}
        kv = [(f"acted.{k}", str(a[0])) for k, a in sorted(acts.items())]
        last = self.last_act
        if last is not None:
            kv.append(("acted.last", f"{last[0]}{': ' + last[1] if last[1] else ''}"))
        recent = last is not None and self.latest is not None and self.latest - last[2] <= ACT_HOLD
        if not (since or recent):
            return kv, None
        what = ", ".join(f"{k} x{n}" for k, n in sorted(since.items(), key=lambda kn: -kn[1])) or "nothing new"
        detail = f": {last[1]}" if last[1] else ""
        return kv, (f"safety acting (since the last report: {what}); last: {last[0]}{detail}")[:400]
