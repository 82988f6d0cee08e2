"""SafetyFilter: property tests (hypothesis) over random states, laws, gains, references and raw torques
including NaN/Inf/huge values.  Properties, every cycle:
  - the output is finite and within the effort limits (x effort_scale) (tolerance 1e-9 N m);
  - it moves at most rate_limit * dt from the previous output, the first from zero (1e-9 N m);
  - every intervention is reported in `reasons` and counted in `counts`.
"""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robot_dynamics.control import (LAWS, CartesianReference, JointReference, SafetyFilter, SafetyParams, State,
                                    make_law)
from robot_dynamics.dynamics import Model, PinocchioBackend

MODEL = Model.from_robot("panda")
BACKEND = PinocchioBackend(MODEL)
N = MODEL.nv
LIM = MODEL.effort_limits
TOL = 1e-9

special = st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e300, -1e300, 1e20, 0.0])
entry = st.one_of(st.floats(-500, 500), special)
torques = st.lists(entry, min_size=N, max_size=N).map(np.array)
dts = st.one_of(st.floats(1e-5, 0.05), st.sampled_from([0.0, -0.001, float("nan"), float("inf")]))
params = st.fixed_dictionaries({
    "rate_limit": st.floats(1.0, 5000.0),
    "ramp_time": st.one_of(st.just(0.0), st.floats(0.001, 1.0)),
    "effort_scale": st.floats(0.05, 1.0),
    "position_margin": st.one_of(st.just(0.0), st.floats(0.0, 0.5)),
    "position_stiffness": st.floats(0.0, 1000.0),
    "velocity_damping": st.one_of(st.just(0.0), st.floats(0.0, 50.0)),
})


def state_strategy():
    qs = st.lists(st.floats(-3.5, 3.5), min_size=N, max_size=N).map(np.array)
    vs = st.lists(st.one_of(st.floats(-5, 5), special), min_size=N, max_size=N).map(np.array)
    return st.builds(State, q=qs, v=vs)


def check_cycle(sf, prev, tau, state, dt, fallback=None):
    out = sf.apply(tau, state, dt, fallback)
    lim = sf.limit
    assert out.shape == (N,) and np.all(np.isfinite(out))
    assert np.all(np.abs(out) <= lim + TOL)
    dtv = dt if (isinstance(dt, float) and math.isfinite(dt) and dt > 0) else 0.0
    assert np.all(np.abs(out - prev) <= sf.rate * dtv + TOL)
    # reasons
    t = np.asarray(tau, dtype=float)
    if not np.all(np.isfinite(t)):
        assert "nonfinite_command" in sf.reasons
    if dtv == 0.0:
        assert "bad_dt" in sf.reasons
        np.testing.assert_array_equal(out, prev)
    if sf.reasons == []:                                 # nothing acted: the command passed unchanged
        np.testing.assert_array_equal(out, t)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=params, cycles=st.lists(st.tuples(torques, state_strategy(), dts), min_size=1, max_size=12),
       use_fallback=st.booleans())
def test_raw_torques_properties(p, cycles, use_fallback):
    sf = SafetyFilter(MODEL, p)
    prev = np.zeros(N)
    seen = {}
    for tau, state, dt in cycles:
        fb = BACKEND.gravity(np.clip(state.q, MODEL.lower_limits, MODEL.upper_limits)) if use_fallback else None
        prev = check_cycle(sf, prev, tau, state, dt, fb)
        for r in sf.reasons:
            seen[r] = seen.get(r, 0) + 1
        assert len(set(sf.reasons)) == len(sf.reasons)
        # when the command was clipped, it is reported
        t = np.asarray(tau, dtype=float)
        if np.all(np.isfinite(t)) and np.any(np.abs(t) > sf.limit) and not sf._use_state:
            assert "effort_limit" in sf.reasons
    assert seen == sf.counts


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(LAWS), seed=st.integers(0, 2 ** 32 - 1), gain=st.floats(0.0, 5000.0),
       offset=st.floats(-3.0, 3.0), vscale=st.floats(0.0, 10.0), nan_at=st.integers(-1, N - 1),
       dt=st.floats(1e-4, 0.01))
def test_laws_through_filter(name, seed, gain, offset, vscale, nan_at, dt):
    """Random states, gains and references through a law and the filter, with an occasional NaN in
    the state: the filter output keeps all properties."""
    rng = np.random.default_rng(seed)
    prm = {"computed_torque": {"omega": math.sqrt(gain)}, "joint_impedance": {"k_gains": gain},
           "cartesian_impedance": {"task.k_pos_x": gain, "task.k_rot_z": gain / 10},
           "gravity_compensation": {}}[name]
    law = make_law(name, MODEL, BACKEND, prm)
    sf = SafetyFilter(MODEL, {"ramp_time": 0.01})
    s = State(q=MODEL.random_configuration(rng), v=rng.uniform(-vscale, vscale, N), t=0.0)
    law.reset(s)
    if name in ("computed_torque", "joint_impedance"):
        law.set_reference(JointReference(q=s.q + offset, v=rng.uniform(-1, 1, N), a=rng.uniform(-9, 9, N)))
    elif name == "cartesian_impedance":
        R, p = BACKEND.frame_placement(s.q, law.frame)
        law.set_reference(CartesianReference(R=np.array(R), p=np.array(p) + offset))
    prev = np.zeros(N)
    for k in range(15):
        s = State(q=MODEL.random_configuration(rng), v=rng.uniform(-vscale, vscale, N), t=k * dt)
        if k == 7 and nan_at >= 0:
            s.v[nan_at] = np.nan
        tau = law.compute(s)
        prev = check_cycle(sf, prev, tau, s, dt)


def test_start_ramp_from_zero_and_to_full():
    """Constant command: output = cmd * min(1, t / ramp_time) while the rate limit does not bind (1e-12),
    then exactly the command."""
    sf = SafetyFilter(MODEL, SafetyParams(ramp_time=0.1, rate_limit=1e6))
    cmd = np.array([10, -20, 5, 1, 0.5, -0.5, 0.1])
    dt = 0.001
    for k in range(1, 150):
        out = sf.apply(cmd, None, dt)
        np.testing.assert_allclose(out, cmd * min(1.0, k * dt / 0.1), atol=1e-12)
        assert ("start_ramp" in sf.reasons) == (k * dt < 0.1 - 1e-12)
    sf.reset()
    np.testing.assert_allclose(sf.apply(cmd, None, dt), cmd * 0.01, atol=1e-12)


def test_nan_rate_limits_last_good_toward_fallback():
    sf = SafetyFilter(MODEL, {"ramp_time": 0.0, "rate_limit": 100.0})
    dt = 0.001
    good = np.full(N, 1.0)
    for _ in range(20):
        out = sf.apply(good, None, dt)
    np.testing.assert_allclose(out, good, atol=0)
    fb = np.full(N, 0.5)
    out = sf.apply(np.full(N, np.nan), None, dt, fallback=fb)
    assert sf.reasons == ["nonfinite_command", "rate_limit"]
    np.testing.assert_allclose(out, 1.0 - 100.0 * dt, atol=1e-12)            # one rate step toward fb
    for _ in range(10):
        out = sf.apply(np.full(N, np.inf), None, dt, fallback=fb)
    np.testing.assert_allclose(out, fb, atol=1e-12)
    out = sf.apply(None, None, dt, fallback=[np.nan] * N)                   # no usable fallback: zero
    assert "bad_fallback" in sf.reasons
    np.testing.assert_allclose(out, 0.5 - 0.1, atol=1e-12)
    assert sf.counts["nonfinite_command"] == 12


def test_callable_fallback_is_evaluated_only_for_a_nonfinite_command():
    calls = []

    def fallback():
        calls.append(1)
        return np.full(N, 0.5)

    a = SafetyFilter(MODEL, {"ramp_time": 0.0, "rate_limit": 100.0})
    b = SafetyFilter(MODEL, {"ramp_time": 0.0, "rate_limit": 100.0})
    dt = 0.001
    for cmd in [np.full(N, 1.0)] * 5 + [np.full(N, np.nan)] * 3 + [np.full(N, 0.8)] * 2:
        out_a = a.apply(cmd, None, dt, fallback=fallback)
        out_b = b.apply(cmd, None, dt, fallback=np.full(N, 0.5))
        np.testing.assert_array_equal(out_a, out_b)       # same result as the array fallback
    assert len(calls) == 3                                 # called on the three NaN cycles only


def test_effort_limits_override_and_position_repulsion():
    sf = SafetyFilter(MODEL, {"effort_limits": [5.0] * N, "ramp_time": 0.0, "rate_limit": 1e9,
                              "position_margin": 0.1, "position_stiffness": 100.0})
    q = (MODEL.lower_limits + MODEL.upper_limits) / 2
    q[0] = MODEL.upper_limits[0] - 0.05                      # inside the margin at the upper limit
    out = sf.apply(np.zeros(N), State(q=q, v=np.zeros(N)), 0.001)
    assert out[0] == pytest.approx(-100.0 * 0.05, abs=1e-9) and np.all(out[1:] == 0)
    assert "position_limit" in sf.reasons
    out = sf.apply(np.full(N, 50.0), State(q=q, v=np.zeros(N)), 0.001)
    np.testing.assert_allclose(out[1:], 5.0, atol=0)
    assert "effort_limit" in sf.reasons


def test_velocity_damping():
    sf = SafetyFilter(MODEL, {"ramp_time": 0.0, "rate_limit": 1e9, "velocity_damping": 2.0})
    v = np.linspace(-1, 1, N)
    out = sf.apply(np.zeros(N), State(q=MODEL.neutral(), v=v), 0.001)
    np.testing.assert_allclose(out, -2.0 * v, atol=1e-15)
    assert "velocity_damping" in sf.reasons


@pytest.mark.parametrize("bad", [{"rate_limit": -1.0}, {"rate_limit": float("nan")}, {"ramp_time": -0.1},
                                 {"effort_limits": [10.0] * (N - 1)}, {"effort_limits": [-1.0] * N},
                                 {"effort_scale": 1.5}, {"effort_scale": 0.0}, {"velocity_damping": -1},
                                 {"position_margin": float("inf")}, {"unknown": 1}])
def test_set_params_rejects_and_keeps_old(bad):
    sf = SafetyFilter(MODEL, {"rate_limit": 500.0})
    before = sf.params
    with pytest.raises(ValueError):
        sf.set_params(bad)
    assert sf.params == before
    with pytest.raises(ValueError):
        SafetyFilter(MODEL, bad)


def test_default_params():
    sf = SafetyFilter(MODEL)
    assert sf.params["rate_limit"] == 1000.0 and sf.params["ramp_time"] == 0.5
    np.testing.assert_array_equal(sf.limit, LIM)


class _GeneralOnly(SafetyFilter):
    """The filter without its fast path (SafetyFilter._fast): every cycle element by element."""

    def _fast(self, tau, dt, p, ramp_dt):
        return None


small = st.floats(-1.0, 1.0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(st.one_of(st.floats(-100, 100), small, special), min_size=N, max_size=N),
                          dts), min_size=1, max_size=30),
       st.floats(1.0, 5000.0), st.one_of(st.just(0.0), st.floats(0.001, 0.02)), st.floats(0.05, 1.0),
       st.one_of(st.none(), st.lists(st.floats(1.0, 5000.0), min_size=N, max_size=N)))
def test_fast_path_equals_the_general_path(steps, rate, ramp, scale, rates):
    """The fast path of apply() gives, bit for bit, the output, the reasons and the counts of the
    general path, over sequences that cross its conditions both ways (small steps within the rate
    limit, jumps, clamps, NaN, the end of the start ramp, bad dt)."""
    p = SafetyParams(rate_limit=rates if rates is not None else rate, ramp_time=ramp, effort_scale=scale)
    a, b = SafetyFilter(MODEL, p), _GeneralOnly(MODEL, p)
    prev = np.zeros(N)
    for tau, dt in steps:
        tau = np.array(tau, dtype=float)
        if np.all(np.abs(tau) <= 1.0):                 # a small change from the last output
            tau = prev + tau * 1e-3
        ya, yb = a.apply(tau, None, dt), b.apply(tau, None, dt)
        assert np.array_equal(ya, yb), (ya, yb)
        assert a.reasons == b.reasons and a.counts == b.counts
        prev = ya
