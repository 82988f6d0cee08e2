"""A cell of several simulated arms (one MuJoCo world, sim_node with `arms`) and one torque
controller per arm, each in the arm's namespace, as a user would run them.

    ros2 launch robot_dynamics cell.launch.py                         # two Pandas facing each other
    ros2 launch robot_dynamics cell.launch.py arms:=4 box:=false controller:=gravity_compensation

Arguments:
  arms        number of arms (1-8): 2 -> namespaces left, right (the two-Panda cell: a table and a
              0.3 m box between them); otherwise arm1 .. armN, in facing pairs 1.2 m apart
  controller  gravity_compensation | joint_impedance | computed_torque | cartesian_impedance
  config      controller parameters file for every arm (default config/panda_<controller>.yaml, then
              config/cell_panda_controller.yaml: the same with topic names relative to the namespace)
  sim_config  sim node parameters file (default config/cell_panda_sim.yaml)
  box         true | false: the box (and table) in the world

Each arm <ns>: the sim publishes /<ns>/joint_states and /<ns>/robot_description and takes
/<ns>/effort_controller/commands; the controller /<ns>/torque_controller reads its model from
/<ns>/robot_description.  The box pose is on /cell/box_pose.  When any node exits the launch ends.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "robot_dynamics"
CONTROLLERS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")


def arm_names(n):
    """The namespaces of an n-arm cell: left, right for two; arm1 .. armN otherwise."""
    return ["left", "right"] if n == 2 else [f"arm{i + 1}" for i in range(n)]


def _nodes(context):
    share = get_package_share_directory(PACKAGE)
    try:
        n = int(LaunchConfiguration("arms").perform(context))
    except ValueError:
        n = 0
    if not 1 <= n <= 8:
        raise RuntimeError(f"arms:={LaunchConfiguration('arms').perform(context)}: expected 1 .. 8")
    controller = LaunchConfiguration("controller").perform(context)
    if controller not in CONTROLLERS:
        raise RuntimeError(f"controller:={controller}: expected one of {CONTROLLERS}")
    config = LaunchConfiguration("config").perform(context) or os.path.join(
        share, "config", f"panda_{controller}.yaml")
    relative_topics = os.path.join(share, "config", "cell_panda_controller.yaml")
    sim_config = LaunchConfiguration("sim_config").perform(context) or os.path.join(
        share, "config", "cell_panda_sim.yaml")
    box = LaunchConfiguration("box").perform(context).lower() in ("1", "true", "yes", "on")
    names = arm_names(n)
    sim = Node(package=PACKAGE, executable="sim_node", name="mujoco_sim", output="screen",
               parameters=[sim_config, {"arms": names, "box": box, "table": box}])
    ctls = [Node(package=PACKAGE, executable="controller_node", name="torque_controller", namespace=ns,
                 output="screen", parameters=[config, relative_topics]) for ns in names]
    actions = [sim, *ctls]
    for node in actions[:]:
        actions.append(RegisterEventHandler(OnProcessExit(
            target_action=node,
            on_exit=[EmitEvent(event=Shutdown(reason="a node of the cell (sim_node / controller_node) exited"))])))
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("arms", default_value="2", description="number of arms (1-8)"),
        DeclareLaunchArgument("controller", default_value="joint_impedance", choices=list(CONTROLLERS),
                              description="control law of every arm's torque controller"),
        DeclareLaunchArgument("config", default_value="",
                              description="controller parameters file (default config/panda_<controller>.yaml)"),
        DeclareLaunchArgument("sim_config", default_value="",
                              description="sim node parameters file (default config/cell_panda_sim.yaml)"),
        DeclareLaunchArgument("box", default_value="true", description="a table and a box in the cell"),
        OpaqueFunction(function=_nodes),
    ])
