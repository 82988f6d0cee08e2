"""The torque controller node: JointState (+ wrench, references) -> control law -> safety filter ->
effort command.  A thin rclpy adapter over robot_dynamics.control; one class, importable, so several
controllers can share one executor:

    ros2 run robot_dynamics controller_node --ros-args -p robot:=panda -p controller:=joint_impedance
    python -m robot_dynamics.nodes.controller_node --ros-args --params-file config/panda_joint_impedance.yaml

Lifecycle (rclpy.lifecycle): configure loads the model (the `robot_description` parameter, else the
/robot_description topic, else `urdf_path`, else `robot`), runs the backend self-check and builds the
backend, law, safety filter and wrench processor once; activate starts commanding (the law holds the
first valid state, the safety filter ramps from zero); deactivate publishes the safe command and
stops.  `autostart` (default true) configures and activates at start-up.

Interfaces: see TOPICS / SERVICES below and `PARAMS` (exported as a Markdown table by
`python -m robot_dynamics.nodes.controller_node --print-params`).

Controller state topic `~/state` (sensor_msgs/JointState), one message per control step:
    name     = the `joints` parameter
    position = the law's reference: q_d per joint (joint laws; the measured q for gravity
               compensation), or for cartesian_impedance the 7 numbers [x y z qx qy qz qw] of the
               desired pose of the controlled frame
    velocity = the law's error: q_d - q per joint, or for cartesian_impedance the 6 numbers
               [p_d - p; log3(R_d R^T)]
    effort   = the commanded torque (after the safety filter), as on command_topic
"""
import gc
import math
import signal
import sys
import threading
import time
from array import array
from collections import defaultdict

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory as JointTrajectoryMsg

from ..dynamics import Model, make_backend, self_check
from .common import (EXECUTORS, REJECT_REASONS, RELIABILITIES, JointStateMapper, ParamSpec, check_value,
                     declare_all, make_executor, make_qos, map_joint_values, param_value,
                     params_table_markdown, pose_to_rp, trajectory_arrays, wrench_to_array)

LAWS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")
T = Parameter.Type

# ------------------------------------------------------------------------------------------------
# parameters
# ------------------------------------------------------------------------------------------------
GENERAL_PARAMS = [
    ParamSpec("controller", "gravity_compensation", "control law", "choices", LAWS),
    ParamSpec("robot_description", "", "URDF text; empty: use the robot_description topic"),
    ParamSpec("robot_description_topic", "/robot_description",
              "std_msgs/String topic (TRANSIENT_LOCAL, as robot_state_publisher publishes it)", startup=True),
    ParamSpec("robot_description_timeout", 2.0,
              "autostart: seconds to wait for the robot_description topic before falling back to "
              "urdf_path / robot (waits indefinitely when neither is set)", "nonneg"),
    ParamSpec("urdf_path", "", "URDF file, used when no robot_description is available"),
    ParamSpec("robot", "", "example-robot-data robot name (e.g. panda), the last fallback"),
    ParamSpec("joints", T.STRING_ARRAY,
              "active joints = command order; other movable joints are locked at 0 (clamped into "
              "limits); not set: all movable joints of the model, in model order"),
    ParamSpec("backend", "pinocchio", "dynamics backend of the control laws", "choices",
              ("pinocchio", "reference")),
    ParamSpec("self_check_tolerance", 1e-9, "backend self-check tolerance at configure", "positive"),
    ParamSpec("autostart", True, "configure and activate at start-up (no lifecycle manager needed)",
              startup=True),
    ParamSpec("trigger", "joint_state", "what runs the control step", "choices", ("joint_state", "timer")),
    ParamSpec("update_rate", 1000.0, "control rate [Hz] when trigger is timer", "positive"),
    ParamSpec("joint_states_topic", "/joint_states", "sensor_msgs/JointState input"),
    ParamSpec("qos_reliability", "best_effort", "QoS reliability of the joint-state subscription",
              "choices", RELIABILITIES),
    ParamSpec("qos_depth", 1, "QoS history depth (KEEP_LAST) of the joint-state subscription", "positive"),
    ParamSpec("require_velocity", True,
              "reject joint states without velocities (false: an empty velocity field means zero)"),
    ParamSpec("wrench_topic", "/ft_sensor/wrench", "geometry_msgs/WrenchStamped input (F/T sensor)"),
    ParamSpec("sensor_frame", "", "F/T sensor frame; empty: header.frame_id of the wrench messages"),
    ParamSpec("tool_mass", 0.0, "mass of the tool beyond the sensor [kg], removed from the wrench", "nonneg"),
    ParamSpec("tool_com", [0.0, 0.0, 0.0], "tool centre of mass in the sensor frame [m]", "vec3"),
    ParamSpec("wrench_filter_cutoff_hz", 0.0, "low-pass cut-off of the wrench [Hz]; 0: no filter", "nonneg"),
    ParamSpec("wrench_deadband", [0.0, 0.0], "deadband on |force| [N] and |torque| [N m]", "vec2_nonneg"),
    ParamSpec("command_topic", "/effort_controller/commands",
              "std_msgs/Float64MultiArray output in `joints` order (ros2_control JointGroupEffortController)"),
    ParamSpec("output_qos_reliability", "reliable", "QoS reliability of the command publishers "
              "(command_topic, ~/joint_command)", "choices", RELIABILITIES),
    ParamSpec("output_qos_depth", 1, "QoS history depth (KEEP_LAST) of the command publishers", "positive"),
    ParamSpec("publish_joint_command", False, "also publish sensor_msgs/JointState efforts on ~/joint_command"),
    ParamSpec("publish_state", True, "publish ~/state (filled and sent only while it has subscribers; the "
              "subscriber count is checked every 0.1 s)", live=True),
    ParamSpec("watchdog_timeout", 0.1, "joint states older than this [s] -> the safe command", "positive",
              live=True),
    ParamSpec("safe_command", "zero", "command when the input is stale or invalid, and on deactivate: "
              "zero torque, or gravity compensation at the last valid position", "choices",
              ("zero", "gravity"), live=True),
    ParamSpec("effort_limits", T.DOUBLE_ARRAY, "torque limits [N m] in `joints` order; not set: the "
              "URDF's", "per_joint", live=True),
    ParamSpec("effort_scale", 1.0, "fraction (0, 1] of the effort limits actually allowed", "positive",
              live=True),
    ParamSpec("torque_rate_limit", 1000.0, "largest torque change per second [N m/s]", "positive", live=True),
    ParamSpec("ramp_time", 0.5, "torque ramp from zero on activation and after a watchdog trip [s]", "nonneg",
              live=True),
    ParamSpec("position_margin", 0.0, "distance to a position limit where a repulsive torque starts "
              "[rad | m]; 0: off", "nonneg", live=True),
    ParamSpec("position_stiffness", 0.0, "stiffness of that repulsive torque [N m/rad]", "nonneg", live=True),
    ParamSpec("velocity_damping", 0.0, "extra joint damping added by the safety filter [N m s/rad]",
              "nonneg", live=True),
    ParamSpec("diagnostics_period", 1.0, "period of /diagnostics [s]", "positive", startup=True),
    ParamSpec("executor", "single", "rclpy executor of main(): SingleThreadedExecutor, "
              "rclpy.experimental.EventsExecutor or MultiThreadedExecutor (the --multi-threaded flag = "
              "multi).  bench/latency.py at 1 kHz: events used 35 % of a core against 68-84 % for "
              "single, with p99 1.3x the echo floor instead of 1.5-2x; but the computed-torque system "
              "test failed in 2 of 2 fresh-clone CI runs with it (not understood yet), so single stays "
              "the default; multi was unstable", "choices", EXECUTORS, startup=True),
]

# law parameter keys: kind ('per_joint' nonneg vector, 'per_joint_any', 'vec6' nonneg, 'bool',
# 'double' nonneg, 'string', 'bool6') and description.  Defaults come from the law classes.
LAW_KEYS = {
    "compensate_gravity": ("bool", "add g(q) (false when the robot driver compensates gravity)"),
    "friction_compensation": ("bool", "add the friction model below"),
    "friction_viscous": ("per_joint", "viscous friction [N m s/rad]"),
    "friction_coulomb": ("per_joint", "Coulomb friction [N m]"),
    "friction_smoothing": ("positive", "tanh smoothing velocity of the Coulomb term [rad/s]"),
    "kp": ("per_joint", "position gain [1/s^2]; not set: omega^2"),
    "kd": ("per_joint", "velocity gain [1/s]; not set: 2 sqrt(kp) or 2 zeta omega"),
    "omega": ("double", "closed-loop natural frequency [rad/s] (when kp is not set)"),
    "zeta": ("double", "closed-loop damping ratio (when kd is not set)"),
    "k_gains": ("per_joint", "joint stiffness [N m/rad]"),
    "d_gains": ("per_joint", "joint damping [N m s/rad]; not set: damping_ratio-critical from M(q)"),
    "damping_ratio": ("double", "damping ratio used when d_gains is not set"),
    "coriolis_feedforward": ("bool", "add C(q, v) v"),
    "inertia_feedforward": ("bool", "add M(q) a_d"),
    "frame": ("string", "controlled frame; empty: the last frame of the model (the tool tip)"),
    "task.damping_ratio": ("double", "damping ratio of the task axes whose d_* is not set"),
    "nullspace_stiffness": ("per_joint", "posture stiffness in the null space [N m/rad]"),
    "nullspace_damping": ("per_joint", "posture damping [N m s/rad]; not set: critical"),
    "q_nullspace": ("per_joint_any", "posture [rad]; not set: the configuration at activation / hold"),
    "damped_pinv_lambda": ("double", "damping of the pseudo-inverse"),
    "force_axes": ("bool6", "task axes [x y z rx ry rz] under force control instead of stiffness"),
    "force_kp": ("vec6", "force-control proportional gain per task axis"),
    "force_ki": ("vec6", "force-control integral gain per task axis"),
    "force_integral_limit": ("double", "bound on the force integral term [N | N m]"),
    "max_pos_error": ("double", "clip the position error [m]; 0: no clipping"),
    "max_rot_error": ("double", "clip the rotation error angle [rad]; 0: no clipping"),
}
for _a in ("x", "y", "z"):
    LAW_KEYS[f"task.k_pos_{_a}"] = ("double", f"translational stiffness along {_a} [N/m]")
    LAW_KEYS[f"task.k_rot_{_a}"] = ("double", f"rotational stiffness about {_a} [N m/rad]")
    LAW_KEYS[f"task.d_pos_{_a}"] = ("double_opt", f"translational damping along {_a} [N s/m]; not set: critical")
    LAW_KEYS[f"task.d_rot_{_a}"] = ("double_opt", f"rotational damping about {_a} [N m s/rad]; not set: critical")


def law_param_specs():
    """`<law>.<key>` parameters for every law, typed from LAW_KEYS, defaults from the law classes."""
    from ..control.base import COMMON_DEFAULTS
    specs = []
    from ..control import LAW_CLASSES as classes
    for law in LAWS:
        cls = classes[law]
        defaults = dict(COMMON_DEFAULTS)
        defaults.update(cls.DEFAULTS)
        for key, dflt in defaults.items():
            kind, desc = LAW_KEYS.get(key, (None, key))
            if kind is None:                               # a key this node does not know: infer
                kind = ("bool" if isinstance(dflt, bool) else "double" if isinstance(dflt, (int, float))
                        else "string" if isinstance(dflt, str) else "per_joint_any")
            if kind == "bool":
                default, check = bool(dflt), None
            elif kind in ("double", "positive"):
                default, check = float(dflt), ("positive" if kind == "positive" else "nonneg")
            elif kind == "double_opt":
                default, check = (T.DOUBLE if dflt is None else float(dflt)), "nonneg"
            elif kind == "string":
                default, check = ("" if dflt is None else str(dflt)), None
            elif kind == "bool6":
                default, check = [bool(x) for x in dflt], None
            elif kind == "vec6":
                default = T.DOUBLE_ARRAY if dflt is None else (
                    [float(dflt)] if np.isscalar(dflt) else [float(x) for x in dflt])
                check = "per_joint"                       # 1 or 6 values >= 0 (6 checked by the law)
            else:                                          # per_joint, per_joint_any
                default = T.DOUBLE_ARRAY if dflt is None else (
                    [float(dflt)] if np.isscalar(dflt) else [float(x) for x in dflt])
                check = kind
            if kind == "vec6":
                desc += " (1 or 6 values)"
            specs.append(ParamSpec(f"{law}.{key}", default, desc, check, live=(key != "frame"),
                                   law_key=key))
    return specs


def all_param_specs():
    return GENERAL_PARAMS + law_param_specs()


TOPICS = [
    ("sub", "joint_states_topic (/joint_states)", "sensor_msgs/JointState",
     "measured q, v; by name, any order, extra joints ignored; triggers the control step"),
    ("sub", "wrench_topic (/ft_sensor/wrench)", "geometry_msgs/WrenchStamped",
     "F/T sensor; frame from header.frame_id or sensor_frame (cartesian_impedance)"),
    ("sub", "robot_description_topic (/robot_description)", "std_msgs/String",
     "URDF, TRANSIENT_LOCAL (used at configure when the parameter is empty)"),
    ("sub", "~/joint_trajectory", "trajectory_msgs/JointTrajectory",
     "joint trajectory (computed_torque, joint_impedance); starts on receipt from the measured state"),
    ("sub", "~/target_joint_state", "sensor_msgs/JointState", "joint set-point (position, optional velocity)"),
    ("sub", "~/target_pose", "geometry_msgs/PoseStamped",
     "pose of the controlled frame in the base frame (cartesian_impedance)"),
    ("sub", "~/target_wrench", "geometry_msgs/WrenchStamped",
     "feed-forward wrench the robot exerts, base-frame axes (cartesian_impedance)"),
    ("pub", "command_topic (/effort_controller/commands)", "std_msgs/Float64MultiArray",
     "torque command in `joints` order"),
    ("pub", "~/joint_command", "sensor_msgs/JointState", "the same command as efforts (publish_joint_command)"),
    ("pub", "~/state", "sensor_msgs/JointState",
     "controller state: position = reference, velocity = error, effort = command"),
    ("pub", "/diagnostics", "diagnostic_msgs/DiagnosticArray",
     "loop rate, step latency, safety-filter interventions, rejected messages, watchdog (diagnostics_period)"),
]
SERVICES = [
    ("~/tare", "std_srvs/Trigger", "tare the wrench sensor with the current reading"),
    ("~/hold", "std_srvs/Trigger", "hold the current position (pose) as the reference"),
]


def interface_tables_markdown():
    rows = ["| direction | topic | type | meaning |", "|---|---|---|---|"]
    rows += [f"| {d} | `{t}` | {ty} | {m} |" for d, t, ty, m in TOPICS]
    rows += ["", "| service | type | meaning |", "|---|---|---|"]
    rows += [f"| `{s}` | {ty} | {m} |" for s, ty, m in SERVICES]
    rows += ["", params_table_markdown(all_param_specs())]
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------------
# QoS
# ------------------------------------------------------------------------------------------------
# the joint-state input and the command output take their QoS from parameters (qos_*, output_qos_*);
# these defaults match theirs.  QOS_SENSOR is the wrench input's.
QOS_SENSOR = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
QOS_COMMAND = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
QOS_REFERENCE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
QOS_LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)

# node parameter -> SafetyParams field
SAFETY_KEYS = {"effort_limits": "effort_limits", "effort_scale": "effort_scale", "torque_rate_limit": "rate_limit",
               "ramp_time": "ramp_time", "position_margin": "position_margin",
               "position_stiffness": "position_stiffness", "velocity_damping": "velocity_damping"}

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE

# parameters read on the hot path -> the attribute caching them (refreshed after every parameter set)
HOT_PARAMS = {"watchdog_timeout": "_watchdog_timeout", "safe_command": "_safe_command",
              "sensor_frame": "_sensor_frame", "publish_state": "_publish_state"}
STATE_SUBS_CHECK_PERIOD = 0.1        # s between get_subscription_count() calls on ~/state


def _bind_array(msg, field, n):
    """Give msg.<field> (float64[]) n zeros and return a numpy view writing into the message's own
    array (the setter may copy, so the view is taken from what the message holds)."""
    setattr(msg, field, array("d", bytes(8 * n)))
    return np.frombuffer(getattr(msg, field), dtype=np.float64)


class _Configured:
    """Everything built at configure (and destroyed at cleanup)."""


class TorqueControllerNode(LifecycleNode):
    """Lifecycle torque controller; see the module docstring."""

    def __init__(self, node_name="torque_controller", **kwargs):
        super().__init__(node_name, **kwargs)
        self._specs = {s.name: s for s in all_param_specs()}
        declare_all(self, self._specs.values())
        self._lock = threading.RLock()
        self._log = self.get_logger()
        self.c = None                          # _Configured while configured
        self.active = False
        self.config_error = ""
        self.counts = defaultdict(int)         # rejected.*, errors.*, watchdog_trips
        self._rd_msg = None
        self._rd_sub = self.create_subscription(
            String, self.get_parameter("robot_description_topic").value, self._on_robot_description,
            QOS_LATCHED)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(self.get_parameter("diagnostics_period").value,
                                             self._guard(self._publish_diagnostics, "diagnostics"))
        self._diag_last = time.monotonic()
        self.create_service(Trigger, "~/tare", self._on_tare)
        self.create_service(Trigger, "~/hold", self._on_hold)
        self._clock_handle = self.get_clock().handle   # one ROS clock read per step (sim time included)
        self._cache_params(HOT_PARAMS)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._on_parameters_set)
        self._t_created = time.monotonic()
        self._autostart_timer = None
        self._autostart_logged = False
        if self.get_parameter("autostart").value:
            self._autostart_timer = self.create_timer(0.05, self._guard(self._autostart, "autostart"))

    # ---------------------------------------------------------------- small helpers
    def _p(self, name):
        return param_value(self, name)

    def _cache_params(self, names):
        """Copy the parameters read on every cycle (HOT_PARAMS) into attributes; called at start-up
        and after every successful parameter change, so the hot path does no parameter lookups."""
        for name in names:
            if name in HOT_PARAMS:
                setattr(self, HOT_PARAMS[name], self._p(name))
        self._safe_gravity = self._safe_command == "gravity"

    def _on_parameters_set(self, params):
        self._cache_params([p.name for p in params])

    def _guard(self, fn, where):
        """Wrap a callback so no exception escapes: count, log (throttled), publish the safe command."""
        def wrapped(*args):
            try:
                return fn(*args)
            except Exception as e:                     # noqa: BLE001 (nothing may escape a callback)
                self._on_exception(where, e)
        return wrapped

    def _on_exception(self, where, e):
        self.counts[f"errors.{where}"] += 1
        self._log.error(f"{where}: {type(e).__name__}: {e} (publishing the safe command)",
                        throttle_duration_sec=5.0)
        try:
            if self.active:
                self._publish_safe()
        except Exception:                              # noqa: BLE001
            pass

    @property
    def lifecycle_state(self):
        return self._state_machine.current_state[1]

    # ---------------------------------------------------------------- robot description / autostart
    def _on_robot_description(self, msg):
        self._rd_msg = msg.data

    def _end_autostart(self):
        """The one-shot autostart timer is done: destroy it (one entity fewer in every wait set)."""
        t, self._autostart_timer = self._autostart_timer, None
        if t is not None:
            t.cancel()
            self.destroy_timer(t)

    def _autostart(self):
        if self._autostart_timer is None:
            return
        if self.lifecycle_state != "unconfigured":
            self._end_autostart()
            return
        waited = time.monotonic() - self._t_created
        have_param = bool(self._p("robot_description"))
        have_fallback = bool(self._p("urdf_path") or self._p("robot"))
        if not (have_param or self._rd_msg):
            if waited < self._p("robot_description_timeout") or not have_fallback:
                if not have_fallback and not self._autostart_logged and waited > 1.0:
                    self._autostart_logged = True
                    self._log.warn(f"autostart: waiting for a robot description on "
                                   f"{self._p('robot_description_topic')} (or set robot_description, "
                                   f"urdf_path or robot)")
                return
        self._end_autostart()
        if self.trigger_configure() == SUCCESS:
            self.trigger_activate()

    def _load_model(self, joints):
        """(model, source) from the first available description; ValueError naming the cause."""
        kw = {"active_joints": list(joints)} if joints else {}
        rd = self._p("robot_description")
        if rd:
            src, urdf = "robot_description parameter", rd
        elif self._rd_msg:
            src, urdf = f"{self._p('robot_description_topic')} topic", self._rd_msg
        elif self._p("urdf_path"):
            src = f"urdf_path {self._p('urdf_path')}"
            try:
                with open(self._p("urdf_path")) as f:
                    urdf = f.read()
            except OSError as e:
                raise ValueError(f"{src}: {e}") from None
        elif self._p("robot"):
            src = f"robot {self._p('robot')!r}"
            try:
                return Model.from_robot(self._p("robot"), **kw), src
            except (ValueError, FileNotFoundError, KeyError) as e:
                raise ValueError(f"{src}: {e}") from None
        else:
            raise ValueError("no robot description: set the robot_description parameter, publish "
                             f"{self._p('robot_description_topic')}, or set urdf_path or robot")
        try:
            return Model.from_urdf_string(urdf, **kw), src
        except Exception as e:                         # noqa: BLE001 (XML / parser errors of any type)
            raise ValueError(f"{src}: {e}") from None

    # ---------------------------------------------------------------- lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            with self._lock:
                self._configure()
        except Exception as e:                         # noqa: BLE001
            self.config_error = str(e)
            self._log.error(f"configure failed: {e}")
            self._teardown()
            return FAILURE
        self.config_error = ""
        c = self.c
        # everything built so far (modules, model, law, messages) lives until cleanup: move it out of
        # the garbage collector's reach, so that a full collection during a control step has far
        # fewer objects to traverse
        gc.collect()
        gc.freeze()
        self._log.info(f"configured: {c.law.name} on {c.model.name} ({c.source}), joints {c.joints}, "
                       f"commands on {self._p('command_topic')}")
        return SUCCESS

    def _configure(self):
        from ..control import SafetyFilter, make_law
        c = _Configured()
        joints = self._p("joints") or []
        if len(set(joints)) != len(joints):
            raise ValueError(f"joints: duplicate names in {joints}")
        for name in self._specs:                      # values set before configure, checked now
            err = check_value(self._specs[name], self._p(name), len(joints) or None)
            if err:
                raise ValueError(err)
        c.model, c.source = self._load_model(joints)
        m = c.model
        if m.floating_base:
            raise ValueError(f"{c.source}: a floating-base model; the controller needs a fixed base")
        if m.nq != m.nv:
            raise ValueError(f"{c.source}: nq {m.nq} != nv {m.nv} (unsupported joint types)")
        try:
            c.check_report = self_check(m, tol=self._p("self_check_tolerance"))
        except ValueError as e:                        # SelfCheckError
            raise ValueError(f"{c.source}: {e}") from None
        c.joints = list(joints) if joints else list(m.joint_names)
        mn = list(m.joint_names)
        if sorted(c.joints) != sorted(mn):
            raise ValueError(f"joints {c.joints} do not match the model's movable joints {mn}")
        n = c.n = m.nv
        c.perm = np.array([mn.index(j) for j in c.joints], dtype=np.intp)   # cmd[k] = tau[perm[k]]
        c.backend = make_backend(m, self._p("backend"))
        c.gravity_backend = make_backend(m, "pinocchio")                    # for the safe command
        c.law_name = self._p("controller")
        params = {}
        for name, s in self._specs.items():
            if s.law_key and name.startswith(c.law_name + "."):
                v = self._p(name)
                if v is not None:
                    params[s.law_key] = self._law_value(s, v, c)
        try:
            c.law = make_law(c.law_name, m, c.backend, params)
        except ValueError as e:
            raise ValueError(f"{c.law_name} parameters: {e}") from None
        c.safety = SafetyFilter(m, {SAFETY_KEYS[k]: self._safety_value(k, self._p(k), c) for k in SAFETY_KEYS})
        c.cartesian = c.law_name == "cartesian_impedance"
        c.wrench_proc = None
        c.wrench_frame_error = None
        if c.cartesian and self._p("sensor_frame"):
            c.wrench_proc = self._make_wrench_processor(c, self._p("sensor_frame"))
        # state (model order), preallocated
        c.mapper = JointStateMapper(mn, require_velocity=self._p("require_velocity"))
        c.q, c.v = np.zeros(n), np.zeros(n)
        from ..control import State
        c.state = State(c.q, c.v, 0.0)
        c.have_state = False
        c.last_ok = -math.inf                      # monotonic time of the last valid joint state
        c.latest_rejected = False
        c.rejecting = ""                           # reason of the current rejection episode
        c.rejected_in_episode = 0
        c.watchdog = "waiting"
        c.need_reset = True
        c.pending_ref = None
        c.pose_target = None
        c.wrench_target = None
        c.wrench_raw = None
        c.wrench_raw_frame = ""
        c.wrench_time = -math.inf
        c.wrench_rejecting = ""                    # reason of the current wrench rejection episode
        c.last_step = None                         # start of the last control step (the laws' dt)
        c.last_pub = None                          # end of the last command publish (rate-limit dt)
        c.tau = np.zeros(n)
        c.safe = np.zeros(n)
        c.safe_out = np.zeros(n)                 # the rate-limited step toward c.safe actually sent
        c.safe_zero = np.zeros(n)
        # messages with preallocated arrays (numpy views write into them)
        c.cmd_msg = Float64MultiArray()
        c.cmd_msg.layout.dim = [MultiArrayDimension(label="joints", size=n, stride=n)]
        c.cmd_np = _bind_array(c.cmd_msg, "data", n)
        c.state_msg = JointState(name=list(c.joints))
        c.state_eff = _bind_array(c.state_msg, "effort", n)
        c.jc_msg = JointState(name=list(c.joints))
        c.jc_eff = _bind_array(c.jc_msg, "effort", n)
        c.state_pos = _bind_array(c.state_msg, "position", 0)
        c.state_vel = _bind_array(c.state_msg, "velocity", 0)
        # stats
        c.stats_steps, c.stats_lat_sum, c.stats_lat_max = 0, 0.0, 0.0
        c.total_steps = 0
        c.safe_published = 0
        c.stamp_ns = 0                             # ROS time of the message being published
        c.state_subs, c.state_subs_checked = 0, -math.inf   # ~/state subscribers, counted every
                                                            # STATE_SUBS_CHECK_PERIOD s
        # ROS entities
        qos_in = make_qos(self._p("qos_reliability"), self._p("qos_depth"))
        qos_out = make_qos(self._p("output_qos_reliability"), self._p("output_qos_depth"))
        c.cmd_pub = self.create_publisher(Float64MultiArray, self._p("command_topic"), qos_out)
        c.state_pub = self.create_publisher(JointState, "~/state", 10)
        c.jc_pub = (self.create_publisher(JointState, "~/joint_command", qos_out)
                    if self._p("publish_joint_command") else None)
        c.subs = [
            self.create_subscription(JointState, self._p("joint_states_topic"),
                                     self._guard(self._on_joint_state, "joint_states"), qos_in),
        ]
        if c.cartesian:                            # only cartesian_impedance reads the wrench
            c.subs.append(self.create_subscription(WrenchStamped, self._p("wrench_topic"),
                                                   self._guard(self._on_wrench, "wrench"), QOS_SENSOR))
        c.subs += [
            self.create_subscription(JointTrajectoryMsg, "~/joint_trajectory",
                                     self._guard(self._on_trajectory, "joint_trajectory"), QOS_REFERENCE),
            self.create_subscription(JointState, "~/target_joint_state",
                                     self._guard(self._on_target_joint_state, "target_joint_state"),
                                     QOS_REFERENCE),
            self.create_subscription(PoseStamped, "~/target_pose",
                                     self._guard(self._on_target_pose, "target_pose"), QOS_REFERENCE),
            self.create_subscription(WrenchStamped, "~/target_wrench",
                                     self._guard(self._on_target_wrench, "target_wrench"), QOS_REFERENCE),
        ]
        c.timers = []
        c.watchdog_timer = self.create_timer(min(0.05, 0.5 * self._p("watchdog_timeout")),
                                             self._guard(self._on_watchdog, "watchdog"))
        c.watchdog_timer.cancel()
        c.timers.append(c.watchdog_timer)
        # the safe command moves from the last command at the torque-rate limit: this timer carries the
        # ramp on at the control period while no control step publishes (stale input, deactivation)
        c.safe_period = 1.0 / self._p("update_rate")
        c.safe_ramping = False
        c.safe_reached = False
        c.safe_timer = self.create_timer(c.safe_period, self._guard(self._on_safe_ramp, "safe_ramp"))
        c.safe_timer.cancel()
        c.timers.append(c.safe_timer)
        c.step_timer = None
        if self._p("trigger") == "timer":
            c.step_timer = self.create_timer(1.0 / self._p("update_rate"),
                                             self._guard(self._on_step_timer, "control_step"))
            c.step_timer.cancel()
            c.timers.append(c.step_timer)
        self.c = c

    def _make_wrench_processor(self, c, frame):
        from ..control import WrenchProcessor
        c.model.check_frame(frame)
        target = c.law.params.get("frame") or c.model.frame_names[-1]
        fc = self._p("wrench_filter_cutoff_hz")
        return WrenchProcessor(c.model, c.backend, frame, target, tool_mass=self._p("tool_mass"),
                               tool_com=tuple(self._p("tool_com")), filter_cutoff_hz=fc if fc > 0 else None,
                               deadband=tuple(self._p("wrench_deadband")))

    def _teardown(self):
        c, self.c = self.c, None
        self.active = False
        if c is None:
            return
        for t in getattr(c, "timers", []):
            self.destroy_timer(t)
        for s in getattr(c, "subs", []):
            self.destroy_subscription(s)
        for p in ("cmd_pub", "state_pub", "jc_pub"):
            if getattr(c, p, None) is not None:
                self.destroy_publisher(getattr(c, p))

    def on_activate(self, state):
        with self._lock:
            c = self.c
            c.need_reset = True
            c.safety.reset(start=c.safety.prev)         # ramp from the last command sent (deactivate's)
            c.watchdog = "waiting"
            c.pending_ref = None
            c.last_step = None
            c.last_pub = None
            self.active = True
            c.watchdog_timer.reset()
            if c.step_timer is not None:
                c.step_timer.reset()
        self._log.info(f"active: {c.law.name}, trigger {self._p('trigger')}, safe command "
                       f"{self._p('safe_command')!r}")
        return super().on_activate(state)

    def on_deactivate(self, state):
        with self._lock:
            self._stop_commanding()
        self._log.info(f"inactive: published the safe command ({self._p('safe_command')})")
        return super().on_deactivate(state)

    def _stop_commanding(self):
        c = self.c
        if c is None:
            return
        if self.active:
            # ramp to the safe command at the rate limit (at most (limit span) / rate seconds), then stop
            span = float(np.max(2.0 * c.safety.limit / np.maximum(c.safety.rate, 1e-9)))
            deadline = time.monotonic() + min(span, 10.0) + 0.1
            while not self._publish_safe() and time.monotonic() < deadline:
                time.sleep(c.safe_period)
        self.active = False
        c.safe_ramping = False
        for t in c.timers:
            t.cancel()

    def on_cleanup(self, state):
        with self._lock:
            self._teardown()
        return SUCCESS

    def on_shutdown(self, state):
        with self._lock:
            self._stop_commanding()
            self._teardown()
        return SUCCESS

    def on_error(self, state):
        with self._lock:
            try:
                self._stop_commanding()
            except Exception:                          # noqa: BLE001
                pass
            self._teardown()
        return SUCCESS

    # ---------------------------------------------------------------- inputs (convert and store)
    def _on_joint_state(self, msg):
        now = time.monotonic()
        c = self.c
        if c is None:
            return
        with self._lock:
            if c is not self.c:                         # cleaned up while this message waited
                return
            ok = c.mapper.map(msg)
            if ok:
                c.q[:] = c.mapper.q
                c.v[:] = c.mapper.v
                c.have_state = True
                c.last_ok = now
                c.latest_rejected = False
                if c.rejecting:
                    self._log.info(f"joint states valid again after {c.rejected_in_episode} rejected "
                                   f"message(s) ({c.rejecting})")
                    c.rejecting, c.rejected_in_episode = "", 0
            else:
                c.latest_rejected = True
                self.counts[f"rejected.joint_states.{c.mapper.reason}"] += 1
                c.rejected_in_episode += 1
                if c.rejecting != c.mapper.reason:     # log once per episode, not per message
                    c.rejecting = c.mapper.reason
                    self._log.error(f"joint state rejected ({c.mapper.reason}): {c.mapper.detail}; "
                                    f"publishing the safe command ({self._p('safe_command')}) until "
                                    f"valid joint states arrive")
            if self.active and c.step_timer is None:
                if ok:
                    self._step(now)
                else:
                    self._publish_safe()

    def _on_wrench(self, msg):
        c = self.c
        if c is None or not c.cartesian:
            return
        w = wrench_to_array(msg.wrench)                 # a new array: the step may be reading the old
        with self._lock:
            if not np.all(np.isfinite(w)):
                self.counts["rejected.wrench"] += 1
                c.wrench_raw = None                     # not used; force control runs open loop
                self._wrench_episode(c, "non_finite", "NaN or Inf in the wrench")
                return
            c.wrench_raw_frame = msg.header.frame_id
            c.wrench_raw = w
            c.wrench_time = time.monotonic()

    def _wrench_episode(self, c, reason, detail):
        """Log a wrench problem once per episode (until a good wrench is used again)."""
        if c.wrench_rejecting != reason:
            c.wrench_rejecting = reason
            self._log.warn(f"wrench on {self._p('wrench_topic')} not used ({reason}): {detail}; force "
                           f"control runs open loop until a valid wrench arrives")

    def _reject_ref(self, what, reason):
        self.counts[f"rejected.{what}"] += 1
        self._log.warn(f"{what} rejected: {reason}", throttle_duration_sec=2.0)

    def _on_trajectory(self, msg):
        from ..control import JointTrajectory
        c = self.c
        if c is None:
            return
        if c.cartesian:
            return self._reject_ref("joint_trajectory", f"{c.law_name} takes no joint trajectory")
        try:
            times, P, V, A = trajectory_arrays(list(c.model.joint_names), msg)
            traj = JointTrajectory(times, P, V, A, lower=c.model.lower_limits, upper=c.model.upper_limits)
        except ValueError as e:
            return self._reject_ref("joint_trajectory", str(e))
        c.pending_ref = traj

    def _on_target_joint_state(self, msg):
        from ..control import JointReference
        c = self.c
        if c is None:
            return
        if c.cartesian:
            return self._reject_ref("target_joint_state", f"{c.law_name} takes no joint reference")
        names = list(c.model.joint_names)
        try:
            q = map_joint_values(names, msg.name, msg.position, "target_joint_state position")
            v = (map_joint_values(names, msg.name, msg.velocity, "target_joint_state velocity")
                 if len(msg.velocity) else None)
        except ValueError as e:
            return self._reject_ref("target_joint_state", str(e))
        c.pending_ref = JointReference(q, v)

    def _check_base_frame(self, c, frame_id, what):
        ok = ("", "world", c.model.frame_names[0])
        if frame_id not in ok:
            raise ValueError(f"{what}: frame {frame_id!r} is not the robot base "
                             f"({c.model.frame_names[0]!r}); no tf lookup in this node")

    def _on_target_pose(self, msg):
        from ..control import CartesianReference
        c = self.c
        if c is None:
            return
        if not c.cartesian:
            return self._reject_ref("target_pose", f"{c.law_name} takes no Cartesian reference")
        try:
            self._check_base_frame(c, msg.header.frame_id, "target_pose")
            R, p = pose_to_rp(msg.pose)
        except ValueError as e:
            return self._reject_ref("target_pose", str(e))
        c.pose_target = (R, p)
        c.pending_ref = CartesianReference(R, p, wrench=c.wrench_target)

    def _on_target_wrench(self, msg):
        c = self.c
        if c is None:
            return
        if not c.cartesian:
            return self._reject_ref("target_wrench", f"{c.law_name} takes no wrench reference")
        try:
            self._check_base_frame(c, msg.header.frame_id, "target_wrench")
            w = wrench_to_array(msg.wrench)
            if not np.all(np.isfinite(w)):
                raise ValueError("target_wrench: values must be finite")
        except ValueError as e:
            return self._reject_ref("target_wrench", str(e))
        c.wrench_target = w
        c.pending_wrench = True

    # ---------------------------------------------------------------- the control step
    def _on_step_timer(self):
        c = self.c
        if c is None or not self.active:
            return
        now = time.monotonic()
        with self._lock:
            if not c.have_state or c.latest_rejected or now - c.last_ok > self._watchdog_timeout:
                self._check_watchdog(now)
                self._publish_safe()
                return
            self._step(now)

    def _step(self, now):
        """state -> law -> safety filter -> publish.  Runs under the lock."""
        c = self.c
        t0 = time.perf_counter()
        try:
            dt = 0.001 if c.last_step is None else min(max(now - c.last_step, 1e-6), 0.1)
            c.last_step = now
            # the rate limit counts from the end of the last publish: never more than rate x the real
            # time between two commands on the wire, however long the step itself takes
            dt_rate = 0.001 if c.last_pub is None else min(max(now - c.last_pub, 1e-6), 0.1)
            if c.watchdog != "ok":
                if c.watchdog == "tripped":
                    self._log.info(f"watchdog: fresh joint states again; holding the current position, "
                                   f"ramping up over {self._p('ramp_time')} s")
                    c.safety.reset(start=c.safety.prev)     # ramp from the safe command sent
                    c.need_reset = True
                c.watchdog = "ok"
            st = c.state
            c.stamp_ns = ns = self._clock_handle.get_now().nanoseconds   # the one clock read: state
            st.t = ns * 1e-9                                              # time and message stamps
            if c.need_reset:
                c.law.reset(st)
                c.need_reset = False
                c.pending_ref = None
            if c.pending_ref is not None:
                ref, c.pending_ref = c.pending_ref, None
                try:
                    c.law.set_reference(ref)
                except ValueError as e:
                    self._reject_ref("reference", str(e))
            if getattr(c, "pending_wrench", False):
                c.pending_wrench = False
                self._apply_target_wrench(c)
            if c.cartesian:
                self._process_wrench(c, dt)
            tau = c.law.compute(st)
            # g(q) only if the law's torque turns out non-finite (the filter calls it then)
            fallback = self._safe_torque if self._safe_gravity else None
            tau = c.safety.apply(tau, st, dt_rate, fallback=fallback)
            c.tau[:] = tau
            self._publish(c.tau)
            c.last_pub = time.monotonic()
        except Exception as e:                         # noqa: BLE001
            self._on_exception("control_step", e)
            return
        lat = time.perf_counter() - t0
        c.stats_steps += 1
        c.total_steps += 1
        c.stats_lat_sum += lat
        if lat > c.stats_lat_max:
            c.stats_lat_max = lat

    def _apply_target_wrench(self, c):
        from ..control import CartesianReference
        if c.pose_target is None:                     # keep the pose being held
            ref = c.law.info.reference
            if ref is None or len(ref) != 7:
                return
            from .common import quat_to_matrix
            R, p = quat_to_matrix(*ref[3:7]), np.array(ref[:3])
            c.pose_target = (R, p)
        c.law.set_reference(CartesianReference(c.pose_target[0], c.pose_target[1], wrench=c.wrench_target))

    def _process_wrench(self, c, dt):
        """The latest raw wrench -> State.wrench (tare, tool weight, filter, frame change)."""
        st = c.state
        if c.wrench_raw is None:
            st.wrench = None
            return
        age = time.monotonic() - c.wrench_time
        if age > self._watchdog_timeout:                        # the sensor went silent
            if c.wrench_rejecting != "stale":
                self.counts["rejected.wrench"] += 1
            self._wrench_episode(c, "stale", f"no wrench for {age:.3f} s (watchdog_timeout "
                                             f"{self._p('watchdog_timeout')} s)")
            st.wrench = None
            return
        frame = self._sensor_frame or c.wrench_raw_frame
        if c.wrench_proc is None or c.wrench_proc.sensor_frame != frame:
            if c.wrench_frame_error == frame:
                st.wrench = None
                return
            try:
                c.wrench_proc = self._make_wrench_processor(c, frame)
            except ValueError as e:
                c.wrench_frame_error = frame
                c.wrench_rejecting = "unknown_frame"
                self.counts["rejected.wrench"] += 1
                self._log.warn(f"wrench on {self._p('wrench_topic')} ignored: sensor frame {frame!r}: {e}")
                st.wrench = None
                return
        if c.wrench_rejecting:
            self._log.info(f"wrench on {self._p('wrench_topic')} valid again ({c.wrench_rejecting} before)")
            c.wrench_rejecting = ""
        st.wrench = c.wrench_proc.process(c.wrench_raw, st.q, dt)
        st.wrench_frame = c.wrench_proc.frame

    def _safe_torque(self):
        """The safe command in model order: zero, or g(q) at the last valid q, clipped to the limits."""
        c = self.c
        if self._safe_gravity and c.have_state:
            c.safe[:] = c.gravity_backend.gravity(c.q)
            np.clip(c.safe, -c.safety.limit, c.safety.limit, out=c.safe)
        else:
            c.safe.fill(0.0)
        return c.safe

    def _publish_safe(self):
        """Publish one step of the safe command: from the last command sent toward the safe torque
        (zero, or g(q) at the last valid q) at the torque-rate limit, never more than rate x one
        control period per message, so a Franka-style rate check never sees a discontinuity.  Until it
        is reached, the safe-ramp timer publishes the next steps at the control period.  Returns True
        once the command equals the safe torque."""
        c = self.c
        if c is None:
            return True
        now = time.monotonic()
        target = self._safe_torque()
        prev = c.safety.prev
        tau = c.safe_out
        if prev is None:                         # nothing sent yet: the drive holds zero torque
            prev = c.safe_zero
        dt = c.safe_period if c.last_pub is None else min(max(now - c.last_pub, 0.0), c.safe_period)
        step = c.safety.rate * dt
        d = target - prev
        np.clip(d, -step, step, out=tau)
        tau += prev
        within = np.abs(d) <= step
        np.copyto(tau, target, where=within)     # exactly the target once within reach (no rounding)
        reached = bool(within.all())
        c.safe_published += 1
        c.stamp_ns = self._clock_handle.get_now().nanoseconds
        self._publish(tau, safe=True)
        # the safe command bypasses the safety filter: the next filtered command must move from it at
        # the rate limit (not jump back to the last filtered one), with dt measured from now
        c.safety.hold(tau)
        c.last_step = now
        c.last_pub = time.monotonic()
        c.safe_reached = reached
        if not reached and not c.safe_ramping:
            c.safe_ramping = True
            c.safe_timer.reset()
        elif reached and c.safe_ramping:
            c.safe_ramping = False
            c.safe_timer.cancel()
        return reached

    def _on_safe_ramp(self):
        c = self.c
        if c is None:
            return
        with self._lock:
            if not self.active or not c.safe_ramping:
                c.safe_ramping = False
                c.safe_timer.cancel()
                return
            self._publish_safe()

    def _publish(self, tau, safe=False):
        """tau in model order -> messages in `joints` order, stamped with c.stamp_ns (the caller's
        clock read).  ~/state is filled and published only while publish_state is true and it has
        subscribers (counted every STATE_SUBS_CHECK_PERIOD s, not every cycle)."""
        c = self.c
        if c.safe_ramping and not safe:          # a control step took over from the safe ramp
            c.safe_ramping = False
            c.safe_timer.cancel()
        np.asarray(tau).take(c.perm, out=c.cmd_np)
        c.cmd_pub.publish(c.cmd_msg)
        jc = c.jc_pub is not None
        if self._publish_state:
            now = time.monotonic()
            if now - c.state_subs_checked >= STATE_SUBS_CHECK_PERIOD:
                c.state_subs_checked = now
                c.state_subs = c.state_pub.get_subscription_count()
            state = c.state_subs > 0
        else:
            state = False
        if not (jc or state):
            return
        sec, nanosec = divmod(c.stamp_ns, 1_000_000_000)
        if jc:
            stamp = c.jc_msg.header.stamp
            stamp.sec, stamp.nanosec = sec, nanosec
            c.jc_eff[:] = c.cmd_np
            c.jc_pub.publish(c.jc_msg)
        if state:
            sm = c.state_msg
            stamp = sm.header.stamp
            stamp.sec, stamp.nanosec = sec, nanosec
            info = c.law.info
            c.state_pos = self._fill(sm, "position", c.state_pos, info.reference, safe)
            c.state_vel = self._fill(sm, "velocity", c.state_vel, info.error, safe)
            c.state_eff[:] = c.cmd_np
            c.state_pub.publish(sm)

    def _fill(self, msg, field, view, x, safe):
        """msg.<field> <- x (per-joint vectors reordered to `joints` order; NaN while the safe
        command is out).  Rebinds the preallocated array only when the size changes."""
        c = self.c
        x = np.asarray(x, dtype=float)
        if view.shape != x.shape:
            view = _bind_array(msg, field, x.size)
        if safe:
            view.fill(np.nan)
        elif x.shape == (c.n,):
            x.take(c.perm, out=view)
        else:
            view[:] = x
        return view

    # ---------------------------------------------------------------- watchdog
    def _check_watchdog(self, now):
        c = self.c
        age = now - c.last_ok
        timeout = self._watchdog_timeout
        if c.have_state and age <= timeout and not c.latest_rejected:
            return False
        if c.watchdog == "waiting" and not c.have_state:
            if not getattr(c, "waiting_logged", False):
                c.waiting_logged = True
                self._log.warn(f"no joint state received on {self._p('joint_states_topic')} yet: "
                               f"publishing the safe command ({self._p('safe_command')})")
            return True
        if age > timeout and c.watchdog != "tripped":
            c.watchdog = "tripped"
            self.counts["watchdog_trips"] += 1
            last = f"; the last message was rejected ({c.rejecting})" if c.rejecting else ""
            self._log.error(f"watchdog: no valid joint state on {self._p('joint_states_topic')} for "
                            f"{age:.3f} s (watchdog_timeout {timeout} s){last}: publishing the safe "
                            f"command ({self._p('safe_command')})")
        return True

    def _on_watchdog(self):
        c = self.c
        if c is None or not self.active:
            return
        with self._lock:
            if self._check_watchdog(time.monotonic()) and c.step_timer is None:
                if c.watchdog != "ok" or not c.have_state:
                    self._publish_safe()

    # ---------------------------------------------------------------- services
    def _on_hold(self, req, resp):
        try:
            with self._lock:
                c = self.c
                if c is None or not self.active or not c.have_state or c.watchdog != "ok":
                    resp.success, resp.message = False, "not active with a valid joint state"
                    return resp
                c.pending_ref = None
                c.pose_target = None
                c.law.reset(c.state)
                resp.success, resp.message = True, "holding q = " + str(np.round(c.q, 4).tolist())
        except Exception as e:                         # noqa: BLE001
            self.counts["errors.hold"] += 1
            resp.success, resp.message = False, f"{type(e).__name__}: {e}"
        return resp

    def _on_tare(self, req, resp):
        try:
            with self._lock:
                c = self.c
                if c is None or not c.cartesian:
                    resp.success, resp.message = False, "no wrench processing (configure with cartesian_impedance)"
                elif c.wrench_raw is None or not c.have_state:
                    resp.success, resp.message = False, "no wrench or joint state received yet"
                else:
                    if c.wrench_proc is None:
                        c.wrench_proc = self._make_wrench_processor(
                            c, self._p("sensor_frame") or c.wrench_raw_frame)
                    c.wrench_proc.tare(c.wrench_raw, c.q)
                    resp.success, resp.message = True, "tared with " + str(np.round(c.wrench_raw, 3).tolist())
        except Exception as e:                         # noqa: BLE001
            self.counts["errors.tare"] += 1
            resp.success, resp.message = False, f"{type(e).__name__}: {e}"
        return resp

    # ---------------------------------------------------------------- parameters
    def _to_model_order(self, a, c):
        """A per-joint array in `joints` order -> model order (1 value: broadcast)."""
        a = np.asarray(a, dtype=float)
        if a.size == 1:
            return np.full(c.n, float(a[0]))
        out = np.empty(c.n)
        out[c.perm] = a
        return out

    def _safety_value(self, key, v, c):
        if key == "effort_limits":
            return None if not v else self._to_model_order(v, c)
        return v

    def _law_value(self, spec, v, c):
        if spec.check in ("per_joint", "per_joint_any"):
            a = np.asarray(v, dtype=float)
            if a.size == 1:
                return float(a[0])
            if spec.law_key in ("force_kp", "force_ki"):
                return a.tolist()
            if a.size != c.n:
                return a.tolist()                      # the law names the wrong length
            return self._to_model_order(a, c).tolist()
        if isinstance(v, str) and spec.law_key == "frame":
            return v or None
        return v

    def _on_set_parameters(self, params):
        try:
            return self._set_parameters(params)
        except Exception as e:                         # noqa: BLE001 (nothing may escape a callback)
            self.counts["errors.parameters"] += 1
            return SetParametersResult(successful=False, reason=f"{type(e).__name__}: {e}")

    def _set_parameters(self, params):
        c = self.c
        n = c.n if c is not None else (len(self._p("joints") or []) or None)
        errors, law_updates, safety_updates = [], {}, {}
        for p in params:
            spec = self._specs.get(p.name)
            if spec is None:
                continue
            v = p.value
            if hasattr(v, "typecode") or isinstance(v, tuple):
                v = list(v)
            if p.name == "joints" and v is not None and len(set(v)) != len(v):
                errors.append(f"joints: duplicate names in {v}")
                continue
            err = check_value(spec, v, n if spec.law_key not in ("force_kp", "force_ki") else 6)
            if err:
                errors.append(err)
                continue
            if c is not None and spec.law_key and p.name.startswith(c.law_name + ".") and spec.live:
                if p.type_ == Parameter.Type.NOT_SET:
                    errors.append(f"{p.name}: cannot be unset while configured")
                    continue
                law_updates[spec.law_key] = self._law_value(spec, v, c)
            elif c is not None and p.name in SAFETY_KEYS:
                safety_updates[SAFETY_KEYS[p.name]] = self._safety_value(p.name, v, c)
        if errors:
            return SetParametersResult(successful=False, reason="; ".join(errors))
        if law_updates or safety_updates:
            with self._lock:
                old_safety = c.safety.params
                try:
                    if safety_updates:
                        c.safety.set_params(safety_updates)
                    if law_updates:
                        c.law.set_params(law_updates)
                except ValueError as e:
                    c.safety.set_params(old_safety)
                    return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    # ---------------------------------------------------------------- diagnostics
    def _publish_diagnostics(self):
        now = time.monotonic()
        window = max(now - self._diag_last, 1e-9)
        self._diag_last = now
        st = DiagnosticStatus(name=f"{self.get_name()}: torque controller", hardware_id="")
        kv = [("lifecycle_state", self.lifecycle_state)]
        c = self.c
        level, msg = DiagnosticStatus.OK, "ok"
        if c is None:
            level = DiagnosticStatus.ERROR if self.config_error else DiagnosticStatus.WARN
            msg = f"not configured: {self.config_error}" if self.config_error else "not configured"
        else:
            with self._lock:
                steps, lat_sum, lat_max = c.stats_steps, c.stats_lat_sum, c.stats_lat_max
                c.stats_steps, c.stats_lat_sum, c.stats_lat_max = 0, 0.0, 0.0
                st.hardware_id = c.model.name
                kv += [("controller", c.law_name), ("robot", c.model.name), ("model_source", c.source),
                       ("joints", ",".join(c.joints)), ("trigger", self._p("trigger")),
                       ("loop_rate_hz", f"{steps / window:.1f}"),
                       ("step_latency_mean_us", f"{1e6 * lat_sum / steps:.1f}" if steps else "nan"),
                       ("step_latency_max_us", f"{1e6 * lat_max:.1f}" if steps else "nan"),
                       ("steps_total", str(c.total_steps)), ("safe_commands_total", str(c.safe_published)),
                       ("watchdog", c.watchdog if self.active else "inactive"),
                       ("watchdog_trips", str(self.counts["watchdog_trips"]))]
                for k, val in sorted(dict(getattr(c.safety, "counts", {})).items()):
                    kv.append((f"safety.{k}", str(val)))
                reasons = getattr(c.safety, "reasons", None)
                if reasons:
                    kv.append(("safety.last_reasons", ",".join(map(str, reasons))))
                if not self.active:
                    level, msg = DiagnosticStatus.OK, "inactive"
                elif c.watchdog == "tripped":
                    level, msg = DiagnosticStatus.ERROR, "watchdog tripped: joint states stale or invalid"
                elif c.watchdog == "waiting":
                    level, msg = DiagnosticStatus.WARN, "waiting for joint states"
                elif c.rejecting:
                    level, msg = DiagnosticStatus.WARN, f"rejecting joint states ({c.rejecting})"
                else:
                    msg = "active"
        for r in REJECT_REASONS:
            kv.append((f"rejected.joint_states.{r}", str(self.counts[f"rejected.joint_states.{r}"])))
        total = sum(v for k, v in self.counts.items() if k.startswith("rejected.joint_states."))
        kv.append(("rejected.joint_states", str(total)))
        for k, v in sorted(self.counts.items()):
            if not k.startswith("rejected.joint_states.") and k != "watchdog_trips":
                kv.append((k, str(v)))
        st.level, st.message = level, msg
        st.values = [KeyValue(key=k, value=v) for k, v in kv]
        arr = DiagnosticArray(status=[st])
        arr.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(arr)


# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------
def main(args=None):
    """Run one controller node.  Extra (non-ROS) arguments: --print-params, --multi-threaded (an alias
    of `-p executor:=multi`).  The executor is the node's `executor` parameter, read at start-up.
    SIGINT / SIGTERM (repeated ones included) end it cleanly with exit 0 (nodes/runner.py), after
    the lifecycle shutdown transition has published the safe command."""
    from rclpy.utilities import remove_ros_args

    from .runner import run
    argv = sys.argv if args is None else args
    extra = remove_ros_args(argv)[1:]
    if "--print-params" in extra:
        print(interface_tables_markdown())
        return 0

    def executor_for(node):
        name = "multi" if "--multi-threaded" in extra else node.get_parameter("executor").value
        executor = make_executor(name)              # ValueError: logged, exit code 1
        node.get_logger().info(f"executor: {name}")
        return executor

    def safe_stop(node):
        # the shutdown transition publishes the safe command on the way out
        if node.lifecycle_state in ("active", "inactive", "unconfigured"):
            node.trigger_shutdown()

    return run(TorqueControllerNode, args=argv, executor_factory=executor_for, on_exit=safe_stop)


if __name__ == "__main__":
    sys.exit(main())
