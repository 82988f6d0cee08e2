"""Torque controller only, for a robot whose ros2_control stack is already running with an effort
controller (effort_controllers/JointGroupEffortController, or forward_command_controller with
interface_name: effort) and a joint_state_broadcaster.

    ros2 launch robot_dynamics real_robot.launch.py robot:=panda controller:=joint_impedance
    ros2 launch robot_dynamics real_robot.launch.py robot:=ur5e controller:=gravity_compensation \
        command_topic:=/forward_effort_controller/commands wrench_topic:=/force_torque_sensor_broadcaster/wrench

The robot description comes from the driver: the controller reads the `robot_description` parameter
(passed here from the `robot_description` launch argument if given) or the driver's /robot_description
topic (robot_state_publisher, TRANSIENT_LOCAL), and waits for it, saying so every 10 s; a configure
without one fails with an ERROR naming the ways to pass one.  The parameters file's example-robot-data
model is used only with `fallback_model:=true` (and a WARN): on a real UR5e it is a UR5, not the arm.

Arguments:
  robot, controller, config     as in sim.launch.py (config/<robot>_<controller>.yaml by default)
  joint_states_topic            default /joint_states
  command_topic                 default /effort_controller/commands
  wrench_topic                  default /ft_sensor/wrench
  namespace                     push the controller into a namespace (multi-robot set-ups)
  robot_description             URDF text of the real robot ('' : the driver's, on /robot_description)
  fallback_model                true: the parameters file's example-robot-data model when no description
                                comes (default false: wait for the driver's)
  compensate_gravity            auto (default: off on the Panda, whose libfranka torque interface already
                                compensates gravity; on for UR and Kinova), true or false
  autostart                     configure + activate at start-up (default false on hardware: activate
                                it yourself with `ros2 lifecycle set /torque_controller activate`)
The topics are remapped, so parameters files stay robot-agnostic.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "robot_dynamics"
ROBOTS = ("panda", "ur5e", "kinova")
BOOLS = ("true", "false")
CONTROLLERS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")
CONTROLLER_CONFIG = "{robot}_{controller}.yaml"          # in config/
# Robots whose own controller already adds gravity to a torque command (libfranka compensates the
# arm's gravity in torque mode): our gravity term must be off there, or the arm gets it twice.
DRIVER_COMPENSATES_GRAVITY = {"panda": True, "ur5e": False, "kinova": False}


def _nodes(context):
    share = get_package_share_directory(PACKAGE)
    lc = {k: LaunchConfiguration(k).perform(context) for k in (
        "robot", "controller", "config", "joint_states_topic", "command_topic", "wrench_topic",
        "namespace", "robot_description", "autostart", "compensate_gravity")}
    config = lc["config"] or os.path.join(
        share, "config", CONTROLLER_CONFIG.format(robot=lc["robot"], controller=lc["controller"]))
    overrides = {"autostart": lc["autostart"].lower() in ("1", "true", "yes", "on")}
    if lc["robot_description"]:
        overrides["robot_description"] = lc["robot_description"]
    if LaunchConfiguration("fallback_model").perform(context).lower() not in ("1", "true", "yes", "on"):
        # a real arm: its driver's description only (the parameters file's example-robot-data model is
        # a simulation's, not this arm's): the controller waits for it, and a configure without it fails
        # with the ways to pass one
        overrides.update({"robot": "", "urdf_path": ""})
    cg = lc["compensate_gravity"].lower()
    if cg == "auto":
        cg_value = not DRIVER_COMPENSATES_GRAVITY[lc["robot"]]
    elif cg in ("true", "false"):
        cg_value = cg == "true"
    else:
        raise RuntimeError(f"compensate_gravity:={cg}: expected auto, true or false")
    overrides[f"{lc['controller']}.compensate_gravity"] = cg_value
    return [
        Node(package=PACKAGE, executable="controller_node", name="torque_controller",
             namespace=lc["namespace"], output="screen",
             parameters=[config, overrides],
             # the node's parameters name the default topics; remapping them is the ROS way
             remappings=[("/joint_states", lc["joint_states_topic"]),
                         ("/effort_controller/commands", lc["command_topic"]),
                         ("/ft_sensor/wrench", lc["wrench_topic"])]),
    ]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="panda", choices=list(ROBOTS)),
        DeclareLaunchArgument("controller", default_value="gravity_compensation", choices=list(CONTROLLERS)),
        DeclareLaunchArgument("config", default_value="", description="controller parameters file"),
        DeclareLaunchArgument("joint_states_topic", default_value="/joint_states"),
        DeclareLaunchArgument("command_topic", default_value="/effort_controller/commands"),
        DeclareLaunchArgument("wrench_topic", default_value="/ft_sensor/wrench"),
        DeclareLaunchArgument("namespace", default_value=""),
        DeclareLaunchArgument("robot_description", default_value="",
                              description="URDF text of the real robot (default: the driver's, on "
                                          "/robot_description)"),
        DeclareLaunchArgument("fallback_model", default_value="false", choices=list(BOOLS),
                              description="true: without a description, the parameters file's "
                                          "example-robot-data model (a WARN says so); false: wait for the "
                                          "driver's"),
        DeclareLaunchArgument("compensate_gravity", default_value="auto",
                              description="add g(q): auto = off for robots whose driver compensates "
                                          "gravity itself (Franka), on otherwise; true / false to force"),
        DeclareLaunchArgument("autostart", default_value="false",
                              description="configure and activate the lifecycle node at start-up"),
        OpaqueFunction(function=_nodes),
    ])
