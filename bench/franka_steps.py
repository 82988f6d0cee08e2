#!/usr/bin/env python3
"""Set-point and Cartesian steps on franky-sim (issue 42): every shipped Franka config that takes
set-points, through the Franka bridge in in-process mode (the loop in the robot's callback, as
test/test_franka_in_process.py starts it), from three start poses.

    .venv/bin/python bench/franka_steps.py                                 # everything (~20 min)
    .venv/bin/python bench/franka_steps.py --configs fr3_joint_impedance --poses aligned --steps 0.5 --joints 1

Configs: config/fr3_{joint_impedance,computed_torque,cartesian_impedance}.yaml and
config/panda_franka_*.yaml for the same laws.  franky-sim simulates an FR3 only: a panda_franka config
runs with its joint and frame names mapped to the FR3's (panda_ -> fr3_; its gains and limits as
shipped), and is judged against the FR3's limits (the arm that moved) and, in its own column, the
Panda's (example-robot-data's panda URDF, read from its XML).

Poses (franky-sim starts there: test/franky_sim_pose.py): `aligned`, franky-sim's own start pose
(joint 2 at 0: the axes of joints 1 and 3 aligned), and two others in the workspace.  Per pose: joint
set-points of --steps rad on joints --joints (1-based) for the joint laws, the pose's TCP moved by
--cart-steps m along x and z for the Cartesian law (its orientation kept), each sent once on the
bridge's ~/target_joint_state / ~/target_pose (confirmed by its accepted count) and followed for
--time s of robot time, then the start pose sent back (and ~/resume after a joint speed stop).

Per case: the worst joint's peak speed over its URDF velocity limit (speeds from franky-sim's own
state, as the bridge relays it on /joint_states; limits read from the URDF's XML the bridge published),
how far any joint went past its position limit, the settle error (the stepped joint's for a joint step;
the TCP's distance and its orientation's angle from the target for a Cartesian one, from our Pinocchio
model of that URDF), the largest speed over
the last 0.2 s, the joint speed stops the bridge counted, the restoring torque over friction (the law's
torque at rest at the final error, K e or M(q) kp e from the shipped gains and our model,
joint by joint over franky-sim's joint friction from its fr3.xml, x 1.2 + 0.05 N m: <= 1 means the
arm stopped where only its friction holds it, the law has nothing left to do; joint laws only), and
settled: at rest (< 0.01 rad/s), within the limits, no speed stop, restoring torque / friction <= 1.
Nothing is asserted.
"""
import argparse
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))
os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

CONFIGS = ["fr3_joint_impedance", "fr3_computed_torque", "fr3_cartesian_impedance",
           "panda_franka_joint_impedance", "panda_franka_computed_torque", "panda_franka_cartesian_impedance"]
POSES = {
    "aligned": [0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785],          # franky-sim's start: joints 1 and 3 aligned
    "left": [0.5, -0.5, 0.3, -2.2, 0.2, 1.9, 0.9],
    "right": [-0.6, 0.4, -0.4, -1.8, -0.3, 2.3, 0.3],
}
REST = 0.01            # rad/s: at rest


def urdf_limits(urdf, joints):
    """(lower, upper, velocity) of `joints` from a URDF's XML (the oracle)."""
    root = ET.fromstring(urdf) if urdf.lstrip().startswith("<") else ET.parse(urdf).getroot()
    lim = {j.get("name"): j.find("limit") for j in root.iter("joint")}
    out = np.array([[float(lim[n].get(k)) for k in ("lower", "upper", "velocity")] for n in joints])
    return out[:, 0], out[:, 1], out[:, 2]


def panda_velocity_limits():
    """The Panda's joint velocity limits, from example-robot-data's panda URDF (its XML, as the package's
    description reads it)."""
    from robot_dynamics.description import robot_urdf
    return urdf_limits(robot_urdf("panda"), [f"panda_joint{i}" for i in range(1, 8)])[2]


def config_file(name, tmp):
    """The shipped config's path; a panda_franka one written with the FR3's names (panda_ -> fr3_)."""
    path = ROOT / "config" / f"{name}.yaml"
    if not name.startswith("panda_franka_"):
        return str(path)
    out = Path(tmp) / f"{name}_as_fr3.yaml"
    out.write_text(path.read_text().replace("panda_", "fr3_"))
    return str(out)


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


def law_of(name):
    doc = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    return next(iter(doc.values()))["ros__parameters"]["controller"]


class Session:
    """One rig (franky-sim at a pose + the in-process bridge with a config) and its cases."""

    def __init__(self, procs, probe, sim, law, panda_vl):
        from franka_harness import fr3_model
        self.procs, self.probe, self.law = procs, probe, law
        self.lo, self.hi, self.vl = urdf_limits(probe.urdf, probe.joints)
        self.panda_vl = panda_vl
        from franka_harness import sim_joint_friction
        self.friction = sim_joint_friction()
        self.model, self.dyn = fr3_model(probe.urdf)
        self.idx = [self.model.joint_names.index(n) for n in probe.joints]

    def restoring(self, q, target):
        """The law's torque at rest at q towards `target` (joint order), from the shipped gains and our
        model of the published URDF: joint impedance K e; computed torque M(q) (kp e)."""
        qm = np.empty(7)
        qm[self.idx] = q
        g = self.gains
        if self.law == "joint_impedance":
            return np.array(g["joint_impedance.k_gains"], float) * (target - q)
        if self.law == "computed_torque":
            e = np.empty(7)
            e[self.idx] = np.array(g["computed_torque.kp"], float) * (target - q)
            return (np.asarray(self.dyn.mass_matrix(qm)) @ e)[self.idx]
        raise ValueError(self.law)

    def tcp(self, q):
        qm = np.empty(7)
        qm[self.idx] = q
        R, p = self.dyn.frame_placement(qm, "fr3_tcp")
        return np.array(R, float), np.array(p, float)

    def stops(self):
        return int(self.probe.diag.get("loop.safety.joint_speed_stops", "0"))

    def follow(self, seconds):
        from franka_harness import js_arrays, wait_robot_time
        wait_robot_time(self.probe, seconds, check=self.procs.check_alive)
        t, q, v, _ = js_arrays(self.probe.js_log)
        return t, q, v

    def send_joint(self, q):
        self.probe.publish_target(q)

    def send_pose(self, R, p):
        import pinocchio as pin
        from geometry_msgs.msg import PoseStamped
        quat = pin.Quaternion(R)                       # x, y, z, w
        msg = PoseStamped()
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(x) for x in p)
        o = msg.pose.orientation
        o.x, o.y, o.z, o.w = float(quat.x), float(quat.y), float(quat.z), float(quat.w)
        self.probe.publish_confirmed("pub_pose", msg, "target_pose")

    def case(self, pose_q, kind, axis, step, seconds):
        """One step from the start pose; the row's figures.  Then back to the start pose."""
        from franka_harness import wait_robot_time
        probe = self.probe
        stops0 = self.stops()
        probe.clear_logs()
        R0, p0 = self.tcp(pose_q)
        if kind == "joint":
            target = np.array(pose_q, float)
            target[axis] += step
            self.send_joint(target)
        else:
            p_t = p0.copy()
            p_t["xyz".index(axis)] += step
            self.send_pose(R0, p_t)
        t, q, v = self.follow(seconds)
        wait_robot_time(probe, 3 * 0.2)                # diagnostics (0.2 s) after the last state
        n_stops = self.stops() - stops0
        ratio = np.max(np.abs(v), axis=0) / self.vl
        worst = int(np.argmax(ratio))
        panda = float(np.max(np.max(np.abs(v), axis=0) / self.panda_vl)) if self.panda_vl is not None else None
        past = float(max(0.0, np.max(np.maximum(q - self.hi, self.lo - q))))
        tail = t >= t[-1] - 0.2
        v_end = float(np.max(np.abs(v[tail])))
        if kind == "joint":
            err = f"{target[axis] - q[-1, axis]:+.4f} rad"
            # held by friction: the law's restoring torque at the final error, joint by joint, over what
            # franky-sim's joint friction holds (its fr3.xml frictionloss, 20 % + 0.05 N m on top)
            tau = self.restoring(q[-1], target)
            held = float(np.max(np.abs(tau) / (1.2 * self.friction + 0.05)))
        else:
            import pinocchio as pin
            R, p = self.tcp(q[-1])
            err = f"{np.linalg.norm(p - p_t) * 1e3:.1f} mm, {np.linalg.norm(pin.log3(R0 @ R.T)):.3f} rad"
            tau, held = None, None
        settled = v_end < REST and past == 0.0 and n_stops == 0 and ratio[worst] < 1.0 and (held is None or held <= 1.0)
        if self.verbose:
            print(f"  q end {np.round(q[-1], 3)}; restoring torque {None if tau is None else np.round(tau, 2)} N m; "
                  f"q limits lo {np.round(self.lo, 3)} hi {np.round(self.hi, 3)}", flush=True)
        row = dict(peak=float(ratio[worst]), joint=worst + 1, panda=panda, past=past, err=err, held=held,
                   v_end=v_end, stops=n_stops, settled=settled, state=probe.diag.get("state"))
        # back to the start pose
        if n_stops:
            from std_srvs.srv import Trigger
            probe.wait_for(lambda: float(np.max(np.abs(probe.snapshot()[1]))) < 0.01, 20.0)
            probe._call(Trigger, "resume", Trigger.Request(), 10.0, "~/resume")
        if kind == "joint":
            self.send_joint(pose_q)
        else:
            self.send_pose(R0, p0)
        self.follow(seconds)
        return row


def run(args):
    import rclpy
    from franka_harness import rig
    rclpy.init()
    try:
        panda_vl = panda_velocity_limits()
    except Exception as e:                              # noqa: BLE001 (the column is then left empty)
        print(f"(no Panda URDF: {e})")
        panda_vl = None
    steps = [float(s) for s in args.steps.split(",")]
    cart = [float(s) for s in args.cart_steps.split(",")]
    joints = [int(j) - 1 for j in args.joints.split(",")]
    print("| config | pose | step | peak speed / limit (joint) | Panda limits | past limit [rad] | "
          "settle error | restoring torque / friction | speed at end [rad/s] | speed stops | settled |")
    print("|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|", flush=True)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.configs.split(","):
                law = law_of(name)
                cfg = config_file(name, tmp)
                doc = yaml.safe_load(Path(cfg).read_text())
                prm = next(iter(doc.values()))["ros__parameters"]
                for pose in args.poses.split(","):
                    pose_q = POSES[pose]
                    d = Path(tmp) / f"{name}_{pose}"
                    d.mkdir()
                    over = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
                    with rig(d, law, mode="in_process", initial_q=pose_q, config=cfg, **over) as (procs, probe, sim):
                        s = Session(procs, probe, sim, law, panda_vl if name.startswith("panda") else None)
                        s.gains = {**flat(prm), **over}
                        s.verbose = args.verbose
                        q_start, _ = probe.snapshot()
                        cases = ([("joint", j, st) for j in joints for st in steps] if law != "cartesian_impedance"
                                 else [("cart", a, st) for a in args.axes.split(",") for st in cart])
                        for kind, axis, st in cases:
                            r = s.case(q_start, kind, axis, st, args.time)
                            what = f"joint {axis + 1} {st:+.2f} rad" if kind == "joint" else f"{axis} {st:+.2f} m"
                            pc = "" if r["panda"] is None else f"{r['panda']:.2f}"
                            held = "" if r["held"] is None else f"{r['held']:.2f}"
                            print(f"| {name} | {pose} | {what} | {r['peak']:.2f} (j{r['joint']}) | {pc} | "
                                  f"{r['past']:.3f} | {r['err']} | {held} | {r['v_end']:.1e} | "
                                  f"{r['stops']} | {'yes' if r['settled'] else 'NO'} |", flush=True)
                            rows.append((name, pose, what, r))
    finally:
        rclpy.shutdown()
    bad = [r for r in rows if not r[3]["settled"]]
    print(f"\n{len(rows)} cases, {len(rows) - len(bad)} settled within the limits; worst peak "
          f"{max((r[3]['peak'] for r in rows), default=0.0):.2f} x the limit")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--poses", default=",".join(POSES))
    ap.add_argument("--steps", default="0.15,0.3,0.5", help="joint steps [rad]")
    ap.add_argument("--joints", default="1,4", help="stepped joints (1-based)")
    ap.add_argument("--cart-steps", default="0.1,0.2", help="Cartesian steps [m]")
    ap.add_argument("--axes", default="x,z")
    ap.add_argument("--time", type=float, default=4.0, help="robot time followed per step [s]")
    ap.add_argument("--verbose", action="store_true", help="each case's final q and restoring torque")
    ap.add_argument("--set", action="append", default=[], help="a bridge parameter key=yaml-value (a before/after)")
    t0 = time.monotonic()
    run(ap.parse_args())
    print(f"({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
