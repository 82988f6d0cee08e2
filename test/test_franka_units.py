"""The ROS-free parts of the Franka bridge (robot_dynamics/hardware/franka.py, franka_commands.py), without a robot:
URDF preparation, the model cross-check, the gravity guard and the command gate.

Oracles: Pinocchio called directly on the URDF franky-sim serves (the robot's own model is built the
same way: the URDF + the end effector's inertia appended to the flange joint), analytic figures and
the parameters the test sets.
"""
import numpy as np
import pytest

pin = pytest.importorskip("pinocchio")

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

_spec = importlib.util.find_spec("franky_sim")
if _spec is None:
    pytest.skip("franky-sim not installed", allow_module_level=True)

from robot_dynamics.dynamics import Model, PinocchioBackend  # noqa: E402
from robot_dynamics.hardware import franka as fh  # noqa: E402
from robot_dynamics.hardware import franka_commands as fc  # noqa: E402

FR3_URDF = (Path(_spec.origin).parent / "assets" / "fr3_clean.urdf").read_text()   # what franky-sim serves
EE = (0.73, np.array([-0.01, 0.0, 0.03]), np.diag([0.001, 0.0025, 0.0017]))      # franky-sim's hand
Q0 = np.array([0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785])


class PinRobotModel:
    """What franky's robot.model answers, from Pinocchio on the URDF with the load appended to the
    flange (independent of robot_dynamics.dynamics)."""

    def __init__(self, urdf):
        self.m = pin.buildModelFromXML(urdf)
        self.fid = self.m.getFrameId("link8")
        self.I0 = [self.m.inertias[i].copy() for i in range(self.m.njoints)]

    def _load(self, m_total, F_x, I_total=None):
        f = self.m.frames[self.fid]
        j = f.parentJoint
        self.m.inertias[j] = self.I0[j] + f.placement.act(
            pin.Inertia(m_total, np.asarray(F_x, float), np.zeros((3, 3)) if I_total is None else np.asarray(I_total)))
        return self.m.createData()

    def gravity(self, q, m_total, F_x, g):
        return pin.computeGeneralizedGravity(self.m, self._load(m_total, F_x), np.asarray(q)).copy()

    def mass(self, q, I_total, m_total, F_x):
        M = pin.crba(self.m, self._load(m_total, F_x, I_total), np.asarray(q))
        return np.triu(M) + np.triu(M, 1).T

    def coriolis(self, q, v, I_total, m_total, F_x):
        d = self._load(m_total, F_x, I_total)
        return pin.computeCoriolisMatrix(self.m, d, np.asarray(q), np.asarray(v)) @ np.asarray(v)


def our_backend(urdf, joints=fh.FR3_JOINTS, ee=EE):
    text, flange = fh.prepare_urdf(urdf, joints, ee=ee, tcp=np.eye(4), prefix="fr3_")
    model = Model.from_urdf_string(text)
    return model, PinocchioBackend(model), text


def test_prepare_urdf_renames_joints_adds_end_effector_and_tcp():
    T = np.eye(4)
    T[:3, :3] = pin.rpy.rpyToMatrix(0.0, 0.0, -np.pi / 4)
    T[:3, 3] = [0.0, 0.0, 0.1034]
    text, flange = fh.prepare_urdf(FR3_URDF, fh.FR3_JOINTS, ee=EE, tcp=T, prefix="fr3_")
    assert flange == "link8"
    model = Model.from_urdf_string(text)
    assert model.joint_names == list(fh.FR3_JOINTS)
    base = pin.buildModelFromXML(FR3_URDF)
    total0 = sum(base.inertias[i].mass for i in range(base.njoints))
    pm = model.pin_model
    assert sum(pm.inertias[i].mass for i in range(pm.njoints)) == pytest.approx(total0 + EE[0], abs=1e-9)
    # TCP = flange * T (Pinocchio FK on the original URDF as oracle)
    d = base.createData()
    pin.framesForwardKinematics(base, d, Q0)
    want = d.oMf[base.getFrameId("link8")].homogeneous @ T
    R, p = PinocchioBackend(model).frame_placement(Q0, "fr3_tcp")
    assert np.allclose(R, want[:3, :3], atol=1e-8) and np.allclose(p, want[:3, 3], atol=1e-8)
    with pytest.raises(ValueError, match="7 movable"):
        fh.prepare_urdf(FR3_URDF, fh.FR3_JOINTS[:6])


def test_cross_check_accepts_the_right_model_and_refuses_wrong_ones():
    robot = PinRobotModel(FR3_URDF)
    model, dyn, text = our_backend(FR3_URDF)
    ok = fh.cross_check(dyn, robot, Q0, EE)
    assert ok.ok and ok.gravity < 1e-8 and ok.mass < 1e-8 and ok.coriolis < 1e-8 and ok.n_configs == 7
    # link4 20 % heavier: gravity differs by more than the tolerance
    _, dyn_w, _ = our_backend(fh.scale_link_mass(FR3_URDF, "link4", 1.2))
    bad = fh.cross_check(dyn_w, robot, Q0, EE)
    assert not bad.ok and bad.gravity > fh.CrossCheckTolerance().gravity
    assert "REFUSED" in bad.message()
    # a forgotten end effector (the robot knows a 0.73 kg hand; our model has none)
    _, dyn_n, _ = our_backend(FR3_URDF, ee=None)
    assert not fh.cross_check(dyn_n, robot, Q0, EE).ok


def test_payload_checked_as_libfranka_takes_it():
    """fh.payload: (mass, com, 9 inertia values column-major) for setLoad; 3 moments become the
    diagonal; what no body has is refused with the parameter named."""
    m, c, i = fh.payload(1.5, [0.0, 0.1, 0.05], [1e-3, 2e-3, 3e-3])
    assert m == 1.5 and c.tolist() == [0.0, 0.1, 0.05]
    assert i.tolist() == [1e-3, 0, 0, 0, 2e-3, 0, 0, 0, 3e-3]
    full = np.array([[2e-3, 1e-4, 0.0], [1e-4, 3e-3, 0.0], [0.0, 0.0, 1e-3]])
    assert np.array_equal(fh.payload(1.0, [0, 0, 0], full.reshape(-1, order="F"))[2], full.reshape(-1, order="F"))
    assert fh.payload(0.0, [0, 0, 0], [0, 0, 0])[0] == 0.0                     # no payload
    for args, word in [((-0.1, [0, 0, 0], [0, 0, 0]), "load_mass"),
                       ((float("nan"), [0, 0, 0], [0, 0, 0]), "load_mass"),
                       ((1.0, [0, 0], [0, 0, 0]), "load_com"),
                       ((1.0, [0, float("inf"), 0], [0, 0, 0]), "load_com"),
                       ((1.0, [0, 0, 0], [1e-3] * 4), "load_inertia"),
                       ((1.0, [0, 0, 0], [1e-3, 1e-4, 0, 0, 1e-3, 0, 0, 0, 1e-3]), "symmetric"),
                       ((1.0, [0, 0, 0], [1e-3, -1e-3, 1e-3]), "positive")]:
        with pytest.raises(ValueError, match=word):
            fh.payload(*args)


def test_gravity_guard():
    g = np.array([0.0, -29.8, 0.0, 22.3, 0.8, 2.2, 0.0])
    still = np.zeros(7)
    guard = fc.GravityGuard(persist=0.02)
    # the command is g(q) (double compensation): trips once it persisted 20 ms
    assert not guard.check(g, g, still, 0.0)
    assert not guard.check(g, g, still, 0.01)
    assert guard.check(g, g, still, 0.021)
    # half of g plus a little: still mostly g
    guard.reset()
    assert not guard.check(0.6 * g + 0.5, g, still, 0.0) and guard.check(0.6 * g + 0.5, g, still, 0.03)
    # impedance torques (not along g), zero, -g, a fifth of g: never
    rng = np.random.default_rng(0)
    for tau in [rng.normal(0, 5, 7), np.zeros(7), -g, 0.2 * g]:
        guard.reset()
        assert not any(guard.check(tau, g, still, t) for t in np.arange(0, 0.2, 0.001))
    # an arm thrown by double compensation is fast: the default guard trips at any speed (20 ms); one
    # built with a speed limit ignores the commands while a joint is faster
    fast = np.full(7, 3.0)
    guard.reset()
    assert not guard.check(g, g, fast, 0.0) and guard.check(g, g, fast, 0.021)
    limited = fc.GravityGuard(persist=0.02, max_speed=0.5)
    assert not any(limited.check(g, g, fast, t) for t in np.arange(0, 0.2, 0.001))


def test_command_gate_start_watchdog_stop_and_resume_without_jump():
    gate = fc.CommandGate(command_timeout=0.1, ramp_time=0.5, stop_damping=np.full(7, 10.0))
    cmd = np.array([5.0, -3.0, 2.0, 1.0, 0.5, -0.5, 0.2])
    dq = np.array([0.1, 0, 0, 0, 0, 0, -0.2])
    # waiting: damping, -D dq
    assert np.allclose(gate.on_cycle(dq, 0.0), -10.0 * dq)
    # not permitted (checks pending): commands are not applied
    gate.permitted = False
    assert gate.on_command(cmd, 0.0) is None and gate.state == fc.WAITING
    gate.permitted = True
    # first command blended in from the applied torque over ramp_time
    gate.applied = np.zeros(7)
    out = gate.on_command(cmd, 1.0)
    assert np.allclose(out, 0.0)
    assert np.allclose(gate.on_command(cmd, 1.25), 0.5 * cmd)
    assert np.allclose(gate.on_command(cmd, 1.6), cmd)
    q_fresh, q_trip = np.full(7, 0.1), np.arange(7.0)
    assert gate.on_cycle(dq, 1.65, q_fresh) is None             # fresh: the command stands
    assert gate.stop_q is None
    # no command for more than command_timeout: stopped, damping; where the arm was, kept
    out = gate.on_cycle(dq, 1.6 + 0.11, q_trip)
    assert gate.state == fc.STOPPED and gate.n_watchdog == 1 and np.allclose(out, -10.0 * dq)
    assert np.array_equal(gate.stop_q, q_trip) and np.array_equal(gate.stop_dq, dq)
    gate.on_cycle(2 * dq, 1.75, q_fresh)                        # stopped: the trip's record stays
    assert np.array_equal(gate.stop_q, q_trip) and np.array_equal(gate.stop_dq, dq)
    assert gate.on_command(cmd, 1.8) is None                   # no automatic resume
    assert gate.state == fc.STOPPED
    # explicit resume: from the damping torque being applied, blended, no jump
    assert gate.resume(2.0)
    stop_tau = gate.applied.copy()
    first = gate.on_command(cmd, 2.0)
    assert np.allclose(first, stop_tau)
    steps = [gate.on_command(cmd, 2.0 + k * 0.001) for k in range(1, 600)]
    jumps = np.max(np.abs(np.diff(np.vstack([first] + steps), axis=0)))
    assert jumps <= np.max(np.abs(cmd - stop_tau)) * 0.001 / 0.5 + 1e-12
    assert np.allclose(steps[-1], cmd)
    # bad input: rejected, counted, nothing applied
    assert gate.on_command([np.nan] * 7, 3.0) is None and gate.on_command([1.0] * 6, 3.0) is None
    assert gate.n_rejected == 2


def test_in_process_loop_log_takes_every_severity():
    """The bridge hands the ControlLoop one log callable; rclpy refuses a call site whose severity
    changes between calls, so info then warn then error through it must all be logged (no raise)."""
    rclpy = pytest.importorskip("rclpy")
    from robot_dynamics.nodes.franka_bridge import FrankaBridge

    class Stub:                                  # a node returns the same logger object every call
        logger = rclpy.logging.get_logger("franka_bridge_log_test")

        def get_logger(self):
            return self.logger

    stub = Stub()
    for level in ("info", "warn", "error", "info"):
        FrankaBridge._loop_log(stub, level, f"a {level} line")


def test_trigger_handler_answers_an_exception_and_never_raises():
    """The Trigger handler both nodes use: the action's answer under the lock; an exception in it
    answered with its type and text (success false), handed to on_error, not raised."""
    import threading
    pytest.importorskip("rclpy")
    from std_srvs.srv import Trigger
    from robot_dynamics.nodes.common import trigger_handler
    lock, seen = threading.Lock(), []

    def held():
        assert lock.locked()
        return True, "done"
    r = trigger_handler(lock, held)(Trigger.Request(), Trigger.Response())
    assert r.success and r.message == "done"

    def broken():
        raise RuntimeError("no arm")
    r = trigger_handler(lock, broken, seen.append)(Trigger.Request(), Trigger.Response())
    assert not r.success and r.message == "RuntimeError: no arm" and isinstance(seen[0], RuntimeError)
    assert not lock.locked()
