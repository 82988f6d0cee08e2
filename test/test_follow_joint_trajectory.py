"""FollowJointTrajectory with JointTrajectoryController's semantics (issue 44).

Part 1, no ROS: the goal checks and tolerances (control/trajectory_goal.py) against the rules JTC states
(its validate_trajectory_msg, tolerances.hpp, JointTolerance.msg), and the goal's ends through the
ControlLoop on the in-process MuJoCo plant (reached, path tolerance broken by a push, goal_time,
cancel, preemption, watchdog, deactivation), judged on the plant's joint positions.

Part 2 (slow): a real rclpy ActionClient in this process against the controller node and the MuJoCo sim
node, two child processes (one set of nodes for the module, several goals against it).
"""
import math
import os
import time

import numpy as np
import pytest

from robot_dynamics.control import ControlLoop
from robot_dynamics.control import trajectory_goal as tg
from robot_dynamics.dynamics import Model
from robot_dynamics.sim.mujoco_sim import MujocoSim

MODEL = Model.from_robot("panda")
NAMES = list(MODEL.joint_names)
N = len(NAMES)
Q0 = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
DT = 1e-3
TCP = "panda_hand_tcp"
DEFAULTS = tg.default_tolerances(N)


def goal(times, P, V=None, A=None, names=None, efforts=None, hold=None, **kw):
    """prepare_goal with per-point lists (V, A, efforts empty unless given)."""
    names = NAMES if names is None else names
    k = len(times)
    V = [[]] * k if V is None else V
    A = [[]] * k if A is None else A
    E = [[]] * k if efforts is None else efforts
    return tg.prepare_goal(NAMES, names, times, P, V, A, E, Q0 if hold is None else hold, DEFAULTS, **kw)


def code_of(**kw):
    with pytest.raises(tg.GoalError) as e:
        goal(**kw)
    return e.value.code, str(e.value)


# ------------------------------------------------------------------------------------------------
# the codes and the checks, no ROS
# ------------------------------------------------------------------------------------------------
def test_codes_are_control_msgs():
    fjt = pytest.importorskip("control_msgs.action").FollowJointTrajectory
    R = fjt.Result
    assert (tg.SUCCESSFUL, tg.INVALID_GOAL, tg.INVALID_JOINTS, tg.OLD_HEADER_TIMESTAMP,
            tg.PATH_TOLERANCE_VIOLATED, tg.GOAL_TOLERANCE_VIOLATED) == (
        R.SUCCESSFUL, R.INVALID_GOAL, R.INVALID_JOINTS, R.OLD_HEADER_TIMESTAMP, R.PATH_TOLERANCE_VIOLATED,
        R.GOAL_TOLERANCE_VIOLATED)


P1 = [list(Q0 + 0.1)]


@pytest.mark.parametrize("case, kw, code, words", [
    ("empty joint names", dict(times=[1.0], P=[[]], names=[]), tg.INVALID_JOINTS, "empty joint_names"),
    ("unknown joint", dict(times=[1.0], P=[[0.0]], names=["elbow"]), tg.INVALID_JOINTS, "'elbow'"),
    ("repeated joint", dict(times=[1.0], P=[[0.0, 0.0]], names=[NAMES[0]] * 2), tg.INVALID_JOINTS, "repeated"),
    ("partial not allowed", dict(times=[1.0], P=[[0.0]], names=NAMES[:1], allow_partial=False),
     tg.INVALID_JOINTS, "allow_partial_joints_goal"),
    ("no points", dict(times=[], P=[]), tg.INVALID_GOAL, "empty trajectory"),
    ("times not increasing", dict(times=[1.0, 1.0], P=P1 * 2), tg.INVALID_GOAL, "not strictly increasing"),
    ("times decreasing", dict(times=[2.0, 1.0], P=P1 * 2), tg.INVALID_GOAL, "point 0 at 2.000000 s"),
    ("positions size", dict(times=[1.0], P=[list(Q0[:6])]), tg.INVALID_GOAL, "6 positions for 7 joints"),
    ("velocities size", dict(times=[1.0], P=P1, V=[[0.0] * 3]), tg.INVALID_GOAL, "3 velocities"),
    ("NaN position", dict(times=[1.0], P=[list(Q0[:6]) + [math.nan]]), tg.INVALID_GOAL, "not finite"),
    ("NaN time", dict(times=[math.nan], P=P1), tg.INVALID_GOAL, "not finite"),
    ("effort given", dict(times=[1.0], P=P1, efforts=[[1.0] * N]), tg.INVALID_GOAL, "effort"),
    ("velocity at the end", dict(times=[1.0], P=P1, V=[[0.1] + [0.0] * 6]), tg.INVALID_GOAL,
     "allow_nonzero_velocity_at_trajectory_end"),
    ("outside the joint limits", dict(times=[1.0], P=[[5.0] + list(Q0[1:])], lower=MODEL.lower_limits,
                                      upper=MODEL.upper_limits), tg.INVALID_GOAL, "limit"),
    ("ends in the past", dict(times=[1.0, 2.0], P=P1 * 2, stamp=100.0, now=102.5), tg.OLD_HEADER_TIMESTAMP,
     "ends in the past"),
    ("illegal tolerance", dict(times=[1.0], P=P1, path_tolerance=[(NAMES[0], -2.0, 0, 0)]), tg.INVALID_GOAL,
     "illegal"),
    ("tolerance of an unknown joint", dict(times=[1.0], P=P1, goal_tolerance=[("elbow", 0.1, 0, 0)]),
     tg.INVALID_JOINTS, "goal_tolerance"),
    ("illegal goal_time_tolerance", dict(times=[1.0], P=P1, goal_time_tolerance=-0.5), tg.INVALID_GOAL,
     "goal_time_tolerance"),
])
def test_refused_goals(case, kw, code, words):
    """Each malformed goal gets its code and a reason naming the problem (JTC's validate_trajectory_msg
    refuses the same ones; the tolerance cases JTC answers with its defaults and an error line)."""
    got, why = code_of(**kw)
    assert got == code, (case, got, why)
    assert words in why, (case, why)


def test_header_stamp():
    """JTC: a zero stamp starts on arrival; a stamp in the past whose trajectory still ends in the future
    is accepted, the points already due skipped; in the future: the first point is reached then (JTC
    interpolates from the state at arrival to it)."""
    P = [list(Q0 + 0.1), list(Q0 + 0.2)]
    tr, _ = goal(times=[1.0, 2.0], P=P, stamp=100.0, now=101.5)
    tr.start(101.5, Q0, max_velocity=1.0, max_acceleration=5.0)
    assert tr.skipped == 1 and np.allclose(tr.sample(tr.end_time)[0], Q0 + 0.2)
    tr, _ = goal(times=[1.0], P=P[:1], stamp=200.0, now=100.0)
    tr.start(100.0, Q0, max_velocity=1.0, max_acceleration=5.0)
    assert tr.end_time == pytest.approx(201.0)
    assert np.allclose(tr.sample(100.0)[0], Q0) and np.allclose(tr.sample(201.0)[0], Q0 + 0.1)
    assert np.allclose(tr.sample(150.5)[0], Q0 + 0.05)           # half way at half time (rest to rest)


def test_partial_goal_any_order():
    """A subset of the joints, in another order: the named joints follow their columns by name, the
    others hold `hold` (JTC fills them with the last command) with zero velocity."""
    names = [NAMES[5], NAMES[1]]
    hold = Q0 + 0.01
    P = [[0.5, -0.5], [0.6, -0.4]]
    V = [[0.1, 0.2], [0.0, 0.0]]
    tr, _ = goal(times=[1.0, 2.0], P=P, V=V, names=names, hold=hold)
    expect_P = np.tile(hold, (2, 1))
    expect_P[:, 5], expect_P[:, 1] = [0.5, 0.6], [-0.5, -0.4]
    expect_V = np.zeros((2, N))
    expect_V[0, 5], expect_V[0, 1] = 0.1, 0.2
    assert np.array_equal(tr.positions, expect_P)
    assert np.array_equal(tr.velocities, expect_V)


def test_tolerance_rules():
    """JointTolerance.msg: > 0 replaces the default, 0 keeps it, -1 erases it; goal_time likewise; the
    defaults as JTC's get_segment_tolerances builds them (goal velocity = stopped_velocity_tolerance)."""
    d = tg.default_tolerances(N, trajectory=0.2, goal=0.05, stopped_velocity=0.01, goal_time=1.5)
    assert np.all(d.path[:, 0] == 0.2) and np.all(d.path[:, 1:] == 0)
    assert np.all(d.goal[:, 0] == 0.05) and np.all(d.goal[:, 1] == 0.01) and np.all(d.goal[:, 2] == 0)
    t = tg.goal_tolerances(d, NAMES, path_tolerance=[(NAMES[2], 0.3, 0.0, -1.0), (NAMES[3], -1.0, 0.5, 0.0)],
                           goal_tolerance=[(NAMES[0], 0.0, -1.0, 0.0)], goal_time_tolerance=0.0)
    assert t.goal_time == 1.5
    assert list(t.path[2]) == [0.3, 0.0, 0.0] and list(t.path[3]) == [0.0, 0.5, 0.0]
    assert list(t.goal[0]) == [0.05, 0.0, 0.0] and list(t.goal[1]) == [0.05, 0.01, 0.0]
    assert tg.goal_tolerances(d, NAMES, goal_time_tolerance=-1.0).goal_time == 0.0
    assert np.array_equal(d.path, tg.default_tolerances(N, 0.2, 0.05, 0.01, 1.5).path)   # not modified


class _Line:
    """A stand-in trajectory for the monitor: start 0, end `end`."""
    start_time = 0.0

    def __init__(self, end):
        self.end_time = end


def test_monitor_rules():
    """JTC's update(): the path tolerance before the last point's time (and on the first sample), the
    goal tolerance after it; success within it; GOAL_TOLERANCE_VIOLATED only once goal_time has passed
    (0: it waits); the first end stands."""
    tol = tg.Tolerances(np.tile([0.1, 0.0, 0.0], (N, 1)), np.tile([0.01, 0.05, 0.0], (N, 1)), 0.5)
    z = np.zeros(N)
    off = z.copy()
    off[3] = 0.2
    m = tg.GoalMonitor(_Line(1.0), tol, NAMES)
    assert not m.check(0.5, z, z, z + 0.05, z)                  # inside the path tolerance
    assert m.check(0.6, off, z, z, z)                           # 0.2 > 0.1 on joint 4
    assert m.outcome.code == tg.PATH_TOLERANCE_VIOLATED and NAMES[3] in m.outcome.message and m.hold
    assert not m.check(0.7, z, z, z, z) and m.outcome.code == tg.PATH_TOLERANCE_VIOLATED
    m = tg.GoalMonitor(_Line(1.0), tol, NAMES)
    assert not m.check(1.2, off * 0.1, z, z, z)                 # after the end: outside goal 0.01, waits
    assert not m.check(1.5, off * 0.1, z, z, z)                 # 0.5 s after: not past goal_time yet
    assert m.check(1.51, off * 0.1, z, z, z) and m.outcome.code == tg.GOAL_TOLERANCE_VIOLATED
    m = tg.GoalMonitor(_Line(1.0), tol, NAMES)
    vel = z.copy()
    vel[0] = 0.06
    assert not m.check(1.0, z, vel, z, z)                       # moving faster than 0.05: not stopped
    assert m.check(1.01, z + 0.005, z + 0.01, z, z) and m.outcome.code == tg.SUCCESSFUL and not m.hold
    tol0 = tg.Tolerances(tol.path, tol.goal, 0.0)
    m = tg.GoalMonitor(_Line(1.0), tol0, NAMES)
    assert not m.check(1e6, off * 0.1, z, z, z) and m.outcome is None   # goal_time 0: waits without limit
    m = tg.GoalMonitor(_Line(0.0), tol, NAMES)
    assert m.check(0.0, off, z, z, z) and m.outcome.code == tg.PATH_TOLERANCE_VIOLATED   # first sample


# ------------------------------------------------------------------------------------------------
# the ends through the ControlLoop, on the in-process plant
# ------------------------------------------------------------------------------------------------
def make_loop(law="joint_impedance", **over):
    p = {"controller": law, "ramp_time": 0.0, "watchdog_timeout": 0.1, "update_rate": 1.0 / DT,
         "safe_command": "gravity",    # config/panda_<law>.yaml's gains
         "joint_impedance.k_gains": [400.0, 400.0, 400.0, 400.0, 100.0, 50.0, 15.0],
         "computed_torque.kp": [400.0] * N, "computed_torque.kd": [40.0] * N}
    p.update(over)
    return ControlLoop.from_params(MODEL, p, log=lambda level, text: None)


class Plant:
    """The loop on the MuJoCo plant, stepped by a fake clock."""

    def __init__(self, law="joint_impedance", **over):
        self.sim = MujocoSim(MODEL)
        self.sim.reset(Q0)
        self.loop = make_loop(law, **over)
        self.loop.activate(0.0)
        self.t = 0.0
        self.run(1.0)                   # settled after the start (the torque-rate limit's ramp)

    def run(self, seconds, push=None, until=None, states=True):
        for _ in range(int(round(seconds / DT))):
            if states:
                self.loop.update_state(self.sim.q, self.sim.v, self.t)
            if push is not None:
                self.sim.apply_wrench(TCP, push)
            tau, _ = self.loop.step(self.t)
            self.sim.step(tau.copy())
            self.t += DT
            if until is not None and until():
                break
        self.sim.clear_wrench(TCP)

    def send(self, times, P, names=None, **kw):
        tr, tol = goal(times=times, P=P, names=names, hold=self.loop.law.q_d, **kw)
        m = tg.GoalMonitor(tr, tol, NAMES, self.loop.law.continuous)
        ok, why = self.loop.set_reference(tr, "follow_joint_trajectory", self.t, goal=m)
        assert ok, why
        return m


@pytest.fixture(params=["joint_impedance", "computed_torque"])
def plant(request):
    return Plant(request.param)


def test_goal_reached(plant):
    """A two-point goal with a goal tolerance of 5 mrad: SUCCESSFUL, and the plant's joints are within it
    then; not before the last point's time."""
    q1 = Q0 + np.array([0.2, -0.1, 0.15, 0.2, -0.2, 0.1, 0.3])
    m = plant.send([1.0, 2.0], [list(Q0 + 0.5 * (q1 - Q0)), list(q1)],
                   goal_tolerance=[(j, 0.005, 0.0, 0.0) for j in NAMES], goal_time_tolerance=2.0)
    t0 = plant.t
    plant.run(5.0, until=lambda: m.done)
    assert m.outcome.code == tg.SUCCESSFUL, m.outcome
    assert plant.t - t0 >= 2.0 - 2 * DT
    assert np.max(np.abs(plant.sim.q - q1)) <= 0.005


def test_path_tolerance_push_holds_where_it_is(plant):
    """A push on the hand while the goal moves: PATH_TOLERANCE_VIOLATED naming the joint, and the arm
    holds where it was when the goal ended (the law's reference = the measured position then), it
    does not go on to the goal."""
    q1 = Q0 + np.array([0.3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    m = plant.send([3.0], [list(q1)], path_tolerance=[(j, 0.02, 0.0, 0.0) for j in NAMES])
    plant.run(0.5)
    assert not m.done
    plant.run(2.0, push=np.array([0.0, 0.0, -60.0, 0.0, 0.0, 0.0]), until=lambda: m.done)
    assert m.outcome is not None and m.outcome.code == tg.PATH_TOLERANCE_VIOLATED, m.outcome
    q_end = plant.sim.q.copy()
    assert plant.loop.law.trajectory is None
    assert np.max(np.abs(plant.loop.law.q_d - q_end)) < 0.01
    plant.run(3.0)
    assert np.max(np.abs(plant.sim.q - q_end)) < 0.05                 # held near there
    assert np.abs(plant.sim.q[0] - q1[0]) > 0.1                        # not at the goal


def test_goal_time_violated_holds():
    """A goal the plant cannot reach in time (a joint position the joint impedance cannot hold against a
    steady push), goal_time 0.3 s: GOAL_TOLERANCE_VIOLATED once it has passed, not before."""
    p = Plant()
    q1 = Q0 + 0.05
    m = p.send([0.5], [list(q1)], goal_tolerance=[(j, 1e-4, 0.0, 0.0) for j in NAMES], goal_time_tolerance=0.3)
    t0 = p.t
    p.run(3.0, push=np.array([0.0, 0.0, -60.0, 0.0, 0.0, 0.0]), until=lambda: m.done)
    assert m.outcome.code == tg.GOAL_TOLERANCE_VIOLATED, m.outcome
    assert p.t - t0 > 0.5 + 0.3 - DT


def test_cancel_holds_current_position(plant):
    q1 = Q0 + np.array([0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    m = plant.send([2.0], [list(q1)])
    plant.run(1.0)
    assert plant.loop.cancel_goal(m)
    assert m.outcome.status == "canceled"
    q_c = plant.sim.q.copy()
    plant.run(2.0)
    assert np.max(np.abs(plant.sim.q - q_c)) < 0.05 and abs(plant.sim.q[0] - q1[0]) > 0.1


def test_preempted_by_goal_and_by_topic():
    """A new goal ends the running one aborted (INVALID_GOAL, as JTC's 'preempted'); a topic trajectory
    (another reference) too; the new one is followed without a jump."""
    p = Plant()
    q1 = Q0 + np.array([0.3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    a = p.send([2.0], [list(q1)])
    p.run(0.5)
    b = p.send([2.0], [list(Q0)])
    assert a.outcome.code == tg.INVALID_GOAL and "preempted" in a.outcome.message and "goal" in a.outcome.message
    assert not b.done
    p.run(0.3)
    from robot_dynamics.control import JointTrajectory
    ok, _ = p.loop.set_reference(JointTrajectory([1.0], [list(Q0)]), "joint_trajectory", p.t)
    assert ok and b.outcome.code == tg.INVALID_GOAL and "joint_trajectory message" in b.outcome.message


def test_watchdog_and_deactivate_abort():
    p = Plant()
    m = p.send([2.0], [list(Q0 + 0.2)])
    p.run(0.3)
    p.run(0.2, states=False)                    # no joint state for longer than watchdog_timeout
    assert m.outcome.code == tg.INVALID_GOAL and "watchdog" in m.outcome.message
    p.run(0.5)
    m = p.send([2.0], [list(Q0 + 0.2)])
    p.run(0.3)
    p.loop.deactivate()
    assert m.outcome.code == tg.INVALID_GOAL and "deactivated" in m.outcome.message
