"""No silent stand-in model (issue 42): without a robot description (parameter or topic) and without
a fallback named by the user, configure is refused with an ERROR that says how to pass one, and the
node keeps running, unconfigured; with the `robot` fallback named (what real_robot.launch.py's
fallback_robot sets; the sim and demo configs name it), the node configures on example-robot-data's
model and says so at WARN.  Real rclpy nodes in this process (test_controller_node.py's Rig); the
description topic is one of this test's own, so that no other node's /robot_description arrives."""
import pytest

rclpy = pytest.importorskip("rclpy")

from lifecycle_msgs.msg import Transition  # noqa: E402

from test_controller_node import Rig  # noqa: E402


pytestmark = pytest.mark.slow

class Recorder:
    """The node's logger, with what it said at WARN / ERROR kept."""

    def __init__(self, log):
        self.log, self.lines = log, []

    def warning(self, text, *a, **k):
        self.lines.append(("warn", text))
        return self.log.warning(text, *a, **k)

    warn = warning

    def error(self, text, *a, **k):
        self.lines.append(("error", text))
        return self.log.error(text, *a, **k)

    def __getattr__(self, name):
        return getattr(self.log, name)


@pytest.fixture
def rig():
    r = Rig()
    try:
        yield r
    finally:
        r.close()


def test_no_description_refuses_configure_and_a_named_fallback_warns(rig):
    topic = f"/{rig.ns}/robot_description"
    bare = rig.controller("bare", robot_description="", robot="", autostart=False, robot_description_topic=topic)
    bare._log = Recorder(bare._log)
    assert not rig.change_state(bare, Transition.TRANSITION_CONFIGURE)
    err = bare.config_error
    assert "no robot description" in err and topic in err, err
    assert "robot_description:=" in err and "urdf_path" in err and "fallback_robot" in err, err
    assert any(level == "error" and "no robot description" in text for level, text in bare._log.lines)
    assert rig.lifecycle_state(bare) == "unconfigured"           # still running, answering services

    named = rig.controller("named", robot_description="", robot="panda", autostart=False,
                           robot_description_timeout=0.0, robot_description_topic=topic)
    named._log = Recorder(named._log)
    assert rig.change_state(named, Transition.TRANSITION_CONFIGURE), named.config_error
    warns = [text for level, text in named._log.lines if level == "warn"]
    assert any("example-robot-data's 'panda'" in w and "not your driver's URDF" in w for w in warns), warns
    assert "example-robot-data" in named.c.source
