"""Friction compensation that holds (issue 43), ROS-free, on MuJoCo plants whose dry friction the test
sets (test/friction_rig.py: the Panda with per-joint rotor inertia, damping and friction loss, its
softness MuJoCo's default or sharp).  Oracles: the friction formula with the parameters the test sets,
the plant's friction curve measured directly (a velocity servo, MuJoCo's constraint force), the
plant's own parameters, the configured stiffness."""
import numpy as np
import pytest

pytest.importorskip("mujoco")
pytest.importorskip("scipy")

from friction_rig import (FLANGE, FRANKA, K_PUSH, PLANT, Q_FRANKY, SHARP, SOFT, Plant,  # noqa: E402
                          cartesian_loop, drive, file_loop, identify, law_friction, measured_friction, push,
                          random_plant)

from robot_dynamics.control import ControlLoop, make_law  # noqa: E402
from robot_dynamics.dynamics import Model, make_backend  # noqa: E402
from robot_dynamics.dynamics import friction_bands as fb  # noqa: E402

CREEP = 1e-3                      # rad/s: |dq| at rest (the figure)
SPEEDS = [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]      # servo targets [rad/s]


@pytest.fixture(scope="module")
def model():
    return Model.from_robot("panda")


@pytest.fixture(scope="module")
def soft_run(model):
    """The identification the loop runs on the plant with MuJoCo's default (soft) friction loss."""
    run = identify(model, SOFT)
    assert run.ok, run.message
    return run


def test_compensation_is_at_most_the_model_and_old_files_load(model):
    """c(v) has the model's sign and at most its size at every speed (v c <= v f), 1 / margin of its
    dry part near rest, the model itself once its tanh has risen past |v| / (margin vs); the per-joint scale is used where set, the scalar
    friction_smoothing elsewhere (files written before it was identified)."""
    dyn = make_backend(model, "pinocchio")
    rng = np.random.default_rng(4)
    fv, fc = rng.uniform(0, 0.5, 7), rng.uniform(0.1, 1.0, 7)
    vs = np.array([0.004, 0.0, 0.03, 0.0, 0.1, 0.002, 0.05])        # 0: friction_smoothing
    law = make_law("gravity_compensation", model, dyn, {
        "friction_compensation": True, "friction_viscous": fv.tolist(), "friction_coulomb": fc.tolist(),
        "friction_velocity_scale": vs.tolist(), "friction_smoothing": 0.02})
    band = np.where(vs > 0, vs, 0.02)
    v = np.concatenate([-np.geomspace(1e-6, 10, 200)[::-1], np.geomspace(1e-6, 10, 200)])[:, None]
    f = fv * v + fc * np.tanh(v / band)                    # the model, written here
    c = law.friction_torque(v)
    assert np.all(v * c >= 0) and np.all(v * c <= v * f + 1e-15)
    small = np.abs(v[:, 0]) < 1e-5
    np.testing.assert_allclose((c - fv * v)[small] / (f - fv * v)[small], 1 / 1.5, rtol=1e-4)   # margin 1.5
    risen = np.abs(v) / band > 1.5                         # tanh(x) < x / 1.5 there: the model itself
    np.testing.assert_allclose(c[risen], f[risen], rtol=1e-12)
    # an old file: the scalar band alone, margin 1 gives exactly the old compensation
    law.set_params({"friction_velocity_scale": 0.0, "friction_band_margin": 1.0, "friction_smoothing": 0.01})
    np.testing.assert_allclose(law.friction_torque(v), fv * v + fc * np.tanh(v / 0.01), rtol=1e-12)
    with pytest.raises(ValueError, match="friction_band_margin"):
        law.set_params({"friction_band_margin": 0.5})
    with pytest.raises(ValueError, match="friction_velocity_scale"):
        law.set_params({"friction_velocity_scale": [-0.01] * 7})


def test_the_fitted_velocity_scale_follows_the_plants_friction_curve(model, soft_run):
    """The identified fc tanh(v / vs) + fv v against the plant's friction measured at steady speeds:
    within 20 % of fc at every speed for every joint whose vs is above the floor (the fixed 0.01 rad/s
    band: 35-77 % off); and the compensation as written (margin 1.5) below the measured friction at every
    speed of every joint (within 1 % of fc: the estimate's own error at speed, where c = f): the
    compensated joint dissipates.  (The joints whose ramp is steeper than
    the floor band_min 0.002 rad/s have vs at the floor: a model below the plant there, the safe side.)"""
    terms = soft_run.estimate.joint_terms(model)
    fv, fc, vs = terms["fv"][0], terms["fc"][0], soft_run.bands
    comp = law_friction(soft_run.params)
    assert np.allclose(comp["friction_velocity_scale"], vs) and comp["friction_compensation"]
    law = make_law("joint_impedance", model, make_backend(model, "pinocchio"), comp)   # the file as written
    worst_old = 0.0
    for j in range(7):
        m = measured_friction(model, j, SPEEDS)
        v, f = m[:, 0], m[:, 1]
        assert np.all(v > 0) and v.max() > 0.1, m
        fit = fv[j] * v + fc[j] * np.tanh(v / vs[j])
        vj = np.zeros((len(v), 7))
        vj[:, j] = v
        c = law.friction_torque(vj)[:, j] - comp["friction_offset"][j]
        old = fv[j] * v + fc[j] * np.tanh(v / 0.01)
        true_fc = PLANT["friction"][j]
        assert np.all(c <= f + 0.01 * true_fc), (j, np.round(c, 3), np.round(f, 3))
        if vs[j] > 1.5 * 0.002:
            assert np.max(np.abs(fit - f)) < 0.2 * true_fc, (j, vs[j], np.round(fit, 3), np.round(f, 3))
        worst_old = max(worst_old, np.max(old - f) / true_fc)
    assert worst_old > 0.3                 # the fixed band exceeds this plant's friction near rest


def test_no_creep_on_soft_friction_and_the_stiffness_is_the_configured_one(model, soft_run):
    """Cartesian impedance k 450 N/m pushed with 5 N then 10 N then released, the parameters file as
    written: no joint faster than 1e-3 rad/s over the last 0.5 s of each 4 s hold (the old fixed
    band at full size: a limit cycle, the wrist at 0.076 rad/s), the F -> 2F slope within 3 % of k,
    the first push within 5 %."""
    fr = law_friction(soft_run.params)
    r = push(model, fr, solref=SOFT, loop_over=file_loop(soft_run.params))
    assert r["creep"] < CREEP, r
    assert abs(r["k_slope"] / K_PUSH - 1) < 0.03, r
    assert abs(r["k_single"] / K_PUSH - 1) < 0.05, r
    old = {**fr, "friction_velocity_scale": [0.0] * 7, "friction_band_margin": 1.0}
    assert push(model, old, solref=SOFT)["creep"] > 10 * CREEP      # the plant exercises the issue


def test_identification_from_commands_with_the_driver_adding_gravity(model):
    """The plant adds g(q) at the state each command is applied at (a Franka's driver); the loop sends
    commands without gravity and the run adds g at the state the command was sent at: Ia, fv, fc of
    every joint within 3 % of the plant's (g taken at the state after the held period instead: fv of
    the shoulder joints far off)."""
    run = identify(model, SHARP, adds_gravity=True)
    assert run.ok, run.message
    terms = run.estimate.joint_terms(model)
    for key, truth in (("Ia", PLANT["armature"]), ("fv", PLANT["damping"]), ("fc", PLANT["friction"])):
        err = np.abs(terms[key][0] / truth - 1.0)
        assert np.all(err < 0.03), f"{key}: {np.round(terms[key][0], 4)} vs {truth}"


@pytest.mark.parametrize("solref", [SHARP, SOFT], ids=["sharp", "soft"])
def test_stiction_at_rest_the_arm_returns_where_the_law_holds_it(model, solref):
    """The file as written, no sensor: on the sharp plant (static friction fc right from rest) a
    velocity-sign compensation leaves the arm stuck over 1 mm from where the law holds it 2 s after the
    release (tanh(0) = 0: the spring no longer beats fc; the stiction term off).  The term (written at
    1: at rest fc along the law's pull where the law moved the arm last) frees it: back within 1 mm,
    with the F -> 2F slope within 3 % of k, the first push within 5 % (the hand moved the arm last: the
    term stays off under it), and no joint creeping once the arm is back (1 s after the 2 s: the soft
    plant's wrist is still on its way at 2 s).  Along every pull, as before the gate, the sharp plant's
    first push came out +7.4 % and its slope -4.1 %."""
    run = identify(model, solref)
    assert run.ok, run.message
    fr = law_friction(run.params)
    assert fr["friction_stiction"] == 1.0
    kw = dict(solref=solref, loop_over=file_loop(run.params))
    r = push(model, fr, rest=1.0, **kw)
    assert r["back"] < 1e-3 and r["creep"] < CREEP, r
    assert abs(r["k_slope"] / K_PUSH - 1) < 0.03 and abs(r["k_single"] / K_PUSH - 1) < 0.05, r
    if solref == SHARP:                             # the plant exercises it
        assert push(model, {**fr, "friction_stiction": 0.0}, **kw)["back"] > 1e-3


# a plant nobody tuned the run for (drawn at random): the shoulder's and the elbow's sharp dry friction
# (1.44 and 1.04 N m) hold them on the slow excitation's way back
STICKY = {"armature": np.array([0.08, 0.13, 0.33, 0.25, 0.033, 0.06, 0.044]),
          "damping": np.array([0.12, 0.38, 0.1, 0.23, 0.28, 0.24, 0.31]),
          "friction": np.array([1.16, 1.44, 0.57, 1.04, 0.77, 0.35, 0.1])}


def test_a_joint_held_by_its_static_friction_in_the_slow_excitation_gets_the_floor_band(model):
    """On STICKY (sharp) the joint law driving the slow excitation moves the shoulder out on the fastest
    sweep only: its static friction holds it on the way back.  Its rows tell no shape (stuck, the torque
    is anywhere within +-fc at v = 0; one way, the constant and fc tanh(v / vs) are one column): the run
    writes band_min for it and names it in the status, where the fit gave 0.068 rad/s, the re-solve with
    it fv 23 % low, and the file as written left the pushed arm stuck (first push 5629 N/m, 11.9 mm off
    2 s after the release).  Every Ia and fc within 1 % of the plant's, fv within 5 %; the file as
    written: slope within 3 % of k, first push within 5 %, back within 1 mm."""
    run = identify(model, SHARP, plant=STICKY)
    assert run.ok, run.message
    assert run.stuck[1] and "panda_joint2" in run.message.split(" did not slide both ways")[0].rsplit(";", 1)[-1], \
        run.message
    assert run.bands[1] == pytest.approx(run.p["band_min"]), run.bands
    terms = run.estimate.joint_terms(model)
    np.testing.assert_allclose(terms["Ia"][0], STICKY["armature"], rtol=0.01)
    np.testing.assert_allclose(terms["fc"][0], STICKY["friction"], rtol=0.01)
    np.testing.assert_allclose(terms["fv"][0], STICKY["damping"], rtol=0.05)
    r = push(model, law_friction(run.params), solref=SHARP, plant=STICKY, loop_over=file_loop(run.params))
    assert r["back"] < 1e-3, r
    assert abs(r["k_slope"] / K_PUSH - 1) < 0.03 and abs(r["k_single"] / K_PUSH - 1) < 0.05, r


def test_the_stiction_term_acts_only_where_the_law_moved_the_arm_last(model):
    """Without a sensor the term keeps the arm's displacement while sliding (|v| > vs), forgotten over
    TRAVEL of travel and at the balance (every pull within BALANCE p0), and acts at rest only while
    the law's pull is along it, fading per joint as the pull grows from fc to FADE fc: the formula
    written here with the parameters set, fed motions of known direction and length."""
    from robot_dynamics.control.laws import friction as F
    dyn = make_backend(model, "pinocchio")
    fc = np.array([0.8, 0.8, 0.6, 0.6, 0.4, 0.3, 0.3])
    vs = np.array([0.002, 0.003, 0.002, 0.0045, 0.002, 0.002, 0.007])    # the term's share: 1 to 0
    p0, dt = 0.05, 0.001
    law = make_law("joint_impedance", model, dyn, {
        "friction_compensation": True, "friction_coulomb": fc.tolist(), "friction_velocity_scale": vs.tolist(),
        "friction_stiction": 1.0, "friction_stiction_torque": p0})
    fr = law.friction
    fr.sensed = False
    pull = np.array([0.2, -0.5, 0.7, -0.1, 0.7, -0.35, 0.02])      # within fc, beyond, past FADE x fc

    def at_rest(p):
        fr.pull[:] = p
        return fr.add(np.zeros(7), np.zeros(7), dt)

    def move(direction, seconds, speed=0.05):
        for _ in range(int(round(seconds / dt))):
            fr.pull[:] = pull
            fr.add(np.zeros(7), speed * direction, dt)

    fade = np.clip(1 + 1 / (F.FADE - 1) - np.abs(pull) / ((F.FADE - 1) * fc), 0.0, 1.0)
    share = np.clip(2 - vs / F.STICTION_VS, 0.0, 1.0)
    term = fc * fade * share * np.tanh(pull / p0)                   # the law moved the arm last
    np.testing.assert_array_equal(at_rest(pull), np.zeros(7))         # no motion yet: off
    move(-np.sign(pull), 0.2)                                       # pushed: against the pull
    np.testing.assert_array_equal(at_rest(pull), np.zeros(7))
    move(np.sign(pull), 0.2)                                        # 0.01 rad per joint back: along it
    np.testing.assert_allclose(at_rest(pull), term, rtol=1e-12, atol=1e-15)
    assert term[0] == pytest.approx(fc[0] * np.tanh(4.0)) and term[4] == 0.0 and term[6] == 0.0
    assert 0 < fade[2] < 1 and 0 < fade[5] < 1 and share[1] == 1.0 and share[3] == pytest.approx(0.5)
    move(-np.sign(pull), 5.0, speed=0.9 * vs)                       # 9-32 mrad below vs: not sliding
    np.testing.assert_allclose(at_rest(pull), term, rtol=1e-12, atol=1e-15)
    at_rest(np.full(7, 0.2 * p0))                                   # at the balance: forgotten
    np.testing.assert_array_equal(at_rest(pull), np.zeros(7))
    move(np.sign(pull), 0.2)                                        # back along it, then against it over
    move(-np.sign(pull), 0.2)                                       # the same travel: the latest counts
    np.testing.assert_array_equal(at_rest(pull), np.zeros(7))


Q_SYNTH = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.6, 0.8])


def _synthetic_torques(model, seed, vs):
    """torques(Q, V, A): Pinocchio's RNEA plus Ia q'' + fv q' + fc tanh(q' / vs) with Ia, fv, fc drawn
    per joint from `seed`, and white noise of 0.02 N m."""
    P = make_backend(model, "pinocchio")
    rng = np.random.default_rng(seed)
    n = model.nv
    Ia, fv, fc = rng.uniform(0.05, 0.2, n), rng.uniform(0.1, 0.5, n), rng.uniform(0.2, 1.0, n)

    def torques(Q, V, A):
        tau = np.array([P.rnea(q, v, a) for q, v, a in zip(Q, V, A)]) + Ia * A + fv * V + fc * np.tanh(V / vs)
        return tau + rng.normal(0, 0.02, tau.shape)
    return torques


def test_fit_bands_recovers_the_velocity_scale_the_data_were_made_with(model):
    """fit_bands on torques made from Pinocchio's RNEA plus Ia q'' + fv q' + fc tanh(q' / vs) + off with
    a vs per joint the test sets (0.003-0.08 rad/s), along a Fourier excitation, noise 0.02 N m on
    the torque: every vs within 5 % (2 % measured; the tanh column left unfiltered: up to 138 % off)."""
    from robot_dynamics.dynamics import identification as idn
    vs = np.array([0.003, 0.006, 0.01, 0.02, 0.04, 0.08, 0.015])
    torques = _synthetic_torques(model, 2, vs)
    exc = idn.fourier_excitation(model, Q_SYNTH, period=5.0, candidates=5, a_max=6.0, inertial=False)
    t = np.arange(10000) * 0.001
    Q, V, A = idn.fourier_trajectory(*exc[:4], t)
    off = np.linspace(-0.2, 0.2, 7)                  # the joints' torque offsets
    got, _ = fb.fit_bands(model, t, Q, torques(Q, V, A) + off, inertial=False, band_min=0.001)
    assert np.all(np.abs(got / vs - 1) < 0.05), (np.round(got, 4), vs)


def test_the_slow_excitation_goes_out_and_back_at_the_speeds_it_names(model):
    """friction_bands.slow_excitation against finite differences of its own positions: at rest and at
    the start before, between and after the three sweeps, peak speeds v_peak / 16, / 4 and v_peak along
    each joint's direction, out at most v_peak x period / pi (the amplitude 2 A of the fastest), and v, a
    the derivatives of q."""
    q0 = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.6, 0.8])
    d = np.array([1, -1, 1, 1, -1, 1, -1], float)
    h, v_peak, period = 1e-4, 0.032, 2.0
    T = fb.slow_excitation(q0, v_peak, period, d, 0.0)[3]
    assert T == pytest.approx(1.0 + 3 * period)
    t = np.arange(int(round(T / h)) + 1) * h
    Q, V, A, _ = fb.slow_excitation(q0, v_peak, period, d, t)
    dq = np.gradient(Q, h, axis=0)
    np.testing.assert_allclose(V, dq, atol=1e-5)          # (central differences across the a steps: 2.5e-6)
    smooth = np.min(np.abs(t[:, None] - (0.5 + period * np.arange(4))), axis=1) > 2 * h    # a steps there
    smooth[[0, -1]] = False
    np.testing.assert_allclose(A[smooth], np.gradient(V, h, axis=0)[smooth], atol=1e-5)
    for k, peak in enumerate((v_peak / 16, v_peak / 4, v_peak)):
        sweep = (t > 0.5 + k * period) & (t < 0.5 + (k + 1) * period)
        np.testing.assert_allclose((dq[sweep] * d).max(axis=0), peak, rtol=1e-4)
        assert np.all((Q[sweep] - q0) * d > -1e-12)            # out along d and back: never the other side
        edge = int(round((0.5 + k * period) / h))
        np.testing.assert_allclose(Q[edge], q0, atol=1e-12)
    np.testing.assert_allclose(Q[-1], q0, atol=1e-12)
    np.testing.assert_allclose(np.abs(Q - q0).max(axis=0), v_peak * period / np.pi, rtol=1e-6)


def test_fit_bands_slow_recovers_the_velocity_scale_the_data_were_made_with(model):
    """fit_bands_slow on the slow excitation's torques made from Pinocchio's RNEA plus Ia q'' + fv q' +
    fc tanh(q' / vs) + off (vs per joint the test sets, 0.002-0.02 rad/s, noise 0.02 N m), the rest of
    the model from an estimate solved on a Fourier excitation's torques, and a static error the
    estimate does not know of (0.1 N m per joint, a gravity model's): every vs within 5 %."""
    from robot_dynamics.dynamics import identification as idn
    vs = np.array([0.002, 0.003, 0.004, 0.006, 0.01, 0.02, 0.003])
    torques = _synthetic_torques(model, 3, vs)
    q0 = Q_SYNTH
    exc = idn.fourier_excitation(model, q0, period=5.0, candidates=5, a_max=3.0, inertial=False)
    t = np.arange(10000) * 0.001
    Q, V, A = idn.fourier_trajectory(*exc[:4], t)
    W, y, mask = idn.dataset(model, t, Q, torques(Q, V, A), inertial=False)
    est = idn.solve(W, y, idn.base_parameters(model, inertial=False),
                    theta_prior=idn.prior_parameters(model, inertial=False), mask=mask)
    d = np.where(model.upper_limits - q0 >= q0 - model.lower_limits, 1.0, -1.0)
    T = fb.slow_excitation(q0, 0.032, 2.0, d, 0.0)[3]
    ts = np.arange(int(round(T / 0.001))) * 0.001
    Qs, Vs, As, _ = fb.slow_excitation(q0, 0.032, 2.0, d, ts)
    got, _, stuck = fb.fit_bands_slow(model, ts, Qs, torques(Qs, Vs, As) + 0.1, est, inertial=False,
                                      band_min=0.001)
    assert np.all(np.abs(got / vs - 1) < 0.05), (np.round(got, 4), vs)
    assert not stuck.any()


def test_the_velocity_noise_is_read_across_gaps_jitter_and_repeated_states():
    """friction_bands.velocity_noise on a 0.5 rad/s sinusoid at 3 rad/s plus white noise the test sets
    (5e-4 rad/s): within 5 % of it with 30 % of the samples dropped at random (states a loaded
    controller did not see) and the times given; the motion alone reads as below 1 % of it with the
    times, where without them the jumps across the gaps read as some of it.  Within 5 % too with
    intervals alternating 0.9 and 1.1 ms (a stamp's jitter) and with every state held 2 or 4 control
    steps (a driver slower than the loop, the loop's own times: the repeats read as no noise if
    counted); a record of one held state has none to read (NaN)."""
    rng = np.random.default_rng(8)
    t = np.arange(20000) * 1e-3
    motion = np.outer(0.5 * np.sin(3.0 * t), np.ones(3))
    v = motion + rng.normal(0.0, 5e-4, motion.shape)
    seen = rng.random(len(t)) > 0.3
    np.testing.assert_allclose(fb.velocity_noise(v[seen], t[seen]), 5e-4, rtol=0.05)
    assert np.all(fb.velocity_noise(motion[seen], t[seen]) < 5e-6)
    assert np.all(fb.velocity_noise(motion[seen]) > fb.velocity_noise(motion[seen], t[seen]))
    tj = np.cumsum(np.where(np.arange(len(t)) % 2, 1.1e-3, 0.9e-3))
    vj = np.outer(0.5 * np.sin(3.0 * tj), np.ones(3)) + rng.normal(0.0, 5e-4, motion.shape)
    np.testing.assert_allclose(fb.velocity_noise(vj, tj), 5e-4, rtol=0.05)
    for held in (2, 4):
        np.testing.assert_allclose(fb.velocity_noise(np.repeat(v[::held], held, axis=0)[:len(t)], t), 5e-4,
                                   rtol=0.05)
    assert np.all(np.isnan(fb.velocity_noise(np.repeat(v[:1], 100, axis=0), t[:100])))


def test_the_slow_excitation_goes_toward_the_roomier_side_of_each_joint(model):
    """Near a limit (joint 4 0.05 rad under its upper limit, joint 6 0.05 rad over its lower one, the
    Panda's URDF limits) every joint of the slow excitation moves only toward the farther limit, by
    the reach it names (slow_speed x period / pi), and stays inside the limits."""
    lo, hi = model.lower_limits, model.upper_limits
    q0 = np.array([0.0, -0.5, 0.0, hi[3] - 0.05, 0.0, lo[5] + 0.05, 0.8])
    farther = np.where(hi - q0 >= q0 - lo, 1.0, -1.0)    # the test's own reading of the limits (ties: up)
    assert farther[3] == -1.0 and farther[5] == 1.0
    d, room = fb.slow_direction(lo, hi, q0)
    np.testing.assert_array_equal(d, farther)
    np.testing.assert_allclose(room, np.maximum(hi - q0, q0 - lo))
    t = np.arange(0.0, fb.slow_duration(2.0), 1e-3)
    Q = fb.slow_excitation(q0, 0.032, 2.0, d, t)[0]
    assert np.all((Q - q0) * farther >= -1e-12)
    np.testing.assert_allclose(np.max((Q - q0) * farther, axis=0), 0.032 * 2.0 / np.pi, rtol=1e-4)
    assert fb.slow_reach(0.032, 2.0) == pytest.approx(0.032 * 2.0 / np.pi)
    assert np.all(Q >= lo) and np.all(Q <= hi)


def test_a_joint_without_rows_to_fit_gets_the_widest_band_and_a_note(model):
    """A record whose samples are all near gaps leaves fit_bands_slow nothing to fit: NaN, which the
    run turns into the widest band searched (the compensation's dry part rising over it: at most the
    model's) and says so; the velocity-noise floor the run sets from its record (0.01 rad/s of noise
    the test adds) raises a joint fitted under 4 x it and says so."""
    from robot_dynamics.control.runs.dynamics import DynamicsRun
    from robot_dynamics.dynamics import identification as idn
    t = np.arange(3000) * 0.001
    Q = np.tile(Q_SYNTH, (len(t), 1))
    W = idn.dataset(model, t, Q, np.zeros_like(Q), inertial=False)[0]

    class Estimate:                                    # the main estimate: not reached without rows
        def theta(self):
            return np.zeros(W.shape[2])
    got, _, _ = fb.fit_bands_slow(model, t, Q, np.zeros_like(Q), Estimate(), inertial=False,
                                  valid=np.zeros(len(t), bool))
    assert np.all(np.isnan(got))
    rng = np.random.default_rng(4)
    run = object.__new__(DynamicsRun)
    run.model = model
    run.rec = [(k * 0.001, Q_SYNTH, np.zeros(7), rng.normal(0.0, 0.01, 7)) for k in range(2000)]
    fitted = np.array([np.nan, 0.003, 0.1, 0.1, 0.1, 0.1, 0.1])
    run._velocity_noise()
    vs, note = run._band_floor(fitted)
    assert vs[0] == fb.BAND_MAX and model.joint_names[0] in note and "not identified" in note, note
    assert vs[1] == pytest.approx(4 * 0.01, rel=0.1) and "velocity noise" in note, (vs, note)
    np.testing.assert_array_equal(vs[2:], fitted[2:])


def test_the_velocity_scale_stays_above_the_joint_velocity_noise(model):
    """The sharp plant, whose dry friction rises within 0.0005 rad/s, identified with the floor band_min
    lowered to 0.0005: without noise on the joint velocities the loop gets, the shoulder and elbow
    joints' scales come out below 0.001; with white noise of 5e-4 rad/s on them the run measures it
    (within 10 %) and writes every scale at least 4 x it, and says so in the status (a scale under
    the noise turns the noise into torque at the compensation's slope fc / (m vs))."""
    sigma = 5e-4
    over = {"dynamics_id.band_min": 0.0005}
    quiet = identify(model, SHARP, params=over)
    assert quiet.ok, quiet.message
    assert np.all(quiet.bands[:4] < 0.001), quiet.bands
    run = identify(model, SHARP, params=over, v_noise=(np.random.default_rng(5), sigma))
    assert run.ok, run.message
    np.testing.assert_allclose(run.v_noise, sigma, rtol=0.1)
    assert np.all(run.bands >= 4 * run.v_noise * (1 - 1e-12)), (run.bands, run.v_noise)
    assert np.isclose(run.bands[:4], 4 * run.v_noise[:4], rtol=1e-12, atol=0.0).any(), run.bands
    assert "velocity noise" in run.message, run.message


def test_stiction_stays_within_the_identified_friction_and_only_a_sensed_wrench_enters_it(model):
    """The stiction term at any fraction up to 1: the dry part of the compensation at most fc at every
    speed whatever the pull (fc [sat + k (1 - |sat|) fade tanh(p / p0)], the formula written here, where
    the arm last moved along the pull p, fc sat against it), fc fade tanh(p / p0) along the pull at
    rest; on the Cartesian law, a measured wrench w adds J^T w to the
    pull (Pinocchio's Jacobian here), an estimated one (wrench_source observer) nothing."""
    import pinocchio as pin
    from robot_dynamics.control.laws.base import State
    dyn = make_backend(model, "pinocchio")
    rng = np.random.default_rng(7)
    fc, vs = rng.uniform(0.2, 1.2, 7), rng.uniform(0.002, 0.008, 7)
    law = make_law("joint_impedance", model, dyn, {
        "friction_compensation": True, "friction_coulomb": fc.tolist(), "friction_velocity_scale": vs.tolist(),
        "friction_stiction": 1.0, "friction_band_margin": 1.5})
    fr = law.friction
    fr.sensed = False
    share = np.clip(2 - vs / 0.003, 0.0, 1.0)            # STICTION_VS: the term's share per joint
    assert 0 < share.sum() < 7
    for v in np.concatenate([-np.geomspace(1e-7, 1, 60), [0.0], np.geomspace(1e-7, 1, 60)]):
        for last in (1.0, -1.0):                   # the arm last moved along the pull / against it
            p = rng.normal(0, 0.2, 7) + rng.choice([-1, 1], 7) * 0.1
            fr.pull[:] = p
            fr.moved[:] = last * p
            c = fr.add(np.zeros(7), np.full(7, v))
            x = np.abs(v / vs)
            sat = np.sign(v) * np.minimum(x / 1.5, np.tanh(x))
            fade = share * np.clip(3.0 - 2.0 * np.abs(p) / fc, 0.0, 1.0) if last > 0 else 0.0   # FADE 1.5
            np.testing.assert_allclose(c, fc * (sat + (1 - np.abs(sat)) * fade * np.tanh(p / 0.05)), atol=1e-12)
            assert np.all(np.abs(c) <= fc + 1e-12)
    # the Cartesian law: the pull with a sensed wrench is the one without plus J^T w
    frame = "panda_link8"
    cart = make_law("cartesian_impedance", model, dyn, {
        "frame": frame, "friction_compensation": True, "friction_coulomb": fc.tolist(),
        "friction_velocity_scale": vs.tolist(), "friction_stiction": 0.05})
    q = np.array([0.1, -0.4, 0.2, -2.0, 0.1, 1.8, 0.5])
    cart.reset(State(q, np.zeros(7)))
    q1 = q + 0.01
    w = np.array([4.0, -2.0, 3.0, 0.3, -0.2, 0.1])             # world axes, about the frame's origin
    pulls = {}
    for src in (None, "sensor", "observer"):
        st = State(q1, np.zeros(7), 0.0, wrench=None if src is None else w, wrench_frame="world",
                   wrench_source=src or "sensor")
        cart.compute(st)
        pulls[src] = (cart.friction.pull.copy(), cart.friction.sensed)
    assert pulls[None][1] is False and pulls["observer"][1] is False and pulls["sensor"][1] is True
    np.testing.assert_array_equal(pulls["observer"][0], pulls[None][0])
    pm = pin.buildModelFromXML(model.urdf)                     # the oracle: Pinocchio on the URDF
    data = pm.createData()
    pin.computeJointJacobians(pm, data, q1)
    pin.updateFramePlacements(pm, data)
    J = pin.getFrameJacobian(pm, data, pm.getFrameId(frame), pin.LOCAL_WORLD_ALIGNED)
    np.testing.assert_allclose(pulls["sensor"][0] - pulls[None][0], J.T @ w, atol=1e-9)


@pytest.mark.parametrize("solref", [SHARP, SOFT], ids=["sharp", "soft"])
def test_a_sensed_push_meets_the_stiction_as_the_law_would_without_friction(model, solref):
    """With the push measured by an F/T sensor at the flange (friction_stiction_sensed, default 1: at
    rest fc along the pull plus J^T of the measured wrench, toward where law and hand balance) the
    first push and the F -> 2F slope within 3 % of k, back within 1 mm 2 s after the release, no joint
    creeping."""
    run = identify(model, solref)
    assert run.ok, run.message
    fr = law_friction(run.params)
    r = push(model, fr, solref=solref, sensor=True, loop_over=file_loop(run.params))
    assert abs(r["k_single"] / K_PUSH - 1) < 0.03 and abs(r["k_slope"] / K_PUSH - 1) < 0.03, r
    assert r["back"] < 1e-3 and r["creep"] < CREEP, r


def test_a_franka_s_friction_breaks_free_under_a_sensed_push(model):
    """franky-sim's joint friction, rotor inertia and damping (its fr3.xml), its start pose, the
    Cartesian gains of config/fr3_cartesian_impedance.yaml (k 300 N/m, k_rot 10), sharp static
    friction, 9 N then 18 N, the file as written (the rotor inertia in the law's model too): without a
    sensor the 9 N push moves the flange only 60 % as far as the spring says (the shoulder does not
    break free; the first push > 30 % stiff); with the push measured by a sensor at the flange the
    issue's figures: the first push and the F -> 2F slope within 3 % of k, back within 1 mm 2 s after
    the release (0.55 mm; 1.33 mm with the law's model left without the rotor inertia, its damping
    designed for an arm 0.07-0.2 kg m^2 lighter per joint; the release without it comes back as far,
    the law having moved the arm last), and no joint creeping 4.5-5 s after the release."""
    run = identify(model, SHARP, plant=FRANKA)
    assert run.ok, run.message
    fr = law_friction(run.params)
    kw = dict(solref=SHARP, plant=FRANKA, q0=Q_FRANKY, k=300.0, k_rot=10.0, force=9.0, hold=3.0, back=2.0,
              loop_over=file_loop(run.params))
    blind = push(model, fr, **kw)
    assert blind["k_single"] / 300.0 - 1 > 0.3, blind
    r = push(model, fr, sensor=True, rest=3.0, **kw)
    assert abs(r["k_single"] / 300.0 - 1) < 0.03 and abs(r["k_slope"] / 300.0 - 1) < 0.03, r
    assert r["back"] < 1e-3 and r["creep"] < CREEP, (r, blind)


def test_link_side_joint_torque_sensors_give_the_environment_s_torque(model):
    """effort_link_side: the joint states' effort is the link-side joint torque (the rig's: MuJoCo's
    motor torque less the gear's friction, damping and rotor inertia), with an offset per joint.  The
    state the law gets carries nothing while the first 0.2 s tare the offset, then tau_ext = J^T F of the
    push the rig applies at the flange (Pinocchio's Jacobian at the arm's pose, the force the test
    sets), within 0.01 N m once the arm is at rest under it."""
    fr = {"friction_compensation": True, "friction_coulomb": list(PLANT["friction"]),
          "friction_velocity_scale": [0.002] * 7, "friction_stiction": 1.0}
    plant = Plant(model, solref=SHARP)
    loop = cartesian_loop(model, fr, loop_over={"effort_link_side": True})
    offset = np.array([0.3, -0.5, 0.2, 0.4, -0.1, 0.05, -0.2])
    link = (np.random.default_rng(3), 0.0, offset)
    loop.activate(0.0)
    t = drive(loop, plant, 0.0, 0.15, link=link)
    assert loop.cycle.state.tau_ext is None                 # still taring
    t = drive(loop, plant, t, 0.35, link=link)
    np.testing.assert_allclose(loop.cycle.state.tau_ext, 0.0, atol=1e-3)
    F = np.array([4.0, -3.0, 2.0, 0.2, -0.1, 0.3])
    plant.sim.apply_wrench(FLANGE, F)
    drive(loop, plant, t, 2.0, link=link)
    assert np.abs(plant.sim.v).max() < 1e-3
    J = make_backend(model, "pinocchio").frame_jacobian(plant.sim.q, FLANGE, reference="local_world_aligned")
    np.testing.assert_allclose(loop.cycle.state.tau_ext, J.T @ F, atol=0.01)


def test_link_side_torques_missing_or_not_finite_are_said_and_the_law_runs_without_them(model):
    """effort_link_side with joint states that carry no effort, or a NaN in it: a warning (once), the
    law's command finite, the stiction term without the joint torques (State.tau_ext None)."""
    logs = []
    law = {"friction_compensation": True, "friction_coulomb": [0.8] * 7, "friction_stiction": 1.0}
    loop = ControlLoop.from_params(model, {"controller": "joint_impedance", "effort_link_side": True,
                                           **{f"joint_impedance.{k}": v for k, v in law.items()}},
                                   log=lambda level, text: logs.append((level, text)))
    loop.activate(0.0)
    q = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
    for k, effort in enumerate([None] * 5 + [np.full(7, np.nan)] * 5):
        loop.update_state(q, np.zeros(7), k * 1e-3, effort=effort)
        tau, safe = loop.step(k * 1e-3)
        assert not safe and np.all(np.isfinite(tau))
        assert loop.cycle.state.tau_ext is None
    said = [text for level, text in logs if "effort_link_side" in text]
    assert len(said) == 1 and "no (finite) effort" in said[0], logs


def test_the_loop_through_the_arm_s_inertia_stays_quiet(model, monkeypatch):
    """A link-side sensor reads the arm's own acceleration too (tau_J = M a + C v + g - tau_ext): the
    stiction term's torque comes back into its pull a period later through the term's slope k fc / p0.
    The low-pass on the environment's torque (FrictionCompensation.link_filter) keeps that loop stable
    by itself: without the noise's dead zone (NOISE_DEADZONE 0 here), noise-free sensors, the steepest
    slope a user sets (p0 0.01 N m: 80 at fc 0.8 N m), the arm held by the law stays at rest after the
    tare (|v| < 1e-6 rad/s) and the torque it reads is the none there is (within 1e-3 N m).  Unfiltered
    the arm is held in a two-period oscillation (2.6e-4 rad/s)."""
    import robot_dynamics.control.laws.friction as friction
    monkeypatch.setattr(friction, "NOISE_DEADZONE", 0.0)
    fr = {"friction_compensation": True, "friction_coulomb": list(PLANT["friction"]),
          "friction_viscous": list(PLANT["damping"]), "friction_velocity_scale": [0.002] * 7,
          "friction_stiction": 1.0, "friction_stiction_torque": 0.01}
    plant = Plant(model, solref=SHARP)
    loop = cartesian_loop(model, fr, loop_over={"effort_link_side": True, "armature": list(PLANT["armature"])})
    link = (np.random.default_rng(3), 0.0)
    loop.activate(0.0)
    t = drive(loop, plant, 0.0, 0.5, link=link)
    speeds = []
    drive(loop, plant, t, 1.0, link=link, record=lambda now, s: speeds.append(np.abs(s.v).max()))
    assert max(speeds) < 1e-6, max(speeds)
    np.testing.assert_allclose(loop.cycle.state.tau_ext, 0.0, atol=1e-3)


@pytest.mark.slow                       # an identification and three pushes
def test_with_link_side_joint_torque_sensors_a_push_under_the_static_friction_moves_the_arm(model):
    """A plant nobody chose (bench/friction_push.py --random, seed 9; sharp friction loss) whose joints
    the 5 N push loads below their static friction: the file as written without a sensor leaves the
    arm where it was (the first push more than twice k), nothing in q or v telling the hand's push.
    With link-side joint torque sensors (a Franka's tau_J; white noise 0.03 N m per joint) the
    environment's torque is measured on every joint and the stiction term meets it: the issue's
    figures, the first push within 5 % of k and the F -> 2F slope within 3 %, back within 1 mm 2 s
    after the release, no joint creeping."""
    plant = random_plant(9)
    run = identify(model, SHARP, plant=plant)
    assert run.ok, run.message
    fr = law_friction(run.params)
    kw = dict(solref=SHARP, plant=plant, rest=3.0, loop_over=file_loop(run.params))
    blind = push(model, fr, **kw)
    assert blind["k_single"] > 2 * K_PUSH, blind
    r = push(model, fr, link=(np.random.default_rng(9), 0.03), **kw)
    assert abs(r["k_single"] / K_PUSH - 1) < 0.05 and abs(r["k_slope"] / K_PUSH - 1) < 0.03, (r, blind)
    assert r["back"] < 1e-3 and max(r["creep_each"]) < CREEP, r
