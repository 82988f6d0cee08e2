"""Controller and robot on two "hosts" (two network namespaces joined by a veth pair, test/netns.py):
round-trip latency of the echo node (the floor) and the controller over the link, with faults.

    sudo .venv/bin/python bench/two_hosts.py                 # all cases, 20 s recorded per run
    .venv/bin/python bench/two_hosts.py --duration 8 --cases none,loss10_in --kinds echo,controller

The driver of bench/latency.py (JointState at 1 kHz on absolute deadlines, replies matched exactly:
echo by content, controller through its ~/state) runs in namespace a (the robot's side), the node under
test in namespace b (the controller's host); "one namespace" runs both in the root namespace over
loopback, as bench/latency.py does.  Faults (see test/netns.py): loss of x % of the packets leaving a
(the joint states: "in") or leaving b (the commands: "out"), bursts (10 consecutive packets of every
100), a tbf bandwidth cap, and repeated 200 ms partitions (link down / up every 2.5 s while recording).
tc netem (delay, jitter) is not in this kernel: those cases run only where netem exists.

Columns: lost = inputs never answered (non-safe); late = answered later than one period (1 ms) or
never; safe = all-zero replies (the watchdog's safe command); unsafe = replies not finite, beyond the
effort limits of the URDF, or changing faster than torque_rate_limit (1000 N m/s default) between
consecutive received commands on their arrival times plus 1 ms; watchdog trips from the node's log;
resume = from link up to the first non-safe reply.  No assertions: this prints tables.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

import _ros_proc as rp  # noqa: E402
import latency as L  # noqa: E402
import netns  # noqa: E402

CASES = {
    "one_ns": ("one namespace (loopback)", None),
    "none": ("two namespaces, no fault", lambda net: None),
    "loss1_in": ("loss 1 % joint states (a->b)", lambda net: net.loss("a", 1)),
    "loss1_out": ("loss 1 % commands (b->a)", lambda net: net.loss("b", 1)),
    "loss10_in": ("loss 10 % joint states (a->b)", lambda net: net.loss("a", 10)),
    "loss10_out": ("loss 10 % commands (b->a)", lambda net: net.loss("b", 10)),
    "burst_in": ("bursts 10/100 joint states", lambda net: net.burst("a", 10, 100)),
    "tbf": ("tbf 2 Mbit/s both ways", lambda net: (net.rate_cap("a", "2mbit"), net.rate_cap("b", "2mbit"))),
    "partition": ("200 ms partitions every 2.5 s", lambda net: None),
    "delay": ("netem delay 1 ms +- 0.5 ms", lambda net: (net.delay("a", 1, 0.5), net.delay("b", 1, 0.5))),
}
# QoS variants of the node (input reliability/depth, output reliability/depth)
QOS = {"default": ("best_effort", 1, "reliable", 1), "be_out": ("best_effort", 1, "best_effort", 1),
       "rel_in": ("reliable", 10, "reliable", 10)}
PANDA_EFFORT = np.array([87, 87, 87, 87, 12, 12, 12], float)


def unsafe_count(res, rate_limit=1000.0):
    """Replies not finite, beyond the Panda's effort limits, or changing faster than the rate limit
    between consecutive arrivals (+ 1 ms).  Echo replies are positions, not torques: not counted."""
    if res.get("kind") != "controller" or "out" not in res:
        return "-"
    try:
        d = np.load(res["out"] + ".npz")
    except OSError:
        return "-"
    C, t = d["recv_data"], d["recv_t"] / 1e9
    if len(C) == 0:
        return "-"
    bad = ~np.all(np.isfinite(C), axis=1) | np.any(np.abs(C) > PANDA_EFFORT + 1e-9, axis=1)
    dC = np.max(np.abs(np.diff(C, axis=0)), axis=1)
    bad[1:] |= dC > rate_limit * (np.diff(t) + 1e-3)
    return int(bad.sum())


def watchdog_trips(log_path):
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return "-"
    n = 0
    for line in text.splitlines():
        if "watchdog: no" in line:
            m = re.search(r"\((\d+) more occurrence", line)
            n += 1 + (int(m.group(1)) if m else 0)
    return n


def resume_ms(res, periods):
    """Per partition: ms from link up to the first non-safe reply (median over the partitions)."""
    if not periods or "out" not in res:
        return "-"
    try:
        d = np.load(res["out"] + ".npz")
    except OSError:
        return "-"
    t = d["recv_t"] / 1e9
    ok = ~d["recv_zero"]
    out = []
    for t_down, t_up in periods:
        nxt = t[(t > t_up) & ok]
        if len(nxt):
            out.append(1e3 * (nxt[0] - t_up))
    return f"{np.median(out):.0f} ({len(out)})" if out else "-"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=20.0, help="recorded seconds per run")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--discovery-timeout", type=float, default=40.0)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--kinds", default="echo,controller")
    ap.add_argument("--qos", default="default", help="node QoS variants: " + ", ".join(QOS))
    ap.add_argument("--controller-executor", default="", help="'' = the node's default")
    ap.add_argument("--rt", action="store_true", help="node and driver under SCHED_FIFO 50 (the RT option)")
    ap.add_argument("--no-state", action="store_true", help="controller: match replies in order (no ~/state)")
    ap.add_argument("--domain", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "27")))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args(argv)
    why = netns.why_unavailable()
    if why:
        print(f"two-host benchmark not run: {why}")
        return 0
    rp.install_handlers()
    tmp = Path(tempfile.mkdtemp(prefix="rd_two_hosts_bench_"))
    largs = argparse.Namespace(state_topic="" if a.no_state else "/torque_controller/state", warmup=a.warmup,
                               discovery_timeout=a.discovery_timeout)
    wrap = None
    if a.rt:
        def wrap(cmd, role):
            return [cmd[0], "-m", "robot_dynamics.realtime", "--policy", "fifo", "--priority", "50", "-m"] + \
                   (cmd[2:] if cmd[1] == "-m" else cmd[1:])
    print("robot_dynamics two-host benchmark (bench/two_hosts.py)")
    print(f"  date {time.strftime('%Y-%m-%d %H:%M:%S')}  cpus {os.cpu_count()}  load {os.getloadavg()[0]:.2f}  "
          f"domain {a.domain}  {a.duration:g} s recorded per run  RT option {'on (FIFO 50)' if a.rt else 'off'}  "
          f"netem {'available' if netns.netem_available() else 'NOT available (delay/jitter cases skipped)'}")
    rows, results = [], []

    def log(s):
        print(s, file=sys.stderr, flush=True)

    try:
        for case in a.cases.split(","):
            label, fault = CASES[case]
            if case == "delay" and not netns.netem_available():
                print(f"  {label}: skipped (tc netem is not available in this kernel)")
                continue
            for qname in a.qos.split(","):
                q = QOS[qname]
                for kind in a.kinds.split(","):
                    cfg = dict(kind=kind, law="gravity_compensation" if kind == "controller" else None, rate=1000,
                               duration=a.duration, executor=("single" if kind == "echo" else
                                                              (a.controller_executor or "default")),
                               qos=q, tag_extra=f"_{case}_{qname}")
                    if kind == "controller":
                        cfg["extra"] = {"qos_reliability": q[0], "qos_depth": q[1], "output_qos_reliability": q[2],
                                        "output_qos_depth": q[3]}
                        if a.controller_executor:
                            cfg["extra"]["executor"] = a.controller_executor
                    log(f"run: {case} {qname} {kind}")
                    if case == "one_ns":
                        env = rp.bench_env(a.domain)
                        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
                        r = L.run_one(cfg, largs, env, tmp, log, wrap=wrap)
                        r["periods"] = []
                    else:
                        with netns.TwoHosts() as net:
                            env = net.env(rp.bench_env(a.domain), domain_id=a.domain)
                            fault(net)
                            periods = []

                            def during(node, drv, net=net, periods=periods, case=case):
                                if case != "partition":
                                    return None
                                t_next = time.monotonic() + 5.0
                                while drv.poll() is None:
                                    if time.monotonic() >= t_next:
                                        periods.append(net.partition(0.2))
                                        t_next = time.monotonic() + 2.3
                                    time.sleep(0.02)
                                return None

                            r = L.run_one(cfg, largs, env, tmp, log,
                                          start_node=lambda cmd, env, lp, net=net: net.start("b", cmd, lp, env, str(ROOT)),
                                          start_driver=lambda cmd, env, lp, net=net: net.start("a", cmd, lp, env, str(ROOT)),
                                          stop=lambda p, net=net: net.stop(p)[0], wrap=wrap, during=during)
                            r["periods"] = periods
                    r["case"], r["qname"] = case, qname
                    r["unsafe"] = unsafe_count(r)
                    r["trips"] = watchdog_trips(r["node_log"]) if kind == "controller" else "-"
                    r["resume"] = resume_ms(r, r["periods"])
                    results.append(r)
                    rows.append([label, qname, kind if kind == "echo" else "controller", r.get("status", "?"),
                                 r.get("n_sent", "-"), r.get("lost", "-"),
                                 L.fmt(100 * r["late_frac"], "{:.2f}") if "late_frac" in r else "-",
                                 r.get("safe", "-"), r["unsafe"], r["trips"], r["resume"],
                                 L.fmt(r.get("p50")), L.fmt(r.get("p99")), L.fmt(r.get("p999")), L.fmt(r.get("max")),
                                 L.fmt(r.get("max_gap_ms"), "{:.1f}"), L.fmt(r.get("node_cpu"))])
                    L.table("progress", HDR, rows[-1:])
        L.table(f"Round trip over the veth link at 1 kHz ({a.duration:g} s recorded per run; driver in "
                "namespace a, node in b; late = later than 1 ms or never)", HDR, rows)
        # controller / echo ratio per case and QoS
        ratio = []
        for r in results:
            if r["kind"] != "controller" or "p50" not in r:
                continue
            e = next((x for x in results if x["kind"] == "echo" and x["case"] == r["case"]
                      and x["qname"] == r["qname"] and "p50" in x), None)
            if e:
                ratio.append([CASES[r["case"]][0], r["qname"]] + [L.fmt(r[k] / e[k], "{:.2f}") for k in ("p50", "p99")]
                             + [f"{r['lost']} / {e['lost']}"])
        if ratio:
            L.table("Controller / echo floor in the same case (same percentile)",
                    ["case", "qos", "p50 x", "p99 x", "lost ctl / echo"], ratio)
    finally:
        rp.kill_all()
        (tmp / "results.json").write_text(json.dumps(results, default=str, indent=1))
        if not a.keep:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"raw data: {tmp}")
    return 0


HDR = ["case", "qos", "node", "status", "sent", "lost", "late %", "safe", "unsafe", "wd trips", "resume ms",
       "p50 us", "p99 us", "p99.9 us", "max us", "max gap ms", "node CPU %"]

if __name__ == "__main__":
    sys.exit(main())
