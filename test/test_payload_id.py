"""Payload identification (issue 17): mass, centre of mass and inertia of a load at a frame.

Oracles: Pinocchio's RNEA with and without the payload attached (the regressor), a Monte Carlo over
synthetic noisy samples (the reported standard deviation), and the MuJoCo simulator carrying a payload
the test itself set (identification from its F/T sensor and its joint efforts).  Measured figures are
printed (`pytest -s`).
"""
import numpy as np
import pytest

from robot_dynamics.control.payload_id import (ExcitationTrajectory, PayloadIdentifier, inertial_params,
                                               load_regressor, static_poses)
from robot_dynamics.dynamics import Model, PinocchioBackend
from robot_dynamics.sim import MujocoSim

DT = 1e-3
TCP = "panda_hand_tcp"
Q_HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
MASS_REL_TOL = 0.02          # |m_est / m - 1|  (the figure)
COM_TOL = 5e-3               # m, |c_est - c|   (the figure)
INERTIA_REL_TOL = 0.05       # |I_est - I| / |I| (Frobenius), excitation trajectory with the F/T sensor
PAYLOADS = [dict(mass=0.5, com=[0.04, -0.03, 0.02], inertia=[2e-3, 0, 0, 1.5e-3, 0, 1e-3]),
            dict(mass=3.0, com=[-0.03, 0.02, 0.08], inertia=[0.02, 1e-3, 0, 0.015, 2e-3, 0.01])]
KP = np.array([600.0, 600.0, 500.0, 500.0, 100.0, 100.0, 50.0])     # joint PD + g(q) used to hold poses
KD = np.array([50.0, 50.0, 40.0, 40.0, 10.0, 8.0, 5.0])


def panda():
    model = Model.from_robot("panda")
    return model, PinocchioBackend(model)


# ---------------------------------------------------------------- the regressor (no simulator)
def test_regressor_against_pinocchio_rnea():
    """RNEA(model) - RNEA(model + payload) = J^T A phi at random (q, v, a), moving and static."""
    model, dyn = panda()
    loaded = Model.from_robot("panda")
    p = PAYLOADS[1]
    loaded.attach_payload(TCP, **p)
    dyn_l = PinocchioBackend(loaded)
    pid = PayloadIdentifier(model, dyn, TCP)
    phi = inertial_params(p["mass"], p["com"], p["inertia"])
    rng = np.random.default_rng(5)
    worst = 0.0
    for k in range(6):
        q = model.random_configuration(rng, margin=0.2)
        v, a = (rng.normal(size=7), rng.normal(size=7) * 3) if k else (np.zeros(7), np.zeros(7))
        J = dyn.frame_jacobian(q, TCP, "local").copy()
        A = load_regressor(*pid._kinematics(q, v, a))
        diff = dyn.rnea(q, v, a).copy() - dyn_l.rnea(q, v, a)
        worst = max(worst, np.abs(J.T @ A @ phi - diff).max())
    print(f"\nregressor vs Pinocchio RNEA with the payload attached: max error {worst:.1e} N m")
    assert worst < 1e-9


def test_reported_std_matches_monte_carlo():
    """Synthetic F/T samples (exact regressor + Gaussian noise of known sigma) at 10 static poses:
    the std the solver reports from one run's residuals matches the spread over 300 runs."""
    model, dyn = panda()
    p = PAYLOADS[0]
    phi = inertial_params(p["mass"], p["com"])
    poses = static_poses(model, Q_HOME, n=10)
    rng = np.random.default_rng(7)
    sigma = 0.3                                              # N and N m
    pid = PayloadIdentifier(model, dyn, TCP)
    clean = [load_regressor(*pid._kinematics(q, None, None)) @ phi for q in poses]
    ests, stds = [], []
    for _ in range(300):
        pid.clear()
        for q, w in zip(poses, clean):
            pid.add_ft(q, w + rng.normal(size=6) * sigma)
        e = pid.solve()
        ests.append([e.mass, *e.com])
        stds.append([e.mass_std, *e.com_std])
    ests, stds = np.array(ests), np.array(stds)
    emp, rep = ests.std(axis=0), np.median(stds, axis=0)
    bias = ests.mean(0) - [p["mass"], *p["com"]]
    print(f"\nstd of (m, c): empirical {np.array2string(emp, precision=4)}, reported (median) "
          f"{np.array2string(rep, precision=4)}; mean error {np.array2string(bias, precision=4)}")
    assert np.all(np.abs(rep / emp - 1) < 0.2)
    assert abs(ests[:, 0].mean() - p["mass"]) < 3 * emp[0] / np.sqrt(300) + 1e-3


def test_bad_input():
    model, dyn = panda()
    pid = PayloadIdentifier(model, dyn, TCP)
    with pytest.raises(ValueError):
        pid.solve()                                          # no samples
    with pytest.raises(ValueError):
        pid.add_ft(Q_HOME, [0, 0, np.nan, 0, 0, 0])
    with pytest.raises(ValueError):
        pid.add_torques(Q_HOME, np.zeros(6))
    with pytest.raises(ValueError):
        pid.add_ft(Q_HOME + np.nan, np.zeros(6))
    with pytest.raises(ValueError):
        PayloadIdentifier(model, dyn, "nope")
    with pytest.raises(ValueError):
        PayloadIdentifier(model, dyn, TCP, tool=[1.0, 2.0])
    phi = inertial_params(1.0, [0.0, 0.0, 0.05])
    A = load_regressor(*pid._kinematics(Q_HOME, None, None))
    pid.add_ft(Q_HOME, A @ phi)
    with pytest.raises(ValueError, match="separate"):
        pid.solve()                                          # one orientation: m c along g unseen
    pid4 = PayloadIdentifier(model, dyn, TCP)
    for q in static_poses(model, Q_HOME, n=4):
        pid4.add_ft(q, load_regressor(*pid4._kinematics(q, None, None)) @ phi)
    assert abs(pid4.solve().mass - 1.0) < 1e-12
    with pytest.raises(ValueError, match="not excited"):
        pid4.solve(inertia=True)                             # static: no rotation, no inertia
    tq = PayloadIdentifier(model, dyn, TCP)
    tq.add_torques(Q_HOME, dyn.gravity(Q_HOME))
    with pytest.raises(ValueError, match="rows"):
        tq.solve(inertia=True)                               # 7 rows for 10 parameters
    with pytest.raises(ValueError, match="ft_bias"):
        PayloadIdentifier(model, dyn, TCP).solve(ft_bias=True)
    pid = PayloadIdentifier(model, dyn, TCP)
    for q in static_poses(model, Q_HOME, n=6):
        pid.add_ft(q, np.zeros(6))
    with pytest.raises(ValueError, match="not positive"):
        pid.solve()                                          # nothing carried


# ---------------------------------------------------------------- in MuJoCo
def _pd(sim, dyn, q_d, v_d=None):
    v_d = np.zeros(7) if v_d is None else v_d
    q, v = sim.q, sim.v
    return dyn.gravity(q) + KP * (q_d - q) + KD * (v_d - v)


def _visit(sim, dyn, poses, at_rest, move_time=0.6, window=50, v_rest=1e-3, max_hold=4.0):
    """Move through `poses` (quintic, move_time s each) with PD + g(q) of the payload-free model; at
    each, hold until |v| < v_rest for `window` steps, then call at_rest()."""
    prev = sim.q
    n_move = int(round(move_time / DT))
    for q_p in poses:
        for k in range(1, n_move + 1):
            s = k / n_move
            sim.step(_pd(sim, dyn, prev + (q_p - prev) * (10 * s ** 3 - 15 * s ** 4 + 6 * s ** 5)))
        calm = 0
        for _ in range(int(max_hold / DT)):
            sim.step(_pd(sim, dyn, q_p))
            calm = calm + 1 if np.abs(sim.v).max() < v_rest else 0
            if calm >= window:
                break
        at_rest()
        prev = q_p


@pytest.mark.slow
@pytest.mark.parametrize("payload", PAYLOADS, ids=["0.5kg", "3kg"])
def test_static_identification_in_mujoco(payload):
    """8 static poses; the F/T sensor at the TCP and the joint efforts, separately and together; and the
    F/T sensor with a bias the test adds (estimated alongside).  Then the estimate is attached and the
    model's gravity torques compared with MuJoCo's."""
    model, dyn = panda()
    sim = MujocoSim(model, ft_sensor_frame=TCP, payload=dict(frame=TCP, **payload))
    sim.reset(Q_HOME)
    bias = np.array([1.5, -2.0, 0.8, 0.1, -0.05, 0.08])
    ft, tau, ftb = (PayloadIdentifier(model, dyn, TCP) for _ in range(3))
    both = PayloadIdentifier(model, dyn, TCP, sigma_ft=0.1, sigma_tau=0.1)

    def sample():
        q, w, e = sim.q, sim.ft_wrench(), sim.measured_effort
        ft.add_ft(q, w)
        tau.add_torques(q, e)
        both.add_ft(q, w)
        both.add_torques(q, e)
        ftb.add_ft(q, w + bias)

    _visit(sim, dyn, static_poses(model, Q_HOME, n=8), sample)
    m, c = payload["mass"], np.array(payload["com"])
    rows = []
    for name, pid, kw in (("F/T", ft, {}), ("joint torques", tau, {}), ("both", both, {}),
                          ("F/T + bias", ftb, {"ft_bias": True})):
        e = pid.solve(**kw)
        rows.append((name, e))
        print(f"\n{m} kg, {name:14s}: mass err {100 * (e.mass / m - 1):+.3f} % (std {100 * e.mass_std / m:.3f} %), "
              f"com err {1e3 * np.linalg.norm(e.com - c):.2f} mm (std {1e3 * np.linalg.norm(e.com_std):.2f}), "
              f"cond {e.cond:.1f}, residual rms {e.residual_rms}", end="")
        assert abs(e.mass / m - 1) < MASS_REL_TOL, name
        assert np.linalg.norm(e.com - c) < COM_TOL, name
    assert np.allclose(rows[3][1].bias, bias, atol=[0.1, 0.1, 0.1, 0.01, 0.01, 0.01])
    # attach: the model's gravity torques now match MuJoCo's (passive terms off) at fresh poses
    rng = np.random.default_rng(2)
    qs = [model.random_configuration(rng, margin=0.3) for _ in range(5)]
    err = lambda: max(np.abs(dyn.gravity(q) - sim.inverse_dynamics(q, np.zeros(7), np.zeros(7))).max()  # noqa
                      for q in qs)
    before = err()
    rows[2][1].attach(model)
    after = err()
    print(f"\n{m} kg attached: |g_model - g_mujoco| max {before:.3f} -> {after:.4f} N m")
    assert after < 0.05 * before and after < 0.05


@pytest.mark.slow
def test_excitation_identifies_inertia():
    """The bounded excitation trajectory, tracked by computed torque (payload-free model) in MuJoCo:
    the F/T sensor with the motion (accelerations from central differences of the measured velocity)
    gives mass, com and the rotational inertia; so do the joint torques.  The trajectory
    stays within its position, velocity and acceleration bounds."""
    model, dyn = panda()
    p = PAYLOADS[1]
    sim = MujocoSim(model, ft_sensor_frame=TCP, payload=dict(frame=TCP, **p))
    vel_frac, acc_max, margin = 0.4, 5.0, 0.1
    ex = ExcitationTrajectory(model, Q_HOME, duration=8.0, amplitude=1.0, vel_frac=vel_frac,
                              acc_max=acc_max, margin=margin)
    ts = np.arange(0.0, 8.0 + DT, DT)
    Q, V, A = (np.array(x) for x in zip(*(ex.sample(t) for t in ts)))
    assert np.all(Q >= model.lower_limits + margin - 1e-12) and np.all(Q <= model.upper_limits - margin + 1e-12)
    assert np.all(np.abs(V) <= vel_frac * model.velocity_limits + 1e-12) and np.abs(A).max() <= acc_max
    assert np.allclose(Q[0], Q_HOME) and np.allclose(Q[-1], Q_HOME) and np.abs(V[[0, -1]]).max() < 1e-12
    assert np.allclose(np.gradient(Q, DT, axis=0)[1:-1], V[1:-1], atol=1e-4)      # v, a consistent with q
    assert np.allclose(np.gradient(V, DT, axis=0)[1:-1], A[1:-1], atol=1e-2)       # (jerk jumps at the fades)
    sim.reset(Q_HOME)
    log = []
    for k in range(len(ts) - 1):
        q, v = sim.q, sim.v
        tau = dyn.mass_matrix(q) @ (A[k] + 40 * (V[k] - v) + 400 * (Q[k] - q)) + dyn.nonlinear_effects(q, v)
        sim.step(tau)
        log.append((sim.q, sim.v, sim.ft_wrench(), sim.measured_effort))
        assert np.all(sim.q > model.lower_limits) and np.all(sim.q < model.upper_limits)
    ft, tq = PayloadIdentifier(model, dyn, TCP), PayloadIdentifier(model, dyn, TCP)
    track = 0.0
    for k in range(1, len(log) - 1, 10):
        q, v, w, e = log[k]
        a = (log[k + 1][1] - log[k - 1][1]) / (2 * DT)
        ft.add_ft(q, w, v, a)
        tq.add_torques(q, e, v, a)
        track = max(track, np.abs(q - Q[k + 1]).max())
    e, et = ft.solve(), tq.solve()                          # moving samples: inertia included
    biased = tq.solve(inertia=False)                        # ... and what leaving it out costs
    Ic = inertial_params(0.0, inertia=p["inertia"])[4:]
    Ic = np.array([[Ic[0], Ic[1], Ic[2]], [Ic[1], Ic[3], Ic[4]], [Ic[2], Ic[4], Ic[5]]])
    i_err = np.linalg.norm(e.inertia - Ic) / np.linalg.norm(Ic)
    print(f"\nexcitation 8 s (peak |v| {100 * np.max(np.abs(V) / model.velocity_limits):.0f} % of the limits, "
          f"|a| <= {np.abs(A).max():.1f} rad/s^2, tracking <= {track:.1e} rad): F/T mass err "
          f"{100 * (e.mass / p['mass'] - 1):+.3f} %, com err {1e3 * np.linalg.norm(e.com - p['com']):.3f} mm, "
          f"inertia err {100 * i_err:.2f} % (cond {e.cond:.0f}); joint torques mass err "
          f"{100 * (et.mass / p['mass'] - 1):+.3f} %, com err {1e3 * np.linalg.norm(et.com - p['com']):.3f} mm, "
          f"inertia err {100 * np.linalg.norm(et.inertia - Ic) / np.linalg.norm(Ic):.2f} % (without the inertia "
          f"terms: com err {1e3 * np.linalg.norm(biased.com - p['com']):.2f} mm)")
    assert abs(e.mass / p["mass"] - 1) < MASS_REL_TOL and np.linalg.norm(e.com - p["com"]) < COM_TOL
    assert abs(et.mass / p["mass"] - 1) < MASS_REL_TOL and np.linalg.norm(et.com - p["com"]) < COM_TOL
    assert i_err < INERTIA_REL_TOL and e.inertia is not None and et.inertia is not None
    assert e.attach(model) is True                          # a physical inertia: attached with it
