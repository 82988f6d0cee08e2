"""Issue 14: the control-law defects, each in the issue's scenario against an independent oracle
(analytic figures, the parameters the test sets, the in-repo ReferenceBackend for M, J, g, scipy's
generalised symmetric eigensolver for the modal damping).  Each test prints its figure (pytest -s).

1. force integrator anti-windup and reset      4. continuous joints: shortest-angle errors
2. error clipping over the stiffness axes only  5. rate limit per command, whatever the gap
3. critical damping by the matrix formula       6. trajectory ends: zero acceleration, bounded approach
"""
import math

import numpy as np
import pytest
import scipy.linalg
from scipy.spatial.transform import Rotation

from robot_dynamics.control import (CartesianReference, JointReference, JointTrajectory, SafetyFilter, State,
                                    make_law)
from robot_dynamics.dynamics import Model, ReferenceBackend

FRAME = "panda_hand_tcp"


def wrap(x):
    return (np.asarray(x) + np.pi) % (2 * np.pi) - np.pi


def task_wrench(refb, q, tau):
    """The task wrench F with tau = J^T F (J of the oracle backend, full row rank)."""
    J = refb.frame_jacobian(q, FRAME, "local_world_aligned")
    return np.linalg.solve(J @ J.T, J @ tau)


def force_law(model, pinb, q, **extra):
    """Cartesian law with force axis z, force_ki 1, kp 0, limit 20 N; no posture torque, no gravity."""
    p = {"frame": FRAME, "force_axes": [False, False, True, False, False, False], "force_ki": 1.0,
         "force_kp": 0.0, "force_integral_limit": 20.0, "compensate_gravity": False,
         "nullspace_stiffness": 0.0, "nullspace_damping": 0.0}
    p.update(extra)
    law = make_law("cartesian_impedance", model, pinb, p)
    law.reset(State(q=q, v=np.zeros(7)))
    return law


def hold_ref(refb, q, fz):
    R, p = refb.frame_placement(q, FRAME)
    return CartesianReference(R=np.array(R), p=np.array(p), wrench=[0, 0, fz, 0, 0, 0])


# ---------------------------------------------------------------- 1. integrator
def test_force_integral_does_not_wind_up(model, pinb, refb):
    """F_d = 10 N on z, 10 s in free space (measured 0), then contact measuring 30 N exerted: with
    the stored integral clamped to limit / ki = 20, F_z(t) = 10 + 20 - 20 t from the contact on
    (analytic), so 20 N after 0.5 s; a wound-up integral (100) keeps it at 30 N for 4 s."""
    q = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.8])
    law = force_law(model, pinb, q)
    law.set_reference(hold_ref(refb, q, 10.0))
    dt, v0 = 0.01, np.zeros(7)
    free = np.zeros(6)
    contact = np.array([0, 0, -30.0, 0, 0, 0])          # the environment pushes back: robot exerts +30 N
    for k in range(1001):                                 # t = 0 .. 10 s
        law.compute(State(q=q, v=v0, t=k * dt, wrench=free, wrench_frame="world"))
    Fz = []
    for k in range(1, 101):                               # 1 s of contact
        tau = law.compute(State(q=q, v=v0, t=10.0 + k * dt, wrench=contact, wrench_frame="world"))
        Fz.append(task_wrench(refb, q, tau)[2])
    Fz = np.array(Fz)
    t = np.arange(1, 101) * dt
    expect = 10.0 + np.clip(20.0 - 20.0 * t, -20.0, 20.0)
    print(f"\nanti-windup: F_z 0.5 s after contact {Fz[49]:.3f} N (analytic 20.000; wound up: 30), "
          f"at the first contact step {Fz[0]:.3f} N")
    np.testing.assert_allclose(Fz, expect, atol=1e-6)


def test_force_integral_resets_on_new_reference_and_axes(model, pinb, refb):
    """After 5 s of free space (integral at its bound, ki int = 20 N), a new force reference F_d = 5 N
    starts from a zero integral: F_z = 5 + 5 dt after one step (analytic); changing the force axes
    likewise: F_z = F_d + F_d dt."""
    q = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.8])
    dt, v0, free = 0.01, np.zeros(7), np.zeros(6)

    def wind(law, fz):
        law.set_reference(hold_ref(refb, q, fz))
        for k in range(501):
            law.compute(State(q=q, v=v0, t=k * dt, wrench=free, wrench_frame="world"))
        return 5.0

    law = force_law(model, pinb, q)
    t = wind(law, 10.0)
    law.set_reference(hold_ref(refb, q, 5.0))
    Fz_ref = task_wrench(refb, q, law.compute(State(q=q, v=v0, t=t + dt, wrench=free, wrench_frame="world")))[2]
    law = force_law(model, pinb, q)
    t = wind(law, 10.0)
    law.set_params({"force_axes": [True, False, True, False, False, False]})
    F = task_wrench(refb, q, law.compute(State(q=q, v=v0, t=t + dt, wrench=free, wrench_frame="world")))
    print(f"\nintegral reset: new F_d 5 N -> F_z {Fz_ref:.3f} N (analytic 5.050; kept integral: 25); "
          f"new force axes -> F_z {F[2]:.3f} N (analytic 10.100; kept: 30)")
    assert Fz_ref == pytest.approx(5.0 + 5.0 * dt, abs=1e-6)
    assert F[2] == pytest.approx(10.0 + 10.0 * dt, abs=1e-6)


# ---------------------------------------------------------------- 2. clipping
def test_error_clipping_over_stiffness_axes_only(model, pinb, refb):
    """Force axes z and rz, max_pos_error 0.02, max_rot_error 0.05; e_p = (0.01, 0, -0.10),
    e_r = (0.02, 0, 0.5): the stiffness axes' errors are within their bounds, so F_x = k e_x = 2.0 N,
    M_x = k_rot e_rx = 0.4 N m (defaults k_pos 200, k_rot 20); the force axes carry F_d = 0."""
    q = np.array([0.1, -0.4, 0.2, -2.0, 0.1, 1.8, 0.5])
    law = force_law(model, pinb, q, force_axes=[False, False, True, False, False, True], force_ki=0.0,
                    max_pos_error=0.02, max_rot_error=0.05)
    R, p = refb.frame_placement(q, FRAME)
    e_p, e_r = np.array([0.01, 0.0, -0.10]), np.array([0.02, 0.0, 0.5])
    R_d = Rotation.from_rotvec(e_r).as_matrix() @ np.array(R)          # log3(R_d R^T) = e_r
    law.set_reference(CartesianReference(R=R_d, p=np.array(p) + e_p))
    F = task_wrench(refb, q, law.compute(State(q=q, v=np.zeros(7), t=0.0)))
    print(f"\nclipping: F_x {F[0]:.4f} N (analytic 2.0), M_x {F[3]:.4f} N m (analytic 0.4)")
    np.testing.assert_allclose(F, [2.0, 0.0, 0.0, 0.4, 0.0, 0.0], atol=1e-8)
    # the stiffness axes alone beyond the bound are still clipped: e_p = (0.03, 0.04, -0.10) -> norm 0.02
    law.set_reference(CartesianReference(R=np.array(R), p=np.array(p) + [0.03, 0.04, -0.10]))
    F = task_wrench(refb, q, law.compute(State(q=q, v=np.zeros(7), t=0.0)))
    np.testing.assert_allclose(F[:3], [200 * 0.012, 200 * 0.016, 0.0], atol=1e-8)


# ---------------------------------------------------------------- 3. critical damping
def modal_ratios(K, D, B):
    """Damping ratios of the modes of B x'' + D x' + K x = 0 from the generalised eigenproblem
    K phi = w^2 B phi (Phi^T B Phi = I): zeta_i = (Phi^T D Phi)_ii / (2 w_i), and the largest
    off-diagonal of Phi^T D Phi relative to its diagonal (0: the modes decouple)."""
    w2, Phi = scipy.linalg.eigh(K, B)
    Dm = Phi.T @ D @ Phi
    off = np.abs(Dm - np.diag(np.diag(Dm))).max() / np.abs(np.diag(Dm)).max()
    return np.diag(Dm) / (2 * np.sqrt(w2)), off


def state_space_ratios(K, D, B):
    """The same from the eigenvalues s of [[0, I], [-B^-1 K, -B^-1 D]]: zeta = -Re s / |s|."""
    n = len(K)
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-np.linalg.solve(B, K), -np.linalg.solve(B, D)]])
    s = np.linalg.eigvals(A)
    return np.sort(-s.real / np.abs(s))


N_CONFIGS = 60


def test_cartesian_task_damping_is_critical(model, pinb, refb):
    """Default gains, zeta 1, lambda 0: D measured from the torque (tau = -J^T D J v for J v = unit
    axis, e = 0, no posture, no gravity); modal ratios of (K, D, Lambda) = 1 to 1e-9 over random Panda
    configurations; zeta 0.7 checked by the state-space eigenvalues too."""
    rng = np.random.default_rng(14)
    K = np.diag([200.0] * 3 + [20.0] * 3)
    worst, worst_ss, allr, allss = 0.0, 0.0, [], []
    for i in range(N_CONFIGS):
        zeta = 0.7 if i % 10 == 0 else 1.0
        law = make_law("cartesian_impedance", model, pinb, {
            "frame": FRAME, "damped_pinv_lambda": 0.0, "nullspace_stiffness": 0.0, "nullspace_damping": 0.0,
            "compensate_gravity": False, "task.damping_ratio": zeta})
        q = model.random_configuration(rng, 0.2)
        law.reset(State(q=q, v=np.zeros(7)))
        M, J = refb.mass_matrix(q), refb.frame_jacobian(q, FRAME, "local_world_aligned")
        Lam = np.linalg.inv(J @ np.linalg.solve(M, J.T))
        Jp = J.T @ np.linalg.inv(J @ J.T)                   # J Jp = I
        D = np.column_stack([-np.linalg.solve(J @ J.T, J @ law.compute(State(q=q, v=Jp[:, a])))
                             for a in range(6)])
        r, off = modal_ratios(K, D, Lam)
        ss = state_space_ratios(K, D, Lam)
        if zeta == 1.0:
            allr += list(r)
            allss += list(ss)
        else:
            worst_ss = max(worst_ss, np.abs(ss - zeta).max())
        worst = max(worst, np.abs(r - zeta).max(), off)
    allr, allss = np.array(allr), np.array(allss)
    print(f"\nCartesian, zeta 1, {N_CONFIGS} configurations: modal ratios min {allr.min():.4f} median "
          f"{np.median(allr):.4f} max {allr.max():.4f}; state-space -Re s/|s| min {allss.min():.4f} median "
          f"{np.median(allss):.4f}; max |ratio - zeta| or off-diagonal {worst:.1e}; zeta 0.7 state-space "
          f"max |ratio - 0.7| {worst_ss:.1e}")
    assert worst < 1e-9
    assert worst_ss < 1e-7


@pytest.mark.parametrize("law_name", ["joint_impedance", "nullspace"])
def test_joint_space_damping_is_critical(model, pinb, refb, law_name):
    """Joint impedance (damping_ratio 1) and the Cartesian law's posture task (frame panda_link0, whose
    Jacobian is 0, so tau = tau0 = -D_ns v exactly): D measured column by column from tau = -D v
    (e = 0, no gravity); modal ratios of (K, D, M) = 1 to 1e-9 over random configurations."""
    rng = np.random.default_rng(15)
    k = np.array([600, 600, 600, 600, 250, 150, 50.0])
    worst, allr, allss = 0.0, [], []
    for i in range(N_CONFIGS // 2):
        if law_name == "joint_impedance":
            law = make_law("joint_impedance", model, pinb, {"k_gains": k.tolist(), "compensate_gravity": False})
        else:
            law = make_law("cartesian_impedance", model, pinb, {"frame": "panda_link0", "compensate_gravity": False,
                                                                "nullspace_stiffness": k.tolist()})
        q = model.random_configuration(rng, 0.2)
        law.reset(State(q=q, v=np.zeros(7)))
        D = np.column_stack([-law.compute(State(q=q, v=np.eye(7)[j])) for j in range(7)])
        r, off = modal_ratios(np.diag(k), D, refb.mass_matrix(q))
        allr += list(r)
        allss += list(state_space_ratios(np.diag(k), D, refb.mass_matrix(q)))
        worst = max(worst, np.abs(r - 1.0).max(), off)
    allr, allss = np.array(allr), np.array(allss)
    print(f"\n{law_name}, zeta 1: modal ratios min {allr.min():.4f} median {np.median(allr):.4f} max "
          f"{allr.max():.4f}; state-space -Re s/|s| min {allss.min():.4f} median {np.median(allss):.4f}; "
          f"max |ratio - 1| or off-diagonal {worst:.1e}")
    assert worst < 1e-9


# ---------------------------------------------------------------- 4. continuous joints
def test_continuous_joints_use_the_shortest_angle():
    """Double pendulum with continuous joints: q_d = 3.1, q = -3.1 are 0.0832 rad apart, so joint
    impedance (k 100, no damping, no gravity) gives tau = 100 (6.2 - 2 pi) = -8.32 N m (not 620);
    computed torque gives M(q) kp wrap(q_d - q) (ReferenceBackend M); the hold after reset and a
    trajectory start take the short way too."""
    model = Model.from_robot("double_pendulum_continuous")
    dyn = ReferenceBackend(model)
    q, q_d = np.array([-3.1, 0.2]), np.array([3.1, 0.2])
    e = wrap(q_d - q)
    ji = make_law("joint_impedance", model, dyn, {"k_gains": 100.0, "d_gains": 0.0, "compensate_gravity": False})
    ji.set_reference(JointReference(q=q_d))
    tau = ji.compute(State(q=q, v=np.zeros(2)))
    print(f"\ncontinuous joints: joint impedance tau {tau[0]:.3f} N m (analytic {100 * e[0]:.3f})")
    np.testing.assert_allclose(tau, 100 * e, atol=1e-9)
    ct = make_law("computed_torque", model, dyn, {"omega": 10.0, "compensate_gravity": False})
    ct.set_reference(JointReference(q=q_d))
    np.testing.assert_allclose(ct.compute(State(q=q, v=np.zeros(2))), dyn.mass_matrix(q) @ (100 * e), atol=1e-9)
    # hold: reset at 3.13, the joint crosses the wrap and reads -3.13 (0.023 rad further)
    ji.reset(State(q=np.array([3.13, 0.2]), v=np.zeros(2)))
    tau = ji.compute(State(q=np.array([-3.13, 0.2]), v=np.zeros(2)))
    np.testing.assert_allclose(tau, 100 * wrap(np.array([3.13 + 3.13, 0.0])), atol=1e-9)
    # trajectory to 3.1 in 1 s started at -3.1: halfway it is 0.0416 rad past -3.1 (the short way)
    ji.reset(State(q=q, v=np.zeros(2)))
    ji.set_reference(JointTrajectory([1.0], [q_d]))
    ji.compute(State(q=q, v=np.zeros(2), t=0.0))
    ji.compute(State(q=q, v=np.zeros(2), t=0.5))
    np.testing.assert_allclose(ji.info.error, [e[0] / 2, 0.0], atol=1e-9)


def test_continuous_posture_error_is_wrapped():
    """Kinova (continuous joints 0, 3, 5), Cartesian law on its base frame (J = 0: tau = tau0 exactly):
    tau0 = K_ns wrap(q_ns - q) with q_ns = q + (6.2, 0, 0, -6.2, 0, 6.2) (no damping, no gravity)."""
    model = Model.from_robot("kinova")
    dyn = ReferenceBackend(model)
    q = np.array([-3.1, 0.5, 1.0, 3.1, 0.3, -3.1])
    q_ns = q + [6.2, 0.0, 0.0, -6.2, 0.0, 6.2]
    law = make_law("cartesian_impedance", model, dyn, {"frame": "base", "q_nullspace": q_ns.tolist(),
                                                       "nullspace_stiffness": 10.0, "nullspace_damping": 0.0,
                                                       "compensate_gravity": False})
    tau = law.compute(State(q=q, v=np.zeros(6)))
    np.testing.assert_allclose(tau, 10.0 * wrap(q_ns - q), atol=1e-9)


# ---------------------------------------------------------------- 5. rate limit per command
def test_rate_limit_is_per_command_after_a_gap(model):
    """rate 1000 N m/s, command_period at its default 1 ms: one apply() after a 0.1 s gap moves at
    most 1000 * 0.001 = 1 N m (not 100 N m); a short step (0.5 ms) moves 0.5 N m."""
    sf = SafetyFilter(model, {"ramp_time": 0.0, "rate_limit": 1000.0})
    out = sf.apply(np.full(7, 50.0), None, 0.1)
    print(f"\nrate limit after a 0.1 s gap: max |delta tau| {np.abs(out).max():.3f} N m (bound 1.000)")
    np.testing.assert_allclose(out, 1.0, atol=1e-12)
    np.testing.assert_allclose(sf.apply(np.full(7, 50.0), None, 0.0005), 1.5, atol=1e-12)


def test_command_period_parameter(model):
    sf = SafetyFilter(model, {"ramp_time": 0.0, "rate_limit": 1000.0, "command_period": 0.004})
    np.testing.assert_allclose(sf.apply(np.full(7, 50.0), None, 0.1), 4.0, atol=1e-12)
    for bad in (0.0, -0.001, float("nan"), "fast"):
        with pytest.raises(ValueError, match="command_period"):
            sf.set_params({"command_period": bad})
    assert sf.params["command_period"] == 0.004


# ---------------------------------------------------------------- 6. trajectory ends
@pytest.mark.parametrize("kind", ["cubic_spline", "cubic_hermite"])
def test_trajectory_ends_have_zero_acceleration(kind):
    """1 rad in 2 s from rest: a(0) = a(T) = 0 and the minimum-jerk figures q(T/2) = 0.5,
    v(T/2) = 15/8 d/T = 0.9375, peak a = 10/sqrt(3) d/T^2 = 1.4434 (a cubic has a(0) = 1.5)."""
    V = [[0.0]] if kind == "cubic_hermite" else None
    traj = JointTrajectory([2.0], [[1.0]], V).start(0.0, [0.0], [0.0])
    a0 = traj.sample(0.0)[2][0]
    print(f"\n{kind}: a(0) {a0:.4f} rad/s^2 (cubic: 1.5)")
    assert a0 == 0.0 and abs(traj.sample(2.0 - 1e-12)[2][0]) < 1e-9
    q, v, _ = traj.sample(1.0)
    assert q[0] == pytest.approx(0.5, abs=1e-12) and v[0] == pytest.approx(0.9375, abs=1e-12)
    t_pk = 1.0 - 1.0 / math.sqrt(3.0)                       # the quintic's acceleration peak
    assert traj.sample(t_pk)[2][0] == pytest.approx(10 / math.sqrt(3) / 4, abs=1e-9)


def test_single_point_at_zero_is_approached_within_bounds(model, pinb):
    """Computed torque on the Panda, a single point 1 rad away on joint 1 at t = 0: the reference
    starts at the measured q (no step) and reaches the point in T_a = max(15/8 / 2.175,
    sqrt(10/sqrt(3) / 5)) = 1.0746 s (model velocity limit, 5 rad/s^2), a rest-to-rest quintic: peak
    acceleration exactly 5 rad/s^2, half way at T_a / 2."""
    q = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.8])
    target = q + [1.0, 0, 0, 0, 0, 0, 0]
    law = make_law("computed_torque", model, pinb, {})
    law.reset(State(q=q, v=np.zeros(7)))
    law.set_reference(JointTrajectory([0.0], [target]))
    law.compute(State(q=q, v=np.zeros(7), t=3.0))
    e0 = np.abs(law.info.error).max()
    print(f"\nsingle point at t = 0, 1 rad away: reference error at the first step {e0:.3f} rad (was 1.0)")
    assert e0 == 0.0
    T_a = max(15 / 8 / 2.175, math.sqrt(10 / math.sqrt(3) / 5.0))
    tr = law.trajectory
    np.testing.assert_allclose(tr.sample(3.0 + T_a / 2)[0], q + [0.5, 0, 0, 0, 0, 0, 0], atol=1e-12)
    assert tr.end_time == pytest.approx(3.0 + T_a, abs=1e-12)
    a_pk = tr.sample(3.0 + T_a / 2 - T_a / (2 * math.sqrt(3)))[2][0]
    assert a_pk == pytest.approx(5.0, abs=1e-9)
    assert max(abs(tr.sample(t)[1][0]) for t in np.linspace(3.0, 3.0 + T_a, 101)) <= 2.175
