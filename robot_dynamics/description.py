"""Robot descriptions for the launch files: the URDF of a robot by launch name, and the URDF with the
elements the Gazebo route needs (gz_ros2_control system plugin, a <ros2_control> block with effort
command interfaces, the base welded to the world).  Plain Python (no launch, no rclpy): the launch
files call it from an OpaqueFunction, the tests call it directly.

    urdf = robot_urdf("panda")                                   # fingers locked, as Model.from_robot
    gz = gz_ros2_control_urdf(urdf, joints, "/path/ros2_controllers_panda.yaml", initial_positions)

Launch names: 'panda' (Franka Emika Panda, 7 DoF), 'ur5e' (example-robot-data's UR5 URDF; on the real
UR5e the description comes from the driver's robot_description: ur_robot_driver / ur_description
publish it), 'kinova' (Kinova Jaco2 j2s6s200, 6 DoF, three continuous joints).
The xacro macro in urdf/gz_ros2_control.xacro adds the same elements to a xacro description.
"""
import xml.etree.ElementTree as ET

import numpy as np

# launch name -> example-robot-data name (robot_dynamics.dynamics.robots.ROBOTS)
LAUNCH_ROBOTS = {"panda": "panda", "ur5e": "ur5", "kinova": "kinova"}
CONTROLLERS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")


def robot_name(launch_name):
    """example-robot-data name for a launch robot name (unknown names are passed through)."""
    return LAUNCH_ROBOTS.get(launch_name, launch_name)


def robot_model(launch_name):
    from .dynamics import Model
    return Model.from_robot(robot_name(launch_name))


def robot_urdf(launch_name):
    """URDF text as the controller's model reads it (non-arm joints such as the Panda's fingers
    locked), so Gazebo, the MuJoCo sim and the controller agree on the joints."""
    return robot_model(launch_name).urdf


def mesh_resource_path():
    """Folder to add to GZ_SIM_RESOURCE_PATH so Gazebo resolves package://example-robot-data/...
    mesh URIs (the `share` folder holding example-robot-data)."""
    from .dynamics.robots import robots_dir
    return str(robots_dir().parents[1])


def _root_link(root):
    children = {j.find("child").get("link") for j in root.findall("joint")}
    roots = [lk.get("name") for lk in root.findall("link") if lk.get("name") not in children]
    if len(roots) != 1:
        raise ValueError(f"URDF: expected one root link, found {roots}")
    return roots[0]


def gz_ros2_control_urdf(urdf, joints, controllers_yaml, initial_positions=None, effort_limits=None,
                         world_link="world", system_name="GazeboSimSystem"):
    """URDF text with: the root welded to a `world` link (if the root is not already `world_link`),
    a <ros2_control> system using gz_ros2_control/GazeboSimSystem with, per joint, an effort command
    interface (min/max = effort limit) and position (initial_value), velocity, effort state
    interfaces, and the gz_ros2_control-system plugin loading `controllers_yaml`."""
    root = ET.fromstring(urdf)
    joint_el = {j.get("name"): j for j in root.findall("joint")}
    for name in joints:
        if name not in joint_el or joint_el[name].get("type") == "fixed":
            raise ValueError(f"joint {name!r} is not a movable joint of the URDF")
    n = len(joints)
    q0 = np.zeros(n) if initial_positions is None else np.asarray(initial_positions, dtype=float)
    if q0.shape != (n,):
        raise ValueError(f"initial_positions: expected {n} values")
    if effort_limits is None:
        effort_limits = []
        for name in joints:
            lim = joint_el[name].find("limit")
            effort_limits.append(float(lim.get("effort")) if lim is not None and lim.get("effort") else 0.0)
    for e in root.findall("ros2_control"):
        root.remove(e)
    for e in root.findall("gazebo"):        # Gazebo-classic ros_control plugins (e.g. the UR5 URDF's)
        if any("ros_control" in (p.get("filename") or "") or "ros2_control" in (p.get("filename") or "")
               for p in e.findall("plugin")):
            root.remove(e)
    base = _root_link(root)
    if base != world_link:
        ET.SubElement(root, "link", name=world_link)
        wj = ET.SubElement(root, "joint", name=f"{world_link}_to_{base}", type="fixed")
        ET.SubElement(wj, "parent", link=world_link)
        ET.SubElement(wj, "child", link=base)
        ET.SubElement(wj, "origin", xyz="0 0 0", rpy="0 0 0")
    rc = ET.SubElement(root, "ros2_control", name=system_name, type="system")
    hw = ET.SubElement(rc, "hardware")
    ET.SubElement(hw, "plugin").text = "gz_ros2_control/GazeboSimSystem"
    for name, x0, emax in zip(joints, q0, effort_limits):
        j = ET.SubElement(rc, "joint", name=name)
        ci = ET.SubElement(j, "command_interface", name="effort")
        if emax > 0:
            ET.SubElement(ci, "param", name="min").text = repr(-float(emax))
            ET.SubElement(ci, "param", name="max").text = repr(float(emax))
        sp = ET.SubElement(j, "state_interface", name="position")
        ET.SubElement(sp, "param", name="initial_value").text = repr(float(x0))
        ET.SubElement(j, "state_interface", name="velocity")
        ET.SubElement(j, "state_interface", name="effort")
    gz = ET.SubElement(root, "gazebo")
    plugin = ET.SubElement(gz, "plugin", filename="gz_ros2_control-system",
                           name="gz_ros2_control::GazeboSimROS2ControlPlugin")
    ET.SubElement(plugin, "parameters").text = str(controllers_yaml)
    return ET.tostring(root, encoding="unicode")
