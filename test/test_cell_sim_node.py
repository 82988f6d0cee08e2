"""sim_node with `arms` (nodes/cell_sim.py) over DDS: a real child process and probes in this process.

Each arm has its own /<ns>/joint_states, /<ns>/effort_controller/commands and /<ns>/robot_description;
the box pose is published.  Oracles: Pinocchio's gravity torque of the Panda URDF (the arms' bases are
turned about z only, so gravity is along their z), the initial poses and box geometry set here."""
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from robot_dynamics.dynamics import PinocchioBackend  # noqa: E402
from robot_dynamics.nodes.probe import Probe  # noqa: E402
from robot_dynamics.nodes.processes import NodeProcesses  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.slow]

START_TIMEOUT = 40.0
Q_LEFT = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
Q_RIGHT = np.array([0.3, -0.6, 0.0, -2.2, 0.0, 1.6, 0.785])
# the right arm's wire order differs from the model's: the node maps by name per arm
RIGHT_WIRE = [f"panda_joint{i}" for i in (7, 6, 5, 4, 3, 2, 1)]
JOINTS = [f"panda_joint{i}" for i in range(1, 8)]
HOLD_TOL = 0.01             # rad: an arm under PD + its exact gravity torque stays within this ...
HOLD_TIME = 1.0              # s   ... for this long
KP = np.array([300.0, 300, 300, 300, 30, 30, 10])     # the PD bringing the arms back (wrists: light)
KD = np.array([30.0, 30, 30, 30, 2, 2, 0.5])
FALL_MIN = 0.2               # rad: an arm given half its gravity torque falls at least this far in that time


@pytest.fixture(scope="module")
def cell(ros, model, tmp_path_factory):
    procs = NodeProcesses(log_dir=tmp_path_factory.mktemp("cell_logs"))
    procs.start("robot_dynamics.nodes.sim_node", name="mujoco_sim",
                params={"arms": ["left", "right"], "publish_rate": 500.0,
                        "command_timeout": 0.0,      # (brakes on until each arm's command settles)
                        "left.initial_positions": Q_LEFT.tolist(),
                        # the bases 2.4 m apart: a falling arm reaches neither the box nor the other arm
                        "left.base_xyz": [-1.2, 0.0, 0.0], "right.base_xyz": [1.2, 0.0, 0.0],
                        "right.joints": RIGHT_WIRE,
                        "right.initial_positions": Q_RIGHT[[JOINTS.index(j) for j in RIGHT_WIRE]].tolist()})
    probes = {ns: Probe(joints=model.joint_names, name=f"probe_{ns}", joint_states_topic=f"/{ns}/joint_states",
                        command_topic=f"/{ns}/effort_controller/commands").start()
              for ns in ("left", "right")}
    box = {"msgs": []}
    pose_node = rclpy.create_node("box_probe")
    pose_node.create_subscription(PoseStamped, "/cell/box_pose", lambda m: box["msgs"].append(m), 10)
    try:
        for ns, p in probes.items():
            ok = p.wait_for(lambda p=p: p.q is not None, START_TIMEOUT, check=procs.check_alive)
            assert ok, f"no /{ns}/joint_states:\n" + "".join(procs.log(x) for x in procs.procs)
        yield procs, probes, pose_node, box
    finally:
        for p in probes.values():
            p.stop()
            p.destroy_node()
        pose_node.destroy_node()
        procs.stop_all()


def _send_until_applied(probe, wire_tau, model_tau):
    """Publish wire_tau (the arm's wire order) until the sim reports applying model_tau (its
    /<ns>/joint_states effort, mapped to model order by name by the probe)."""
    probe.publish_command(wire_tau)
    last = [time.monotonic()]

    def applied():
        if time.monotonic() - last[0] > 0.2:
            last[0] = time.monotonic()
            probe.publish_command(wire_tau)
        return probe.effort is not None and np.max(np.abs(probe.effort - model_tau)) < 1e-9
    assert probe.wait_for(applied, 10.0), "the sim did not apply the command"


def _reset(cell):
    """~/reset, then wait until both arms' states show them back at their initial poses."""
    from std_srvs.srv import Trigger
    procs, probes, node, _ = cell
    cli = node.create_client(Trigger, "/mujoco_sim/reset")
    try:
        assert cli.wait_for_service(timeout_sec=10.0)
        fut = cli.call_async(Trigger.Request())
        rclpy.spin_until_future_complete(node, fut, timeout_sec=10.0)
        assert fut.done() and fut.result().success
    finally:
        node.destroy_client(cli)


def test_each_arm_publishes_its_state_and_description(cell, model):
    """/left and /right joint states start at the initial poses given (right's in its own wire
    order), and each /<ns>/robot_description (transient local) is a Panda URDF with its joints."""
    from robot_dynamics.dynamics import Model
    procs, probes, node, _ = cell
    # (the brakes hold each arm at its initial pose until its controller's command has settled)
    assert np.max(np.abs(probes["left"].q - Q_LEFT)) < 1e-9
    assert np.max(np.abs(probes["right"].q - Q_RIGHT)) < 1e-9
    for ns in ("left", "right"):
        got = []
        qos = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
        sub = node.create_subscription(String, f"/{ns}/robot_description", lambda m: got.append(m.data), qos)
        t_end = time.monotonic() + 10
        while not got and time.monotonic() < t_end:
            rclpy.spin_once(node, timeout_sec=0.1)
        node.destroy_subscription(sub)
        assert got, f"no /{ns}/robot_description"
        assert Model.from_urdf_string(got[0]).joint_names == model.joint_names


def test_commands_reach_their_own_arm_only(cell, model):
    """PD + Pinocchio's gravity torque to the left arm holds it at its initial pose (within 10 mrad
    for 1 s) while the right arm, given half of its gravity torque, falls (> 0.2 rad); then the
    other way round.  A command
    routed to the wrong arm, or applied to both, fails one of the two."""
    procs, probes, _, _ = cell
    g = PinocchioBackend(model)
    perm = [JOINTS.index(j) for j in RIGHT_WIRE]          # model -> right's wire order
    wire = lambda ns, tau: tau[perm] if ns == "right" else tau          # noqa: E731
    q0 = {"left": Q_LEFT, "right": Q_RIGHT}
    for held, falling in (("left", "right"), ("right", "left")):
        ph, pf = probes[held], probes[falling]
        # both arms brought to rest at their initial poses by PD + gravity, streamed as a controller
        # does (the brakes open once an arm's command has settled)
        t0, settled = time.monotonic(), 0
        while settled < 20:                 # (20 passes in a row at rest there; up to 20 s)
            settled = 0 if time.monotonic() < t0 + 0.3 else settled + 1
            for ns, pr in probes.items():
                q, v = pr.snapshot()
                pr.publish_command(wire(ns, KP * (q0[ns] - q) - KD * v + g.gravity(q)))
                if np.max(np.abs(q - q0[ns])) > 0.01 or np.max(np.abs(v)) > 0.05:
                    settled = 0
            procs.check_alive()
            assert time.monotonic() < t0 + 20.0, "the arms did not come to rest at their initial poses"
            time.sleep(0.005)
        q_f = pf.q.copy()
        tau_f = 0.5 * g.gravity(q_f)
        t0 = time.monotonic()
        worst = 0.0
        while time.monotonic() < t0 + HOLD_TIME:
            q, v = ph.snapshot()
            ph.publish_command(wire(held, KP * (q0[held] - q) - KD * v + g.gravity(q)))
            pf.publish_command(wire(falling, tau_f))
            procs.check_alive()
            worst = max(worst, float(np.max(np.abs(q - q0[held]))))
            time.sleep(0.005)
        assert np.max(np.abs(pf.effort - tau_f)) < 1e-9
        assert worst < HOLD_TOL, f"{held} under its PD + gravity moved {worst:.4f} rad"
        assert np.max(np.abs(pf.q - q_f)) > FALL_MIN, f"{falling} given half its gravity did not fall"
        _reset(cell)


def test_box_pose_is_published(cell):
    """The box rests on the table: PoseStamped in frame world, centre 0.15 m above the 0.1 m top
    (within 2 mm), level."""
    procs, probes, node, box = cell
    box["msgs"].clear()
    t_end = time.monotonic() + 10
    while len(box["msgs"]) < 5 and time.monotonic() < t_end:
        rclpy.spin_once(node, timeout_sec=0.1)
    assert box["msgs"], "no /cell/box_pose"
    m = box["msgs"][-1]
    assert m.header.frame_id == "world"
    p, o = m.pose.position, m.pose.orientation
    assert abs(p.z - 0.25) < 2e-3 and abs(p.x) < 2e-3 and abs(p.y) < 2e-3
    assert abs(abs(o.w) - 1.0) < 1e-4


def test_bad_command_on_one_arm_is_rejected_the_other_unaffected(cell, model):
    """A command of the wrong length on /right: a warning in the log naming the arm, the right arm's
    last good command held, and the node keeps serving both arms."""
    procs, probes, _, _ = cell
    pr = probes["right"]
    before = pr.effort.copy()
    n_left = probes["left"].n_js
    pr.publish_command([1.0, 2.0, 3.0])
    sim = procs.procs[0]
    assert probes["left"].wait_for(lambda: "right: command rejected (length 3, expected 7)" in procs.log(sim),
                                   10.0, check=procs.check_alive)
    assert probes["left"].wait_for(lambda: probes["left"].n_js > n_left + 50, 10.0)
    assert np.max(np.abs(pr.effort - before)) < 1e-9


def test_pose_stamped_writer_matches_rclpy():
    """The box pose's preallocated bytes deserialise (rclpy) to the pose and stamp written."""
    from rclpy.serialization import deserialize_message
    from robot_dynamics.nodes.cell_sim import PoseStampedWriter
    w = PoseStampedWriter("world")
    w.set_stamp(12, 345)
    w.pose[:] = [0.1, -0.2, 0.3, 0.0, 0.6, 0.0, 0.8]
    m = deserialize_message(w.bytes(), PoseStamped)
    assert (m.header.frame_id, m.header.stamp.sec, m.header.stamp.nanosec) == ("world", 12, 345)
    p, o = m.pose.position, m.pose.orientation
    assert [p.x, p.y, p.z, o.x, o.y, o.z, o.w] == [0.1, -0.2, 0.3, 0.0, 0.6, 0.0, 0.8]


def test_wants_cell_reads_the_arms_parameter(tmp_path):
    """sim_node runs the cell node for `-p arms:=[...]` or a parameters file with `arms`, the one-arm
    node otherwise (the shipped config/sim_panda.yaml among them)."""
    from pathlib import Path
    from robot_dynamics.nodes.cell_sim import wants_cell
    f = tmp_path / "p.yaml"
    f.write_text("/**:\n  ros__parameters:\n    arms: [a, b]\n")
    shipped = Path(__file__).resolve().parents[1] / "config" / "sim_panda.yaml"
    assert wants_cell(["x", "--ros-args", "-p", "arms:=[a, b]"])
    assert wants_cell(["x", "--ros-args", "--params-file", str(f)])
    f.write_text("/**:\n  ros__parameters:\n    arms: !!python/tuple\n    - left\n    - right\n")
    assert wants_cell(["x", "--ros-args", "--params-file", str(f)])       # as launch_ros writes a list
    assert not wants_cell(["x", "--ros-args", "--params-file", str(shipped)])
    assert not wants_cell(["x", "--ros-args", "-p", "robot:=panda"])
    assert not wants_cell(["x"])


def test_shipped_cell_configs_declare_known_parameters():
    """config/cell_panda_sim.yaml sets only parameters the cell sim node declares (shared ones; the
    per-arm '<ns>.' ones are declared for the arms named), and config/cell_panda_controller.yaml only
    the controller's parameters, its topics each relative (resolved in the arm's namespace)."""
    from pathlib import Path
    import yaml
    from robot_dynamics.nodes.cell_sim import PARAMETERS as CELL
    from robot_dynamics.nodes.controller.params import all_param_specs
    root = Path(__file__).resolve().parents[1] / "config"
    sim = yaml.safe_load((root / "cell_panda_sim.yaml").read_text())["/**"]["ros__parameters"]
    assert set(sim) <= set(CELL), set(sim) - set(CELL)
    ctl = yaml.safe_load((root / "cell_panda_controller.yaml").read_text())["/**"]["ros__parameters"]

    def flat(d, prefix=""):                  # nested YAML groups -> the dotted ROS parameter names
        for k, v in d.items():
            yield from flat(v, f"{prefix}{k}.") if isinstance(v, dict) else [(prefix + k, v)]
    ctl = dict(flat(ctl))
    names = {s.name for s in all_param_specs()}
    assert set(ctl) <= names, set(ctl) - names
    topics = {k: v for k, v in ctl.items() if k.endswith("_topic")}
    assert len(topics) == 4 and all(not v.startswith("/") for v in topics.values()), topics
