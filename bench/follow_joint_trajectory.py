"""What a FollowJointTrajectory goal costs: on the control thread, one ControlLoop cycle (update_state +
step) following a trajectory with and without its GoalMonitor (path tolerances on every joint, checked
every step), interleaved in rounds; on the executor, prepare_goal (validation, partial fill, spline)
for goals of 10, 100 and 1000 points; on the control thread, once per goal, the trajectory's start.  Panda, joint_impedance and computed_torque, in-process, no ROS.
Prints tables (microseconds per call: median, p99).

    .venv/bin/python bench/follow_joint_trajectory.py [--n 4000] [--rounds 5]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from robot_dynamics.control import ControlLoop  # noqa: E402
from robot_dynamics.control import trajectory_goal as tg  # noqa: E402
from robot_dynamics.dynamics import Model  # noqa: E402

Q0 = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])


def pct(x):
    x = np.asarray(x) * 1e6
    return np.median(x), np.percentile(x, 99)


def goal_args(names, n_points, rng):
    t = np.linspace(0.0, 10.0, n_points + 1)[1:]
    P = Q0[:len(names)] + 0.2 * np.sin(np.outer(t, rng.uniform(0.2, 1.0, len(names))))
    V = np.gradient(P, t, axis=0)
    V[-1] = 0.0
    return t.tolist(), P.tolist(), V.tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4000, help="control cycles per measurement")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    model = Model.from_robot("panda")
    names = list(model.joint_names)
    n = len(names)
    rng = np.random.default_rng(0)
    defaults = tg.default_tolerances(n)
    print(f"ControlLoop cycle following a 100-point trajectory, {a.n} cycles x {a.rounds} interleaved rounds "
          "(us per cycle: median / p99)\n")
    print("| law | without a goal | with its GoalMonitor | difference of the medians |")
    print("|---|---|---|---|")
    for law in ("joint_impedance", "computed_torque"):
        res = {False: [], True: []}
        for _ in range(a.rounds):
            for with_goal in (False, True):
                loop = ControlLoop.from_params(model, {"controller": law, "watchdog_timeout": 1e9,
                                                       "ramp_time": 0.0}, log=lambda *_: None)
                loop.activate(0.0)
                v = np.zeros(n)
                loop.update_state(Q0, v, 0.0)
                loop.step(0.0)
                t, P, V = goal_args(names, 100, rng)
                k = len(t)
                tr, tol = tg.prepare_goal(names, names, t, P, V, [[]] * k, [[]] * k, Q0, defaults,
                                          path_tolerance=[(j, 10.0, 0.0, 0.0) for j in names])
                mon = tg.GoalMonitor(tr, tol, names) if with_goal else None
                loop.set_reference(tr, "follow_joint_trajectory", 0.0, goal=mon)
                qs = Q0 + 0.001 * rng.standard_normal((a.n, n))
                for i in range(a.n):
                    now = 1e-3 * (i + 1)
                    t0 = time.perf_counter()
                    loop.update_state(qs[i], v, now)
                    loop.step(now)
                    res[with_goal].append(time.perf_counter() - t0)
                if with_goal:
                    assert loop.references.goal is mon and not mon.done, "the goal ended during the measurement"
        (m0, p0), (m1, p1) = pct(res[False]), pct(res[True])
        print(f"| {law} | {m0:.1f} / {p0:.1f} | {m1:.1f} / {p1:.1f} | {m1 - m0:+.1f} |")
    print("\nprepare_goal on the executor (validation, partial fill, JointTrajectory) (us per goal: median / p99)\n")
    print("| points | all 7 joints, positions + velocities | 3 of 7 joints (partial) |")
    print("|---|---|---|")
    for n_points in (10, 100, 1000):
        row = []
        for sub in (names, names[:3]):
            t, P, V = goal_args(sub, n_points, rng)
            k = len(t)
            times = []
            for _ in range(max(20, 2000 // n_points)):
                t0 = time.perf_counter()
                tg.prepare_goal(names, sub, t, P, V, [[]] * k, [[]] * k, Q0, defaults,
                                lower=model.lower_limits, upper=model.upper_limits)
                times.append(time.perf_counter() - t0)
            m, p = pct(times)
            row.append(f"{m:.0f} / {p:.0f}")
        print(f"| {n_points} | {row[0]} | {row[1]} |")
    print("\nJointTrajectory.start on the control thread, once, at the step that switches to the goal (it prepends "
          "the reference being followed) (us: median / p99)\n")
    print("| points | positions + velocities | positions only (C2 spline) |")
    print("|---|---|---|")
    for n_points in (10, 100, 1000):
        row = []
        t, P, V = goal_args(names, n_points, rng)
        k = len(t)
        for vel in (V, [[]] * k):
            times = []
            for _ in range(max(20, 2000 // n_points)):
                tr, _ = tg.prepare_goal(names, names, t, P, vel, [[]] * k, [[]] * k, Q0, defaults)
                t0 = time.perf_counter()
                tr.start(0.0, Q0 + 0.01, max_velocity=2.0, max_acceleration=5.0)
                times.append(time.perf_counter() - t0)
            m, p = pct(times)
            row.append(f"{m:.0f} / {p:.0f}")
        print(f"| {n_points} | {row[0]} | {row[1]} |")


if __name__ == "__main__":
    main()
