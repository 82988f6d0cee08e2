"""Torque controller only, for a robot whose ros2_control stack is already running with an effort
controller (effort_controllers/JointGroupEffortController, or forward_command_controller with
interface_name: effort) and a joint_state_broadcaster.

    ros2 launch robot_dynamics real_robot.launch.py robot:=panda controller:=joint_impedance
    ros2 launch robot_dynamics real_robot.launch.py robot:=ur5e controller:=gravity_compensation \
        command_topic:=/forward_effort_controller/commands wrench_topic:=/force_torque_sensor_broadcaster/wrench

The robot description comes from the driver: the controller reads the `robot_description` parameter
(passed here from the `robot_description` launch argument if given) or the /robot_description topic
the driver publishes.  Without either, configure is refused with an ERROR saying how to pass one;
example-robot-data's model is used only when named (`fallback_robot:=panda`), with a WARN.  On a
real UR5e use the driver's description (ur_robot_driver publishes it), never the simulation's UR5 URDF.

Arguments:
  robot, controller, config     as in sim.launch.py (config/<robot>_<controller>.yaml by default)
  dynamics                      a parameters file loaded over the config: what ~/identify_dynamics wrote to
                                dynamics_id.output (the rotor inertia and every law's friction compensation)
  joint_states_topic            default /joint_states
  command_topic                 default /effort_controller/commands
  wrench_topic                  default /ft_sensor/wrench
  namespace                     push the controller into a namespace (multi-robot set-ups)
  robot_description             URDF text of the real robot ('' : the driver's /robot_description)
  fallback_robot                example-robot-data model used without a description ('' : refuse)
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
CONTROLLERS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")
CONTROLLER_CONFIG = "{robot}_{controller}.yaml"          # in config/
# Robots whose own controller already adds gravity to a torque command (libfranka compensates the
# arm's gravity in torque mode): our gravity term must be off there, or the arm gets it twice.
DRIVER_COMPENSATES_GRAVITY = {"panda": True, "ur5e": False, "kinova": False}


def _nodes(context):
    share = get_package_share_directory(PACKAGE)
    lc = {k: LaunchConfiguration(k).perform(context) for k in (
        "robot", "controller", "config", "joint_states_topic", "command_topic", "wrench_topic",
        "namespace", "robot_description", "autostart", "compensate_gravity", "fallback_robot", "dynamics")}
    config = lc["config"] or os.path.join(
        share, "config", CONTROLLER_CONFIG.format(robot=lc["robot"], controller=lc["controller"]))
    overrides = {"autostart": lc["autostart"].lower() in ("1", "true", "yes", "on"),
                 # example-robot-data's model only when the user names it (issue 42): the config's
                 # `robot` (the sim's stand-in) is cleared, so a missing description refuses configure
                 "robot": lc["fallback_robot"]}
    if lc["robot_description"]:
        overrides["robot_description"] = lc["robot_description"]
    cg = lc["compensate_gravity"].lower()
    if cg == "auto":
        cg_value = not DRIVER_COMPENSATES_GRAVITY[lc["robot"]]
    elif cg in ("true", "false"):
        cg_value = cg == "true"
    else:
        raise RuntimeError(f"compensate_gravity:={cg}: expected auto, true or false")
    overrides[f"{lc['controller']}.compensate_gravity"] = cg_value
    from robot_dynamics.nodes.processes import dynamics_params_file
    identified = dynamics_params_file(lc["dynamics"])
    return [
        Node(package=PACKAGE, executable="controller_node", name="torque_controller",
             namespace=lc["namespace"], output="screen",
             parameters=[config, *identified, overrides],
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
        DeclareLaunchArgument("dynamics", default_value="",
                              description="identified dynamics (dynamics_id.output), loaded over the controller's"),
        DeclareLaunchArgument("joint_states_topic", default_value="/joint_states"),
        DeclareLaunchArgument("command_topic", default_value="/effort_controller/commands"),
        DeclareLaunchArgument("wrench_topic", default_value="/ft_sensor/wrench"),
        DeclareLaunchArgument("namespace", default_value=""),
        DeclareLaunchArgument("fallback_robot", default_value="",
                              description="example-robot-data model used when no robot description comes "
                                          "(e.g. panda; a stand-in, not your arm's URDF; '' : refuse to "
                                          "configure without a description)"),
        DeclareLaunchArgument("robot_description", default_value="",
                              description="URDF text of the real robot (default: the driver's /robot_description)"),
        DeclareLaunchArgument("compensate_gravity", default_value="auto",
                              description="add g(q): auto = off for robots whose driver compensates "
                                          "gravity itself (Franka), on otherwise; true / false to force"),
        DeclareLaunchArgument("autostart", default_value="false",
                              description="configure and activate the lifecycle node at start-up"),
        OpaqueFunction(function=_nodes),
    ])
