"""Parameters a user can trust (issue 42): a params file's unknown keys are reported at configure with the
nearest known name; a parameter read at configure is refused while configured (the reply says why, the
value stays); a `joints` list with names the robot does not have is blamed on the joints.  The controller
node in process (the robot: example-robot-data's Panda), its log read from /rosout."""
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rcl_interfaces.msg import Log  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from test_node_models import Rig as NodeRig  # noqa: E402

TIMEOUT = 30.0
ARM = [f"panda_joint{i}" for i in range(1, 8)]


class Rig(NodeRig):
    """test_node_models' rig (the controller node in process, an executor thread) that also reads /rosout."""

    def __init__(self):
        super().__init__()
        self.logs = []
        self.h.create_subscription(Log, "/rosout", self._on_log, 1000)

    def _on_log(self, msg):
        with self.lock:
            self.logs.append((msg.name, msg.level, msg.msg))

    def controller(self, **params):
        return super().controller(**{"robot": "panda", **params})

    def log_lines(self, node, pred):
        t_end = time.monotonic() + TIMEOUT
        while time.monotonic() < t_end:
            with self.lock:
                lines = [(lv, m) for n, lv, m in self.logs if n.endswith(node.get_name()) and pred(lv, m)]
            if lines:
                return lines
            time.sleep(0.05)
        raise AssertionError(f"no such line from {node.get_name()}")


@pytest.fixture(scope="module")
def rig():
    r = Rig()
    yield r
    r.close()


def test_unknown_keys_are_reported_at_configure_with_the_nearest_name(rig):
    node = rig.controller(controller="joint_impedance", watchdog_timout=0.2, **{"joint_impedance.k_gain": [50.0]})
    node.trigger_configure()
    assert node.lifecycle_state == "inactive"
    warn = Log.WARN[0] if isinstance(Log.WARN, bytes) else Log.WARN
    lines = rig.log_lines(node, lambda lv, m: "watchdog_timout" in m)
    assert any(lv == warn and "did you mean watchdog_timeout" in m for lv, m in lines), lines
    lines = rig.log_lines(node, lambda lv, m: "joint_impedance.k_gain'" in m)
    assert any("joint_impedance.k_gains" in m for lv, m in lines), lines


def test_a_parameter_read_at_configure_is_refused_while_configured_and_taken_after_cleanup(rig):
    node = rig.controller(controller="joint_impedance")
    node.trigger_configure()
    node.trigger_activate()
    assert node.lifecycle_state == "active"
    res = node.set_parameters([Parameter("controller", value="cartesian_impedance")])[0]
    assert not res.successful and "read at configure" in res.reason and "cleanup" in res.reason
    assert node.get_parameter("controller").value == "joint_impedance"
    assert node.c.loop.law_name == "joint_impedance"
    # a live one is still taken
    assert node.set_parameters([Parameter("torque_rate_limit", value=800.0)])[0].successful
    # setting the value it already has is not a change
    assert node.set_parameters([Parameter("controller", value="joint_impedance")])[0].successful
    with rig.spinner.paused():          # the cleanup destroys the action server the executor waits on
        node.trigger_deactivate()
        node.trigger_cleanup()
    assert node.set_parameters([Parameter("controller", value="gravity_compensation")])[0].successful
    node.trigger_configure()
    assert node.c.loop.law_name == "gravity_compensation"


def test_joints_the_robot_does_not_have_are_named_in_the_error(rig):
    node = rig.controller(controller="joint_impedance", joints=["a", "b"])
    node.trigger_configure()
    assert node.lifecycle_state == "unconfigured"
    err = node.config_error
    assert "joints ['a', 'b']" in err and "unknown joint 'a'" in err, err
    assert "k_gains" not in err
    for j in ARM[:2]:
        assert j in err                                  # the robot's joints are listed
