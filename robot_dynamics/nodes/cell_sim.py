"""The sim node with several arms (`arms` parameter): one MuJoCo world (sim/cell_world.py), one physics
step for all, each arm with its own ros2_control-like interface under its namespace.

    ros2 run robot_dynamics sim_node --ros-args -p arms:="[left, right]"
    ros2 launch robot_dynamics cell.launch.py arms:=2          # + one controller per arm

`sim_node` runs this node instead of the one-arm MujocoSimNode when the `arms` parameter is given
(on the command line or in a parameters file: `wants_cell`); the one-arm node is unchanged.

Per arm `<ns>` (each a namespace name from `arms`):
  publishes   /<ns>/joint_states                 sensor_msgs/JointState (position, velocity, applied effort)
              /<ns>/robot_description            std_msgs/String (transient local): that arm's URDF
  subscribes  /<ns>/effort_controller/commands   std_msgs/Float64MultiArray, efforts in `<ns>.joints` order
and for the cell:
  publishes   /clock                             rosgraph_msgs/Clock (simulated time)
              box_pose_topic (/cell/box_pose)    geometry_msgs/PoseStamped of the box (frame `world`)
  services    ~/reset                            std_srvs/Trigger: every arm and the box back to the start

Parameters (per arm, `<ns>.` prefixed): robot / urdf_path / robot_description (the model, as sim_node's),
joints (message order; default model order), initial_positions (`joints` order; default: the robot's
home pose), base_xyz [m] and base_rpy [rad] (the root link's pose in the world; default: the arms in
facing pairs, arm 2k at x = -0.55 m and 2k+1 at x = +0.55 m turned by pi, both at y = 1.2 k m: two arms
are the shipped two-Panda cell), collision_radius (link capsules, m).  The cell's: table / box (bool)
and their geometry, no_slip (MuJoCo's no-slip iterations, for a carry), and every timing / command-handling parameter of sim_node with the same meaning
(dt, real_time_factor, integrator, publish_rate, max_catchup, spin_wait, sim_time_origin,
bad_command_policy, command_timeout, stop_*, hold_until_first_command, brake_*, damping, friction,
armature, effort_limits, diagnostics_period, rt_*).

Each arm is handled as the one-arm node handles its arm, independently of the others: bad commands
rejected (warned, last good held or zero), efforts clamped at the URDF limits, brakes at start-up
until its controller's command has settled, and a command timeout (its controller died) brakes that
arm to rest and holds it there while the other arms go on.

Timing as sim_node's: one physics thread (a control path, nodes/control_path.py) paced by the wall
clock; it waits on every arm's command subscription and takes each command when it arrives (the newest of
each arm: a JointGroupEffortController keeps the latest), so every command that arrived before a
cycle applies in it.  Outputs are preallocated serialized messages (nodes/cdr.py).
"""
import math
import os
import sys
import threading
import time

import numpy as np
import yaml
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger

from .. import realtime
from .cdr import CDR_LE, ClockWriter, JointStateWriter, _a8, _string, _Writer
from .common import command_values
from .control_path import ControlPath, TakeSubscription
from ..sim.cell_carry import no_slip
from .sim_node import HOME, PARAMETERS as SIM_PARAMETERS, Paced, load_model

# the sim_node parameters that mean the same here (the cell's physics and every arm's command handling)
SHARED = ("dt", "real_time_factor", "integrator", "publish_rate", "max_catchup", "spin_wait",
          "sim_time_origin", "publish_clock", "bad_command_policy", "command_timeout",
          "stop_time_constant", "stop_rest_speed", "hold_until_first_command", "brake_release_tolerance",
          "brake_settle_time", "brake_release_timeout", "damping", "friction", "armature",
          "effort_limits", "diagnostics_period") + tuple(p[0] for p in realtime.PARAMS)
PARAMETERS = {k: SIM_PARAMETERS[k] for k in SHARED}
PARAMETERS.update({
    "arms": (Parameter.Type.STRING_ARRAY, "arm namespaces, e.g. [left, right]: one arm per name"),
    "table": (True, "a table between the first pair of arms (sim/cell_world.py TableSpec)"),
    "table_top": (0.1, "[m] height of the table top"),
    "table_size": ([0.5, 0.8], "[m] x, y extent of the table top"),
    "box": (True, "a free box on the table (its pose on box_pose_topic)"),
    "box_size": ([0.3, 0.3, 0.3], "[m] edge lengths of the box"),
    "box_mass": (1.0, "[kg] box mass (uniform solid)"),
    "box_pose_topic": ("/cell/box_pose", "geometry_msgs/PoseStamped of the box (frame world)"),
    "box_pose_rate": (1000.0, "[Hz] box pose rate (at most publish_rate)"),
    "no_slip": (0, "MuJoCo's no-slip iterations for a box held by friction (sim/cell_carry.py no_slip: "
                   "with the elliptic cone and impratio 10; a two-hand carry's box does not creep down the "
                   "grasp); 0: MuJoCo's defaults (soft pyramidal friction, the cheaper step)"),
    "stats_file": ("", "measurement (bench/cell_scale.py): at shutdown write per arm, as .npz, the "
                       "monotonic and wall time of every joint state published with the arm's joint "
                       "positions (model order) and error from its initial pose, and every command's receipt time and latency from the newest "
                       "state before it; '': off"),
    "stats_capacity": (120000, "states (and commands) recorded per arm at most, for stats_file"),
})
# per arm, under "<ns>.": name -> (default, description)
ARM_PARAMETERS = {
    "robot": ("panda", "example-robot-data name"),
    "urdf_path": ("", "URDF file; overrides robot"),
    "robot_description": ("", "URDF text; overrides urdf_path and robot"),
    "joints": (Parameter.Type.STRING_ARRAY, "message joint order (default: model order)"),
    "initial_positions": (Parameter.Type.DOUBLE_ARRAY, "start configuration, `joints` order"),
    "base_xyz": (Parameter.Type.DOUBLE_ARRAY, "[m] root link position in the world (default: facing pairs)"),
    "base_rpy": (Parameter.Type.DOUBLE_ARRAY, "[rad] root link roll-pitch-yaw in the world"),
    "collision_radius": (0.06, "[m] link capsules for contacts; 0: none"),
}
PAIR_HALF_SEPARATION = 0.55
PAIR_PITCH = 1.2


def default_base(i):
    """Arm i's default base pose (xyz, rpy): facing pairs along x, pairs 1.2 m apart along y."""
    k, side = divmod(i, 2)
    return ([(-1 if side == 0 else 1) * PAIR_HALF_SEPARATION, PAIR_PITCH * k, 0.0],
            [0.0, 0.0, 0.0 if side == 0 else math.pi])


class _ParamsLoader(yaml.SafeLoader):
    """Safe YAML, plus the !!python/tuple tag launch_ros writes for a list given in a launch file."""


_ParamsLoader.add_constructor("tag:yaml.org,2002:python/tuple",
                              lambda loader, node: loader.construct_sequence(node))


def wants_cell(args):
    """True when the ROS arguments give the sim node an `arms` parameter: `-p arms:=...` or a
    parameters file with `arms` for this node (any node key: the files use `/**`)."""
    args = list(args or [])
    if "--ros-args" not in args:
        return False
    for i, a in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if a in ("-p", "--param") and (nxt.startswith("arms:=") or ":arms:=" in nxt):
            if nxt.split(":=", 1)[1].strip() not in ("", "[]"):
                return True
        if a == "--params-file" and nxt and os.path.isfile(nxt):
            try:
                with open(nxt) as f:
                    doc = yaml.load(f, Loader=_ParamsLoader) or {}
            except (OSError, yaml.YAMLError):
                continue
            for entry in (doc.values() if isinstance(doc, dict) else []):
                params = (entry or {}).get("ros__parameters", {}) if isinstance(entry, dict) else {}
                if isinstance(params, dict) and params.get("arms"):
                    return True
    return False


class PoseStampedWriter(_Writer):
    """A serialized geometry_msgs/PoseStamped: set_stamp, .pose (7: position x y z, orientation
    x y z w): a header, then the 7 doubles aligned to 8 (the layout of cdr.WrenchStampedWriter)."""

    def __init__(self, frame_id=""):
        self.buf = bytearray(CDR_LE + b"\x00\x00" + bytes(8))
        self._grow(_string(frame_id, len(self.buf)))
        self._grow(bytes(_a8(len(self.buf)) - len(self.buf)))
        at = len(self.buf)
        self._grow(bytes(56))
        self.pose = self._view(at, 7)


class _Arm:
    """One arm's interface and command handling (as MujocoSimNode's for its one arm)."""

    def __init__(self, node, ns, view, joints, q0_model):
        self.node, self.ns, self.view = node, ns, view
        m = view.model
        self.model = m
        self.joints = joints
        self.n = len(joints)
        self.msg_to_model = np.array([joints.index(n) for n in m.joint_names])
        self.model_to_msg = np.array([m.joint_names.index(n) for n in joints])
        self.q0 = q0_model
        self.effort_max = view.effort_max
        self.cmd = np.zeros(self.n)          # model order
        self.cmd_time = None
        self.braked = bool(node.p["hold_until_first_command"])
        self.hold_q = q0_model
        self.stopping = self.timed_out = False
        self.first_nonzero = None
        self.settle_ref, self.settle_t = None, 0.0
        self.stats = {"commands": 0, "bad_commands": 0, "timeouts": 0}
        qos = QoSProfile(depth=10)
        self.pub_js = node.create_publisher(JointState, f"/{ns}/joint_states", qos)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self.pub_desc = node.create_publisher(String, f"/{ns}/robot_description", latched)
        self.pub_desc.publish(String(data=m.urdf))
        self.sub = TakeSubscription(node, Float64MultiArray, f"/{ns}/effort_controller/commands", qos, raw=True)
        self.js = JointStateWriter(joints)
        self.rec = None
        if node.p["stats_file"]:
            cap = int(node.p["stats_capacity"])
            self.rec = {"pub_t": np.zeros(cap), "err": np.zeros(cap), "cmd_t": np.zeros(cap),
                        "wall": np.zeros(cap), "q": np.zeros((cap, self.n)),
                        "lat": np.zeros(cap), "answered": np.zeros(cap, dtype=bool)}
            self.n_pub = self.n_cmd = 0
            self.answered_last = True

    # the physics thread
    def on_command(self, raw, now, last=True):
        self.stats["commands"] += 1
        r = self.rec
        if r is not None and self.n_pub and self.n_cmd < len(r["cmd_t"]):
            # the command answers the newest state published before it (first command after it only)
            r["cmd_t"][self.n_cmd] = now
            r["lat"][self.n_cmd] = now - r["pub_t"][self.n_pub - 1]
            self.n_cmd += 1
            if not self.answered_last:
                self.answered_last = True
                r["answered"][self.n_pub - 1] = True
        if not last:
            return
        u = command_values(raw)
        ok = u.shape == (self.n,) and math.isfinite(float(u.dot(u)))
        node = self.node
        released = False
        with node._lock:
            self.cmd_time = now
            if ok:
                if self.braked and not self.stopping and np.any(u):
                    released = self._brake_check(u)
                self.cmd = u[self.msg_to_model]
            else:
                self.stats["bad_commands"] += 1
                if node.policy == "zero":
                    self.cmd = np.zeros(self.n)
        if released:
            node.get_logger().info(f"{self.ns}: commands again: brakes released after the command-timeout stop")
        if not ok:
            node.get_logger().warning(
                f"{self.ns}: command rejected ({'length %d, expected %d' % (u.size, self.n) if u.size != self.n else 'non-finite value'}); "
                f"{'holding the last good command' if node.policy == 'hold' else 'commanding zero effort'}",
                throttle_duration_sec=1.0)

    def _brake_check(self, u):
        p = self.node.p
        now = time.monotonic()
        if self.first_nonzero is None:
            self.first_nonzero = now
        if self.settle_ref is None or np.max(np.abs(u - self.settle_ref)) >= p["brake_release_tolerance"]:
            self.settle_ref, self.settle_t = u.copy(), now
        elif now - self.settle_t >= p["brake_settle_time"]:
            self.braked = False
        if now - self.first_nonzero > p["brake_release_timeout"]:
            self.braked = False
        if not self.braked and self.timed_out:
            self.timed_out = False
            return True
        return False

    def command(self, now):
        """The effort to apply this cycle (model order), after the command-timeout check."""
        p = self.node.p
        with self.node._lock:
            cmd = self.cmd
            timeout = p["command_timeout"]
            timed_out = None
            if (timeout > 0 and self.cmd_time is not None and now - self.cmd_time > timeout
                    and not (self.braked or self.stopping)):
                self.stats["timeouts"] += 1
                self.stopping = self.timed_out = True
                self.first_nonzero = self.settle_ref = None
                timed_out = now - self.cmd_time
        if timed_out is not None:
            self.node.get_logger().warning(
                f"{self.ns}: no command for {timed_out:.3f} s (command_timeout {timeout} s): "
                f"braking the arm to rest and holding it there")
        if self.stopping:
            cmd = self.view.braking_torque(p["stop_time_constant"])
        return np.clip(cmd, -self.effort_max, self.effort_max)

    def after_step(self):
        if self.stopping and np.max(np.abs(self.view.v)) < self.node.p["stop_rest_speed"]:
            with self.node._lock:
                self.stopping, self.braked = False, True
                self.hold_q = self.view.q
        if self.braked:             # brakes on: the arm stays where they hold it
            d = self.view.world.d
            d.qpos[self.view.qadr] = self.hold_q
            d.qvel[self.view.dadr] = 0.0
            return True
        return False

    def publish(self, sec, nsec):
        js, idx, d, v = self.js, self.model_to_msg, self.view.world.d, self.view
        js.set_stamp(sec, nsec)
        d.qpos[v.qadr].take(idx, out=js.position)
        d.qvel[v.dadr].take(idx, out=js.velocity)
        d.qfrc_actuator[v.dadr].take(idx, out=js.effort)
        self.pub_js.publish(js.bytes())
        r = self.rec
        if r is not None and self.n_pub < len(r["pub_t"]):
            r["pub_t"][self.n_pub] = time.monotonic()
            r["err"][self.n_pub] = np.max(np.abs(d.qpos[v.qadr] - self.q0))
            r["wall"][self.n_pub] = time.time()
            r["q"][self.n_pub] = d.qpos[v.qadr]
            self.n_pub += 1
            self.answered_last = False


class CellSimNode(Paced, Node):
    """Several simulated arms in one world on the ROS graph (see the module docstring)."""

    def __init__(self, node_name="mujoco_sim", **kwargs):
        super().__init__(node_name, **kwargs)
        for name, (default, _) in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = self.p = {}
        for name in PARAMETERS:
            try:
                p[name] = self.get_parameter(name).value
            except ParameterUninitializedException:
                p[name] = None
        names = [str(a).strip("/") for a in (p["arms"] or []) if str(a).strip("/")]
        if not names or len(set(names)) != len(names) or any("/" in a for a in names):
            raise ValueError(f"arms: expected distinct namespace names, got {p['arms']}")
        from ..sim.cell_world import ArmSpec, BoxSpec, CellWorld, TableSpec
        self.dt = float(p["dt"])
        if not (self.dt > 0 and p["real_time_factor"] > 0 and p["publish_rate"] > 0):
            raise ValueError("dt, real_time_factor and publish_rate must be positive")
        self.policy = str(p["bad_command_policy"])
        if self.policy not in ("hold", "zero"):
            raise ValueError("bad_command_policy must be 'hold' or 'zero'")
        if not (float(p["command_timeout"]) >= 0 and float(p["stop_time_constant"]) > 0
                and float(p["stop_rest_speed"]) > 0):
            raise ValueError("command_timeout must be >= 0, stop_time_constant and stop_rest_speed > 0")
        if p["sim_time_origin"] not in ("wall", "zero"):
            raise ValueError("sim_time_origin must be 'wall' or 'zero'")
        specs, arm_info = [], []
        for i, ns in enumerate(names):
            ap = {}
            for k, (default, _) in ARM_PARAMETERS.items():
                self.declare_parameter(f"{ns}.{k}", default)
                try:
                    ap[k] = self.get_parameter(f"{ns}.{k}").value
                except ParameterUninitializedException:
                    ap[k] = None
            joints = [j for j in (ap["joints"] or []) if j]
            model = load_model(ap["robot"], ap["urdf_path"], ap["robot_description"], None, joints)
            joints = joints or list(model.joint_names)
            if sorted(joints) != sorted(model.joint_names) or len(set(joints)) != len(joints):
                raise ValueError(f"{ns}.joints {joints}: must list every joint of the model {model.joint_names}")
            q0 = list(ap["initial_positions"] or [])
            if len(q0) == len(joints):
                q0m = np.asarray(q0, float)[[joints.index(n) for n in model.joint_names]]
            elif not q0:
                home = HOME.get(ap["robot"]) if not (ap["urdf_path"] or ap["robot_description"]) else None
                q0m = np.asarray(home, float) if home is not None and len(home) == len(joints) else \
                    np.clip(np.zeros(len(joints)), model.lower_limits, model.upper_limits)
            else:
                raise ValueError(f"{ns}.initial_positions: expected {len(joints)} values in `joints` order")
            xyz0, rpy0 = default_base(i)
            xyz = list(ap["base_xyz"] or xyz0)
            rpy = list(ap["base_rpy"] or rpy0)
            if len(xyz) != 3 or len(rpy) != 3 or not np.all(np.isfinite(xyz + rpy)):
                raise ValueError(f"{ns}.base_xyz / base_rpy: 3 finite numbers each")
            specs.append(ArmSpec(ns, model, pos=tuple(xyz), rpy=tuple(rpy), initial_positions=q0m,
                                 damping=float(p["damping"]), friction=float(p["friction"]),
                                 armature=float(p["armature"]), effort_limits=bool(p["effort_limits"]),
                                 collision_radius=float(ap["collision_radius"])))
            arm_info.append((ns, joints, q0m))
        table = TableSpec(size=tuple(p["table_size"]), top=float(p["table_top"])) if p["table"] else None
        box = BoxSpec(size=tuple(p["box_size"]), mass=float(p["box_mass"])) if p["box"] else None
        self.world = CellWorld(specs, table=table, box=box, dt=self.dt, integrator=str(p["integrator"]))
        if int(p["no_slip"]) < 0:
            raise ValueError(f"no_slip: expected >= 0 iterations, got {p['no_slip']}")
        if int(p["no_slip"]):
            no_slip(self.world, int(p["no_slip"]))

        self._lock = threading.Lock()
        self._pending_reset = False
        self.t0 = time.time() if p["sim_time_origin"] == "wall" else 0.0
        self.arms = [_Arm(self, ns, self.world.arm(ns), joints, q0m) for ns, joints, q0m in arm_info]
        qos = QoSProfile(depth=10)
        self.pub_clock = self.create_publisher(Clock, "/clock", qos) if p["publish_clock"] else None
        self._clock_out = ClockWriter()
        self.pub_box = None
        if box is not None:
            self.pub_box = self.create_publisher(PoseStamped, str(p["box_pose_topic"]), qos)
            self._box_out = PoseStampedWriter("world")
            self._box_every = max(1, int(round(float(p["publish_rate"]) / float(p["box_pose_rate"]))))
            self._box_count = 0
        self.create_service(Trigger, "~/reset", self._on_reset)
        self.stats = {"cycles": 0, "steps": 0, "slips": 0}
        self.rt_report = None
        self._gc_ctl = realtime.GcControl(realtime.Settings())
        if float(p["diagnostics_period"]) > 0:
            self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
            self.create_timer(float(p["diagnostics_period"]), self._publish_diagnostics)
        first = self.arms[0]
        self._path = ControlPath(self, first.sub, first.on_command, self._cycle, self._on_path_error,
                                 name="cell_sim", spin=float(p["spin_wait"]),
                                 extra=[(a.sub, a.on_command) for a in self.arms[1:]], wait_extra=True)
        self._rtf = float(p["real_time_factor"])
        self._period = max(1.0 / float(p["publish_rate"]), self.dt / self._rtf)
        self._max_catchup = int(p["max_catchup"])
        self._wall0 = self._next_wake = time.monotonic()
        self._steps0 = self._steps = 0
        self._path.wake_at(self._next_wake)
        self._path.start()
        self.get_logger().info(
            f"simulating a cell of {len(self.arms)} arms ({', '.join(names)}) dt={self.dt} s "
            f"rtf={p['real_time_factor']} publish {p['publish_rate']} Hz on /<arm>/joint_states; commands "
            f"on /<arm>/effort_controller/commands; table {'on' if table else 'off'}, box "
            f"{'on ' + str(p['box_pose_topic']) if box else 'off'}")

    apply_realtime = None       # set below (the one-arm node's method, same parameters)

    def _on_path_error(self, where, e):
        self.get_logger().error(f"physics thread ({where}): {type(e).__name__}: {e}", throttle_duration_sec=1.0)

    def _on_reset(self, request, response):
        with self._lock:
            self._pending_reset = True
        response.success, response.message = True, "arms and box reset to their initial poses"
        return response

    def _publish_diagnostics(self):
        status = []
        for a in self.arms:
            stopped = a.stopping or (a.braked and a.timed_out)
            st = DiagnosticStatus(name=f"{self.get_name()}: {a.ns}", hardware_id=a.model.name,
                                  level=DiagnosticStatus.WARN if stopped else DiagnosticStatus.OK,
                                  message=(f"command timeout ({a.stats['timeouts']}): "
                                           f"{'braking' if a.stopping else 'holding'}") if stopped else "ok")
            kv = [(k, str(v)) for k, v in {**self.stats, **a.stats}.items()] + [
                ("brakes", "on" if a.braked else "off"), ("sim_time", f"{self.world.t:.3f}")]
            st.values = [KeyValue(key=k, value=v) for k, v in kv]
            status.append(st)
        arr = DiagnosticArray(status=status)
        arr.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(arr)

    # ---- physics thread ----
    def _cycle(self, now):
        target = self._steps0 + int((now - self._wall0) * self._rtf / self.dt)
        n = target - self._steps
        if n <= 0:
            due = self._wall0 + (self._steps + 1 - self._steps0) * self.dt / self._rtf
            self._path.wake_at(max(due, now + 1e-6))
            return
        if n > self._max_catchup:
            self.stats["slips"] += 1
            self._wall0, self._steps0 = now, self._steps
            n = 1
        w = self.world
        with self._lock:
            reset, self._pending_reset = self._pending_reset, False
        if reset:
            t = w.t
            w.reset()
            w.d.time = t
            for a in self.arms:
                a.hold_q = a.q0
        for a in self.arms:
            w.d.ctrl[a.view.act] = a.command(now)
        w.step(n)
        if any([a.after_step() for a in self.arms]):
            import mujoco
            mujoco.mj_forward(w.m, w.d)
        self._stepped(n, now)
        self._wake_next()

    def sim_time(self):
        return self.t0 + self.world.t

    def _publish(self):
        sec, nsec = self._publish_clock()
        for a in self.arms:
            a.publish(sec, nsec)
        if self.pub_box is not None:
            self._box_count += 1
            if self._box_count >= self._box_every:
                self._box_count = 0
                p, qx = self.world.box_pose()
                self._box_out.set_stamp(sec, nsec)
                self._box_out.pose[:3] = p
                self._box_out.pose[3:] = qx
                self.pub_box.publish(self._box_out.bytes())

    def write_stats(self):
        path = self.p["stats_file"]
        if not path:
            return
        out = {}
        for a in self.arms:
            r = a.rec
            out.update({f"{a.ns}.pub_t": r["pub_t"][:a.n_pub], f"{a.ns}.err": r["err"][:a.n_pub],
                        f"{a.ns}.answered": r["answered"][:a.n_pub], f"{a.ns}.cmd_t": r["cmd_t"][:a.n_cmd],
                        f"{a.ns}.lat": r["lat"][:a.n_cmd], f"{a.ns}.wall": r["wall"][:a.n_pub],
                        f"{a.ns}.q": r["q"][:a.n_pub]})
        np.savez(path, **out)

    def destroy_node(self):
        self.stop()
        try:
            self.write_stats()
        except OSError as e:
            print(f"[mujoco_sim] stats_file: {e}", file=sys.stderr)
        msg = f"stopped: {self.stats} " + " ".join(f"{a.ns}={a.stats}" for a in self.arms) + \
            f" sim time {self.world.t:.3f} s"
        if self.context.ok():
            self.get_logger().info(msg)
        else:
            print(f"[mujoco_sim] {msg}", file=sys.stderr)
        return super().destroy_node()


def _apply_realtime(self):
    from .sim_node import MujocoSimNode
    return MujocoSimNode.apply_realtime(self)


CellSimNode.apply_realtime = _apply_realtime
