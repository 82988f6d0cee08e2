"""JointTrajectory: waypoints, continuity at knots, boundary conditions, exact reproduction of
polynomials, holding the last point, and input validation.  Tolerances stated per test."""
import numpy as np
import pytest

from robot_dynamics.control import JointTrajectory

EPS = 1e-9        # s, one-sided offset for left/right limits at a knot; differences are then
                  # derivative * EPS: |v| < 1e2, |a| < 1e3, |jerk| < 1e5 here, tolerances 1e-7, 1e-6, 1e-4


def left_right(traj, t):
    return traj.sample(t - EPS), traj.sample(t)


def make(kind, rng, n=3, N=5):
    times = np.cumsum(rng.uniform(0.2, 1.0, N))
    P = rng.uniform(-1, 1, (N, n))
    V = rng.uniform(-1, 1, (N, n)) if kind in ("cubic_hermite", "quintic") else None
    A = rng.uniform(-2, 2, (N, n)) if kind == "quintic" else None
    return JointTrajectory(times, P, V, A), times, P, V, A


@pytest.mark.parametrize("kind", ["cubic_spline", "cubic_hermite", "quintic"])
def test_through_waypoints_and_continuity(kind):
    rng = np.random.default_rng(0)
    traj, times, P, V, A = make(kind, rng)
    assert traj.kind == kind
    q0, v0 = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3)
    traj.start(2.0, q0, v0)
    T = times + 2.0
    # start state
    q, v, a = traj.sample(2.0)
    np.testing.assert_allclose(q, q0, atol=1e-12)
    np.testing.assert_allclose(v, v0, atol=1e-12)
    for k, tk in enumerate(T[:-1]):
        (ql, vl, al), (qr, vr, ar) = left_right(traj, tk)
        np.testing.assert_allclose(qr, P[k], atol=1e-12)                   # through the point
        np.testing.assert_allclose(ql, qr, atol=1e-7)                       # q continuous
        np.testing.assert_allclose(vl, vr, atol=1e-6)                       # v continuous
        if V is not None:
            np.testing.assert_allclose(vr, V[k], atol=1e-12)
        if kind in ("quintic", "cubic_spline"):
            np.testing.assert_allclose(al, ar, atol=1e-4)                   # a continuous (C2)
        if A is not None:
            np.testing.assert_allclose(ar, A[k], atol=1e-10)
    # the last point and holding after the end
    q, v, a = traj.sample(T[-1] - 1e-12)
    np.testing.assert_allclose(q, P[-1], atol=1e-9)
    for t in (T[-1], T[-1] + 5.0):
        q, v, a = traj.sample(t)
        np.testing.assert_array_equal(q, P[-1])
        np.testing.assert_array_equal(v, 0.0)
        np.testing.assert_array_equal(a, 0.0)
    assert traj.done(T[-1]) and not traj.done(T[-1] - 0.01)
    assert traj.duration == pytest.approx(times[-1])


def test_spline_boundary_velocities():
    """Positions only: the spline leaves with the start velocity and arrives with zero velocity."""
    rng = np.random.default_rng(1)
    traj, times, P, _, _ = make("cubic_spline", rng)
    v0 = np.array([0.3, -0.2, 0.1])
    traj.start(0.0, np.zeros(3), v0)
    np.testing.assert_allclose(traj.sample(0.0)[1], v0, atol=1e-12)
    np.testing.assert_allclose(traj.sample(times[-1] - 1e-9)[1], 0.0, atol=1e-6)


def test_quintic_reproduces_a_quintic_polynomial():
    """One segment with exact (q, v, a) of a degree-5 polynomial at both ends reproduces it (1e-10)."""
    c = np.array([0.2, -0.5, 0.3, 0.7, -0.4, 0.1])
    T = 1.7
    poly = np.polynomial.Polynomial(c)
    d1, d2 = poly.deriv(1), poly.deriv(2)
    traj = JointTrajectory([0.0, T], [[poly(0)], [poly(T)]], [[d1(0)], [d1(T)]], [[d2(0)], [d2(T)]])
    for t in np.linspace(0, T - 1e-9, 23):
        q, v, a = traj.sample(t)
        assert q[0] == pytest.approx(poly(t), abs=1e-10)
        assert v[0] == pytest.approx(d1(t), abs=1e-10)
        assert a[0] == pytest.approx(d2(t), abs=1e-9)


def test_cubic_hermite_reproduces_a_cubic():
    """Interior segments reproduce the cubic exactly (1e-10); the end segments are quintics through the
    same (q, v) with a = 0 at the trajectory's ends and the cubic's acceleration at the inner knots."""
    poly = np.polynomial.Polynomial([1.0, -0.3, 0.8, -0.25])
    d1, d2 = poly.deriv(), poly.deriv(2)
    ts = [0.0, 0.5, 1.2, 2.0]
    traj = JointTrajectory(ts, [[poly(t)] for t in ts], [[d1(t)] for t in ts])
    for t in np.linspace(0.5, 1.2 - 1e-9, 15):
        q, v, a = traj.sample(t)
        assert q[0] == pytest.approx(poly(t), abs=1e-12)
        assert v[0] == pytest.approx(d1(t), abs=1e-11)
        assert a[0] == pytest.approx(d2(t), abs=1e-10)
    for t in ts:
        q, v, a = traj.sample(min(t, 2.0 - 1e-12))
        assert q[0] == pytest.approx(poly(t), abs=1e-10) and v[0] == pytest.approx(d1(t), abs=1e-9)
    assert traj.sample(0.0)[2][0] == 0.0 and abs(traj.sample(2.0 - 1e-12)[2][0]) < 1e-9
    for tk in (0.5, 1.2):                                                   # C2 at the inner knots
        assert traj.sample(tk - EPS)[2][0] == pytest.approx(d2(tk), abs=1e-4)


def test_clamped_spline_reproduces_a_cubic_with_matching_ends():
    """A cubic with v(0) = v0 and v(T) = 0 is its own clamped spline through its samples (1e-10)."""
    T = 3.0
    poly = np.polynomial.Polynomial.fromroots([T, T, -0.7]) * 0.2 + 0.5       # double root at T: v(T) = 0
    d1 = poly.deriv()
    ts = np.array([0.4, 1.1, 1.9, T])
    traj = JointTrajectory(ts, [[poly(t)] for t in ts]).start(0.0, [poly(0.0)], [d1(0.0)])
    for t in np.linspace(ts[0], ts[-2] - 1e-9, 41):                 # interior segments: the cubic
        q, v, a = traj.sample(t)
        assert q[0] == pytest.approx(poly(t), abs=1e-10)
        assert v[0] == pytest.approx(d1(t), abs=1e-10)
    # end segments: quintics with the spline's knot values, zero acceleration at both ends
    assert traj.sample(0.0)[2][0] == 0.0 and abs(traj.sample(T - 1e-12)[2][0]) < 1e-9
    for t in (0.0, T - 1e-12):
        assert traj.sample(t)[0][0] == pytest.approx(poly(t), abs=1e-10)


def test_first_time_zero_does_not_prepend_and_restart():
    traj = JointTrajectory([0.0, 1.0], [[0.0, 0.0], [1.0, 2.0]])
    traj.start(5.0, [9.0, 9.0], [0.0, 0.0])          # first time 0: the first point is the start
    np.testing.assert_allclose(traj.sample(5.0)[0], [0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(traj.sample(6.0)[0], [1.0, 2.0], atol=0)
    traj = JointTrajectory([1.0], [[1.0, 2.0]])
    traj.start(0.0, [0.0, 0.0])
    traj.start(10.0, [0.5, 0.5])                     # restart from another state and time
    np.testing.assert_allclose(traj.sample(10.0)[0], [0.5, 0.5], atol=1e-15)
    np.testing.assert_allclose(traj.sample(10.5)[0], [0.75, 1.25], atol=1e-12)   # symmetric cubic midpoint
    np.testing.assert_allclose(traj.sample(11.0)[0], [1.0, 2.0], atol=0)


def test_before_start_holds_first_point():
    traj = JointTrajectory([1.0, 2.0], [[1.0], [2.0]]).start(3.0, [0.0], [0.0])
    q, v, a = traj.sample(0.0)
    np.testing.assert_allclose(q, [0.0], atol=0)
    np.testing.assert_allclose(v, [0.0], atol=0)


def test_single_point_without_start_holds_it():
    traj = JointTrajectory([0.0], [[0.3, 0.4]])
    for t in (-1.0, 0.0, 3.0):
        np.testing.assert_array_equal(traj.sample(t)[0], [0.3, 0.4])


@pytest.mark.parametrize("args, kw, match", [
    (([], np.zeros((0, 2))), {}, "no point"),
    (([1.0, 0.5], np.zeros((2, 2))), {}, "strictly increasing"),
    (([1.0, 1.0], np.zeros((2, 2))), {}, "strictly increasing"),
    (([-0.1, 1.0], np.zeros((2, 2))), {}, ">= 0"),
    (([0.5, np.nan], np.zeros((2, 2))), {}, "finite"),
    (([0.5, 1.0], np.zeros((3, 2))), {}, "shape"),
    (([0.5, 1.0], np.zeros(2)), {}, "2-D"),
    (([0.5, 1.0], [[0.0, np.inf], [0.0, 0.0]]), {}, "finite"),
    (([0.5, 1.0], np.zeros((2, 2)), np.zeros((2, 3))), {}, "shape"),
    (([0.5, 1.0], np.zeros((2, 2)), None, np.zeros((2, 2))), {}, "without velocities"),
    (([0.5, 1.0], [[0.0, 0.0], [0.0, 3.0]]), {"lower": [-1, -1], "upper": [1, 1]}, "upper limit"),
    (([0.5, 1.0], [[0.0, -3.0], [0.0, 0.0]]), {"lower": [-1, -1], "upper": [1, 1]}, "lower limit"),
    (([0.5, 1.0], [["a", 0.0], [0.0, 0.0]]), {}, "numeric"),
])
def test_bad_input_raises(args, kw, match):
    with pytest.raises(ValueError, match=match):
        JointTrajectory(*args, **kw)


def test_bad_start_raises():
    traj = JointTrajectory([1.0], [[0.0, 0.0]])
    with pytest.raises(ValueError):
        traj.start(0.0, [0.0])
    with pytest.raises(ValueError):
        traj.start(float("nan"), [0.0, 0.0])
    with pytest.raises(ValueError):
        traj.start(0.0, [0.0, 0.0], [np.nan, 0.0])


# ---------------------------------------------------------------- ROS timing: header.stamp
W = 2.0 * np.pi * 0.5                  # rad/s: the analytic path below


def f(t):
    """An analytic joint path (2 joints) and its derivatives: the points sample it exactly."""
    t = np.asarray(t, dtype=float)
    q = np.stack([0.3 * np.sin(W * t), -0.2 * np.cos(W * t) + 0.2], axis=-1)
    v = np.stack([0.3 * W * np.cos(W * t), 0.2 * W * np.sin(W * t)], axis=-1)
    a = np.stack([-0.3 * W * W * np.sin(W * t), 0.2 * W * W * np.cos(W * t)], axis=-1)
    return q, v, a


def analytic_traj(T=2.0, dt=0.05):
    times = np.arange(0.0, T + 1e-9, dt)
    q, v, a = f(times)
    return JointTrajectory(times, q, v, a)


def mj(t, T=2.0, d=(0.3, -0.2)):
    """A minimum-jerk rest-to-rest path (2 joints) and its derivatives (a quintic in t)."""
    s = np.clip(np.asarray(t, dtype=float) / T, 0.0, 1.0)[..., None]
    d = np.asarray(d)
    q = d * (10 * s**3 - 15 * s**4 + 6 * s**5)
    v = d * (30 * s**2 - 60 * s**3 + 30 * s**4) / T
    a = d * (60 * s - 180 * s**2 + 120 * s**3) / T**2
    return q, v, a


def test_stamp_in_the_future_holds_then_starts_then():
    """A stamp 0.5 s after the start, first point = the current state at rest: that state is held
    until then, then the points follow at stamp + time_from_start (the quintic Hermite reproduces this
    quintic path exactly: 1e-12)."""
    times = np.linspace(0.0, 2.0, 11)
    tr = JointTrajectory(times, *mj(times))
    tr.stamp = 10.5
    tr.start(10.0, np.zeros(2), np.zeros(2))
    for t in np.arange(10.0, 10.5, 0.01):
        q, v, a = tr.sample(t)
        np.testing.assert_allclose(q, 0.0, atol=1e-12)
        np.testing.assert_allclose(v, 0.0, atol=1e-12)
    for t in np.arange(10.5, 12.6, 0.013):
        q, v, a = tr.sample(t)
        qa, va, aa = mj(t - 10.5)
        np.testing.assert_allclose(q, qa, atol=1e-12)
        np.testing.assert_allclose(v, va, atol=1e-11)


def test_stamp_in_the_past_skips_the_part_already_due():
    """A stamp 0.5 s before the start: the points due are dropped; after the approach to the first
    point still ahead (50 ms at most here), the path is followed at stamp + time_from_start, i.e.
    0.5 s into its points; the trajectory ends 0.5 s sooner."""
    tr = analytic_traj()
    tr.stamp = 9.5
    q_now, v_now, _ = f(0.5)                     # where the trajectory should be at the start
    tr.start(10.0, q_now, v_now, max_velocity=10.0, max_acceleration=500.0)
    assert tr.skipped == int(np.count_nonzero(np.arange(0.0, 2.0 + 1e-9, 0.05) + 9.5 <= 10.0)) and tr.delay == 0.0
    assert abs(tr.end_time - (9.5 + 2.0)) < 1e-12
    for t in np.arange(10.06, 11.5, 0.017):
        q, v, _ = tr.sample(t)
        qa, va, _ = f(t - 9.5)
        np.testing.assert_allclose(q, qa, atol=1e-6)
        np.testing.assert_allclose(v, va, atol=1e-5)


def test_stamp_with_every_point_due_goes_to_the_last():
    tr = analytic_traj()
    tr.stamp = 0.0
    tr.start(100.0, np.array([0.1, 0.1]), np.zeros(2), max_velocity=1.0, max_acceleration=5.0)
    q_end, _, _ = f(2.0)
    np.testing.assert_allclose(tr.sample(tr.end_time)[0], q_end, atol=1e-12)
    assert tr.end_time > 100.0


def test_a_trajectory_that_replaces_another_one_continues_its_motion():
    """Joint impedance following one trajectory, replaced half way by another (from other points):
    the law's reference q_d and v_d have no jump at the switch (each step's change there within 3x
    the largest change over the 20 steps before it) and a_d keeps its value, because the new one
    starts from the old one's sample (q_d, v_d, a_d), not from the measured state."""
    from robot_dynamics.control import State, make_law
    from robot_dynamics.dynamics import Model, PinocchioBackend
    m = Model.from_robot("panda")
    law = make_law("joint_impedance", m, PinocchioBackend(m), {})
    q0 = np.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.5, 0.3])
    law.reset(State(q=q0, v=np.zeros(7), t=0.0))

    def traj(amp, T):
        times = np.linspace(0.0, T, 9)
        P = np.tile(q0, (9, 1))
        P[:, :3] += amp * np.sin(np.pi * times / T)[:, None]
        return JointTrajectory(times, P)
    law.set_reference(traj(0.2, 2.0))
    q_meas = q0 + 0.003                       # the arm lags its reference: measured != desired
    hist = []
    dt = 0.001
    for k in range(2000):
        t = k * dt
        if k == 700:
            law.set_reference(traj(-0.1, 1.5))
        law.compute(State(q=q_meas, v=np.zeros(7), t=t))
        hist.append((law.q_d.copy(), law.v_d.copy(), law.a_d.copy()))
    for i, name in enumerate(("q_d", "v_d")):
        x = np.array([h[i] for h in hist])
        d = np.abs(np.diff(x, axis=0)).max(axis=1)
        before = d[679:699].max()
        assert d[699] <= 3.0 * before + 1e-12, (name, d[699], before)
        assert d[700] <= 3.0 * before + 1e-12, (name, d[700], before)
    # the acceleration keeps its value across the switch (the new one bends away from it within a
    # few ms: no step of the size of a_d itself, which a start at rest, a0 = 0, would give)
    a = np.array([h[2] for h in hist])
    scale = np.abs(a[600:700]).max()
    assert np.abs(a[700] - a[699]).max() <= 0.05 * scale, (np.abs(a[700] - a[699]).max(), scale)


@pytest.mark.parametrize("kind", ["cubic_spline", "cubic_hermite", "quintic"])
def test_peak_rates_match_dense_sampling(kind):
    """peak_rates (the IK path's bound check) against the largest |v|, |a| of sample() on a 20 000-point
    grid per trajectory: within 0.2 % and at the same time (to a sample)."""
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.uniform(0.1, 0.5, 6))
    P = rng.normal(size=(6, 3))
    V = rng.normal(size=(6, 3)) if kind != "cubic_spline" else None
    A = rng.normal(size=(6, 3)) if kind == "quintic" else None
    jt = JointTrajectory(t, P, V, A)
    assert jt.kind == kind
    v_pk, a_pk, t_v, t_a = jt.peak_rates(64)
    grid = np.linspace(jt.start_time, jt.end_time, 20001)[:-1]
    S = [jt.sample(x) for x in grid]
    v = np.abs([s[1] for s in S])
    a = np.abs([s[2] for s in S])
    assert np.allclose(v_pk, v.max(axis=0), rtol=2e-3) and np.allclose(a_pk, a.max(axis=0), rtol=2e-3)
    assert np.all(np.abs(t_v - grid[v.argmax(axis=0)]) < 0.02) and np.all(np.abs(t_a - grid[a.argmax(axis=0)]) < 0.02)
