"""The ROS-free control loop (robot_dynamics.control.loop.ControlLoop) driven with a fake clock.

Oracles: the parameters each test sets (timeouts, rates, gains, limits, periods), Pinocchio's g(q)
through a backend of our own, and the Panda's datasheet torque limits.  Times are multiples of
2^-10 s so the watchdog comparisons are exact in floating point.
"""
import numpy as np
import pytest

from robot_dynamics.control import ControlLoop

ARM = [f"panda_joint{i}" for i in range(1, 8)]
Q0 = np.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.5, 0.3])
PANDA_LIMITS = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])     # N m, Franka datasheet
TICK = 2.0 ** -10                    # s: the fake clock's step (exact in binary)
FAST = {"ramp_time": 0.0, "torque_rate_limit": 1e9, "update_rate": 1.0 / TICK}


def make(model, **params):
    lines = []
    loop = ControlLoop.from_params(model, {k.replace("__", "."): v for k, v in params.items()},
                                   log=lambda level, text: lines.append((level, text)))
    return loop, lines


def g(pinb, q):
    return np.array(pinb.gravity(np.asarray(q, dtype=float)), dtype=float)


def run(loop, t0, n, q=None, v=None):
    """n steps from t0 (one TICK apart), with a fresh state each step when q is given; returns the
    commands (model order) and safe flags."""
    cmds, safes = [], []
    for k in range(n):
        now = t0 + k * TICK
        if q is not None:
            loop.update_state(q, np.zeros(7) if v is None else v, now)
        tau, safe = loop.step(now)
        cmds.append(tau.copy())
        safes.append(safe)
    return np.array(cmds), np.array(safes)


# ------------------------------------------------------------------------------------------------
def test_watchdog_trips_exactly_when_the_state_is_older_than_the_timeout(model, pinb):
    timeout = 64 * TICK
    loop, lines = make(model, watchdog_timeout=timeout, **FAST)
    loop.activate(0.0)
    t_ok = 1.0
    loop.update_state(Q0, np.zeros(7), t_ok)
    tau, safe = loop.step(t_ok)
    assert not safe
    np.testing.assert_allclose(tau, g(pinb, Q0), atol=1e-9)
    for k in range(1, 65):                                   # age <= timeout: still controlling
        tau, safe = loop.step(t_ok + k * TICK)
        assert not safe, f"tripped at age {k * TICK} <= watchdog_timeout {timeout}"
    assert loop.counts["watchdog_trips"] == 0
    tau, safe = loop.step(t_ok + 65 * TICK)                  # age > timeout: the safe command
    assert safe and loop.counts["watchdog_trips"] == 1
    run(loop, t_ok + 66 * TICK, 50)                          # one trip, however long it lasts
    assert loop.counts["watchdog_trips"] == 1
    assert sum("watchdog" in t for _, t in lines) == 1
    level, msg, kv = loop.diagnostics()
    assert level == 2 and "watchdog" in msg and ("watchdog_trips", "1") in kv


def test_a_stall_of_the_caller_longer_than_the_timeout_goes_through_the_watchdog(model, pinb):
    """States fresh, but no step for more than watchdog_timeout: one safe step, then the ramp."""
    timeout, ramp = 64 * TICK, 256 * TICK
    loop, _ = make(model, watchdog_timeout=timeout, ramp_time=ramp, torque_rate_limit=1e9,
                   update_rate=1.0 / TICK)
    loop.activate(0.0)
    run(loop, 0.0, 400, Q0)                                  # past the start ramp: tau = g
    t = 0.0 + 399 * TICK + 65 * TICK                         # a stall of 65 ticks
    loop.update_state(Q0, np.zeros(7), t)
    tau, safe = loop.step(t)
    assert safe and loop.counts["watchdog_trips"] == 1
    np.testing.assert_array_equal(tau, np.zeros(7))          # rate 1e9: the safe command (zero) at once
    cmds, safes = run(loop, t + TICK, 10, Q0)                # resume: ramp from zero over ramp_time
    assert not safes.any()
    k = np.arange(1, 11)[:, None]
    np.testing.assert_allclose(cmds, g(pinb, Q0) * k * TICK / ramp, atol=1e-9)


def test_safe_command_ramps_at_the_rate_and_resume_ramps_from_it(model, pinb):
    rate, timeout, ramp = 100.0, 32 * TICK, 128 * TICK
    step = rate * TICK                                       # N m per command at update_rate = 1/TICK
    loop, _ = make(model, watchdog_timeout=timeout, torque_rate_limit=rate, ramp_time=ramp,
                   update_rate=1.0 / TICK)
    loop.activate(0.0)
    gq = g(pinb, Q0)
    n_up = int(np.ceil(np.abs(gq).max() / step)) + 10
    cmds, _ = run(loop, 0.0, n_up, Q0)
    assert np.all(np.abs(np.diff(np.vstack([np.zeros(7), cmds]), axis=0)) <= step * (1 + 1e-9))
    np.testing.assert_allclose(cmds[-1], gq, atol=1e-9)      # reached g(q) at the rate limit
    # the state stops: after the timeout, the safe command (zero) ramps down at the same rate
    t = (n_up - 1) * TICK
    n_down = int(np.ceil(np.abs(gq).max() / step))
    cmds, safes = run(loop, t + TICK, 32 + n_down + 5)
    assert not safes[:32].any() and safes[32:].all()
    d = np.abs(np.diff(np.vstack([gq, cmds]), axis=0))
    assert np.all(d <= step * (1 + 1e-9)), d.max()
    assert np.any(cmds[32]), "the first safe command is a step of the ramp, not zero at once"
    assert np.isclose(d[32:].max(), step)                    # it moves at the full rate
    np.testing.assert_array_equal(cmds[-1], np.zeros(7))     # and reaches zero exactly
    assert loop.output.safe_reached
    # fresh states again: no jump, the start ramp from the safe command (zero), at most the rate
    t = t + (32 + n_down + 5) * TICK
    cmds, safes = run(loop, t + TICK, n_up + 200, Q0)
    assert not safes.any()
    d = np.abs(np.diff(np.vstack([np.zeros(7), cmds]), axis=0))
    assert np.all(d <= step * (1 + 1e-9))
    np.testing.assert_allclose(cmds[-1], gq, atol=1e-9)


def test_per_joint_gains_and_limits_in_joints_order_land_on_the_right_joints(model, pinb):
    """joints in an order different from the model's: k_gains and effort_limits given in that order
    act on the joints they name; the command order is `joints`."""
    joints = [ARM[i] for i in (3, 0, 6, 2, 5, 1, 4)]
    k_by_name = {j: 10.0 * (i + 1) for i, j in enumerate(ARM)}      # distinct per joint
    lim_by_name = dict(zip(ARM, PANDA_LIMITS))
    lim_by_name["panda_joint6"] = 1.0                                # low limit on one joint only
    loop, _ = make(model, controller="joint_impedance", joints=joints, watchdog_timeout=1.0,
                   joint_impedance__k_gains=[k_by_name[j] for j in joints],
                   joint_impedance__d_gains=[1.0] * 7,
                   effort_limits=[float(lim_by_name[j]) for j in joints], **FAST)
    assert loop.joints == joints
    loop.activate(0.0)
    run(loop, 0.0, 1, Q0)                                             # holds Q0
    dq = np.array([0.01, -0.02, 0.03, -0.04, 0.05, -0.06, 0.07])
    q = Q0 + dq
    loop.update_state(q, np.zeros(7), TICK)
    tau, safe = loop.step(TICK)
    assert not safe
    k = np.array([k_by_name[j] for j in ARM])
    expected = g(pinb, q) - k * dq                                    # model order
    lim = np.array([lim_by_name[j] for j in ARM])
    expected = np.clip(expected, -lim, lim)
    assert abs(expected[5]) == 1.0, "the test must saturate joint 6"
    np.testing.assert_allclose(tau, expected, atol=1e-9)
    cmd = tau[loop.perm]                                              # `joints` order
    np.testing.assert_allclose(cmd, [expected[ARM.index(j)] for j in joints], atol=1e-9)


def test_armature_in_joints_order_lands_on_the_joints_it_names(pinb):
    """`armature` given in a `joints` order unlike the model's: the loop's model carries each value on
    the joint it names (M gains exactly diag(Ia) in model order, both backends), and a bad value is
    refused at construction."""
    from robot_dynamics.dynamics import Model, ReferenceBackend
    model = Model.from_robot("panda")                                 # a model of its own: the loop sets it
    joints = [ARM[i] for i in (3, 0, 6, 2, 5, 1, 4)]
    ia_by_name = {j: 0.01 * (i + 1) for i, j in enumerate(ARM)}
    loop, _ = make(model, controller="computed_torque", joints=joints, backend="reference",
                   armature=[ia_by_name[j] for j in joints])
    expected = np.array([ia_by_name[j] for j in ARM])
    np.testing.assert_array_equal(model.armature, expected)
    M_rigid = pinb.mass_matrix(Q0)                                    # the shared fixture: no armature
    np.testing.assert_allclose(loop.backend.mass_matrix(Q0) - M_rigid, np.diag(expected), atol=1e-12)
    np.testing.assert_allclose(ReferenceBackend(model).mass_matrix(Q0) - M_rigid, np.diag(expected), atol=1e-12)
    with pytest.raises(ValueError, match="armature"):
        make(Model.from_robot("panda"), armature=[-0.1] * 7)


def test_effort_scale_scales_the_limits_the_commands_respect(model):
    loop, _ = make(model, controller="joint_impedance", joint_impedance__k_gains=[1e4],
                   joint_impedance__d_gains=[0.0], effort_scale=0.5, watchdog_timeout=1.0, **FAST)
    loop.activate(0.0)
    run(loop, 0.0, 1, Q0)
    q = Q0 + 0.5 * np.array([1, -1, 1, -1, 1, -1, 1])                 # K dq >> every limit
    loop.update_state(q, np.zeros(7), TICK)
    tau, _ = loop.step(TICK)
    np.testing.assert_allclose(np.abs(tau), 0.5 * PANDA_LIMITS, rtol=1e-12)
    ok, reason = loop.set_params({"effort_scale": 0.25})
    assert ok, reason
    loop.update_state(q, np.zeros(7), 2 * TICK)
    tau, _ = loop.step(2 * TICK)
    np.testing.assert_allclose(np.abs(tau), 0.25 * PANDA_LIMITS, rtol=1e-12)


def test_set_params_rejects_bad_values_atomically(model, pinb):
    k = [100.0, 90.0, 80.0, 70.0, 60.0, 50.0, 40.0]
    loop, _ = make(model, controller="joint_impedance", joint_impedance__k_gains=k,
                   joint_impedance__d_gains=[0.0], watchdog_timeout=1.0, **FAST)
    loop.activate(0.0)
    run(loop, 0.0, 1, Q0)
    dq = np.full(7, 0.01)
    t = [TICK]

    def k_observed():
        t[0] += TICK
        loop.update_state(Q0 + dq, np.zeros(7), t[0])
        tau, safe = loop.step(t[0])
        assert not safe
        return -(tau - g(pinb, Q0 + dq)) / dq
    np.testing.assert_allclose(k_observed(), k, rtol=1e-9)
    bad_sets = [
        {"joint_impedance.k_gains": [-1.0] + k[1:]},                  # negative
        {"joint_impedance.k_gains": k[:3]},                           # wrong length
        {"joint_impedance.k_gains": [float("nan")] * 7},              # NaN
        {"joint_impedance.k_gains": [5.0] * 7, "effort_scale": 2.0},  # good gain + scale > 1 (filter)
        {"joint_impedance.k_gains": [5.0] * 7, "watchdog_timeout": -1.0},
        {"joint_impedance.k_gains": [5.0] * 7, "controller": "computed_torque"},   # configure-only
        {"joint_impedance.k_gains": [5.0] * 7, "cartesian_impedance.max_pos_error": -1.0},
    ]
    for bad in bad_sets:
        ok, reason = loop.set_params(bad)
        assert not ok and reason, bad
        np.testing.assert_allclose(k_observed(), k, rtol=1e-9, err_msg=str(bad))
    # the limits were not touched by the rejected effort_scale either: K dq small, so check a big one
    ok, reason = loop.set_params({"joint_impedance.k_gains": [30.0], "not_a_loop_parameter": 1})
    assert ok, reason
    np.testing.assert_allclose(k_observed(), np.full(7, 30.0), rtol=1e-9)


def test_rate_limit_per_command_after_a_gap_below_the_watchdog(model):
    """Issue 14 item 5: after a 100 ms gap (below watchdog_timeout) one step changes the command by
    exactly torque_rate_limit / update_rate where the target is far, never rate x gap."""
    rate, rate_hz = 1000.0, 250.0
    loop, _ = make(model, controller="joint_impedance", joint_impedance__k_gains=[200.0],
                   joint_impedance__d_gains=[0.0], watchdog_timeout=0.5, torque_rate_limit=rate,
                   ramp_time=0.0, update_rate=rate_hz)
    loop.activate(0.0)
    period = 1.0 / rate_hz
    cmds, _ = run_period(loop, 0.0, 200, period, Q0)               # settled at g(Q0) (holding Q0)
    before = cmds[-1]
    t = 199 * period + 0.1                                          # a 100 ms gap
    q = Q0 + 0.2                                                    # K dq = 40 N m >> rate x period
    loop.update_state(q, np.zeros(7), t)
    tau, safe = loop.step(t)
    assert not safe and loop.counts["watchdog_trips"] == 0
    change = np.abs(tau - before)
    assert change.max() <= rate * period * (1 + 1e-9), change.max()
    assert change.max() == pytest.approx(rate * period, rel=1e-9)   # the command period is 1/update_rate


def run_period(loop, t0, n, period, q):
    cmds = []
    for k in range(n):
        loop.update_state(q, np.zeros(7), t0 + k * period)
        tau, _ = loop.step(t0 + k * period)
        cmds.append(tau.copy())
    return np.array(cmds), None


def test_logging_is_throttled_while_the_counts_stay_exact(model):
    """Alternating bad and good joint states at 1 kHz for 3 s of fake time: at most one line per
    condition per log_throttle_period (plus the end of a logged episode), the counts exact; a
    lasting fault is logged again after the period."""
    period = 1.0
    loop, lines = make(model, watchdog_timeout=1.0, log_throttle_period=period, **FAST)
    loop.activate(0.0)
    times = []
    log = loop.report.sink

    def timed(level, text):
        times.append(now[0])
        log(level, text)
    loop.report.sink = timed
    now = [0.0]
    n = 3000
    for k in range(n):
        now[0] = k * 0.001
        if k % 2:
            loop.reject_state("non_finite", "NaN or Inf for joint(s) ['panda_joint4']", now[0])
        else:
            loop.update_state(Q0, np.zeros(7), now[0])
        loop.step(now[0])
    assert loop.counts["rejected.joint_states.non_finite"] == n // 2
    js = [t for (lvl, txt), t in zip(lines, times) if "joint state" in txt]
    per_second = np.bincount(np.floor(np.array(js) / period).astype(int))
    print(f"{len(js)} joint-state lines for {n // 2} rejections in {n / 1000} s: {per_second.tolist()} per s")
    assert per_second.max() <= 2, per_second                    # one start + one end per period
    assert len(js) >= 3, "still reported every period"
    assert any("more occurrence(s) not logged" in txt for _, txt in lines), "suppressed ones summed"
    # a lasting fault right after a logged one: its start is suppressed, but it is reported once the
    # period has passed (never silenced)
    k0 = len(lines)
    for k in range(2500):
        now[0] = 10.0 + k * 0.001
        if k == 1:
            loop.update_state(Q0, np.zeros(7), now[0])
        else:
            loop.reject_state("missing_joint", "joint(s) ['panda_joint7'] missing", now[0])
        loop.step(now[0])
    late = [t for (lvl, txt), t in zip(lines[k0:], times[k0:]) if "joint state rejected (missing_joint)" in txt]
    assert len(late) == 2 and late[0] == 10.0, late             # the short one, then the lasting one
    assert 10.0 + period - 1e-9 <= late[1] <= 10.0 + period + 0.002, late   # one period after the last line
    # log_throttle_period 0: one line per episode start and end
    loop2, lines2 = make(model, watchdog_timeout=1.0, log_throttle_period=0.0, **FAST)
    loop2.activate(0.0)
    for k in range(20):
        if k % 2:
            loop2.reject_state("non_finite", "NaN", k * 0.001)
        else:
            loop2.update_state(Q0, np.zeros(7), k * 0.001)
        loop2.step(k * 0.001)
    assert sum("joint state rejected" in t for _, t in lines2) == 10 and sum("valid again" in t for _, t in lines2) == 9


def test_construction_validates_like_the_node(model):
    for bad, word in (({"controller": "nope"}, "controller"), ({"watchdog_timeout": 0.0}, "watchdog_timeout"),
                      ({"joints": ARM[:6]}, "joints"), ({"joint_impedance.k_gains": [1.0] * 3}, "k_gains"),
                      ({"effort_scale": float("nan")}, "effort_scale"), ({"safe_command": "brake"}, "safe_command")):
        with pytest.raises(ValueError, match=word):
            ControlLoop.from_params(model, bad)


def _traj(n_points=11, T=1.0, dq=0.2):
    """A joint trajectory from Q0 moving joint 1 by dq over T (positions only, model order)."""
    from robot_dynamics.control import JointTrajectory
    times = np.linspace(0.0, T, n_points)
    P = np.tile(Q0, (n_points, 1))
    P[:, 0] += dq * np.sin(0.5 * np.pi * times / T) ** 2
    return JointTrajectory(times, P)


def test_references_around_a_watchdog_trip_are_rejected_or_abandoned_with_a_reason(model):
    """Issue 24.2: a trajectory that arrives while the watchdog is tripped is not followed after the
    resume (the resume holds where the arm is) and it is not dropped in silence: rejected with its
    reason at the resume (rejected.joint_trajectory, a log line); a trajectory being followed when the
    watchdog trips is abandoned, counted and logged; a reference handed over while inactive is refused
    at once."""
    timeout = 32 * TICK
    loop, lines = make(model, controller="joint_impedance", watchdog_timeout=timeout, log_throttle_period=0.0,
                       **FAST)
    ok, why = loop.set_reference(_traj(), "joint_trajectory")
    assert not ok and "not active" in why and loop.counts["rejected.joint_trajectory"] == 1
    loop.activate(0.0)
    run(loop, 0.0, 10, q=Q0)
    # a trajectory being followed, then the states stop: trip
    assert loop.set_reference(_traj(), "joint_trajectory")[0]
    run(loop, 10 * TICK, 20, q=Q0)
    assert loop.law.trajectory is not None and loop.law.q_d[0] > Q0[0]      # moving along it
    t = 30 * TICK
    run(loop, t, 40)                                          # no state: tripped
    assert loop.supervisor.watchdog == "tripped"
    # a trajectory while tripped: accepted for now (the loop may resume), then rejected at the resume
    assert loop.set_reference(_traj(), "joint_trajectory")[0]
    n_rej = loop.counts["rejected.joint_trajectory"]
    q_now = Q0 + 0.01
    run(loop, t + 40 * TICK, 10, q=q_now)                     # fresh states: resume
    assert loop.supervisor.watchdog == "ok"
    assert loop.counts["rejected.joint_trajectory"] == n_rej + 1
    assert any("arrived while the watchdog was tripped" in text for _, text in lines)
    assert loop.counts["abandoned.trajectory"] == 1
    assert any("abandoned" in text for _, text in lines)
    assert loop.law.trajectory is None                       # holds where it is
    np.testing.assert_array_equal(loop.law.q_d, q_now)
    run(loop, t + 50 * TICK, 200, q=q_now)
    np.testing.assert_array_equal(loop.law.q_d, q_now)
    # and a reference after the resume is followed
    assert loop.set_reference(_traj(), "joint_trajectory")[0]
    run(loop, t + 250 * TICK, 50, q=q_now)
    assert loop.law.trajectory is not None and loop.law.trajectory.started
    assert loop.counts["rejected.joint_trajectory"] == n_rej + 1


def test_a_reference_before_the_first_state_is_followed_from_it(model):
    """After activation the loop waits for a valid state; a trajectory handed over meanwhile starts
    from that first state (it is not a trip: nothing was being controlled)."""
    loop, lines = make(model, controller="joint_impedance", **FAST)
    loop.activate(0.0)
    run(loop, 0.0, 5)                                         # no state yet: the safe command
    assert loop.set_reference(_traj(), "joint_trajectory")[0]
    run(loop, 5 * TICK, 50, q=Q0)
    assert loop.law.trajectory is not None and loop.law.trajectory.started
    assert loop.counts["rejected.joint_trajectory"] == 0


def test_the_start_ramp_lasts_ramp_time_of_the_step_clock_however_long_a_step_takes(model, pinb):
    """Each step's command leaves 0.9 of a period after the step begins (a busy loop): the start ramp
    still reaches g(q) after ramp_time of the steps' clock (the rate limit counts from the departures,
    the ramp from the steps; seen: a controller busy at 1 kHz ramped several times slower, and a
    double-gravity arm rose longer before the Franka bridge's guard could tell)."""
    ramp = 64 * TICK
    loop, _ = make(model, ramp_time=ramp, torque_rate_limit=1e9, update_rate=1.0 / TICK)
    loop.activate(0.0)
    target = g(pinb, Q0)
    reached = None
    for k in range(200):
        now = k * TICK
        loop.update_state(Q0, np.zeros(7), now)
        tau, safe = loop.step(now)
        loop.sent(now + 0.9 * TICK)
        if reached is None and not safe and np.allclose(tau, target, atol=1e-9):
            reached = k
    assert reached is not None, "the ramp never reached g(q)"
    assert 63 <= reached <= 66, f"reached g(q) at step {reached}, ramp_time is 64 steps"


def test_an_exception_in_the_law_ramps_to_the_safe_command_while_the_states_stay_fresh(model, pinb):
    """A law that raises on fresh states: every step is the safe command, counted (errors.control_step),
    and it moves from the last command sent toward zero at the full rate (torque_rate_limit x period per
    step) until it is there; the watchdog never trips (the states are fresh), so nothing else would
    take the torque off.  (The bug this names: the cycle's clock had already counted the failed step as
    sent, the ramp's dt was 0 and the last law torque was held for as long as the law kept failing.)
    When the law works again the command ramps back to it, no faster than the rate."""
    rate = 100.0
    step = rate * TICK
    loop, _ = make(model, watchdog_timeout=32 * TICK, torque_rate_limit=rate, ramp_time=0.0,
                   update_rate=1.0 / TICK)
    loop.activate(0.0)
    gq = g(pinb, Q0)
    n_up = int(np.ceil(np.abs(gq).max() / step)) + 10
    cmds, _ = run(loop, 0.0, n_up, Q0)
    np.testing.assert_allclose(cmds[-1], gq, atol=1e-9)

    def boom(state):
        raise RuntimeError("law exploded")
    loop.law.compute = boom
    n_down = int(np.ceil(np.abs(gq).max() / step))
    t = n_up * TICK
    cmds, safes = run(loop, t, n_down + 5, Q0)
    assert safes.all() and loop.counts["errors.control_step"] == n_down + 5
    assert loop.supervisor.watchdog == "ok" and loop.counts["watchdog_trips"] == 0
    d = np.abs(np.diff(np.vstack([gq, cmds]), axis=0))
    assert np.all(d <= step * (1 + 1e-9)), d.max()
    assert np.isclose(d[0].max(), step), "the first failed step moves at the full rate"
    np.testing.assert_array_equal(cmds[-1], np.zeros(7))     # the safe command (zero), reached
    del loop.law.compute                                     # the law works again
    cmds, safes = run(loop, t + (n_down + 5) * TICK, n_up + 200, Q0)
    assert not safes.any()
    d = np.abs(np.diff(np.vstack([np.zeros(7), cmds]), axis=0))
    assert np.all(d <= step * (1 + 1e-9)), d.max()
    np.testing.assert_allclose(cmds[-1], gq, atol=1e-9)
