"""Diagnostics that tell the truth (issue 42): ControlLoop.diagnostics() is WARN while the safety layer
acts (effort clipping, watchdog trips, speed stops, refused targets) and ERROR while the arm is stopped,
with the count and the last reason; OK once nothing has acted for ACT_HOLD seconds and a report has
said so.  In process, a fake clock (2^-10 s ticks, exact) and states the test sets.

Oracles: the Panda's effort limits from the Franka datasheet (the command sits on them exactly while
the filter clips), the counts of steps this test runs, the velocity limit from the URDF text.
"""
import xml.etree.ElementTree as ET

import numpy as np

from robot_dynamics.control import CartesianReference, ControlLoop, JointReference
from robot_dynamics.control.stages.report import ACT_HOLD

Q0 = np.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.5, 0.3])
PANDA_LIMITS = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])     # N m, Franka datasheet
TICK = 2.0 ** -10
FAST = {"ramp_time": 0.0, "torque_rate_limit": 1e9, "update_rate": 1.0 / TICK, "log_throttle_period": 0.0}
OK, WARN, ERROR = 0, 1, 2


def make(model, **params):
    lines = []
    p = dict(FAST, **{k.replace("__", "."): v for k, v in params.items()})
    loop = ControlLoop.from_params(model, p, log=lambda level, text: lines.append((level, text)))
    return loop, lines


class Clock:
    def __init__(self, loop):
        self.loop, self.t = loop, 0.0

    def run(self, n, q=Q0, v=None, fresh=True):
        taus = []
        for _ in range(n):
            self.t += TICK
            if fresh:
                self.loop.update_state(q, np.zeros(7) if v is None else v, self.t)
            tau, _ = self.loop.step(self.t)
            taus.append(tau.copy())
        return np.array(taus)


def test_effort_clipping_is_a_warn_with_its_count_then_ok(model):
    loop, _ = make(model, controller="joint_impedance", safe_command="gravity",
                   joint_impedance__k_gains=[400.0], setpoint_shaping=False)    # stepped to: clipped
    loop.activate(0.0)
    clk = Clock(loop)
    clk.run(300)
    level, msg, _ = loop.diagnostics()
    assert level == OK and msg == "active", msg               # holding: nothing acts
    q_far = Q0.copy()
    q_far[0] += 1.0                                            # 400 N m wanted, 87 allowed
    assert loop.set_reference(JointReference(q_far))[0]
    taus = clk.run(100)
    assert np.all(taus[1:, 0] == PANDA_LIMITS[0])             # the filter clipped every step but the
    level, msg, kv = loop.diagnostics()                        # reference's first (taken at a step)
    n_clip = int(dict(kv)["acted.safety.effort_limit"])
    assert level == WARN and f"safety.effort_limit x{n_clip}" in msg and n_clip >= 99, msg
    assert "last: safety.effort_limit" in msg
    assert loop.set_reference(JointReference(Q0))[0]
    taus = clk.run(50)
    assert np.all(np.abs(taus[-1]) < PANDA_LIMITS)
    level, msg, _ = loop.diagnostics()
    assert level == WARN and "nothing new" in msg, msg        # within ACT_HOLD of the last clip
    clk.run(int(ACT_HOLD / TICK) + 10)
    level, msg, kv = loop.diagnostics()
    assert level == OK and msg == "active", msg
    assert dict(kv)["acted.safety.effort_limit"] == str(n_clip)   # the count stays in the values


def test_watchdog_trip_is_an_error_while_tripped_then_a_warn_with_its_count(model):
    loop, lines = make(model, controller="gravity_compensation", safe_command="gravity", watchdog_timeout=0.0625)
    loop.activate(0.0)
    clk = Clock(loop)
    clk.run(100)
    assert loop.diagnostics()[0] == OK
    clk.run(100, fresh=False)                                  # 98 ms without a state: tripped
    level, msg, _ = loop.diagnostics()
    assert level == ERROR and "watchdog tripped (1 trip)" in msg and "no valid joint state" in msg, msg
    clk.run(50)                                                # fresh states again
    level, msg, _ = loop.diagnostics()
    assert level == WARN and "last: watchdog_trip" in msg, msg
    clk.run(int(ACT_HOLD / TICK) + 10)
    assert loop.diagnostics()[0] == OK
    # a trip that comes and goes between two reports, the report long after it: still a WARN, once
    clk.run(100, fresh=False)
    clk.run(int(ACT_HOLD / TICK) + 10)
    level, msg, kv = loop.diagnostics()
    assert level == WARN and "watchdog_trip x1" in msg and dict(kv)["watchdog_trips"] == "2", msg
    assert loop.diagnostics()[0] == OK


def test_joint_speed_stop_is_an_error_with_the_joint_and_the_count(model):
    from robot_dynamics.dynamics import robots
    root = ET.parse(robots.robot_urdf_path("panda")).getroot()
    vl4 = next(float(j.find("limit").get("velocity")) for j in root.iter("joint") if j.get("name") == "panda_joint4")
    loop, _ = make(model, controller="joint_impedance", safe_command="gravity", safety__joint_speed_stop=1.0)
    loop.activate(0.0)
    clk = Clock(loop)
    clk.run(50)
    v = np.zeros(7)
    v[3] = 1.01 * vl4
    clk.run(1, v=v)
    level, msg, _ = loop.diagnostics()
    assert level == ERROR and "joint speed stop (1 in all)" in msg and "panda_joint4" in msg, msg


def test_a_refused_far_target_is_a_warn_naming_the_cause(model):
    loop, lines = make(model, controller="cartesian_impedance", safe_command="gravity")
    loop.activate(0.0)
    clk = Clock(loop)
    clk.run(50)
    clk.run(int(ACT_HOLD / TICK) + 10)
    assert loop.diagnostics()[0] == OK
    ok, why = loop.set_reference(CartesianReference(np.eye(3), np.array([2.0, 0.0, 0.5])), "target_pose",
                                 now=clk.t)
    assert not ok and "out of reach" in why
    level, msg, _ = loop.diagnostics()
    assert level == WARN and "rejected.target_pose x1" in msg and "out of reach" in msg, msg
    assert any(level == "warn" and "out of reach" in text and "panda_hand_tcp" in text for level, text in lines)
