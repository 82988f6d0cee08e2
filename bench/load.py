"""Real time under load: the 1 kHz gravity loop and the DDS ping-pong with N CPU hogs, with and without
the real-time option (robot_dynamics/realtime.py).

    .venv/bin/python bench/load.py                        # loop 60 s + ping-pong 30 s per config
    .venv/bin/python bench/load.py --loop-duration 10 --pp-duration 8 --hogs 0,2 --sections loop,pingpong

Sections:
  loop      a child process runs the gravity-compensation law + safety filter (Panda, Pinocchio) on
            absolute 1 ms deadlines (clock_nanosleep via time.sleep to the deadline, no busy wait) for
            --loop-duration s; per cycle it records the wake-up lateness (wake time - deadline) and the
            compute time.  late = cycles whose work ended after the next deadline; longest gap = the
            longest time between the ends of two consecutive cycles.  RT option: SCHED_FIFO 80,
            mlockall, gc freeze, applied in the loop process (realtime.apply) after the model is built.
  pingpong  bench/latency.py's driver at 1 kHz against the echo node (the floor) and the controller
            (gravity compensation, its default executor and QoS); RT option: node and driver started
            through `python -m robot_dynamics.realtime --policy fifo --priority 50 --lock-memory`.
Hogs: N processes spinning `while True: pass` at SCHED_OTHER (nice 0), started before and killed after
each configuration (each also ends itself after --hog-limit s, so none can outlive the benchmark).
Every child runs in its own process group and is killed at exit (bench/_ros_proc.py).  No
assertions: this prints tables.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import _ros_proc as rp  # noqa: E402
import latency as L  # noqa: E402

HOG = "import time, sys\nt_end = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < t_end:\n    pass\n"

LOOP_CHILD = r'''
import json, sys, time, gc
import numpy as np
from robot_dynamics import realtime
from robot_dynamics.control import SafetyFilter, State, make_law
from robot_dynamics.dynamics import Model, PinocchioBackend
duration, rt, out = float(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
model = Model.from_robot("panda")
dyn = PinocchioBackend(model)
law = make_law("gravity_compensation", model, dyn, {})
sf = SafetyFilter(model)
q0 = np.array([0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398])
st = State(q=q0.copy(), v=np.zeros(7))
law.reset(st); sf.reset()
report = realtime.apply(realtime.Settings(sched_policy="fifo", sched_priority=80, lock_memory=True,
                                          gc_mode="freeze")) if rt else {}
P = 1_000_000
N = int(duration * 1000)
wake = np.zeros(N, np.int64); end = np.zeros(N, np.int64)
t0 = time.perf_counter_ns() + 10 * P
w = 2 * np.pi * 0.5
for k in range(N):
    dl = t0 + k * P
    rem = dl - time.perf_counter_ns()
    if rem > 0:
        time.sleep(rem * 1e-9)
    wake[k] = time.perf_counter_ns() - dl
    s = np.sin(w * k / 1000.0)
    st.q[:6] = q0[:6] + 0.05 * s
    tau = law.compute(st)
    sf.apply(tau, st, 0.001)
    end[k] = time.perf_counter_ns()
np.savez(out, wake=wake, end=end, t0=t0)
print(json.dumps({"report": report, "policy": realtime.read_back()["policy"]}))
'''


def start_hogs(n, limit, tmp):
    return [rp.start([sys.executable, "-c", HOG, str(limit)], dict(os.environ), tmp / f"hog{i}.log") for i in range(n)]


def stop_hogs(hogs):
    for h in hogs:
        rp.stop(h, timeout=0.5)


def run_loop(duration, rt, tmp, tag):
    out = str(tmp / f"loop_{tag}.npz")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", LOOP_CHILD, str(duration), "1" if rt else "0", out], capture_output=True,
                       text=True, timeout=duration + 120, env=env, cwd=str(ROOT))
    if r.returncode != 0:
        return {"status": "failed: " + r.stderr[-300:]}
    info = json.loads(r.stdout.strip().splitlines()[-1])
    d = np.load(out)
    wake, end = d["wake"] / 1e3, d["end"]
    P = 1_000_000
    dl_next = d["t0"] + (np.arange(len(end)) + 1) * P
    late = int(np.sum(end > dl_next))
    gap = float(np.max(np.diff(end)) / 1e6)
    p50, p99, p999 = np.percentile(wake, [50, 99, 99.9])
    return {"status": "ok", "policy": info["policy"], "n": len(end), "late": late, "late_pct": 100 * late / len(end),
            "gap_ms": gap, "p50": p50, "p99": p99, "p999": p999, "max": float(wake.max()),
            "rt_report": info.get("report", {}).get("status", "-")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default="loop,pingpong")
    ap.add_argument("--hogs", default="0,2", help="numbers of CPU hogs, comma separated")
    ap.add_argument("--loop-duration", type=float, default=60.0)
    ap.add_argument("--pp-duration", type=float, default=30.0)
    ap.add_argument("--hog-limit", type=float, default=900.0, help="a hog ends itself after this many s")
    ap.add_argument("--kinds", default="echo,controller")
    ap.add_argument("--controller-executors", default="default",
                    help="controller executors to compare, e.g. single,events ('default' = the node's own)")
    ap.add_argument("--rt-modes", default="off,on", help="RT option off, on or both")
    ap.add_argument("--domain", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "28")))
    a = ap.parse_args(argv)
    rp.install_handlers()
    tmp = Path(tempfile.mkdtemp(prefix="rd_load_"))
    hogs_list = [int(x) for x in a.hogs.split(",")]
    print("robot_dynamics load benchmark (bench/load.py)")
    print(f"  date {time.strftime('%Y-%m-%d %H:%M:%S')}  cpus {os.cpu_count()}  load average at start "
          f"{os.getloadavg()[0]:.2f}  (other processes on the machine count as load too)")

    def log(s):
        print(s, file=sys.stderr, flush=True)

    try:
        if "loop" in a.sections:
            rows = []
            for n in hogs_list:
                for rt in (False, True):
                    hogs = start_hogs(n, a.hog_limit, tmp)
                    try:
                        log(f"loop: {n} hogs, RT {rt}")
                        r = run_loop(a.loop_duration, rt, tmp, f"{n}_{int(rt)}")
                    finally:
                        stop_hogs(hogs)
                    rows.append([n, "on" if rt else "off", r.get("policy", "-"), r["status"][:40], r.get("n", "-"),
                                 r.get("late", "-"), L.fmt(r.get("late_pct"), "{:.3f}"), L.fmt(r.get("gap_ms"), "{:.2f}"),
                                 L.fmt(r.get("p50")), L.fmt(r.get("p99")), L.fmt(r.get("p999")), L.fmt(r.get("max")),
                                 f"{os.getloadavg()[0]:.1f}"])
                    L.table("progress", LOOP_HDR, rows[-1:])
            L.table(f"1 kHz gravity loop ({a.loop_duration:g} s per row; wake-up lateness in us; late = work ended "
                    "after the next deadline)", LOOP_HDR, rows)
        if "pingpong" in a.sections:
            largs = argparse.Namespace(state_topic="/torque_controller/state", warmup=1.0, discovery_timeout=60.0)
            env = rp.bench_env(a.domain)
            rows, res = [], []
            for n in hogs_list:
                for rt in [m == "on" for m in a.rt_modes.split(",")]:
                    def wrap(cmd, role, rt=rt):
                        if not rt:
                            return cmd
                        return [cmd[0], "-m", "robot_dynamics.realtime", "--policy", "fifo", "--priority", "50",
                                "--lock-memory", "-m"] + (cmd[2:] if cmd[1] == "-m" else cmd[1:])
                    hogs = start_hogs(n, a.hog_limit, tmp)
                    try:
                        runs = [(k, "single" if k == "echo" else ex) for k in a.kinds.split(",")
                                for ex in (["single"] if k == "echo" else a.controller_executors.split(","))]
                        for kind, ex in runs:
                            cfg = dict(kind=kind, law="gravity_compensation" if kind == "controller" else None,
                                       rate=1000, duration=a.pp_duration, executor=ex, qos=L.CONTROLLER_QOS,
                                       extra={} if ex == "default" or kind == "echo" else {"executor": ex},
                                       tag_extra=f"_{n}hogs_rt{int(rt)}")
                            log(f"pingpong: {kind}, {n} hogs, RT {rt}")
                            r = L.run_one(cfg, largs, env, tmp, log, wrap=wrap)
                            r["hogs"], r["rt"] = n, rt
                            res.append(r)
                            rows.append([n, "on" if rt else "off", L.label(r) + ("" if kind == "echo" else f" ({ex})"),
                                         r.get("status", "?"), r.get("n_sent", "-"),
                                         r.get("lost", "-"),
                                         L.fmt(100 * r["late_frac"], "{:.3f}") if "late_frac" in r else "-",
                                         L.fmt(r.get("max_gap_ms"), "{:.2f}"), L.fmt(r.get("p50")), L.fmt(r.get("p99")),
                                         L.fmt(r.get("p999")), L.fmt(r.get("max")), f"{os.getloadavg()[0]:.1f}"])
                            L.table("progress", PP_HDR, rows[-1:])
                    finally:
                        stop_hogs(hogs)
            L.table(f"DDS ping-pong at 1 kHz ({a.pp_duration:g} s per row; latency in us; echo node QoS as the "
                    "controller's: best_effort/1 in, reliable/1 out)", PP_HDR, rows)
            ratio = []
            for r in res:
                if r["kind"] == "controller" and "p99" in r:
                    e = next((x for x in res if x["kind"] == "echo" and x["hogs"] == r["hogs"] and x["rt"] == r["rt"]
                              and "p99" in x), None)
                    if e:
                        ratio.append([r["hogs"], "on" if r["rt"] else "off", r["executor"],
                                      L.fmt(r["p50"] / e["p50"], "{:.2f}"), L.fmt(r["p99"] / e["p99"], "{:.2f}")])
            if ratio:
                L.table("Controller / echo floor (same configuration)", ["hogs", "RT", "executor", "p50 x", "p99 x"],
                        ratio)
    finally:
        rp.kill_all()
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


LOOP_HDR = ["hogs", "RT", "policy", "status", "cycles", "late", "late %", "longest gap ms", "wake p50 us",
            "p99 us", "p99.9 us", "max us", "load1"]
PP_HDR = ["hogs", "RT", "node", "status", "sent", "lost", "late %", "max gap ms", "p50 us", "p99 us", "p99.9 us",
          "max us", "load1"]

if __name__ == "__main__":
    sys.exit(main())
