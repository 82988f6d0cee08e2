"""Simulated arm (MuJoCo sim node, standing in for Gazebo + ros2_control) + one torque controller.

    ros2 launch robot_dynamics sim.launch.py                                   # Panda, Cartesian impedance
    ros2 launch robot_dynamics sim.launch.py robot:=ur5e controller:=joint_impedance
    ros2 launch robot_dynamics sim.launch.py config:=/path/my_gains.yaml

Arguments:
  robot       panda | ur5e | kinova                          (config/sim_<robot>.yaml for the sim)
  controller  gravity_compensation | computed_torque | joint_impedance | cartesian_impedance
  config      controller parameters file; default config/<robot>_<controller>.yaml
  sim_config  sim node parameters file; default config/sim_<robot>.yaml
  dynamics    a parameters file loaded over the config: what ~/identify_dynamics wrote to
              dynamics_id.output (the rotor inertia and every law's friction compensation)
  robot_state_publisher  true: also run robot_state_publisher (TF for RViz) with the same URDF
                         (skipped with a warning when its package is not installed)
  use_sim_time  false: the sim clock starts at the wall-clock time, so either works

Topics between the two nodes are the ros2_control ones: /joint_states, /effort_controller/commands,
/ft_sensor/wrench.  The robot description is published on /robot_description (transient local) by
robot_state_publisher, or by the sim node when robot_state_publisher is off.
"""
import os

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, LogInfo, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "robot_dynamics"
# launch robot name -> sim node parameters file (in config/)
SIM_CONFIGS = {"panda": "sim_panda.yaml", "ur5e": "sim_ur5e.yaml", "kinova": "sim_kinova.yaml"}
CONTROLLERS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")
CONTROLLER_CONFIG = "{robot}_{controller}.yaml"          # in config/


def _truthy(s):
    return str(s).lower() in ("1", "true", "yes", "on")


def _have_package(name):
    try:
        get_package_share_directory(name)
        return True
    except PackageNotFoundError:
        return False


def _nodes(context):
    share = get_package_share_directory(PACKAGE)
    robot = LaunchConfiguration("robot").perform(context)
    controller = LaunchConfiguration("controller").perform(context)
    if robot not in SIM_CONFIGS:
        raise RuntimeError(f"robot:={robot}: expected one of {sorted(SIM_CONFIGS)}")
    if controller not in CONTROLLERS:
        raise RuntimeError(f"controller:={controller}: expected one of {CONTROLLERS}")
    config = LaunchConfiguration("config").perform(context) or os.path.join(
        share, "config", CONTROLLER_CONFIG.format(robot=robot, controller=controller))
    sim_config = LaunchConfiguration("sim_config").perform(context) or os.path.join(
        share, "config", SIM_CONFIGS[robot])
    use_sim_time = _truthy(LaunchConfiguration("use_sim_time").perform(context))
    from robot_dynamics.nodes.processes import dynamics_params_file
    identified = dynamics_params_file(LaunchConfiguration("dynamics").perform(context))
    rsp = _truthy(LaunchConfiguration("robot_state_publisher").perform(context))
    actions = []
    if rsp and not _have_package("robot_state_publisher"):
        # optional (TF for RViz): skip it, and let the sim node publish the description instead; a
        # missing package must not abort the launch after the other nodes have started
        actions.append(LogInfo(msg="WARNING: robot_state_publisher is not installed (apt install "
                                   "ros-jazzy-robot-state-publisher): running without it, the sim node "
                                   "publishes /robot_description"))
        rsp = False

    sim = Node(package=PACKAGE, executable="sim_node", name="mujoco_sim", output="screen",
               parameters=[sim_config, {"publish_robot_description": not rsp}])
    ctl = Node(package=PACKAGE, executable="controller_node", name="torque_controller", output="screen",
               parameters=[config, *identified, {"use_sim_time": use_sim_time}])
    actions += [sim, ctl]
    # the pair is useless alone: when either exits (bad parameters file, crash) the launch shuts down
    # and ends the other one, so nothing outlives a failed start
    for node in (sim, ctl):
        actions.append(RegisterEventHandler(OnProcessExit(
            target_action=node,
            on_exit=[EmitEvent(event=Shutdown(reason="a required node (sim_node / controller_node) exited"))])))
    if rsp:
        from robot_dynamics.description import robot_urdf
        actions.append(
            Node(package="robot_state_publisher", executable="robot_state_publisher", output="screen",
                 parameters=[{"robot_description": robot_urdf(robot), "use_sim_time": use_sim_time}]))
    return actions


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="panda", choices=list(SIM_CONFIGS),
                              description="robot to simulate"),
        DeclareLaunchArgument("controller", default_value="cartesian_impedance", choices=list(CONTROLLERS),
                              description="control law of the torque controller"),
        DeclareLaunchArgument("config", default_value="",
                              description="controller parameters file (default config/<robot>_<controller>.yaml)"),
        DeclareLaunchArgument("sim_config", default_value="",
                              description="sim node parameters file (default config/sim_<robot>.yaml)"),
        DeclareLaunchArgument("dynamics", default_value="",
                              description="identified dynamics (dynamics_id.output), loaded over the controller's"),
        DeclareLaunchArgument("robot_state_publisher", default_value="true",
                              description="run robot_state_publisher (TF) with the same URDF"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="controller follows /clock from the sim node"),
        OpaqueFunction(function=_nodes),
    ])
