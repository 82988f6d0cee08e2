"""The real-time option (robot_dynamics/realtime.py): every setting is applied in a child process and
read back from the OS (sched_getscheduler / sched_getparam / sched_getaffinity of the thread,
/proc/self/status VmLck, gc); refusals (a priority out of range, an offline CPU, the capabilities
dropped with setpriv) are reported and the process carries on, unless `required`."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest

from robot_dynamics import realtime

ROOT = Path(__file__).resolve().parents[1]
CAP_IPC_LOCK, CAP_SYS_NICE = 14, 23


def _cap_eff():
    for line in open("/proc/self/status"):
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def _has_caps():
    eff = _cap_eff()
    return bool(eff >> CAP_SYS_NICE & 1) and bool(eff >> CAP_IPC_LOCK & 1)


# The child applies the settings given as JSON, then reports what the OS says, on the main thread and
# on a thread started afterwards (Linux schedules threads; threads inherit the creator's policy).
CHILD = textwrap.dedent(r'''
    import gc, json, os, sys, threading
    from robot_dynamics import realtime
    s = realtime.Settings(**json.loads(sys.argv[1]))
    out = {}
    # a thread that exists before apply() (as DDS's receive threads do when a node applies it)
    early_go = threading.Event()
    early = threading.Thread(target=early_go.wait, daemon=True)
    early.start()
    try:
        out["report"] = realtime.apply(s, log=lambda t: print("LOG " + t, file=sys.stderr))
    except realtime.RealtimeError as e:
        out["raised"] = str(e)
    def os_view(tid=0):
        vmlck = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmLck:")][0]
        return {"policy": os.sched_getscheduler(tid), "priority": os.sched_getparam(tid).sched_priority,
                "affinity": sorted(os.sched_getaffinity(tid)), "vmlck_kb": vmlck,
                "gc_enabled": gc.isenabled(), "gc_frozen": gc.get_freeze_count()}
    out["main"] = os_view()
    box = {}
    t = threading.Thread(target=lambda: box.update(v=os_view(threading.get_native_id())))
    t.start(); t.join()
    out["thread"] = box["v"]
    out["early"] = os_view(early.native_id)
    early_go.set()
    out["alive_after"] = True          # the process carried on after apply()
    print(json.dumps(out))
''')


def run_child(settings, prefix=(), check=True):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run(list(prefix) + [sys.executable, "-c", CHILD, json.dumps(settings)], capture_output=True,
                       text=True, timeout=60, env=env, cwd=str(ROOT))
    if check:
        assert r.returncode == 0, r.stderr[-2000:]
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    return (json.loads(lines[-1]) if lines else None), r


def baseline():
    out, _ = run_child({})
    return out["main"]


def test_defaults_change_nothing():
    """A laptop user who sets nothing: the OS state equals the parent's, nothing refused or logged."""
    out, r = run_child({})
    assert out["report"]["status"] == "ok"
    assert "LOG" not in r.stderr
    m = out["main"]
    assert m["policy"] == os.sched_getscheduler(0) and m["priority"] == os.sched_getparam(0).sched_priority
    assert m["affinity"] == sorted(os.sched_getaffinity(0))
    assert m["gc_enabled"] is True and m["gc_frozen"] == 0
    # the parameter table a node declares carries the same defaults
    from robot_dynamics.nodes.common import ParamSpec, check_value
    specs = [ParamSpec(*p, startup=True) for p in realtime.PARAMS]
    defaults = {s.name: s.default for s in specs}
    assert all(check_value(s, s.default) is None for s in specs)
    assert realtime.settings_from(defaults.get) == realtime.Settings()


@pytest.mark.skipif(not _has_caps(), reason="needs CAP_SYS_NICE and CAP_IPC_LOCK (run as root) to apply "
                                            "SCHED_FIFO and mlockall")
@pytest.mark.parametrize("policy,const", [("fifo", os.SCHED_FIFO), ("rr", os.SCHED_RR)])
def test_applied_settings_read_back_from_the_os(policy, const):
    cpu = max(os.sched_getaffinity(0))
    prio = 37
    out, _ = run_child(dict(sched_policy=policy, sched_priority=prio, lock_memory=True, cpu_affinity=[cpu],
                            gc_mode="manual", gc_period=0.5))
    assert out["report"]["status"] == "ok", out["report"]
    for where in ("main", "thread", "early"):      # scope 'process': the earlier thread too
        v = out[where]
        assert v["policy"] == const, (where, v)
        assert v["priority"] == prio, (where, v)
        assert v["affinity"] == [cpu], (where, v)
    # mlockall(MCL_CURRENT): the whole mapped interpreter (>= a few MB) is locked
    assert out["main"]["vmlck_kb"] > 4096, out["main"]
    assert out["main"]["gc_enabled"] is False and out["main"]["gc_frozen"] > 1000


@pytest.mark.skipif(not _has_caps(), reason="needs CAP_SYS_NICE (run as root) to apply SCHED_FIFO")
def test_scope_thread_leaves_the_other_threads_alone():
    out, _ = run_child(dict(sched_policy="fifo", sched_priority=21, scope="thread"))
    assert out["main"]["policy"] == os.SCHED_FIFO and out["main"]["priority"] == 21
    assert out["thread"]["policy"] == os.SCHED_FIFO          # created afterwards: inherits
    assert out["early"]["policy"] == os.sched_getscheduler(0) and out["early"]["priority"] == 0


@pytest.mark.parametrize("settings,key", [
    (dict(sched_policy="fifo", sched_priority=120), "sched"),        # outside 1..99
    (dict(sched_policy="rr", sched_priority=0), "sched"),
    (dict(sched_policy="deadline", sched_priority=10), "sched"),     # not offered
    (dict(cpu_affinity=[4095]), "affinity"),                         # no such CPU: EINVAL
    (dict(cpu_affinity=[-1]), "affinity"),
    (dict(sched_policy="fifo", sched_priority=10, scope="everything"), "status"),
])
def test_invalid_or_impossible_setting_is_reported_and_not_fatal(settings, key):
    base = baseline()
    out, r = run_child(settings)
    assert out["alive_after"] and "raised" not in out
    assert out["report"]["status"] == "refused" and out["report"][key].startswith("refused"), out["report"]
    assert r.stderr.count("LOG real-time settings refused") == 1       # logged once
    for k in ("policy", "priority", "affinity"):
        assert out["main"][k] == base[k], (k, out["main"], base)


def test_required_raises_on_refusal():
    out, r = run_child(dict(sched_policy="fifo", sched_priority=120, required=True))
    assert "raised" in out and "120" in out["raised"]
    assert "rt_required" in r.stderr


SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(SETPRIV is None or not _has_caps(),
                    reason="needs util-linux setpriv and root to drop CAP_SYS_NICE / CAP_IPC_LOCK")
def test_refused_without_capabilities_reports_and_continues():
    """Run as a process without CAP_SYS_NICE and CAP_IPC_LOCK, RLIMIT_RTPRIO 0 and RLIMIT_MEMLOCK 64 kB:
    what a laptop user gets.  The OS refuses; apply() says so, once, and the process carries on."""
    drop = ["-sys_nice,-ipc_lock"]
    prefix = ["prlimit", "--rtprio=0", "--memlock=65536", SETPRIV, "--bounding-set", *drop,
              "--inh-caps", *drop, "--"]
    if shutil.which("prlimit") is None:
        pytest.skip("needs util-linux prlimit")
    settings = dict(sched_policy="fifo", sched_priority=50, lock_memory=True)
    out, r = run_child(settings, prefix=prefix)
    rep = out["report"]
    assert rep["status"] == "refused"
    assert rep["sched"].startswith("refused") and "CAP_SYS_NICE" in rep["sched"], rep
    assert rep["mlock"].startswith("refused"), rep
    assert r.stderr.count("LOG real-time settings refused") == 1
    assert out["main"]["policy"] == os.SCHED_OTHER and out["main"]["vmlck_kb"] == 0
    assert out["alive_after"]
    # the same, required: refuses to start
    out, r = run_child(dict(settings, required=True), prefix=prefix)
    assert "raised" in out


def test_gc_control_collects_on_its_period():
    """gc_mode manual: the collector is off; tick() collects young garbage once per period (clock given)."""
    import gc
    was = gc.isenabled()
    gc.disable()
    try:
        ctl = realtime.GcControl(realtime.Settings(gc_mode="manual", gc_period=1.0))

        class Node:
            pass
        a = Node()
        a.self = a                       # a reference cycle: only the collector frees it
        ref = weakref.ref(a)
        del a
        assert ctl.tick(100.0) is False  # starts the period
        assert ctl.tick(100.9) is False and ref() is not None
        assert ctl.tick(101.0) is True and ref() is None
        assert realtime.GcControl(realtime.Settings(gc_mode="freeze")).tick(1e9) is False
    finally:
        if was:
            gc.enable()


def test_wrapper_runs_a_module_under_the_settings(tmp_path):
    """python -m robot_dynamics.realtime ... -m MODULE: the module runs (argv passed through) under the
    settings (here an affinity, permitted to anyone)."""
    cpu = min(os.sched_getaffinity(0))
    mod = tmp_path / "rt_probe_mod.py"
    mod.write_text("import os, sys\nprint(sorted(os.sched_getaffinity(0)), sys.argv[1:])\n")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}")
    r = subprocess.run([sys.executable, "-m", "robot_dynamics.realtime", "--cpus", str(cpu), "-m", "rt_probe_mod",
                        "--ros-args", "-p", "x:=1"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"[{cpu}] ['--ros-args', '-p', 'x:=1']"
