"""Arm-to-arm distance rows (control/arm_distance.py + the envelope's extra planes): two Pandas in one
MuJoCo world (sim/cell_world.py), each under its own ControlLoop (joint impedance, the envelope on
its elbow, wrist and hand), both commanded into each other.  MuJoCo judges: with the rows the arms
stop apart (no contact between them, the gap between their frames' spheres stays positive); without
them the same commands drive them into each other (contacts, which the sim's link capsules turn
into forces).  Geometry oracle: Pinocchio FK of each arm's own URDF at the base poses set here."""
import math

import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.control import ControlLoop
from robot_dynamics.control.arm_distance import ArmDistanceRows
from robot_dynamics.control.laws.base import JointReference
from robot_dynamics.dynamics import Model
from robot_dynamics.sim.cell_world import PANDA_READY, ArmSpec, CellWorld

DT = 1e-3
FRAMES = ["panda_link4", "panda_link6", "panda_link8", "panda_hand_tcp"]
RADII = [0.22, 0.22, 0.12, 0.10]    # spheres around the frame origins, covering the sim's 0.06 m link capsules
#                                      (the elbow and wrist spheres meet over the 0.39 m forearm)
MARGIN = 0.10
DAMPING = 300.0                      # N s/m on the approach (the envelope default: 100)
HALF = 0.55                          # bases at x = -+HALF, facing each other
# a horizontal reach toward the other arm: each TCP would end 0.9 m past the other's
TARGET = np.array([0.0, 1.4, 0.0, -0.2, 0.0, 1.6, 0.785])


def _loop(model):
    p = {"controller": "joint_impedance", "ramp_time": 0.0, "watchdog_timeout": 0.1, "update_rate": 1.0 / DT,
         "joint_impedance.k_gains": [300.0] * 4 + [50.0] * 3,
         "safety.frames": FRAMES, "safety.frame_radii": RADII, "safety.margin": MARGIN,
         "safety.damping": DAMPING,
         # as the shipped Panda configs: the joint speed stop (a joint at its URDF velocity limit stops
         # the arm), and the envelope's frames under 0.5 m/s (a law pushing 1.4 rad of error against
         # the other arm saturates the efforts; sliding off it, it would whip)
         "safety.joint_speed_stop": 1.0, "safety.max_linear_speed": 0.5}
    loop = ControlLoop.from_params(model, p, log=lambda level, text: None)
    loop.activate(0.0)
    return loop


def _cell(steps, rows_on):
    """Both arms commanded to TARGET for `steps` steps; returns (min sphere gap seen, max left-right
    contact force seen, the rows' min gap as computed by the left arm's rows)."""
    arms = [ArmSpec("left", Model.from_robot("panda"), pos=(-HALF, 0.0, 0.0), initial_positions=PANDA_READY),
            ArmSpec("right", Model.from_robot("panda"), pos=(HALF, 0.0, 0.0), rpy=(0.0, 0.0, math.pi),
                    initial_positions=PANDA_READY)]
    w = CellWorld(arms, dt=DT)
    loops, rows = {}, {}
    for ns, other in (("left", "right"), ("right", "left")):
        a, b = w.arm(ns), w.arm(other)
        loops[ns] = _loop(a.model)
        # the other base in this base's frame (from the poses set above)
        R = a.R_base.T @ b.R_base
        p = a.R_base.T @ (b.p_base - a.p_base)
        rows[ns] = ArmDistanceRows(a.model, b.model, (R, p), FRAMES, RADII, reach=0.3)
    pms = {ns: (w.arm(ns).model.pin_model, w.arm(ns).model.pin_model.createData()) for ns in w.arms}
    gap_min, f_max, t = np.inf, 0.0, 0.0
    for k in range(steps):
        qs = {ns: w.arm(ns).q for ns in w.arms}
        cmds = {}
        for ns, other in (("left", "right"), ("right", "left")):
            a = w.arm(ns)
            loop = loops[ns]
            loop.update_state(qs[ns], a.v, t)
            if k == 0:
                assert loop.set_reference(JointReference(TARGET.copy()))[0]
            if rows_on:
                rows[ns].update(loop.envelope, qs[other], qs[ns])
            tau, _ = loop.step(t)
            cmds[ns] = tau.copy()
        w.step(commands=cmds)
        t += DT
        # the oracle: Pinocchio FK of each arm's URDF at the world's state, moved by its base pose
        P = {}
        for ns in w.arms:
            pm, pd = pms[ns]
            pin.framesForwardKinematics(pm, pd, w.arm(ns).q)
            a = w.arm(ns)
            P[ns] = np.array([a.R_base @ pd.oMf[pm.getFrameId(f)].translation + a.p_base for f in FRAMES])
        r = np.asarray(RADII)
        gap = np.linalg.norm(P["left"][:, None] - P["right"][None], axis=2) - r[:, None] - r[None, :]
        gap_min = min(gap_min, float(gap.min()))
        f_max = max([f_max] + [f for a_, b_, _, _, f in w.contacts() if {a_, b_} == {"left", "right"}])
    return gap_min, f_max, w, loops


def test_two_arms_commanded_into_each_other_stop_apart():
    """With the distance rows: no contact between the arms in MuJoCo and the spheres' gap never below
    zero over 4 s; both arms come to rest (joint speeds < 0.05 rad/s at the end), apart."""
    gap, force, w, loops = _cell(4000, rows_on=True)
    assert force == 0.0, f"the arms touched: {force:.1f} N"
    assert gap > 0.0, f"sphere gap {gap:.3f} m"
    for ns in w.arms:
        assert np.max(np.abs(w.arm(ns).v)) < 0.05, ns


def test_without_the_rows_the_same_commands_collide():
    """The counterfactual: the envelope without the rows, the same targets: the arms' spheres
    overlap and MuJoCo reports contact forces between them (so the first test's result is the
    rows' doing)."""
    gap, force, _, _ = _cell(3000, rows_on=False)
    assert gap < 0.0 and force > 1.0


def test_rows_planes_are_the_sphere_gaps():
    """Each plane's clearance for its own frame equals the distance between the two frames minus
    both radii (the rows' geometry), on random configurations, for frames within reach."""
    m = Model.from_robot("panda")
    R = pin.rpy.rpyToMatrix(0.0, 0.0, math.pi)
    p = np.array([0.9, 0.1, 0.0])
    rows = ArmDistanceRows(m, m, (R, p), FRAMES, RADII, reach=10.0)
    rng = np.random.default_rng(1)
    pm, pd = m.pin_model, m.pin_model.createData()
    r = np.asarray(RADII)
    for _ in range(5):
        qa, qb = m.random_configuration(rng), m.random_configuration(rng)
        pin.framesForwardKinematics(pm, pd, qa)
        Pa = np.array([pd.oMf[pm.getFrameId(f)].translation for f in FRAMES])
        pin.framesForwardKinematics(pm, pd, qb)
        Pb = np.array([R @ pd.oMf[pm.getFrameId(f)].translation + p for f in FRAMES])
        N, d, frame = rows.planes(Pa, r, qb)
        assert len(d) == 16
        s = np.einsum("kj,kj->k", N, Pa[frame]) - d - r[frame]
        expect = np.array([np.linalg.norm(Pa[i] - Pb[j]) - r[i] - r[j] for i in range(4) for j in range(4)])
        assert np.allclose(np.sort(s), np.sort(expect), atol=1e-12)
