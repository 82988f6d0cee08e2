"""ControlLoop and SafetyFilter against independent oracles (fake clock, no ROS): per-joint
parameters given in a `joints` order that is NOT the model order, effort limits x effort_scale from
the URDF text, the per-command rate limit torque_rate_limit / update_rate, and the watchdog timeout.
Every expected value comes from the parameters this test sets, the URDF parsed here with ElementTree,
or the reference (in-repo) dynamics backend, never from the loop or the filter under test.

Each test names the deliberate bug it catches (bench/mutations.py runs them against it)."""
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from robot_dynamics.control import ControlLoop, SafetyFilter, State
from robot_dynamics.dynamics import Model, make_backend, robots

URDF = robots.robot_urdf_path("panda").read_text()
MODEL = Model.from_robot("panda")
NAMES = list(MODEL.joint_names)                         # model order
# a `joints` order that is a real permutation of the model's (no joint stays in place)
JOINTS = ["panda_joint3", "panda_joint7", "panda_joint1", "panda_joint5", "panda_joint2", "panda_joint6",
          "panda_joint4"]
Q0 = {"panda_joint1": 0.1, "panda_joint2": -0.5, "panda_joint3": 0.2, "panda_joint4": -2.0,
      "panda_joint5": 0.1, "panda_joint6": 1.5, "panda_joint7": 0.3}
K = {j: 10.0 * (i + 1) for i, j in enumerate(NAMES)}    # 10, 20, ..., 70 N m/rad, by name
EFFORT = {j: 5.0 + i for i, j in enumerate(NAMES)}       # 5 .. 11 N m, by name
REF = make_backend(MODEL, "reference")                  # the in-repo RNEA: independent of Pinocchio
PERIOD = 1e-3


def urdf_effort_limits():
    """{joint: effort} straight from the URDF text."""
    root = ET.fromstring(URDF)
    out = {}
    for j in root.iter("joint"):
        lim = j.find("limit")
        if j.get("type") in ("revolute", "prismatic") and lim is not None:
            out[j.get("name")] = float(lim.get("effort"))
    return out


def by_name(tau_model):
    return {j: float(tau_model[i]) for i, j in enumerate(NAMES)}


def q_model(d):
    return np.array([d[j] for j in NAMES])


def make_loop(**over):
    p = {"controller": "joint_impedance", "joints": JOINTS, "update_rate": 1.0 / PERIOD, "ramp_time": 0.0,
         "torque_rate_limit": 1e9, "watchdog_timeout": 0.1,
         "joint_impedance.k_gains": [K[j] for j in JOINTS],
         "joint_impedance.d_gains": [0.0] * 7}
    p.update(over)
    return ControlLoop.from_params(MODEL, p, log=lambda level, text: None)


def run_steps(loop, q, t0, n, v=None):
    """n control steps at PERIOD with the state q (model order); returns the commands (model order)."""
    out = []
    v = np.zeros(7) if v is None else v
    for k in range(n):
        now = t0 + k * PERIOD
        loop.update_state(q, v, now)
        tau, safe = loop.step(now)
        assert not safe
        out.append(tau.copy())
    return out


def test_gains_and_effort_limits_given_in_joints_order_apply_by_name():
    """Bug: per-joint parameters not reordered from `joints` order to model order.  `joints` is a
    permutation of the model order here, k_gains and effort_limits differ per joint: the torque of
    joint j must be K[j] (q_hold - q)_j + g_j(q), clipped at EFFORT[j] (g from the reference RNEA)."""
    loop = make_loop(**{"effort_limits": [EFFORT[j] for j in JOINTS]})
    loop.activate(0.0)
    q0 = q_model(Q0)
    run_steps(loop, q0, 0.0, 2)                          # the law holds the first state
    dq = {j: 0.01 * (1 if i % 2 else -1) for i, j in enumerate(NAMES)}
    q1 = q0 + q_model(dq)
    tau = by_name(run_steps(loop, q1, 0.002, 3)[-1])
    g = by_name(REF.gravity(q1))
    for j in NAMES:
        want = float(np.clip(-K[j] * dq[j] + g[j], -EFFORT[j], EFFORT[j]))
        assert tau[j] == pytest.approx(want, abs=1e-9), (j, tau[j], want)
    # at least one joint inside its limit and one clipped at it, or the check proves less than it says
    inside = [j for j in NAMES if abs(-K[j] * dq[j] + g[j]) < EFFORT[j]]
    assert inside and len(inside) < 7, inside


def test_effort_scale_scales_the_urdf_limits():
    """Bug: effort_scale ignored by the safety filter.  A huge command saturates at
    effort_scale x the URDF's effort limit of each joint (read from the URDF text here)."""
    urdf = urdf_effort_limits()
    assert set(NAMES) <= set(urdf)                      # (the fingers are not in the model)
    scale = 0.25
    sf = SafetyFilter(MODEL, {"effort_scale": scale, "rate_limit": 1e12, "ramp_time": 0.0})
    out = sf.apply(np.full(7, 1e5), State(q_model(Q0), np.zeros(7)), PERIOD)
    np.testing.assert_allclose(out, [scale * urdf[j] for j in NAMES], rtol=1e-12)
    out = sf.apply(np.full(7, -1e5), State(q_model(Q0), np.zeros(7)), PERIOD)
    np.testing.assert_allclose(out, [-scale * urdf[j] for j in NAMES], rtol=1e-12)
    # the same through the loop's parameters (effort_scale live as well)
    loop = make_loop(effort_scale=0.5, **{"joint_impedance.k_gains": [1e5] * 7})
    loop.activate(0.0)
    q0 = q_model(Q0)
    run_steps(loop, q0, 0.0, 1)
    tau = by_name(run_steps(loop, q0 + 0.1, 0.001, 2)[-1])
    for j in NAMES:
        assert abs(tau[j]) == pytest.approx(0.5 * urdf[j], rel=1e-12), j
    assert loop.set_params({"effort_scale": 0.1}) == (True, "")
    tau = by_name(run_steps(loop, q0 + 0.1, 0.003, 2)[-1])
    for j in NAMES:
        assert abs(tau[j]) <= 0.1 * urdf[j] * (1 + 1e-12), j


def test_rate_limit_per_command_is_the_parameter_over_the_update_rate():
    """Bugs: torque_rate_limit x 10 in the loop; the rate clamp removed.  A step in the error with
    torque_rate_limit R at update_rate 1/PERIOD: each command moves exactly R x PERIOD toward the
    target while it is out of reach (saturated), never more, whatever the gap between steps."""
    R = 50.0
    loop = make_loop(torque_rate_limit=R, **{"joint_impedance.k_gains": [400.0] * 7})
    loop.activate(0.0)
    q0 = q_model(Q0)
    taus = run_steps(loop, q0, 0.0, 1)
    prev = taus[-1]
    q1 = q0 + 0.05                                       # K x 0.05 = 20 N m away: 400 commands of R x PERIOD
    for k in range(1, 30):
        now = k * PERIOD
        loop.update_state(q1, np.zeros(7), now)
        tau, safe = loop.step(now)
        assert not safe
        np.testing.assert_allclose(np.abs(tau - prev), R * PERIOD, rtol=1e-9)
        prev = tau.copy()
    # a late step (a stall of 50 ms, below the watchdog) still moves one command period's worth
    now = 29 * PERIOD + 0.05
    loop.update_state(q1, np.zeros(7), now)
    tau, safe = loop.step(now)
    assert not safe
    np.testing.assert_allclose(np.abs(tau - prev), R * PERIOD, rtol=1e-9)


@pytest.mark.parametrize("timeout", [0.05, 0.3])
def test_watchdog_trips_after_the_timeout_not_before(timeout):
    """Bug: watchdog timeout x 20.  States every PERIOD until t_last, then none: steps up to
    t_last + timeout are the law's (safe False), the first step past it is the safe command."""
    loop = make_loop(watchdog_timeout=timeout)
    loop.activate(0.0)
    q0 = q_model(Q0)
    run_steps(loop, q0, 0.0, 10)
    t_last = 9 * PERIOD
    # control steps keep coming (no caller stall), states do not
    k, now = 1, t_last
    while True:
        now = t_last + k * PERIOD
        tau, safe = loop.step(now)
        if safe:
            break
        assert now - t_last <= timeout + 1e-12, "the law ran on a state older than the timeout"
        k += 1
        assert k < 100000
    assert now - t_last == pytest.approx(timeout, abs=PERIOD + 1e-12), (now - t_last, timeout)
    assert loop.counts["watchdog_trips"] == 1


def test_tare_uses_the_current_reading():
    """~/tare (ControlLoop.tare) takes the bias from the latest raw wrench: with force control on z
    (target force 0, so the command depends on the measured wrench only through the feedback), after
    readings A0 then A and a tare, the reading A processes to exactly zero wrench: the command equals
    that of the same loop with a zero-wrench sensor, and differs from it before the tare (the wrench
    does act), and after a tare that had used A0 instead."""
    params = {"controller": "cartesian_impedance", "sensor_frame": "panda_hand",
              "cartesian_impedance.force_axes": [False, False, True, False, False, False],
              "cartesian_impedance.force_kp": [0.5]}
    q0 = q_model(Q0)
    A0 = np.array([1.0, -2.0, 3.0, 0.1, 0.2, -0.1])
    A = np.array([4.0, 1.0, -6.0, 0.3, -0.2, 0.05])

    def loop_with(readings, tare_after):
        loop = make_loop(**params)
        loop.activate(0.0)
        run_steps(loop, q0, 0.0, 2)
        for k, w in enumerate(readings):
            loop.estimation.set_wrench(w, "panda_hand", 0.002 + k * PERIOD)
            if k == tare_after:
                assert loop.estimation.tare()[0]
        return run_steps(loop, q0, 0.01, 3)[-1]
    zero = loop_with([np.zeros(6)], None)
    untared = loop_with([A0, A], None)
    tared = loop_with([A0, A], 1)
    stale_tare = loop_with([A0, A], 0)                 # tared on A0, then A arrives
    assert np.max(np.abs(untared - zero)) > 0.1, "the wrench does not act on the command: the check is void"
    np.testing.assert_allclose(tared, zero, atol=1e-9)
    assert np.max(np.abs(stale_tare - zero)) > 0.1
