"""Does receiving a big reference stall the control loop?  The worst gap between control steps while a
1000-point trajectory arrives, against the same stream without one.

    .venv/bin/python bench/reference_gap.py                 # both laws, 1001 points, 6 trajectories each
    .venv/bin/python bench/reference_gap.py --laws computed_torque --points 2001 --count 10

The controller node (a process of its own, default parameters) gets joint states for the Panda at
1 kHz from this process (a fixed configuration, stamped now).  Every --every seconds this process
publishes a trajectory of --points points (serialized once, so that
the publish does not hold up this process's own stream) (JointTrajectory to ~/joint_trajectory for computed_torque,
with positions, velocities and accelerations; MultiDOFJointTrajectory to ~/cartesian_trajectory for
cartesian_impedance, with transforms, twists and accelerations along a small circle at the tool).
Each publish is confirmed on /diagnostics (accepted.<input>).  The controller's steps are timed by
the stamps of its ~/state (the control thread's own clock read at each step, so this process's
receive delays do not count); a gap is the time between two consecutive stamps.  Compared: the worst
gap in the 0.5 s after each publish against the worst gap in the 0.5 s before it; the driver's own
send gaps are shown too (a gap the controller could not have closed).  No assertions: a table.
"""
import argparse
import math
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _ros_proc as rp  # noqa: E402
import latency as lt  # noqa: E402

WINDOW = 0.5
Q0 = [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785]


def joint_trajectory(n, dt):
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
    msg = JointTrajectory()
    msg.joint_names = list(lt.PANDA_JOINTS)
    w = 2 * math.pi / (n * dt)
    for k in range(1, n + 1):
        t = k * dt
        p = JointTrajectoryPoint()
        p.positions = [q + 0.05 * math.sin(w * t) for q in Q0]
        p.velocities = [0.05 * w * math.cos(w * t)] * 7
        p.accelerations = [-0.05 * w * w * math.sin(w * t)] * 7
        p.time_from_start = Duration(sec=int(t), nanosec=int(round((t - int(t)) * 1e9)))
        msg.points.append(p)
    return msg


def cartesian_trajectory(n, dt):
    import pinocchio as pin
    from builtin_interfaces.msg import Duration
    from geometry_msgs.msg import Transform, Twist
    from trajectory_msgs.msg import MultiDOFJointTrajectory, MultiDOFJointTrajectoryPoint

    from robot_dynamics.dynamics import robots
    model = pin.buildModelFromUrdf(str(robots.robot_urdf_path("panda")))
    data = model.createData()
    pin.framesForwardKinematics(model, data, np.array(Q0 + [0.0, 0.0][:model.nq - 7]))
    M = data.oMf[model.nframes - 1]
    quat = pin.Quaternion(M.rotation)
    p0 = M.translation.copy()
    msg = MultiDOFJointTrajectory()
    msg.joint_names = []                                  # none: the controlled frame
    r = 0.03
    w = 2 * math.pi / (n * dt)
    for k in range(1, n + 1):
        t = k * dt
        pt = MultiDOFJointTrajectoryPoint()
        tr = Transform()
        tr.translation.x = p0[0] + r * (math.cos(w * t) - 1.0)
        tr.translation.y = p0[1] + r * math.sin(w * t)
        tr.translation.z = p0[2]
        tr.rotation.x, tr.rotation.y, tr.rotation.z, tr.rotation.w = quat.x, quat.y, quat.z, quat.w
        tw, acc = Twist(), Twist()
        tw.linear.x, tw.linear.y = -r * w * math.sin(w * t), r * w * math.cos(w * t)
        acc.linear.x, acc.linear.y = -r * w * w * math.cos(w * t), -r * w * w * math.sin(w * t)
        pt.transforms, pt.velocities, pt.accelerations = [tr], [tw], [acc]
        pt.time_from_start = Duration(sec=int(t), nanosec=int(round((t - int(t)) * 1e9)))
        msg.points.append(pt)
    return msg


LAWS = {
    "computed_torque": ("joint_trajectory", joint_trajectory),
    "cartesian_impedance": ("cartesian_trajectory", cartesian_trajectory),
}


def run(law, a, log):
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory, MultiDOFJointTrajectory

    from robot_dynamics.nodes.common import make_qos
    topic, build = LAWS[law]
    env = rp.bench_env()
    import os
    os.environ["ROS_DOMAIN_ID"] = env["ROS_DOMAIN_ID"]
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    tmp = Path(a.tmp)
    node_p = rp.start(lt.node_cmd("controller", law, "single", lt.CONTROLLER_QOS, {}), env,
                      tmp / f"gap_{law}.node.log")
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("reference_gap", context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    lock = threading.Lock()
    stamps, diag = [], {}

    def on_state(m):
        with lock:
            stamps.append(m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec)

    def on_diag(m):
        for s in m.status:
            if "torque_controller" in s.name:
                with lock:
                    diag.update({kv.key: kv.value for kv in s.values})

    node.create_subscription(JointState, "/torque_controller/state", on_state, 1000)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    js_pub = node.create_publisher(JointState, "/joint_states", make_qos("best_effort", 1))
    traj_type = JointTrajectory if topic == "joint_trajectory" else MultiDOFJointTrajectory
    tr_pub = node.create_publisher(traj_type, f"/torque_controller/{topic}", make_qos("reliable", 1))
    spin = threading.Thread(target=ex.spin, daemon=True)
    spin.start()
    from rclpy.serialization import serialize_message
    raw = serialize_message(build(a.points, a.point_dt))   # serialized once: publishing it then costs
    sent, stop = [], threading.Event()

    def stream():
        js = JointState()
        js.name = list(lt.PANDA_JOINTS)
        js.position, js.velocity = list(Q0), [0.0] * 7
        clock = node.get_clock()
        t_next = time.monotonic()
        while not stop.is_set():
            t_next += 1.0 / a.rate
            d = t_next - time.monotonic()
            if d > 0:
                time.sleep(d)
            elif d < -0.05:
                t_next = time.monotonic()
            js.header.stamp = clock.now().to_msg()
            js_pub.publish(js)
            sent.append(time.time())

    drv = threading.Thread(target=stream, daemon=True)
    drv.start()
    out = None
    try:
        if not rp.wait_until(lambda: len(stamps) > 2000, a.timeout):
            log(f"  {law}: no ~/state within {a.timeout} s:\n{rp.log_tail(node_p)}")
            return None
        pubs = []
        key = f"accepted.{topic}"
        for k in range(a.count):
            time.sleep(a.every / 2)
            before = int(diag.get(key, 0) or 0)
            t_w = time.time()
            tr_pub.publish(raw)                           # this process's stream no GIL time (stamp 0)
            pubs.append(t_w)
            rp.wait_until(lambda b=before: int(diag.get(key, 0) or 0) > b, 5.0)
            time.sleep(max(0.0, a.every / 2 - (time.time() - t_w)))
        time.sleep(1.5)
        with lock:
            st = np.array(stamps)
            dg = dict(diag)
        sn = np.array(sent)
        out = dict(law=law, topic=topic, points=a.points, count=len(pubs),
                   accepted=int(dg.get(key, 0) or 0), trips=int(dg.get("watchdog_trips", 0) or 0))

        def worst(t, lo, hi):
            m = t[(t >= lo) & (t <= hi)]
            return float(np.max(np.diff(m))) if m.size > 2 else math.nan

        out["before"] = [worst(st, t - WINDOW - 0.05, t - 0.05) for t in pubs]
        out["after"] = [worst(st, t, t + WINDOW) for t in pubs]
        out["sent_after"] = [worst(sn, t, t + WINDOW) for t in pubs]
        out["sent_before"] = [worst(sn, t - WINDOW - 0.05, t - 0.05) for t in pubs]
    finally:
        stop.set()
        drv.join(2.0)
        ex.shutdown(timeout_sec=2.0)
        spin.join(3.0)
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        rp.stop(node_p)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--laws", default=",".join(LAWS))
    ap.add_argument("--points", type=int, default=1001)
    ap.add_argument("--point-dt", type=float, default=0.004, help="[s] between points")
    ap.add_argument("--count", type=int, default=6, help="trajectories per law")
    ap.add_argument("--every", type=float, default=2.0, help="[s] between trajectories")
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--tmp", default="/tmp")
    a = ap.parse_args(argv)
    rp.install_handlers()
    rows = []
    for law in a.laws.split(","):
        print(f"running {law} ...", flush=True)
        r = run(law, a, lambda s: print(s, flush=True))
        if r is not None:
            rows.append(r)
    ms = lambda v: f"{1e3 * np.nanmedian(v):.1f} / {1e3 * np.nanmax(v):.1f}"   # noqa: E731
    print(f"\nworst gap between control steps (~/state stamps), {a.points}-point trajectories, "
          f"{WINDOW} s windows, median / max over the publishes [ms]")
    print("| law | input | accepted | before | while it arrives | driver's send gap before / while | watchdog trips |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for r in rows:
        print(f"| {r['law']} | ~/{r['topic']} | {r['accepted']}/{r['count']} | {ms(r['before'])} | {ms(r['after'])} "
              f"| {1e3 * np.nanmax(r['sent_before']):.1f} / {1e3 * np.nanmax(r['sent_after']):.1f} | {r['trips']} |")


if __name__ == "__main__":
    main()
