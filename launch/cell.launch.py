"""A cell of several simulated arms (one MuJoCo world, sim_node with `arms`) and one torque
controller per arm, each in the arm's namespace, as a user would run them.

    ros2 launch robot_dynamics cell.launch.py                         # two Pandas facing each other
    ros2 launch robot_dynamics cell.launch.py arms:=4 box:=false controller:=gravity_compensation
    ros2 launch robot_dynamics cell.launch.py controller:=carry        # both arms carry the box

Arguments:
  arms        number of arms (1-8): 2 -> namespaces left, right (the two-Panda cell: a table and a
              0.3 m box between them); otherwise arm1 .. armN, in facing pairs 1.2 m apart
  controller  gravity_compensation | joint_impedance | computed_torque | cartesian_impedance: one
              torque controller per arm; carry (arms:=2): one carry_node commanding both arms, which
              grasps the box and carries it (nodes/carry_node.py; the sim with no-slip friction)
  arm_distance  pair (default): each arm's controller keeps its frames apart from the facing arm's
              (arm_distance.partners, nodes/controller/partners.py) and holds while that arm's states
              or controller go silent; all: from every other arm; none: off
  config      controller parameters file for every arm (default config/panda_<controller>.yaml, then
              config/cell_panda_controller.yaml: the same with topic names relative to the namespace)
  sim_config  sim node parameters file (default config/cell_panda_sim.yaml)
  box         true | false: the box (and table) in the world

Each arm <ns>: the sim publishes /<ns>/joint_states and /<ns>/robot_description and takes
/<ns>/effort_controller/commands; the controller /<ns>/torque_controller reads its model from
/<ns>/robot_description.  The box pose is on /cell/box_pose.  When the sim exits the launch ends; a
controller that exits (or is killed) leaves the rest running: its arm braked to rest by the sim's
command timeout, the other arms' controllers holding while their partner is lost.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from robot_dynamics.nodes.cell_sim import default_base

PACKAGE = "robot_dynamics"
CHOICES = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance", "carry")
CONTROLLERS = CHOICES[:4]              # one torque controller per arm; carry: one node for both
DISTANCE = ("pair", "all", "none")


def arm_names(n):
    """The namespaces of an n-arm cell: left, right for two; arm1 .. armN otherwise."""
    return ["left", "right"] if n == 2 else [f"arm{i + 1}" for i in range(n)]


def partner_params(names, mode):
    """Each arm's arm_distance.* parameters: its partners (`pair`: the facing arm of its pair, `all`:
    every other arm, `none`: none) and the bases' world poses, the cell sim's default layout."""
    poses = [sum(default_base(i), []) for i in range(len(names))]
    out = []
    for i, ns in enumerate(names):
        if mode == "none":
            others = []
        elif mode == "pair":
            others = [j for j in (i ^ 1,) if j < len(names)]
        else:
            others = [j for j in range(len(names)) if j != i]
        out.append({"arm_distance.partners": [names[j] for j in others] or [""],
                    "arm_distance.base_pose": poses[i],
                    "arm_distance.partner_poses": [x for j in others for x in poses[j]] or [0.0]})
    return out


def _nodes(context):
    share = get_package_share_directory(PACKAGE)
    try:
        n = int(LaunchConfiguration("arms").perform(context))
    except ValueError:
        n = 0
    if not 1 <= n <= 8:
        raise RuntimeError(f"arms:={LaunchConfiguration('arms').perform(context)}: expected 1 .. 8")
    controller = LaunchConfiguration("controller").perform(context)
    if controller not in CHOICES:
        raise RuntimeError(f"controller:={controller}: expected one of {CHOICES}")
    if controller == "carry" and n != 2:
        raise RuntimeError(f"controller:=carry needs arms:=2 (the two-Panda cell), got arms:={n}")
    mode = LaunchConfiguration("arm_distance").perform(context)
    if mode not in DISTANCE:
        raise RuntimeError(f"arm_distance:={mode}: expected one of {DISTANCE}")
    config = LaunchConfiguration("config").perform(context) or os.path.join(
        share, "config", f"panda_{'joint_impedance' if controller == 'carry' else controller}.yaml")
    relative_topics = os.path.join(share, "config", "cell_panda_controller.yaml")
    sim_config = LaunchConfiguration("sim_config").perform(context) or os.path.join(
        share, "config", "cell_panda_sim.yaml")
    box = LaunchConfiguration("box").perform(context).lower() in ("1", "true", "yes", "on")
    names = arm_names(n)
    carry = controller == "carry"
    sim = Node(package=PACKAGE, executable="sim_node", name="mujoco_sim", output="screen",
               parameters=[sim_config, {"arms": names, "box": box or carry, "table": box or carry,
                                        "no_slip": 10 if carry else 0}])
    if carry:                  # one node for both arms (why: nodes/carry_node.py), on the sim's clock
        ctls = [Node(package=PACKAGE, executable="carry_node", name="carry_node", output="screen",
                     parameters=[{"arms": names, "use_sim_time": True}])]
    else:
        ctls = [Node(package=PACKAGE, executable="controller_node", name="torque_controller", namespace=ns,
                     output="screen", parameters=[config, relative_topics, partners])
                for ns, partners in zip(names, partner_params(names, mode))]
    # the sim's exit ends the launch; a controller that exits leaves the cell running: its arm is braked
    # by the sim's command timeout and the other arms' controllers hold (their partner is lost)
    return [sim, *ctls, RegisterEventHandler(OnProcessExit(
        target_action=sim, on_exit=[EmitEvent(event=Shutdown(reason="the cell's sim_node exited"))]))]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("arms", default_value="2", description="number of arms (1-8)"),
        DeclareLaunchArgument("controller", default_value="joint_impedance", choices=list(CHOICES),
                              description="control law of every arm's torque controller, or carry (one "
                                          "node carrying the box with both arms)"),
        DeclareLaunchArgument("arm_distance", default_value="pair", choices=list(DISTANCE),
                              description="which other arms each controller keeps its frames apart from"),
        DeclareLaunchArgument("config", default_value="",
                              description="controller parameters file (default config/panda_<controller>.yaml)"),
        DeclareLaunchArgument("sim_config", default_value="",
                              description="sim node parameters file (default config/cell_panda_sim.yaml)"),
        DeclareLaunchArgument("box", default_value="true", description="a table and a box in the cell"),
        OpaqueFunction(function=_nodes),
    ])
