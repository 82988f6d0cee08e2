"""What a node costs per joint state at the robot's rate, over real DDS, against the two floors.

    .venv/bin/python bench/node_cost.py                     # every law + the floors, 8 s each, 3 rounds
    .venv/bin/python bench/node_cost.py --duration 20 --rounds 5 --rows echo,gravity_compensation

A driver process streams sensor_msgs/JointState for the Panda at --rate (1 kHz) and records every reply
(bench/latency.py's driver: absolute deadlines, replies timed in its own process, each command matched
to the state it answers through the controller's ~/state, exactly).  The node under test is a process of
its own; its CPU time is read from the OS (/proc/<pid>/stat, all its threads) over the recorded window.
Rows, interleaved round by round so a change of machine load hits them all alike:

  echo (executor)     rclpy's minimal echo: the subscription callback publishes, rclpy.spin (the floor
                      users know)
  echo (control path) the same echo on a thread that waits on the subscription itself
                      (nodes/control_path.py), no executor per message: the floor of this package's path
  <law>               controller_node with that law (cartesian_impedance with velocity_product_compensation),
                      default parameters otherwise (best_effort/1 in, reliable/1 out, trigger joint_state)

`--section sim` instead: the MuJoCo sim node (1 kHz) and the controller node as two processes, as the
demo runs them, for each law: the /joint_states and command rates a probe receives, the sim's own
cycle count and slips (/diagnostics), and both nodes' CPU.  (The hot path's memory over 10 minutes:
bench/memory.py.)

Columns: answered = share of the states sent in the window that got their own command; CPU per state =
node CPU seconds / states sent; x echo = that over the executor echo's of the same round; latency = reply
received - state sent (both DDS hops, the node, the driver's receive path).  The table gives the median
over rounds per row (and the spread of CPU per state).  No assertions: it measures and prints.
"""
import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _ros_proc as rp  # noqa: E402
import latency as lt  # noqa: E402

QOS = lt.CONTROLLER_QOS                 # best_effort/1 in, reliable/1 out: the controller's defaults
ROWS = {
    "echo": dict(kind="echo", law=None, extra={"mode": "executor"}, label="echo (executor)"),
    "echo_path": dict(kind="echo", law=None, extra={"mode": "control_path"}, label="echo (control path)"),
    "gravity_compensation": dict(kind="controller", law="gravity_compensation", extra={}),
    "computed_torque": dict(kind="controller", law="computed_torque", extra={}),
    "joint_impedance": dict(kind="controller", law="joint_impedance", extra={}),
    "cartesian_impedance": dict(kind="controller", law="cartesian_impedance",
                                extra={"cartesian_impedance.velocity_product_compensation": "true"}),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS), help="comma separated, of: " + ", ".join(ROWS))
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--duration", type=float, default=8.0, help="recorded seconds per run")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extra", action="append", default=[],
                    help="ROW:param:=value, a controller parameter for one row (repeatable)")
    ap.add_argument("--discovery-timeout", type=float, default=40.0)
    ap.add_argument("--state", default="both", choices=("both", "on", "off"),
                    help="controller rows: run with the driver subscribed to ~/state (exact matching for the "
                         "latency; the node then also publishes ~/state every step), without (answered by "
                         "count, latency by order: exact only without losses), or both (two runs per row)")
    ap.add_argument("--section", default="cost", choices=("cost", "sim"))
    ap.add_argument("--sim-seconds", type=float, default=10.0)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args(argv)
    if a.section == "sim":
        return sim_section(a)

    rows = [r for r in a.rows.split(",") if r]
    for r in rows:
        if r not in ROWS:
            ap.error(f"unknown row {r!r}")
    extra = {}
    for e in a.extra:
        row, _, kv = e.partition(":")
        k, _, v = kv.partition(":=")
        extra.setdefault(row, {})[k] = v
    rp.install_handlers()
    env = rp.bench_env()
    tmp = Path(tempfile.mkdtemp(prefix="rd_node_cost_"))
    # latency.run_one reads these attributes of its args
    args = argparse.Namespace(discovery_timeout=a.discovery_timeout, warmup=a.warmup,
                              state_topic="/torque_controller/state")

    def log(s):
        print(s, file=sys.stderr, flush=True)

    load0 = os.getloadavg()
    print("robot_dynamics node cost benchmark (bench/node_cost.py)")
    print(f"  date {time.strftime('%Y-%m-%d %H:%M:%S')}  host {platform.node()}  cpus {os.cpu_count()}  "
          f"load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    print(f"  {a.rate:g} Hz, {a.duration:g} s recorded per run (+{a.warmup:g} s warm-up), {a.rounds} round(s), "
          f"QoS in>out {lt.qos_label(QOS)}, ROS_DOMAIN_ID {env['ROS_DOMAIN_ID']}")
    results = {r: [] for r in rows}          # the cost runs (CPU, answered)
    lat_results = {r: [] for r in rows}      # the latency runs (exact matching)
    modes = {"both": ("off", "on"), "on": ("on",), "off": ("off",)}[a.state]

    def run(r, k, state):
        spec = ROWS[r]
        cfg = dict(kind=spec["kind"], law=spec["law"], rate=a.rate, duration=a.duration,
                   executor="single", qos=QOS, extra=dict(spec["extra"], **extra.get(r, {})),
                   tag_extra=f"_{r}_{k}_{state}")
        args.state_topic = "/torque_controller/state" if state == "on" else ""
        log(f"round {k + 1}/{a.rounds}: {r}" + ("" if spec["kind"] == "echo" else f" (~/state {state})"))
        res = lt.run_one(cfg, args, env, tmp, log)
        if res.get("status") == "ok" and res.get("n_sent"):
            res["answered"] = 1.0 - res["lost"] / res["n_sent"]
            res["cpu_per_state"] = res["node_cpu"] / 100.0 / a.rate * 1e6      # us
        else:
            log(f"  {r}: {res.get('status')}")
        res["round"] = k
        return res

    try:
        for k in range(a.rounds):
            for r in rows:
                if ROWS[r]["kind"] == "echo":           # exact matching by content, one run does both
                    res = run(r, k, "on")
                    results[r].append(res)
                    lat_results[r].append(res)
                    continue
                for state in modes:
                    res = run(r, k, state)
                    (lat_results if state == "on" else results)[r].append(res)
                    if len(modes) == 1:
                        (results if state == "on" else lat_results)[r].append(res)
    finally:
        rp.kill_all()

    def med(res, r, key):
        xs = [x[key] for x in res[r] if isinstance(x.get(key), (int, float)) and math.isfinite(x[key])]
        return statistics.median(xs) if xs else math.nan

    # x echo: per round, over the executor echo of the same round, then the median
    def ratio(res, r, key):
        if "echo" not in res:
            return math.nan
        by_round = {x["round"]: x.get(key) for x in res["echo"]}
        xs = [x[key] / by_round[x["round"]] for x in res[r]
              if isinstance(x.get(key), float) and isinstance(by_round.get(x["round"]), float)
              and by_round[x["round"]] > 0]
        return statistics.median(xs) if xs else math.nan

    hdr = ["node", "runs ok", "answered %", "CPU/state us", "(min-max)", "x echo", "% of a core",
           "answered % (~/state)", "CPU/state us (~/state)", "p50 us", "p99 us", "p99 x echo", "p99.9 us",
           "max us"]
    out = []
    for r in rows:
        ok = [x for x in results[r] if "cpu_per_state" in x]
        cpus = [x["cpu_per_state"] for x in ok]
        echo = ROWS[r]["kind"] == "echo"
        out.append([ROWS[r].get("label", r), f"{len(ok)}/{len(results[r])}",
                    lt.fmt(100 * med(results, r, "answered"), "{:.2f}"), lt.fmt(med(results, r, "cpu_per_state")),
                    f"{min(cpus):.0f}-{max(cpus):.0f}" if cpus else "-",
                    lt.fmt(ratio(results, r, "cpu_per_state"), "{:.2f}"), lt.fmt(med(results, r, "node_cpu")),
                    "=" if echo else lt.fmt(100 * med(lat_results, r, "answered"), "{:.2f}"),
                    "=" if echo else lt.fmt(med(lat_results, r, "cpu_per_state")),
                    lt.fmt(med(lat_results, r, "p50")), lt.fmt(med(lat_results, r, "p99")),
                    lt.fmt(ratio(lat_results, r, "p99"), "{:.2f}"),
                    lt.fmt(med(lat_results, r, "p999")), lt.fmt(med(lat_results, r, "max"))])
    lt.table(f"Node cost per joint state at {a.rate:g} Hz (median of {a.rounds} interleaved round(s); "
             "x echo: over the executor echo of the same round).  Controller rows: CPU and answered from a run "
             "without a ~/state subscriber (answered = replies / states sent), latency from a run with the "
             "driver on ~/state (exact matching; the node then also publishes ~/state every step)", hdr, out)
    load1 = os.getloadavg()
    print(f"\nload average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if a.keep:
        print(f"raw data and logs: {tmp}")
    else:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _cpu(p):
    return rp.cpu_seconds(p.pid)


def sim_section(a):
    """The sim node at its configured 1 kHz with a controller beside it (the demo's arrangement)."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor

    from robot_dynamics.nodes.processes import NodeProcesses, start_sim_and_controller
    env = rp.bench_env()
    os.environ.update({k: env[k] for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")})
    rclpy.init()
    node = rclpy.create_node("node_cost_sim_probe")
    # rates from the nodes' own /diagnostics, no 1 kHz subscription here: an rclpy probe taking the
    # joint states and the commands cost as much CPU as the sim on these 2 cores, and slowed both
    diag = {}

    def on_diag(msg):
        for st in msg.status:
            diag[st.name.split(":")[0]] = dict({kv.key: kv.value for kv in st.values}, _t=time.monotonic())
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 100)
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    import threading
    th = threading.Thread(target=ex.spin, daemon=True)
    th.start()
    print("robot_dynamics sim node rate (bench/node_cost.py --section sim)")
    print(f"  date {time.strftime('%Y-%m-%d %H:%M:%S')}  cpus {os.cpu_count()}  load {os.getloadavg()[0]:.2f}; "
          f"{a.sim_seconds:g} s per law, sim publish_rate 1000 Hz, controller triggered by each joint state")
    rows = []
    laws = [r for r in a.rows.split(",") if ROWS.get(r, {}).get("kind") == "controller"]
    for law in laws:
        extra = dict(ROWS[law]["extra"])
        cp = {k.split(".", 1)[0]: {k.split(".", 1)[1]: v == "true"} for k, v in extra.items()}
        diag.clear()                    # (a previous law's sim may still send its last diagnostics)
        with NodeProcesses(env=env) as procs:
            sim, ctl = start_sim_and_controller(procs, "panda", law, controller_params=cp,
                                                sim_params={"publish_rate": 1000.0})   # not the tests' 500
            ok = rp.wait_until(lambda: "mujoco_sim" in diag and int(diag.get("torque_controller", {}).get(
                "control_path.messages", 0)) > 500, 60.0)
            if not ok:
                rows.append([law, "no commands"] + ["-"] * 6)
                continue
            time.sleep(1.0)
            for k in ("mujoco_sim", "torque_controller"):   # the window starts at fresh reports
                diag.pop(k, None)
            rp.wait_until(lambda: "mujoco_sim" in diag and "torque_controller" in diag, 5.0)
            s0, k0 = dict(diag["mujoco_sim"]), dict(diag["torque_controller"])
            cs0, cc0, t0 = _cpu(sim), _cpu(ctl), time.monotonic()
            time.sleep(a.sim_seconds)
            dt = time.monotonic() - t0
            s1, k1 = dict(diag["mujoco_sim"]), dict(diag["torque_controller"])
            cs1, cc1 = _cpu(sim), _cpu(ctl)

            def rate(d0, d1, key):                   # a count's rate between two reports
                dtd = d1["_t"] - d0["_t"]
                return f"{(int(d1.get(key, 0)) - int(d0.get(key, 0))) / dtd:.0f}" if dtd > 0 else "-"
            rows.append([law, "ok", rate(s0, s1, "cycles"), rate(k0, k1, "control_path.messages"),
                         str(int(s1.get("slips", 0)) - int(s0.get("slips", 0))), k1.get("loop_rate_hz", "-"),
                         f"{100 * (cs1 - cs0) / dt:.0f}", f"{100 * (cc1 - cc0) / dt:.0f}"])
    ex.shutdown()
    th.join(5.0)
    node.destroy_node()
    rclpy.try_shutdown()
    lt.table("Sim node (MuJoCo Panda, publish_rate 1000) + controller node, rates over the window (the nodes' "
             "/diagnostics: a sim cycle publishes one joint state, the controller steps on the newest of those "
             "it takes together and publishes a command per step)",
             ["law", "status", "sim cycles = /joint_states Hz", "states taken by the controller Hz", "sim slips",
              "controller loop (commands) Hz", "sim CPU %", "controller CPU %"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
