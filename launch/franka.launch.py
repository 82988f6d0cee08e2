"""A Franka FR3 or Panda through libfranka (franky): the franka_bridge node, and in topic mode the
torque controller node beside it.

    ros2 launch robot_dynamics franka.launch.py robot_ip:=172.16.0.2 controller:=joint_impedance
    ros2 launch robot_dynamics franka.launch.py robot_ip:=127.0.0.1 realtime:=false sim_clock:=true \
        controller:=cartesian_impedance mode:=in_process          # against `franky-sim -s mujoco`

Arguments:
  robot              fr3 (default) or panda: config/fr3_bridge.yaml + config/fr3_<controller>.yaml, or
                     config/panda_franka_bridge.yaml + config/panda_franka_<controller>.yaml
  robot_ip           the robot's FCI address (franky-sim: the loopback address it prints)
  controller         gravity_compensation, computed_torque, joint_impedance (default), cartesian_impedance
  mode               topic (default): bridge + controller_node over DDS, as with ros2_control;
                     in_process: the bridge runs the law, safety filter and supervisor in the robot's
                     control callback (no DDS hop); it reads the same controller parameters file
  realtime           true (default): libfranka requires a real-time kernel; false: RealtimeConfig.Ignore
                     (franky-sim, or any kernel without PREEMPT_RT: with true the bridge says so and stops)
  sim_clock          false (default); true: the bridge publishes /clock from the robot's time and the
                     controller uses it (franky-sim, which can fall behind the wall clock)
  command_timeout    the bridge's watchdog, s ('' : the bridge config's 0.1 s); franky-sim on a loaded
                     host: 1.0 (command gaps of 0.3 s are seen there, and each trips a 0.1 s watchdog)
  bridge_config, controller_config   parameter files replacing the defaults above
  dynamics           a parameters file loaded over the controller's: what ~/identify_dynamics wrote to
                     dynamics_id.output (the rotor inertia and every law's friction compensation)
  link_torque        false (default); true: the node running the law reads the Franka's tau_J as link-side
                     joint torques (effort_link_side): the friction's stiction term meets a push anywhere
                     on the arm.  A real Franka's tau_J is measured after the gears; franky-sim reports
                     the torque it applied: leave it false there
The controller's compensate_gravity is forced false (the Franka adds gravity); the bridge checks it
again and refuses commands that carry g(q).
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "robot_dynamics"
FRANKA_ROBOTS = ("fr3", "panda")
LAWS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")
MODES = ("topic", "in_process")
CONFIG_PREFIX = {"fr3": "fr3", "panda": "panda_franka"}     # config/<prefix>_bridge.yaml, <prefix>_<law>.yaml
BRIDGE_CONFIGS = ("fr3_bridge.yaml", "panda_franka_bridge.yaml")
LAW_CONFIGS = tuple(f"{p}_{law}.yaml" for p in ("fr3", "panda_franka") for law in LAWS)


def _truthy(s):
    return s.lower() in ("1", "true", "yes", "on")


def _nodes(context):
    share = get_package_share_directory(PACKAGE)
    lc = {k: LaunchConfiguration(k).perform(context) for k in (
        "robot", "robot_ip", "controller", "mode", "realtime", "sim_clock", "bridge_config",
        "controller_config", "command_timeout", "dynamics", "link_torque")}
    prefix = CONFIG_PREFIX[lc["robot"]]
    bridge_cfg = lc["bridge_config"] or os.path.join(share, "config", f"{prefix}_bridge.yaml")
    law_cfg = lc["controller_config"] or os.path.join(share, "config", f"{prefix}_{lc['controller']}.yaml")
    sim_clock = _truthy(lc["sim_clock"])
    bridge_over = {"robot_ip": lc["robot_ip"], "mode": lc["mode"], "realtime": _truthy(lc["realtime"]),
                   "publish_clock": sim_clock}
    if lc["command_timeout"]:
        try:
            bridge_over["command_timeout"] = float(lc["command_timeout"])
        except ValueError:
            raise RuntimeError(f"command_timeout:={lc['command_timeout']!r} is not a number of seconds") from None
    law_over = {f"{lc['controller']}.compensate_gravity": False}
    if _truthy(lc["link_torque"]):
        law_over["effort_link_side"] = True
    from robot_dynamics.nodes.processes import dynamics_params_file
    identified = dynamics_params_file(lc["dynamics"])
    if lc["mode"] == "in_process":
        return [Node(package=PACKAGE, executable="franka_bridge", name="franka_bridge", output="screen",
                     parameters=[law_cfg, *identified, bridge_cfg, bridge_over, law_over])]
    return [
        Node(package=PACKAGE, executable="franka_bridge", name="franka_bridge", output="screen",
             parameters=[bridge_cfg, bridge_over]),
        Node(package=PACKAGE, executable="controller_node", name="torque_controller", output="screen",
             parameters=[law_cfg, *identified, {**law_over, "use_sim_time": sim_clock, "autostart": True}]),
    ]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="fr3", choices=list(FRANKA_ROBOTS)),
        DeclareLaunchArgument("robot_ip", default_value="172.16.0.2", description="the robot's FCI address"),
        DeclareLaunchArgument("controller", default_value="joint_impedance", choices=list(LAWS)),
        DeclareLaunchArgument("mode", default_value="topic", choices=list(MODES)),
        DeclareLaunchArgument("realtime", default_value="true",
                              description="require a real-time kernel (false: RealtimeConfig.Ignore; "
                                          "use false for franky-sim or a kernel without PREEMPT_RT)"),
        DeclareLaunchArgument("sim_clock", default_value="false",
                              description="/clock from the robot's time (franky-sim)"),
        DeclareLaunchArgument("command_timeout", default_value="",
                              description="bridge watchdog [s] ('': the bridge config's)"),
        DeclareLaunchArgument("bridge_config", default_value="", description="bridge parameters file"),
        DeclareLaunchArgument("controller_config", default_value="", description="controller parameters file"),
        DeclareLaunchArgument("dynamics", default_value="",
                              description="identified dynamics (dynamics_id.output), loaded over the controller's"),
        DeclareLaunchArgument("link_torque", default_value="false",
                              description="tau_J as link-side joint torques for the stiction term (a real "
                                          "Franka: true; franky-sim: false)"),
        OpaqueFunction(function=_nodes),
    ])
