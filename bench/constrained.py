#!/usr/bin/env python3
"""Constrained dynamics of the reference layer: agreement with Pinocchio and MuJoCo, drift over 1 s.

    .venv/bin/python bench/constrained.py            (Panda; about a minute)

1. Against Pinocchio's constraintDynamics (RigidConstraintModel, LOCAL_WORLD_ALIGNED) on random
   states: largest |a - a_pin| and |lambda - lambda_pin| (6d: states with J v = 0, see the tests).
2. Against MuJoCo: the hand (1 cm sphere) pressed on a table by PD + gravity compensation + a pushing
   force, pyramidal cone mu = 0.8, stiff contacts (solref 2 ms); after 2 s of settling, the contact
   force of both solvers at MuJoCo's state.
3. Drift over a simulated second: the Panda's tcp pinned to its start point (a point constraint, no
   torque: the arm swings as a closed chain under gravity), integrated with RK4 at dt = 1 ms by
   `constrained_dynamics`, with and without Baumgarte terms.  Energy should stay constant (the
   constraint force does no work); the pinned point should not move.
Nothing here is asserted.
"""
import sys
import time
from pathlib import Path

import mujoco
import numpy as np
import pinocchio as pin

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from robot_dynamics.dynamics import Model, PinocchioBackend  # noqa: E402
from robot_dynamics.dynamics import reference as ref  # noqa: E402
from robot_dynamics.dynamics.loops import rk4  # noqa: E402
from robot_dynamics.dynamics.reference.constrained import (Contact, FrameConstraint,  # noqa: E402
                                                           constrained_dynamics, contact_dynamics)
from robot_dynamics.sim.mujoco_sim import MujocoSim  # noqa: E402

TCP = "panda_hand_tcp"
Q0 = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])


def vs_pinocchio(model, rd, n=20):
    pm = model.pin_model
    fr = pm.frames[pm.getFrameId(TCP)]
    P = PinocchioBackend(model)
    rng = np.random.default_rng(0)
    rows = []
    for kind, ctype in (("point", pin.ContactType.CONTACT_3D), ("6d", pin.ContactType.CONTACT_6D)):
        ea = ef = 0.0
        t_ref = t_pin = 0.0
        for _ in range(n):
            q = model.random_configuration(rng)
            v, tau = rng.normal(size=7), rng.normal(size=7) * 5.0
            if kind == "6d":
                J = P.frame_jacobian(q, TCP, "local_world_aligned")
                v = v - np.linalg.pinv(J) @ (J @ v)
            cm = pin.RigidConstraintModel(ctype, pm, fr.parentJoint, fr.placement, pin.LOCAL_WORLD_ALIGNED)
            cms, cds = pin.StdVec_RigidConstraintModel(), pin.StdVec_RigidConstraintData()
            cms.append(cm)
            cds.append(cm.createData())
            d = pm.createData()
            pin.initConstraintDynamics(pm, d, cms, cds)
            t0 = time.perf_counter()
            a_p = pin.constraintDynamics(pm, d, q, v, tau, cms, cds, pin.ProximalSettings(1e-14, 0.0, 1))
            t_pin += time.perf_counter() - t0
            f_p = cds[0].contact_force.vector[:3 if kind == "point" else 6]
            t0 = time.perf_counter()
            a, (w,) = constrained_dynamics(model.tree, rd, q, v, tau, [FrameConstraint(TCP, kind)])
            t_ref += time.perf_counter() - t0
            ea, ef = max(ea, np.max(np.abs(a - a_p))), max(ef, np.max(np.abs(w - f_p)))
        rows.append((kind, ea, ef, 1e6 * t_ref / n, 1e6 * t_pin / n))
    print("\n## 1. Bilateral constraint on the tcp vs Pinocchio constraintDynamics "
          f"({n} random states)")
    print("| constraint | max abs a error (rad/s^2) | max abs lambda error (N, N m) | reference (us) | pin (us) |")
    print("|---|---:|---:|---:|---:|")
    for kind, ea, ef, tr, tp in rows:
        print(f"| {kind} | {ea:.2e} | {ef:.2e} | {tr:.0f} | {tp:.1f} |")


def vs_mujoco(model, rd):
    P = PinocchioBackend(model)
    r = 0.01
    print("\n## 2. Hand pressed on a table: contact force, reference QP vs MuJoCo (pyramidal, mu = 0.8)")
    print("| push [x, y, z] (N) | MuJoCo force on the robot (N) | reference (N) | abs diff (N) | rel diff "
          "| max abs qacc diff |")
    print("|---|---|---|---:|---:|---:|")
    for push in ([0.0, 0.0, -10.0], [3.0, -2.0, -15.0], [6.0, 4.0, -30.0]):
        push = np.array(push)
        top = P.frame_placement(Q0, TCP)[1][2] - r - 0.003
        sim = MujocoSim(model, dt=0.0005, table=top, damping=2.0, integrator="RK4")
        mm = sim.m
        mm.opt.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
        mm.geom_friction[:, 0] = 0.8
        mm.geom_solref[:] = [0.002, 1.0]
        mm.geom_solimp[:] = [0.99, 0.999, 0.001, 0.5, 2.0]
        sim.reset(Q0)

        def control(q, v):
            J = P.frame_jacobian(q, TCP, "local_world_aligned")[:3]
            return P.gravity(q) + 100.0 * (Q0 - q) - 10.0 * v + J.T @ push
        for _ in range(4000):
            sim.step(control(sim.q, sim.v))
        q, v = sim.q, sim.v
        tau = control(q, v)
        d = sim.d
        d.ctrl[sim._act] = tau
        mujoco.mj_forward(mm, d)
        f6 = np.zeros(6)
        mujoco.mj_contactForce(mm, d, 0, f6)
        f_mj = d.contact[0].frame.reshape(3, 3).T @ f6[:3]
        if mm.geom(d.contact[0].geom1).name == "contact_sphere":
            f_mj = -f_mj
        a, f, _ = contact_dynamics(model.tree, rd, q, v, tau, [Contact(TCP, mu=0.8, offset=[0.0, 0.0, -r])])
        diff = np.linalg.norm(f[0] - f_mj)
        print(f"| {push.tolist()} | {np.round(f_mj, 3).tolist()} | {np.round(f[0], 3).tolist()} | {diff:.1e} "
              f"| {diff / np.linalg.norm(f_mj):.1e} | {np.max(np.abs(a - d.qacc[sim._dadr])):.1e} |")


def drift(model, rd, baumgarte, T=1.0, dt=1e-3):
    P = PinocchioBackend(model)
    tree = model.tree
    q, v = Q0.copy(), np.zeros(7)
    p0 = P.frame_placement(q, TCP)[1].copy()
    c = [FrameConstraint(TCP, "point", target_p=p0)]
    tau = np.zeros(7)

    def f(q, v):
        return constrained_dynamics(tree, rd, q, v, tau, c, baumgarte)[0]

    def energy(q, v):
        return P.kinetic_energy(q, v) + P.potential_energy(q)
    E0 = energy(q, v)
    dE = dp = dv = 0.0
    t0 = time.perf_counter()
    for _ in range(int(round(T / dt))):                          # RK4
        q, v = rk4(f, q, v, dt)
        dE = max(dE, abs(energy(q, v) - E0))
        dp = max(dp, np.linalg.norm(P.frame_placement(q, TCP)[1] - p0))
        dv = max(dv, np.linalg.norm(P.frame_jacobian(q, TCP, "local_world_aligned")[:3] @ v))
    wall = time.perf_counter() - t0
    return dE, dp, dv, np.max(np.abs(v)), wall


def main():
    model = Model.from_robot("panda")
    rd = ref.RefData(model.tree)
    print(f"# constrained dynamics (reference layer), Panda, tcp {TCP}; pinocchio {pin.__version__}, "
          f"mujoco {mujoco.__version__}")
    vs_pinocchio(model, rd)
    vs_mujoco(model, rd)
    print("\n## 3. Drift over 1 s: tcp pinned (point constraint), no torque, RK4 dt = 1 ms")
    print("| Baumgarte (Kp, Kd) | max abs energy drift (J) | max tcp drift (m) | max abs tcp velocity (m/s) "
          "| max abs joint velocity (rad/s) | wall time (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for gains in ((0.0, 0.0), (100.0, 20.0), (2500.0, 100.0)):
        dE, dp, dv, vmax, wall = drift(model, rd, gains)
        print(f"| {gains} | {dE:.2e} | {dp:.2e} | {dv:.2e} | {vmax:.2f} | {wall:.1f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
