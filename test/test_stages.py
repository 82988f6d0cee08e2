"""The cycle's stages alone, without the loop around them (issue 40: each stage tested apart from the
shell, as ros2_controllers tests AdmittanceRule without its controller).

Oracles: the times, rates, gains and limits the tests set, the URDF's velocity limits read from its XML,
Pinocchio's mass matrix, and the energy 1/2 e^T K e computed here."""
import collections
import xml.etree.ElementTree as ET

import numpy as np
import pinocchio as pin

from robot_dynamics.control import make_law
from robot_dynamics.control.envelope import SafetyEnvelope
from robot_dynamics.control.laws.base import State
from robot_dynamics.control.loop_params import LoopParams
from robot_dynamics.control.stages.cycle import Cycle
from robot_dynamics.control.stages.output import Output
from robot_dynamics.control.stages.references import SHAPING_RATE_SHARE, References
from robot_dynamics.control.stages.report import Report
from robot_dynamics.control.stages.safety import SafetyFilter
from robot_dynamics.control.stages.shaping import TankStage
from robot_dynamics.control.stages.supervisor import Supervisor
from robot_dynamics.dynamics import make_backend, robots
from robot_dynamics.control.laws.joint_impedance import JointImpedance

ARM = [f"panda_joint{i}" for i in range(1, 8)]
Q0 = np.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.5, 0.3])


def table(model, **over):
    lp = LoopParams({k.replace("__", "."): v for k, v in over.items()}, model.nv)
    lp.bind(np.arange(model.nv))
    return lp


def test_the_cycle_clock_counts_every_dt_on_the_control_clock_and_the_rate_limit_from_the_send():
    c = Cycle(7)
    c.tick(now=100.0, t=5.0)                     # the first step: nothing known before it
    assert c.dt == 0.001 and c.dt_rate == 0.001
    c.sent(now=100.0004, t=5.0003)               # the command left 0.3 ms (control clock) later
    c.tick(now=100.5, t=5.002)                   # the steady clock jumped (a slow sim): dt does not
    assert abs(c.dt - 0.002) < 1e-12 and abs(c.dt_rate - (5.002 - 5.0003)) < 1e-12
    assert c.state.t == 5.002
    c.ramped(now=100.6)                          # a safe-command step: no control-clock time
    c.tick(now=100.6015, t=9.0)                  # the next law step counts from the ramp, on `now`
    assert abs(c.dt - 0.0015) < 1e-12 and abs(c.dt_rate - 0.0015) < 1e-12
    c.tick(now=101.0, t=9.5)                     # a gap: clamped to 0.1 s
    assert c.dt == 0.1


def test_the_safe_ramp_moves_at_the_rate_limit_from_the_last_command_and_lands_exactly(model):
    rate, period = 200.0, 0.001                  # N m/s, s: 0.2 N m per step
    safety = SafetyFilter(model, {"rate_limit": rate, "command_period": period})
    c = Cycle(7)
    out = Output(model, {"safe_command": "zero"}, safety, make_backend(model), c, period)
    start = np.array([1.0, -0.5, 0.0, 0.3, 0.0, 0.05, -0.15])
    safety.hold(start)
    steps = []
    for k in range(10):
        steps.append(out.safe_step(now=k * period).copy())
        c.sent(k * period)
    expected = [np.sign(start) * np.maximum(np.abs(start) - rate * period * (k + 1), 0.0) for k in range(10)]
    assert np.allclose(steps, expected, atol=1e-12)
    assert out.safe_reached and not np.any(steps[-1]) and c.ramps == 10


def test_the_supervisor_trips_after_the_timeout_not_before_and_raises_the_stop_once(model):
    p = table(model, watchdog_timeout=0.05).p
    stops, lines = [], []
    c = Cycle(7)
    sup = Supervisor(model, p, Report(lambda lv, tx: lines.append((lv, tx))), c, make_backend(model),
                     lambda *a: stops.append(a))
    assert sup.check_watchdog(0.0) and sup.watchdog == "waiting"       # no state yet: the law must not run
    sup.update_state(Q0, np.zeros(7), now=1.0)
    assert not sup.check_watchdog(1.049) and sup.watchdog == "waiting"  # 49 ms old: still fresh
    sup.fresh()
    assert sup.watchdog == "ok"
    assert sup.check_watchdog(1.0501) and sup.watchdog == "tripped"
    assert sup.check_watchdog(1.2) and sup.report.counts["watchdog_trips"] == 1
    assert stops == [("watchdog tripped", stops[0][1], True)] and "watchdog tripped" in stops[0][1]
    sup.update_state(Q0, np.zeros(7), now=1.3)
    assert sup.fresh() and sup.take_reset()[0] and not sup.take_reset()[0]


def test_the_speed_stop_threshold_is_the_factor_times_the_urdf_velocity_limit(model):
    root = ET.parse(robots.robot_urdf_path("panda")).getroot()
    vl = {j.get("name"): float(j.find("limit").get("velocity")) for j in root.iter("joint") if j.get("name") in ARM}
    vl = np.array([vl[n] for n in model.joint_names])
    factor = 1.3
    p = table(model, safety__joint_speed_stop=factor).p
    stops = []
    c = Cycle(7)
    sup = Supervisor(model, p, Report(lambda *a: None), c, make_backend(model), lambda *a: stops.append(a))
    env = SafetyEnvelope(model, {})                                    # off
    for j in range(7):
        c.v[:] = 0.0
        c.v[j] = factor * vl[j] * (1 - 1e-9)
        assert not sup.overspeed(0.0, env), j
        c.v[j] = -factor * vl[j] * (1 + 1e-6)
        assert sup.overspeed(0.0, env) and model.joint_names[j] in sup.speed_stop, j
        sup.speed_stop = ""
    assert len(stops) == 7 and all(s[0] == "joint speed stop" and s[2] is False for s in stops)


def test_set_point_shaping_caps_the_law_torque_change_at_its_share_of_the_rate_limit(model):
    rate = 400.0
    k = np.array([600.0, 600.0, 500.0, 400.0, 200.0, 100.0, 50.0])
    zeta = 0.8
    law = JointImpedance(model, make_backend(model), {"k_gains": k.tolist(), "damping_ratio": zeta})
    safety = SafetyFilter(model, {"rate_limit": rate})
    p = table(model).p
    refs = References(model, law, p, Report(lambda *a: None), Cycle(7), safety, make_backend(model),
                      lambda *a: None)
    pm = pin.buildModelFromUrdf(str(robots.robot_urdf_path("panda")))
    m = np.diagonal(pin.crba(pm, pm.createData(), np.r_[Q0, np.zeros(pm.nq - 7)]))[:7]
    vcap, acap = refs.approach_cap(Q0)
    share = SHAPING_RATE_SHARE * rate
    vl = np.asarray(model.velocity_limits, dtype=float)
    assert np.allclose(vcap, np.minimum(share / k, 0.8 * vl), rtol=1e-9)
    assert np.allclose(acap, share / (2 * zeta * np.sqrt(k * m)), rtol=1e-6)


def test_the_tank_never_injects_more_than_it_holds(model):
    law = JointImpedance(model, make_backend(model), {"k_gains": 100.0})
    tank = TankStage(law, capacity=0.5)
    law._e[:] = 0.3                                            # the spring's error (rad)
    k_now = tank.stiffness()
    law.set_params({"k_gains": [900.0] * 7})
    tank.asked(k_now)
    assert np.allclose(tank.stiffness(), 100.0)                # the law kept its stiffness until paid
    tank.before_law()
    k = tank.stiffness()
    injected = 0.5 * float(np.dot(k - k_now, law._e ** 2))     # 1/2 e^T dK e, computed here
    assert injected <= 0.5 + 1e-12 and tank.tank.level == 0.0 and np.all(k < 900.0)
    assert abs(injected - 0.5) < 1e-9                          # it spent exactly what it held


def test_the_report_logs_one_line_per_condition_and_period_and_sums_the_rest():
    lines = []
    r = Report(lambda lv, tx: lines.append(tx), throttle_period=1.0)
    for k in range(5):
        r.throttled("x", "warn", "it happened", now=10.0 + 0.1 * k)
    r.throttled("x", "warn", "it happened", now=11.05)
    assert lines == ["it happened", "it happened (4 more not logged since the last line)"]
    r.act("far_target", now=3.0, detail="d")
    kv, acting = r.acts_status()
    assert ("acted.far_target", "1") in kv and acting and "far_target x1" in acting
