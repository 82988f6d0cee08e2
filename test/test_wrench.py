"""WrenchProcessor: frame change conserves power, tare + tool-weight removal, low-pass, deadband.

The processor uses the Pinocchio backend; oracles use the in-repo ReferenceBackend and
spatial.xform (motion transform).  Tolerances stated per test."""
import math

import numpy as np
import pytest

from robot_dynamics.control import WrenchProcessor
from robot_dynamics.dynamics.reference.spatial import xform

SENSOR, TARGET = "panda_link8", "panda_hand_tcp"


@pytest.mark.parametrize("sensor, target", [(SENSOR, TARGET), (TARGET, SENSOR), ("panda_link5", TARGET)])
def test_frame_change_conserves_power(model, pinb, refb, sensor, target):
    """w_t . v_t = w_s . v_s for the twist of one rigid motion seen in both frames (relative 1e-12),
    v_s = s_X_t v_t from the reference kinematics and spatial.xform."""
    rng = np.random.default_rng(0)
    wp = WrenchProcessor(model, pinb, sensor, target)
    for _ in range(10):
        q = model.random_configuration(rng)
        w_s = rng.normal(size=6) * [10, 10, 10, 1, 1, 1]
        w_t = wp.process(w_s, q, 0.001)
        Rs, ps = refb.frame_placement(q, sensor)
        Rt, pt = refb.frame_placement(q, target)
        # sensor frame seen from the target frame: orientation Rt^T Rs, origin Rt^T (ps - pt)
        X_st = xform(Rt.T @ Rs, Rt.T @ (ps - pt))       # target coordinates -> sensor coordinates
        v_t = rng.normal(size=6)
        v_s = X_st @ v_t
        assert w_t @ v_t == pytest.approx(w_s @ v_s, rel=1e-12, abs=1e-12)


def test_local_world_aligned_expression(model, pinb, refb):
    """expressed_in local_world_aligned = the local result rotated by the target's orientation (1e-12)."""
    rng = np.random.default_rng(1)
    a = WrenchProcessor(model, pinb, SENSOR, TARGET)
    b = WrenchProcessor(model, pinb, SENSOR, TARGET, expressed_in="local_world_aligned")
    assert b.frame == "world" and a.frame == TARGET
    q = model.random_configuration(rng)
    w = rng.normal(size=6)
    Rt, _ = refb.frame_placement(q, TARGET)
    wl, ww = a.process(w, q, 0.001), b.process(w, q, 0.001)
    np.testing.assert_allclose(ww, np.concatenate([Rt @ wl[:3], Rt @ wl[3:]]), atol=1e-12)


def _tool_reading(model, refb, q, m, c):
    """What a sensor reads for a static tool (weight at c): oracle with the reference kinematics."""
    Rs, _ = refb.frame_placement(q, SENSOR)
    f = Rs.T @ (m * model.gravity)
    return np.concatenate([f, np.cross(c, f)])


def test_tare_and_tool_weight_removal_static_tool(model, pinb, refb):
    """Tare at one pose, then a static tool at several orientations reads zero (1e-9 N, N m)."""
    rng = np.random.default_rng(2)
    m, c = 1.3, np.array([0.01, -0.02, 0.08])
    bias = rng.normal(size=6) * [5, 5, 5, 0.5, 0.5, 0.5]
    wp = WrenchProcessor(model, pinb, SENSOR, SENSOR, tool_mass=m, tool_com=c)
    q0 = model.random_configuration(rng)
    wp.tare(bias + _tool_reading(model, refb, q0, m, c), q0)
    np.testing.assert_allclose(wp.bias, bias, atol=1e-12)
    readings = []
    for _ in range(6):
        q = model.random_configuration(rng)
        raw = bias + _tool_reading(model, refb, q, m, c)
        readings.append(raw)
        np.testing.assert_allclose(wp.process(raw, q, 0.001), 0.0, atol=1e-9)
    assert np.ptp(np.array(readings)[:, :3], axis=0).max() > 1.0      # the orientations really differ
    # an external wrench on the tool comes through unchanged (sensor = target)
    w_ext = np.array([1.0, -2.0, 3.0, 0.1, 0.2, -0.3])
    np.testing.assert_allclose(wp.process(raw + w_ext, q, 0.001), w_ext, atol=1e-9)


def test_low_pass_first_order(model, pinb):
    """Step response y_n = 1 - (1 - alpha)^n with alpha = dt / (dt + 1/(2 pi fc)) (1e-12); a constant
    input passes unchanged from the first sample."""
    q = model.neutral()
    fc, dt = 10.0, 0.001
    wp = WrenchProcessor(model, pinb, SENSOR, SENSOR, filter_cutoff_hz=fc)
    const = np.array([1.0, 2, 3, 0.1, 0.2, 0.3])
    for _ in range(3):
        np.testing.assert_allclose(wp.process(const, q, dt), const, atol=1e-15)
    wp.reset()
    wp.process(np.zeros(6), q, dt)
    alpha = dt / (dt + 1 / (2 * math.pi * fc))
    for n in range(1, 50):
        y = wp.process(np.full(6, 1.0), q, dt)
        np.testing.assert_allclose(y, 1 - (1 - alpha) ** n, atol=1e-12)
    for _ in range(5000):
        y = wp.process(np.full(6, 1.0), q, dt)
    np.testing.assert_allclose(y, 1.0, atol=1e-9)


def test_deadband(model, pinb):
    q = model.neutral()
    wp = WrenchProcessor(model, pinb, SENSOR, SENSOR, deadband=(2.0, 0.5))
    np.testing.assert_array_equal(wp.process([1.0, 1.0, 1.0, 0.2, 0.2, 0.2], q, 0.001), 0.0)
    w = wp.process([6.0, 0.0, 8.0, 0.0, 1.5, 0.0], q, 0.001)
    np.testing.assert_allclose(w, [6 * 0.8, 0, 8 * 0.8, 0, 1.0, 0], atol=1e-12)   # |f| 10 -> 8, |n| 1.5 -> 1


def test_bad_inputs(model, pinb):
    with pytest.raises(ValueError):
        WrenchProcessor(model, pinb, "nope", TARGET)
    with pytest.raises(ValueError):
        WrenchProcessor(model, pinb, SENSOR, TARGET, tool_mass=-1.0)
    with pytest.raises(ValueError):
        WrenchProcessor(model, pinb, SENSOR, TARGET, filter_cutoff_hz=0.0)
    with pytest.raises(ValueError):
        WrenchProcessor(model, pinb, SENSOR, TARGET, deadband=(1.0,))
    wp = WrenchProcessor(model, pinb, SENSOR, TARGET)
    with pytest.raises(ValueError):
        wp.process([np.nan, 0, 0, 0, 0, 0], model.neutral(), 0.001)
    with pytest.raises(ValueError):
        wp.tare([0, 0, 0], model.neutral())
