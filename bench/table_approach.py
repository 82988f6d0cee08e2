#!/usr/bin/env python3
"""Issue 41's table case: Cartesian impedance on panda_hand_tcp (k_rot 50 N m/rad), the safety envelope
on that frame (radius 0.025 m, a table plane z >= the TCP's start height - 0.15 m, default margin), a
target pose 0.31 m straight below the start (0.16 m below the table), the package's ControlLoop stepping a
MuJoCo Panda (RK4) on one 1 ms clock for 3 s.  Per case (k_pos, torque_rate_limit, envelope on/off): the
peak joint speed, the peak TCP speed, the deepest the TCP sphere went below the table (negative: held
above it), the joint speed at the end and the envelope's stops.  Nothing is asserted.

    .venv/bin/python bench/table_approach.py [--k 700,1000,1500,5000] [--rates 1000,600,300,200] [--time 3]
        [--no-shaping]
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from robot_dynamics.control import ControlLoop  # noqa: E402
from robot_dynamics.control.laws.base import CartesianReference  # noqa: E402
from robot_dynamics.dynamics import Model, make_backend  # noqa: E402
from robot_dynamics.sim import MujocoSim  # noqa: E402

DT = 0.001
TCP = "panda_hand_tcp"
Q0 = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
RADIUS = 0.025


def case(model, pb, k, rate, envelope, seconds, extra=None):
    R0, p0 = pb.frame_placement(Q0, TCP)
    table = p0[2] - 0.15
    params = {"controller": "cartesian_impedance", "cartesian_impedance.frame": TCP,
              "cartesian_impedance.task.k_pos_x": k, "cartesian_impedance.task.k_pos_y": k,
              "cartesian_impedance.task.k_pos_z": k, "cartesian_impedance.task.k_rot_x": 50.0,
              "cartesian_impedance.task.k_rot_y": 50.0, "cartesian_impedance.task.k_rot_z": 50.0,
              "torque_rate_limit": rate, "ramp_time": 0.0, "safe_command": "gravity"}
    if envelope:
        params.update({"safety.frames": [TCP], "safety.frame_radii": [RADIUS],
                       "safety.planes": [0.0, 0.0, 1.0, float(table)]})
    params.update(extra or {})
    loop = ControlLoop.from_params(model, params, log=lambda lv, tx: None)
    sim = MujocoSim(model, dt=DT)
    sim.reset(Q0)
    loop.safety.hold(pb.gravity(Q0))      # the arm held at activation (the node's safe command, gravity)
    loop.activate(0.0)
    vj = vt = 0.0
    deepest = -np.inf
    t = 0.0
    for i in range(int(seconds / DT)):
        if i == 100:
            assert loop.set_reference(CartesianReference(R0, p0 - np.array([0.0, 0.0, 0.31])), "target_pose", t)[0]
        loop.update_state(sim.q, sim.v, t)
        tau, _ = loop.step(t)
        sim.step(tau)
        t += DT
        vj = max(vj, float(np.abs(sim.v).max()))
        J = pb.frame_jacobian(sim.q, TCP) if hasattr(pb, "frame_jacobian") else None
        _, p = pb.frame_placement(sim.q, TCP)
        if J is not None:
            vt = max(vt, float(np.linalg.norm((J @ sim.v)[:3])))
        deepest = max(deepest, table - (p[2] - RADIUS))
    stops = loop.counts.get("envelope.stops", 0)
    return vj, vt, deepest, float(np.abs(sim.v).max()), stops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", default="700,1000,1500,5000")
    ap.add_argument("--rates", default="1000,600,300,200")
    ap.add_argument("--time", type=float, default=3.0)
    ap.add_argument("--no-shaping", action="store_true", help="setpoint_shaping false (the loop as before)")
    a = ap.parse_args()
    extra = {"setpoint_shaping": False} if a.no_shaping else None
    model = Model.from_robot("panda")
    pb = make_backend(model, "pinocchio")
    print("| k_pos [N/m] | rate [N m/s] | envelope | peak joint speed [rad/s] | peak TCP speed [m/s] "
          "| deepest below the table [mm] | speed at the end [rad/s] | stops |")
    print("|--:|--:|---|--:|--:|--:|--:|--:|")
    for k in (float(x) for x in a.k.split(",")):
        for rate in (float(x) for x in a.rates.split(",")):
            for env in (False, True):
                vj, vt, deep, vend, stops = case(model, pb, k, rate, env, a.time, extra)
                print(f"| {k:.0f} | {rate:.0f} | {'on' if env else 'off'} | {vj:.2f} | {vt:.2f} | {deep * 1e3:+.1f} "
                      f"| {vend:.2e} | {stops} |", flush=True)


if __name__ == "__main__":
    main()
