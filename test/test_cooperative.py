"""The cooperative carry (control/cooperative.py) against independent oracles:

- the hands' world kinematics the law uses against MuJoCo's frame poses and finite differences;
- the grasp matrix against finite differences of a rigid displacement of the object (and its null space);
- the law's torques through the pair's closed chain (the reference layer's KKT system, not the Pinocchio
  calls the law makes): in a static hold the chain does not move and the loop multiplier carries the set
  squeeze and half the box's weight; moving, the object's acceleration is the one the gains and the
  trajectory command (computed here from the parameters and the chain's own object frame);
- MuJoCo (the shipped two-Panda cell of sim/cell_world.py: a free 1 kg box held between the hands' link
  capsules by friction alone; sim/cell_carry.py sets up the grasp): the squeeze read from the contact
  forces in a static hold, the carry (lifted 5 cm, 0.2 m across the arms' line and back at 0.1 m/s, set
  down) followed without slipping;
- a partner lost (its state stale or NaN): the law holds its own hand (gravity alone once the release
  ramp is over, Pinocchio's g(q) the oracle), and in MuJoCo a partner killed mid-carry (its last command
  held 0.1 s then braked, as sim_node's command timeout does) leaves both arms at rest.
No timed assertions: the clocks are the simulation's.
"""
import math

import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.control.cooperative import (CarryGains, CarryTrajectory, CooperativeCarry, cell_chain,
                                                grasp_matrix, squeeze_direction)
from robot_dynamics.sim.cell_carry import CellCarry
from robot_dynamics.sim.cell_world import two_panda_cell

SQUEEZE = 30.0
G = 9.81


class World:
    """The cell, the carry set-up and a law: the names the tests use."""

    def __init__(self, squeeze=SQUEEZE, **kw):
        self.cell = two_panda_cell(integrator="implicitfast")
        self.carry = CellCarry(self.cell)
        self.cell.reset(self.carry.q_grasp)
        self.arms, self.obj, self.traj = self.carry.arms, self.carry.obj, self.carry.trajectory
        self.law = self.carry.law(squeeze=squeeze, **kw)
        self.law.reset(0.0, self.carry.states())
        self.dt = self.cell.dt

    @property
    def t(self):
        return self.cell.t

    def arm_state(self, i):
        a = self.cell.arm(self.carry.ns[i])
        return a.q, a.v

    def hand_pose(self, i):
        return self.carry.hand_pose(i)

    def box_pose(self):
        return self.carry.box_pose()

    def step(self, taus):
        self.cell.step(commands=self.carry.commands(taus))

    def braking_torque(self, i, T):
        return self.cell.arm(self.carry.ns[i]).braking_torque(T)


def make(squeeze=SQUEEZE, **kw):
    w = World(squeeze, **kw)
    return w, w.law, w.traj


def states(w, t=None):
    t = w.t if t is None else t
    return [(*w.arm_state(i), t) for i in range(2)]


def test_hand_kinematics_match_mujoco_and_finite_differences():
    """World pose of each grasp frame (through the arm's base pose) = MuJoCo's; J v = the finite
    difference of that pose along v (central, h = 1e-6 s)."""
    w, law, _ = make()
    rng = np.random.default_rng(3)
    for i, arm in enumerate(w.arms):
        q, _ = w.arm_state(i)
        k = arm.kinematics(q, np.zeros(arm.n))
        R_mj, p_mj = w.hand_pose(i)
        assert np.allclose(k.p, p_mj, atol=1e-9) and np.allclose(k.R, R_mj, atol=1e-9)
        v = rng.normal(size=arm.n)
        h = 1e-6
        kp, km = arm.kinematics(q + h * v, v), arm.kinematics(q - h * v, v)
        v_fd = (kp.p - km.p) / (2 * h)
        w_fd = pin.log3(kp.R @ km.R.T) / (2 * h)
        k = arm.kinematics(q, v)
        assert np.allclose(k.J @ v, np.concatenate([v_fd, w_fd]), atol=1e-6)
        assert np.allclose(np.concatenate([k.v, k.w]), k.J @ v, atol=1e-12)


def test_grasp_matrix_against_rigid_finite_differences():
    """G^T maps an object twist to the grasp points' twists: moving the object (and the points rigidly
    with it) by h (v, w) moves point i by h G_i^T (v, w) to first order; the squeeze is in G's null
    space; a wrench split G^+ W gives back W."""
    rng = np.random.default_rng(7)
    p_o = rng.normal(size=3)
    pts = [p_o + rng.normal(size=3) * 0.2 for _ in range(2)]
    Gm = grasp_matrix(p_o, pts)
    for _ in range(5):
        tw = rng.normal(size=6)
        h = 1e-7
        Rh = pin.exp3(h * tw[3:])
        for i, p in enumerate(pts):
            moved = p_o + h * tw[:3] + Rh @ (p - p_o)
            fd = np.concatenate([(moved - p) / h, tw[3:]])     # the points turn with the object
            assert np.allclose(Gm[:, 6 * i:6 * i + 6].T @ tw, fd, atol=1e-6)
    n = squeeze_direction(*pts)
    assert np.allclose(Gm @ np.concatenate([n, np.zeros(3), -n, np.zeros(3)]), 0.0, atol=1e-12)
    W = rng.normal(size=6)
    assert np.allclose(Gm @ (Gm.T @ np.linalg.solve(Gm @ Gm.T, W)), W)


def _chain(w):
    chain = cell_chain(w.arms, w.obj)
    idx = [[chain.model.joint_names.index(f"a{i + 1}_{j}") for j in w.arms[i].model.joint_names]
           for i in range(2)]
    return chain, idx


def _stack(idx, parts):
    out = np.zeros(14)
    for i in range(2):
        out[idx[i]] = parts[i]
    return out


def test_static_hold_closed_chain_multiplier_is_the_set_squeeze():
    """The law's torques at the grasp, at rest, into the closed chain (arm 1 carrying the box, arm 2's hand
    welded to it): the chain stays at rest and the loop's multiplier (the box's wrench on hand 2, at the
    box's centre) is the squeeze along the hands' line, half the box's weight, and its moment."""
    w, law, _ = make()
    chain, idx = _chain(w)
    q = _stack(idx, [w.arm_state(i)[0] for i in range(2)])
    assert chain.position_error(q) < 1e-9
    tau = law.compute(0.0, states(w, 0.0))
    a, lam = chain.forward_dynamics(q, np.zeros(14), _stack(idx, tau))
    lam = lam["grasp2"]
    p1, p2 = w.hand_pose(0)[1], w.hand_pose(1)[1]
    n = squeeze_direction(p1, p2)
    R_o, p_o = w.box_pose()
    assert np.max(np.abs(a)) < 1e-5          # rad/s^2 (the grasp is closed to the IK's 1e-9 m)
    assert lam[:3] @ n == pytest.approx(SQUEEZE, abs=1e-7)             # the box pushes hand 2 out along n
    assert lam[2] == pytest.approx(-0.5 * w.obj.mass * G, abs=1e-7)    # hand 2 carries half the weight
    f_on_box = -lam[:3]
    assert np.allclose(lam[3:], -np.cross(p2 - p_o, f_on_box), atol=1e-7)   # a pure force at hand 2


def test_moving_object_acceleration_matches_closed_chain():
    """Moving (joint velocities on the chain's constraint manifold, pose errors, mid-trajectory): the
    chain's KKT solution under the law's torques accelerates the box as the gains and the trajectory
    command, a_c = a_d + kp (p_d - p) + kd (v_d - v), alpha_c = kr log3(R_d R^T) - dr w (p, R, v, w:
    the chain's object frame, Pinocchio), and the squeeze in the multiplier is the set value."""
    w, law, traj = make()
    chain, idx = _chain(w)
    q0 = _stack(idx, [w.arm_state(i)[0] for i in range(2)])
    rng = np.random.default_rng(11)
    q = chain.solve_configuration(q0 + rng.normal(size=14) * 0.01)    # off the grasp pose, loop closed
    v = chain.project_velocity(q, rng.normal(size=14) * 0.1)
    t = 4.3                                                            # mid-travel, at the peak speed
    tau = law.compute(t, [(q[idx[i]], v[idx[i]], t) for i in range(2)])
    a, lam = chain.forward_dynamics(q, v, _stack(idx, tau))
    pm = chain.model.pin_model
    d = pm.createData()
    fid = chain.model.frame_ids["object"]
    LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
    pin.forwardKinematics(pm, d, q, v, a)
    X = pin.updateFramePlacement(pm, d, fid)
    tw = pin.getFrameVelocity(pm, d, fid, LWA).vector
    acc = pin.getFrameClassicalAcceleration(pm, d, fid, LWA).vector
    g = CarryGains()
    p_d, v_d, a_d = traj.sample(t)
    assert np.linalg.norm(v_d) > 0.05                                   # moving along the trajectory
    a_c = a_d + g.kp * (p_d - X.translation) + g.kd * (v_d - tw[:3])
    al_c = g.kr * pin.log3(traj.R @ X.rotation.T) - g.dr * tw[3:]
    assert np.allclose(acc[:3], a_c, atol=1e-6 * max(1.0, np.abs(a_c).max()))
    assert np.allclose(acc[3:], al_c, atol=1e-6 * max(1.0, np.abs(al_c).max()))
    # squeeze: (f_1 - f_2) . n / 2 with f_2 = -lam, f_1 = m (a - g) - f_2 (the box's Newton equation)
    n = squeeze_direction(*(pin.updateFramePlacement(pm, d, chain.model.frame_ids[f"a{i}_panda_hand_tcp"])
                            .translation for i in (1, 2)))
    f2 = -lam["grasp2"][:3]
    f1 = w.obj.mass * (acc[:3] - np.array([0, 0, -G])) - f2
    assert 0.5 * (f1 - f2) @ n == pytest.approx(SQUEEZE, rel=1e-6)


def _pad_squeeze(w):
    f1, f2 = w.carry.hand_wrenches()
    n = squeeze_direction(w.hand_pose(0)[1], w.hand_pose(1)[1])
    return 0.5 * (f1[:3] - f2[:3]) @ n, f1, f2


def test_static_hold_mujoco_contact_forces_squeeze():
    """MuJoCo's contact forces while the box is held at rest off the table (the dwell after the 5 cm lift,
    t = 2.2-2.4 s): the hands squeeze it with the set force (within 1 %), carry its weight between them
    (within 1 %; no table contact), and it stays at the lifted pose (< 0.2 mm)."""
    w, law, traj = make()
    out = []
    while w.t < 2.4:
        w.step(law.compute(w.t, states(w)))
        if w.t > 2.2:
            out.append((*_pad_squeeze(w), w.box_pose()[1]))
    p_up = traj.sample(2.3)[0]
    assert p_up[2] == pytest.approx(w.carry.p_o[2] + 0.05)
    for sq, f1, f2, p in out:
        assert sq == pytest.approx(SQUEEZE, rel=0.01)
        assert (f1 + f2)[2] == pytest.approx(w.obj.mass * G, rel=0.01)
        assert np.linalg.norm(p - p_up) < 2e-4


def test_carry_follows_trajectory_without_slip():
    """The carry (lift 5 cm, 0.2 m along y and back at up to 0.1 m/s, set down), MuJoCo at 1 kHz: the box
    within 5 mm / 20 mrad of the trajectory throughout, the squeeze from the contact forces within 10 %
    of the set value after the grip's first 0.1 s, and the box's pose in hand 1's frame changed by < 1 mm / 10 mrad (no slip)."""
    w, law, traj = make()
    R_h, p_h = w.hand_pose(0)
    R_b, p_b = w.box_pose()
    rel0 = (R_h.T @ R_b, R_h.T @ (p_b - p_h))
    e_p, e_r, sq, peak_x, speeds = [], [], [], 0.0, []
    prev = p_b
    while w.t < traj.end + 0.5:
        w.step(law.compute(w.t, states(w)))
        R_b, p_b = w.box_pose()
        p_d, _, _ = traj.sample(w.t)
        e_p.append(np.linalg.norm(p_b - p_d))
        e_r.append(np.linalg.norm(pin.log3(traj.R @ R_b.T)))
        if w.t > 0.1:                                   # the contacts form from zero penetration
            sq.append(_pad_squeeze(w)[0])              # (first 12 ms: up to 45 N)
        peak_x = max(peak_x, p_b[1])
        speeds.append(np.linalg.norm(p_b - prev) / w.dt)
        prev = p_b
    assert peak_x > 0.195 and max(speeds) < 0.105          # the trajectory was travelled, at <= 0.1 m/s
    assert max(e_p) < 5e-3 and max(e_r) < 20e-3
    assert max(abs(s - SQUEEZE) for s in sq) < 0.1 * SQUEEZE
    R_h, p_h = w.hand_pose(0)
    assert np.linalg.norm(R_h.T @ (p_b - p_h) - rel0[1]) < 1e-3
    assert np.linalg.norm(pin.log3(rel0[0].T @ (R_h.T @ R_b))) < 10e-3


def test_partner_stale_law_holds_own_hand():
    """Arm 2's state stops (stamp frozen) or turns NaN: after stale_after the law no longer carries; arm
    1's command fades its feed-forward out over release_time and then, at the held pose at rest, is
    Pinocchio's g(q) alone; both stay finite, the hold latches."""
    for bad in ("stale", "nan"):
        w, law, _ = make(stale_after=0.02, release_time=0.2)
        q1, v1 = w.arm_state(0)
        q2, v2 = w.arm_state(1)
        t = 0.0
        tau = law.compute(t, [(q1, v1, t), (q2, v2, t)])
        assert not any(law.lost)
        for t in np.arange(0.001, 0.5, 0.001):
            s2 = (q2, v2, 0.0) if bad == "stale" else (np.full(7, np.nan), v2, t)
            tau = law.compute(t, [(q1, v1, t), s2])
            assert all(np.all(np.isfinite(x)) for x in tau)
            if bad == "stale" and t <= 0.02 - 1e-9:
                assert not law.lost[1]
        assert law.lost[1] and not law.lost[0]
        g1 = pin.computeGeneralizedGravity(w.arms[0].model.pin_model, w.arms[0].model.pin_model.createData(),
                                           q1)
        assert np.allclose(tau[0], g1, atol=1e-6)
        tau = law.compute(0.6, [(q1, v1, 0.6), (q2, v2, 0.6)])         # partner back: still holding
        assert law.lost[1] and np.allclose(tau[0], g1, atol=1e-6)


def test_bad_state_shape_is_a_clear_error():
    w, law, _ = make()
    q1, v1 = w.arm_state(0)
    with pytest.raises(ValueError, match="arm 1"):
        law.compute(0.0, [(q1, v1, 0.0), (q1[:6], v1, 0.0)])


def test_partner_killed_mid_carry_both_arms_rest():
    """Mid-carry (0.1 m/s) arm 2's controller dies: its last command stays 0.1 s, then its joints are
    braked (sim_node's command timeout: tau = bias - M v / 0.05 s); arm 1's law sees arm 2's state go
    stale and holds its own hand.  2 s later both arms are at rest (< 0.02 rad/s), arm 1's hand has
    moved < 2 cm from where the loss was noticed, and arm 1's torques stayed within the effort limits."""
    w, law, traj = make()
    t_kill = 4.0
    while w.t < t_kill:
        w.step(law.compute(w.t, states(w)))
    q2_last, v2_last = w.arm_state(1)
    tau2_last = law.compute(w.t, states(w))[1]
    p_hold = None
    lim = w.arms[0].model.effort_limits
    while w.t < t_kill + 2.0:
        t = w.t
        tau1, _ = law.compute(t, [(*w.arm_state(0), t), (q2_last, v2_last, t_kill)])
        if law.lost[1] and p_hold is None:
            p_hold = w.hand_pose(0)[1]
        assert np.all(np.abs(tau1) <= lim + 1e-9)
        tau2 = tau2_last if t < t_kill + 0.1 else w.braking_torque(1, 0.05)
        w.step([tau1, tau2])
    assert p_hold is not None
    assert np.linalg.norm(w.hand_pose(0)[1] - p_hold) < 0.02
    assert max(np.max(np.abs(w.arm_state(i)[1])) for i in range(2)) < 0.02


def test_approach_from_ready_pose_then_lift():
    """From the cell's start (both arms at the Panda's ready pose): HandApproach takes each grasp frame
    along its HandPath (down to the pre-grasp pose 3 cm out, then in to the box face) without touching
    the box (MuJoCo: no arm-box contact, box moved < 0.1 mm), ends within 1 mm of the grasp; the carry
    law then squeezes and lifts the box 5 cm (MuJoCo's box within 5 mm of the trajectory, off the
    table)."""
    from robot_dynamics.control.cooperative import HandApproach, HandPath
    cell = two_panda_cell(integrator="implicitfast")
    carry = CellCarry(cell)
    cell.reset()
    st = carry.states(cell, 0.0)
    paths = []
    for i, arm in enumerate(carry.arms):
        k = arm.kinematics(*st[i][:2], dynamics=False)
        R_g, p_pre = carry.pre_grasp[i]
        paths.append(HandPath([(k.R, k.p), (R_g, p_pre), (R_g, p_pre + 0.03 * R_g[:, 1])], t0=0.2))
    app = HandApproach(carry.arms, paths, [s[0] for s in st])
    p0 = carry.box_pose()[1]
    while cell.t < app.end + 0.2:
        cell.step(commands=carry.commands(app.compute(cell.t, carry.states(cell, cell.t))))
        if cell.t < app.end - 0.05:
            assert not [c for c in cell.contacts() if "box" in c[:2] and ("left" in c[:2] or "right" in c[:2])]
    assert np.linalg.norm(carry.box_pose()[1] - p0) < 1e-4
    for i, ns in enumerate(carry.ns):
        k = carry.arms[i].kinematics(carry.q_grasp[ns], np.zeros(7), dynamics=False)
        assert np.linalg.norm(carry.hand_pose(i)[1] - k.p) < 1e-3
    law = carry.law(squeeze=SQUEEZE)
    t0 = cell.t
    law.reset(t0, carry.states(cell))
    while cell.t < t0 + 2.3:                            # lifted, in the dwell
        cell.step(commands=carry.commands(law.compute(cell.t, carry.states(cell, cell.t))))
        assert np.linalg.norm(carry.box_pose()[1] - carry.trajectory.sample(cell.t - t0)[0]) < 5e-3
    assert carry.box_pose()[1][2] > p0[2] + 0.045
    assert not [c for c in cell.contacts() if "table" in c[:2] and "box" in c[:2]]


def test_squeeze_is_force_controlled_when_the_grasp_width_is_off():
    """The law's grasp geometry 5 mm narrower per side than the hands' real contact (contact offsets
    0.055 m given, 0.06 m real): the hands are 1 cm further apart than the law expects, and the squeeze
    MuJoCo measures is still the set value (within 2 %) because no stiffness acts along the hands' line
    (a stiffness of k_rel there would add k_rel x 5 mm = 10 N per hand)."""
    from robot_dynamics.control.cooperative import CooperativeCarry, plan_grasp
    w, _, traj = make()
    c = w.carry
    cas = [w.cell.arm(ns) for ns in c.ns]
    arms, _, _ = plan_grasp([a.model for a in cas], [(a.R_base, a.p_base) for a in cas], (c.R_o, c.p_o),
                            w.cell.box.size, [0.055, 0.055])
    law = CooperativeCarry(arms, w.obj, traj, squeeze=SQUEEZE)
    law.reset(0.0, c.states())
    out = []
    while w.t < 2.4:
        w.step(law.compute(w.t, states(w)))
        if w.t > 2.2:                                   # lifted, at rest
            out.append(_pad_squeeze(w)[0])
    assert all(s == pytest.approx(SQUEEZE, rel=0.02) for s in out)
