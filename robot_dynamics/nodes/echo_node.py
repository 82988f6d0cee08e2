"""The latency floor: receive a JointState, publish a Float64MultiArray of the same length, no math.

Same plumbing as the controller node (topics, QoS, executor choices) with the control step removed,
so `bench/latency.py` can report the controller's latency as a ratio to this one.

    python -m robot_dynamics.nodes.echo_node --ros-args -p executor:=single \
        -p qos_reliability:=reliable -p qos_depth:=10

The output's `data` is a copy of the input's `position` (the driver recovers the sequence number from
it); one output message is allocated once and reused (publish serialises it at once).

Parameters (read at start-up):
  input_topic      /joint_states
  output_topic     /effort_controller/commands
  executor         single | multi | events   (rclpy SingleThreadedExecutor, MultiThreadedExecutor,
                   rclpy.experimental.EventsExecutor)
  mode             executor: the subscription callback publishes (rclpy's own minimal echo);
                   control_path: a thread waits on the subscription itself and publishes
                   (nodes/control_path.py, the path the package's nodes use at the robot's rate)
  qos_reliability  reliable | best_effort    (the subscription; also the publisher unless overridden)
  qos_depth        history depth (KEEP_LAST), >= 1
  output_qos_reliability, output_qos_depth   the publisher's, if set ('' / 0: as the subscription);
                   e.g. best_effort/1 in and reliable/1 out, as the controller node does

`make_executor` and `make_qos` live in robot_dynamics.nodes.common (shared with the controller node,
which offers the same choices); they are re-exported here.
"""
import sys

from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from .control_path import ControlPath, TakeSubscription
from .common import EXECUTORS, RELIABILITIES, make_executor, make_qos  # noqa: F401 (re-exported)
from .runner import run


# Every parameter the node declares: name -> (default, description), all read at start-up (the
# manual's table is generated from it: robot_dynamics/doc_tables.py).
PARAMETERS = {
    "input_topic": ("/joint_states", "sensor_msgs/JointState input"),
    "output_topic": ("/effort_controller/commands", "std_msgs/Float64MultiArray output: the positions echoed"),
    "executor": ("single", "rclpy executor of main(): single, events or multi"),
    "qos_reliability": ("reliable", "QoS reliability of the input: reliable or best_effort"),
    "qos_depth": (10, "QoS history depth (KEEP_LAST) of the input"),
    "output_qos_reliability": ("", "QoS reliability of the output; empty: qos_reliability"),
    "output_qos_depth": (0, "QoS history depth of the output; 0: qos_depth"),
    "mode": ("executor", "executor (a subscription callback publishes) or control_path (a thread waits on "
                         "the subscription itself, nodes/control_path.py)"),
}


class EchoNode(Node):
    def __init__(self, node_name="echo_node", **kwargs):
        super().__init__(node_name, **kwargs)
        for name, (default, _desc) in PARAMETERS.items():
            self.declare_parameter(name, default)
        gp = self.get_parameter
        self.executor_name = gp("executor").value
        if self.executor_name not in EXECUTORS:
            raise ValueError(f"executor: expected one of {EXECUTORS}, got {self.executor_name!r}")
        qos = make_qos(gp("qos_reliability").value, gp("qos_depth").value)
        out_rel = gp("output_qos_reliability").value or gp("qos_reliability").value
        out_depth = gp("output_qos_depth").value or gp("qos_depth").value
        out_qos = make_qos(out_rel, out_depth)
        self._out = Float64MultiArray()
        self.count = 0
        self._pub = self.create_publisher(Float64MultiArray, gp("output_topic").value, out_qos)
        self.mode = gp("mode").value
        self.path = None
        if self.mode == "executor":
            self.create_subscription(JointState, gp("input_topic").value, self._on_joint_state, qos)
        elif self.mode == "control_path":
            sub = TakeSubscription(self, JointState, gp("input_topic").value, qos)
            self.path = ControlPath(self, sub, lambda msg, now, last: last and self._on_joint_state(msg), name="echo")
            self.path.start()
        else:
            raise ValueError(f"mode: expected executor or control_path, got {self.mode!r}")
        self.get_logger().info(
            f"echo: {gp('input_topic').value} -> {gp('output_topic').value}, mode {self.mode}, executor "
            f"{self.executor_name}, qos in {gp('qos_reliability').value}/{gp('qos_depth').value} out "
            f"{out_rel}/{out_depth}")

    def destroy_node(self):
        if self.path is not None:
            self.path.destroy()
        return super().destroy_node()

    def _on_joint_state(self, msg):
        self._out.data = msg.position          # array('d') -> array('d'): a copy, no conversion
        self._pub.publish(self._out)
        self.count += 1


def main(args=None):
    """Spin until SIGINT / SIGTERM (repeated ones included), then exit 0 (nodes/runner.py)."""
    def report(node):
        node.get_logger().info(f"echoed {node.count} messages")

    return run(EchoNode, args=args, executor_factory=lambda node: make_executor(node.executor_name),
               on_exit=report, exit_process=True)


if __name__ == "__main__":
    sys.exit(main())
