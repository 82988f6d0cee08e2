"""A published DH table loaded as published: the PUMA 560 (config/puma560_dh.yaml).

Oracle: the figures Corke's Robotics Toolbox prints for its `mdl_puma560` model (standard DH, link
dynamics of Armstrong, Khatib and Burdick 1986), as published in P. Corke, "Robotics, Vision and
Control" (gravity load section of the dynamics chapter, and the inertia matrix at qn):
  gravload(qz) = [0 37.4837 0.2489 0 0 0], gravload(qn) = [0 31.6399 6.0351 0 0.0283 0],
  gravload(qs) = [0 46.0069 8.7722 0 0.0283 0]  (N m, g = 9.81 m/s^2), and inertia(qn), which includes
  the motors' reflected rotor inertia Jm G^2 on the diagonal (Jm, G as published in the same model).
Published to 4 decimals: agreement within half a unit of the last decimal.
"""
import warnings
from pathlib import Path

import numpy as np
import pytest

from robot_dynamics.dynamics import InertiaWarning, Model, PinocchioBackend, ReferenceBackend, self_check
from robot_dynamics.sim import MujocoSim

YAML = Path(__file__).resolve().parents[1] / "config" / "puma560_dh.yaml"
QZ = np.zeros(6)
QN = np.array([0, np.pi / 4, np.pi, 0, np.pi / 4, 0])
QS = np.array([0, 0, -np.pi / 2, 0, 0, 0])
GRAVLOAD = {"qz": (QZ, [0, 37.4837, 0.2489, 0, 0, 0]),
            "qn": (QN, [0, 31.6399, 6.0351, 0, 0.0283, 0]),
            "qs": (QS, [0, 46.0069, 8.7722, 0, 0.0283, 0])}
INERTIA_QN = np.array([[3.6594, -0.4044, 0.1006, -0.0025, 0.0000, -0.0000],
                       [-0.4044, 4.4137, 0.3509, 0.0000, 0.0024, 0.0000],
                       [0.1006, 0.3509, 0.9378, 0.0000, 0.0015, 0.0000],
                       [-0.0025, 0.0000, 0.0000, 0.1925, 0.0000, 0.0000],
                       [0.0000, 0.0024, 0.0015, 0.0000, 0.1713, 0.0000],
                       [-0.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.1941]])
JM = np.array([200e-6, 200e-6, 200e-6, 33e-6, 33e-6, 33e-6])           # rotor inertia [kg m^2]
GEAR = np.array([-62.6111, 107.815, -53.7063, 76.0364, 71.923, 76.686])  # gear ratios
HALF_UNIT = 0.5e-4 + 1e-12


@pytest.fixture(scope="module")
def puma():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InertiaWarning)
        m = Model.from_dh_yaml(YAML)
    m.gravity = [0.0, 0.0, -9.81]
    return m


def test_loads_as_published_with_warnings_naming_link_and_numbers():
    with pytest.warns(InertiaWarning) as rec:
        m = Model.from_dh_yaml(YAML)
    msgs = [str(w.message) for w in rec]
    assert msgs == m.warnings
    assert any("joint1_motion" in s and "zero mass" in s and "0.35" in s for s in msgs)
    assert any("joint3_motion" in s and "triangle inequality" in s and "0.0785 < 0.086" in s for s in msgs)
    with pytest.raises(ValueError, match="strict=True.*joint3_motion.*triangle inequality"):
        Model.from_dh_yaml(YAML, strict=True)


def test_massless_link_with_inertia_is_in_the_urdf_both_readers_see(puma):
    """Link 1 (m = 0, Iyy = 0.35 about its DH y axis = the joint axis z0) is written as a zero-mass
    <inertial>; Pinocchio reads that body as mass 0 with a rotational inertia of 0.35 about the axis."""
    pin_I = puma.pin_model.inertias[puma.pin_joint_id[0]]
    assert pin_I.mass == 0.0
    assert pin_I.inertia[2, 2] == pytest.approx(0.35, abs=1e-12)        # about the joint axis
    assert puma.tree.body_mass(0) == 0.0


@pytest.mark.parametrize("conf", sorted(GRAVLOAD))
@pytest.mark.parametrize("backend", [PinocchioBackend, ReferenceBackend])
def test_published_gravity_load(puma, conf, backend):
    q, published = GRAVLOAD[conf]
    assert np.max(np.abs(backend(puma).gravity(q) - published)) <= HALF_UNIT


@pytest.mark.parametrize("backend", [PinocchioBackend, ReferenceBackend])
def test_published_inertia_matrix_at_qn(puma, backend):
    M = backend(puma).mass_matrix(QN) + np.diag(JM * GEAR ** 2)
    assert np.max(np.abs(M - INERTIA_QN)) <= HALF_UNIT


def test_backends_and_mujoco_agree(puma):
    assert max(self_check(puma, n_states=3).values()) <= 1e-9
    sim, P = MujocoSim(puma), PinocchioBackend(puma)
    rng = np.random.default_rng(3)
    for _ in range(3):
        q, v, a = puma.random_configuration(rng), rng.normal(size=6), rng.normal(size=6)
        tau = P.rnea(q, v, a)
        assert np.max(np.abs(sim.inverse_dynamics(q, v, a) - tau)) <= 1e-6 * max(1.0, np.max(np.abs(tau)))
