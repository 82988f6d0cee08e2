"""PositionIK's labels for targets out of reach, on arms other than the Panda (issue 45).

The oracle for "out of reach" is geometric and independent of the solver: every point the tool frame
can reach lies within B of joint 1's origin o1, B the sum of the lengths of the chain's links (the
translations of Pinocchio's joint placements from joint 2 to the frame's parent, plus the frame's
offset), by the triangle inequality.  A target farther than B from o1 is out of reach whatever the
joint angles, and no configuration comes closer than |p_d - o1| - B.  Poses are checked with
Pinocchio's forward kinematics on a Data of the test's own.  Reachable targets are FK of random
configurations; converged means within 1e-8 m and 1e-8 rad by that FK (the solver's tolerance 1e-9).
"""
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.dynamics import Model
from robot_dynamics.dynamics.ik import PositionIK
from robot_dynamics.dynamics.robots import robots_dir

FRAMES = {"xarm7": "link_eef", "ur10": "tool0"}
# the issue's case: the closest start was still creeping toward the same local minimum when its 100
# iterations ran out, and the target 2 m beyond was reported max_iterations
Q0_XARM7 = np.array([-2.9957, -0.8192, 3.9487, 0.1866, 1.2579, 1.8293, -3.9220])


@pytest.fixture(scope="module", params=list(FRAMES))
def arm(request):
    name = request.param
    if name == "xarm7":
        return Model.from_urdf_file(robots_dir() / "xarm_description/urdf/xarm7.urdf"), FRAMES[name]
    return Model.from_robot(name), FRAMES[name]


def pin_fk(model, q, frame):
    pm = model.pin_model
    d = pm.createData()
    pin.forwardKinematics(pm, d, q)
    M = pin.updateFramePlacement(pm, d, pm.getFrameId(frame))
    return M.rotation.copy(), M.translation.copy()


def pose_error(model, frame, q, p_d, R_d):
    R, p = pin_fk(model, q, frame)
    return np.hypot(np.linalg.norm(p_d - p), np.linalg.norm(pin.log3(R_d @ R.T)))


def reach_bound(model, frame):
    """(o1, B): joint 1's origin (fixed in the world) and the length of the chain from it to the frame."""
    pm = model.pin_model
    f = pm.frames[pm.getFrameId(frame)]
    B, j = np.linalg.norm(f.placement.translation), f.parentJoint
    while pm.parents[j] != 0:
        B += np.linalg.norm(pm.jointPlacements[j].translation)
        j = pm.parents[j]
    return pm.jointPlacements[j].translation.copy(), B


def far_target(model, frame, q0):
    """The pose 2 m radially (from the base origin) beyond FK(q0), its rotation kept."""
    R, p = pin_fk(model, q0, frame)
    return p + 2.0 * p / np.linalg.norm(p), R


def assert_out_of_reach(model, frame, res, p_d):
    o1, B = reach_bound(model, frame)
    gap = np.linalg.norm(p_d - o1) - B
    assert gap > 0.0, "the test's target is not provably out of reach"
    assert res.status == "out_of_reach", res.message
    R, p = pin_fk(model, res.q, frame)                    # the closest pose reported is the FK of its q
    assert np.abs(p - res.p).max() < 1e-12 and np.abs(R - res.R).max() < 1e-12
    assert res.position_error == pytest.approx(np.linalg.norm(p_d - p), rel=1e-12)
    assert res.position_error >= gap - 1e-12
    assert np.all(res.q >= model.lower_limits) and np.all(res.q <= model.upper_limits)


def test_the_issues_xarm7_target_is_out_of_reach():
    model = Model.from_urdf_file(robots_dir() / "xarm_description/urdf/xarm7.urdf")
    p_d, R_d = far_target(model, "link_eef", Q0_XARM7)
    res = PositionIK(model, "link_eef").solve(Q0_XARM7, p_d, R_d)
    assert_out_of_reach(model, "link_eef", res, p_d)
    assert "crept" in res.message


def test_random_far_targets_are_out_of_reach(arm):
    """Random configurations, the pose 2 m beyond each: all out_of_reach (on main, 5-25 % of them said
    max_iterations on these arms)."""
    model, frame = arm
    ik = PositionIK(model, frame)
    rng = np.random.default_rng(45)
    for _ in range(10):
        q0 = model.random_configuration(rng)
        p_d, R_d = far_target(model, frame, q0)
        assert_out_of_reach(model, frame, ik.solve(q0, p_d, R_d), p_d)


def test_reachable_targets_still_converge(arm):
    model, frame = arm
    ik = PositionIK(model, frame)
    rng = np.random.default_rng(46)
    for _ in range(10):
        R_d, p_d = pin_fk(model, model.random_configuration(rng, margin=0.1), frame)
        res = ik.solve(model.random_configuration(rng), p_d, R_d)
        assert res.status == "converged", res.message
        R, p = pin_fk(model, res.q, frame)
        assert np.linalg.norm(p - p_d) < 1e-8 and np.linalg.norm(pin.log3(R_d @ R.T)) < 1e-8


def test_a_start_still_getting_closer_is_max_iterations(arm):
    """Runs cut short while they still make headway (4 iterations from random starts toward reachable
    targets) are max_iterations, not out_of_reach: the creep rule judges the rate, not the outcome."""
    model, frame = arm
    ik = PositionIK(model, frame, max_iterations=4, restarts=2)
    rng = np.random.default_rng(47)
    for _ in range(5):
        R_d, p_d = pin_fk(model, model.random_configuration(rng, margin=0.1), frame)
        q0 = model.random_configuration(rng)
        res = ik.solve(q0, p_d, R_d)
        assert res.status == "max_iterations", res.message
        assert res.iterations == 12 and "still getting closer" in res.message
        # it was getting closer indeed: the pose error at the q returned is below the seed's
        assert pose_error(model, frame, res.q, p_d, R_d) < pose_error(model, frame, q0, p_d, R_d)


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan")])
def test_creep_rate_is_validated(bad):
    with pytest.raises(ValueError, match="creep_rate"):
        PositionIK(Model.from_robot("ur10"), "tool0", creep_rate=bad)


def test_the_stated_rate_is_the_mean_decrease_of_the_error_over_the_last_quarter():
    """The issue's xarm7 start alone (no restart): its run is still creeping at 100 iterations.  The
    rate, measured from outside: the error of the best iterate after 75 and after 100 iterations
    (the iterations do not depend on max_iterations), rate = 1 - (|e|_100 / |e|_75)^(1/25).  With
    creep_rate a little above it the target is out_of_reach, a little below it max_iterations."""
    model = Model.from_urdf_file(robots_dir() / "xarm_description/urdf/xarm7.urdf")
    p_d, R_d = far_target(model, "link_eef", Q0_XARM7)
    e = {}
    for n in (75, 100):
        res = PositionIK(model, "link_eef", restarts=0, max_iterations=n, creep_rate=0.0).solve(Q0_XARM7, p_d, R_d)
        assert res.status == "max_iterations" and res.iterations == n, res.message
        e[n] = pose_error(model, "link_eef", res.q, p_d, R_d)
    rate = 1.0 - (e[100] / e[75]) ** (1.0 / 25)
    assert 0.0 < rate < 0.02                       # creeping (1.3 m away), below the default
    for creep, status in ((1.2 * rate, "out_of_reach"), (0.8 * rate, "max_iterations")):
        res = PositionIK(model, "link_eef", restarts=0, creep_rate=creep).solve(Q0_XARM7, p_d, R_d)
        assert res.status == status, (creep, res.message)
