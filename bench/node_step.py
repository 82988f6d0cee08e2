"""Per-cycle cost of the torque controller node's hot path, in process: the control thread's joint-state
handler (serialized bytes -> mapping -> law -> safety filter -> publish: the command and, with a
subscriber, ~/state).  No DDS receive path: the messages are handed straight to the handler.

    .venv/bin/python bench/node_step.py [--laws gravity_compensation,computed_torque,cartesian_impedance]
                                        [--cycles 5000] [--warmup 1000] [--rate 1000] [--state both]

The node (Panda, Pinocchio backend, autostart) runs in this process; the benchmark spins its executor
until autostart has configured and activated it, then calls the callback `--cycles` times, paced at
`--rate` Hz (0: back to back), on a ring of 64 JointState messages (a small sinusoid around the
Panda's home pose, so the law and the filter see a changing state), serialized as DDS delivers them.  `--state`: run without a ~/state subscriber ('off'), with one
('on', a subscription in a second node of the same process, matched before timing), or both.

Prints per-cycle percentiles in microseconds: the thread's CPU time (time.thread_time_ns: what the
step costs, without the time the machine gave to others) and the wall time (perf_counter_ns, which on a
shared virtual machine also holds the host's preemptions).  No assertions: a table to compare before /
after a change.
"""
import argparse
import math
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LAWS = ("gravity_compensation", "computed_torque", "cartesian_impedance")
J = [f"panda_joint{i}" for i in range(1, 8)]
Q0 = [0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398]


def make_messages(k=64):
    from sensor_msgs.msg import JointState
    msgs = []
    for i in range(k):
        m = JointState()
        m.name = list(J)                                   # a new list per message, as from DDS
        s = math.sin(2 * math.pi * i / k)
        m.position = [q + 0.05 * s for q in Q0]
        m.velocity = [0.1 * s] * 7
        m.header.stamp.sec, m.header.stamp.nanosec = 0, i * 1000000
        msgs.append(m)
    from rclpy.serialization import serialize_message
    return [serialize_message(m) for m in msgs]


def wait_until(fn, executor, timeout=60.0):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if fn():
            return True
        executor.spin_once(timeout_sec=0.02)
    return fn()


def run_law(rclpy, law, state_sub, args):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from robot_dynamics.nodes.controller import TorqueControllerNode

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    ns = f"node_step_{law}_{'s' if state_sub else 'n'}"
    overrides = [Parameter("controller", value=law), Parameter("robot", value="panda"),
                 Parameter("joints", value=J), Parameter("joint_states_topic", value=f"/{ns}/joint_states"),
                 Parameter("command_topic", value=f"/{ns}/commands"),
                 Parameter("wrench_topic", value=f"/{ns}/wrench")]
    node = TorqueControllerNode(f"{ns}_ctrl", context=ctx, parameter_overrides=overrides)
    helper = Node(f"{ns}_helper", context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    ex.add_node(helper)
    res = dict(law=law, state_sub="yes" if state_sub else "no")
    try:
        if not wait_until(lambda: getattr(node, "active", False), ex):
            res["status"] = f"not active ({node.lifecycle_state}: {node.config_error})"
            return res
        if state_sub:
            got = []
            helper.create_subscription(JointState, f"/{node.get_name()}/state", got.append, 10)
            if not wait_until(lambda: node.c.state_pub.get_subscription_count() > 0, ex, 10.0):
                res["status"] = "~/state subscriber not matched"
                return res
        # this thread stands in for the node's control thread: that one is stopped (else each
        # wake_at from here would wake it, and the two would trade the interpreter every cycle)
        path = node.c.path
        path.stop()
        path._thread = threading.current_thread()
        path._ident = threading.get_ident()
        handler = node._on_joint_state

        def cb(raw):
            handler(raw, time.monotonic(), True)
        msgs = make_messages()
        k = len(msgs)
        period = 1.0 / args.rate if args.rate > 0 else 0.0
        n_total = args.warmup + args.cycles
        ts = np.empty(n_total, dtype=np.int64)
        cs = np.empty(n_total, dtype=np.int64)
        tt = time.thread_time_ns
        steps0 = None
        t_next = time.perf_counter()
        for i in range(n_total):
            if i == args.warmup:
                steps0 = node.c.total_steps
                if state_sub:                           # any late ~/state subscription check is done
                    ex.spin_once(timeout_sec=0.0)
            if period:
                t_next += period
                while True:
                    rem = t_next - time.perf_counter()
                    if rem <= 0:
                        break
                    if rem > 3e-4:
                        time.sleep(rem - 2.5e-4)
            c0 = tt()
            t0 = time.perf_counter_ns()
            cb(msgs[i % k])
            ts[i] = time.perf_counter_ns() - t0
            cs[i] = tt() - c0
        x = ts[args.warmup:] / 1e3
        cx = cs[args.warmup:] / 1e3
        res.update(status="ok", p50=np.percentile(x, 50), p90=np.percentile(x, 90), p99=np.percentile(x, 99),
                   max=x.max(), mean=x.mean(), cpu_p50=np.percentile(cx, 50), cpu_mean=cx.mean(),
                   steps=node.c.total_steps - steps0,
                   reasons=",".join(sorted(node.c.safety.counts)) or "-")
        return res
    finally:
        ex.shutdown(timeout_sec=1.0)
        helper.destroy_node()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--laws", default=",".join(LAWS))
    ap.add_argument("--cycles", type=int, default=5000, help="timed cycles per run")
    ap.add_argument("--warmup", type=int, default=1000, help="untimed cycles first (covers the start ramp)")
    ap.add_argument("--rate", type=float, default=1000.0, help="pacing [Hz]; 0: back to back")
    ap.add_argument("--state", default="both", choices=("off", "on", "both"),
                    help="~/state subscriber absent, present, or both runs")
    args = ap.parse_args(argv)
    import rclpy
    subs = {"off": [False], "on": [True], "both": [False, True]}[args.state]
    rows = []
    for law in [x for x in args.laws.split(",") if x]:
        for s in subs:
            r = run_law(rclpy, law, s, args)
            rows.append(r)
            print(f"  {law} (~/state subscriber: {r['state_sub']}): {r['status']}", file=sys.stderr, flush=True)
    pace = f"{args.rate:g} Hz" if args.rate > 0 else "back to back"
    print(f"\nJointState callback -> publish, in process (Panda, pinocchio backend), {args.cycles} cycles "
          f"after {args.warmup} warm-up, paced {pace}; microseconds per cycle\n")
    hdr = ["law", "~/state sub", "CPU p50", "CPU mean", "wall p50", "p90", "p99", "max", "mean", "steps",
           "safety reasons seen"]
    keys = ("cpu_p50", "cpu_mean", "p50", "p90", "p99", "max", "mean")
    table = [[r["law"], r["state_sub"]] + ([f"{r[k]:.1f}" for k in keys]
                                           + [str(r["steps"]), r["reasons"]] if r["status"] == "ok"
                                           else [r["status"]] + [""] * (len(keys) + 1)) for r in rows]
    w = [max(len(str(x)) for x in col) for col in zip(hdr, *table)]
    print("| " + " | ".join(h.ljust(n) for h, n in zip(hdr, w)) + " |")
    print("|" + "|".join("-" * (n + 2) for n in w) + "|")
    for row in table:
        print("| " + " | ".join(str(x).ljust(n) for x, n in zip(row, w)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
