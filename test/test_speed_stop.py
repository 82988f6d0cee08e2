"""The control loop's joint speed stop (safety.joint_speed_stop), a Franka's joint-velocity reflex in
the loop: a joint faster than the factor x its velocity limit while the law runs replaces the law's
command by the safe command with joint damping, latched until ~/resume at rest.

Oracles: the velocity limits as the URDF file states them (read here from its XML), the factor and
the damping the tests set, Pinocchio's g(q) and M(q) through a backend of our own, and a Panda plant
integrated here by Pinocchio's ABA whose commands arrive late (a loop that diverges, as franky-sim's
arm did on a loaded host: 20-47 rad/s)."""
import collections
import xml.etree.ElementTree as ET

import numpy as np
import pinocchio as pin

from robot_dynamics.control import ControlLoop
from robot_dynamics.dynamics import robots

ARM = [f"panda_joint{i}" for i in range(1, 8)]
Q0 = np.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.5, 0.3])
TICK = 2.0 ** -10
FAST = {"ramp_time": 0.0, "torque_rate_limit": 1e9, "update_rate": 1.0 / TICK}


def urdf_velocity_limits():
    root = ET.parse(robots.robot_urdf_path("panda")).getroot()
    lim = {j.get("name"): float(j.find("limit").get("velocity")) for j in root.iter("joint") if j.get("name") in ARM}
    return np.array([lim[n] for n in ARM])


def make(model, **params):
    lines = []
    loop = ControlLoop.from_params(model, {k.replace("__", "."): v for k, v in params.items()},
                                   log=lambda level, text: lines.append((level, text)))
    return loop, lines


def test_a_joint_above_its_speed_limit_stops_the_law_until_resumed_at_rest(model, pinb):
    vl = urdf_velocity_limits()
    factor, damping = 1.2, 10.0
    loop, lines = make(model, controller="joint_impedance", safe_command="gravity", log_throttle_period=0.0,
                       safety__joint_speed_stop=factor, safety__stop_damping=damping, **FAST)
    loop.activate(0.0)
    now = 0.0

    def step(v, q=Q0):
        nonlocal now
        now += TICK
        loop.update_state(q, v, now)
        tau, safe = loop.step(now)
        return tau.copy(), safe

    for _ in range(5):
        assert not step(np.zeros(7))[1]
    v = np.zeros(7)
    v[3] = 0.99 * factor * vl[3]                     # just below: the law runs
    assert not step(v)[1]
    assert loop.counts["safety.joint_speed_stops"] == 0
    v = np.full(7, 0.1)
    v[3] = -1.01 * factor * vl[3]                    # just above: the stop
    tau, safe = step(v)
    assert safe and loop.counts["safety.joint_speed_stops"] == 1
    assert any(level == "error" and "panda_joint4" in text and "speed stop" in text for level, text in lines)
    d = np.minimum(damping, 25.0 * np.diagonal(pinb.mass_matrix(Q0)))
    limits = np.asarray(model.effort_limits, dtype=float)
    np.testing.assert_allclose(tau, np.clip(pinb.gravity(Q0) - d * v, -limits, limits), rtol=0, atol=1e-9)
    assert loop.diagnostics()[0] == 2 and "joint speed stop" in loop.diagnostics()[1]
    # latched: slower states do not give the arm back to the law; a reference meanwhile is not followed
    assert loop.set_reference(_traj(), "joint_trajectory")[0]
    n_rej = loop.counts["rejected.joint_trajectory"]
    slow = np.full(7, 0.05)
    for _ in range(20):
        tau, safe = step(slow)
        assert safe
    np.testing.assert_allclose(tau, pinb.gravity(Q0) - d * slow, rtol=0, atol=1e-9)
    ok, why = loop.resume()
    assert not ok and "not at rest" in why
    q_rest = Q0 + 0.02
    tau, safe = step(np.full(7, 0.01), q_rest)
    assert safe
    ok, why = loop.resume()
    assert ok, why
    tau, safe = step(np.zeros(7), q_rest)
    assert not safe                                  # the law again, holding where the arm is
    np.testing.assert_array_equal(loop.law.q_d, q_rest)
    assert loop.counts["rejected.joint_trajectory"] == n_rej + 1
    assert any("the joint speed stop" in text for _, text in lines)
    # off: the law runs whatever the speed
    assert loop.set_params({"safety.joint_speed_stop": 0.0})[0]
    assert not step(5.0 * vl, q_rest)[1]
    assert loop.counts["safety.joint_speed_stops"] == 1


def _traj():
    from robot_dynamics.control.trajectory import JointTrajectory
    t = np.linspace(0.0, 1.0, 11)
    return JointTrajectory(t, Q0[None, :] + np.outer(t, np.full(7, 0.2)))


def _delayed_plant_run(model, guard, delay_steps=20, seconds=3.0, k=400.0):
    """Joint impedance at k N m/rad on a Panda plant (Pinocchio ABA, semi-implicit Euler at 1 kHz)
    whose commands arrive `delay_steps` ms late.  Returns (peak |v| / limit, final max |v|, loop)."""
    full = pin.buildModelFromUrdf(str(robots.robot_urdf_path("panda")))   # the plant: fingers locked
    arm = [full.getJointId(n) for n in ARM]
    pm = pin.buildReducedModel(full, [j for j in range(1, full.njoints) if j not in arm], pin.neutral(full))
    pd = pm.createData()
    vl = urdf_velocity_limits()
    loop, _ = make(model, controller="joint_impedance", safe_command="gravity", ramp_time=0.0,
                   joint_impedance__k_gains=[k] * 7, safety__joint_speed_stop=guard)
    h = 1e-3
    q, v = Q0.copy(), np.zeros(7)
    q[6] += 1e-3                                    # off the held position: the instability starts at once
    pipe = collections.deque([pin.computeGeneralizedGravity(pm, pd, q)] * delay_steps, maxlen=delay_steps)
    loop.activate(0.0)
    loop.update_state(Q0, np.zeros(7), 0.0)
    loop.step(0.0)                                  # the law holds Q0
    peak = 0.0
    for i in range(1, int(seconds / h)):
        now = i * h
        loop.update_state(q, v, now)
        tau, _ = loop.step(now)
        pipe.append(tau.copy())
        v = v + h * pin.aba(pm, pd, q, v, pipe[0])
        q = q + h * v
        if not np.all(np.isfinite(v)):
            return np.inf, np.inf, loop
        peak = max(peak, float(np.max(np.abs(v) / vl)))
    return peak, float(np.max(np.abs(v))), loop


def test_a_loop_diverging_from_late_commands_is_brought_to_rest(model):
    """20 ms of delay makes joint impedance at 400 N m/rad diverge on the Panda (no guard: far beyond
    every limit); with the stop the arm comes to rest and stays there (its peak, 8 x a limit here, is
    what the 20 ms of law commands already on their way do before the stop's arrive)."""
    peak, final, _ = _delayed_plant_run(model, guard=0.0)
    assert peak > 10.0, peak
    peak, final, loop = _delayed_plant_run(model, guard=1.2)
    assert loop.counts["safety.joint_speed_stops"] == 1
    assert loop.supervisor.speed_stop
    assert final < 1e-3, (final, peak)


def test_with_the_envelope_on_the_speed_stop_is_the_envelopes_stop(model):
    """safety.frames set: the joint speed stop starts the envelope's stop (its damping and repulsion go
    on), counted and named in its reason; ~/resume leaves it once nothing is violated."""
    vl = urdf_velocity_limits()
    loop, lines = make(model, controller="gravity_compensation", log_throttle_period=0.0,
                       safety__joint_speed_stop=1.2, safety__frames=["panda_hand"],
                       safety__planes=[0.0, 0.0, 1.0, -5.0], **FAST)     # a plane far below: nothing near
    loop.activate(0.0)
    now = 0.0
    for k in range(5):
        now += TICK
        loop.update_state(Q0, np.zeros(7), now)
        assert not loop.step(now)[1]
    assert loop.envelope.state == "ok"
    v = np.zeros(7)
    v[5] = 1.3 * vl[5]
    now += TICK
    loop.update_state(Q0, v, now)
    loop.step(now)
    assert loop.envelope.state == "stopping" and "panda_joint6" in loop.envelope.stop_reason
    assert loop.counts["safety.joint_speed_stops"] == 1 and loop.envelope.counts["stops"] == 1
    assert not loop.supervisor.speed_stop
    assert "safety envelope stop" in loop.diagnostics()[1]
    for _ in range(3):
        now += TICK
        loop.update_state(Q0, np.zeros(7), now)
        loop.step(now)
    assert loop.envelope.state == "stopped"
    assert loop.resume()[0]
    assert loop.envelope.state == "ok"
