"""Cartesian goals for the joint laws (control/ik_reference.py through ControlLoop.cartesian_goal),
closed on MuJoCo at 1 kHz (fake clock, no ROS).

Oracles: the goals are the forward kinematics (reference backend) of joint configurations this test
chooses; where the arm got is MuJoCo's frame pose.  Bounds: GOAL_TOL on the reached position (joint
impedance at rest with gravity compensated: no steady error but the spring's settling), PATH_TOL on the
Cartesian points of a followed trajectory (computed torque through the IK's joint spline).
"""
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.control import CartesianReference, ControlLoop, JointReference
from robot_dynamics.control.cartesian_trajectory import CartesianTrajectory
from robot_dynamics.control.ik_reference import IKReference
from robot_dynamics.dynamics import Model, make_backend
from robot_dynamics.sim import MujocoSim

GOAL_TOL = 1e-3          # m
PATH_TOL = 1e-4          # m
DT = 1e-3
TCP = "panda_hand_tcp"
Q0 = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
MODEL = Model.from_robot("panda")
REF = make_backend(MODEL, "reference")


def make_loop(law, **over):
    p = {"controller": law, "ramp_time": 0.0, "torque_rate_limit": 1e6, "update_rate": 1.0 / DT, "ik.frame": TCP,
         "joint_impedance.k_gains": [400.0] * 4 + [100.0] * 3}
    p.update(over)
    return ControlLoop.from_params(MODEL, p, log=lambda level, text: None)


def run(loop, sim, steps, record=None):
    t = sim.t
    for k in range(steps):
        loop.update_state(sim.q, sim.v, t)
        tau, _ = loop.step(t)
        sim.step(tau)
        t += DT
        if record is not None:
            record(t, sim)


def started(law, **over):
    loop, sim = make_loop(law, **over), MujocoSim(MODEL)
    sim.reset(Q0)
    loop.activate(0.0)
    run(loop, sim, 20)
    return loop, sim


@pytest.mark.parametrize("law, frame", [("joint_impedance", "panda_link8"), ("computed_torque", TCP)])
def test_a_pose_goal_is_reached_through_the_ik(law, frame):
    """Bug: the IK's frame, its seed, or the trajectory it makes.  The pose of `ik.frame` (the flange,
    the tcp) at a joint configuration 0.3-0.4 rad away (reference FK) given as a CartesianReference:
    the arm (MuJoCo) ends with that frame within GOAL_TOL of it, the orientation within 1e-3 rad."""
    loop, sim = started(law, **{"ik.frame": frame})
    q_goal = Q0 + np.array([0.3, 0.2, -0.3, 0.4, 0.2, -0.3, 0.3])
    R, p = REF.frame_placement(q_goal, frame)
    jt = loop.references.cartesian_goal(CartesianReference(R, p))
    ok, why = loop.set_reference(jt)
    assert ok, why
    run(loop, sim, 5000)
    Rm, pm = sim.frame_pose(frame)
    err_p = np.linalg.norm(pm - p)
    err_r = np.linalg.norm(pin.log3(R.T @ Rm))
    print(f"{law}: reached {1000 * err_p:.3f} mm, {err_r:.2e} rad from the goal")
    assert err_p < GOAL_TOL and err_r < 1e-3


def test_unreachable_and_singular_goals_are_refused_and_nothing_changes():
    """Bug: an IK failure followed anyway, or a reason missing.  A pose 2 m away: ValueError "out of
    reach" with the closest distance; a UR5 pose with the elbow straight (the shoulder-wrist distance
    at its maximum: every solution has the elbow straight, where the Jacobian loses a direction):
    "singular"; a law without joint references: refused.  The law keeps what it held.  (The Panda has
    no such pose: its elbow stops 0.07 rad short of straight, and its seventh joint keeps s_min above
    0.026 at the stretched poses tried.)"""
    loop, sim = started("joint_impedance")
    held = np.array(loop.law.q_d)
    R, p = REF.frame_placement(Q0, TCP)
    with pytest.raises(ValueError, match="out of reach"):
        loop.references.cartesian_goal(CartesianReference(R, p + [2.0, 0.0, 0.0]))
    assert np.array_equal(loop.law.q_d, held) and loop.references.pending is None
    ur5 = Model.from_robot("ur5")
    ur_loop = ControlLoop.from_params(ur5, {"controller": "joint_impedance"}, log=lambda level, text: None)
    Rs, ps = make_backend(ur5, "reference").frame_placement(np.array([0.0, -1.0, 0.0, -1.0, -1.57, 0.0]), "tool0")
    with pytest.raises(ValueError, match="singular configuration"):
        ur_loop.references.cartesian_goal(CartesianReference(Rs, ps))
    # the seed already at the goal (no iteration: the smallest singular value is the solution's own)
    with pytest.raises(ValueError, match="singular configuration"):
        IKReference(ur5, "tool0").pose(np.array([0.0, -1.0, 0.0, -1.0, -1.57, 0.0]), Rs, ps)
    with pytest.raises(ValueError, match="joint laws"):
        make_loop("gravity_compensation").references.cartesian_goal(CartesianReference(R, p))


def line(p0, p1, R, duration, n=21):
    ts = np.linspace(0.0, duration, n)
    u = ts / duration
    s = 10 * u ** 3 - 15 * u ** 4 + 6 * u ** 5
    return CartesianTrajectory(ts, p0 + np.outer(s, p1 - p0), np.repeat(R[None], n, axis=0))


def test_a_cartesian_trajectory_is_followed_through_the_ik():
    """Bug: points solved from the wrong seed, their times lost.  A 15 cm straight line of the tcp in
    2 s (21 points, a minimum-jerk profile), for computed torque: at each later point's time the tcp
    (MuJoCo) is within PATH_TOL of the point."""
    loop, sim = started("computed_torque")
    R, p0 = REF.frame_placement(Q0, TCP)
    ct = line(p0, p0 + [0.0, 0.15, 0.0], R, 2.0)
    jt = loop.references.cartesian_goal(ct)
    t_set = sim.t
    assert loop.set_reference(jt)[0]
    got = {}

    def record(t, sim):
        k = int(round((t - t_set) / 0.1))
        if abs(t - t_set - 0.1 * k) < 0.5 * DT and 0 <= k <= 20:
            got[k] = sim.frame_pose(TCP)[1].copy()
    run(loop, sim, 2600, record)
    errs = [np.linalg.norm(got[k] - ct.positions[k]) for k in sorted(got)]
    print(f"line: worst error at the points {1000 * max(errs):.3f} mm over {len(errs)} points")
    assert sorted(got) == list(range(1, 21)) and max(errs) < PATH_TOL


@pytest.mark.parametrize("law", ["joint_impedance", "computed_torque"])
def test_a_stamped_cartesian_trajectory_starts_at_its_stamp(law):
    """Bug: the Cartesian trajectory's stamp (its header.stamp on the node) dropped on the way through
    the IK, so the joint trajectory starts on receipt.  The 15 cm minimum-jerk line in 2 s, stamped
    0.8 s after it is handed over (the loop's clock): until the stamp the tcp (MuJoCo) stays where it
    was (within HOLD_TOL; started on receipt it is 47.6 mm along by then), and at stamp + each later
    point's time it is at that point (within PATH_TOL for computed torque; joint impedance lags its
    spring: within LAG_TOL, still far below the 47.6 mm a start on receipt puts it ahead)."""
    HOLD_TOL, LAG_TOL, DELAY = 0.2e-3, 5e-3, 0.8
    loop, sim = started(law)
    R, p0 = REF.frame_placement(Q0, TCP)
    ct = line(p0, p0 + [0.0, 0.15, 0.0], R, 2.0)
    t_set = sim.t
    ct.stamp = t_set + DELAY
    assert loop.set_reference(loop.references.cartesian_goal(ct))[0]
    held, got = [], {}

    def record(t, sim):
        x = sim.frame_pose(TCP)[1].copy()
        if t <= ct.stamp:
            held.append(np.linalg.norm(x - p0))
        k = int(round((t - ct.stamp) / 0.1))
        if abs(t - ct.stamp - 0.1 * k) < 0.5 * DT and 0 <= k <= 20:
            got[k] = x
    run(loop, sim, int((DELAY + 2.6) / DT), record)
    errs = [np.linalg.norm(got[k] - ct.positions[k]) for k in sorted(got)]
    print(f"{law}, stamp +{DELAY} s: moved {1000 * max(held):.4f} mm before the stamp; worst error at the "
          f"points from the stamp {1000 * max(errs):.3f} mm")
    assert len(held) >= int(DELAY / DT) - 1 and max(held) < HOLD_TOL, \
        f"moved {1000 * max(held):.1f} mm before its stamped start"
    assert sorted(got) == list(range(21))
    assert max(errs) < (PATH_TOL if law == "computed_torque" else LAG_TOL), errs


def test_a_trajectory_through_a_singularity_or_too_fast_is_refused_with_the_point():
    """Bug: a path the arm cannot follow accepted.  A line that leaves the workspace (1.5 m along x):
    refused at the point where the joints would have to jump (the last reachable points crowd the
    workspace's edge, where the IK speeds up without bound) or at the first unreachable point; the 15
    cm line in 0.05 s (joints faster than their limits between points): refused naming the joint and
    the speed."""
    loop, _ = started("joint_impedance")
    R, p0 = REF.frame_placement(Q0, TCP)
    with pytest.raises(ValueError, match=r"point \d+ .*(out of reach|rad/s from the point before)"):
        loop.references.cartesian_goal(line(p0, p0 + [1.5, 0.0, 0.0], R, 3.0))
    with pytest.raises(ValueError, match="rad/s from the point before"):
        loop.references.cartesian_goal(line(p0, p0 + [0.0, 0.15, 0.0], R, 0.05))


def test_the_joint_spline_through_the_ik_points_is_bounded():
    """Bug: only the mean speed between points checked, so a path whose joint spline accelerates
    beyond the law's bound (its approach's 5 rad/s^2) taken.  The 15 cm line at a constant speed in
    0.6 s (from rest to 0.25 m/s at once: mean joint speeds within the limits): refused naming the
    joint and rad/s^2.  The same line with a minimum-jerk profile in 2 s: taken, and its joint
    positions sampled every 1 ms have second differences within the bound (the oracle: finite
    differences, not the check itself)."""
    loop, _ = started("joint_impedance")
    R, p0 = REF.frame_placement(Q0, TCP)
    ts = np.linspace(0.0, 0.6, 21)
    const = CartesianTrajectory(ts, p0 + np.outer(ts / 0.6, [0.0, 0.15, 0.0]), np.repeat(R[None], 21, axis=0))
    with pytest.raises(ValueError, match=r"joint 'panda_joint\d' at [\d.]+ rad/s\^2 at t = .*bound 5 rad/s\^2"):
        loop.references.cartesian_goal(const)
    jt = loop.references.cartesian_goal(line(p0, p0 + [0.0, 0.15, 0.0], R, 2.0))
    h = 1e-3
    q = np.array([jt.sample(t)[0] for t in np.arange(0.0, 2.0 + h / 2, h)])
    acc = np.abs(np.diff(q, 2, axis=0)) / h ** 2
    vel = np.abs(np.diff(q, axis=0)) / h
    print(f"\n2 s line: peak joint acceleration {acc.max():.3f} rad/s^2, speed {vel.max():.3f} rad/s (finite differences)")
    assert acc.max() <= 5.0 and np.all(vel.max(axis=0) <= np.asarray(MODEL.velocity_limits))


def test_joint_references_still_work_beside_the_ik():
    """A JointReference after an IK goal is followed as before (the conversion changes nothing else)."""
    loop, sim = started("joint_impedance")
    R, p = REF.frame_placement(Q0 + 0.1, TCP)
    loop.set_reference(loop.references.cartesian_goal(CartesianReference(R, p)))
    run(loop, sim, 500)
    assert loop.set_reference(JointReference(Q0))[0]
    run(loop, sim, 3000)
    assert np.abs(sim.q - Q0).max() < 1e-3
