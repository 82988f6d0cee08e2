#!/usr/bin/env python3
"""How PositionIK labels targets far out of reach, on several arms of example-robot-data.

    .venv/bin/python bench/ik_reach.py                 (about a minute)
    .venv/bin/python bench/ik_reach.py --targets 40 --robots xarm7 ur10

Per robot, `--targets` random configurations q0 within the limits (seeded): the pose target 2 m
radially beyond FK(q0) (away from the base origin, the rotation kept), solved from q0 with the default
PositionIK (10 random restarts); the table counts the statuses (the README promises out_of_reach).
Then as many reachable targets (FK of random configurations) from random starts: the statuses again
(a reachable target must not be called out of reach more often than before).  Nothing is asserted.
"""
import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from robot_dynamics.dynamics import Model, PinocchioBackend  # noqa: E402
from robot_dynamics.dynamics.ik import PositionIK  # noqa: E402
from robot_dynamics.dynamics.robots import robots_dir  # noqa: E402

ARMS = {"panda": "panda_hand_tcp", "ur5": "tool0", "ur10": "tool0", "xarm7": "link_eef"}


def load(name):
    if name == "xarm7":
        return Model.from_urdf_file(robots_dir() / "xarm_description/urdf/xarm7.urdf")
    return Model.from_robot(name)


def statuses(runs):
    st = [r[0] for r in runs]
    return ", ".join(f"{s} {st.count(s)}" for s in ("converged", "out_of_reach", "max_iterations", "singular")
                     if st.count(s))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", type=int, default=20)
    ap.add_argument("--robots", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"# PositionIK reach labels: {platform.node()}, Python {platform.python_version()}, "
          f"Pinocchio {pin.__version__}")
    print(f"\n{args.targets} targets per robot and kind, seed {args.seed}; wall time per solve")
    print("| robot | targets | statuses | out_of_reach | ms median | ms max |")
    print("|---|---|---|---:|---:|---:|")
    for name in args.robots:
        model, frame = load(name), ARMS[name]
        P, ik = PinocchioBackend(model), PositionIK(model, frame)
        rng = np.random.default_rng(args.seed)
        far, near = [], []
        for _ in range(args.targets):
            q0 = model.random_configuration(rng)
            R, p = (a.copy() for a in P.frame_placement(q0, frame))
            t0 = time.perf_counter()
            res = ik.solve(q0, p + 2.0 * p / np.linalg.norm(p), R)
            far.append((res.status, time.perf_counter() - t0))
        for _ in range(args.targets):
            R, p = (a.copy() for a in P.frame_placement(model.random_configuration(rng, margin=0.1), frame))
            t0 = time.perf_counter()
            res = ik.solve(model.random_configuration(rng), p, R)
            near.append((res.status, time.perf_counter() - t0))
        for kind, runs in (("2 m beyond reach", far), ("reachable, random start", near)):
            t = np.array([r[1] for r in runs]) * 1e3
            n_out = sum(r[0] == "out_of_reach" for r in runs)
            print(f"| {name} | {kind} | {statuses(runs)} | {100.0 * n_out / len(runs):.0f} % | "
                  f"{np.median(t):.1f} | {t.max():.1f} |", flush=True)


if __name__ == "__main__":
    main()
