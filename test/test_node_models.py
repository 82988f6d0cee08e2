"""Models in the nodes: the controller node's `strict`, `min_joint_inertia`, `xacro_args` and a .xacro
`urdf_path` (in-process node, a URDF / xacro written here), model warnings on /diagnostics; the sim
node's `payload` group (a child process over DDS), judged against Pinocchio's g(q) + J^T F."""
import threading
import time
import uuid

import numpy as np
import pinocchio as pin
import pytest

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from robot_dynamics.nodes.controller import TorqueControllerNode  # noqa: E402
from robustness_harness import SpinThread  # noqa: E402

pytestmark = pytest.mark.slow

TIMEOUT = 30.0

# two revolute joints; link2's principal moments break the triangle inequality (0.1 + 0.1 < 1.0):
# no rigid body has them.  {m2} is link2's mass.
URDF = """<robot name="two_link">
  <link name="base"/>
  <link name="link1"><inertial><origin xyz="0 0 0.2"/><mass value="2.0"/>
    <inertia ixx="0.02" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.01"/></inertial></link>
  <link name="link2"><inertial><origin xyz="0.1 0 0.2"/><mass value="{m2}"/>
    <inertia ixx="{i2}" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="link1"/><axis xyz="0 0 1"/>
    <limit lower="-3" upper="3" effort="100" velocity="2"/></joint>
  <joint name="j2" type="revolute"><parent link="link1"/><child link="link2"/><origin xyz="0 0 0.4"/>
    <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="100" velocity="2"/></joint>
</robot>
"""
BAD_I = 1.0              # with iyy = izz = 0.1: non-physical
GOOD_I = 0.1

XACRO = """<?xml version="1.0"?>
<robot xmlns:xacro="http://www.ros.org/wiki/xacro" name="two_link">
  <xacro:arg name="m2" default="1.0"/>
""" + URDF.split("\n", 1)[1].replace("{m2}", "$(arg m2)").replace("{i2}", str(GOOD_I))


class Rig:
    def __init__(self):
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.h = rclpy.create_node("t" + uuid.uuid4().hex[:8], context=self.ctx)
        self.ex.add_node(self.h)
        self.lock = threading.Lock()
        self.diag = {}
        self.h.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 100)
        self.nodes = []
        self.spinner = SpinThread(self.ex)

    def _on_diag(self, msg):
        with self.lock:
            for st in msg.status:
                self.diag[st.name.split(":")[0]] = ({kv.key: kv.value for kv in st.values}, st.message)

    def controller(self, **params):
        name = "ctl_" + uuid.uuid4().hex[:8]
        base = {"autostart": False, "controller": "gravity_compensation", "diagnostics_period": 0.2,
                "robot_description_timeout": 0.0,
                "joint_states_topic": f"/{name}/js", "command_topic": f"/{name}/cmd"}
        base.update(params)
        node = TorqueControllerNode(node_name=name, context=self.ctx,
                                    parameter_overrides=[Parameter(k, value=v) for k, v in base.items()])
        self.ex.add_node(node)
        self.nodes.append(node)
        return node

    def diag_of(self, node, pred):
        t_end = time.monotonic() + TIMEOUT
        while time.monotonic() < t_end:
            with self.lock:
                d = self.diag.get(node.get_name())
            if d is not None and pred(*d):
                return d
            time.sleep(0.05)
        raise AssertionError(f"/diagnostics of {node.get_name()}: {self.diag.get(node.get_name())}")

    def close(self):
        self.spinner.stop()
        for n in self.nodes:
            n.destroy_node()
        self.h.destroy_node()
        rclpy.try_shutdown(context=self.ctx)


@pytest.fixture(scope="module")
def rig():
    r = Rig()
    yield r
    r.close()


def _pin_gravity(urdf, q):
    m = pin.buildModelFromXML(urdf)
    return pin.computeGeneralizedGravity(m, m.createData(), np.asarray(q, dtype=float)).copy()


def test_non_physical_inertia_warns_and_strict_refuses(rig, tmp_path):
    path = tmp_path / "bad.urdf"
    path.write_text(URDF.format(m2=1.0, i2=BAD_I))
    node = rig.controller(urdf_path=str(path))
    node.trigger_configure()
    kv, _ = rig.diag_of(node, lambda kv, msg: "model_warnings" in kv)
    assert kv["model_warnings"] == "1", kv                       # one link broken here: link2
    assert "link2" in kv["model_warning.0"], kv
    assert node.lifecycle_state == "inactive"

    strict = rig.controller(urdf_path=str(path), strict=True)
    strict.trigger_configure()
    assert strict.lifecycle_state == "unconfigured"
    _, msg = rig.diag_of(strict, lambda kv, msg: msg.startswith("not configured"))
    assert "strict" in msg and "link2" in msg, msg

    # the same file with a physical tensor loads under strict, without warnings
    good = tmp_path / "good.urdf"
    good.write_text(URDF.format(m2=1.0, i2=GOOD_I))
    ok = rig.controller(urdf_path=str(good), strict=True)
    ok.trigger_configure()
    assert ok.lifecycle_state == "inactive"
    kv, _ = rig.diag_of(ok, lambda kv, msg: "model_warnings" in kv)
    assert kv["model_warnings"] == "0", kv


def test_xacro_urdf_path_with_args(rig, tmp_path):
    path = tmp_path / "two_link.urdf.xacro"
    path.write_text(XACRO)
    q = [0.3, 0.7]
    want = _pin_gravity(URDF.format(m2=3.5, i2=GOOD_I), q)
    assert np.max(np.abs(want - _pin_gravity(URDF.format(m2=1.0, i2=GOOD_I), q))) > 1.0   # the arg matters
    node = rig.controller(urdf_path=str(path), xacro_args=["m2:=3.5"])
    node.trigger_configure()
    assert node.lifecycle_state == "inactive", node.config_error
    got = node.c.loop.backend.gravity(np.array(q))
    np.testing.assert_allclose(got, want, atol=1e-9)

    bad = rig.controller(urdf_path=str(path), xacro_args=["m2=3.5"])       # not name:=value
    bad.trigger_configure()
    assert bad.lifecycle_state == "unconfigured" and "xacro_args" in bad.config_error, bad.config_error


# ------------------------------------------------------------------------------------------------
# the sim node with a payload
# ------------------------------------------------------------------------------------------------
PAYLOAD = {"frame": "panda_link8", "mass": 2.0, "com": [0.05, 0.0, 0.1],
           "inertia": [0.01, 0.0, 0.0, 0.01, 0.0, 0.01]}
HOLD_TOL = 2e-3          # rad over HOLD_TIME with the exact torque (as test_sim_node)
HOLD_TIME = 1.5
MOVE_MIN = 0.02          # rad: without the payload term the arm must move at least this much


def _payload_torque(model, q):
    """J^T F, F holding the payload's weight at its centre of mass, by Pinocchio, in model.joint_names order."""
    pm = pin.buildModelFromXML(model.urdf)
    names = list(pm.names)[1:]
    qp = np.array([q[model.joint_names.index(n)] for n in names])
    d = pm.createData()
    pin.computeJointJacobians(pm, d, qp)
    pin.updateFramePlacements(pm, d)
    fid = pm.getFrameId(PAYLOAD["frame"])
    J = pin.getFrameJacobian(pm, d, fid, pin.LOCAL_WORLD_ALIGNED)
    r = d.oMf[fid].rotation @ np.array(PAYLOAD["com"])
    J_point = J[:3] - pin.skew(r) @ J[3:]          # velocity of the centre of mass
    F = np.array([0.0, 0.0, 9.81 * PAYLOAD["mass"]])     # the force that holds the payload up
    tau = J_point.T @ F
    return np.array([tau[names.index(n)] for n in model.joint_names])


@pytest.mark.system
def test_sim_node_payload(ros, model, tmp_path):
    from robot_dynamics.dynamics import PinocchioBackend
    from robot_dynamics.nodes.probe import Probe
    from robot_dynamics.nodes.processes import NodeProcesses
    from robot_dynamics.nodes.sim_node import HOME
    q0 = np.array(HOME["panda"])
    g0 = PinocchioBackend(model).gravity(q0).copy()
    tau_p = _payload_torque(model, q0)
    assert np.max(np.abs(tau_p)) > 1.0
    params = {"robot": "panda", "publish_rate": 500.0, "publish_clock": False, "ft_sensor_frame": "none",
              "command_timeout": 0.0,      # this test's commands come every 20 ms from a sleeping loop
              **{f"payload.{k}": v for k, v in PAYLOAD.items()}}
    with NodeProcesses(log_dir=tmp_path) as procs:
        procs.start("robot_dynamics.nodes.sim_node", name="mujoco_sim", params=params)
        probe = Probe(joints=model.joint_names, name="payload_probe").start()
        try:
            assert probe.wait_for(lambda: probe.q is not None, TIMEOUT, check=procs.check_alive), \
                "".join(procs.log(p) for p in procs.procs)

            def hold(tau):
                """Command tau (brakes release once it settles); the largest |q - q0| over HOLD_TIME."""
                t_end = time.monotonic() + 10.0
                while time.monotonic() < t_end:        # until the sim reports it as the applied effort
                    probe.publish_command(tau)
                    time.sleep(0.05)
                    if probe.effort is not None and np.max(np.abs(probe.effort - tau)) < 1e-9:
                        break
                assert np.max(np.abs(probe.effort - tau)) < 1e-9, "the sim did not apply the command"
                worst, t_end = 0.0, time.monotonic() + HOLD_TIME
                while time.monotonic() < t_end:
                    probe.publish_command(tau)
                    q, _ = probe.snapshot()
                    worst = max(worst, float(np.max(np.abs(q - q0))))
                    time.sleep(0.02)
                return worst

            # the applied effort that holds the arm at rest is g(q) + J^T F, not g(q)
            worst = hold(g0 + tau_p)
            assert worst < HOLD_TOL, f"drifted {worst:.2e} rad under g(q) + J^T F"
        finally:
            probe.stop()
            probe.destroy_node()
    # the same start without the payload term: the arm sags (a fresh sim, brakes on until it settles)
    with NodeProcesses(log_dir=tmp_path / "b") as procs:
        procs.start("robot_dynamics.nodes.sim_node", name="mujoco_sim", params=params)
        probe = Probe(joints=model.joint_names, name="payload_probe2").start()
        try:
            assert probe.wait_for(lambda: probe.q is not None, TIMEOUT, check=procs.check_alive)
            worst = hold(g0)
            assert worst > MOVE_MIN, f"moved only {worst:.2e} rad under g(q) alone: no payload in the sim"
        finally:
            probe.stop()
            probe.destroy_node()
