#!/usr/bin/env python3
"""Closed chains and impacts of the reference layer: cost per call, and the four-bar's drift.

    .venv/bin/python bench/closed_chains.py            (about a minute)

1. Cost: microseconds per call, the best of --repeats runs of --calls calls, the reference and
   Pinocchio calls interleaved in every repeat; process CPU time (time.process_time), so that the
   load of a shared machine is not charged to whichever call it preempted (as bench/batched.py).
   - Panda, the tcp welded (relative "6d") to link 1 (6 joints between them: full rank) and to link 3
     (4 joints: rank 4, redundant="min_norm"), one `constrained_dynamics` call; Pinocchio's
     `constraintDynamics` with the two-joint RigidConstraintModel (CONTACT_6D, LOCAL_WORLD_ALIGNED)
     beside it (for link 3 with mu = 1e-8, 100 proximal iterations).
   - The four-bar of test/test_closed_chains.py (revolute closure, 5 rows of rank 2): one
     `ClosedChain.step` (semi-implicit Euler, Baumgarte (2500, 100)); Pinocchio's constraintDynamics
     with the point closure.
   - One impulse solve: the Panda's tcp hitting a table (frictionless, and pyramid mu = 0.8), e = 0.5;
     a bilateral 3D impact (Pinocchio's impulseDynamics beside it); the four-bar's coupler hitting a
     floor with the loop closed.
2. Drift: the four-bar released from rest at crank angle -1 rad under gravity, 2 s at 1 kHz with
   semi-implicit Euler (`ClosedChain.step`), for several Baumgarte gains: the largest gap between the
   loop's joint centres over the run, the largest energy error, the largest joint speed; and the
   post-stabilised step (each step projected back onto the closed loops, q and v).
Nothing here is asserted.
"""
import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))
from robot_dynamics.dynamics import Model  # noqa: E402
from robot_dynamics.dynamics import reference as ref  # noqa: E402
from robot_dynamics.dynamics.loops import ClosedChain  # noqa: E402
from robot_dynamics.dynamics.reference.constrained import (Contact, FrameConstraint,  # noqa: E402
                                                           constrained_dynamics, constraint_jacobian)
from robot_dynamics.dynamics.reference.impulse import impulse_dynamics  # noqa: E402
from test_closed_chains import (GROUND, LINKS, closing_angles, four_bar_drift, four_bar_loops,  # noqa: E402
                                four_bar_urdf)

TCP = "panda_hand_tcp"


def best_us(fns, calls, repeats):
    """Best CPU time per call of each fn, the fns interleaved in every repeat."""
    best = [float("inf")] * len(fns)
    for fn in fns:
        fn()
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            t0 = time.process_time()
            for _ in range(calls):
                fn()
            best[k] = min(best[k], (time.process_time() - t0) / calls)
    return [1e6 * b for b in best]


def pin_setup(model, ctype, f1, pl1, f2=None, pl2=None):
    pm = model.pin_model
    fr1 = pm.frames[model.frame_ids[f1]]
    if f2 is None:
        cm = pin.RigidConstraintModel(ctype, pm, fr1.parentJoint, fr1.placement * pl1, pin.LOCAL_WORLD_ALIGNED)
    else:
        fr2 = pm.frames[model.frame_ids[f2]]
        cm = pin.RigidConstraintModel(ctype, pm, fr1.parentJoint, fr1.placement * pl1, fr2.parentJoint,
                                      fr2.placement * pl2, pin.LOCAL_WORLD_ALIGNED)
    cms, cds = pin.StdVec_RigidConstraintModel(), pin.StdVec_RigidConstraintData()
    cms.append(cm)
    cds.append(cm.createData())
    d = pm.createData()
    pin.initConstraintDynamics(pm, d, cms, cds)
    return pm, d, cms, cds


def cost(calls, repeats):
    rows = []
    model = Model.from_robot("panda")
    tree, rd = model.tree, ref.RefData(model.tree)
    rng = np.random.default_rng(0)
    q, tau = model.random_configuration(rng), rng.normal(size=7) * 5.0
    I = (np.eye(3), np.zeros(3))
    for link, redundant, prox in (("panda_link1", "raise", (1e-14, 0.0, 1)),
                                  ("panda_link3", "min_norm", (1e-13, 1e-8, 100))):
        c = FrameConstraint(TCP, "6d", frame2=link)
        J, _, _ = constraint_jacobian(tree, rd, q, np.zeros(7), [c])
        v = rng.normal(size=7)
        v = v - np.linalg.pinv(J) @ (J @ v)
        pm, d, cms, cds = pin_setup(model, pin.ContactType.CONTACT_6D, TCP, pin.SE3(*I), link, pin.SE3(*I))
        settings = pin.ProximalSettings(*prox)
        t_ref, t_pin = best_us([lambda: constrained_dynamics(tree, rd, q, v, tau, [c], redundant=redundant),
                                lambda: pin.constraintDynamics(pm, d, q, v, tau, cms, cds, settings)], calls, repeats)
        rows.append((f"Panda, tcp welded to {link} (6d, rank {np.linalg.matrix_rank(J)}, {redundant})",
                     "constrained_dynamics", t_ref, t_pin))
    fb = Model.from_urdf_string(four_bar_urdf())
    chain = ClosedChain.from_yaml(fb, four_bar_loops())
    qf = chain.solve_configuration(closing_angles(-1.0), fixed=["crank_joint"])
    vf = chain.project_velocity(qf, np.array([1.0, 0.0, 0.0]))
    pm, d, cms, cds = pin_setup(fb, pin.ContactType.CONTACT_3D, "rocker",
                                pin.SE3(np.eye(3), np.array([LINKS["rocker"][0], 0, 0])), "ground",
                                pin.SE3(np.eye(3), np.array([GROUND, 0, 0])))
    settings = pin.ProximalSettings(1e-14, 1e-14, 1)
    t_ref, t_pin = best_us([lambda: chain.step(qf, vf, [0.0], 1e-3, (2500.0, 100.0)),
                            lambda: pin.constraintDynamics(pm, d, qf, vf, np.zeros(3), cms, cds, settings)],
                           calls, repeats)
    rows.append(("four-bar, revolute closure (5 rows, rank 2)", "ClosedChain.step", t_ref, t_pin))
    # impulses on the Panda: the tcp moving down at 0.5 m/s
    ref.forward_kinematics(tree, rd, q)
    Jt = ref.frame_jacobian(tree, rd, TCP, "local_world_aligned")[:3]
    vi = rng.normal(size=7)
    vi = vi + np.linalg.pinv(Jt) @ (np.array([0.1, -0.2, -0.5]) - Jt @ vi)
    pm, d, cms, cds = pin_setup(model, pin.ContactType.CONTACT_3D, TCP, pin.SE3(*I))
    settings = pin.ProximalSettings(1e-14, 0.0, 1)
    for label, cons, bil in (("frictionless contact", [Contact(TCP)], []),
                             ("contact, pyramid mu = 0.8", [Contact(TCP, mu=0.8)], []),
                             ("bilateral point (Pinocchio's impulseDynamics)", [], [FrameConstraint(TCP)])):
        t_ref, t_pin = best_us([lambda: impulse_dynamics(tree, rd, q, vi, cons, 0.5, bilateral=bil),
                                lambda: pin.impulseDynamics(pm, d, q, vi, cms, cds, 0.5, settings)], calls, repeats)
        rows.append((f"Panda impact, {label}, e = 0.5", "impulse_dynamics", t_ref,
                     t_pin if bil else None))
    rdf = ref.RefData(fb.tree)
    ref.forward_kinematics(fb.tree, rdf, qf)
    R, _ = ref.frame_placement(fb.tree, rdf, "coupler")
    floor = Contact("coupler", offset=R @ [LINKS["coupler"][0] / 2, 0.0, 0.0])
    (t_ref,) = best_us([lambda: impulse_dynamics(fb.tree, rdf, qf, vf, [floor], 0.5, bilateral=chain.constraints)],
                       calls, repeats)
    rows.append(("four-bar impact, coupler on the floor, loop closed, e = 0.5", "impulse_dynamics", t_ref, None))
    print(f"\n## 1. Cost per call (best of {repeats} x {calls} calls, process CPU time)")
    print("| case | call | reference (us) | Pinocchio (us) |")
    print("|---|---|---:|---:|")
    for case, call, tr, tp in rows:
        print(f"| {case} | `{call}` | {tr:.0f} | {'-' if tp is None else f'{tp:.1f}'} |")
    sys.stdout.flush()


def drift():
    fb = Model.from_urdf_string(four_bar_urdf())
    chain = ClosedChain.from_yaml(fb, four_bar_loops())
    print("\n## 2. Four-bar drift: 2 s from rest under gravity, semi-implicit Euler at 1 kHz")
    print("| Baumgarte (Kp, Kd) | max loop gap (m) | max abs energy error (J) | max joint speed (rad/s) "
          "| wall time (s) |")
    print("|---|---:|---:|---:|---:|")
    E = chain.energy(chain.solve_configuration(closing_angles(-1.0), fixed=["crank_joint"]), np.zeros(3))
    for gains, project in (((0.0, 0.0), False), ((100.0, 20.0), False), ((2500.0, 100.0), False),
                           ((10000.0, 200.0), False), ((0.0, 0.0), True)):
        t0 = time.perf_counter()
        gap, dE, vmax = four_bar_drift(chain, gains, energy=True, project=project)
        label = f"{gains}{', post-stabilised (project=True)' if project else ''}"
        print(f"| {label} | {gap:.2e} | {dE:.2e} | {vmax:.1f} | {time.perf_counter() - t0:.1f} |")
        sys.stdout.flush()
    print(f"(energy at the start {E:.3f} J, potential energy with the world origin as zero)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    print(f"# closed chains and impacts (reference layer): Python {platform.python_version()}, "
          f"pinocchio {pin.__version__}, numpy {np.__version__}")
    cost(args.calls, args.repeats)
    drift()


if __name__ == "__main__":
    main()
