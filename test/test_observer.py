"""Generalized-momentum observer (issue 17): external joint torques, wrench estimate, collision flag.

Oracles: the analytic first-order response 1 - exp(-K t) (a held arm: momentum constant, so the
external torque is g(q) - tau exactly); the wrench the MuJoCo simulator applies (mapped to joints with
Pinocchio's Jacobian); and, in fast free motion with unmodelled joint friction, the friction the
simulator was given; the simulator's F/T sensor when the Cartesian law presses on a table using the
estimate as its measured wrench.  Measured figures are printed (`pytest -s`).
"""
import numpy as np
import pytest

from robot_dynamics.control import CartesianReference, State, make_law
from robot_dynamics.control.observer import MomentumObserver
from robot_dynamics.dynamics import Model, PinocchioBackend
from robot_dynamics.sim import MujocoSim

DT = 1e-3
K = 50.0                     # 1/s: time constant 20 ms
TCP = "panda_hand_tcp"
Q_HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
STEADY_REL_TOL = 0.01        # steady-state wrench error / |applied force| (push on a held arm)
STEP_ABS_TOL = 0.6           # N, |F_est - (1 - exp(-K t)) F| over the whole push (arm yields meanwhile)
LAG_TOL = 2.5e-3             # s, |t_63 - 1/K| (one control period of hold + discretisation)
FREE_THRESHOLD = 2.0         # N m, collision threshold in the fast free-motion test
VEL_FRAC = 0.85              # peak joint speed / velocity limit in that test


def panda():
    model = Model.from_robot("panda")
    return model, PinocchioBackend(model)


# ---------------------------------------------------------------- analytic (no simulator)
def test_first_order_response_and_hysteresis():
    """Arm held still (v = 0): p is constant, so tau_ext = g(q) - tau.  Feed tau = g - e(t): r must be
    e filtered by 1/(1 + s/K), sample for sample; the flag follows the threshold with hysteresis."""
    model, dyn = panda()
    q, v = Q_HOME, np.zeros(7)
    g = dyn.gravity(q).copy()
    thr = 4.0
    obs = MomentumObserver(model, dyn, gain=K, threshold=thr, release=0.5)
    obs.reset(q, v)
    e_dir = np.array([0.0, 1.0, 0.0, -1.0, 0.0, 0.0, 0.0])
    # e: 10 N m step for 0.2 s, then 3 N m (between release 2 and threshold 4) for 0.2 s, then 1 N m
    levels = [(10.0, 200), (3.0, 200), (1.0, 200)]
    r_pred = np.zeros(7)
    a = 1.0 - np.exp(-K * DT)
    worst, flags = 0.0, []
    for lev, n in levels:
        for _ in range(n):
            r = obs.update(q, v, g - lev * e_dir, DT)
            r_pred = r_pred + a * (lev * e_dir - r_pred)
            worst = max(worst, np.abs(r - r_pred).max())
            flags.append(obs.collision)
    # continuous-time check: after 1/K the step has reached 1 - 1/e of its height
    obs.reset(q, v)
    for _ in range(int(round(1.0 / K / DT))):
        r = obs.update(q, v, g - 10.0 * e_dir, DT)
    print(f"\nheld arm: max |r - first-order| {worst:.2e} N m; r(1/K) / step {r[1] / 10.0:.4f} "
          f"(1 - 1/e = {1 - np.exp(-1):.4f})")
    assert worst < 1e-9
    assert abs(r[1] / 10.0 - (1 - np.exp(-1))) < 1e-9
    flags = np.array(flags)
    n_on = np.flatnonzero(flags)[0] + 1                      # updates until the flag rose
    assert n_on == np.ceil(-np.log(1 - thr / 10.0) / (K * DT))   # first sample past the threshold
    assert flags[199] and flags[399]                         # 3 N m: above release, the flag holds
    assert not flags[-1] and obs.n_collisions == 1           # 1 N m: below release, cleared, one event


def test_wrench_least_squares_and_singularity():
    model, dyn = panda()
    rng = np.random.default_rng(3)
    obs = MomentumObserver(model, dyn, frame=TCP)
    for _ in range(5):
        q = model.random_configuration(rng, margin=0.3)
        F = rng.normal(size=6) * [20, 20, 20, 2, 2, 2]
        J = dyn.frame_jacobian(q, TCP, "local_world_aligned")
        assert np.allclose(obs.wrench(q, r=J.T @ F), F, atol=1e-8)
        Jl = dyn.frame_jacobian(q, TCP, "local")
        obs_l = MomentumObserver(model, dyn, frame=TCP, reference="local")
        assert np.allclose(obs_l.wrench(q, r=Jl.T @ F), F, atol=1e-8)
    # stretched arm (elbow at its limit, wrist straight): J nearly singular.  With damping switched on
    # below s = 0.2, the estimate stays bounded (|F| <= |r| / (2 lambda)) and still explains r in the
    # directions J sees well
    q = np.array([0.0, 0.0, 0.0, -0.0698, 0.0, 0.0, 0.0])
    J = dyn.frame_jacobian(q, TCP, "local_world_aligned")
    s = np.linalg.svd(J, compute_uv=False)
    obs = MomentumObserver(model, dyn, frame=TCP, damping_max=0.2, singular_eps=0.2)
    r = rng.normal(size=7) * 5.0
    Fs = obs.wrench(q, r=r)
    lam = obs.damping_max * np.sqrt(1 - (s[-1] / obs.singular_eps) ** 2)
    F_pinv = np.linalg.lstsq(J.T, r, rcond=None)[0]
    print(f"\nstretched arm: singular values of J {np.array2string(s, precision=3)}; |F| {np.linalg.norm(Fs):.1f} "
          f"(bound {np.linalg.norm(r) / (2 * lam):.1f}; undamped {np.linalg.norm(F_pinv):.1f})")
    assert s[-1] < obs.singular_eps
    assert np.all(np.isfinite(Fs)) and np.linalg.norm(Fs) <= np.linalg.norm(r) / (2 * lam) + 1e-9
    U, _, _ = np.linalg.svd(J)
    F_true = U[:, :2] @ np.array([10.0, -6.0])               # a wrench along well-conditioned directions
    assert np.linalg.norm(obs.wrench(q, r=J.T @ F_true) - F_true) < 0.02 * np.linalg.norm(F_true)


def test_bad_input():
    model, dyn = panda()
    for kw in ({"gain": -1.0}, {"gain": [1.0] * 3}, {"threshold": 0.0}, {"release": 1.0},
               {"frame": "nope"}, {"reference": "world"}, {"gain": float("nan")}):
        with pytest.raises(ValueError):
            MomentumObserver(model, dyn, **kw)
    obs = MomentumObserver(model, dyn)
    with pytest.raises(RuntimeError):
        obs.update(Q_HOME, np.zeros(7), np.zeros(7), DT)
    obs.reset(Q_HOME, np.zeros(7))
    g = dyn.gravity(Q_HOME).copy()
    obs.update(Q_HOME, np.zeros(7), g - 1.0, DT)
    r0 = obs.r.copy()
    for args in ((Q_HOME, np.zeros(7), g, 0.0), (Q_HOME, np.zeros(7), g + np.nan, DT),
                 (Q_HOME + np.nan, np.zeros(7), g, DT), (Q_HOME, np.zeros(6), g, DT)):
        with pytest.raises(ValueError):
            obs.update(*args)
    assert np.array_equal(obs.r, r0)                          # unchanged by the rejected inputs
    with pytest.raises(ValueError):
        obs.wrench(Q_HOME)                                    # no frame


# ---------------------------------------------------------------- closed loop in MuJoCo
def _run(sim, law, obs, n, on_step=None):
    for k in range(n):
        if on_step is not None:
            on_step(k)
        tau = law.compute(State(sim.q, sim.v, sim.t))
        sim.step(tau)
        obs.update(sim.q, sim.v, tau, DT)     # tau held during the step: what the motors applied
        yield k


@pytest.mark.slow
def test_push_on_held_arm():
    """Joint impedance holds the Panda; a push [f; n] is applied at the TCP for 1 s, then released."""
    model, dyn = panda()
    sim = MujocoSim(model)
    law = make_law("joint_impedance", model, dyn, {"k_gains": [300, 300, 200, 200, 50, 50, 20],
                                                   "damping_ratio": 1.0})
    sim.reset(Q_HOME)
    law.reset(State(sim.q, sim.v, sim.t))
    obs = MomentumObserver(model, dyn, gain=K, frame=TCP, threshold=3.0, release=0.5)
    obs.reset(sim.q, sim.v)
    F = np.array([10.0, -15.0, 20.0, 0.5, -0.5, 1.0])
    t_on, t_off = 200, 1200
    W, R, Rtrue, flags = [], [], [], []

    def push(k):
        if k == t_on:
            sim.apply_wrench(TCP, F)
        elif k == t_off:
            sim.clear_wrench()

    for k in _run(sim, law, obs, 1600, push):
        W.append(obs.wrench(sim.q))
        R.append(obs.r.copy())
        on = t_on <= k < t_off
        J = dyn.frame_jacobian(sim.q, TCP, "local_world_aligned")
        Rtrue.append(J.T @ F if on else np.zeros(7))
        flags.append(obs.collision)
    W, R, Rtrue, flags = map(np.array, (W, R, Rtrue, flags))
    t = (np.arange(len(W)) - t_on + 1) * DT                  # time since the push started acting
    during = slice(t_on, t_off)
    step = (1 - np.exp(-K * t[during]))[:, None] * F
    step_err = np.abs(W[during] - step).max()
    steady = slice(t_off - 300, t_off)
    steady_err = np.abs(W[steady] - F).max(axis=0)
    steady_rel = np.linalg.norm(W[steady] - F, axis=1).max() / np.linalg.norm(F[:3])
    tau_err = np.abs(R[steady] - Rtrue[steady]).max()
    fz = W[:, 2]
    t63 = (np.flatnonzero(fz[t_on:] > (1 - np.exp(-1)) * F[2])[0] + 1) * DT
    t_rel = (np.flatnonzero(np.abs(fz[t_off:]) < np.exp(-1) * F[2])[0] + 1) * DT
    flag_on = (np.flatnonzero(flags)[0] - t_on + 1) * DT
    flag_off = (np.flatnonzero(~flags[t_off:])[0] + 1) * DT
    print(f"\npush {F.tolist()} at the TCP, joint impedance, K = {K:g}/s: steady |F_est - F| per axis "
          f"{np.array2string(steady_err, precision=3)} ({100 * steady_rel:.2f} % of |f|), joint torques "
          f"{tau_err:.3f} N m; |F_est - (1 - e^-Kt) F| max {step_err:.3f}; t63 {1e3 * t63:.1f} ms "
          f"(1/K {1e3 / K:.0f} ms), release to 1/e {1e3 * t_rel:.1f} ms; flag on after {1e3 * flag_on:.0f} ms, "
          f"off {1e3 * flag_off:.0f} ms after release")
    assert steady_rel < STEADY_REL_TOL
    assert step_err < STEP_ABS_TOL
    assert abs(t63 - 1 / K) < LAG_TOL and abs(t_rel - 1 / K) < LAG_TOL
    assert not flags[:t_on].any() and flags[t_on + 50:t_off].all() and not flags[t_off + 150:].any()
    assert obs.n_collisions == 1


@pytest.mark.slow
def test_fast_free_motion_no_false_collision():
    """Computed torque (written out here: M (a_d + Kd e' + Kp e) + h) drives the Panda through
    q_d = q0 + A (1 - cos wt) / 2, peak joint speed VEL_FRAC of each joint's limit, the simulated joints
    with unmodelled viscous and Coulomb friction.  The residual must read that friction (bounded by what
    the simulator was given) and never cross the threshold."""
    model, dyn = panda()
    visc, coul = 0.2, 0.3                   # N m s/rad, N m: unmodelled in the controller's model
    sim = MujocoSim(model, damping=visc, friction=coul)
    w = np.pi                               # rad/s: a 2 s out-and-back on every joint at once
    A = 2 * VEL_FRAC * model.velocity_limits / w * np.array([1, 1, -1, 1, 1, 1, -1])
    assert np.all(Q_HOME + A < model.upper_limits) and np.all(Q_HOME + A > model.lower_limits)
    kp, kd = 400.0, 40.0
    sim.reset(Q_HOME)
    obs = MomentumObserver(model, dyn, gain=K, threshold=FREE_THRESHOLD, release=0.5)
    obs.reset(sim.q, sim.v)
    rmax, vmax = np.zeros(7), np.zeros(7)
    for k in range(4000):
        t = sim.t
        q_d = Q_HOME + A * (1 - np.cos(w * t)) / 2
        v_d = A * w * np.sin(w * t) / 2
        a_d = A * w * w * np.cos(w * t) / 2
        q, v = sim.q, sim.v
        tau = dyn.mass_matrix(q) @ (a_d + kd * (v_d - v) + kp * (q_d - q)) + dyn.nonlinear_effects(q, v)
        sim.step(tau)
        obs.update(sim.q, sim.v, tau, DT)
        rmax = np.maximum(rmax, np.abs(obs.r))
        vmax = np.maximum(vmax, np.abs(sim.v))
    vfrac = np.max(vmax / model.velocity_limits)
    fric_bound = visc * vmax + coul          # |friction torque| <= visc |v| + coul, per joint
    print(f"\nfast free motion, 4 s (peak |v| {100 * vfrac:.0f} % of the limit), unmodelled friction "
          f"{visc} N m s/rad + {coul} N m: max |r| per joint {np.array2string(rmax, precision=3)} N m "
          f"(friction bound {np.array2string(fric_bound, precision=2)}; threshold {FREE_THRESHOLD} N m); "
          f"collisions {obs.n_collisions}")
    assert 0.75 < vfrac < 1.0
    assert obs.n_collisions == 0
    assert np.all(rmax < fric_bound + 0.05) and rmax.max() > coul    # it does see the friction


@pytest.mark.slow
def test_cartesian_force_control_on_the_estimate():
    """The estimate in place of an F/T sensor: Cartesian impedance with z as a force axis presses the
    TCP (a 1 cm sphere) on a table with 10 N, the measured wrench being the observer's (world axes).
    Oracle: the simulator's F/T sensor at the TCP (massless beyond it, so it reads the contact wrench)."""
    model, dyn = panda()
    R, p = dyn.frame_placement(Q_HOME, TCP)
    R, p = R.copy(), p.copy()
    sim = MujocoSim(model, table=p[2] - 0.01 - 0.03, ft_sensor_frame=TCP)     # 3 cm below the sphere
    params = {"frame": TCP, "task.damping_ratio": 1.0, "nullspace_stiffness": 10.0,
              "force_axes": [False, False, True, False, False, False], "force_kp": 0.5, "force_ki": 5.0}
    for a in "xyz":
        params[f"task.k_pos_{a}"], params[f"task.k_rot_{a}"] = 500.0, 50.0
    law = make_law("cartesian_impedance", model, dyn, params)
    sim.reset(Q_HOME)
    law.reset(State(sim.q, sim.v, sim.t))
    f_d = 10.0
    law.set_reference(CartesianReference(R, p, wrench=np.array([0.0, 0.0, -f_d, 0.0, 0.0, 0.0])))
    obs = MomentumObserver(model, dyn, gain=K, frame=TCP)
    obs.reset(sim.q, sim.v)
    w, est, true = None, [], []
    for _ in range(3000):
        tau = law.compute(State(sim.q, sim.v, sim.t, wrench=w, wrench_frame="world"))
        sim.step(tau)
        obs.update(sim.q, sim.v, tau, DT)
        w = obs.wrench(sim.q)
        Rs, _ = sim.frame_pose(TCP)
        ft = sim.ft_wrench()
        est.append(w.copy())
        true.append(np.concatenate([Rs @ ft[:3], Rs @ ft[3:]]))
    est, true = np.array(est), np.array(true)
    err = np.abs(est[-500:] - true[-500:]).max(axis=0)
    print(f"\nCartesian force control on the estimate, F_d {f_d} N down: contact force z {true[-1, 2]:.3f} N "
          f"(estimate {est[-1, 2]:.3f}); |estimate - F/T| over the last 0.5 s per axis "
          f"{np.array2string(err, precision=3)}")
    assert abs(true[-1, 2] - f_d) < 0.02 * f_d              # the table pushes back with F_d
    assert err[:3].max() < 0.02 * f_d and err[3:].max() < 0.02
