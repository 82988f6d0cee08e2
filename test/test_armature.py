"""Rotor (armature) inertia in the model (Model.set_armature): both backends and every algorithm, against
MuJoCo's joint armature (an independent implementation: its mass matrix and inverse dynamics) and the
identities that must still hold (ABA(RNEA) = a, T = 1/2 v^T M v, M SPD, the batched RNEA)."""
import numpy as np
import pytest

pytest.importorskip("pinocchio")
pytest.importorskip("mujoco")

from robot_dynamics.dynamics import Model, PinocchioBackend, ReferenceBackend  # noqa: E402
from robot_dynamics.dynamics.reference.batched import BatchData, rnea_batched  # noqa: E402
from robot_dynamics.sim.mujoco_sim import MujocoSim  # noqa: E402

TOL = 1e-9


@pytest.mark.parametrize("name", ["panda", "panda_gripper", "ur5"])
def test_armature_matches_mujoco_and_the_identities(name):
    model = Model.from_robot(name)
    rng = np.random.default_rng(2)
    Ia = rng.uniform(0.02, 0.3, model.nv)
    model.set_armature(Ia)
    assert np.array_equal(model.armature, Ia)
    P, R = PinocchioBackend(model), ReferenceBackend(model)
    sim = MujocoSim(model, armature=Ia, limits=False, effort_limits=False)
    lo = np.where(np.isfinite(model.lower_limits), model.lower_limits, -np.pi)
    hi = np.where(np.isfinite(model.upper_limits), model.upper_limits, np.pi)
    for _ in range(4):
        q, v, a = rng.uniform(lo, hi), rng.uniform(-1, 1, model.nv), rng.uniform(-2, 2, model.nv)
        M_mj = sim.mass_matrix(q)
        scale = np.max(np.abs(M_mj))
        for B in (P, R):
            assert np.max(np.abs(B.mass_matrix(q) - M_mj)) < TOL * scale
            tau = B.rnea(q, v, a)
            assert np.max(np.abs(tau - sim.inverse_dynamics(q, v, a))) < TOL * max(1.0, np.max(np.abs(tau)))
            assert np.max(np.abs(B.aba(q, v, tau) - a)) < 1e-8
            assert abs(B.kinetic_energy(q, v) - 0.5 * v @ M_mj @ v) < TOL * scale
        assert np.min(np.linalg.eigvalsh(R.mass_matrix(q))) > 0
        if all(t in ("revolute", "prismatic", "continuous") for t in model.tree.jtype):
            tb = rnea_batched(model.tree, BatchData(model.tree), q[None], v[None], a[None])[0]
            assert np.max(np.abs(tb - P.rnea(q, v, a))) < TOL * max(1.0, np.max(np.abs(tb)))
    # the armature adds exactly diag(Ia) to M (the difference to the rigid-body M)
    model_rb = Model.from_robot(name)
    q = rng.uniform(lo, hi)
    assert np.max(np.abs(P.mass_matrix(q) - PinocchioBackend(model_rb).mass_matrix(q) - np.diag(Ia))) < TOL


def test_set_armature_checks_and_clears():
    model = Model.from_robot("panda")
    P = PinocchioBackend(model)
    q = np.zeros(model.nv)
    M0 = P.mass_matrix(q).copy()
    model.set_armature(0.1)
    assert np.allclose(P.mass_matrix(q) - M0, 0.1 * np.eye(model.nv), atol=1e-12)
    model.set_armature(np.zeros(model.nv))
    assert model.tree.armature_v is None and np.allclose(P.mass_matrix(q), M0, atol=1e-12)
    assert np.allclose(ReferenceBackend(model).mass_matrix(q), M0, atol=1e-12)
    for bad in (-0.1, [0.1] * 3, [0.1] * 6 + [np.nan]):
        with pytest.raises(ValueError, match="armature"):
            model.set_armature(bad)
    assert model.tree.armature_v is None                   # a refused value changes nothing
