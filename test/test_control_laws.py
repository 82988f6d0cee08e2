"""Control laws against independent oracles (no simulator).

Oracles use the in-repo ReferenceBackend (independent of the Pinocchio calls the laws make on the
fast path), numpy linear algebra and scipy's rotation utilities.  Tolerances are stated per test.
"""
import math

import numpy as np
import pytest
from scipy.linalg import expm, sqrtm
from scipy.spatial.transform import Rotation

from robot_dynamics.control import (LAWS, CartesianReference, JointReference, JointTrajectory, SafetyFilter,
                                    State, make_law)
from robot_dynamics.control.laws.base import flatten_params
from robot_dynamics.dynamics import Model, PinocchioBackend, ReferenceBackend
from robot_dynamics.dynamics.reference.spatial import skew

FRAME = "panda_hand_tcp"
TOL = 1e-8        # N m, law vs oracle (both double precision, different algorithms)


def matrix_critical(B, K, zeta):
    """Oracle: 2 zeta B^1/2 (B^-1/2 K B^-1/2)^1/2 B^1/2 by scipy's matrix square root."""
    Bh = np.real(sqrtm(B))
    Bhi = np.linalg.inv(Bh)
    return 2 * zeta * Bh @ np.real(sqrtm(Bhi @ K @ Bhi)) @ Bh


def rand_state(model, rng, t=0.0, vscale=1.0):
    return State(q=model.random_configuration(rng, 0.2), v=rng.uniform(-vscale, vscale, model.nv), t=t)


# ---------------------------------------------------------------- general interface
def test_make_law_names(model, pinb):
    assert LAWS == ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")
    for name in LAWS:
        assert make_law(name, model, pinb, {}).name == name
    with pytest.raises(ValueError, match="unknown control law"):
        make_law("pid", model, pinb, {})


def test_flatten_nested_params():
    assert flatten_params({"task": {"k_pos_x": 1.0, "sub": {"a": 2}}, "b": 3}) == \
        {"task.k_pos_x": 1.0, "task.sub.a": 2, "b": 3}


BAD = {
    "gravity_compensation": [{"friction_viscous": [1.0] * 6}, {"friction_coulomb": [-1.0] * 7},
                             {"friction_smoothing": 0.0}, {"compensate_gravity": "yes"}],
    "computed_torque": [{"kp": [float("nan")] * 7}, {"kp": [-1.0] * 7}, {"kd": [1.0] * 8}, {"omega": -1.0},
                        {"zeta": float("inf")}, {"kp": "high"}],
    "joint_impedance": [{"k_gains": [100.0] * 6}, {"k_gains": [100.0] * 6 + [float("nan")]},
                        {"d_gains": [-1.0] * 7}, {"damping_ratio": -0.1}, {"inertia_feedforward": 2}],
    "cartesian_impedance": [{"task.k_pos_x": -1.0}, {"task": {"k_rot_z": float("nan")}}, {"task.d_pos_y": -2.0},
                            {"nullspace_stiffness": [1.0] * 3}, {"frame": "no_such_frame"},
                            {"force_axes": [True] * 5}, {"damped_pinv_lambda": -1e-3},
                            {"q_nullspace": [0.0] * 7 + [1.0]}, {"nullspace_damping_ratio": -0.5}],
}


@pytest.mark.parametrize("name", LAWS)
def test_set_params_rejects_bad_values_and_keeps_old(model, pinb, name):
    law = make_law(name, model, pinb, {})
    before = law.params
    for bad in BAD[name] + [{"no_such_key": 1.0}]:
        with pytest.raises(ValueError):
            law.set_params(bad)
        assert law.params == before, bad
    with pytest.raises(ValueError):
        make_law(name, model, pinb, BAD[name][0])


@pytest.mark.parametrize("name", LAWS)
def test_nonfinite_state_gives_nan_then_safe_filter_output(model, pinb, name):
    rng = np.random.default_rng(1)
    law = make_law(name, model, pinb, {})
    s = rand_state(model, rng)
    law.reset(s)
    s.q = s.q.copy()
    s.q[2] = np.nan
    tau = law.compute(s)
    assert tau.shape == (7,) and np.all(np.isnan(tau))
    sf = SafetyFilter(model)
    out = sf.apply(tau, s, 0.001)
    assert np.all(np.isfinite(out)) and "nonfinite_command" in sf.reasons


@pytest.mark.parametrize("name", LAWS)
def test_pinocchio_fast_path_matches_reference_backend(model, pinb, refb, name):
    """The same law on both backends (fast Pinocchio path vs the in-repo algorithms): 1e-8 N m."""
    rng = np.random.default_rng(2)
    params = {"friction_compensation": True, "friction_viscous": 0.5, "friction_coulomb": 0.3}
    for _ in range(5):
        s0, s1 = rand_state(model, rng), rand_state(model, rng, t=0.3)
        taus = []
        for b in (pinb, refb):
            law = make_law(name, model, b, params)
            law.reset(s0)
            if name in ("computed_torque", "joint_impedance"):
                law.set_reference(JointReference(q=s1.q + 0.1, v=np.full(7, 0.2), a=np.ones(7)))
            elif name == "cartesian_impedance":
                R, p = refb.frame_placement(s1.q, FRAME)
                law.set_reference(CartesianReference(R=R.copy(), p=p + 0.05, twist=np.full(6, 0.1)))
            taus.append(law.compute(s1))
        np.testing.assert_allclose(taus[0], taus[1], atol=TOL, rtol=0)


# ---------------------------------------------------------------- gravity compensation
def test_gravity_compensation_is_g_and_switch_and_friction(model, pinb, refb):
    rng = np.random.default_rng(3)
    law = make_law("gravity_compensation", model, pinb, {})
    for _ in range(5):
        s = rand_state(model, rng)
        np.testing.assert_allclose(law.compute(s), refb.gravity(s.q), atol=TOL, rtol=0)
    law.set_params({"compensate_gravity": False})
    np.testing.assert_array_equal(law.compute(s), np.zeros(7))
    fv, fc, eps = rng.uniform(0, 1, 7), rng.uniform(0, 2, 7), 0.05
    law.set_params({"friction_compensation": True, "friction_viscous": fv.tolist(), "friction_coulomb": fc.tolist(),
                    "friction_smoothing": eps, "friction_band_margin": 1.0})
    np.testing.assert_allclose(law.compute(s), fv * s.v + fc * np.tanh(s.v / eps), atol=1e-12, rtol=0)
    # the offset (any sign) and a part of the model (what dynamics.identification writes)
    off, k = rng.uniform(-0.2, 0.2, 7), 0.6
    law.set_params({"friction_offset": off.tolist(), "friction_scale": k})
    np.testing.assert_allclose(law.compute(s), k * (fv * s.v + fc * np.tanh(s.v / eps) + off), atol=1e-12, rtol=0)
    law.set_params({"friction_viscous": 0.0, "friction_coulomb": 0.0, "friction_scale": 1.0})
    np.testing.assert_allclose(law.compute(s), off, atol=1e-12, rtol=0)        # the offset alone is applied
    for bad in ({"friction_scale": 1.5}, {"friction_scale": -0.1}, {"friction_offset": [0.1] * 3},
                {"friction_offset": [np.nan] * 7}):
        with pytest.raises(ValueError, match="friction_"):
            law.set_params(bad)


def test_gravity_compensation_includes_attached_payload():
    model = Model.from_robot("panda")
    b, rb = PinocchioBackend(model), ReferenceBackend(model)
    s = rand_state(model, np.random.default_rng(4))
    law = make_law("gravity_compensation", model, b, {})
    g0 = law.compute(s)
    model.attach_payload(FRAME, mass=1.5, com=[0, 0, 0.05])
    g1 = law.compute(s)
    # oracle: the payload's weight through the Jacobian of its centre of mass: tau = -J_c^T m g
    R, p = rb.frame_placement(s.q, FRAME)
    J = rb.frame_jacobian(s.q, FRAME, "local_world_aligned")
    c = R @ np.array([0, 0, 0.05])
    Jc = J[:3] - skew(c) @ J[3:]
    np.testing.assert_allclose(g1 - g0, -Jc.T @ (1.5 * model.gravity), atol=1e-9, rtol=0)


# ---------------------------------------------------------------- computed torque
def test_computed_torque_on_reference_is_inverse_dynamics(model, pinb, refb):
    """q = q_d, v = v_d: tau = rnea(q, v, a_d) exactly (same Pinocchio call), and to 1e-8 vs the reference."""
    rng = np.random.default_rng(5)
    law = make_law("computed_torque", model, pinb, {"omega": 30.0, "zeta": 0.7})
    for _ in range(5):
        s = rand_state(model, rng)
        a_d = rng.uniform(-3, 3, 7)
        law.set_reference(JointReference(q=s.q.copy(), v=s.v.copy(), a=a_d))
        tau = law.compute(s)
        np.testing.assert_array_equal(tau, pinb.rnea(s.q, s.v, a_d))
        np.testing.assert_allclose(tau, refb.rnea(s.q, s.v, a_d), atol=TOL, rtol=0)


def test_computed_torque_general_formula_and_gains(model, pinb, refb):
    rng = np.random.default_rng(6)
    kp, kd = rng.uniform(10, 400, 7), rng.uniform(1, 40, 7)
    law = make_law("computed_torque", model, pinb, {"kp": kp.tolist(), "kd": kd.tolist()})
    s = rand_state(model, rng)
    q_d, v_d, a_d = s.q + rng.uniform(-0.1, 0.1, 7), rng.uniform(-1, 1, 7), rng.uniform(-1, 1, 7)
    law.set_reference(JointReference(q=q_d, v=v_d, a=a_d))
    tau = law.compute(s)
    M, h = refb.mass_matrix(s.q), refb.nonlinear_effects(s.q, s.v)
    np.testing.assert_allclose(tau, M @ (a_d + kd * (v_d - s.v) + kp * (q_d - s.q)) + h, atol=1e-7, rtol=0)
    np.testing.assert_allclose(law.info.error, q_d - s.q, atol=0)
    np.testing.assert_allclose(law.info.reference, q_d, atol=0)
    # gravity switch removes exactly g
    law.set_params({"compensate_gravity": False})
    np.testing.assert_allclose(tau - law.compute(s), refb.gravity(s.q), atol=TOL, rtol=0)
    # omega/zeta replace kp/kd
    law.set_params({"omega": 20.0, "zeta": 0.5})
    np.testing.assert_allclose(law.kp, 400.0)
    np.testing.assert_allclose(law.kd, 20.0)
    law.set_params({"kp": [100.0] * 7})
    np.testing.assert_allclose(law.kd, 20.0)            # kp alone: kd = 2 sqrt(kp)


def test_computed_torque_follows_trajectory(model, pinb, refb):
    """A trajectory starts from the state at the first compute; at its end the law holds the last point."""
    rng = np.random.default_rng(7)
    s0 = rand_state(model, rng, t=10.0, vscale=0.0)
    law = make_law("computed_torque", model, pinb, {})
    law.reset(s0)
    q1 = s0.q + 0.2
    traj = JointTrajectory([1.0], [q1])
    law.set_reference(traj)
    tau = law.compute(s0)                                  # starts here: q_d = q, v_d = v = 0
    assert traj.started and traj.start_time == 10.0
    np.testing.assert_allclose(law.info.error, 0.0, atol=1e-15)
    s_end = State(q=q1, v=np.zeros(7), t=11.5)
    tau = law.compute(s_end)
    np.testing.assert_allclose(tau, refb.gravity(q1), atol=TOL, rtol=0)
    assert law.info.status == "trajectory done"


# ---------------------------------------------------------------- joint impedance
def test_joint_impedance_at_rest_is_K_e_plus_g(model, pinb, refb):
    rng = np.random.default_rng(8)
    k = rng.uniform(10, 600, 7)
    law = make_law("joint_impedance", model, pinb, {"k_gains": k.tolist(), "d_gains": [5.0] * 7})
    for _ in range(5):
        s = rand_state(model, rng, vscale=0.0)
        q_d = s.q + rng.uniform(-0.2, 0.2, 7)
        law.set_reference(JointReference(q=q_d))
        np.testing.assert_allclose(law.compute(s), k * (q_d - s.q) + refb.gravity(s.q), atol=TOL, rtol=0)
    law.reset(s)                                          # hold: at the held q, only gravity
    np.testing.assert_allclose(law.compute(s), refb.gravity(s.q), atol=TOL, rtol=0)


def test_joint_impedance_damping_ratio_and_feedforward(model, pinb, refb):
    rng = np.random.default_rng(9)
    k, zeta = rng.uniform(10, 600, 7), 0.8
    law = make_law("joint_impedance", model, pinb, {"k_gains": k.tolist(), "damping_ratio": zeta,
                                                     "coriolis_feedforward": True, "inertia_feedforward": True})
    s = rand_state(model, rng)
    q_d, v_d, a_d = s.q + 0.1, rng.uniform(-1, 1, 7), rng.uniform(-2, 2, 7)
    law.set_reference(JointReference(q=q_d, v=v_d, a=a_d))
    M = refb.mass_matrix(s.q)
    D = matrix_critical(M, np.diag(k), zeta)                 # damping matrix from M(q) (base docstring)
    expect = (k * (q_d - s.q) + D @ (v_d - s.v) + refb.gravity(s.q) + refb.coriolis_matrix(s.q, s.v) @ v_d
              + M @ a_d)
    np.testing.assert_allclose(law.compute(s), expect, atol=1e-7, rtol=0)
    np.testing.assert_allclose(law.damping(s.q), D, rtol=1e-8, atol=1e-9)


# ---------------------------------------------------------------- Cartesian impedance
def _cart(model, b, params=None):
    p = {"frame": FRAME, "task.k_pos_x": 300.0, "task.k_pos_y": 500.0, "task.k_pos_z": 700.0,
         "task.k_rot_x": 20.0, "task.k_rot_y": 30.0, "task.k_rot_z": 40.0}
    p.update(params or {})
    return make_law("cartesian_impedance", model, b, p)


def test_cartesian_static_is_JT_K_e_plus_g(model, pinb, refb):
    """v = 0, posture = q: tau = J^T K e + g, with e from scipy's rotation vector, J and g from the
    reference backend; the rotation error is checked by finite rotation: expm([e_r]x) R = R_d."""
    rng = np.random.default_rng(10)
    law = _cart(model, pinb)
    K = np.array([300, 500, 700, 20, 30, 40.0])
    for _ in range(5):
        s = rand_state(model, rng, vscale=0.0)
        law.reset(s)
        R, p = (np.array(x) for x in refb.frame_placement(s.q, FRAME))
        R_d = Rotation.from_rotvec(rng.uniform(-0.5, 0.5, 3)).as_matrix() @ R
        p_d = p + rng.uniform(-0.05, 0.05, 3)
        law.set_reference(CartesianReference(R=R_d, p=p_d))
        tau = law.compute(s)
        e_rot = Rotation.from_matrix(R_d @ R.T).as_rotvec()
        np.testing.assert_allclose(expm(skew(e_rot)) @ R, R_d, atol=1e-12)
        e = np.concatenate([p_d - p, e_rot])
        np.testing.assert_allclose(law.info.error, e, atol=1e-10)
        J = refb.frame_jacobian(s.q, FRAME, "local_world_aligned")
        np.testing.assert_allclose(tau, J.T @ (K * e) + refb.gravity(s.q), atol=1e-7, rtol=0)


def test_cartesian_jacobian_by_finite_difference(model, refb):
    """The oracle's Jacobian itself: pose change of the frame for a small dq matches J dq (1e-6)."""
    rng = np.random.default_rng(11)
    q = model.random_configuration(rng, 0.2)
    dq = rng.normal(size=7) * 1e-6
    R0, p0 = (np.array(x) for x in refb.frame_placement(q, FRAME))
    R1, p1 = (np.array(x) for x in refb.frame_placement(q + dq, FRAME))
    d = np.concatenate([p1 - p0, Rotation.from_matrix(R1 @ R0.T).as_rotvec()])
    J = refb.frame_jacobian(q, FRAME, "local_world_aligned")
    np.testing.assert_allclose(d, J @ dq, atol=1e-11)


def test_cartesian_nullspace_is_dynamically_consistent(model, pinb, refb):
    """Task gains 0, gravity off, lambda = 0: tau = N^T tau0 and J M^-1 tau = 0 (relative 1e-9)."""
    rng = np.random.default_rng(12)
    zero_task = {f"task.{g}_{k}_{a}": 0.0 for g in ("k", "d") for k in ("pos", "rot") for a in "xyz"}
    law = _cart(model, pinb, dict(zero_task, compensate_gravity=False, damped_pinv_lambda=0.0,
                                  nullspace_stiffness=50.0, nullspace_damping=3.0))
    for _ in range(5):
        s = rand_state(model, rng)
        law.reset(s)
        law.set_params({"q_nullspace": (s.q + rng.uniform(-0.5, 0.5, 7)).tolist()})
        tau = law.compute(s)
        M = refb.mass_matrix(s.q)
        J = refb.frame_jacobian(s.q, FRAME, "local_world_aligned")
        tau0 = 50.0 * (np.array(law.params["q_nullspace"]) - s.q) - 3.0 * s.v
        assert np.linalg.norm(tau) > 0.1
        acc = J @ np.linalg.solve(M, tau)
        assert np.linalg.norm(acc) <= 1e-9 * np.linalg.norm(J @ np.linalg.solve(M, tau0))
        # and tau0 - tau lies in the range of J^T
        r = tau0 - tau
        np.testing.assert_allclose(J.T @ np.linalg.lstsq(J.T, r, rcond=None)[0], r, atol=1e-9)
        law.set_params({"q_nullspace": []})


def test_cartesian_damping_from_task_inertia(model, pinb, refb):
    """e = 0, no posture torque, lambda = 0: tau - g = -J^T D J v with
    D = 2 zeta Lambda^1/2 (Lambda^-1/2 K Lambda^-1/2)^1/2 Lambda^1/2 (scipy sqrtm),
    Lambda = (J M^-1 J^T)^-1 (numpy solve).  Relative 1e-7."""
    rng = np.random.default_rng(13)
    law = _cart(model, pinb, {"task.damping_ratio": 0.7, "damped_pinv_lambda": 0.0, "nullspace_stiffness": 0.0,
                              "nullspace_damping": 0.0})
    K = np.array([300, 500, 700, 20, 30, 40.0])
    s = rand_state(model, rng)
    law.reset(s)
    tau = law.compute(s)
    M = refb.mass_matrix(s.q)
    J = refb.frame_jacobian(s.q, FRAME, "local_world_aligned")
    Lam = np.linalg.inv(J @ np.linalg.solve(M, J.T))
    D = matrix_critical(Lam, np.diag(K), 0.7)
    expect = -J.T @ (D @ (J @ s.v)) + refb.gravity(s.q)
    np.testing.assert_allclose(tau, expect, rtol=1e-7, atol=1e-7)
    # with the twist reference equal to J v, the damping term vanishes
    R, p = refb.frame_placement(s.q, FRAME)
    law.set_reference(CartesianReference(R=np.array(R), p=np.array(p), twist=J @ s.v))
    np.testing.assert_allclose(law.compute(s), refb.gravity(s.q), atol=1e-8, rtol=0)


def test_cartesian_damping_some_axes_given(model, pinb, refb):
    """task.d_pos_x = 40 and task.d_rot_z = 3 given, the rest derived: D is the matrix formula with the
    rows and columns of x and rz replaced by the given values (measured from the torque, 1e-7)."""
    rng = np.random.default_rng(21)
    law = _cart(model, pinb, {"damped_pinv_lambda": 0.0, "nullspace_stiffness": 0.0, "nullspace_damping": 0.0,
                              "compensate_gravity": False, "task.d_pos_x": 40.0, "task.d_rot_z": 3.0})
    K = np.diag([300, 500, 700, 20, 30, 40.0])
    s = rand_state(model, rng)
    law.reset(s)
    M, J = refb.mass_matrix(s.q), refb.frame_jacobian(s.q, FRAME, "local_world_aligned")
    D = matrix_critical(np.linalg.inv(J @ np.linalg.solve(M, J.T)), K, 1.0)
    for i, d in ((0, 40.0), (5, 3.0)):
        D[i, :] = D[:, i] = 0.0
        D[i, i] = d
    Jp = J.T @ np.linalg.inv(J @ J.T)
    D_meas = np.column_stack([-np.linalg.solve(J @ J.T, J @ law.compute(State(q=s.q, v=Jp[:, a])))
                              for a in range(6)])
    np.testing.assert_allclose(D_meas, D, rtol=1e-7, atol=1e-7)


def test_cartesian_bounded_at_singularity(model, pinb, refb):
    """Nearly stretched arm (q4 at its limit -0.0698, the rest 0: singular for position control),
    moving at 0.3 rad/s per joint, pose error zero: with given task damping D (diagonal) and no
    nullspace terms the law is exactly tau = g(q) - J^T D J v, whatever the damped-pinv lambda (the
    pseudo-inverse only enters the nullspace projection).  Expected torque from the reference backend's
    J and g and the gains this test sets, and the bound |tau - g| <= |J|^2 max(D) |v| (2-norms)."""
    q = np.zeros(7)
    q[3], q[5] = -0.0698, 0.0               # within limits, arm nearly straight up
    q = np.clip(q, model.lower_limits, model.upper_limits)
    v = np.full(7, 0.3)
    s = State(q=q, v=v)
    d = {"x": 40.0, "y": 50.0, "z": 60.0}, {"x": 2.0, "y": 3.0, "z": 4.0}
    D = np.diag([d[0]["x"], d[0]["y"], d[0]["z"], d[1]["x"], d[1]["y"], d[1]["z"]])
    gains = {f"task.d_pos_{a}": d[0][a] for a in "xyz"} | {f"task.d_rot_{a}": d[1][a] for a in "xyz"}
    J = np.asarray(refb.frame_jacobian(q, FRAME, "local_world_aligned"))
    g = np.asarray(refb.gravity(q))
    want = g - J.T @ (D @ (J @ v))
    bound = np.linalg.norm(J, 2) ** 2 * D.max() * np.linalg.norm(v)
    assert np.linalg.svd(J, compute_uv=False)[-1] < 0.05 * np.linalg.svd(J, compute_uv=False)[0], \
        "the pose is not near a singularity"
    for lam in (0.01, 0.0):
        law = _cart(model, pinb, {"damped_pinv_lambda": lam, "nullspace_stiffness": 0.0,
                                  "nullspace_damping": 0.0, **gains})
        law.reset(s)
        tau = law.compute(s)
        assert np.all(np.isfinite(tau))
        np.testing.assert_allclose(tau, want, rtol=1e-9, atol=1e-9)
        assert np.linalg.norm(tau - g) <= bound * (1 + 1e-12)


def test_cartesian_force_axes(model, pinb, refb):
    """Force axis z: F_z = F_d + kp (F_d + w_z) (w: environment on robot); stiffness axes unchanged."""
    rng = np.random.default_rng(14)
    law = _cart(model, pinb, {"force_axes": [False, False, True, False, False, False], "force_kp": 0.5,
                              "nullspace_stiffness": 0.0, "nullspace_damping": 0.0})
    s = rand_state(model, rng, vscale=0.0)
    law.reset(s)
    R, p = (np.array(x) for x in refb.frame_placement(s.q, FRAME))
    Fd = np.array([0, 0, 10.0, 0, 0, 0])
    law.set_reference(CartesianReference(R=R, p=p + np.array([0.01, 0, 0.03]), wrench=Fd))
    s.wrench, s.wrench_frame = np.array([0, 0, -4.0, 0, 0, 0]), "world"     # environment pushes down 4 N
    tau = law.compute(s)
    F = np.array([300 * 0.01, 0, 10 + 0.5 * (10 - 4), 0, 0, 0])
    J = refb.frame_jacobian(s.q, FRAME, "local_world_aligned")
    np.testing.assert_allclose(tau, J.T @ F + refb.gravity(s.q), atol=1e-7, rtol=0)
    # same wrench given in the frame's local axes
    s.wrench, s.wrench_frame = np.concatenate([R.T @ [0, 0, -4.0], [0, 0, 0]]), FRAME
    np.testing.assert_allclose(law.compute(s), tau, atol=1e-9, rtol=0)


def test_references_rejected(model, pinb):
    ji = make_law("joint_impedance", model, pinb, {})
    ci = make_law("cartesian_impedance", model, pinb, {})
    gc = make_law("gravity_compensation", model, pinb, {})
    with pytest.raises(ValueError):
        ji.set_reference(JointReference(q=np.zeros(6)))
    with pytest.raises(ValueError):
        ji.set_reference(JointReference(q=np.full(7, np.nan)))
    with pytest.raises(ValueError):
        ji.set_reference(CartesianReference(R=np.eye(3), p=np.zeros(3)))
    with pytest.raises(ValueError):
        ji.set_reference(JointTrajectory([1.0], [np.zeros(6)]))
    with pytest.raises(ValueError):
        ci.set_reference(CartesianReference(R=2 * np.eye(3), p=np.zeros(3)))
    with pytest.raises(ValueError):
        ci.set_reference(JointReference(q=np.zeros(7)))
    with pytest.raises(ValueError):
        gc.set_reference(JointReference(q=np.zeros(7)))
    assert math.isfinite(ci.params["task.k_pos_x"])


def test_vector_params_broadcast_one_number(model, pinb):
    """One number, or a one-element list (a ROS double array), means the same value for every joint."""
    ci = make_law("cartesian_impedance", model, pinb, {"nullspace_stiffness": [5.0]})
    assert ci.params["nullspace_stiffness"] == [5.0] * 7
    ji = make_law("joint_impedance", model, pinb, {"k_gains": 50, "d_gains": []})
    assert ji.params["k_gains"] == [50.0] * 7 and ji.params["d_gains"] is None
