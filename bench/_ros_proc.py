"""Child-process plumbing for the benchmarks: every ROS process is `[sys.executable, ...]` in its own
session (the ROS wheels re-exec Python once at start-up; the pid survives the exec), and every group
is killed at the end: on normal exit (try/finally + atexit) and on SIGINT/SIGTERM/SIGHUP."""
import atexit
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LIVE = []          # Popen objects not yet reaped


def bench_env(domain_id=None):
    """A copy of os.environ with a private ROS_DOMAIN_ID (random in 101..200 unless given),
    localhost-only discovery and the package on PYTHONPATH."""
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(domain_id if domain_id is not None else random.randint(101, 200))
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    pp = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + pp if pp else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["RCUTILS_LOGGING_BUFFERED_STREAM"] = "0"
    return env


def start(cmd, env, log_path):
    log = open(log_path, "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                         start_new_session=True)
    p.log_path, p.log_file = Path(log_path), log
    _LIVE.append(p)
    return p


def stop(p, timeout=3.0):
    """SIGINT to the group, then SIGTERM, then SIGKILL.  Returns the signal that ended it (name)."""
    ended_by = "exited"
    for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        if p.poll() is not None:
            break
        ended_by = sig.name
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            break
        try:
            p.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    # the group may still hold children of the node (none expected): make sure
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.log_file.close()
    except OSError:
        pass
    if p in _LIVE:
        _LIVE.remove(p)
    return ended_by


def log_tail(p, n=2000):
    try:
        p.log_file.flush()
        return p.log_path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def kill_all():
    for p in list(_LIVE):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _LIVE.remove(p)


def _on_signal(signum, frame):
    kill_all()
    sys.stderr.write(f"\ninterrupted by {signal.Signals(signum).name}: child process groups killed\n")
    os._exit(128 + signum)


def install_handlers():
    atexit.register(kill_all)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)


def cpu_seconds(pid):
    """utime + stime of a process (all threads) in seconds, or nan."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def wait_until(pred, timeout, step=0.05):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if pred():
            return True
        time.sleep(step)
    return pred()
