#!/usr/bin/env python3
"""Cost of the Cartesian safety envelope (control/envelope.py) per control step, on the Panda.

    .venv/bin/python bench/envelope.py            (a few seconds)

SafetyEnvelope.apply and enforce (the target before the safety filter, the command sent after it;
here enforce sees the target itself, as when the rate limit does not bind), 3 frames (tcp, link4, link6) and 6 planes (a box), in the situations a
step meets: nothing near a limit (one forward kinematics and the clearances), one plane inside its
margin (Jacobians, M, one row), a corner and a speed limit at once (three rows: the small QP), the
force limit on every step; then a whole ControlLoop.step (joint impedance) without and with that
envelope.  Median and p99 over N calls, microseconds.  Nothing here is asserted.
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from robot_dynamics.control import ControlLoop  # noqa: E402
from robot_dynamics.control.envelope import SafetyEnvelope  # noqa: E402
from robot_dynamics.dynamics import Model, make_backend  # noqa: E402

N = 5000
TCP = "panda_hand_tcp"
FRAMES = [TCP, "panda_link4", "panda_link6"]
Q0 = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])


def timed(f, n=N):
    for _ in range(200):
        f()
    ts = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        f()
        ts[i] = time.perf_counter() - t0
    return np.median(ts) * 1e6, np.percentile(ts, 99) * 1e6


def main():
    model = Model.from_robot("panda")
    pb = make_backend(model, "pinocchio")
    _, p = pb.frame_placement(Q0, TCP)
    far = [-1.5, -1.5, -0.5, 1.5, 1.5, 1.5]             # a box 1.5 m around the base: nothing near
    near = [p[0] - 0.5, p[1] - 0.5, p[2] - 0.02, p[0] + 0.5, p[1] + 0.5, p[2] + 0.5]       # floor 2 cm below
    corner = [p[0] - 0.5, p[1] - 0.5, p[2] - 0.02, p[0] + 0.03, p[1] + 0.5, p[2] + 0.5]   # + a wall at 3 cm
    base = dict(frames=FRAMES, radii=[0.0], margin=0.05)
    g = pb.gravity(Q0)
    tau = g + np.array([1.0, -2.0, 0.5, 1.0, 0.2, 0.3, 0.1])
    v0 = np.zeros(7)
    J = pb.frame_jacobian(Q0, TCP, "local_world_aligned")
    v_fast = np.linalg.pinv(J) @ np.array([0.3, 0.0, -0.1, 0, 0, 0])    # tcp at 0.32 m/s
    cases = [
        ("nothing near a limit", dict(base, boxes=far), v0),
        ("one plane within the margin", dict(base, boxes=near), v0),
        ("a corner + the speed limit (3 rows, QP)", dict(base, boxes=corner, max_linear_speed=0.25), v_fast),
        ("force limit (every step)", dict(base, boxes=far, max_force=40.0, force_frame=TCP), v0),
    ]
    print(f"SafetyEnvelope.apply + enforce (the target, then the command sent), Panda, {len(FRAMES)} frames, "
          f"6 planes; {N} calls")
    print("| situation | median [us] | p99 [us] | what acted |")
    print("|---|--:|--:|---|")
    for name, prm, v in cases:
        env = SafetyEnvelope(model, prm)
        lim = np.asarray(model.effort_limits, float)
        med, p99 = timed(lambda: env.enforce(env.apply(tau, Q0, v, 1e-3, True, lim), lim))
        print(f"| {name} | {med:.1f} | {p99:.1f} | {','.join(env.reasons) or '-'} |")

    print()
    print(f"ControlLoop.step (joint impedance, Panda), {N} steps")
    print("| envelope | median [us] | p99 [us] |")
    print("|---|--:|--:|")
    for name, extra in (("none", {}), ("3 frames, 6 planes, nothing near", {
            "safety.frames": FRAMES, "safety.boxes": far}), ("3 frames, one plane within the margin", {
            "safety.frames": FRAMES, "safety.boxes": near})):
        loop = ControlLoop.from_params(model, {"controller": "joint_impedance", "ramp_time": 0.0, **extra},
                                       log=lambda level, text: None)
        loop.activate(0.0)
        clock = [0.0]

        def step():
            clock[0] += 1e-3
            loop.update_state(Q0, v0, clock[0])
            loop.step(clock[0])
        med, p99 = timed(step)
        print(f"| {name} | {med:.1f} | {p99:.1f} |")


if __name__ == "__main__":
    main()
