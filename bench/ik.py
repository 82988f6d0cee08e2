#!/usr/bin/env python3
"""Cost of the inverse kinematic model (dynamics/ik.py) on the Panda, Pinocchio backend.

    .venv/bin/python bench/ik.py                  (about half a minute)
    .venv/bin/python bench/ik.py --calls 5000 --targets 50

1. One differential IK step (`DifferentialIK.step`), per call: the thread's CPU time (median, p99)
   and the wall time's p99 (which counts the time other processes held the core), over `--calls`
   back-to-back calls on fixed states: without limits, with limits not binding, with one and with
   several joints saturated, damped near a singularity, with a posture objective.  The raw
   `pin.computeFrameJacobian` it starts with is the first row.
2. Position IK (`PositionIK.solve`), per target: iterations and wall time, median and max over
   `--targets` reachable targets (FK of random configurations) from a start 0.3 rad away, from a
   random start (with the default 10 random restarts), and an unreachable target 2 m away.
Nothing here is asserted.
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
from robot_dynamics.dynamics.ik import DifferentialIK, PositionIK  # noqa: E402

TCP = "panda_hand_tcp"
Q0 = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])


def per_call(fn, calls):
    """fn() `calls` times: (CPU median, CPU p99, wall p99) in microseconds."""
    for _ in range(min(200, calls)):
        fn()
    cpu, wall = np.empty(calls), np.empty(calls)
    for i in range(calls):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        fn()
        wall[i], cpu[i] = time.perf_counter_ns() - w0, time.thread_time_ns() - c0
    return np.median(cpu) / 1e3, np.percentile(cpu, 99) / 1e3, np.percentile(wall, 99) / 1e3


def step_table(model, calls):
    pm = model.pin_model
    d, fid = pm.createData(), pm.getFrameId(TCP)
    ik = DifferentialIK(model, TCP)
    ikp = DifferentialIK(model, TCP, posture_gain=1.0)
    J = ik.jacobian(Q0)
    x = np.array([0.1, -0.05, 0.08, 0.2, -0.1, 0.3])          # 0.14 m/s, 0.37 rad/s
    x_one = J[:, 1] * 1.5 * model.velocity_limits[1]          # joint 2 alone at 1.5 x its limit
    x_many = J[:, 4] * 5.0 * model.velocity_limits[4]         # joint 5 at 5 x: four joints saturate
    q_sing = np.array([0.0, 0.0, 0.0, -0.5, 0.0, 0.05, 0.0])  # s_min = 0.005 < eps
    rows = [
        ("raw pin.computeFrameJacobian", lambda: pin.computeFrameJacobian(pm, d, Q0, fid, pin.LOCAL_WORLD_ALIGNED), ""),
        ("step, no limits (dt=None)", lambda: ik.step(Q0, x), ik.step(Q0, x)),
        ("step, limits not binding (dt=1 ms)", lambda: ik.step(Q0, x, dt=1e-3), ik.step(Q0, x, dt=1e-3)),
        ("step, limits active: 1 joint saturated", lambda: ik.step(Q0, x_one, dt=1e-3), ik.step(Q0, x_one, dt=1e-3)),
        ("step, limits active: several saturated", lambda: ik.step(Q0, x_many, dt=1e-3), ik.step(Q0, x_many, dt=1e-3)),
        ("step, damped near a singularity", lambda: ik.step(q_sing, x, dt=1e-3), ik.step(q_sing, x, dt=1e-3)),
        ("step, posture objective (dt=1 ms)", lambda: ikp.step(Q0, x, dt=1e-3), ikp.step(Q0, x, dt=1e-3)),
    ]
    print(f"\n## 1. One differential IK step on the Panda ({calls} calls each; microseconds)")
    print("| call | CPU median | CPU p99 | wall p99 | case | saturated | damping |")
    print("|---|---:|---:|---:|---|---|---:|")
    for name, fn, r in rows:
        med, p99, wp99 = per_call(fn, calls)
        extra = "| | |" if r == "" else f"| {r.case} | {list(r.saturated) or '-'} | {r.damping:.3f} |"
        print(f"| {name} | {med:.1f} | {p99:.1f} | {wp99:.1f} {extra}")


def solve_table(model, n_targets):
    P = PinocchioBackend(model)
    ik = PositionIK(model, TCP)
    ik1 = PositionIK(model, TCP, restarts=0)
    rng = np.random.default_rng(0)
    cases = {"reachable, start 0.3 rad away (no restart)": [], "reachable, random start (<= 10 restarts)": []}
    for _ in range(n_targets):
        q_t = model.random_configuration(rng, margin=0.1)
        R, p = (a.copy() for a in P.frame_placement(q_t, TCP))
        for name, solver, q0 in ((list(cases)[0], ik1, q_t + rng.uniform(-0.3, 0.3, 7)),
                                 (list(cases)[1], ik, model.random_configuration(rng))):
            t0 = time.perf_counter()
            res = solver.solve(q0, p, R)
            cases[name].append((time.perf_counter() - t0, res.iterations, res.starts, res.status))
    R0, p0 = (a.copy() for a in P.frame_placement(Q0, TCP))
    far = []
    for _ in range(3):
        t0 = time.perf_counter()
        res = ik.solve(Q0, p0 + [2.0, 0.0, 0.0], R0)
        far.append((time.perf_counter() - t0, res.iterations, res.starts, res.status))
    cases["unreachable, 2 m away (3 runs)"] = far
    print(f"\n## 2. Position IK on the Panda (tol 1e-9 m, 1e-9 rad; {n_targets} targets; wall time)")
    print("| target | converged | other statuses | iterations median / max | starts max | ms median | ms max |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, runs in cases.items():
        t = np.array([r[0] for r in runs]) * 1e3
        it = [r[1] for r in runs]
        st = [r[3] for r in runs]
        other = {s: st.count(s) for s in sorted(set(st)) if s != "converged"}
        print(f"| {name} | {st.count('converged')}/{len(runs)} | {other or '-'} | {int(np.median(it))} / {max(it)} "
              f"| {max(r[2] for r in runs)} | {np.median(t):.2f} | {t.max():.2f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--targets", type=int, default=30)
    args = ap.parse_args()
    print(f"# IK bench: {platform.node()}, Python {platform.python_version()}, Pinocchio {pin.__version__}, "
          f"numpy {np.__version__}")
    model = Model.from_robot("panda")
    step_table(model, args.calls)
    solve_table(model, args.targets)


if __name__ == "__main__":
    main()
