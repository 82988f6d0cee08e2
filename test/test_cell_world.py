"""CellWorld (robot_dynamics/sim/cell_world.py): several arms in one MuJoCo world.

Oracles: Pinocchio built directly from each arm's URDF text (RNEA, CRBA, ABA, FK) with gravity
rotated into that arm's base frame; the base poses and box / table geometry the test sets."""
import math

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.dynamics import Model
from robot_dynamics.sim.cell_world import (PANDA_READY, ArmSpec, BoxSpec, CellWorld, TableSpec,
                                           two_panda_cell)

G = np.array([0.0, 0.0, -9.81])


def _R(arm):
    """The arm's base rotation from the roll-pitch-yaw the test gave it (Pinocchio's rpy)."""
    return pin.rpy.rpyToMatrix(np.asarray(arm.spec.rpy, dtype=float))


def _pin(model, R_base):
    """Pinocchio model of the arm's own URDF, gravity as seen in its base frame, and the map from
    Pinocchio's joint order to the arm's (model) order."""
    pm = pin.buildModelFromXML(model.urdf)
    pm.gravity.linear = R_base.T @ G
    idx = np.array([pm.idx_vs[pm.getJointId(n)] for n in model.joint_names])
    return pm, pm.createData(), idx


@pytest.fixture(scope="module")
def tilted_cell():
    """Three Pandas, one with its base yawed, one tilted (roll and pitch: gravity not along its z),
    no box or table, far apart (no contacts possible)."""
    arms = [ArmSpec("a", Model.from_robot("panda"), pos=(0.0, 0.0, 0.0), initial_positions=PANDA_READY),
            ArmSpec("b", Model.from_robot("panda"), pos=(3.0, 0.5, 0.2), rpy=(0.0, 0.0, 2.0),
                    initial_positions=PANDA_READY),
            ArmSpec("c", Model.from_robot("panda"), pos=(-3.0, 1.0, 1.0), rpy=(0.4, -0.7, 0.3),
                    initial_positions=PANDA_READY)]
    return CellWorld(arms, dt=0.001)


def _with_constraints_off(world):
    off = mujoco.mjtDisableBit
    world.m.opt.disableflags |= off.mjDSBL_CONSTRAINT | off.mjDSBL_SPRING | off.mjDSBL_DAMPER


def test_each_arm_matches_pinocchio_rnea_and_crba_of_its_own_urdf(tilted_cell):
    """mj_inverse of the whole cell, every arm in a random state at once, restricted to one arm =
    Pinocchio's RNEA of that arm's URDF with gravity R_base' g (to 1e-9 N m); the cell's mass matrix
    is block diagonal (no inertial coupling between arms: exactly zero) with each block = CRBA."""
    w = tilted_cell
    m = w.m
    saved = m.opt.disableflags
    _with_constraints_off(w)
    try:
        rng = np.random.default_rng(3)
        d = mujoco.MjData(m)
        for trial in range(5):
            qva = {}
            for ns, arm in w.arms.items():
                q = arm.model.random_configuration(rng)
                v, a = rng.uniform(-2, 2, arm.n), rng.uniform(-5, 5, arm.n)
                d.qpos[arm.qadr], d.qvel[arm.dadr], d.qacc[arm.dadr] = q, v, a
                qva[ns] = (q, v, a)
            mujoco.mj_inverse(m, d)
            M = np.zeros((m.nv, m.nv))
            mujoco.mj_fullM(m, d, M)
            for ns, arm in w.arms.items():
                pm, pd, idx = _pin(arm.model, _R(arm))
                q, v, a = qva[ns]
                qp, vp, ap = (np.zeros(pm.nq) for _ in range(3))
                qp[idx], vp[idx], ap[idx] = q, v, a
                tau = pin.rnea(pm, pd, qp, vp, ap)[idx]
                assert np.max(np.abs(d.qfrc_inverse[arm.dadr] - tau)) < 1e-9, (ns, trial)
                Mp = pin.crba(pm, pd, qp)
                Mp = np.triu(Mp) + np.triu(Mp, 1).T
                assert np.max(np.abs(M[np.ix_(arm.dadr, arm.dadr)] - Mp[np.ix_(idx, idx)])) < 1e-10
                others = np.setdiff1d(np.arange(m.nv), arm.dadr)
                assert np.all(M[np.ix_(arm.dadr, others)] == 0.0), ns
    finally:
        m.opt.disableflags = saved


def test_base_pose_places_each_arm(tilted_cell):
    """Every frame of every arm sits where Pinocchio's FK of its own URDF puts it, moved by the
    arm's base pose (R_base, p_base as the test set them), to 1e-12 m."""
    w = tilted_cell
    rng = np.random.default_rng(4)
    w.reset({ns: arm.model.random_configuration(rng) for ns, arm in w.arms.items()})
    for ns, arm in w.arms.items():
        pm, pd, idx = _pin(arm.model, _R(arm))
        qp = np.zeros(pm.nq)
        qp[idx] = arm.q
        pin.framesForwardKinematics(pm, pd, qp)
        R_base, p_base = _R(arm), np.asarray(arm.spec.pos)
        assert np.allclose(arm.base_gravity, R_base.T @ G, atol=1e-12)   # what a user sets as gravity
        for frame in ("panda_link4", "panda_hand_tcp"):
            oMf = pd.oMf[pm.getFrameId(frame)]
            R, p = arm.frame_pose(frame)
            assert np.allclose(p, R_base @ oMf.translation + p_base, atol=1e-12), (ns, frame)
            assert np.allclose(R, R_base @ oMf.rotation, atol=1e-12), (ns, frame)


def test_arms_out_of_contact_move_as_pinocchio_aba(tilted_cell):
    """While arm b is driven hard (effort within its limits), arm a's and c's accelerations at every
    step are Pinocchio's ABA of their own URDF under their own commands (1e-8 rad/s^2): the arms do
    not interact out of contact."""
    w = tilted_cell
    w.reset()
    rng = np.random.default_rng(5)
    pins = {ns: _pin(arm.model, _R(arm)) for ns, arm in w.arms.items()}
    for k in range(300):
        cmds = {}
        for ns, arm in w.arms.items():
            pm, pd, idx = pins[ns]
            qp = np.zeros(pm.nq)
            qp[idx] = arm.q
            g = pin.computeGeneralizedGravity(pm, pd, qp)[idx]
            scale = 0.8 if ns == "b" else 0.05
            cmds[ns] = np.clip(g + scale * arm.effort_max * np.sin(0.01 * k + np.arange(arm.n)),
                               -arm.effort_max, arm.effort_max)
        w.step(commands=cmds)
        assert w.d.ncon == 0
        for ns in ("a", "c"):
            arm = w.arm(ns)
            pm, pd, idx = pins[ns]
            qp, vp, tp = np.zeros(pm.nq), np.zeros(pm.nv), np.zeros(pm.nv)
            qp[idx], vp[idx], tp[idx] = arm.q, arm.v, cmds[ns]
            if np.any(w.d.qfrc_constraint[arm.dadr]):     # an end stop: not free dynamics
                continue
            acc = pin.aba(pm, pd, qp, vp, tp)[idx]
            assert np.max(np.abs(w.d.qacc[arm.dadr] - acc)) < 1e-8, (ns, k)
    assert np.max(np.abs(w.arm("b").q - np.asarray(PANDA_READY))) > 0.3     # b did move


def test_box_rests_on_the_table():
    """The shipped cell's 0.3 m box, dropped 2 cm onto the 0.1 m table top, rests with its centre
    0.15 m above it (within 1 mm) and level; only table-box contacts."""
    w = two_panda_cell()
    w.reset(box_pose=((0.0, 0.0, 0.1 + 0.15 + 0.02), (0.0, 0.0, 0.0, 1.0)))
    for _ in range(1000):
        w.step(commands={ns: _gravity(arm) for ns, arm in w.arms.items()})
    p, qx = w.box_pose()
    assert abs(p[2] - 0.25) < 1e-3 and np.hypot(p[0], p[1]) < 1e-3
    assert abs(abs(qx[3]) - 1.0) < 1e-6
    assert np.linalg.norm(w.box_velocity()) < 1e-3
    owners = {(a, b) for a, b, *_ in w.contacts()}
    assert owners == {("table", "box")}
    total = sum(f for a, b, _, _, f in w.contacts())
    assert abs(total - 1.0 * 9.81) < 0.05          # the table carries the box's weight


def _gravity(arm, pins={}):
    if arm.namespace not in pins:
        pins[arm.namespace] = _pin(arm.model, _R(arm))
    pm, pd, idx = pins[arm.namespace]
    qp = np.zeros(pm.nq)
    qp[idx] = arm.q
    return pin.computeGeneralizedGravity(pm, pd, qp)[idx]


def _reach_into_each_other(collision_radius):
    """Two Pandas 1.1 m apart, no table or box, both driven by joint PD + Pinocchio gravity toward
    a horizontal reach (joint 2 at 1.4 rad, joint 4 at -0.2): each would reach 0.9 m past the other's
    TCP.  Returns (closest x-gap of the TCPs seen, left-right contact normal force max)."""
    arms = [ArmSpec(ns, Model.from_robot("panda"), pos=(x, 0.0, 0.0), rpy=(0, 0, yaw),
                    initial_positions=PANDA_READY, collision_radius=collision_radius)
            for ns, x, yaw in (("left", -0.55, 0.0), ("right", 0.55, math.pi))]
    w = CellWorld(arms, dt=0.001)
    target = np.array([0.0, 1.4, 0.0, -0.2, 0.0, 1.6, 0.785])
    K = np.array([300, 300, 300, 300, 50, 50, 20.0])
    D = 2 * np.sqrt(K) * 1.0
    gap, fmax = np.inf, 0.0
    for _ in range(3000):
        cmds = {ns: np.clip(K * (target - a.q) - D * a.v + _gravity(a), -a.effort_max, a.effort_max)
                for ns, a in w.arms.items()}
        w.step(commands=cmds)
        xl = w.arm("left").frame_pose("panda_hand_tcp")[1][0]
        xr = w.arm("right").frame_pose("panda_hand_tcp")[1][0]
        gap = min(gap, xr - xl)
        fmax = max([fmax] + [f for a, b, _, _, f in w.contacts() if {a, b} == {"left", "right"}])
    return gap, fmax


def test_arms_driven_into_each_other_touch_and_do_not_pass():
    """With contact geometry the two arms meet (left-right contact forces) and their TCPs never pass
    each other; without it (collision_radius 0, the same commands) the TCPs cross by > 0.3 m, so the
    first result is the contacts' doing."""
    gap, fmax = _reach_into_each_other(0.06)
    assert fmax > 1.0
    assert gap > 0.0
    gap0, fmax0 = _reach_into_each_other(0.0)
    assert fmax0 == 0.0 and gap0 < -0.3


def test_bad_arguments_are_refused():
    m = Model.from_robot("panda")
    with pytest.raises(ValueError, match="distinct"):
        CellWorld([ArmSpec("a", m), ArmSpec("a", m)])
    w = CellWorld([ArmSpec("a", m)], table=TableSpec(), box=BoxSpec())
    with pytest.raises(ValueError, match="finite"):
        w.set_command("a", [np.nan] * 7)
    with pytest.raises(ValueError, match="no arm"):
        w.arm("b")
