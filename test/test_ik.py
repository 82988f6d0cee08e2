"""Inverse kinematic model (dynamics/ik.py) against independent oracles: Pinocchio's frame placement
and computeFrameJacobian on a Data of the test's own, central finite differences of that forward
kinematics, numpy's pinv / lstsq / solve and scipy's null_space, the damped least-squares formula
J^T (J J^T + lambda^2 I)^-1 X' (not the SVD form the code uses), and brute-force sampling.

Robots: the Panda (7 joints, redundant for a 6D task), the UR5 (6 joints: one solution when regular),
the Panda with joints 6 and 7 locked (5 joints for a 6D task: no exact solution).

Tolerances: Jacobian vs computeFrameJacobian 1e-12 (the same algorithm on another Data); vs central
differences of FK with h = 1e-6, 1e-8 (truncation h^2 ~ 1e-12, rounding 1e-16 / h ~ 1e-10);
J q' = X' and the pseudo-inverse / DLS identities 1e-10 (|X'| ~ 1, condition numbers < 100);
nullspace motion J N z 1e-12 relative to |z|; limits exact for velocities (the bound itself is the
value), 1e-12 rad for q + q' dt (one rounding of the product); position IK 1e-8 m and 1e-8 rad
(the solver's own tolerance is 1e-9), checked by Pinocchio's FK, never by the solver's report.
"""
import numpy as np
import pinocchio as pin
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import null_space

from robot_dynamics.dynamics import Model, ReferenceBackend
from robot_dynamics.dynamics.ik import DifferentialIK, PositionIK

TCP = "panda_hand_tcp"
TOOL = "tool0"
LWA = pin.LOCAL_WORLD_ALIGNED
Q_UPRIGHT = np.zeros(7)        # Panda straight up: joints 1, 3, 5 on one line, 2, 4, 6 parallel: rank 5
Q_UR5_STRAIGHT = np.array([0.0, -0.5, 0.0, -1.0, 1.2, 0.3])      # UR5 elbow straight: rank 5


@pytest.fixture(scope="module")
def ur5():
    return Model.from_robot("ur5")


def pin_fk(model, q, frame):
    pm = model.pin_model
    d = pm.createData()
    pin.forwardKinematics(pm, d, q)
    M = pin.updateFramePlacement(pm, d, pm.getFrameId(frame))
    return M.rotation.copy(), M.translation.copy()


def pin_J(model, q, frame, rf=LWA):
    pm = model.pin_model
    return pin.computeFrameJacobian(pm, pm.createData(), q, pm.getFrameId(frame), rf)


def fd_jacobian(model, q, frame, h=1e-6):
    """LOCAL_WORLD_ALIGNED Jacobian by central differences of FK: [dp/dq; log3(R+ R-^T) / 2h]."""
    J = np.zeros((6, q.size))
    for i in range(q.size):
        dq = np.zeros(q.size)
        dq[i] = h
        Rp, pp = pin_fk(model, q + dq, frame)
        Rm, pm_ = pin_fk(model, q - dq, frame)
        J[:3, i] = (pp - pm_) / (2 * h)
        J[3:, i] = pin.log3(Rp @ Rm.T) / (2 * h)
    return J


def regular_configs(model, frame, n, seed, s_low=0.1):
    """Random configurations whose Jacobian's smallest singular value is >= s_low (numpy's SVD)."""
    rng, out = np.random.default_rng(seed), []
    while len(out) < n:
        q = model.random_configuration(rng, margin=0.05)
        if np.linalg.svd(pin_J(model, q, frame), compute_uv=False)[-1] >= s_low:
            out.append(q)
    return out


def rot_err(R, R_d):
    return float(np.abs(R.T @ R_d - np.eye(3)).max())


# ---------------------------------------------------------------------------------------------
# the Jacobian the IK uses
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("robot", ["panda", "ur5"])
def test_jacobian_matches_pinocchio_and_finite_differences(model, ur5, robot):
    m, frame = (model, TCP) if robot == "panda" else (ur5, TOOL)
    ik, ik_local, ik_pos = (DifferentialIK(m, frame), DifferentialIK(m, frame, reference="local"),
                            DifferentialIK(m, frame, task="position"))
    rng = np.random.default_rng(3)
    for _ in range(5):
        q = m.random_configuration(rng)
        J = ik.jacobian(q)
        assert J.shape == (6, m.nv)
        assert np.abs(J - pin_J(m, q, frame)).max() < 1e-12
        assert np.abs(ik_local.jacobian(q) - pin_J(m, q, frame, pin.LOCAL)).max() < 1e-12
        assert np.abs(ik_pos.jacobian(q) - pin_J(m, q, frame)[:3]).max() < 1e-12
        assert np.abs(J - fd_jacobian(m, q, frame)).max() < 1e-8


# ---------------------------------------------------------------------------------------------
# differential IK: the three cases
# ---------------------------------------------------------------------------------------------
def test_redundant_panda_reproduces_twist_with_the_minimum_norm_solution(model):
    ik = DifferentialIK(model, TCP)
    rng = np.random.default_rng(4)
    for q in regular_configs(model, TCP, 8, 4):
        x = rng.normal(size=6)
        r = ik.step(q, x)
        J = pin_J(model, q, TCP)
        assert r.case == "redundant" and r.damping == 0.0 and r.rank == 6
        assert np.abs(J @ r.qd - x).max() < 1e-10                       # J q' = X'
        assert r.residual < 1e-10
        assert np.abs(r.qd - np.linalg.pinv(J) @ x).max() < 1e-10      # = J^+ X' (damping off)
        Nb = null_space(J)                                              # 7 x 1
        assert Nb.shape == (7, 1)
        assert abs(float(Nb[:, 0] @ r.qd)) < 1e-10 * np.linalg.norm(r.qd)   # q' orthogonal to null(J)
        s = np.linalg.svd(J, compute_uv=False)
        assert r.s_min == pytest.approx(s[-1], rel=1e-10)
        assert r.manipulability == pytest.approx(np.sqrt(np.linalg.det(J @ J.T)), rel=1e-8)


def test_regular_ur5_gives_the_one_solution(ur5):
    ik = DifferentialIK(ur5, TOOL)
    rng = np.random.default_rng(5)
    for q in regular_configs(ur5, TOOL, 8, 5):
        x = rng.normal(size=6)
        r = ik.step(q, x)
        J = pin_J(ur5, q, TOOL)
        assert r.case == "regular" and r.damping == 0.0
        assert np.abs(r.qd - np.linalg.solve(J, x)).max() < 1e-10 * max(1.0, np.abs(r.qd).max())
        assert np.abs(J @ r.qd - x).max() < 1e-10
        assert r.manipulability == pytest.approx(abs(np.linalg.det(J)), rel=1e-8)


def dls_oracle(J, x, s_min, eps=0.05, lambda_max=0.1):
    """q' = J^T (J J^T + lambda^2 I)^-1 X', lambda^2 from the damping rule, by solve."""
    lam2 = (1 - (s_min / eps) ** 2) * lambda_max ** 2 if s_min < eps else 0.0
    return J.T @ np.linalg.solve(J @ J.T + lam2 * np.eye(J.shape[0]), x), lam2


@pytest.mark.parametrize("where", ["upright (s_min = 0)", "near singular (0 < s_min < eps)"])
def test_damping_on_at_singularities_panda(model, where):
    q = Q_UPRIGHT if where.startswith("upright") else np.array([0.0, 0.0, 0.0, -0.5, 0.0, 0.05, 0.0])
    J = pin_J(model, q, TCP)
    s = np.linalg.svd(J, compute_uv=False)
    assert (s[-1] < 1e-12) == where.startswith("upright") and s[-1] < 0.05
    ik = DifferentialIK(model, TCP)
    rng = np.random.default_rng(6)
    for _ in range(5):
        x = rng.normal(size=6)
        r = ik.step(q, x)
        qd_dls, lam2 = dls_oracle(J, x, s[-1])
        assert r.case == "singular"
        assert r.damping == pytest.approx(np.sqrt(lam2), rel=1e-9) and r.damping > 0.07
        assert np.all(np.isfinite(r.qd))
        assert np.abs(r.qd - qd_dls).max() < 1e-10
        assert r.residual == pytest.approx(np.linalg.norm(J @ r.qd - x), rel=1e-9, abs=1e-12)
    # the twist the upright arm cannot make (rotation about world x): no exact solution, and it says so
    if where.startswith("upright"):
        r = ik.step(q, np.array([0, 0, 0, 1.0, 0, 0]))
        assert r.rank == 5 and r.residual > 0.99 and np.abs(r.qd).max() < 1e-12


def test_damping_on_at_the_ur5_elbow_singularity(ur5):
    J = pin_J(ur5, Q_UR5_STRAIGHT, TOOL)
    s = np.linalg.svd(J, compute_uv=False)
    assert s[-1] < 1e-12
    x = np.random.default_rng(7).normal(size=6)
    r = DifferentialIK(ur5, TOOL).step(Q_UR5_STRAIGHT, x)
    assert r.case == "singular" and r.damping == pytest.approx(0.1, rel=1e-9) and r.manipulability < 1e-12
    assert np.abs(r.qd - dls_oracle(J, x, s[-1])[0]).max() < 1e-10


def test_fewer_joints_than_task_rows_is_least_squares():
    """The Panda with joints 6 and 7 locked (5 joints) and a 6D task: least squares, no exact solution."""
    m = Model.from_robot("panda", active_joints=[f"panda_joint{i}" for i in range(1, 6)])
    ik = DifferentialIK(m, TCP)
    rng = np.random.default_rng(8)
    checked = 0
    for _ in range(10):
        q, x = m.random_configuration(rng), rng.normal(size=6)
        J = pin_J(m, q, TCP)
        assert J.shape == (6, 5)
        r = ik.step(q, x)
        assert r.case == "singular" and r.manipulability == 0.0 and r.rank == 5
        assert r.residual == pytest.approx(np.linalg.norm(J @ r.qd - x), rel=1e-9)
        if r.damping == 0.0:
            qd_ls = np.linalg.lstsq(J, x, rcond=None)[0]
            assert np.abs(r.qd - qd_ls).max() < 1e-10
            assert r.residual == pytest.approx(np.linalg.norm(J @ qd_ls - x), rel=1e-9) and r.residual > 1e-3
            checked += 1
    assert checked >= 5


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(-3.0, 3.0), min_size=7, max_size=7), st.lists(st.floats(-5, 5), min_size=6, max_size=6),
       st.sampled_from([None, [0, 1, 2], [1, 3, 5], [0, 2, 4, 6]]))
def test_finite_and_bounded_everywhere(model, q, x, zero_joints):
    """Anywhere, singular configurations included (joints set to 0 line the axes up): finite, and
    |q'| <= |X'| / eps (with lambda_max >= eps, s / (s^2 + lambda^2) <= 1 / eps)."""
    q, x = np.array(q), np.array(x)
    if zero_joints:
        q[zero_joints] = 0.0
    r = DifferentialIK(model, TCP).step(q, x)
    assert np.all(np.isfinite(r.qd)) and np.isfinite(r.s_min) and np.isfinite(r.manipulability)
    assert np.linalg.norm(r.qd) <= np.linalg.norm(x) / 0.05 * (1 + 1e-9) + 1e-12


# ---------------------------------------------------------------------------------------------
# redundancy: the nullspace
# ---------------------------------------------------------------------------------------------
def test_nullspace_motion_leaves_the_frame_still(model):
    ik = DifferentialIK(model, TCP)
    rng = np.random.default_rng(9)
    for q in regular_configs(model, TCP, 5, 9) + [Q_UPRIGHT]:
        z = rng.normal(size=7)
        r = ik.step(q, np.zeros(6), qd0=z)
        J = pin_J(model, q, TCP)
        assert np.linalg.norm(J @ r.qd) < 1e-12 * np.linalg.norm(z)
        Nb = null_space(J)
        assert np.abs(r.qd - Nb @ (Nb.T @ z)).max() < 1e-10            # the projection of z onto null(J)
        assert np.abs(ik.nullspace(q) - Nb @ Nb.T).max() < 1e-10
        # to first order in FK: moving h along q' moves the frame by O(h^2), not O(h)
        h = 1e-4 / np.linalg.norm(r.qd)
        R0, p0 = pin_fk(model, q, TCP)
        R1, p1 = pin_fk(model, q + h * r.qd, TCP)
        assert np.linalg.norm(p1 - p0) + np.linalg.norm(pin.log3(R1 @ R0.T)) < 1e-6


def test_posture_and_joint_limit_objectives_act_in_the_nullspace(model):
    q_rest = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.6, 0.8])
    kp, kl = 2.0, 5.0
    lo, hi = model.lower_limits, model.upper_limits
    rng = np.random.default_rng(10)
    for q in regular_configs(model, TCP, 5, 10):
        J = pin_J(model, q, TCP)
        Nb = null_space(J)
        x = rng.normal(size=6)
        r = DifferentialIK(model, TCP, q_rest=q_rest, posture_gain=kp).step(q, x)
        assert np.abs(r.qd - (np.linalg.pinv(J) @ x + Nb @ Nb.T @ (kp * (q_rest - q)))).max() < 1e-10
        assert np.abs(J @ r.qd - x).max() < 1e-10
        # joint-limit distance: z = -k_l dH/dq, H = 1/(2n) sum ((q - mid) / range)^2
        grad = (q - 0.5 * (lo + hi)) / (7 * (hi - lo) ** 2)
        r = DifferentialIK(model, TCP, limit_gain=kl).step(q, x)
        assert np.abs(r.qd - (np.linalg.pinv(J) @ x - Nb @ Nb.T @ (kl * grad))).max() < 1e-10


# ---------------------------------------------------------------------------------------------
# joint limits
# ---------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(1e-3, 0.2), st.floats(0.01, 10.0), st.floats(0.0, 5.0),
       st.sampled_from(["inside", "at limits", "outside"]), st.sampled_from(["pose", "position"]))
def test_limits_are_never_exceeded(model, seed, dt, speed, kp, start, task):
    """Random targets (twists up to 10 m/s or rad/s), steps, posture gains and starts: the result
    respects the velocity limits exactly and q + q' dt stays within the position limits (a joint
    outside its limits does not go further out)."""
    rng = np.random.default_rng(seed)
    lo, hi, vmax = model.lower_limits, model.upper_limits, model.velocity_limits
    q = model.random_configuration(rng)
    k = rng.integers(0, 7, 3)
    if start == "at limits":
        q[k] = np.where(rng.random(3) < 0.5, lo[k], hi[k])
    elif start == "outside":
        q[k] = np.where(rng.random(3) < 0.5, lo[k] - 0.01, hi[k] + 0.01)
    ik = DifferentialIK(model, TCP, task=task, posture_gain=kp)
    x = rng.normal(size=ik.m)
    x *= speed / np.linalg.norm(x)
    r = ik.step(q, x, dt=dt)
    qd = r.qd
    assert np.all(np.isfinite(qd))
    assert np.all(np.abs(qd) <= vmax)
    q1 = q + qd * dt
    assert np.all(q1 <= np.maximum(hi, q) + 1e-12) and np.all(q1 >= np.minimum(lo, q) - 1e-12)
    if not r.saturated:                        # no bound active: the same as without limits
        assert np.abs(qd - ik.step(q, x).qd).max() < 1e-12


def test_saturated_joint_is_compensated_by_the_others(model):
    """Saturation in the nullspace: joint 1 held at its velocity limit, the other six (a regular 6 x 6)
    still make the whole twist."""
    ik = DifferentialIK(model, TCP)
    vmax = model.velocity_limits
    found = 0
    for q in regular_configs(model, TCP, 30, 11, s_low=0.15):
        J = pin_J(model, q, TCP)
        if np.linalg.svd(np.delete(J, 0, axis=1), compute_uv=False)[-1] < 0.1:
            continue
        x = J[:, 0] * 1.3 * vmax[0] + J[:, 1:] @ np.full(6, 0.05)     # joint 1 alone: 1.3 x its limit
        free = ik.step(q, x)
        if abs(free.qd[0]) <= vmax[0]:
            continue
        r = ik.step(q, x, dt=1e-3)
        assert r.saturated and r.saturated[0] == 0
        assert r.qd[0] == np.sign(free.qd[0]) * vmax[0]
        assert np.all(np.abs(r.qd) <= model.velocity_limits)
        if len(r.saturated) == 1:
            assert np.abs(J @ r.qd - x).max() < 1e-10, r
            found += 1
    assert found >= 3


def test_position_limit_over_dt(model):
    """A joint 1 mm from its upper limit, pushed towards it: it stops exactly at the limit."""
    q = regular_configs(model, TCP, 1, 12)[0]
    hi = model.upper_limits
    q[0] = hi[0] - 1e-3
    J = pin_J(model, q, TCP)
    x = J[:, 0] * 1.0                          # 1 rad/s on joint 1 alone: 10 ms to the limit
    dt = 0.05
    r = DifferentialIK(model, TCP).step(q, x, dt=dt)
    assert 0 in r.saturated
    assert r.qd[0] == pytest.approx(1e-3 / dt, rel=1e-9)
    assert q[0] + r.qd[0] * dt <= hi[0] + 1e-12


# ---------------------------------------------------------------------------------------------
# position IK
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("robot", ["panda", "ur5"])
def test_random_reachable_targets_converge(model, ur5, robot):
    m, frame = (model, TCP) if robot == "panda" else (ur5, TOOL)
    ik = PositionIK(m, frame)
    rng = np.random.default_rng(13)
    for _ in range(8):
        q_t = m.random_configuration(rng)
        R_d, p_d = pin_fk(m, q_t, frame)
        q0 = m.random_configuration(rng)
        q0_copy = q0.copy()
        res = ik.solve(q0, p_d, R_d)
        assert res.status == "converged", res.message
        R, p = pin_fk(m, res.q, frame)
        assert np.linalg.norm(p - p_d) < 1e-8 and rot_err(R, R_d) < 1e-8
        assert np.all(res.q >= m.lower_limits) and np.all(res.q <= m.upper_limits)
        assert np.array_equal(q0, q0_copy)          # the seed is not modified


def test_position_task_from_near_start_single_run(model):
    ik = PositionIK(model, TCP, task="position", restarts=0)
    rng = np.random.default_rng(14)
    for _ in range(8):
        q_t = model.random_configuration(rng, margin=0.2)
        p_d = pin_fk(model, q_t, TCP)[1]
        res = ik.solve(q_t + rng.uniform(-0.3, 0.3, 7), p_d)
        assert res.status == "converged", res.message
        assert np.linalg.norm(pin_fk(model, res.q, TCP)[1] - p_d) < 1e-8


def test_nullspace_objectives_do_not_stop_convergence(model):
    """Posture and joint-limit objectives in the position IK: still converged to tolerance (a nullspace
    step moves the frame to second order; weak gains keep it going for many iterations), and the
    solutions nearer q_rest on the whole."""
    q_rest = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.6, 0.8])
    plain = PositionIK(model, TCP, restarts=0)
    solvers = [PositionIK(model, TCP, restarts=0, q_rest=q_rest, **kw)
               for kw in (dict(posture_gain=0.05), dict(limit_gain=1.0), dict(posture_gain=0.3, limit_gain=1.0))]
    rng = np.random.default_rng(17)
    d_plain = d_posture = 0.0
    for _ in range(6):
        q_t = model.random_configuration(rng, margin=0.2)
        R_d, p_d = pin_fk(model, q_t, TCP)
        q0 = q_t + rng.uniform(-0.3, 0.3, 7)
        for ik in solvers:
            res = ik.solve(q0, p_d, R_d)
            assert res.status == "converged", res.message
            R, p = pin_fk(model, res.q, TCP)
            assert np.linalg.norm(p - p_d) < 1e-8 and rot_err(R, R_d) < 1e-8
        d_posture += np.linalg.norm(res.q - q_rest)
        d_plain += np.linalg.norm(plain.solve(q0, p_d, R_d).q - q_rest)
    assert d_posture < d_plain


def test_unreachable_target_is_out_of_reach_with_the_closest_pose(model):
    """2 m away: out of reach, not a crash; the pose reported is the FK of the q reported, and no
    configuration of 20000 drawn within the limits comes closer."""
    q0 = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
    R0, p0 = pin_fk(model, q0, TCP)
    p_d = p0 + np.array([2.0, 0.0, 0.0])
    res = PositionIK(model, TCP, task="position").solve(q0, p_d)
    assert res.status == "out_of_reach", res.message
    R, p = pin_fk(model, res.q, TCP)
    assert np.abs(p - res.p).max() < 1e-12 and rot_err(R, res.R) < 1e-12
    assert res.position_error == pytest.approx(np.linalg.norm(p_d - p), rel=1e-12)
    rng = np.random.default_rng(15)
    pm = model.pin_model
    d, fid = pm.createData(), pm.getFrameId(TCP)
    best = np.inf
    for _ in range(20000):
        pin.forwardKinematics(pm, d, model.random_configuration(rng))
        best = min(best, np.linalg.norm(p_d - pin.updateFramePlacement(pm, d, fid).translation))
    assert 1.0 < res.position_error <= best + 1e-9
    assert np.all(res.q >= model.lower_limits) and np.all(res.q <= model.upper_limits)
    # the pose task too: the status, not a crash
    res = PositionIK(model, TCP, restarts=2).solve(q0, p_d, R0)
    assert res.status == "out_of_reach" and np.isfinite(res.position_error)


def _ur5_radial_target(ur5, sign):
    """A target 5 cm from the straight UR5's tool along the direction its Jacobian lost (+: outwards,
    beyond reach; -: inwards, reachable by bending the elbow)."""
    J = pin_J(ur5, Q_UR5_STRAIGHT, TOOL)
    U = np.linalg.svd(J)[0]
    u = U[:, -1] * np.sign(U[:3, -1] @ (pin_fk(ur5, Q_UR5_STRAIGHT, TOOL)[1] - pin_fk(ur5, Q_UR5_STRAIGHT,
                                                                                         "shoulder_link")[1]))
    R0, p0 = pin_fk(ur5, Q_UR5_STRAIGHT, TOOL)
    return p0 + sign * 0.05 * u[:3], pin.exp3(sign * 0.05 * u[3:]) @ R0


def test_ur5_stuck_at_the_elbow_singularity(ur5):
    """From the straight elbow with the error along the lost direction, the first-order step is 0:
    inwards, a saddle ("singular" without escapes; converged with them); outwards, out of reach."""
    p_in, R_in = _ur5_radial_target(ur5, -1.0)
    res = PositionIK(ur5, TOOL, escapes=0, restarts=0).solve(Q_UR5_STRAIGHT, p_in, R_in)
    assert res.status == "singular", res.message
    assert res.s_min < 1e-9
    res = PositionIK(ur5, TOOL, restarts=0).solve(Q_UR5_STRAIGHT, p_in, R_in)
    assert res.status == "converged", res.message
    R, p = pin_fk(ur5, res.q, TOOL)
    assert np.linalg.norm(p - p_in) < 1e-8 and rot_err(R, R_in) < 1e-8
    p_out, R_out = _ur5_radial_target(ur5, 1.0)
    res = PositionIK(ur5, TOOL, restarts=0).solve(Q_UR5_STRAIGHT, p_out, R_out)
    assert res.status == "out_of_reach", res.message
    assert res.position_error == pytest.approx(np.linalg.norm(p_out - pin_fk(ur5, res.q, TOOL)[1]), rel=1e-12)


def test_position_ik_stays_within_limits_from_a_seed_outside(model):
    """A seed beyond the limits (a joint state a little outside, or a guess) whose own pose is the
    target: the answer is within the limits all the same."""
    lo, hi = model.lower_limits, model.upper_limits
    rng = np.random.default_rng(18)
    for _ in range(4):
        q = model.random_configuration(rng, margin=0.2)
        k = rng.integers(0, 7)
        q[k] = hi[k] + 0.05 if rng.random() < 0.5 else lo[k] - 0.05
        R_d, p_d = pin_fk(model, q, TCP)
        res = PositionIK(model, TCP, restarts=2).solve(q, p_d, R_d)
        assert np.all(res.q >= lo) and np.all(res.q <= hi), res
        if res.status == "converged":
            R, p = pin_fk(model, res.q, TCP)
            assert np.linalg.norm(p - p_d) < 1e-8 and rot_err(R, R_d) < 1e-8


def test_max_iterations_reported(model):
    q_t = np.array([0.5, 0.3, -0.4, -1.5, 0.3, 1.8, 0.2])
    R_d, p_d = pin_fk(model, q_t, TCP)
    res = PositionIK(model, TCP, max_iterations=2, restarts=0).solve(np.zeros(7) + [0, 0, 0, -1.0, 0, 1.0, 0],
                                                                      p_d, R_d)
    assert res.status == "max_iterations" and res.iterations == 2 and not res.success


def test_reference_backend_gives_the_same_step(model):
    q = regular_configs(model, TCP, 1, 16)[0]
    x = np.random.default_rng(16).normal(size=6)
    a = DifferentialIK(model, TCP, posture_gain=1.0).step(q, x, dt=1e-3).qd
    b = DifferentialIK(model, TCP, backend=ReferenceBackend(model), posture_gain=1.0).step(q, x, dt=1e-3).qd
    assert np.abs(a - b).max() < 1e-10


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
def test_bad_input_raises_value_error_and_changes_nothing(model):
    ik, pik = DifferentialIK(model, TCP), PositionIK(model, TCP)
    q = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
    q_copy = q.copy()
    R, p = pin_fk(model, q, TCP)
    nan_q = q.copy()
    nan_q[3] = np.nan
    cases = [
        (lambda: ik.step(q, [0, 0, np.nan, 0, 0, 0]), "twist"),
        (lambda: ik.step(q, np.zeros(5)), "twist"),
        (lambda: ik.step(nan_q, np.zeros(6)), "panda_joint4"),
        (lambda: ik.step(q[:6], np.zeros(6)), "q"),
        (lambda: ik.step(q, np.zeros(6), dt=0.0), "dt"),
        (lambda: ik.step(q, np.zeros(6), dt=np.nan), "dt"),
        (lambda: ik.step(q, np.zeros(6), qd0=np.full(7, np.inf)), "qd0"),
        (lambda: pik.solve(q, p + [np.nan, 0, 0], R), "target position"),
        (lambda: pik.solve(q, p, R * 1.01), "not a rotation"),
        (lambda: pik.solve(q, p, R @ np.diag([1.0, 1.0, -1.0])), "not a rotation"),
        (lambda: pik.solve(q, p, np.full((3, 3), np.nan)), "target rotation"),
        (lambda: pik.solve(q, p, R[:2]), "target rotation"),
        (lambda: pik.solve(q, p), "needs the target rotation"),
        (lambda: pik.solve(q[:6], p, R), "q0"),
        (lambda: pik.solve(nan_q, p, R), "q0"),
        (lambda: PositionIK(model, TCP, task="position").solve(q, p, R), "no target rotation"),
        (lambda: DifferentialIK(model, "no_such_frame"), "unknown frame"),
        (lambda: DifferentialIK(model, TCP, task="orientation"), "task"),
        (lambda: DifferentialIK(model, TCP, reference="world"), "reference"),
        (lambda: DifferentialIK(model, TCP, eps=-1.0), "eps"),
        (lambda: DifferentialIK(model, TCP, q_rest=np.zeros(3)), "q_rest"),
    ]
    for call, words in cases:
        with pytest.raises(ValueError, match=words):
            call()
    assert np.array_equal(q, q_copy)
