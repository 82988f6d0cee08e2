"""Live gains the loop can hold (issue 42): a gain changed live whose natural frequency is above
GAIN_OMEGA_DT / period (0.5 / 1 ms) on the arm's inertia at the current pose, or a damping ratio below
0.1, is refused with the bound in the reply, and the old gains stay.  The bounds are computed here from
Pinocchio on the URDF (CRBA's M_jj; the task-space inertia (J M^-1 J^T)^-1 of the frame), not read back."""
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.control import ControlLoop
from robot_dynamics.dynamics import Model, robots

ARM = [f"panda_joint{i}" for i in range(1, 8)]
Q = np.array([0.1, -0.6, 0.2, -2.2, 0.1, 1.7, 0.6])
W2 = (0.5 / 0.001) ** 2
TCP = "panda_hand_tcp"


def pin_panda():
    m = pin.buildModelFromUrdf(str(robots.robot_urdf_path("panda")))
    lock = [m.getJointId(n) for n in m.names[1:] if n not in ARM]
    m = pin.buildReducedModel(m, lock, pin.neutral(m))
    return m, m.createData()


def loop_at(law, **p):
    loop = ControlLoop.from_params(Model.from_robot("panda"), {"controller": law, **p}, log=lambda lv, tx: None)
    loop.update_state(Q, np.zeros(7), 0.0)
    return loop


def test_joint_impedance_stiffness_is_bounded_by_the_joint_inertia():
    m, d = pin_panda()
    M = pin.crba(m, d, Q)
    bound = W2 * np.diag(M)
    loop = loop_at("joint_impedance")
    k = (0.99 * bound).tolist()
    assert loop.set_params({"joint_impedance.k_gains": k}) == (True, "")
    k_bad = list(k)
    k_bad[6] = 1.01 * bound[6]
    ok, why = loop.set_params({"joint_impedance.k_gains": k_bad})
    assert not ok and "panda_joint7" in why and f"{bound[6]:.4g}" in why, why
    np.testing.assert_allclose(loop.law.k, k)                     # the old gains stay
    ok, why = loop.set_params({"joint_impedance.damping_ratio": 0.0})
    assert not ok and "damping_ratio" in why
    assert loop.law.params["damping_ratio"] == 1.0


@pytest.mark.parametrize("what,rows", [("pos", slice(0, 3)), ("rot", slice(3, 6))])
def test_cartesian_stiffness_is_bounded_by_the_task_space_inertia(what, rows):
    m, d = pin_panda()
    pin.computeJointJacobians(m, d, Q)
    pin.framesForwardKinematics(m, d, Q)
    J = pin.getFrameJacobian(m, d, m.getFrameId(TCP), pin.LOCAL_WORLD_ALIGNED)[rows]
    lam = 1.0 / np.linalg.eigvalsh(J @ np.linalg.solve(pin.crba(m, d, Q), J.T)).max()
    loop = loop_at("cartesian_impedance", **{"cartesian_impedance.frame": TCP})
    assert loop.set_params({f"cartesian_impedance.task.k_{what}_x": 0.99 * W2 * lam})[0]
    ok, why = loop.set_params({f"cartesian_impedance.task.k_{what}_y": 1.01 * W2 * lam})
    assert not ok and f"{W2 * lam:.4g}" in why, why
    assert loop.law.params[f"task.k_{what}_y"] != 1.01 * W2 * lam
    ok, why = loop.set_params({"cartesian_impedance.task.damping_ratio": 0.0})
    assert not ok


def test_computed_torque_gains_are_bounded_by_the_sampling():
    loop = loop_at("computed_torque")
    assert loop.set_params({"computed_torque.kp": [0.99 * W2]})[0]
    ok, why = loop.set_params({"computed_torque.kp": [1.01 * W2]})
    assert not ok and "kp" in why
    ok, why = loop.set_params({"computed_torque.zeta": 0.05})
    assert not ok and "zeta" in why
