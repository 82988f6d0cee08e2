"""What the shipped configs do with targets a new user may send (issue 42), and the sim's end stops.
No ROS, no assertions: tables.

    .venv/bin/python bench/safe_defaults.py                 # the shipped configs
    .venv/bin/python bench/safe_defaults.py --before main   # also main's configs, without the reach check

Far targets: the Cartesian law of each shipped robot, from config/<robot>_cartesian_impedance.yaml,
in the package's ControlLoop, on a MuJoCo arm of the same URDF (hard end stops) started at
config/sim_<robot>.yaml's initial_positions (held by "brakes" through the 0.5 s start ramp, as the
sim node does), 1 kHz, one-step zero-order hold; the target sent once, then FOLLOW s.  Per target:
accepted or refused, the peak joint speed as a multiple of the URDF velocity limit, the joint speed
stops, the deepest excursion past a URDF position limit (negative: inside), and the loop's
diagnostics level at the end (this branch's loop in both tables: with --before only the configs and
the reach check are main's).  The targets: (2, 0, 0.5) m, behind the base (the start TCP mirrored
through the base's vertical axis), through the base (0, 0, -0.2) m, and a 180 degree turn of the tool
about the vertical at its place.

End stops: every limited joint of each robot driven into each URDF limit at its velocity limit and
pushed on at its effort limit (test_sim.py's drive): the worst overshoot and rest offset.
"""
import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from robot_dynamics.control import CartesianReference, ControlLoop  # noqa: E402
from robot_dynamics.control.laws.base import flatten_params  # noqa: E402
from robot_dynamics.description import LAUNCH_ROBOTS  # noqa: E402
from robot_dynamics.dynamics import Model  # noqa: E402
from robot_dynamics.sim import MujocoSim  # noqa: E402

DT, SETTLE, FOLLOW = 1e-3, 0.7, 4.0
TARGETS = ("far (2,0,0.5)", "behind the base", "through the base", "tool turned 180 deg")


def load(config, name):
    with open(Path(config) / name) as f:
        return flatten_params(yaml.safe_load(f)["/**"]["ros__parameters"])


def urdf_limits(urdf, joints):
    lim = {}
    for j in ET.fromstring(urdf).findall("joint"):
        e = j.find("limit")
        if e is None:
            continue
        lo, hi = (float(e.get("lower", "-inf")), float(e.get("upper", "inf"))) \
            if j.get("type") in ("revolute", "prismatic") else (-np.inf, np.inf)
        lim[j.get("name")] = (lo, hi, float(e.get("velocity", "inf")))
    return np.array([[lim[n][k] for n in joints] for k in range(3)])


def run(config, robot, target, reach_check=True):
    flat = load(config, f"{robot}_cartesian_impedance.yaml")
    q0 = np.array(load(config, f"sim_{robot}.yaml")["initial_positions"], dtype=float)
    model = Model.from_robot(flat["robot"])
    loop = ControlLoop.from_params(model, flat, log=lambda level, text: None)
    if not reach_check:
        loop.references.beyond_reach = lambda points: ""
    sim = MujocoSim(model, dt=DT)
    sim.reset(q0)
    frame = flat["cartesian_impedance.frame"]
    loop.activate(0.0)
    t = 0.0

    def step(braked=False):
        nonlocal t
        loop.update_state(sim.q, sim.v, t)
        tau, _ = loop.step(t)
        sim.step(tau)
        if braked:
            sim.reset(q0)
            sim.d.time = t + DT
        t += DT
    for _ in range(int(SETTLE / DT)):
        step(braked=True)
    R0, p0 = sim.frame_pose(frame)
    R, p = R0, {"far (2,0,0.5)": np.array([2.0, 0.0, 0.5]), "behind the base": np.array([-p0[0], -p0[1], p0[2]]),
                "through the base": np.array([0.0, 0.0, -0.2]), "tool turned 180 deg": p0}[target]
    if target == "tool turned 180 deg":
        R = np.diag([-1.0, -1.0, 1.0]) @ R0
    ok, _ = loop.set_reference(CartesianReference(R, p), "target_pose", now=t)
    lo, hi, vl = urdf_limits(model.urdf, model.joint_names)
    ratio, past = 0.0, -np.inf
    for _ in range(int(FOLLOW / DT)):
        step()
        ratio = max(ratio, float(np.max(np.abs(sim.v) / vl)))
        past = max(past, float(np.max(np.maximum(sim.q - hi, lo - sim.q))))
    return ok, ratio, loop.counts.get("safety.joint_speed_stops", 0), past, loop.diagnostics()[0]


def far_table(config, title, reach_check=True):
    print(f"\n{title}\n")
    print("| robot | target | accepted | peak joint speed / URDF limit | speed stops | past a limit [mrad] | diagnostics |")
    print("|---|---|---|---|---|---|---|")
    for robot in sorted(LAUNCH_ROBOTS):
        for target in TARGETS:
            ok, ratio, stops, past, level = run(config, robot, target, reach_check)
            print(f"| {robot} | {target} | {'yes' if ok else 'refused'} | {ratio:.2f} | {stops} | {past * 1e3:.1f} | "
                  f"{['OK', 'WARN', 'ERROR'][level]} |", flush=True)


def end_stop_table():
    from robot_dynamics.nodes.sim_node import HOME
    print("\nEnd stops (hit at the velocity limit, pushed at the effort limit)\n")
    print("| robot | limited joints | worst overshoot [mrad] | worst rest offset [mrad] |")
    print("|---|---|---|---|")
    for robot in ("panda", "ur5", "kinova"):
        model = Model.from_robot(robot)
        sim = MujocoSim(model)
        q0 = np.asarray(HOME[robot], dtype=float)
        lo, hi, vl = urdf_limits(model.urdf, model.joint_names)
        worst, rest, n = 0.0, 0.0, 0
        for j in range(model.nv):
            if not np.isfinite(hi[j]):
                continue
            n += 1
            for side in (+1, -1):
                lim = hi[j] if side > 0 else lo[j]
                q = q0.copy()
                q[j] = lim - side * 0.02
                v = np.zeros(model.nv)
                v[j] = side * vl[j]
                sim.reset(q, v)
                e = model.effort_limits[j]
                peak = -np.inf
                for _ in range(300):
                    tau = sim.inverse_dynamics(sim.q, sim.v, np.zeros(model.nv))
                    hold = 400.0 * (q0 - sim.q) - 40.0 * sim.v
                    hold[j] = np.clip(50.0 * (side * vl[j] - sim.v[j]) * e, -e, e)
                    sim.step(tau + hold)
                    peak = max(peak, side * (sim.q[j] - lim))
                worst, rest = max(worst, peak), max(rest, abs(side * (sim.q[j] - lim)))
        print(f"| {robot} | {n} | {worst * 1e3:.2f} | {rest * 1e3:.3f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", metavar="REV", help="also run the configs of git revision REV, no reach check")
    a = ap.parse_args()
    end_stop_table()
    far_table(ROOT / "config", "Far targets, the shipped configs")
    if a.before:
        with tempfile.TemporaryDirectory() as d:
            names = subprocess.run(["git", "ls-tree", "--name-only", f"{a.before}:config"], cwd=ROOT, check=True,
                                   capture_output=True, text=True).stdout.split()
            for n in names:
                text = subprocess.run(["git", "show", f"{a.before}:config/{n}"], cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout
                (Path(d) / n).write_text(text)
            far_table(d, f"Far targets, the configs of {a.before}, no reach check", reach_check=False)


if __name__ == "__main__":
    main()
