"""The Cartesian law's typed state (issue 42): ~/current_pose, ~/desired_pose (geometry_msgs/PoseStamped)
and ~/pose_error (TwistStamped) in the base frame, beside ~/state.  The controller node in process on
the Panda, fed a fixed joint state; the oracle is Pinocchio's forward kinematics of the URDF at that q
and the target the test sends."""
import threading
import time
import uuid

import numpy as np
import pinocchio as pin
import pytest

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import PoseStamped, TwistStamped  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from robot_dynamics.dynamics import robots  # noqa: E402
from robot_dynamics.nodes.controller import TorqueControllerNode  # noqa: E402
from robustness_harness import SpinThread  # noqa: E402

TIMEOUT = 30.0
ARM = [f"panda_joint{i}" for i in range(1, 8)]
Q0 = np.array([0.1, -0.6, 0.2, -2.2, 0.1, 1.7, 0.6])
TCP = "panda_hand_tcp"


def fk(q):
    m = pin.buildModelFromUrdf(str(robots.robot_urdf_path("panda")))
    d = m.createData()
    qf = pin.neutral(m)
    for name, x in zip(ARM, q):
        qf[m.joints[m.getJointId(name)].idx_q] = x
    pin.framesForwardKinematics(m, d, qf)
    M = d.oMf[m.getFrameId(TCP)]
    return M.rotation.copy(), M.translation.copy()


def test_the_cartesian_state_is_on_pose_and_twist_messages_in_the_base_frame():
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    name = "ctl_" + uuid.uuid4().hex[:8]
    node = TorqueControllerNode(node_name=name, context=ctx, parameter_overrides=[Parameter(k, value=v) for k, v in {
        "autostart": False, "robot": "panda", "controller": "cartesian_impedance", "joints": ARM,
        "cartesian_impedance.frame": TCP, "joint_states_topic": f"/{name}/js", "command_topic": f"/{name}/cmd",
        "ramp_time": 0.0}.items()])
    h = rclpy.create_node("t" + uuid.uuid4().hex[:8], context=ctx)
    lock = threading.Lock()
    got = {}

    def keep(key):
        def cb(msg):
            with lock:
                got[key] = msg
        return cb
    h.create_subscription(PoseStamped, f"/{name}/current_pose", keep("current"), 10)
    h.create_subscription(PoseStamped, f"/{name}/desired_pose", keep("desired"), 10)
    h.create_subscription(TwistStamped, f"/{name}/pose_error", keep("error"), 10)
    js_pub = h.create_publisher(JointState, f"/{name}/js", 10)
    target_pub = h.create_publisher(PoseStamped, f"/{name}/target_pose", 10)
    ex.add_node(node)
    ex.add_node(h)
    spin = SpinThread(ex)
    stop = threading.Event()

    def feed():                                # the arm standing still at Q0
        while not stop.is_set():
            js_pub.publish(JointState(name=ARM, position=Q0.tolist(), velocity=[0.0] * 7, effort=[0.0] * 7))
            time.sleep(0.002)
    feeder = threading.Thread(target=feed, daemon=True)
    try:
        node.trigger_configure()
        node.trigger_activate()
        assert node.lifecycle_state == "active"
        feeder.start()
        R0, p0 = fk(Q0)

        def wait(pred, what):
            t_end = time.monotonic() + TIMEOUT
            while time.monotonic() < t_end:
                with lock:
                    g = dict(got)
                if pred(g):
                    return g
                time.sleep(0.02)
            raise AssertionError(f"{what}: {got}")

        def pose(msg):
            pp, oo = msg.pose.position, msg.pose.orientation
            return np.array([pp.x, pp.y, pp.z]), pin.Quaternion(oo.w, oo.x, oo.y, oo.z).toRotationMatrix()

        g = wait(lambda g: {"current", "desired", "error"} <= set(g), "the three topics")
        for key in ("current", "desired", "error"):
            assert g[key].header.frame_id == "panda_link0"
        p, R = pose(g["current"])
        np.testing.assert_allclose(p, p0, atol=1e-9)
        np.testing.assert_allclose(R, R0, atol=1e-9)
        # a target 5 cm along x and turned 0.1 rad about z: approached, then the error is exactly it
        Rt = pin.exp3(np.array([0.0, 0.0, 0.1])) @ R0
        pt = p0 + np.array([0.05, 0.0, 0.0])
        msg = PoseStamped()
        msg.header.frame_id = "panda_link0"
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = pt.tolist()
        qt = pin.Quaternion(Rt)
        msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z, msg.pose.orientation.w = \
            qt.x, qt.y, qt.z, qt.w
        wait(lambda g: target_pub.get_subscription_count() > 0, "the node's target_pose subscription matched")
        target_pub.publish(msg)
        g = wait(lambda g: np.allclose(pose(g["desired"])[0], pt, atol=1e-7) and
                 np.allclose(pose(g["desired"])[1], Rt, atol=1e-7), "desired pose at the target")
        time.sleep(0.05)
        with lock:
            err, cur = got["error"], got["current"]
        np.testing.assert_allclose([err.twist.linear.x, err.twist.linear.y, err.twist.linear.z], pt - p0, atol=1e-6)
        np.testing.assert_allclose([err.twist.angular.x, err.twist.angular.y, err.twist.angular.z],
                                   pin.log3(Rt @ R0.T), atol=1e-6)
        p, R = pose(cur)
        np.testing.assert_allclose(p, p0, atol=1e-9)            # the arm did not move: still FK(Q0)
        np.testing.assert_allclose(R, R0, atol=1e-9)
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(2.0)
        ex.remove_node(node)
        ex.remove_node(h)
        spin.stop()
        node.destroy_node()
        h.destroy_node()
        rclpy.try_shutdown(context=ctx)
