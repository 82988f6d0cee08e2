"""Identities of rigid-body dynamics, checked on each backend by itself (no cross-comparison):
tau = M a + h, ABA(RNEA(a)) = a, M symmetric positive definite, M' - 2C skew, C v = h - g,
external wrenches enter as J^T f, Jacobians and their derivatives against finite differences of the
kinematics, T = 1/2 v^T M v, and the energy balance along a simulated motion.

Errors are scaled like the cross-check: max|lhs - rhs| / max(1, max|lhs|).
"""
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.dynamics import Model, PinocchioBackend, ReferenceBackend
from robot_dynamics.dynamics.backends import REFERENCES
from robot_dynamics.dynamics.reference.spatial import log3, skew
from test_dynamics_crosscheck import random_tree_model, scaled_err, test_frames

# Algebraic identities, exact in exact arithmetic: only rounding (1e-15 .. 1e-13 here) separates them.
TOL_ALG = 1e-10
# ABA(RNEA(a)) = a: the round trip amplifies rounding by about cond(M) (up to ~1e5 on these robots).
TOL_INVERSE = 1e-8
# Central finite differences, step FD_EPS: truncation ~ EPS^2 |f'''|, rounding ~ 1e-16 / EPS
# ~ 1e-10; measured <= 1e-9.  1e-6 leaves margin and is far below any real error (a wrong column is O(1)).
FD_EPS = 1e-6
TOL_FD = 1e-6
# Energy balance along an RK4 simulation (step DT, DURATION): the global RK4 error is ~ DT^4 times
# the fourth derivative; measured 1e-9 .. 4e-7 of the energy exchanged (int |v^T tau| dt) on these
# robots.  A relative 1e-5 still catches a sign or factor error in any term of ABA, T or V (1e-2 or more).
DT, DURATION = 1e-3, 0.25
TOL_ENERGY = 1e-5

BACKENDS = [PinocchioBackend, ReferenceBackend]
# fixed base chains, continuous and prismatic joints, a floating base, a random tree
ROBOTS = ["panda", "double_pendulum_continuous", "panda_gripper", "solo12", "random_tree"]


def load(name):
    return random_tree_model(2) if name == "random_tree" else Model.from_robot(name)


@pytest.fixture(scope="module", params=ROBOTS)
def model(request):
    return load(request.param)


@pytest.fixture(params=BACKENDS, ids=["pinocchio", "reference"])
def dyn(request, model):
    return request.param(model)


def integrate(model, q, v):
    """q (+) v: the configuration reached after moving with velocity v for unit time (Lie-group
    exponential for a free-flyer, plain sum for the joints).  Done with Pinocchio's integrate on its
    own parametrisation; that only moves along the manifold, no dynamics quantity comes from it."""
    qp = model.q_to_pin(np.asarray(q, float)).copy()
    vp = np.empty(model.nv)
    vp[model.v_to_pin] = v
    return model.q_from_pin(pin.integrate(model.pin_model, qp, vp))


def states(model, n, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield model.random_configuration(rng), rng.normal(size=model.nv), rng.normal(size=model.nv), rng


# ---------------------------------------------------------------- algebraic identities
def test_rnea_is_mass_matrix_times_a_plus_h(dyn, model):
    for q, v, a, _ in states(model, 3):
        tau = dyn.rnea(q, v, a).copy()
        M, h = dyn.mass_matrix(q).copy(), dyn.nonlinear_effects(q, v).copy()
        assert scaled_err(tau, M @ a + h) <= TOL_ALG


def test_aba_inverts_rnea(dyn, model):
    for q, v, a, rng in states(model, 3):
        tau = dyn.rnea(q, v, a).copy()
        assert scaled_err(a, dyn.aba(q, v, tau)) <= TOL_INVERSE
        fext = rng.normal(size=(model.tree.nb, 6))
        tau = dyn.rnea(q, v, a, fext).copy()
        assert scaled_err(a, dyn.aba(q, v, tau, fext)) <= TOL_INVERSE


def test_mass_matrix_symmetric_positive_definite(dyn, model):
    for q, *_ in states(model, 3):
        M = dyn.mass_matrix(q).copy()
        assert scaled_err(M, M.T) <= TOL_ALG
        np.linalg.cholesky(M)                               # raises if not positive definite
        assert np.linalg.eigvalsh(M)[0] > 0


def test_coriolis_times_v_is_h_minus_g(dyn, model):
    for q, v, *_ in states(model, 3):
        Cv = dyn.coriolis_matrix(q, v) @ v
        h_minus_g = dyn.nonlinear_effects(q, v).copy() - dyn.gravity(q)
        assert scaled_err(h_minus_g, Cv) <= TOL_ALG


def test_kinetic_energy_is_half_vMv(dyn, model):
    for q, v, *_ in states(model, 3):
        M = dyn.mass_matrix(q).copy()
        assert scaled_err(0.5 * v @ M @ v, dyn.kinetic_energy(q, v)) <= TOL_ALG


def test_external_wrenches_enter_as_jacobian_transpose(dyn, model):
    """rnea(q, v, a, fext) = rnea(q, v, a) - sum_i J_i^T f_i, with J_i the local Jacobian of body i
    (the frame named after its joint), and aba(tau, fext) = aba(tau + sum_i J_i^T f_i)."""
    t = model.tree
    for q, v, a, rng in states(model, 2):
        fext = rng.normal(size=(t.nb, 6))
        JTf = sum(dyn.frame_jacobian(q, t.joint_names[i], "local").T @ fext[i] for i in range(t.nb))
        tau = dyn.rnea(q, v, a).copy()
        assert scaled_err(tau - JTf, dyn.rnea(q, v, a, fext)) <= TOL_ALG
        acc = dyn.aba(q, v, tau, fext).copy()
        assert scaled_err(dyn.aba(q, v, tau + JTf), acc) <= TOL_INVERSE


def test_frame_velocity_is_jacobian_times_v(dyn, model):
    for q, v, *_ in states(model, 2):
        for f in test_frames(model):
            for ref in REFERENCES:
                J = dyn.frame_jacobian(q, f, ref).copy()
                assert scaled_err(J @ v, dyn.frame_velocity(q, v, f, ref)) <= TOL_ALG, (f, ref)


# ---------------------------------------------------------------- finite differences
def test_mass_matrix_derivative_minus_2C_is_skew(dyn, model):
    """N = M' - 2C with M' = dM/dt along v (central differences of M(q (+) eps v)): N + N^T = 0 and
    x^T N x = 0 for random x."""
    for q, v, x, _ in states(model, 2):
        Mp = dyn.mass_matrix(integrate(model, q, FD_EPS * v)).copy()
        Mm = dyn.mass_matrix(integrate(model, q, -FD_EPS * v)).copy()
        Mdot = (Mp - Mm) / (2 * FD_EPS)
        N = Mdot - 2 * dyn.coriolis_matrix(q, v)
        scale = max(1.0, float(np.max(np.abs(Mdot))))
        assert np.max(np.abs(N + N.T)) / scale <= TOL_FD
        assert abs(x @ N @ x) / (scale * (x @ x)) <= TOL_FD


def _fd_jacobians(dyn, model, q, frame):
    """Jacobians of `frame` in the three references by central differences of its placement along
    each coordinate of v: linear parts from the position difference, angular parts from log3 of the
    relative rotation (world axes: R(q+) R0^T; local axes: R0^T R(q+))."""
    R0, p0 = (x.copy() for x in dyn.frame_placement(q, frame))
    nv = model.nv
    lin, ang_w, ang_l = np.zeros((3, nv)), np.zeros((3, nv)), np.zeros((3, nv))
    for k in range(nv):
        e = np.zeros(nv)
        e[k] = FD_EPS
        Rp, pp = (x.copy() for x in dyn.frame_placement(integrate(model, q, e), frame))
        Rm, pm = (x.copy() for x in dyn.frame_placement(integrate(model, q, -e), frame))
        lin[:, k] = (pp - pm) / (2 * FD_EPS)                          # dp/dt, world axes
        ang_w[:, k] = (log3(Rp @ R0.T) - log3(Rm @ R0.T)) / (2 * FD_EPS)
        ang_l[:, k] = (log3(R0.T @ Rp) - log3(R0.T @ Rm)) / (2 * FD_EPS)
    return {
        "local_world_aligned": np.vstack([lin, ang_w]),
        "local": np.vstack([R0.T @ lin, ang_l]),
        "world": np.vstack([lin + skew(p0) @ ang_w, ang_w]),         # v_0 = dp/dt + p x w
    }


def test_jacobians_match_finite_differences(dyn, model):
    for q, *_ in states(model, 2):
        for f in test_frames(model, n=3):
            fd = _fd_jacobians(dyn, model, q, f)
            for ref in REFERENCES:
                assert scaled_err(dyn.frame_jacobian(q, f, ref).copy(), fd[ref]) <= TOL_FD, (f, ref)


def test_jacobian_time_derivative_matches_finite_differences(dyn, model):
    for q, v, *_ in states(model, 2):
        qp, qm = integrate(model, q, FD_EPS * v), integrate(model, q, -FD_EPS * v)
        for f in test_frames(model, n=3):
            for ref in REFERENCES:
                fd = (dyn.frame_jacobian(qp, f, ref).copy() - dyn.frame_jacobian(qm, f, ref)) / (2 * FD_EPS)
                assert scaled_err(dyn.frame_jacobian_dot(q, v, f, ref).copy(), fd) <= TOL_FD, (f, ref)


# ---------------------------------------------------------------- energy balance
@pytest.mark.parametrize("robot", ["panda", "double_pendulum_continuous", "panda_gripper", "random_tree"])
@pytest.mark.parametrize("backend", BACKENDS, ids=["pinocchio", "reference"])
def test_energy_balance_along_simulated_motion(robot, backend):
    """Integrate qdd = ABA(q, v, tau(t)) with RK4 (no damping, no friction), carrying the work
    W = int v^T tau dt as one more state; then (T + V)(end) - (T + V)(0) = W."""
    model = load(robot)                       # fixed base: q integrates as a plain sum
    dyn = backend(model)
    rng = np.random.default_rng(7)
    nv = model.nv
    q0 = model.random_configuration(rng, margin=0.3)
    # torque amplitudes giving joint accelerations of a few rad/s^2 (or m/s^2) whatever the robot's
    # size: the double pendulum's links are 1000 times lighter than the Panda's
    amp = np.diag(dyn.mass_matrix(q0)) * rng.uniform(2.0, 10.0, nv)
    w, phase = rng.uniform(2.0, 10.0, nv), rng.uniform(0, 2 * np.pi, nv)

    def tau(t):
        return amp * np.sin(w * t + phase)

    def f(t, x):
        q, v = x[:nv], x[nv:2 * nv]
        u = tau(t)
        return np.concatenate([v, dyn.aba(q, v, u), [v @ u]])

    x = np.concatenate([q0, 0.5 * rng.normal(size=nv), [0.0]])

    def energy(x):
        q, v = x[:nv], x[nv:2 * nv]
        return dyn.kinetic_energy(q, v) + dyn.potential_energy(q)

    E0, t = energy(x), 0.0
    power_abs = 0.0
    for _ in range(int(round(DURATION / DT))):
        k1 = f(t, x)
        k2 = f(t + DT / 2, x + DT / 2 * k1)
        k3 = f(t + DT / 2, x + DT / 2 * k2)
        k4 = f(t + DT, x + DT * k3)
        x = x + DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += DT
        power_abs += abs(k1[-1]) * DT
    dE, W = energy(x) - E0, x[-1]
    assert abs(W) > 1e-3 * max(1.0, abs(E0))           # the applied torque did work ...
    assert abs(W) > 1e-3 * power_abs                   # ... not only through gravity
    assert abs(dE - W) <= TOL_ENERGY * power_abs, (dE, W, power_abs)
