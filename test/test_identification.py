"""Identification of the arm's own dynamics (robot_dynamics/dynamics/identification.py): the extended
regressor, the base parameters, weighted least squares, the excitation and the data pipeline.

Oracles: Pinocchio's RNEA plus the friction and rotor-inertia formula for the regressor; an SVD of the
same regressor (an independent rank) for the base set; and a MuJoCo plant built from the URDF with joint
damping, friction loss and armature the test draws, for the estimates (the values the test set), with
measurement noise the test adds.
"""
import numpy as np
import pytest

pytest.importorskip("pinocchio")
pytest.importorskip("mujoco")
pytest.importorskip("scipy")

from robot_dynamics.dynamics import Model, PinocchioBackend  # noqa: E402
from robot_dynamics.dynamics import identification as idn  # noqa: E402
from robot_dynamics.hardware.franka import scale_link_mass  # noqa: E402
from robot_dynamics.sim.mujoco_sim import MujocoSim  # noqa: E402

Q_START = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.6, 0.8])
NOISE_Q, NOISE_TAU = 1e-5, 0.02          # rad, N m: encoder and torque-sensor noise added to the data
WELL_IDENTIFIED = 1.0                     # %: relative std of a base parameter the motion excites well
JOINT_TOL = 0.05                          # relative: Ia, fv, fc vs the plant's (issue 21 asks 10 %)
VALIDATION_RATIO = 0.25                   # validation torque RMS, identified / URDF only (issue 21)


@pytest.fixture(scope="module")
def panda():
    model = Model.from_robot("panda")
    return model, PinocchioBackend(model)


def plant_values(n, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.05, 0.2, n), rng.uniform(0.1, 0.5, n), rng.uniform(0.2, 1.0, n)   # Ia, fv, fc


def record(model, backend, sim, excitation, periods, seed):
    """Run the excitation on the plant from Q_START; (t, q, tau) with noise, skipping nothing."""
    ca, cb, q0, om, _ = excitation
    sim.reset(Q_START)
    t = np.arange(int(periods * 2 * np.pi / om / sim.dt)) * sim.dt
    Qr, Vr, Ar = idn.fourier_trajectory(ca, cb, q0, om, t)
    t, q, tau = sim.track(backend, Qr, Vr, Ar)
    rng = np.random.default_rng(seed)
    return t, q + rng.normal(0, NOISE_Q, q.shape), tau + rng.normal(0, NOISE_TAU, tau.shape)


def test_regressor_is_rnea_plus_joint_terms(panda):
    model, P = panda
    rng = np.random.default_rng(3)
    n = model.nv
    Q, V, A = (rng.uniform(-1.5, 1.5, (6, n)) for _ in range(3))
    Ia, fv, fc = plant_values(n, 4)
    off = rng.uniform(-0.1, 0.1, n)
    theta = idn.prior_parameters(model, Ia=Ia, fv=fv, fc=fc, off=off)
    W = idn.regressor(model, Q, V, A)
    for k in range(6):
        expected = P.rnea(Q[k], V[k], A[k]) + Ia * A[k] + fv * V[k] + fc * np.tanh(V[k] / idn.FRICTION_BAND) + off
        assert np.max(np.abs(W[k] @ theta - expected)) < 1e-10
    Wj = idn.regressor(model, Q, V, A, inertial=False)
    assert np.max(np.abs(Wj @ theta[-4 * n:] - (W @ theta - np.array([P.rnea(*x) for x in zip(Q, V, A)])))) < 1e-10


def test_base_parameters_regroup_exactly(panda):
    model, _ = panda
    base = idn.base_parameters(model)
    n_all = 10 * model.nv + 4 * model.nv
    # the rank from an SVD of the regressor on other states
    rng = np.random.default_rng(11)
    Q = rng.uniform(model.lower_limits, model.upper_limits, (150, model.nv))
    V, A = rng.uniform(-2, 2, (150, model.nv)), rng.uniform(-5, 5, (150, model.nv))
    W = idn.regressor(model, Q, V, A)
    sv = np.linalg.svd(W.reshape(-1, n_all), compute_uv=False)
    assert base.r == int(np.sum(sv > 1e-8 * sv[0]))
    for seed in range(3):                          # any theta: W theta = W_b beta
        theta = np.random.default_rng(seed).normal(size=n_all)
        assert np.max(np.abs(W @ theta - W[:, :, base.base] @ base.beta(theta))) < 1e-9 * np.max(np.abs(W @ theta))
    # the first joint's rotor inertia and its link's Izz act on q''_1 only: one base parameter of both
    names = base.names
    i_ia, i_zz = names.index("panda_joint1.Ia"), names.index("panda_link1.Izz")
    groups = [g for g in base.regrouping() if "panda_joint1.Ia" in g.split() or "panda_link1.Izz" in g.split()]
    assert len(groups) == 1 and "panda_joint1.Ia" in groups[0] and "panda_link1.Izz" in groups[0], groups
    assert (i_ia in base.base) != (i_zz in base.base)


def test_fourier_excitation_rests_at_its_ends_within_the_limits(panda):
    model, _ = panda
    ca, cb, q0, om, cond = idn.fourier_excitation(model, Q_START, inertial=False, a_max=6.0, candidates=20)
    t = np.linspace(0, 2 * np.pi / om, 2001)
    q, v, a = idn.fourier_trajectory(ca, cb, q0, om, t)
    for k in (0, -1):
        assert np.max(np.abs(q[k] - Q_START)) < 1e-9 and np.max(np.abs(v[k])) < 1e-9 and np.max(np.abs(a[k])) < 1e-9
    assert np.all(q <= model.upper_limits - 0.1 + 1e-9) and np.all(q >= model.lower_limits + 0.1 - 1e-9)
    assert np.all(np.max(np.abs(v), axis=0) <= 0.5 * model.velocity_limits * (1 + 1e-4))
    assert np.all(np.max(np.abs(a), axis=0) <= 6.0 * (1 + 1e-4))
    assert np.isfinite(cond) and cond < 20.0
    # finite differences of q give v and a
    h = t[1] - t[0]
    assert np.max(np.abs(np.gradient(q, h, axis=0)[5:-5] - v[5:-5])) < 1e-3 * np.max(np.abs(v))


def test_derivatives_of_a_sampled_sine():
    t = np.arange(3000) * 1e-3
    w = 2 * np.pi * 1.5
    q = np.c_[np.sin(w * t), 0.5 * np.cos(2 * w * t)]
    qf, v, a, _ = idn.derivatives(t, q, cutoff=40.0)
    s = slice(300, -300)                                  # the filter's ends
    assert np.max(np.abs(v[s, 0] - w * np.cos(w * t[s]))) < 2e-3 * w
    assert np.max(np.abs(a[s, 1] + 0.5 * (2 * w) ** 2 * np.cos(2 * w * t[s]))) < 5e-3 * 0.5 * (2 * w) ** 2
    with pytest.raises(ValueError, match="uniformly"):
        idn.derivatives(np.r_[t[:10], t[11:]], np.r_[q[:10], q[11:]])


def identified_plant(model, P, candidates, periods):
    """The plant this module draws (seed 7: Ia, fv, fc per joint) in MuJoCo, a Fourier excitation of it
    (`candidates`, `periods`) recorded and identified with the URDF's inertials trusted:
    ((Ia, fv, fc), sim, excitation, estimate)."""
    Ia, fv, fc = plant_values(model.nv, 7)
    sim = MujocoSim(model, damping=fv, friction=fc, armature=Ia, limits=False)
    exc = idn.fourier_excitation(model, Q_START, inertial=False, a_max=6.0, candidates=candidates, seed=1)
    t, q, tau = record(model, P, sim, exc, periods, seed=2)
    W, y, mask = idn.dataset(model, t, q, tau, inertial=False)
    return (Ia, fv, fc), sim, exc, idn.solve(W, y, idn.base_parameters(model, inertial=False), mask=mask)


def test_identifies_friction_and_rotor_inertia_on_a_mujoco_plant(panda):
    """The plant: the URDF in MuJoCo with per-joint armature, damping and friction loss the test draws;
    the URDF's inertials trusted (inertial=False).  Ia, fv, fc of every joint within JOINT_TOL; on a
    second trajectory the identification did not see, the torque RMS at most VALIDATION_RATIO of the
    URDF-only model's."""
    model, P = panda
    (Ia, fv, fc), sim, _, est = identified_plant(model, P, candidates=30, periods=2)
    terms = est.joint_terms(model)
    for name, truth in (("Ia", Ia), ("fv", fv), ("fc", fc)):
        val, sd = terms[name]
        err = np.abs(val / truth - 1.0)
        assert np.all(err < JOINT_TOL), f"{name}: {np.round(val, 4)} vs {np.round(truth, 4)} ({np.round(100 * err, 1)} %)"
        assert np.all(sd < 0.05 * truth), f"{name}: std {sd}"
    # validation on another excitation
    exc2 = idn.fourier_excitation(model, Q_START, inertial=False, a_max=5.0, candidates=5, seed=9)
    t2, q2, tau2 = record(model, P, sim, exc2, 1, seed=3)
    W2, y2, _ = idn.dataset(model, t2, q2, tau2, inertial=False)
    rms_urdf = np.sqrt(np.mean(y2 ** 2, axis=0))                        # tau - URDF model
    rms_ident = np.sqrt(np.mean((y2 - est.predict(W2)) ** 2, axis=0))
    assert np.all(rms_ident <= VALIDATION_RATIO * rms_urdf), (rms_ident, rms_urdf)


def test_the_identification_written_as_parameters_drives_the_controller(panda, tmp_path):
    """controller_params / write_params_yaml: the file a user loads with --params-file; read back by
    the YAML reader, its values build the ControlLoop, whose law compensates the identified friction
    (its friction_torque equals the estimate's) and whose model carries the identified armature on the
    joints it names (the file in a `joints` order unlike the model's)."""
    import yaml
    from robot_dynamics.control import ControlLoop
    model, P = panda
    (Ia, fv, fc), _, exc, est = identified_plant(model, P, candidates=10, periods=1)
    joints = [model.joint_names[i] for i in (6, 5, 4, 3, 2, 1, 0)]
    params, notes = idn.controller_params(est, model, joints, laws=("joint_impedance",), scale=0.8)
    assert notes == []
    path = idn.write_params_yaml(tmp_path / "friction.yaml", params, node="/torque_controller",
                                 comment="identified on a MuJoCo plant")
    loaded = yaml.safe_load(open(path))["/torque_controller"]["ros__parameters"]
    fresh = Model.from_robot("panda")
    loop = ControlLoop.from_params(fresh, {"controller": "joint_impedance", "joints": joints, **loaded})
    vals = est.joint_terms(model)
    np.testing.assert_allclose(fresh.armature, vals["Ia"][0], rtol=1e-12)
    for v in (np.full(model.nv, 0.3), np.linspace(-1, 1, model.nv)):
        expected = 0.8 * (vals["fv"][0] * v + vals["fc"][0] * np.tanh(v / idn.FRICTION_BAND) + vals["off"][0])
        np.testing.assert_allclose(loop.law.friction_torque(v), expected, rtol=1e-12, atol=1e-15)
    # a rotor inertia regrouped with its links' inertials (joints 1 and 2 when the inertials are identified
    # too) is written as the group's estimate less the URDF's part of it, said: on torques of a plant with
    # the URDF's inertials, the plant's own Ia.  Without a prior to take that part from: 0, said.
    W_full = idn.regressor(model, *[np.atleast_2d(x) for x in idn.fourier_trajectory(*exc[:4], np.linspace(0, 5, 300))])
    y_full = W_full @ idn.prior_parameters(model, Ia=Ia, fv=fv, fc=fc)
    base = idn.base_parameters(model)
    alone = idn.solve(W_full, y_full, base).joint_terms(model)["Ia"][0]
    regrouped = [j for j in range(model.nv) if not np.isfinite(alone[j])]
    assert regrouped == [0, 1], regrouped
    full = idn.solve(W_full, y_full, base, theta_prior=idn.prior_parameters(model))
    p2, notes2 = idn.controller_params(full, model)
    np.testing.assert_allclose(p2["armature"], Ia, rtol=1e-8)
    assert all(any(f"panda_joint{j + 1}.Ia: regrouped" in n_ for n_ in notes2) for j in regrouped), notes2
    p3, notes3 = idn.controller_params(idn.solve(W_full, y_full, base), model)
    assert p3["armature"][0] == 0.0 and any("panda_joint1.Ia: not identified alone" in n_ for n_ in notes3), notes3


def test_full_identification_recovers_a_perturbed_link(panda):
    """The plant's link 5 has 20 % more mass and inertia than the URDF says; all base parameters
    (inertials, rotor inertia, friction) identified together: the base parameters of link 5 that the
    motion excites well (relative std < WELL_IDENTIFIED) come out as the plant's, within 5 %, where the
    prior (URDF) ones are 5-20 % off.  (Less excited ones carry a bias of several std: seen 8 % on Ixz
    at 1.6 % std, from the friction's stick zones, which the smooth sign does not model.)"""
    model, P = panda
    Ia, fv, fc = plant_values(model.nv, 8)
    heavy = Model.from_urdf_string(scale_link_mass(model.urdf, "panda_link5", 1.2))
    sim = MujocoSim(heavy, damping=fv, friction=fc, armature=Ia, limits=False)
    exc = idn.fourier_excitation(model, Q_START, inertial=True, a_max=6.0, candidates=30, seed=4)
    t, q, tau = record(model, P, sim, exc, 3, seed=5)
    base = idn.base_parameters(model)
    W, y, mask = idn.dataset(model, t, q, tau)
    est = idn.solve(W, y, base, theta_prior=idn.prior_parameters(model), mask=mask)
    true_beta = base.beta(idn.prior_parameters(heavy, Ia=Ia, fv=fv, fc=fc))
    prior_beta = base.beta(idn.prior_parameters(model, Ia=Ia, fv=fv, fc=fc))
    names = [base.names[i] for i in base.base]
    link5 = [k for k, nm in enumerate(names) if nm.startswith("panda_link5.")
             and est.rel_std[k] < WELL_IDENTIFIED and abs(true_beta[k] - prior_beta[k]) > 0.05 * abs(true_beta[k])]
    assert len(link5) >= 3, [(names[k], est.rel_std[k]) for k in range(len(names)) if names[k].startswith("panda_link5")]
    for k in link5:
        assert abs(est.beta[k] / true_beta[k] - 1.0) < 0.05, (names[k], est.beta[k], true_beta[k], prior_beta[k])
    assert not idn.consistency(model, idn.prior_parameters(model, Ia=Ia, fv=fv, fc=fc))
    # the full parameters reconstructed nearest the prior reproduce the estimate, and the prior itself
    th = est.theta()
    assert np.max(np.abs(base.beta(th) - est.beta)) < 1e-9 * np.max(np.abs(est.beta))
    rng = np.random.default_rng(1)                   # any other reproduction lies farther from the prior
    G = np.zeros((base.r, len(th)))
    G[:, base.base], G[:, base.dependent] = np.eye(base.r), base.K
    for _ in range(3):
        r = rng.normal(size=len(th)) * 1e-3
        other = th + r - np.linalg.pinv(G) @ (G @ r)
        assert np.max(np.abs(base.beta(other) - est.beta)) < 1e-9 * np.max(np.abs(est.beta))
        assert np.linalg.norm(other - est.theta_prior) >= np.linalg.norm(th - est.theta_prior)
    prior_est = idn.Identification(base, base.beta(est.theta_prior), est.std, est.sigma, est.cond, est.rows,
                                   theta_prior=est.theta_prior)
    assert np.max(np.abs(prior_est.theta() - est.theta_prior)) < 1e-9


def test_consistency_names_what_no_body_has(panda):
    model, _ = panda
    th = idn.prior_parameters(model, Ia=0.1, fv=0.1, fc=0.3)
    assert idn.consistency(model, th) == []
    bad = th.copy()
    bad[10 * 2] = -1.0                                    # link 3's mass
    k = model.joint_names.index("panda_joint6")
    bad[10 * model.nv + 2 * model.nv + k] = -0.2          # joint 6's Coulomb friction
    bad[10 * 4 + 9] = 0.0                                 # link 5's Izz about its origin
    report = idn.consistency(model, bad)
    assert any("panda_link3" in r and "mass" in r for r in report), report
    assert any("panda_joint6" in r and "fc" in r for r in report), report
    assert any("panda_link5" in r for r in report), report


def test_bad_data_refused_with_a_reason(panda):
    model, P = panda
    n = model.nv
    rng = np.random.default_rng(0)
    Q, V, A = (rng.uniform(-1, 1, (50, n)) for _ in range(3))
    base = idn.base_parameters(model, inertial=False)
    W = idn.regressor(model, Q, V, A, inertial=False)
    y = rng.normal(size=(50, n))
    y[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        idn.solve(W, y, base)
    V[:, 4] = 0.0                                         # joint 5 never moves
    A[:, 4] = 0.0
    W = idn.regressor(model, Q, V, A, inertial=False)
    with pytest.raises(ValueError, match="does not excite.*panda_joint5"):
        idn.solve(W, rng.normal(size=(50, n)), base)
    with pytest.raises(ValueError, match="more data"):
        idn.solve(W[:2], rng.normal(size=(2, n)), base)
