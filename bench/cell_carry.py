#!/usr/bin/env python3
"""The cooperative carry (control/cooperative.py) in MuJoCo at 1 kHz, and the cost of its forms.

    .venv/bin/python bench/cell_carry.py          (about a minute and a half)

1. The carry in the shipped two-Panda cell (sim/cell_world.py two_panda_cell: arms facing each other along
   x, a 0.3 m cube of 1 kg on the table, link capsules of 6 cm for contacts), set up by sim/cell_carry.py:
   the hands beside the box, their capsules touching its faces, squeeze set to 30 N (friction mu 1);
   the box lifted 5 cm, moved 0.2 m along y (across the arms' line) and back at up to 0.1 m/s (quintic
   legs, 0.5 s dwells), set down; MuJoCo 1 kHz (implicitfast, no-slip iterations).  Measured by MuJoCo:
   the box's pose error against the trajectory (position mm, orientation mrad, RMS and max over the
   run), the squeeze from the hands' contact forces against its set value (%, after the first 0.1 s,
   when the contacts form from zero penetration), the box's slip in hand 1's frame at the end (mm).
   Rows:
   - one controller for both arms (both states of the same instant);
   - two controllers sharing their states (each arm's own law, arms=(i,)), the partner's state 1 ms and
     4 ms old (DESIGN.md: JointState ping-pong between two processes p99 0.6 ms idle, about 4 ms with two
     busy processes on these 2 cores);
   - the law's box mass 20 % high (1.8 kg given for 1.5 kg);
   - unmodelled joint losses in the sim (franky-sim's fr3.xml order: damping 0.2 N m s/rad, friction loss
     0.5 N m on every joint);
   - MuJoCo's default soft friction (no no-slip iterations, pyramidal cone): the box creeps.
2. Cost per cycle (microseconds, perf_counter around each call, median and p99 over 3000 calls at a
   mid-carry state; this shared 2-core machine's load included): the law for both arms (one controller),
   for one arm (its own dynamics, the partner's kinematics only), and one forward KKT solve of the pair as
   a closed chain (14 joints, 6 loop rows: the reference layer's ClosedChain.forward_dynamics, and
   Pinocchio's constraintDynamics with the same CONTACT_6D closure).
Nothing here is asserted.
"""
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from robot_dynamics.control.cooperative import CarryObject, cell_chain, squeeze_direction  # noqa: E402
from robot_dynamics.sim.cell_carry import CellCarry  # noqa: E402
from robot_dynamics.sim.cell_world import two_panda_cell  # noqa: E402

SQUEEZE = 30.0


def setup(sim_kw=None, friction_fix=True):
    cell = two_panda_cell(integrator="implicitfast", **(sim_kw or {}))
    carry = CellCarry(cell, friction_fix=friction_fix)
    cell.reset(carry.q_grasp)
    return cell, carry


def run(delay_ms=None, mass_factor=1.0, sim_kw=None, friction_fix=True):
    """One carry.  delay_ms None: one controller; else two, each seeing the partner's state that old."""
    cell, carry = setup(sim_kw, friction_fix)
    traj = carry.trajectory
    obj = CarryObject(carry.obj.mass * mass_factor, carry.obj.inertia * mass_factor)
    laws = [carry.law(squeeze=SQUEEZE, obj=obj) for _ in range(1 if delay_ms is None else 2)]
    for law in laws:
        law.reset(0.0, carry.states())
    R_h, p_h = carry.hand_pose(0)
    rel0 = R_h.T @ (carry.p_o - p_h)
    hist = []
    d = 0 if delay_ms is None else int(round(delay_ms))
    e_p, e_r, sq, cost = [], [], [], []
    while cell.t < traj.end + 0.5:
        t = cell.t
        now = carry.states(cell, t)
        hist.append(now)
        old = hist[max(0, len(hist) - 1 - d)]
        c0 = time.perf_counter()
        if delay_ms is None:
            tau = laws[0].compute(t, now)
        else:
            tau = [laws[0].compute(t, [now[0], old[1]], arms=(0,))[0],
                   laws[1].compute(t, [old[0], now[1]], arms=(1,))[1]]
        cost.append(time.perf_counter() - c0)
        cell.step(commands=carry.commands(tau))
        R_b, p_b = carry.box_pose()
        p_d, _, _ = traj.sample(cell.t)
        e_p.append(np.linalg.norm(p_b - p_d))
        e_r.append(np.linalg.norm(pin.log3(traj.R @ R_b.T)))
        if cell.t > 0.1:
            f1, f2 = carry.hand_wrenches()
            n = squeeze_direction(carry.hand_pose(0)[1], carry.hand_pose(1)[1])
            sq.append(0.5 * (f1[:3] - f2[:3]) @ n)
    R_h, p_h = carry.hand_pose(0)
    slip = np.linalg.norm(R_h.T @ (carry.box_pose()[1] - p_h) - rel0)
    e_p, e_r, sq = np.array(e_p), np.array(e_r), (np.array(sq) - SQUEEZE) / SQUEEZE
    rms = lambda x: float(np.sqrt(np.mean(x ** 2)))  # noqa: E731
    return dict(p_rms=1e3 * rms(e_p), p_max=1e3 * e_p.max(), r_rms=1e3 * rms(e_r), r_max=1e3 * e_r.max(),
                f_rms=100 * rms(sq), f_max=100 * np.abs(sq).max(), slip=1e3 * slip,
                us=1e6 * float(np.median(cost)), lost=any(any(law.lost) for law in laws))


def timing(n=3000):
    cell, carry = setup()
    law = carry.law(squeeze=SQUEEZE)
    law.reset(0.0, carry.states())
    while cell.t < 4.3:                                 # mid-carry, at the peak speed
        cell.step(commands=carry.commands(law.compute(cell.t, carry.states(cell, cell.t))))
    t = cell.t
    s = carry.states(cell, t)
    w = carry
    chain = cell_chain(w.arms, w.obj)
    idx = [[chain.model.joint_names.index(f"a{i + 1}_{j}") for j in w.arms[i].model.joint_names] for i in range(2)]
    q, v, u = np.zeros(14), np.zeros(14), np.zeros(14)
    tau = law.compute(t, s)
    for i in range(2):
        q[idx[i]], v[idx[i]], u[idx[i]] = s[i][0], s[i][1], tau[i]
    v = chain.project_velocity(q, v)
    pm = chain.model.pin_model
    pd = pm.createData()
    a2 = w.arms[1]
    fr1 = pm.frames[chain.model.frame_ids[f"a2_{a2.hand_frame}"]]
    fr2 = pm.frames[chain.model.frame_ids["object"]]
    cm = pin.RigidConstraintModel(pin.ContactType.CONTACT_6D, pm, fr1.parentJoint,
                                  fr1.placement * pin.SE3(a2.R_X, a2.p_X), fr2.parentJoint, fr2.placement,
                                  pin.LOCAL_WORLD_ALIGNED)
    cms, cds = pin.StdVec_RigidConstraintModel(), pin.StdVec_RigidConstraintData()
    cms.append(cm)
    cds.append(cm.createData())
    pin.initConstraintDynamics(pm, pd, cms, cds)
    settings = pin.ProximalSettings(1e-12, 1e-12, 1)
    a_ref, _ = chain.forward_dynamics(q, v, u)
    a_pin = pin.constraintDynamics(pm, pd, q, v, u, cms, cds, settings)
    rows = []
    for label, fn, k in (("law, one controller for both arms", lambda: law.compute(t, s), n),
                         ("law, one arm's controller (partner: kinematics)", lambda: law.compute(t, s, arms=(0,)), n),
                         ("pair as closed chain: KKT forward dynamics, reference layer",
                          lambda: chain.forward_dynamics(q, v, u), 100),
                         ("pair as closed chain: KKT forward dynamics, Pinocchio constraintDynamics",
                          lambda: pin.constraintDynamics(pm, pd, q, v, u, cms, cds, settings), n)):
        for _ in range(20):
            fn()
        c = []
        for _ in range(k):
            c0 = time.perf_counter()
            fn()
            c.append(time.perf_counter() - c0)
        c = 1e6 * np.array(c)
        rows.append((label, np.median(c), np.percentile(c, 99)))
    return rows, float(np.max(np.abs(a_ref - a_pin)))


def main():
    print(f"# bench/cell_carry.py  {platform.node()}  {time.strftime('%Y-%m-%d %H:%M')}  "
          f"(load average {' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())})\n")
    print("## The carry in the two-Panda cell, MuJoCo 1 kHz: 1 kg box lifted 5 cm, 0.2 m along y and back at "
          "up to 0.1 m/s, set down; squeeze 30 N\n")
    print("| form / condition | box pos err RMS / max [mm] | box rot err RMS / max [mrad] | "
          "squeeze err RMS / max [%] | slip [mm] | law per cycle (both arms), median [us] |")
    print("|---|---|---|---|---|---|")
    cases = [("one controller, both arms", {}),
             ("two controllers, partner state 1 ms old", dict(delay_ms=1)),
             ("two controllers, partner state 4 ms old", dict(delay_ms=4)),
             ("one controller, box mass given 20 % high", dict(mass_factor=1.2)),
             ("one controller, sim joint damping 0.2 + friction 0.5 N m", dict(sim_kw=dict(damping=0.2, friction=0.5))),
             ("one controller, MuJoCo's default soft friction (no no-slip)", dict(friction_fix=False))]
    for label, kw in cases:
        r = run(**kw)
        print(f"| {label} | {r['p_rms']:.3f} / {r['p_max']:.3f} | {r['r_rms']:.3f} / {r['r_max']:.3f} | "
              f"{r['f_rms']:.2f} / {r['f_max']:.2f} | {r['slip']:.3f} | {r['us']:.0f}"
              f"{' (partner lost!)' if r['lost'] else ''} |", flush=True)
    print("\n## Cost per cycle (mid-carry state)\n")
    rows, da = timing()
    print("| computation | median [us] | p99 [us] |")
    print("|---|---|---|")
    for label, med, p99 in rows:
        print(f"| {label} | {med:.1f} | {p99:.1f} |")
    print(f"\n(the two KKT solvers' accelerations agree to {da:.1e} rad/s^2)")


if __name__ == "__main__":
    main()
