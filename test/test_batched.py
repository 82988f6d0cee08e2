"""Batched reference algorithms (RNEA, gravity, inertial-parameter regressor over N states) against
Pinocchio, state by state.

Tolerances: the batched recursion evaluates the same formulas in another order (joint frames turned to
z), agreement is at 1e-14; 1e-10 (scaled by max(1, |tau|)) catches any modelling slip.
"""
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.dynamics import Model, PinocchioBackend
from robot_dynamics.dynamics.reference.batched import BatchData, gravity_batched, rnea_batched
from robot_dynamics.dynamics.reference.regressor import inertial_parameters, regressor, regressor_batched

TOL = 1e-10


def scaled_err(ref, other):
    ref = np.asarray(ref, float)
    return float(np.max(np.abs(ref - np.asarray(other, float)))) / max(1.0, float(np.max(np.abs(ref))))


def states(model, n, seed):
    rng = np.random.default_rng(seed)
    Q = np.array([model.random_configuration(rng) for _ in range(n)])
    return Q, rng.normal(size=(n, model.nv)), rng.normal(size=(n, model.nv))


# panda: revolute chain; panda_gripper: two prismatic fingers on a tree; tiago: prismatic torso and
# continuous wheels (q converted for Pinocchio by the backend)
@pytest.mark.parametrize("name", ["panda", "panda_gripper", "ur5", "tiago"])
def test_rnea_and_gravity_match_pinocchio(name):
    model = Model.from_robot(name)
    P, bd = PinocchioBackend(model), BatchData(model.tree)
    Q, V, A = states(model, 12, seed=1)
    tau, g = rnea_batched(model.tree, bd, Q, V, A), gravity_batched(model.tree, bd, Q)
    assert tau.shape == g.shape == (12, model.nv)
    for k in range(len(Q)):
        assert scaled_err(P.rnea(Q[k], V[k], A[k]), tau[k]) < TOL
        assert scaled_err(P.gravity(Q[k]), g[k]) < TOL


def test_rnea_external_wrenches_match_pinocchio(model, pinb):
    bd = BatchData(model.tree)
    Q, V, A = states(model, 5, seed=2)
    rng = np.random.default_rng(3)
    F = rng.normal(size=(5, model.tree.nb, 6)) * 10.0
    tau = rnea_batched(model.tree, bd, Q, V, A, fext=F)
    for k in range(5):
        assert scaled_err(pinb.rnea(Q[k], V[k], A[k], F[k]), tau[k]) < TOL
    same = rnea_batched(model.tree, bd, Q, V, A, fext=F[0])     # one (nb, 6) set for every state
    assert scaled_err(pinb.rnea(Q[3], V[3], A[3], F[0]), same[3]) < TOL


def test_payload_is_seen(pinb):
    model = pinb.model
    bd = BatchData(model.tree)
    Q, _, _ = states(model, 3, seed=4)
    model.attach_payload("panda_hand_tcp", mass=2.0, com=[0.0, 0.01, 0.05])
    try:
        g = gravity_batched(model.tree, bd, Q)
        for k in range(3):
            assert scaled_err(pinb.gravity(Q[k]), g[k]) < TOL
    finally:
        model.detach_payload()


@pytest.mark.parametrize("name", ["panda", "panda_gripper"])
def test_regressor_times_parameters_is_rnea(name):
    model = Model.from_robot(name)
    P, bd = PinocchioBackend(model), BatchData(model.tree)
    Q, V, A = states(model, 10, seed=5)
    Y = regressor_batched(model.tree, bd, Q, V, A)
    assert Y.shape == (10, model.nv, 10 * model.tree.nb)
    pi = inertial_parameters(model.tree)
    for k in range(10):
        assert scaled_err(P.rnea(Q[k], V[k], A[k]), Y[k] @ pi) < TOL


def test_regressor_matches_pinocchio(model):
    """Pinocchio's joint torque regressor, columns ordered by its joints, parameters in its order."""
    pm = model.pin_model
    d = pm.createData()
    bd = BatchData(model.tree)
    cols = np.concatenate([np.arange(10 * (j - 1), 10 * j) for j in model.pin_joint_id])
    pi_pin = np.concatenate([pm.inertias[j].toDynamicParameters() for j in model.pin_joint_id])
    assert np.max(np.abs(inertial_parameters(model.tree) - pi_pin)) < 1e-12
    Q, V, A = states(model, 4, seed=6)
    for k in range(4):
        Yp = pin.computeJointTorqueRegressor(pm, d, model.q_to_pin(Q[k]), V[k], A[k])[:, cols]
        assert scaled_err(Yp, regressor(model.tree, bd, Q[k], V[k], A[k])) < TOL


def test_single_state_rows_and_bad_shapes(model, pinb):
    bd = BatchData(model.tree)
    Q, V, A = states(model, 1, seed=7)
    assert scaled_err(pinb.rnea(Q[0], V[0], A[0]), rnea_batched(model.tree, bd, Q[0], V[0], A[0])[0]) < TOL
    with pytest.raises(ValueError, match="shape"):
        rnea_batched(model.tree, bd, Q, V[:, :3], A)
    with pytest.raises(ValueError, match="shape"):
        rnea_batched(model.tree, bd, np.vstack([Q, Q]), V, A)
    with pytest.raises(ValueError, match="free-flyer"):
        BatchData(Model.from_robot("solo12").tree)


def test_repeated_calls_reuse_buffers_not_results(model, pinb):
    """The recursion reuses per-N work buffers across calls: a second batch of the same size (and a
    gravity call in between) must not change the first result, and both must match Pinocchio."""
    bd = BatchData(model.tree)
    Q1, V1, A1 = states(model, 6, seed=8)
    Q2, V2, A2 = states(model, 6, seed=9)
    tau1 = rnea_batched(model.tree, bd, Q1, V1, A1)
    g2 = gravity_batched(model.tree, bd, Q2)
    tau2 = rnea_batched(model.tree, bd, Q2, V2, A2)
    for k in range(6):
        assert scaled_err(pinb.rnea(Q1[k], V1[k], A1[k]), tau1[k]) < TOL
        assert scaled_err(pinb.rnea(Q2[k], V2[k], A2[k]), tau2[k]) < TOL
        assert scaled_err(pinb.gravity(Q2[k]), g2[k]) < TOL
