"""Memory of the controller node's hot path over a long 1 kHz stream: does anything grow?

    .venv/bin/python bench/memory.py                       # 10 minutes per law, gravity + Cartesian
    .venv/bin/python bench/memory.py --minutes 2 --laws cartesian_impedance

The controller node (Panda) runs in this process, on its control thread as in production, with
tracemalloc tracing every Python allocation; a driver process streams sensor_msgs/JointState at 1 kHz
(a slow sine, so the law and the filter see a changing state; ~/state subscribed by this process, so
that output is filled and sent too).  Every 30 s: the process RSS (/proc/self/status), the traced
Python heap (tracemalloc current), the live objects the garbage collector tracks, the control steps
so far.  Printed as a table with the growth between the first sample (after a minute of warm-up) and
the last, and the top allocation sites that grew (tracemalloc snapshot diff).  No assertions.
"""
import argparse
import gc
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import _ros_proc as rp  # noqa: E402

DRIVER = """
import math, sys, time, rclpy
from sensor_msgs.msg import JointState
rclpy.init()
n = rclpy.create_node('memory_driver')
pub = n.create_publisher(JointState, sys.argv[1], 10)
m = JointState()
m.name = [f'panda_joint{i}' for i in range(1, 8)]
Q0 = [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785]
t0 = time.perf_counter()
k = 0
while True:
    k += 1
    s, c = math.sin(0.5 * k * 1e-3), math.cos(0.5 * k * 1e-3)
    m.position = [q + 0.05 * s for q in Q0]
    m.velocity = [0.025 * c] * 7
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
    pub.publish(m)
    d = t0 + k * 1e-3 - time.perf_counter()
    if d > 0:
        time.sleep(d)
    elif d < -0.1:
        t0, k = time.perf_counter(), 0
"""


def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def run(law, minutes, every):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from sensor_msgs.msg import JointState

    from robot_dynamics.nodes.controller import TorqueControllerNode
    env = rp.bench_env()
    os.environ.update({k: env[k] for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")})
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    topic = f"/memory_{law}/joint_states"
    params = {"controller": law, "robot": "panda", "joints": [f"panda_joint{i}" for i in range(1, 8)],
              "joint_states_topic": topic, "command_topic": f"/memory_{law}/commands",
              "watchdog_timeout": 1.0}
    if law == "cartesian_impedance":
        params["cartesian_impedance.velocity_product_compensation"] = True
    node = TorqueControllerNode(f"memory_{law}", context=ctx,
                                parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    listener = rclpy.create_node(f"memory_{law}_listener", context=ctx)
    states = [0]
    listener.create_subscription(JointState, f"/memory_{law}/state",
                                 lambda m: states.__setitem__(0, states[0] + 1), 10)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    ex.add_node(listener)
    th = threading.Thread(target=ex.spin, daemon=True)
    th.start()
    drv = subprocess.Popen([sys.executable, "-c", DRIVER, topic], env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        rp.wait_until(lambda: node.active and node.c is not None and node.c.total_steps > 1000, 60.0)
        time.sleep(60.0)                                   # warm-up: caches, first collections
        snap0 = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
        t0 = time.monotonic()
        while True:
            now = time.monotonic() - t0
            cur, peak = tracemalloc.get_traced_memory()
            rows.append((now, rss_kb(), cur // 1024, len(gc.get_objects()), node.c.total_steps, states[0]))
            print(f"  {law} t={now:5.0f} s RSS {rows[-1][1] / 1024:.1f} MB traced {rows[-1][2]} kB "
                  f"objects {rows[-1][3]} steps {rows[-1][4]}", file=sys.stderr, flush=True)
            if now >= minutes * 60.0:
                break
            time.sleep(every)
        snap1 = tracemalloc.take_snapshot() if snap0 is not None else None
    finally:
        os.killpg(drv.pid, 9)
        ex.shutdown(timeout_sec=2.0)
        th.join(5)
        node.destroy_node()
        listener.destroy_node()
        rclpy.try_shutdown(context=ctx)
    return rows, ([] if snap1 is None else snap1.compare_to(snap0, "lineno"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--laws", default="gravity_compensation,cartesian_impedance")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--no-tracemalloc", action="store_true",
                    help="RSS and objects only (tracemalloc slows every allocation: the node then runs "
                         "below 1 kHz on a slow machine)")
    a = ap.parse_args(argv)
    if not a.no_tracemalloc:
        tracemalloc.start(5)
    print("robot_dynamics hot-path memory (bench/memory.py)")
    print(f"  date {time.strftime('%Y-%m-%d %H:%M:%S')}  cpus {os.cpu_count()}  {a.minutes:g} min per law at "
          f"1 kHz after 1 min of warm-up, a sample every {a.every:g} s, tracemalloc "
          f"{'off' if a.no_tracemalloc else 'on (5 frames)'}")
    for law in [x for x in a.laws.split(",") if x]:
        rows, diff = run(law, a.minutes, a.every)
        print(f"\n{law}")
        print("| t [s] | RSS [MB] | traced Python heap [kB] | gc-tracked objects | control steps | ~/state received |")
        print("|--:|--:|--:|--:|--:|--:|")
        for t, rss, cur, objs, steps, st in rows:
            print(f"| {t:.0f} | {rss / 1024:.1f} | {cur} | {objs} | {steps} | {st} |")
        if len(rows) > 1:
            (t0, r0, c0, o0, s0, _), (t1, r1, c1, o1, s1, _) = rows[0], rows[-1]
            print(f"growth over {t1 - t0:.0f} s ({s1 - s0} steps): RSS {(r1 - r0) / 1024:+.2f} MB, traced "
                  f"{c1 - c0:+d} kB, objects {o1 - o0:+d}; per step {1024 * (c1 - c0) / max(1, s1 - s0):+.3f} B traced")
        print("top allocation sites by growth:")
        for st in diff[:5]:
            print(f"  {st.size_diff / 1024:+8.1f} kB {st.count_diff:+6d} blocks  {st.traceback[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
