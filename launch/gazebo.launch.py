"""Gazebo (Harmonic, via ros_gz_sim) + gz_ros2_control with effort command interfaces, then this
package's torque controller on sim time.  Needs a ROS 2 Jazzy install with ros_gz_sim, ros_gz_bridge,
gz_ros2_control, ros2_controllers (joint_state_broadcaster, effort_controllers) and
robot_state_publisher (apt: ros-jazzy-ros-gz ros-jazzy-gz-ros2-control ros-jazzy-ros2-controllers).

    ros2 launch robot_dynamics gazebo.launch.py                       # Panda, Cartesian impedance
    ros2 launch robot_dynamics gazebo.launch.py robot:=ur5e controller:=joint_impedance gz_args:="-r -s empty.sdf"

`dynamics:=<file>`: what ~/identify_dynamics wrote to dynamics_id.output, loaded over the controller's
parameters (the rotor inertia and every law's friction compensation).

Order of start-up:
  1. gz sim (gz_args, default '-r empty.sdf': running, with the GUI; add -s for server only)
  2. robot_state_publisher with the URDF + <ros2_control> (gz_ros2_control/GazeboSimSystem, effort
     command interfaces clamped at the URDF effort limits, initial positions from the sim config) +
     the gz_ros2_control-system plugin loading config/ros2_controllers_<robot>.yaml
  3. ros_gz_sim create spawns it from /robot_description; a /clock bridge (gz -> ROS)
  4. when `create` exits: spawner joint_state_broadcaster, then spawner effort_controller
  5. when the effort controller is active: our controller_node (use_sim_time: true)
No F/T sensor is simulated on this route (the MuJoCo route publishes /ft_sensor/wrench); Cartesian
impedance runs without a measured wrench.
"""
import os

import yaml
from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch import LaunchDescription
from launch.actions import (AppendEnvironmentVariable, DeclareLaunchArgument, IncludeLaunchDescription,
                            OpaqueFunction, RegisterEventHandler)
from launch.event_handlers import OnProcessExit
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

PACKAGE = "robot_dynamics"
# launch robot name -> (ros2_control controllers file, sim config with joints + initial positions)
ROBOT_CONFIGS = {
    "panda": ("ros2_controllers_panda.yaml", "sim_panda.yaml"),
    "ur5e": ("ros2_controllers_ur5e.yaml", "sim_ur5e.yaml"),
    "kinova": ("ros2_controllers_kinova.yaml", "sim_kinova.yaml"),
}
CONTROLLERS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")
CONTROLLER_CONFIG = "{robot}_{controller}.yaml"          # in config/


# ROS packages this route starts or includes (none of them is a Python wheel)
REQUIRED_PACKAGES = ("ros_gz_sim", "ros_gz_bridge", "controller_manager", "robot_state_publisher")


def _missing_packages():
    missing = []
    for pkg in REQUIRED_PACKAGES:
        try:
            get_package_share_directory(pkg)
        except PackageNotFoundError:
            missing.append(pkg)
    return missing


def _setup(context):
    from robot_dynamics.description import gz_ros2_control_urdf, mesh_resource_path, robot_urdf

    # fail before anything starts, naming every missing package (not just the first one used)
    missing = _missing_packages()
    if missing:
        raise RuntimeError(
            f"gazebo.launch.py needs the ROS 2 packages {missing}, not installed here "
            "(apt: ros-jazzy-ros-gz ros-jazzy-gz-ros2-control ros-jazzy-ros2-controllers "
            "ros-jazzy-robot-state-publisher); nothing was started")
    share = get_package_share_directory(PACKAGE)
    robot = LaunchConfiguration("robot").perform(context)
    controller = LaunchConfiguration("controller").perform(context)
    controllers_file, sim_file = ROBOT_CONFIGS[robot]
    controllers_yaml = os.path.join(share, "config", controllers_file)
    config = LaunchConfiguration("config").perform(context) or os.path.join(
        share, "config", CONTROLLER_CONFIG.format(robot=robot, controller=controller))
    from robot_dynamics.nodes.processes import dynamics_params_file
    identified = dynamics_params_file(LaunchConfiguration("dynamics").perform(context))
    with open(os.path.join(share, "config", sim_file)) as f:
        sim = yaml.safe_load(f)["/**"]["ros__parameters"]
    description = gz_ros2_control_urdf(robot_urdf(robot), sim["joints"], controllers_yaml,
                                       sim.get("initial_positions"))

    gz_sim = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(
            os.path.join(get_package_share_directory("ros_gz_sim"), "launch", "gz_sim.launch.py")),
        launch_arguments={"gz_args": LaunchConfiguration("gz_args").perform(context),
                          "on_exit_shutdown": "true"}.items())
    state_publisher = Node(package="robot_state_publisher", executable="robot_state_publisher",
                           output="screen",
                           parameters=[{"robot_description": description, "use_sim_time": True}])
    spawn = Node(package="ros_gz_sim", executable="create", output="screen",
                 arguments=["-topic", "robot_description", "-name", robot, "-allow_renaming", "true"])
    clock_bridge = Node(package="ros_gz_bridge", executable="parameter_bridge", output="screen",
                        arguments=["/clock@rosgraph_msgs/msg/Clock[gz.msgs.Clock"])
    jsb_spawner = Node(package="controller_manager", executable="spawner", output="screen",
                       arguments=["joint_state_broadcaster", "--controller-manager", "/controller_manager"])
    effort_spawner = Node(package="controller_manager", executable="spawner", output="screen",
                          arguments=["effort_controller", "--controller-manager", "/controller_manager"])
    torque_controller = Node(package=PACKAGE, executable="controller_node", name="torque_controller",
                             output="screen", parameters=[config, *identified, {"use_sim_time": True}])
    return [
        # Gazebo resolves package://example-robot-data/... meshes through its resource path
        AppendEnvironmentVariable("GZ_SIM_RESOURCE_PATH", mesh_resource_path()),
        gz_sim, state_publisher, spawn, clock_bridge,
        RegisterEventHandler(OnProcessExit(target_action=spawn, on_exit=[jsb_spawner])),
        RegisterEventHandler(OnProcessExit(target_action=jsb_spawner, on_exit=[effort_spawner])),
        RegisterEventHandler(OnProcessExit(target_action=effort_spawner, on_exit=[torque_controller])),
    ]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("robot", default_value="panda", choices=list(ROBOT_CONFIGS)),
        DeclareLaunchArgument("controller", default_value="cartesian_impedance", choices=list(CONTROLLERS)),
        DeclareLaunchArgument("config", default_value="",
                              description="controller parameters file (default config/<robot>_<controller>.yaml)"),
        DeclareLaunchArgument("dynamics", default_value="",
                              description="identified dynamics (dynamics_id.output), loaded over the controller's"),
        DeclareLaunchArgument("gz_args", default_value="-r empty.sdf",
                              description="arguments to gz sim (add -s for a headless server)"),
        OpaqueFunction(function=_setup),
    ])
