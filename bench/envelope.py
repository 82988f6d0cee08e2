#!/usr/bin/env python3
"""Cost of the Cartesian safety envelope (control/stages/envelope.py) per control step, on the Panda.

    .venv/bin/python bench/envelope.py            (a few seconds)

SafetyEnvelope.apply and enforce (the target before the safety filter, the command sent after it;
here enforce sees the target itself, as when the rate limit does not bind), 3 frames (tcp, link4, link6) and 6 planes (a box), in the situations a
step meets: nothing near a limit (one forward kinematics and the clearances), planes inside their
margin (Jacobians, M, the rows: the tcp over the floor and link4 at the box's -x face, 2 rows; the
floor alone, 1 row), a corner and a speed limit at once (the tcp at the floor and the +x wall, link4
at -x, 3 frames above 0.9 x the speed limit: 6 rows, the LCP by quadprog; the tcp at 1.3 x the
limit, so after stop_time the envelope is stopping: the stop's torque too; and the same with no
stop), the force limit on every step; then a whole ControlLoop.step (joint impedance) without and
with that envelope.  Median and p99 of the wall time over N calls, and the CPU time per call
(time.process_time over all N: steadier than the wall time on a shared machine), microseconds;
"rows": the rows the step had (A's rows; - none).  Nothing here is asserted.
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
    """(median, p99) of the wall time per call and the CPU time per call, microseconds."""
    for _ in range(200):
        f()
    ts = np.empty(n)
    c0 = time.process_time()
    for i in range(n):
        t0 = time.perf_counter()
        f()
        ts[i] = time.perf_counter() - t0
    cpu = (time.process_time() - c0) / n
    return np.median(ts) * 1e6, np.percentile(ts, 99) * 1e6, cpu * 1e6


def main():
    model = Model.from_robot("panda")
    pb = make_backend(model, "pinocchio")
    _, p = pb.frame_placement(Q0, TCP)
    far = [-1.5, -1.5, -0.5, 1.5, 1.5, 1.5]             # a box 1.5 m around the base: nothing near
    near = [p[0] - 0.5, p[1] - 0.5, p[2] - 0.02, p[0] + 0.5, p[1] + 0.5, p[2] + 0.5]       # floor 2 cm below
    corner = [p[0] - 0.5, p[1] - 0.5, p[2] - 0.02, p[0] + 0.03, p[1] + 0.5, p[2] + 0.5]   # + a wall at 3 cm
    floor = [p[0] - 1.0, p[1] - 1.0, p[2] - 0.02, p[0] + 1.0, p[1] + 1.0, p[2] + 0.5]     # the floor alone near
    base = dict(frames=FRAMES, radii=[0.0], margin=0.05)
    g = pb.gravity(Q0)
    tau = g + np.array([1.0, -2.0, 0.5, 1.0, 0.2, 0.3, 0.1])
    v0 = np.zeros(7)
    J = pb.frame_jacobian(Q0, TCP, "local_world_aligned")
    v_fast = np.linalg.pinv(J) @ np.array([0.3, 0.0, -0.1, 0, 0, 0])    # tcp at 0.32 m/s
    cases = [
        ("nothing near a limit", dict(base, boxes=far), v0),
        ("planes within the margin (2 frames)", dict(base, boxes=near), v0),
        ("one plane row (the floor under the tcp)", dict(base, boxes=floor), v0),
        ("a corner + the speed limit (QP; stopping)", dict(base, boxes=corner, max_linear_speed=0.25), v_fast),
        ("a corner + the speed limit (QP; no stop)", dict(base, boxes=corner, max_linear_speed=0.25,
                                                          stop_time=0.0), v_fast),
        ("force limit (every step)", dict(base, boxes=far, max_force=40.0, force_frame=TCP), v0),
    ]
    print(f"SafetyEnvelope.apply + enforce (the target, then the command sent), Panda, {len(FRAMES)} frames, "
          f"6 planes; {N} calls")
    print("| situation | median [us] | p99 [us] | cpu [us] | rows | what acted |")
    print("|---|--:|--:|--:|--:|---|")
    for name, prm, v in cases:
        env = SafetyEnvelope(model, prm)
        lim = np.asarray(model.effort_limits, float)
        med, p99, cpu = timed(lambda: env.enforce(env.apply(tau, Q0, v, 1e-3, True, lim), lim))
        env.apply(tau, Q0, v, 1e-3, True, lim)
        rows = env._post and env._post["rows"]           # (this step's rows, for enforce())
        print(f"| {name} | {med:.1f} | {p99:.1f} | {cpu:.1f} | {rows[0].shape[0] if rows else '-'} | "
              f"{','.join(env.reasons) or '-'}{'; ' + env.state if env.state == 'stopping' else ''} |")

    print()
    print(f"ControlLoop.step (joint impedance, Panda), {N} steps")
    print("| envelope | median [us] | p99 [us] | cpu [us] |")
    print("|---|--:|--:|--:|")
    for name, extra in (("none", {}), ("3 frames, 6 planes, nothing near", {
            "safety.frames": FRAMES, "safety.boxes": far}), ("3 frames, planes within the margin (2 rows)", {
            "safety.frames": FRAMES, "safety.boxes": near})):
        loop = ControlLoop.from_params(model, {"controller": "joint_impedance", "ramp_time": 0.0, **extra},
                                       log=lambda level, text: None)
        loop.activate(0.0)
        clock = [0.0]

        def step():
            clock[0] += 1e-3
            loop.update_state(Q0, v0, clock[0])
            loop.step(clock[0])
        med, p99, cpu = timed(step)
        print(f"| {name} | {med:.1f} | {p99:.1f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
