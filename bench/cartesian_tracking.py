"""Cartesian tracking with and without feed-forward (issue 12), in-process: the Cartesian impedance law at
1 kHz against MuJoCo (RK4, 1 ms, built from the URDF), on the Panda's panda_hand_tcp, config gains
(k_pos 300 N/m, k_rot 10 N m/rad).  Prints RMS / max position error and max orientation error per path
and reference kind, and the law's cost per compute.

    .venv/bin/python bench/cartesian_tracking.py
"""
import math
import time

import numpy as np
import pinocchio as pin

from robot_dynamics.control import CartesianReference, State, make_law
from robot_dynamics.control.cartesian_trajectory import CartesianTrajectory
from robot_dynamics.demo import circle_points, line_points
from robot_dynamics.dynamics import Model, PinocchioBackend
from robot_dynamics.sim import MujocoSim

FRAME = "panda_hand_tcp"
Q0 = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
DT = 1e-3
GAINS = {**{f"task.k_pos_{a}": 300.0 for a in "xyz"}, **{f"task.k_rot_{a}": 10.0 for a in "xyz"}}


def run(model, dyn, points, kind, law_params, stream_rate=100.0):
    """kind: 'trajectory' (one CartesianTrajectory), 'pose' / 'pose+twist+accel' (streamed at
    stream_rate, sampled from the same trajectory)."""
    law = make_law("cartesian_impedance", model, dyn, {"frame": FRAME, **GAINS, **law_params})
    sim = MujocoSim(model, dt=DT)
    sim.reset(Q0)
    law.reset(State(sim.q, sim.v, 0.0))
    ref = CartesianTrajectory(*points)
    ref.start(0.0, *ref.sample(0.0)[:2])
    if kind == "trajectory":
        law.set_reference(CartesianTrajectory(*points))
    every = int(round(1.0 / (stream_rate * DT)))
    pm, d = model.pin_model, model.pin_model.createData()
    fid = pm.getFrameId(FRAME)
    e, er = [], []
    T = ref.end_time + 0.3
    for k in range(int(round(T / DT))):
        t = k * DT
        R_r, p_r, tw, ac = ref.sample(t)
        if kind != "trajectory" and k % every == 0:
            law.set_reference(CartesianReference(R_r, p_r) if kind == "pose" else
                              CartesianReference(R_r, p_r, twist=tw, accel=ac))
        tau = law.compute(State(sim.q, sim.v, t))
        pin.framesForwardKinematics(pm, d, sim.q)
        M = d.oMf[fid]
        e.append(np.linalg.norm(p_r - M.translation))
        er.append(np.linalg.norm(pin.log3(R_r @ M.rotation.T)))
        sim.step(tau)
    e = np.array(e)
    return 1e3 * math.sqrt(np.mean(e ** 2)), 1e3 * e.max(), 1e3 * max(er)


def main():
    model = Model.from_robot("panda")
    dyn = PinocchioBackend(model)
    pm, d = model.pin_model, model.pin_model.createData()
    pin.framesForwardKinematics(pm, d, Q0)
    M0 = d.oMf[pm.getFrameId(FRAME)]
    R0, p0 = M0.rotation.copy(), M0.translation.copy()
    paths = {"circle 40 mm, 4 s/turn x2": circle_points(R0, p0, 4.0, 2),
             "circle 40 mm, 2 s/turn x2": circle_points(R0, p0, 2.0, 2),
             "line 100 mm + 0.3 rad, rests": line_points(R0, p0)}
    kinds = [("pose stream 100 Hz", "pose", {}),
             ("pose+twist+accel 100 Hz", "pose+twist+accel", {"velocity_product_compensation": True}),
             ("trajectory, no C v/Jdot v", "trajectory", {}),
             ("trajectory", "trajectory", {"velocity_product_compensation": True})]
    print(f"{'path':<30}{'reference':<28}{'RMS mm':>9}{'max mm':>9}{'rot max mrad':>14}")
    for pname, pts in paths.items():
        for kname, kind, lp in kinds:
            rms, mx, rot = run(model, dyn, pts, kind, lp)
            print(f"{pname:<30}{kname:<28}{rms:>9.3f}{mx:>9.3f}{rot:>14.3f}", flush=True)
    for vpc in (False, True):
        law = make_law("cartesian_impedance", model, dyn, {"frame": FRAME, "velocity_product_compensation": vpc})
        s = State(Q0, np.full(7, 0.1), 0.0)
        law.reset(s)
        law.set_reference(CartesianTrajectory(*paths["circle 40 mm, 4 s/turn x2"]))
        for k in range(200):
            law.compute(State(Q0, s.v, k * DT))
        n = 2000
        t0 = time.perf_counter()
        for k in range(n):
            law.compute(State(Q0, s.v, 0.2 + k * DT))
        print(f"law.compute with a trajectory, velocity_product_compensation={vpc}: "
              f"{(time.perf_counter() - t0) / n * 1e6:.0f} us")


if __name__ == "__main__":
    main()
