"""Static checks of launch/, config/ and urdf/ that run everywhere, without `launch` installed:

- every launch file parses (ast) and has generate_launch_description; every LaunchConfiguration it
  reads is declared; every Node(package=..., executable=...) names a console script of setup.py (this
  package) or a known executable of an external package; every config file it can pick exists;
- every config/*.yaml is valid ros__parameters YAML (node name -> {ros__parameters: {...}}), except the
  DH tables (*_dh.yaml, *_mdh.yaml) which are model descriptions, not node parameters;
- every parameter set in a controller / sim config is declared by that node, with the declared type
  (rclpy rejects 1000 for a double parameter); joints match the robot's model; frames exist;
  initial positions are within limits;
- the ros2_control controllers files: controller_manager with update_rate, joint_state_broadcaster,
  effort_controller of type effort_controllers/JointGroupEffortController with the model's joints;
- the Gazebo description (gz_ros2_control system plugin, effort command interfaces) for each robot;
- setup.py installs launch/*.py, config/*.yaml and urdf/*.xacro.
"""
import ast
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

from robot_dynamics.control.laws.base import flatten_params
from robot_dynamics.description import CONTROLLERS, LAUNCH_ROBOTS, gz_ros2_control_urdf, robot_model
from robot_dynamics.nodes import sim_node

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = sorted((ROOT / "launch").glob("*.launch.py"))
CONFIGS = sorted((ROOT / "config").glob("*.yaml"))
NOT_NODE_PARAMS = ("_dh.yaml", "_mdh.yaml")          # DH tables: model descriptions
PACKAGE = "robot_dynamics"
# (package, executable) of other ROS 2 Jazzy packages the launch files may start
KNOWN_EXTERNAL = {
    ("robot_state_publisher", "robot_state_publisher"),
    ("controller_manager", "spawner"),
    ("controller_manager", "ros2_control_node"),
    ("ros_gz_sim", "create"),
    ("ros_gz_bridge", "parameter_bridge"),
    ("rviz2", "rviz2"),
}
KNOWN_INCLUDES = {("ros_gz_sim", "gz_sim.launch.py")}


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def console_scripts():
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "console_scripts":
                    return {ast.literal_eval(e).split("=")[0].strip(): ast.literal_eval(e).split("=")[1].strip()
                            for e in v.elts}
    raise AssertionError("setup.py: no console_scripts")


def module_constants(tree):
    """Module-level NAME = <literal> assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def resolve(expr, consts):
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name) and expr.id in consts:
        return consts[expr.id]
    return None


def calls(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if fname == name:
                yield node


def kw(call, key):
    for k in call.keywords:
        if k.arg == key:
            return k.value
    return None


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def node_params(path):
    """The one node section of a node parameters file, flattened."""
    doc = load_yaml(path)
    assert isinstance(doc, dict) and len(doc) == 1, f"{path.name}: expected one node section"
    (section,) = doc.values()
    return flatten_params(section["ros__parameters"])


def controller_specs():
    cn = pytest.importorskip("robot_dynamics.nodes.controller.params")
    return {s.name: s.default for s in cn.all_param_specs()}


def type_ok(default, value):
    """Would rclpy accept `value` for a parameter declared with `default` (static typing)?"""
    from rclpy.parameter import Parameter
    T = Parameter.Type
    if isinstance(default, T):
        want = {T.DOUBLE_ARRAY: float, T.STRING_ARRAY: str, T.INTEGER_ARRAY: int, T.BOOL_ARRAY: bool,
                T.DOUBLE: float, T.STRING: str, T.INTEGER: int, T.BOOL: bool}[default]
        if default in (T.DOUBLE_ARRAY, T.STRING_ARRAY, T.INTEGER_ARRAY, T.BOOL_ARRAY):
            return isinstance(value, list) and bool(value) and all(type(x) is want for x in value)
        return type(value) is want
    if isinstance(default, (list, tuple)):
        if not isinstance(value, list) or not value:
            return False
        elem = type(default[0]) if default else float
        return all(type(x) is elem for x in value)
    return type(value) is type(default)


# ---------------------------------------------------------------------------------------------
# launch files
# ---------------------------------------------------------------------------------------------
def test_launch_files_exist():
    names = {p.name for p in LAUNCH_FILES}
    assert {"sim.launch.py", "real_robot.launch.py", "gazebo.launch.py"} <= names


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_structure(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)
    consts = module_constants(tree)
    declared = {ast.literal_eval(c.args[0]) for c in calls(tree, "DeclareLaunchArgument")}
    # names bound by comprehensions over literal tuples: `for k in ("robot", ...)`
    loop_values = {}
    for comp in ast.walk(tree):
        if isinstance(comp, ast.comprehension) and isinstance(comp.target, ast.Name):
            vals = resolve(comp.iter, consts)
            if vals is None:
                try:
                    vals = ast.literal_eval(comp.iter)
                except ValueError:
                    continue
            loop_values[comp.target.id] = list(vals)
    used = set()
    for c in calls(tree, "LaunchConfiguration"):
        a = c.args[0]
        if isinstance(a, ast.Name) and a.id in loop_values:
            used |= set(loop_values[a.id])
        else:
            used.add(ast.literal_eval(a))
    assert used <= declared, f"undeclared launch arguments {used - declared}"
    # declared choices include the default
    for c in calls(tree, "DeclareLaunchArgument"):
        ch, dv = kw(c, "choices"), kw(c, "default_value")
        if ch is not None and dv is not None:
            choices = resolve(ch, consts) if not isinstance(ch, ast.Call) else \
                list(resolve(ch.args[0], consts) or [])
            assert ast.literal_eval(dv) in choices
    scripts = console_scripts()
    nodes = list(calls(tree, "Node"))
    assert nodes, "no Node actions"
    for c in nodes:
        pkg, exe = resolve(kw(c, "package"), consts), resolve(kw(c, "executable"), consts)
        assert pkg and exe, f"{path.name}:{c.lineno}: package/executable must be literals or constants"
        if pkg == PACKAGE:
            assert exe in scripts, f"{exe} is not a console script of setup.py ({sorted(scripts)})"
            module = scripts[exe].split(":")[0]
            mod = ROOT / module.replace(".", "/")         # a module, or a package (nodes/controller/)
            assert mod.with_suffix(".py").is_file() or (mod / "__init__.py").is_file(), module
        else:
            assert (pkg, exe) in KNOWN_EXTERNAL, f"unknown external executable {pkg}/{exe}"
    # included launch files of other packages
    for c in calls(tree, "join"):
        args = [resolve(a, consts) for a in c.args]
        if any(isinstance(a, str) and a.endswith(".launch.py") for a in args):
            inner = [a for a in c.args if isinstance(a, ast.Call)]
            pkg = resolve(inner[0].args[0], consts) if inner and inner[0].args else None
            assert (pkg, args[-1]) in KNOWN_INCLUDES
    # every config file the launch file can pick exists
    files = []
    for v in consts.values():
        items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else [v]
        for it in items:
            for x in (it if isinstance(it, (list, tuple)) else [it]):
                if isinstance(x, str) and x.endswith(".yaml") and "{" not in x:
                    files.append(x)
    pattern = consts.get("CONTROLLER_CONFIG")
    if pattern:
        robots = consts.get("SIM_CONFIGS") or consts.get("ROBOT_CONFIGS") or consts.get("ROBOTS")
        for r in robots:
            for law in consts["CONTROLLERS"]:
                files.append(pattern.format(robot=r, controller=law))
        assert tuple(consts["CONTROLLERS"]) == CONTROLLERS
        assert set(robots) == set(LAUNCH_ROBOTS)
    for f in files:
        assert (ROOT / "config" / f).is_file(), f"{path.name}: config/{f} missing"


def test_setup_installs_launch_config_urdf():
    text = (ROOT / "setup.py").read_text()
    for pattern in ('glob("launch/*.py")', 'glob("config/*.yaml")', 'glob("urdf/*.xacro")'):
        assert pattern in text
    assert console_scripts()["sim_node"] == "robot_dynamics.nodes.sim_node:main"


# ---------------------------------------------------------------------------------------------
# config files
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_yaml_is_ros_parameters(path):
    doc = load_yaml(path)
    if path.name.endswith(NOT_NODE_PARAMS):
        pytest.skip("DH table (model description), not node parameters")
    assert isinstance(doc, dict) and doc
    for node, section in doc.items():
        assert isinstance(node, str) and node
        assert isinstance(section, dict) and list(section) == ["ros__parameters"], \
            f"{path.name}: {node} must hold exactly ros__parameters"
        assert isinstance(section["ros__parameters"], dict)


def declared_controller_params(path):
    """A controller parameters file's parameters, each checked declared by the controller node with
    the type rclpy would accept."""
    specs = controller_specs()
    params = node_params(path)
    unknown = sorted(set(params) - set(specs))
    assert not unknown, f"{path.name}: parameters the controller node does not declare: {unknown}"
    for k, v in params.items():
        assert type_ok(specs[k], v), f"{path.name}: {k}={v!r} has the wrong type for {specs[k]!r}"
    return params


def controller_configs():
    return [(r, law) for r in sorted(LAUNCH_ROBOTS) for law in CONTROLLERS]


@pytest.mark.parametrize("robot,law", controller_configs())
def test_controller_config(robot, law):
    params = declared_controller_params(ROOT / "config" / f"{robot}_{law}.yaml")
    assert params["controller"] == law
    # law gains only for this law
    other = [k for k in params if k.split(".")[0] in CONTROLLERS and not k.startswith(law + ".")]
    assert not other, f"{path.name}: gains of another law {other}"
    model = robot_model(robot)
    assert params["joints"] == model.joint_names
    n = model.nv
    for k, v in params.items():
        if isinstance(v, list) and k not in ("joints",) and all(isinstance(x, float) for x in v):
            assert len(v) in (1, n), f"{k}: 1 or {n} values"
            assert all(np.isfinite(v)) and min(v) >= 0.0, k
    if law == "cartesian_impedance":
        model.check_frame(params["cartesian_impedance.frame"])


@pytest.mark.parametrize("prefix,law", [(p, law) for p in ("fr3", "panda_franka") for law in CONTROLLERS])
def test_franka_controller_config(prefix, law):
    """config/<fr3|panda_franka>_<law>.yaml (the Franka bridge's and its controller's): every parameter
    declared by the controller with its type, the law's own, gravity left to the robot; the joint laws
    (those ~/identify_dynamics runs under) identify all base parameters, since the Franka's published
    URDF inertials are not the arm's (doc/identification.md)."""
    path = ROOT / "config" / f"{prefix}_{law}.yaml"
    params = declared_controller_params(path)
    assert params["controller"] == law and params[f"{law}.compensate_gravity"] is False
    if law in ("joint_impedance", "computed_torque"):
        assert params["dynamics_id.inertial"] is True, path.name


def test_dynamics_params_file(tmp_path):
    """The launch files' `dynamics:=` file (robot_dynamics.nodes.processes.dynamics_params_file): what
    the identification writes is taken (its absolute path, loaded over the law's config); a missing,
    unreadable or non-parameters file stops the launch with an error naming it; empty: nothing."""
    from robot_dynamics.dynamics import identification as idn
    from robot_dynamics.nodes.processes import dynamics_params_file
    assert dynamics_params_file("") == []
    out = idn.write_params_yaml(tmp_path / "fr3_dynamics.yaml",
                                {"armature": [0.1] * 7, "joint_impedance.friction_coulomb": [0.5] * 7},
                                comment="Ia ... written")
    assert dynamics_params_file(str(out)) == [str(out)]
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert dynamics_params_file("fr3_dynamics.yaml") == [str(out)]
    finally:
        os.chdir(cwd)
    bad = {"missing.yaml": None, "broken.yaml": "a: [1, 2\n", "list.yaml": "- 1\n- 2\n",
           "flat.yaml": "joint_impedance.friction_coulomb: [0.5]\n", "empty.yaml": "",
           "no_params.yaml": "/**:\n  friction: 1\n"}
    for name, text in bad.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(RuntimeError, match=rf"dynamics:=.*{name}"):
            dynamics_params_file(str(tmp_path / name))


@pytest.mark.parametrize("robot", sorted(LAUNCH_ROBOTS))
def test_sim_config(robot):
    params = node_params(ROOT / "config" / f"sim_{robot}.yaml")
    unknown = sorted(set(params) - set(sim_node.PARAMETERS))
    assert not unknown, f"sim_{robot}.yaml: undeclared {unknown}"
    for k, v in params.items():
        assert type_ok(sim_node.PARAMETERS[k][0], v), f"{k}={v!r}"
    model = robot_model(robot)
    assert params["robot"] == LAUNCH_ROBOTS[robot]
    assert params["joints"] == model.joint_names
    q0 = np.array(params["initial_positions"])
    assert q0.shape == (model.nv,)
    assert np.all(q0 >= model.lower_limits) and np.all(q0 <= model.upper_limits)
    model.check_frame(params["ft_sensor_frame"])


@pytest.mark.parametrize("robot", sorted(LAUNCH_ROBOTS))
def test_ros2_controllers_config(robot):
    doc = load_yaml(ROOT / "config" / f"ros2_controllers_{robot}.yaml")
    cm = doc["controller_manager"]["ros__parameters"]
    assert isinstance(cm["update_rate"], int) and cm["update_rate"] > 0
    assert cm["joint_state_broadcaster"]["type"] == "joint_state_broadcaster/JointStateBroadcaster"
    assert cm["effort_controller"]["type"] == "effort_controllers/JointGroupEffortController"
    joints = doc["effort_controller"]["ros__parameters"]["joints"]
    assert joints == robot_model(robot).joint_names
    # the controller configs command the same joints, in the same order, on the same topic
    for law in CONTROLLERS:
        p = node_params(ROOT / "config" / f"{robot}_{law}.yaml")
        assert p["joints"] == joints
        assert p["command_topic"] == "/effort_controller/commands"


# ---------------------------------------------------------------------------------------------
# Gazebo description
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("robot", sorted(LAUNCH_ROBOTS))
def test_gz_ros2_control_description(robot):
    model = robot_model(robot)
    sim = node_params(ROOT / "config" / f"sim_{robot}.yaml")
    yaml_path = ROOT / "config" / f"ros2_controllers_{robot}.yaml"
    text = gz_ros2_control_urdf(model.urdf, sim["joints"], yaml_path, sim["initial_positions"])
    root = ET.fromstring(text)
    rc = root.find("ros2_control")
    assert rc.find("hardware/plugin").text == "gz_ros2_control/GazeboSimSystem"
    joints = rc.findall("joint")
    assert [j.get("name") for j in joints] == model.joint_names
    for j, emax, q0 in zip(joints, model.effort_limits, sim["initial_positions"]):
        ci = j.findall("command_interface")
        assert [c.get("name") for c in ci] == ["effort"]
        assert float(ci[0].find("param[@name='max']").text) == pytest.approx(emax)
        assert {s.get("name") for s in j.findall("state_interface")} == {"position", "velocity", "effort"}
        assert float(j.find("state_interface[@name='position']/param").text) == pytest.approx(q0)
    plugins = root.findall("gazebo/plugin")
    assert len(plugins) == 1, "one Gazebo plugin: classic gazebo_ros_control ones are removed"
    plugin = plugins[0]
    assert plugin.get("filename") == "gz_ros2_control-system"
    assert plugin.get("name") == "gz_ros2_control::GazeboSimROS2ControlPlugin"
    assert plugin.find("parameters").text == str(yaml_path)
    # welded to the world: exactly one root link, named world
    children = {j.find("child").get("link") for j in root.findall("joint")}
    roots = [lk.get("name") for lk in root.findall("link") if lk.get("name") not in children]
    assert roots == ["world"]
    # the same dynamics: the augmented URDF gives the same model (joints, limits, and M, g, RNEA at
    # random states from two independent Pinocchio builds; a weld that moved the base or changed an
    # inertia would show)
    import numpy as np
    from robot_dynamics.dynamics import Model, PinocchioBackend
    m2 = Model.from_urdf_string(text)
    assert m2.joint_names == model.joint_names
    for a in ("lower_limits", "upper_limits", "effort_limits", "velocity_limits"):
        np.testing.assert_array_equal(getattr(m2, a), getattr(model, a), err_msg=a)
    b1, b2 = PinocchioBackend(model), PinocchioBackend(m2)
    rng = np.random.default_rng(3)
    for _ in range(3):
        q = model.random_configuration(rng)
        v, acc = rng.standard_normal(model.nv), rng.standard_normal(model.nv)
        np.testing.assert_allclose(b2.rnea(q, v, acc), b1.rnea(q, v, acc), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(b2.gravity(q), b1.gravity(q), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(b2.mass_matrix(q), b1.mass_matrix(q), rtol=1e-12, atol=1e-12)


def test_xacro_macro_is_well_formed():
    root = ET.parse(ROOT / "urdf" / "gz_ros2_control.xacro").getroot()
    ns = "{http://www.ros.org/wiki/xacro}"
    macros = {m.get("name") for m in root.iter(f"{ns}macro")}
    assert {"rd_effort_joint", "rd_gz_ros2_control"} <= macros
    text = (ROOT / "urdf" / "gz_ros2_control.xacro").read_text()
    assert "gz_ros2_control/GazeboSimSystem" in text and "gz_ros2_control-system" in text
