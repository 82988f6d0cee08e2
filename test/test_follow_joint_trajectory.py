"""FollowJointTrajectory with JointTrajectoryController's semantics (issue 44).

Part 1, no ROS: the goal checks and tolerances (control/trajectory_goal.py) against the rules JTC states
(its validate_trajectory_msg, tolerances.hpp, JointTolerance.msg), and the goal's ends through the
ControlLoop on the in-process MuJoCo plant (reached, path tolerance broken by a push, goal_time,
cancel, preemption, watchdog, deactivation), judged on the plant's joint positions.

Part 2 (slow): a real rclpy ActionClient in this process against the controller node and the MuJoCo sim
node, two child processes (one set of nodes for the module, several goals against it).
"""
import math
import sys
import time
from pathlib import Path

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
    assert plant.loop.references.cancel_goal(m)
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
    late = p.send([2.0], [list(Q0 + 0.2)])      # handed over while tripped: not followed at the resume
    p.run(0.5)
    assert late.outcome.code == tg.INVALID_GOAL and "arrived while" in late.outcome.message, late.outcome
    m = p.send([2.0], [list(Q0 + 0.2)])
    p.run(0.3)
    p.loop.deactivate()
    assert m.outcome.code == tg.INVALID_GOAL and "deactivated" in m.outcome.message


# ------------------------------------------------------------------------------------------------
# a real ActionClient (this process) against the controller node on the MuJoCo sim node
# ------------------------------------------------------------------------------------------------
START_TIMEOUT = 90.0          # s: both children up, the controller configured and commanding
RESULT_TIMEOUT = 90.0         # s: longest wait for a result (a bound, not a speed requirement)
RESULT_ASK_AGAIN = 5.0        # s: the result is asked for again after this (a reply lost under load)
GOAL_SEND_AGAIN = 10.0        # s: a goal without a response is sent again after this (Client.send)
ACTION = "/torque_controller/follow_joint_trajectory"


class Client:
    """An rclpy ActionClient as MoveIt uses it: send the goal, collect feedback, ask for the result.
    Every request is made on the executor's thread (`call`): rclpy's ActionClient registers a request's
    sequence number after sending it, unlocked, so a response the executor thread takes in between is
    dropped ("Ignoring unexpected goal response"); from the test thread that happened about twice per
    run beside a CPU hog."""

    def __init__(self, action=ACTION):
        import threading

        import rclpy
        from control_msgs.action import FollowJointTrajectory
        from rclpy.action import ActionClient
        from rclpy.executors import SingleThreadedExecutor
        self.FJT = FollowJointTrajectory
        self.node = rclpy.create_node("fjt_test_client")
        self.action = action
        self.ac = ActionClient(self.node, FollowJointTrajectory, action)
        self.feedback = []
        self.resent = 0
        self._calls = []
        self.ex = SingleThreadedExecutor()
        self.ex.add_node(self.node)
        self._run = True
        self.th = threading.Thread(target=self._spin, daemon=True)
        self.th.start()

    def call(self, fn):
        """fn() on the executor's thread (between two spins); its return value."""
        box = []
        self._calls.append((fn, box))
        t_end = time.monotonic() + 30.0
        while not box and time.monotonic() < t_end:
            time.sleep(0.005)
        assert box, "the client's executor thread does not run"
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def _spin(self):
        while self._run:
            while self._calls:
                fn, box = self._calls.pop(0)
                try:
                    box.append(fn())
                except Exception as e:             # noqa: BLE001 (handed to the caller)
                    box.append(e)
            try:
                self.ex.spin_once(timeout_sec=0.01)
            except Exception as e:                 # noqa: BLE001 (print and go on, as the probe does)
                print(f"client spin: {type(e).__name__}: {e}")

    def stop(self):
        self._run = False
        self.th.join(timeout=2.0)
        self.ex.shutdown(timeout_sec=1.0)
        self.ac.destroy()
        self.node.destroy_node()

    def goal_msg(self, names, times, P, V=None, stamp=None, path_tol=None, goal_tol=None, goal_time=0.0):
        from control_msgs.msg import JointTolerance
        from trajectory_msgs.msg import JointTrajectoryPoint
        g = self.FJT.Goal()
        g.trajectory.joint_names = list(names)
        if stamp is not None:
            g.trajectory.header.stamp.sec, g.trajectory.header.stamp.nanosec = divmod(int(stamp * 1e9), 10 ** 9)
        for k, t in enumerate(times):
            pt = JointTrajectoryPoint()
            pt.positions = [float(x) for x in P[k]]
            if V is not None:
                pt.velocities = [float(x) for x in V[k]]
            pt.time_from_start.sec, pt.time_from_start.nanosec = divmod(int(round(t * 1e9)), 10 ** 9)
            g.trajectory.points.append(pt)
        for field_name, tol in (("path_tolerance", path_tol), ("goal_tolerance", goal_tol)):
            for name, pos in (tol or {}).items():
                getattr(g, field_name).append(JointTolerance(name=name, position=float(pos)))
        g.goal_time_tolerance.sec, g.goal_time_tolerance.nanosec = divmod(int(round(goal_time * 1e9)), 10 ** 9)
        return g

    def _on_feedback(self, msg):
        self.feedback.append((time.monotonic(), msg.feedback))

    def send(self, goal):
        """The goal handle once the server answered (accepted or not).  A goal response that has not come
        after GOAL_SEND_AGAIN s is given up and the goal sent again (a new goal id): under load the first
        request of a client can be answered before the server's response writer has matched the client's
        reader, and that answer is lost (if the first one was accepted, the second preempts it)."""
        assert self.ac.wait_for_server(timeout_sec=30.0), "no action server " + self.action
        t_end = time.monotonic() + RESULT_TIMEOUT
        while time.monotonic() < t_end:
            fut = self.call(lambda: self.ac.send_goal_async(goal, feedback_callback=self._on_feedback))
            t_again = time.monotonic() + GOAL_SEND_AGAIN
            while not fut.done() and time.monotonic() < min(t_again, t_end):
                time.sleep(0.01)
            if fut.done():
                return fut.result()
            self.resent += 1
            print(f"no goal response in {GOAL_SEND_AGAIN} s: sending the goal again")
        raise AssertionError("no goal response")

    def result(self, handle):
        """(status, Result) of an accepted goal; asks again every RESULT_ASK_AGAIN s until it comes."""
        t_end = time.monotonic() + RESULT_TIMEOUT
        while time.monotonic() < t_end:
            fut = self.call(handle.get_result_async)
            t_ask = time.monotonic() + RESULT_ASK_AGAIN
            while not fut.done() and time.monotonic() < min(t_ask, t_end):
                time.sleep(0.01)
            if fut.done():
                r = fut.result()
                return r.status, r.result
        raise AssertionError("no result")

    def run(self, goal):
        h = self.send(goal)
        assert h.accepted
        return self.result(h)


@pytest.fixture(scope="module")
def nodes(ros, tmp_path_factory):
    """The sim node and the joint-impedance controller node (children), a probe and the client (here)."""
    pytest.importorskip("control_msgs")
    from robot_dynamics.dynamics import PinocchioBackend
    from robot_dynamics.nodes.probe import Probe
    from robot_dynamics.nodes.processes import RT_TEST, NodeProcesses, start_sim_and_controller
    procs = NodeProcesses(log_dir=tmp_path_factory.mktemp("fjt_nodes"))
    probe = Probe(joints=NAMES, name="fjt_probe")
    client = None
    try:
        start_sim_and_controller(procs, "panda", "joint_impedance", realtime=RT_TEST,
                                 controller_params={"use_sim_time": True, "constraints.goal_time": 0.0})
        probe.start()
        dyn = PinocchioBackend(MODEL)

        def settled():
            return (probe.n_state > 10 and probe.effort is not None and probe.q is not None
                    and np.max(np.abs(probe.effort - dyn.gravity(probe.q))) < 0.1)
        assert probe.wait_for(settled, START_TIMEOUT, check=procs.check_alive), \
            "sim + controller not running:\n" + "\n".join(procs.log(p)[-2000:] for p in procs.procs)
        client = Client()
        yield procs, probe, client
    finally:
        if client is not None:
            client.stop()
        probe.stop()
        probe.destroy_node()
        procs.stop_all()


def settle(client, q):
    """Back to q and at rest there (a goal with a goal tolerance), before the next case."""
    st, res = client.run(client.goal_msg(NAMES, [2.0], [q], goal_tol={j: 0.005 for j in NAMES}))
    assert (st, res.error_code) == (4, tg.SUCCESSFUL), res


def plant_q(probe):
    with probe.lock:
        return probe.q.copy()


def sim_time(probe):
    with probe.lock:
        return probe.clock


def wait(probe, pred, timeout=30.0, poll=0.02):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if pred():
            return True
        time.sleep(poll)
    return False


@pytest.mark.system
@pytest.mark.slow
def test_node_goal_reached_with_feedback(nodes):
    """Goal reached: SUCCEEDED / SUCCESSFUL, the plant within the goal tolerance; the result not before
    the last point's time (sim clock); feedback received, in `joints` order, its desired moving from
    the start toward the goal, its error = desired - actual."""
    procs, probe, client = nodes
    q0 = plant_q(probe)
    q1 = q0 + np.array([0.15, -0.1, 0.1, 0.15, -0.15, 0.1, 0.2])
    client.feedback.clear()
    t_send = sim_time(probe)
    st, res = client.run(client.goal_msg(NAMES, [1.0, 2.0], [0.5 * (q0 + q1), q1],
                                         goal_tol={j: 0.01 for j in NAMES}, goal_time=5.0))
    t_res = sim_time(probe)
    assert (st, res.error_code) == (4, tg.SUCCESSFUL), (st, res)      # GoalStatus.STATUS_SUCCEEDED
    assert np.max(np.abs(plant_q(probe) - q1)) < 0.01
    assert t_res - t_send >= 2.0 - 0.05, (t_send, t_res)
    assert len(client.feedback) >= 2, "no feedback"
    first, fb = client.feedback[0][1], client.feedback[-1][1]
    assert list(fb.joint_names) == NAMES
    d_first, d_last = (np.max(np.abs(np.array(f.desired.positions) - q1)) for f in (first, fb))
    assert d_last < d_first and d_first <= np.max(np.abs(q1 - q0)) + 1e-3, (d_first, d_last)
    for _, f in client.feedback:
        assert np.allclose(np.array(f.desired.positions) - np.array(f.actual.positions), f.error.positions,
                           atol=1e-9)


@pytest.mark.system
@pytest.mark.slow
def test_node_refused_goals_answer_codes(nodes):
    """Each malformed goal: ABORTED at once with its code and reason; the arm does not move."""
    procs, probe, client = nodes
    q0 = plant_q(probe)
    now = sim_time(probe)
    cases = [
        (client.goal_msg(["elbow"], [1.0], [[0.0]]), tg.INVALID_JOINTS, "elbow"),
        (client.goal_msg(NAMES, [], []), tg.INVALID_GOAL, "empty trajectory"),
        (client.goal_msg(NAMES, [1.0, 0.5], [q0, q0]), tg.INVALID_GOAL, "strictly increasing"),
        (client.goal_msg(NAMES, [1.0], [list(q0[:6]) + [math.nan]]), tg.INVALID_GOAL, "not finite"),
        (client.goal_msg(NAMES, [1.0], [q0], stamp=now - 10.0), tg.OLD_HEADER_TIMESTAMP, "in the past"),
    ]
    for g, code, words in cases:
        st, res = client.run(g)
        assert (st, res.error_code) == (6, code), (words, st, res)      # STATUS_ABORTED
        assert words in res.error_string, res.error_string
    assert np.max(np.abs(plant_q(probe) - q0)) < 2e-3


@pytest.mark.system
@pytest.mark.slow
def test_node_partial_goal_others_hold(nodes):
    procs, probe, client = nodes
    q0 = plant_q(probe)
    names = [NAMES[6], NAMES[0]]
    target = [q0[6] - 0.2, q0[0] + 0.1]
    st, res = client.run(client.goal_msg(names, [1.0], [target], goal_tol={n: 0.01 for n in names}))
    assert (st, res.error_code) == (4, tg.SUCCESSFUL), res
    q = plant_q(probe)
    assert abs(q[6] - target[0]) < 0.01 and abs(q[0] - target[1]) < 0.01
    assert np.max(np.abs(q[1:6] - q0[1:6])) < 0.01


@pytest.mark.system
@pytest.mark.slow
def test_node_cancel_holds(nodes):
    """Cancel: CANCELED, and the arm holds where it was when the cancel took effect (the plant), short of
    the goal."""
    procs, probe, client = nodes
    q0 = plant_q(probe)
    q1 = q0 + np.array([0.4, 0, 0, 0, 0, 0, 0])
    h = client.send(client.goal_msg(NAMES, [8.0], [q1]))     # slow: the cancel lands far from the goal
    assert h.accepted
    assert wait(probe, lambda: abs(plant_q(probe)[0] - q0[0]) > 0.03), "the arm did not move"
    fut = client.call(h.cancel_goal_async)
    assert wait(probe, fut.done, RESULT_TIMEOUT)
    st, res = client.result(h)
    assert st == 5, (st, res)                                          # STATUS_CANCELED
    q_c = plant_q(probe)
    time.sleep(1.0)
    q = plant_q(probe)
    assert np.max(np.abs(q - q_c)) < 0.05 and abs(q[0] - q1[0]) > 0.1, (q_c, q, q1)
    settle(client, q0)


@pytest.mark.system
@pytest.mark.slow
def test_node_preemption(nodes):
    """A second goal aborts the first (INVALID_GOAL, 'preempted', as JTC); a topic trajectory aborts the
    running goal too, with its reason."""
    procs, probe, client = nodes
    q0 = plant_q(probe)
    a = client.send(client.goal_msg(NAMES, [4.0], [q0 + 0.2]))
    assert a.accepted
    b = client.send(client.goal_msg(NAMES, [2.0], [q0], goal_tol={j: 0.01 for j in NAMES}))
    st, res = client.result(a)
    assert (st, res.error_code) == (6, tg.INVALID_GOAL) and "preempted" in res.error_string, res
    st, res = client.result(b)
    assert (st, res.error_code) == (4, tg.SUCCESSFUL), res
    c = client.send(client.goal_msg(NAMES, [4.0], [q0 + 0.1]))
    assert c.accepted
    assert wait(probe, lambda: client.feedback and client.feedback[-1][1].desired.positions[0] > q0[0] + 1e-3)
    probe.publish_trajectory([1.0], [q0])
    st, res = client.result(c)
    assert (st, res.error_code) == (6, tg.INVALID_GOAL) and "joint_trajectory" in res.error_string, res
    settle(client, q0)


@pytest.mark.system
@pytest.mark.slow
def test_node_push_violates_path_tolerance(nodes):
    """A push on the hand while a goal with a 0.01 rad path tolerance moves: ABORTED with
    PATH_TOLERANCE_VIOLATED, and the arm holds where it was (the push released)."""
    procs, probe, client = nodes
    q0 = plant_q(probe)
    q1 = q0 + np.array([0.2, 0, 0, 0, 0, 0, 0])
    h = client.send(client.goal_msg(NAMES, [6.0], [q1], path_tol={j: 0.01 for j in NAMES}))
    assert h.accepted
    fut = client.call(h.get_result_async)
    # moving within the tolerance without the push (1 s of sim time), then pushed
    t0 = sim_time(probe)
    assert wait(probe, lambda: fut.done() or sim_time(probe) > t0 + 1.0)
    assert not fut.done(), fut.result().result
    assert abs(plant_q(probe)[0] - q0[0]) > 1e-3
    try:
        assert wait(probe, lambda: (probe.push(TCP, [0.0, 0.0, -60.0, 0.0, 0.0, 0.0]) or fut.done()), 30.0,
                    poll=0.1)
    finally:
        for _ in range(3):
            probe.push(TCP, [0.0] * 6)
    st, res = client.result(h)
    assert (st, res.error_code) == (6, tg.PATH_TOLERANCE_VIOLATED), res
    assert "path tolerance" in res.error_string
    time.sleep(1.0)
    q_hold = plant_q(probe)
    time.sleep(1.0)
    q = plant_q(probe)
    assert np.max(np.abs(q - q_hold)) < 0.02 and abs(q[0] - q1[0]) > 0.05, (q_hold, q, q1)
    settle(client, q0)


@pytest.mark.system
@pytest.mark.slow
def test_node_goal_time_violated(nodes):
    """A goal tolerance the pushed arm cannot meet, goal_time_tolerance 0.3 s: GOAL_TOLERANCE_VIOLATED,
    not before the last point's time + goal_time on the sim clock."""
    procs, probe, client = nodes
    q0 = plant_q(probe)
    t_send = sim_time(probe)
    h = client.send(client.goal_msg(NAMES, [1.0], [q0 + 0.05], goal_tol={j: 1e-3 for j in NAMES}, goal_time=0.3))
    assert h.accepted
    fut = client.call(h.get_result_async)
    try:
        wait(probe, lambda: (probe.push(TCP, [0.0, 0.0, -60.0, 0.0, 0.0, 0.0]) or fut.done()), 30.0, poll=0.1)
    finally:
        for _ in range(3):
            probe.push(TCP, [0.0] * 6)
    st, res = client.result(h)
    t_res = sim_time(probe)
    assert (st, res.error_code) == (6, tg.GOAL_TOLERANCE_VIOLATED), res
    assert t_res - t_send >= 1.3 - 0.05
    settle(client, q0)



@pytest.mark.system
@pytest.mark.slow
def test_node_controller_state(nodes):
    """~/controller_state (JointTrajectoryControllerState): joint_names = joints, feedback = the plant's
    joint positions (the sim's /joint_states), reference = the goal reached, error = reference - feedback,
    output = the efforts the sim applies (its /joint_states effort), speed_scaling_factor 1."""
    from control_msgs.msg import JointTrajectoryControllerState
    procs, probe, client = nodes
    q0 = plant_q(probe)
    q1 = q0 + np.array([0.05, 0, 0, 0, 0, 0, -0.05])
    settle(client, q1)
    got = []
    sub = client.node.create_subscription(JointTrajectoryControllerState, "/torque_controller/controller_state",
                                          got.append, 10)
    try:
        assert wait(probe, lambda: len(got) >= 5, 30.0), "no controller_state"
        m = got[-1]
        with probe.lock:
            q, eff = probe.q.copy(), probe.effort.copy()
        assert list(m.joint_names) == NAMES
        assert np.allclose(m.reference.positions, q1, atol=1e-9)
        assert np.allclose(m.feedback.positions, q, atol=2e-3)              # at rest: the plant's q
        assert np.allclose(np.array(m.reference.positions) - m.feedback.positions, m.error.positions, atol=1e-12)
        assert np.allclose(m.output.effort, eff, atol=0.05)                  # what the sim applies
        assert m.speed_scaling_factor == 1.0
    finally:
        client.node.destroy_subscription(sub)
    settle(client, q0)

@pytest.mark.system
@pytest.mark.slow
def test_node_deactivate_aborts_then_rejects(nodes):
    """Deactivating the controller aborts the running goal (INVALID_GOAL, the reason); goals are then
    rejected (JTC: "Controller is not running").  Last of the node tests: it leaves the node inactive."""
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    procs, probe, client = nodes
    q0 = plant_q(probe)
    h = client.send(client.goal_msg(NAMES, [6.0], [q0 + 0.1]))
    assert h.accepted
    cli = client.node.create_client(ChangeState, "/torque_controller/change_state")
    try:
        assert cli.wait_for_service(timeout_sec=30.0)
        req = ChangeState.Request(transition=Transition(id=Transition.TRANSITION_DEACTIVATE))
        fut = client.call(lambda: cli.call_async(req))
        st, res = client.result(h)
        assert (st, res.error_code) == (6, tg.INVALID_GOAL) and "deactivated" in res.error_string, res
        assert fut is not None     # (its response is not waited for: the goal's result says it acted)
        h2 = client.send(client.goal_msg(NAMES, [1.0], [q0]))
        assert not h2.accepted
    finally:
        client.node.destroy_client(cli)

# ------------------------------------------------------------------------------------------------
# the node in process: the parameters, and a ROS install without control_msgs
# ------------------------------------------------------------------------------------------------
class _Recorder:
    """Wraps the node's logger; records the warning lines."""

    def __init__(self, log):
        self._log, self.warnings = log, []

    def warning(self, text, **kw):
        self.warnings.append(text)
        return self._log.warning(text, **kw)

    def __getattr__(self, name):
        return getattr(self._log, name)


def _node(ctx, law, **params):
    from rclpy.parameter import Parameter

    from robot_dynamics.nodes.controller import TorqueControllerNode
    base = dict(robot="panda", controller=law, joints=NAMES, autostart=False,
                joint_states_topic="/fjt_inproc/joint_states", command_topic="/fjt_inproc/commands")
    base.update(params)
    return TorqueControllerNode(f"fjt_inproc_{law}", context=ctx,
                                parameter_overrides=[Parameter(k, value=v) for k, v in base.items()])


def test_node_constraints_parameters_and_no_control_msgs(monkeypatch):
    """JTC's constraints.<joint>.trajectory / .goal are parameters (validated: a negative one refused);
    with control_msgs importable the joint laws offer the action, the other two laws do not;
    without it, one warning at configure (also after a second configure) and the node configures."""
    rclpy = pytest.importorskip("rclpy")
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    nodes = []
    try:
        node = _node(ctx, "joint_impedance", **{"constraints.panda_joint2.goal": 0.05})
        nodes.append(node)
        assert node.get_parameter("constraints.panda_joint2.goal").value == 0.05
        assert node.get_parameter("constraints.panda_joint7.trajectory").value == 0.0
        r = node.set_parameters([Parameter("constraints.panda_joint3.trajectory", value=-0.1)])[0]
        assert not r.successful and "constraints.panda_joint3.trajectory" in r.reason
        try:
            import control_msgs  # noqa: F401
        except ImportError:
            control_msgs = None
        if control_msgs is not None:
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
            assert node._fjt_server is not None
            node.trigger_cleanup()
            assert node._fjt_server is None
            for law, offered in (("computed_torque", True), ("gravity_compensation", False),
                                 ("cartesian_impedance", False)):
                g = _node(ctx, law)
                nodes.append(g)
                assert g.trigger_configure() == TransitionCallbackReturn.SUCCESS
                assert (g._fjt_server is not None) == offered, law
                g.trigger_cleanup()
        monkeypatch.setitem(sys.modules, "control_msgs", None)
        monkeypatch.setitem(sys.modules, "control_msgs.action", None)
        rec = node._log = _Recorder(node._log)
        for _ in range(2):
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
            assert node._fjt_server is None and node.c is not None
            node.trigger_cleanup()
        assert sum("control_msgs is not installed" in w for w in rec.warnings) == 1, rec.warnings
    finally:
        for n in nodes:
            n.destroy_node()
        rclpy.shutdown(context=ctx)


# ------------------------------------------------------------------------------------------------
# the MoveIt controllers files
# ------------------------------------------------------------------------------------------------
CONFIG = Path(__file__).resolve().parents[1] / "config"
MOVEIT_ROBOTS = {"panda": "panda_joint_impedance.yaml", "fr3": "fr3_joint_impedance.yaml",
                 "kinova": "kinova_joint_impedance.yaml", "ur5e": "ur5e_joint_impedance.yaml"}


@pytest.mark.parametrize("robot", sorted(MOVEIT_ROBOTS))
def test_moveit_controllers_file(robot):
    """config/moveit_controllers_<robot>.yaml loads as ROS parameters (rclpy's parameter-file reader) and
    holds what moveit_simple_controller_manager reads, by its names and types: the string array
    moveit_simple_controller_manager.controller_names and, per controller, action_ns (string), type
    'FollowJointTrajectory', joints (non-empty string array), default (bool); the action it makes,
    /<controller>/<action_ns>, is this node's; the joints are the controller config's."""
    rclpy_parameter = pytest.importorskip("rclpy.parameter")
    import yaml
    from rcl_interfaces.msg import ParameterType as PT
    params = rclpy_parameter.parameter_dict_from_yaml_file(str(CONFIG / f"moveit_controllers_{robot}.yaml"),
                                                           use_wildcard=True)
    base = "moveit_simple_controller_manager"
    assert params["moveit_controller_manager"].value.string_value == \
        "moveit_simple_controller_manager/MoveItSimpleControllerManager"
    names = params[f"{base}.controller_names"].value
    assert names.type == PT.PARAMETER_STRING_ARRAY and list(names.string_array_value) == ["torque_controller"]
    (name,) = names.string_array_value
    get = {k[len(f"{base}.{name}."):]: v.value for k, v in params.items() if k.startswith(f"{base}.{name}.")}
    assert get["type"].type == PT.PARAMETER_STRING and get["type"].string_value == "FollowJointTrajectory"
    assert get["action_ns"].type == PT.PARAMETER_STRING
    assert f"/{name}/{get['action_ns'].string_value}" == ACTION
    assert get["default"].type == PT.PARAMETER_BOOL and get["default"].bool_value
    assert get["joints"].type == PT.PARAMETER_STRING_ARRAY
    with open(CONFIG / MOVEIT_ROBOTS[robot]) as f:
        ctl = next(iter(yaml.safe_load(f).values()))["ros__parameters"]
    assert list(get["joints"].string_array_value) == ctl["joints"]
