"""Every node's parameter table, generated from the specs the node declares and validates with (one
source, as generate_parameter_library documents a C++ controller's parameters).  The manual's
parameter pages are built from here (doc/_ext/param_tables.py); `test/test_docs.py` starts each node
and checks that every parameter it declares is in its table, with the type and default shown.

    python -m robot_dynamics.doc_tables [NODE]        # Markdown tables (all nodes, or one)

One public function per node returns its specs (`NODE_SPECS[node]()`); each reads the node's own
table, so a spec added to a node appears here with nothing else to change:

=================  ============================================================================
controller_node    ``nodes.controller.params.all_param_specs()`` (the control loop's
                   ``control.params`` specs + the node's own) and the per-joint
                   ``constraints.<joint>.*`` of ``nodes.follow_joint_trajectory.joint_constraint_specs``
sim_node           ``nodes.sim_node.PARAMETERS``
franka_bridge      ``nodes.franka_bridge.PARAMETERS``; in ``mode: in_process`` also every
                   ``control.params.loop_param_specs()`` parameter (the controller's loop)
echo_node          ``nodes.echo_node.PARAMETERS``
=================  ============================================================================
"""
import sys
from dataclasses import dataclass

# ROS types by the names `ros2 param describe` uses
_TYPE_NAMES = {"BOOL": "bool", "INTEGER": "int", "DOUBLE": "double", "STRING": "string",
               "BOOL_ARRAY": "bool[]", "INTEGER_ARRAY": "int[]", "DOUBLE_ARRAY": "double[]",
               "STRING_ARRAY": "string[]", "BYTE_ARRAY": "byte[]"}


@dataclass
class Row:
    """One row of a node's table.  `type` is the ROS parameter type the node declares it with
    (rclpy's, from the default), `default` its text ("(not set)": declared without a value, which
    then comes from elsewhere: the URDF, the law, the model), `read` when the node reads it
    (live, configure, start-up), `section` the group it is listed under."""
    name: str
    type: str
    default: str
    description: str
    read: str = ""
    section: str = ""


def ros_type_name(default):
    """The ROS parameter type a node declaring `default` gets (rclpy's inference, or the
    Parameter.Type given for a parameter declared without a value)."""
    from rclpy.parameter import Parameter
    t = default if isinstance(default, Parameter.Type) else Parameter.Type.from_parameter_value(default)
    return _TYPE_NAMES.get(t.name, t.name.lower())


def default_text(default):
    from rclpy.parameter import Parameter
    if isinstance(default, Parameter.Type):
        return "(not set)"
    if isinstance(default, str):
        return repr(default)
    if isinstance(default, (list, tuple)):
        return "[" + ", ".join(repr(x) if isinstance(x, str) else str(x) for x in default) + "]"
    return str(default)


def _from_param_spec(s, section=""):
    """A nodes.common.ParamSpec -> Row (its description completed from its rules, as
    `ros2 param describe` shows them, but the 1-or-6 task-axis gains told as such)."""
    from .control.params import SIX_KEYS
    extra = []
    if s.choices:
        extra.append("one of " + ", ".join(s.choices))
    if s.check in ("per_joint", "per_joint_any") and s.law_key not in SIX_KEYS:
        extra.append("1 value (all joints) or one per joint in `joints` order")
    desc = s.description
    if s.law_key in SIX_KEYS:
        desc = desc.replace(" (1 or 6 values)", "") + " (1 value (all six axes) or 6 in [x y z rx ry rz] order)"
    if extra:
        desc += " (" + "; ".join(extra) + ")"
    read = "start-up" if s.startup else "live" if s.live else "read-only" if s.read_only else "configure"
    return Row(s.name, ros_type_name(s.default), default_text(s.default), desc, read, section)


def _section_of(name):
    head = name.split(".", 1)[0]
    if "." not in name:
        return "general" if not name.startswith("rt_") else "real time (rt_*)"
    return head


# ------------------------------------------------------------------------------------------------
# one function per node
# ------------------------------------------------------------------------------------------------
def controller_node_specs():
    """The controller node's parameters (`TorqueControllerNode`): the control loop's and the node's
    own, then `constraints.<joint>.trajectory` / `.goal`, declared for each joint of `joints`."""
    from .nodes.controller.params import all_param_specs
    from .nodes.follow_joint_trajectory import joint_constraint_specs
    rows = [_from_param_spec(s, _section_of(s.name)) for s in all_param_specs()]
    rows += [_from_param_spec(s, "constraints") for s in joint_constraint_specs("<joint>")]
    return rows


def _table_rows(table, live=(), section_of=_section_of):
    return [Row(name, ros_type_name(default), default_text(default), desc,
                "live" if name in live else "start-up", section_of(name))
            for name, (default, desc) in table.items()]


def sim_node_specs():
    """The MuJoCo sim node's parameters (`MujocoSimNode`), all read at start-up."""
    from .nodes import sim_node
    return _table_rows(sim_node.PARAMETERS)


def franka_bridge_specs():
    """The Franka bridge's own parameters, then (declared in `mode: in_process` once the robot's
    model is read) every parameter of the control loop it runs, as the controller node has them."""
    from .control.params import loop_param_specs
    from .nodes import franka_bridge
    from .nodes.common import ros_param_spec
    rows = _table_rows(franka_bridge.PARAMETERS, live=franka_bridge.FrankaBridge.LIVE,
                       section_of=lambda n: "real time (rt_*)" if n.startswith("rt_") else "bridge")
    own = set(franka_bridge.PARAMETERS)
    for s in loop_param_specs():
        if s.name in own:
            continue
        r = _from_param_spec(ros_param_spec(s), "in_process: the control loop (" + _section_of(s.name) + ")")
        if s.name.endswith(".compensate_gravity"):     # FrankaLoop.build_loop forces it (and refuses true)
            r.default = "False"
            r.description += " (the bridge forces false: the Franka adds gravity itself; true is refused)"
        rows.append(r)
    # in_process: the FollowJointTrajectory action's parameters, as the controller node declares them
    from .nodes.follow_joint_trajectory import FJT_PARAMS, joint_constraint_specs
    have = {r.name for r in rows}
    rows += [_from_param_spec(s, "in_process: FollowJointTrajectory") for s in FJT_PARAMS if s.name not in have]
    rows += [_from_param_spec(s, "constraints") for s in joint_constraint_specs("<joint>")]
    return rows


def echo_node_specs():
    """The echo node's parameters (the latency floor of the benchmarks)."""
    from .nodes import echo_node
    return _table_rows(echo_node.PARAMETERS)


NODE_SPECS = {
    "controller_node": controller_node_specs,
    "sim_node": sim_node_specs,
    "franka_bridge": franka_bridge_specs,
    "echo_node": echo_node_specs,
}


def rows(node):
    """The rows of one node's table (KeyError naming the nodes for an unknown one)."""
    if node not in NODE_SPECS:
        raise KeyError(f"no parameter table for {node!r}; nodes: {', '.join(NODE_SPECS)}")
    return NODE_SPECS[node]()


def covers(table_rows, name):
    """True when `name` is a row of the table or matches a pattern row (`<joint>` stands for one
    joint name)."""
    for r in table_rows:
        if r.name == name:
            return True
        if "<joint>" in r.name:
            pre, post = r.name.split("<joint>", 1)
            if name.startswith(pre) and name.endswith(post) and len(name) > len(pre) + len(post):
                return True
    return False


def markdown(node):
    out = [f"### {node}", "", "| parameter | type | default | read | description |", "|---|---|---|---|---|"]
    for r in rows(node):
        desc = r.description.replace("|", "\\|")
        out.append(f"| `{r.name}` | {r.type} | `{r.default}` | {r.read} | {desc} |")
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    for node in (argv or list(NODE_SPECS)):
        print(markdown(node))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
