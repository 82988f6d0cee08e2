"""One message in flight over a lossy link: a driver sends a joint state, waits for its command (or a
timeout), then sends the next, as a lockstep simulator or a driver that waits for its command does.

    .venv/bin/python bench/pingpong.py                    # 2000 states per row, 10 % loss a->b
    .venv/bin/python bench/pingpong.py --loss 0,10 --states 1000 --kinds echo,controller

Two network namespaces joined by a veth pair (test/netns.py: UDP over the link, nftables loss on the
egress of namespace a, where the driver runs); the node under test (the echo node, or the controller
node with gravity compensation) in namespace b with its input QoS best_effort depth 1 (the controller's
default) or reliable depth 10.  The driver's publisher mirrors the node's input QoS; its subscriptions
are reliable.  Each reply is matched to its state exactly (the echo returns the positions; the
controller's ~/state carries q of the state it stepped on).  A state whose reply has not come after
--timeout is given up: counted as lost, the next one is sent.  The controller runs with its default
watchdog_timeout (0.1 s) unless --watchdog says otherwise: with --timeout 0.1 every given-up state trips
its watchdog, and the state after it must still be answered (issue 45, doc/benchmarks.md).  No
assertions: a table.

What it shows (see the README's "QoS on a lossy link"): with best_effort a lost state is gone, and the
one-in-flight driver waits its whole timeout for an answer that never comes; with reliable the writer
repairs the loss (the reader's NACK, the writer's heartbeat), a few hundred microseconds to
milliseconds later, and the answer comes.  Streaming is the opposite case: the next state is already
on its way, so a lost one costs nothing with best_effort (depth 1: the newest is the one that matters)
while reliable depth 10 delivers the repaired old states in order, behind which the new ones wait.
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "test"))

import _ros_proc as rp  # noqa: E402
import latency as L  # noqa: E402
import netns  # noqa: E402

QOS = {"best_effort/1": ("best_effort", 1), "reliable/10": ("reliable", 10)}


def run_driver(a):
    import threading

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from robot_dynamics.nodes.common import make_qos
    rclpy.init()
    node = rclpy.create_node("pingpong_driver")
    pub = node.create_publisher(JointState, "/joint_states", make_qos(a.rel, a.depth))
    got = {}
    ev = threading.Event()
    lock = threading.Lock()

    def on_reply(key, t):
        with lock:
            got.setdefault(key, t)
        ev.set()
    if a.kind == "echo":
        node.create_subscription(Float64MultiArray, "/effort_controller/commands",
                                 lambda m: len(m.data) == 7 and on_reply(m.data[6], time.perf_counter_ns()),
                                 make_qos("reliable", 100))
    else:                                   # gravity compensation: ~/state position = q (reference)
        node.create_subscription(JointState, "/torque_controller/state",
                                 lambda m: len(m.position) == 7 and math.isfinite(m.position[6])
                                 and on_reply(m.position[6], time.perf_counter_ns()), make_qos("reliable", 100))
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    threading.Thread(target=ex.spin, daemon=True).start()
    msg = JointState()
    msg.name = list(L.PANDA_JOINTS)
    msg.velocity = [0.0] * 7

    def send(key):
        msg.position = L.Q0[:6] + [key]
        t = time.perf_counter_ns()
        pub.publish(msg)
        return t
    # warm-up: until 30 in a row are answered (discovery, autostart), on keys below the recorded ones
    t_end, ok, k = time.monotonic() + a.discovery_timeout, 0, 0
    while ok < 30 and time.monotonic() < t_end:
        k += 1
        key = L.Q0[6] - k * L.KEY_STEP
        ev.clear()
        send(key)
        ev.wait(0.1)
        with lock:
            ok = ok + 1 if key in got else 0
    res = {"status": "ok" if ok >= 30 else "no_delivery", "lat_us": [], "lost": 0, "lost_idx": []}
    if ok >= 30:
        for k in range(a.states):
            key = L.Q0[6] + k * L.KEY_STEP
            ev.clear()
            t0 = send(key)
            t_end = t0 + int(a.timeout * 1e9)
            while True:
                with lock:
                    t = got.get(key)
                if t is not None:
                    res["lat_us"].append((t - t0) / 1e3)
                    break
                rem = (t_end - time.perf_counter_ns()) / 1e9
                if rem <= 0:
                    res["lost"] += 1
                    res["lost_idx"].append(k)
                    break
                ev.wait(min(rem, 0.01))
                ev.clear()
    if res["status"] == "ok":                   # replies to given-up states that came after the give-up
        with lock:
            res["late_answers"] = sum(1 for k in range(a.states) if (L.Q0[6] + k * L.KEY_STEP) in got) \
                - len(res["lat_us"])
    Path(a.out).write_text(json.dumps(res))
    ex.shutdown(timeout_sec=1.0)
    rclpy.try_shutdown()
    return 0


# the node's module run with realtime.calm_middleware_timers a no-op: the middleware's timer thread left
# under SCHED_OTHER (the A/B of --no-calm)
NO_CALM = ("import runpy, sys; import robot_dynamics.realtime as r; r.calm_middleware_timers = lambda: []; "
           "runpy.run_module(sys.argv.pop(1), run_name='__main__')")


def node_cmd(kind, qos, watchdog=None, echo_mode="executor", extra=(), calm=True):
    """The node under test; watchdog None: the controller's default watchdog_timeout."""
    py = [sys.executable] if calm else [sys.executable, "-c", NO_CALM]
    if kind == "echo":
        return py + ([] if calm else [L.ECHO_MODULE]) + (["-m", L.ECHO_MODULE] if calm else []) + ["--ros-args", "-p", f"qos_reliability:={qos[0]}",
                "-p", f"qos_depth:={qos[1]}", "-p", "output_qos_reliability:=reliable", "-p", "output_qos_depth:=1",
                "-p", f"mode:={echo_mode}"]
    cmd = py + (["-m", L.CONTROLLER_MODULE] if calm else [L.CONTROLLER_MODULE]) + ["--ros-args", "-p", "controller:=gravity_compensation",
           "-p", "robot:=panda", "-p", "joints:=[" + ",".join(L.PANDA_JOINTS) + "]",
           "-p", f"qos_reliability:={qos[0]}", "-p", f"qos_depth:={qos[1]}"]
    if watchdog is not None:
        cmd += ["-p", f"watchdog_timeout:={watchdog}"]
    for kv in extra:
        cmd += ["-p", kv]
    return cmd


def watchdog_trips(log_path):
    """Watchdog trips the controller logged (its throttled lines carry '(N more occurrences)')."""
    import re
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", default="bench", choices=["bench", "driver"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--kind", default="echo", help=argparse.SUPPRESS)
    ap.add_argument("--rel", default="best_effort", help=argparse.SUPPRESS)
    ap.add_argument("--depth", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--states", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=0.05, help="s a state waits for its answer")
    ap.add_argument("--loss", default="10", help="percent of namespace a's packets dropped, comma separated")
    ap.add_argument("--kinds", default="echo,controller")
    ap.add_argument("--qos", default=",".join(QOS))
    ap.add_argument("--discovery-timeout", type=float, default=60.0)
    ap.add_argument("--watchdog", type=float, default=0.0,
                    help="controller watchdog_timeout [s]; 0: the node's default (0.1 s)")
    ap.add_argument("--echo-mode", default="executor", choices=["executor", "control_path"])
    ap.add_argument("--param", action="append", default=[], help="extra controller parameter name:=value")
    ap.add_argument("--no-calm", action="store_true", help="the node's middleware timer thread left under "
                    "SCHED_OTHER (realtime.calm_middleware_timers a no-op)")
    ap.add_argument("--repeat", type=int, default=1, help="rows per (loss, node, QoS)")
    a = ap.parse_args(argv)
    if a.role == "driver":
        return run_driver(a)
    why = netns.why_unavailable() or (None if netns.nft_available() else "nftables `nft` not installed")
    if why:
        print(f"pingpong: not run: {why}")
        return 0
    rp.install_handlers()
    tmp = Path(tempfile.mkdtemp(prefix="rd_pingpong_"))
    print("robot_dynamics ping-pong over a lossy link (bench/pingpong.py)")
    print(f"  date {time.strftime('%Y-%m-%d %H:%M:%S')}  cpus {os.cpu_count()}  load {os.getloadavg()[0]:.2f}; "
          f"{a.states} states per row, one in flight, given up after {a.timeout * 1e3:.0f} ms; loss on the "
          "driver's side (a->b: the joint states and the driver's acknowledgements)")
    rows, ratio = [], []
    wd = a.watchdog if a.watchdog > 0 else None
    print(f"  controller watchdog_timeout {'the default (0.1 s)' if wd is None else f'{wd:g} s'}; echo mode "
          f"{a.echo_mode}" + ("; middleware timer thread NOT calmed" if a.no_calm else "") + (f"; controller parameters {a.param}" if a.param else ""))
    for loss in [float(x) for x in a.loss.split(",")]:
        for rep in range(a.repeat):
            for qn in a.qos.split(","):
                qos = QOS[qn]
                same = {}
                for kind in a.kinds.split(","):
                    tag = f"{kind}_{qn.replace('/', '')}_{loss:g}_{rep}"
                    with netns.TwoHosts() as net:
                        env = net.env(rp.bench_env(), domain_id=None)
                        node = net.start("b", node_cmd(kind, qos, wd, a.echo_mode, a.param, not a.no_calm), tmp / f"{tag}.node.log",
                                         env, str(ROOT))
                        out = tmp / f"{tag}.json"
                        if loss > 0:
                            net.loss("a", loss)
                        drv = net.start("a", [sys.executable, str(Path(__file__).resolve()), "--role", "driver",
                                              "--out", str(out), "--kind", kind, "--rel", qos[0], "--depth",
                                              str(qos[1]), "--states", str(a.states), "--timeout", str(a.timeout),
                                              "--discovery-timeout", str(a.discovery_timeout)],
                                        tmp / f"{tag}.driver.log", env, str(ROOT))
                        try:
                            drv.wait(a.discovery_timeout + a.states * (a.timeout + 0.01) + 60)
                        except Exception:  # noqa: BLE001
                            pass
                        net.stop(drv)
                        net.stop(node)
                    try:
                        r = json.loads(out.read_text())
                    except (OSError, ValueError):
                        r = {"status": "driver failed", "lat_us": [], "lost": 0}
                    lat = np.array(r["lat_us"]) if r["lat_us"] else np.array([math.nan])
                    p = np.percentile(lat, [50, 90, 99]) if r["lat_us"] else [math.nan] * 3
                    # every state, a given-up one counted at the give-up time (the driver's view)
                    full = np.concatenate([lat[np.isfinite(lat)], np.full(r["lost"], a.timeout * 1e6)])
                    p99_all = float(np.percentile(full, 99)) if len(full) else math.nan
                    trips = watchdog_trips(tmp / f"{tag}.node.log") if kind == "controller" else "-"
                    same[kind] = (r["lost"], p[0], p99_all)
                    rows.append([f"{loss:g} %", kind, qn, r["status"], len(r["lat_us"]), r["lost"],
                                 r.get("late_answers", "-"), trips, L.fmt(p[0]), L.fmt(p[1]), L.fmt(p[2]),
                                 L.fmt(float(np.max(lat))), L.fmt(p99_all)])
                    print(f"  done: loss {loss:g} % {kind} {qn} #{rep}: {r['status']}, given up {r['lost']}, "
                          f"watchdog trips {trips}", file=sys.stderr, flush=True)
                if "echo" in same and "controller" in same:
                    (lc, pc, qc), (le, pe, qe) = same["controller"], same["echo"]
                    ratio.append([f"{loss:g} %", qn, rep, f"{lc} / {le}", L.fmt(pc / pe, "{:.2f}"),
                                  L.fmt(qc / qe, "{:.2f}")])
    L.table("Ping-pong: one state in flight; answered latency [us] (reply received - state sent, driver's "
            "clock); late = replies to given-up states that came after the give-up; p99 all = over every "
            "state, a given-up one at the give-up time",
            ["loss a->b", "node", "node input QoS", "status", "answered", "given up", "late", "wd trips", "p50",
             "p90", "p99", "max", "p99 all"], rows)
    if ratio:
        L.table("Controller against the echo, same loss and QoS, back to back",
                ["loss a->b", "input QoS", "round", "given up ctl / echo", "p50 x", "p99 all x"], ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
