"""A streamed joint reference (a JointState on ~/target_joint_state with a velocity: what the controller
node and the Franka bridge in in-process mode both hand ControlLoop.set_reference) whose velocity is past
a joint's velocity limit (issue 42): refused, with a WARN naming the joint, its velocity and the limit; the
arm keeps its present reference.  (Clamped to the limit instead, the law's damping pulled franky-sim's
joint 1 to 1.09 x its limit: test_franka_steps.py.)

Oracles: the velocity limits the URDF file states (read here from its XML), the law's damping the test
sets (d_gains: the torque at rest is d_j v_d,j exactly), the velocity the test sends."""
import xml.etree.ElementTree as ET

import numpy as np

from robot_dynamics.control import ControlLoop
from robot_dynamics.control.laws.base import JointReference
from robot_dynamics.dynamics import Model, robots

D = 4.0                    # N m s/rad, every joint (D x the limits within the effort limits)
Q0 = np.array([0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.8])      # well inside the Panda's limits


def _setup():
    model = Model.from_robot("panda")
    root = ET.parse(robots.robot_urdf_path("panda")).getroot()
    lim = {j.get("name"): j.find("limit") for j in root.iter("joint")}
    vl = np.array([float(lim[n].get("velocity")) for n in model.joint_names])
    lines = []
    p = {"controller": "joint_impedance", "joints": list(model.joint_names), "ramp_time": 0.0,
         "torque_rate_limit": 1e9, "joint_impedance.compensate_gravity": False,
         "joint_impedance.k_gains": [100.0] * 7, "joint_impedance.d_gains": [D] * 7}
    loop = ControlLoop.from_params(model, p, log=lambda lv, tx: lines.append((lv, tx)))
    loop.activate(0.0)
    loop.update_state(Q0, np.zeros(7), 0.0)
    loop.step(0.0)
    return model, loop, vl, lines


def _command_for(loop, ref, t=0.001):
    ok, why = loop.set_reference(ref, "target_joint_state", t)
    assert ok, why
    loop.update_state(Q0, np.zeros(7), t)
    tau, safe = loop.step(t)
    assert not safe
    return np.array(tau)


def test_streamed_velocity_past_the_limit_is_refused_and_warned():
    model, loop, vl, lines = _setup()
    v = 0.5 * vl                      # within the limits
    v[0], v[4] = 3.0 * vl[0], -2.0 * vl[4]
    ok, why = loop.set_reference(JointReference(q=Q0.copy(), v=v), "target_joint_state", 0.001)
    assert not ok
    loop.update_state(Q0, np.zeros(7), 0.002)
    tau, _ = loop.step(0.002)
    np.testing.assert_allclose(tau, np.zeros(7), atol=1e-9)     # still holding Q0 at rest
    assert loop.counts["rejected.target_joint_state"] == 1
    warns = [tx for lv, tx in lines if lv == "warn" and "velocity limit" in tx]
    assert warns, lines
    for j in (0, 4):
        assert model.joint_names[j] in warns[0] and f"{vl[j]:.3f}" in warns[0] and f"{v[j]:+.3f}" in warns[0], \
            warns[0]
    assert model.joint_names[1] not in warns[0]
    # the next message of the stream, within the limits, is followed
    tau = _command_for(loop, JointReference(q=Q0.copy(), v=0.5 * vl), t=0.003)
    np.testing.assert_allclose(tau, D * 0.5 * vl, atol=1e-9)


def test_streamed_velocity_within_the_limits_passes_unchanged():
    _, loop, vl, lines = _setup()
    v = 0.99 * vl * np.array([1, -1, 1, -1, 1, -1, 1])
    tau = _command_for(loop, JointReference(q=Q0.copy(), v=v))
    np.testing.assert_allclose(tau, D * v, atol=1e-9)
    assert loop.counts.get("rejected.target_joint_state", 0) == 0
    assert not [tx for lv, tx in lines if "velocity limit" in tx]


def test_streamed_velocity_not_finite_is_refused():
    """(Refused before the clamp too, by the set-point shaping's check: kept as the clamp's guard.)"""
    _, loop, vl, lines = _setup()
    v = np.zeros(7)
    v[2] = np.nan
    ok, why = loop.set_reference(JointReference(q=Q0.copy(), v=v), "target_joint_state", 0.001)
    assert not ok and "finite" in why, why
    assert loop.counts["rejected.target_joint_state"] == 1


def _trajectory_refused(loop, tr, lines):
    ok, why = loop.set_reference(tr, "joint_trajectory", 0.001)
    loop.update_state(Q0, np.zeros(7), 0.002)
    tau, _ = loop.step(0.002)
    warns = [tx for lv, tx in lines if lv == "warn" and "velocity limit" in tx]
    return ok, why, np.array(tau), warns


def test_a_trajectory_past_the_velocity_limits_is_refused():
    """A JointTrajectory (~/joint_trajectory, a FollowJointTrajectory goal) is checked as a streamed
    JointState is: a point velocity past a joint's limit (the URDF's) is refused, naming the point,
    the joint, its velocity and the limit (with a WARN); and so are points too close in time for the distance between
    them (no velocities given: the spline needs 2.5 x joint 4's limit between them).  The arm keeps
    holding Q0 (the law's torque at rest is zero).  A trajectory whose spline stays within the limits
    (a 1 s minimum-jerk move peaking at 0.9 x them) is followed."""
    from robot_dynamics.control.trajectory import JointTrajectory
    model, loop, vl, lines = _setup()
    V = np.zeros((3, 7))
    V[1, 5] = -1.4 * vl[5]
    P = np.vstack([Q0, Q0 + 0.01, Q0 + 0.02])
    ok, why, tau, warns = _trajectory_refused(loop, JointTrajectory([0.5, 1.0, 1.5], P, V), lines)
    assert not ok and warns, (why, lines)
    assert "point 1" in why and model.joint_names[5] in why and f"{vl[5]:.3f}" in why \
        and f"{V[1, 5]:+.3f}" in why, why
    np.testing.assert_allclose(tau, np.zeros(7), atol=1e-9)
    # no velocities: joint 4 moves 2.5 x its limit x 0.1 s in 0.1 s (at least 2.5 x the limit on the way)
    P = np.vstack([Q0, Q0, Q0])
    P[2, 3] += 2.5 * vl[3] * 0.1
    lines.clear()
    ok, why, tau, warns = _trajectory_refused(loop, JointTrajectory([0.5, 1.0, 1.1], P), lines)
    assert not ok and model.joint_names[3] in why and f"{vl[3]:.3f}" in why, why    # (the WARN: throttled)
    np.testing.assert_allclose(tau, np.zeros(7), atol=1e-9)
    assert loop.counts["rejected.joint_trajectory"] == 2
    # a minimum-jerk move of 1 s peaking at 0.9 x every limit (15/8 d / T): followed
    t = np.linspace(0.0, 1.0, 21)
    s = 10 * t ** 3 - 15 * t ** 4 + 6 * t ** 5
    sd = 30 * t ** 2 - 60 * t ** 3 + 30 * t ** 4
    d = 0.9 * vl * 8.0 / 15.0
    lines.clear()
    ok, why = loop.set_reference(JointTrajectory(t + 0.01, Q0 + np.outer(s, d), np.outer(sd, d)),
                                 "joint_trajectory", 0.003)
    assert ok, why
    assert not [tx for lv, tx in lines if "velocity limit" in tx]
