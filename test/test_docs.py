"""The manual (doc/): it builds with warnings as errors, and its generated parameter tables hold every
parameter each node declares, with the type and default the node declares it with.

The oracle for the parameters is the running node, not the generator's sources: each node is created
in this process (rclpy, its own context, nothing spun) and asked what it declared
(`Node._parameters`: names, types, values).  The Franka bridge cannot be created without a robot, so
its constructor is stopped where it would connect (its declarations are all made before that) and its
`in_process` declarations are made by its own `_build_loop` on a Panda model.
"""
import os
import subprocess
import sys
import tempfile

import pytest

from robot_dynamics import doc_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "doc")
ROS_BUILTIN = ("use_sim_time", "start_type_description_service")   # rclpy declares them on every node
PANDA_ARM = [f"panda_joint{i}" for i in range(1, 8)]


def test_manual_builds_with_warnings_as_errors():
    """sphinx-build -W of doc/ (the API reference imports every module listed in doc/api.rst; a broken
    cross-reference, a missing page in a toctree, an unknown node in a param-table, a docstring that
    no longer imports: each is a warning, so an error here)."""
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                            "-d", os.path.join(out, "doctrees"), DOC, os.path.join(out, "html")],
                           cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, f"sphinx-build -W failed:\n{r.stdout[-4000:]}\n{r.stderr[-8000:]}"
        html = open(os.path.join(out, "html", "parameters.html")).read()
    # the generated tables are in the page: a name only the code knows, from each node
    for name in ("cartesian_impedance.force_axes", "brake_release_timeout", "cross_check_mass_tol",
                 "output_qos_depth"):
        assert f"param-{name.replace('.', '-').replace('_', '-')}" in html, name


# ------------------------------------------------------------------------------------------------
# what each node declares, asked of the node
# ------------------------------------------------------------------------------------------------
def _declared(node):
    """{name: (ROS type name, value)} of what the node declared, rclpy's own left out."""
    out = {}
    for name, p in node._parameters.items():
        if name in ROS_BUILTIN or name.startswith("qos_overrides."):
            continue
        out[name] = (doc_tables._TYPE_NAMES.get(p.type_.name, p.type_.name.lower()) if p.type_.name != "NOT_SET"
                     else None, p.value)
    return out


@pytest.fixture(scope="module")
def ctx():
    import rclpy
    from rclpy.context import Context
    c = Context()
    rclpy.init(context=c)
    yield c
    rclpy.try_shutdown(context=c)


def _params(**kw):
    from rclpy.parameter import Parameter
    return [Parameter(k, value=v) for k, v in kw.items()]


def _controller(ctx):
    from robot_dynamics.nodes.controller.node import TorqueControllerNode
    over = dict(autostart=False, robot="panda", joints=PANDA_ARM, joint_states_topic="/docs_test/joint_states",
                command_topic="/docs_test/commands")
    node = TorqueControllerNode("docs_test_controller", context=ctx, parameter_overrides=_params(**over))
    try:
        return _declared(node), set(over)
    finally:
        node.destroy_node()


def _sim(ctx):
    from robot_dynamics.nodes.sim_node import MujocoSimNode
    over = dict(joint_states_topic="/docs_test/sim_joint_states", command_topic="/docs_test/sim_commands",
                wrench_topic="/docs_test/wrench", publish_clock=False, publish_rate=10.0)
    node = MujocoSimNode("docs_test_sim", context=ctx, parameter_overrides=_params(**over))
    try:
        return _declared(node), set(over)
    finally:
        node.destroy_node()


def _echo(ctx):
    from robot_dynamics.nodes.echo_node import EchoNode
    over = dict(input_topic="/docs_test/echo_in", output_topic="/docs_test/echo_out")
    node = EchoNode("docs_test_echo", context=ctx, parameter_overrides=_params(**over))
    try:
        return _declared(node), set(over)
    finally:
        node.destroy_node()


class _Stop(Exception):
    pass


def _franka(ctx, monkeypatch):
    """The bridge's declarations up to its robot connection (a stand-in FrankaArm stops the constructor
    there), then those of its in_process control loop (`_build_loop` on a Panda model)."""
    from rclpy.node import Node
    from robot_dynamics.dynamics import Model
    from robot_dynamics.nodes import franka_bridge

    made = []
    real_declare = Node.declare_parameter

    def declare(self, *a, **kw):
        if self not in made:
            made.append(self)
        return real_declare(self, *a, **kw)

    def no_robot(*a, **kw):
        raise _Stop

    monkeypatch.setattr(Node, "declare_parameter", declare)
    monkeypatch.setattr(franka_bridge.fh, "FrankaArm", no_robot)
    over = dict(mode="in_process", joints=PANDA_ARM, controller="joint_impedance")
    with pytest.raises(_Stop):
        franka_bridge.FrankaBridge("docs_test_franka", context=ctx, parameter_overrides=_params(**over))
    (node,) = made
    try:
        # the robot side without an arm (hardware/franka_loop.py): the model as the cross-check would
        # have loaded it, then the in-process loop it builds (its parameters declared on the node)
        from robot_dynamics.hardware.franka_loop import FrankaLoop
        given = {k: v.value for k, v in node._parameter_overrides.items() if k in node._loop_specs}
        node.robot = FrankaLoop(node.p, node, loop_params=given, arm=object())
        node.mode = node.robot.mode
        node._in_process_init()                     # the action's parameters (franka_in_process.py)
        node.robot.model = Model.from_robot("panda")
        node.robot.build_loop()
        return _declared(node), set(over)
    finally:
        Node.destroy_node(node)                     # the bridge's own cleanup: nothing of it was started


NODES = {"controller_node": _controller, "sim_node": _sim, "echo_node": _echo, "franka_bridge": _franka}


def _value_text(value):
    return doc_tables.default_text(list(value) if hasattr(value, "typecode") else value)


@pytest.mark.parametrize("node", sorted(NODES))
def test_every_declared_parameter_is_in_the_generated_table(node, ctx, monkeypatch):
    args = (ctx, monkeypatch) if node == "franka_bridge" else (ctx,)
    declared, overridden = NODES[node](*args)
    rows = doc_tables.rows(node)
    by_name = {r.name: r for r in rows}
    assert len(declared) > 5, declared
    missing = sorted(n for n in declared if not doc_tables.covers(rows, n))
    assert not missing, f"{node} declares parameters its manual table does not list: {missing}"
    wrong = []
    for name, (type_name, value) in declared.items():
        r = by_name.get(name)
        if r is None:                                  # a <joint> pattern row
            continue
        if type_name is not None and r.type != type_name:
            wrong.append(f"{name}: table type {r.type}, declared {type_name}")
        if name in overridden:
            continue
        shown = "(not set)" if type_name is None else _value_text(value)
        if r.default != shown:
            wrong.append(f"{name}: table default {r.default}, declared {shown}")
    assert not wrong, f"{node}: " + "; ".join(wrong)


def test_pattern_rows_cover_only_their_pattern():
    """`constraints.<joint>.goal` covers constraints.panda_joint1.goal, not constraints.goal_time."""
    rows = doc_tables.rows("controller_node")
    assert doc_tables.covers(rows, "constraints.panda_joint1.goal")
    assert doc_tables.covers(rows, "constraints.panda_joint1.trajectory")
    assert not doc_tables.covers(rows, "constraints..goal")
    assert not doc_tables.covers(rows, "constraints.panda_joint1.speed")
    assert not doc_tables.covers(rows, "no_such_parameter")


def test_readme_is_the_entry_and_history_stays_out_of_the_manual():
    """The README stays an entry page (at most about 300 lines, the two commands in it), and no dated
    measurement history (a date, a short commit hash, an issue number) is in it or in the manual's
    pages but the benchmarks page (the history is in CHANGELOG.rst)."""
    import glob
    import re
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert len(readme.splitlines()) <= 300
    assert "./run.sh demo" in readme and "./run.sh test" in readme
    dated = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\bissue \d+|\bat [0-9a-f]{7}\b|\([0-9a-f]{7}\)")
    pages = [os.path.join(ROOT, "README.md")] + [p for p in glob.glob(os.path.join(DOC, "*.md"))
                                                  if not p.endswith("benchmarks.md")]
    found = []
    for p in pages:
        for i, line in enumerate(open(p).read().splitlines(), 1):
            if dated.search(line):
                found.append(f"{os.path.relpath(p, ROOT)}:{i}: {line.strip()[:100]}")
    assert not found, "dated history outside the benchmarks page:\n" + "\n".join(found)
