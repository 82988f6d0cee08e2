"""The torque controller node: JointState (+ wrench, references) -> control law -> safety filter ->
effort command.  A thin rclpy adapter (message -> numpy, name mapping, QoS, parameters, lifecycle,
timers, publishing) over robot_dynamics.control.ControlLoop, which holds the law, the safety filter
and the supervisor (watchdog, safe command, start ramp, resume without a jump) and which a hardware
bridge drives in-process the same way.  One class, importable, so several controllers can share one
executor:

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
import sys
import threading
import time
from array import array
from collections import defaultdict

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import InertiaStamped, PoseStamped, TwistStamped, WrenchStamped
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, MultiArrayDimension, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory as JointTrajectoryMsg
from trajectory_msgs.msg import MultiDOFJointTrajectory

from ..control import CartesianReference, ControlLoop, JointReference, JointTrajectory
from ..control import params as loop_params
from ..control.params import LAW_KEYS, LAWS, SAFETY_KEYS, SIX_KEYS  # noqa: F401 (re-exported)
from .. import realtime
from ..dynamics import Model, self_check
from .common import (EXECUTORS, REJECT_REASONS, RELIABILITIES, JointStateMapper, ParamSpec, check_value,
                     declare_all, make_executor, make_qos, map_joint_values, param_value,
                     params_table_markdown, pose_to_rp, ros_param_spec, trajectory_arrays, wrench_to_array)
from .cartesian_refs import cartesian_trajectory_from_msg, twist_from_msg

T = Parameter.Type

# ------------------------------------------------------------------------------------------------
# parameters: the control loop's (control/params.py: validated there, by the same rules, for every
# front end) and the node's own (model source, topics, QoS, trigger, lifecycle, executor)
# ------------------------------------------------------------------------------------------------
_LOOP = {s.name: s for s in loop_params.LOOP_PARAMS}


def _loop(name):
    return ros_param_spec(_LOOP[name])


GENERAL_PARAMS = [
    _loop("controller"),
    ParamSpec("robot_description", "", "URDF text; empty: use the robot_description topic"),
    ParamSpec("robot_description_topic", "/robot_description",
              "std_msgs/String topic (TRANSIENT_LOCAL, as robot_state_publisher publishes it)", startup=True),
    ParamSpec("robot_description_timeout", 2.0,
              "autostart: seconds to wait for the robot_description topic before falling back to "
              "urdf_path / robot (waits indefinitely when neither is set)", "nonneg"),
    ParamSpec("urdf_path", "", "URDF file, used when no robot_description is available; a .xacro file is "
              "expanded with xacro_args"),
    ParamSpec("xacro_args", T.STRING_ARRAY, "xacro arguments 'name:=value' for a .xacro urdf_path"),
    ParamSpec("robot", "", "example-robot-data robot name (e.g. panda), the last fallback"),
    ParamSpec("strict", False, "refuse a URDF whose inertials are not physically consistent (negative "
              "mass, tensor not positive definite, triangle inequality broken, a joint moving no "
              "inertia); false: load it, warn, and list the issues on /diagnostics (model_warnings)"),
    ParamSpec("min_joint_inertia", 1e-6, "inertia [kg m^2] (kg for a prismatic joint) given to a joint that "
              "moves none (a link without <inertial>), so that M stays invertible; 0: none", "nonneg"),
    _loop("joints"),
    _loop("backend"),
    ParamSpec("self_check_tolerance", 1e-9, "backend self-check tolerance at configure", "positive"),
    ParamSpec("autostart", True, "configure and activate at start-up (no lifecycle manager needed)",
              startup=True),
    ParamSpec("trigger", "joint_state", "what runs the control step", "choices", ("joint_state", "timer")),
    _loop("update_rate"),
    ParamSpec("joint_states_topic", "/joint_states", "sensor_msgs/JointState input"),
    ParamSpec("qos_reliability", "best_effort", "QoS reliability of the joint-state subscription",
              "choices", RELIABILITIES),
    ParamSpec("qos_depth", 1, "QoS history depth (KEEP_LAST) of the joint-state subscription", "positive"),
    ParamSpec("require_velocity", True,
              "reject joint states without velocities (false: an empty velocity field means zero)"),
    ParamSpec("wrench_topic", "/ft_sensor/wrench", "geometry_msgs/WrenchStamped input (F/T sensor)"),
    _loop("sensor_frame"),
    _loop("tool_mass"),
    _loop("tool_com"),
    _loop("wrench_filter_cutoff_hz"),
    _loop("wrench_deadband"),
    ParamSpec("command_topic", "/effort_controller/commands",
              "std_msgs/Float64MultiArray output in `joints` order (ros2_control JointGroupEffortController)"),
    ParamSpec("output_qos_reliability", "reliable", "QoS reliability of the command publishers "
              "(command_topic, ~/joint_command)", "choices", RELIABILITIES),
    ParamSpec("output_qos_depth", 1, "QoS history depth (KEEP_LAST) of the command publishers", "positive"),
    ParamSpec("publish_joint_command", False, "also publish sensor_msgs/JointState efforts on ~/joint_command"),
    ParamSpec("publish_state", True, "publish ~/state (filled and sent only while it has subscribers; the "
              "subscriber count is checked every 0.1 s)", live=True),
    _loop("watchdog_timeout"),
    _loop("safe_command"),
    _loop("effort_limits"),
    _loop("effort_scale"),
    _loop("torque_rate_limit"),
    _loop("ramp_time"),
    _loop("position_margin"),
    _loop("position_stiffness"),
    _loop("velocity_damping"),
    _loop("log_throttle_period"),
    *[_loop(n) for n in _LOOP if n.startswith("observer.") or n == "cartesian_impedance.wrench_source"],
    *[_loop(n) for n in _LOOP if n.startswith("payload_id.")],
    ParamSpec("diagnostics_period", 1.0, "period of /diagnostics [s]", "positive", startup=True),
    ParamSpec("executor", "single", "rclpy executor of main(): SingleThreadedExecutor, "
              "rclpy.experimental.EventsExecutor or MultiThreadedExecutor (the --multi-threaded flag = "
              "multi).  bench/latency.py at 1 kHz: events used 35 % of a core against 68-84 % for "
              "single, with p99 1.3x the echo floor instead of 1.5-2x; but the computed-torque system "
              "test failed in 2 of 2 fresh-clone CI runs with it (not understood yet), so single stays "
              "the default; multi was unstable", "choices", EXECUTORS, startup=True),
    *[ParamSpec(*p, startup=True) for p in realtime.PARAMS],   # applied by main() once the node exists
]
assert {s.name for s in GENERAL_PARAMS} >= set(_LOOP), "every loop parameter is a node parameter"


def parse_xacro_args(items):
    """['name:=value', ...] (as on the xacro command line) -> {name: value}; ValueError on another form."""
    out = {}
    for a in items or []:
        if not a:
            continue
        name, sep, value = str(a).partition(":=")
        if not sep or not name.strip():
            raise ValueError(f"xacro_args: expected 'name:=value', got {a!r}")
        out[name.strip()] = value
    return out


def law_param_specs():
    """`<law>.<key>` parameters for every law, typed from LAW_KEYS, defaults from the law classes."""
    return [ros_param_spec(s) for s in loop_params.law_param_specs()]


def all_param_specs():
    return GENERAL_PARAMS + law_param_specs()


# the parameters handed to the control loop (at configure, and live changes)
LOOP_PARAM_NAMES = frozenset(s.name for s in loop_params.loop_param_specs())


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
    ("sub", "~/cartesian_trajectory", "trajectory_msgs/MultiDOFJointTrajectory",
     "trajectory of the controlled frame (cartesian_impedance): first transform per point, optional "
     "velocities / accelerations (feed-forward); interpolated on SE(3), started on receipt from the pose "
     "being followed"),
    ("sub", "~/target_twist", "geometry_msgs/TwistStamped",
     "twist of the streamed target, base-frame axes; sent with the next ~/target_pose (<= 0.1 s old)"),
    ("pub", "command_topic (/effort_controller/commands)", "std_msgs/Float64MultiArray",
     "torque command in `joints` order"),
    ("pub", "~/joint_command", "sensor_msgs/JointState", "the same command as efforts (publish_joint_command)"),
    ("pub", "~/state", "sensor_msgs/JointState",
     "controller state: position = reference, velocity = error, effort = command"),
    ("pub", "/diagnostics", "diagnostic_msgs/DiagnosticArray",
     "loop rate, step latency, safety-filter interventions, rejected messages, watchdog (diagnostics_period)"),
    ("pub", "~/payload_estimate", "geometry_msgs/InertiaStamped",
     "the last successful payload identification (reliable, TRANSIENT_LOCAL): m, com (in "
     "header.frame_id = the identification frame), ixx..izz about the com (payload_id.mode excitation; 0 "
     "after static poses, which do not give the inertia)"),
]
SERVICES = [
    ("~/tare", "std_srvs/Trigger", "tare the wrench sensor with the current reading"),
    ("~/hold", "std_srvs/Trigger", "hold the current position (pose) as the reference"),
    ("~/identify_payload", "std_srvs/Trigger",
     "start a payload identification with the payload_id.* parameters (computed_torque / joint_impedance, "
     "active); returns at once: what it will do, or why it is refused.  The result: ~/payload_estimate, "
     "a log line, /diagnostics payload_id.result"),
    ("~/identify_payload_status", "std_srvs/Trigger",
     "success = a result is available; message = the running state, or the result (mass +- std, com +- "
     "std, condition number, residual) or why the run failed"),
    ("~/cancel_payload_identification", "std_srvs/Trigger",
     "abort a running identification (the arm goes back to the reference held before it)"),
    ("~/attach_payload", "std_srvs/Trigger",
     "attach the last estimate to the model as payload_id.name (law, safety fallback, observer use it); "
     "refused when mass std / mass > payload_id.max_mass_std"),
    ("~/detach_payload", "std_srvs/Trigger", "detach payload_id.name from the model"),
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
TARGET_TWIST_MAX_AGE = 0.1       # s: a ~/target_twist older than this is not paired with a ~/target_pose
QOS_REFERENCE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
QOS_LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
DIAG_LEVELS = {0: DiagnosticStatus.OK, 1: DiagnosticStatus.WARN, 2: DiagnosticStatus.ERROR}

# parameters read on the hot path -> the attribute caching them (refreshed after every parameter set)
HOT_PARAMS = {"publish_state": "_publish_state"}
STATE_SUBS_CHECK_PERIOD = 0.1        # s between get_subscription_count() calls on ~/state


def _bind_array(msg, field, n):
    """Give msg.<field> (float64[]) n zeros and return a numpy view writing into the message's own
    array (the setter may copy, so the view is taken from what the message holds)."""
    setattr(msg, field, array("d", bytes(8 * n)))
    return np.frombuffer(getattr(msg, field), dtype=np.float64)


class _Configured:
    """Everything built at configure (and destroyed at cleanup): the ROS side (model source, mapper,
    messages, publishers, subscriptions, timers, step statistics) here, the control state in `loop`
    (a ControlLoop).  Attributes not found here are read from the loop (c.law, c.safety, c.perm,
    c.watchdog, c.state, ...)."""

    def __getattr__(self, name):
        loop = self.__dict__.get("loop")
        if loop is None:
            raise AttributeError(name)
        return getattr(loop, name)


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
        self.counts = defaultdict(int)         # rejected.*, errors.*, watchdog_trips (shared with the loop)
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
        self.create_service(Trigger, "~/identify_payload", self._payload_service("identify"))
        self.create_service(Trigger, "~/identify_payload_status", self._payload_service("status"))
        self.create_service(Trigger, "~/cancel_payload_identification", self._payload_service("cancel"))
        self.create_service(Trigger, "~/attach_payload", self._payload_service("attach"))
        self.create_service(Trigger, "~/detach_payload", self._payload_service("detach"))
        self._payload_pub = self.create_publisher(InertiaStamped, "~/payload_estimate", QOS_LATCHED)
        self._payload_published = None             # the PayloadRun whose estimate was published
        self._clock_handle = self.get_clock().handle   # one ROS clock read per step (sim time included)
        self._cache_params(HOT_PARAMS)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._on_parameters_set)
        self._t_created = time.monotonic()
        self._autostart_timer = None
        self._autostart_logged = False
        self.rt_report = None                  # realtime.apply's report once apply_realtime() ran
        self._gc_ctl = realtime.GcControl(realtime.Settings())   # a no-op until apply_realtime()
        if self.get_parameter("autostart").value:
            self._autostart_timer = self.create_timer(0.05, self._guard(self._autostart, "autostart"))

    def apply_realtime(self):
        """Apply the rt_* parameters (realtime.apply) to this process, once, on the thread that will
        spin (main() calls it before the executor exists).  Refusals are logged and reported on
        /diagnostics; realtime.RealtimeError (a RuntimeError) when rt_required and one was refused."""
        settings = realtime.settings_from(lambda n: self.get_parameter(n).value)

        def log(text):                                 # one call site per severity (rclpy)
            if "refused" in text:
                self._log.warning(text)
            else:
                self._log.info(text)
        self.rt_report = realtime.apply(settings, log=log)
        self._gc_ctl = realtime.GcControl(settings)
        return self.rt_report

    # ---------------------------------------------------------------- small helpers
    def _p(self, name):
        return param_value(self, name)

    def _cache_params(self, names):
        """Copy the parameters read on every cycle (HOT_PARAMS) into attributes; called at start-up
        and after every successful parameter change, so the hot path does no parameter lookups."""
        for name in names:
            if name in HOT_PARAMS:
                setattr(self, HOT_PARAMS[name], self._p(name))

    def _on_parameters_set(self, params):
        self._cache_params([p.name for p in params])

    def _log_line(self, level, text):
        """The control loop's log callable -> this node's rclpy logger (and /rosout).  One call site
        per severity: rclpy refuses a call site whose severity changes between calls."""
        if level == "error":
            self._log.error(text)
        elif level == "warn":
            self._log.warn(text)
        else:
            self._log.info(text)

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
        kw.update(strict=bool(self._p("strict")), min_joint_inertia=float(self._p("min_joint_inertia")))
        rd = self._p("robot_description")
        if rd:
            src, urdf = "robot_description parameter", rd
        elif self._rd_msg:
            src, urdf = f"{self._p('robot_description_topic')} topic", self._rd_msg
        elif self._p("urdf_path"):
            src = f"urdf_path {self._p('urdf_path')}"
            xacro_args = parse_xacro_args(self._p("xacro_args"))     # ValueError naming a bad entry
            try:                                       # a .urdf or a .xacro file (expanded here)
                return Model.from_description(self._p("urdf_path"), xacro_args=xacro_args or None,
                                              **kw), src
            except Exception as e:                     # noqa: BLE001 (file, xacro, XML, inertia errors)
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
        for w in m.warnings:                           # loaded anyway (strict false): say so once
            self._log.warning(f"{c.source}: {w}")
        if m.floating_base:
            raise ValueError(f"{c.source}: a floating-base model; the controller needs a fixed base")
        if m.nq != m.nv:
            raise ValueError(f"{c.source}: nq {m.nq} != nv {m.nv} (unsupported joint types)")
        try:
            c.check_report = self_check(m, tol=self._p("self_check_tolerance"))
        except ValueError as e:                        # SelfCheckError
            raise ValueError(f"{c.source}: {e}") from None
        # the control loop: law, safety filter, supervisor (validates and reorders its parameters)
        c.loop = ControlLoop.from_params(
            m, {name: self._p(name) for name in LOOP_PARAM_NAMES}, log=self._log_line, counts=self.counts,
            labels={"joint_states": self._p("joint_states_topic"), "wrench": self._p("wrench_topic")})
        n = c.loop.n
        # a previous configuration's last command on the same topic (e.g. its safe command g(q) after
        # deactivate, which the driver still holds): the new loop ramps from it, not from zero
        last = self.__dict__.get("_last_sent")
        if (last is not None and last[0] == self.resolve_topic_name(self._p("command_topic"))
                and set(m.joint_names) <= set(last[1])):
            c.loop.safety.hold(np.array([last[1][j] for j in m.joint_names]))
        c.mapper = JointStateMapper(list(m.joint_names), require_velocity=self._p("require_velocity"))
        c.effort_np = np.zeros(n)
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
        c.stamp_ns = 0                             # ROS time of the message being published
        c.state_subs, c.state_subs_checked = 0, -float("inf")   # ~/state subscribers, counted every
                                                                # STATE_SUBS_CHECK_PERIOD s
        # ROS entities
        qos_in = make_qos(self._p("qos_reliability"), self._p("qos_depth"))
        qos_out = make_qos(self._p("output_qos_reliability"), self._p("output_qos_depth"))
        c.cmd_pub = self.create_publisher(Float64MultiArray, self._p("command_topic"), qos_out)
        c.state_pub = self.create_publisher(JointState, "~/state", 10)
        c.jc_pub = (self.create_publisher(JointState, "~/joint_command", qos_out)
                    if self._p("publish_joint_command") else None)
        self._make_observer_outputs(c)
        c.subs = [
            self.create_subscription(JointState, self._p("joint_states_topic"),
                                     self._guard(self._on_joint_state, "joint_states"), qos_in),
        ]
        if c.cartesian or self._p("sensor_frame"):  # cartesian_impedance; payload_id from the F/T sensor
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
            self.create_subscription(MultiDOFJointTrajectory, "~/cartesian_trajectory",
                                     self._guard(self._on_cartesian_trajectory, "cartesian_trajectory"),
                                     QOS_REFERENCE),
            self.create_subscription(TwistStamped, "~/target_twist",
                                     self._guard(self._on_target_twist, "target_twist"), QOS_REFERENCE),
        ]
        self._target_twist = None                  # (receipt time, twist [v; w]) from ~/target_twist
        c.timers = []
        c.watchdog_timer = self.create_timer(min(0.05, 0.5 * self._p("watchdog_timeout")),
                                             self._guard(self._on_watchdog, "watchdog"))
        c.watchdog_timer.cancel()
        c.timers.append(c.watchdog_timer)
        # the safe command moves from the last command at the torque-rate limit: this timer carries the
        # ramp on at the control period while no control step publishes (stale input, deactivation)
        c.safe_period = c.loop.period
        c.safe_ramping = False
        c.safe_timer = self.create_timer(c.safe_period, self._guard(self._on_safe_ramp, "safe_ramp"))
        c.safe_timer.cancel()
        c.timers.append(c.safe_timer)
        c.step_timer = None
        if self._p("trigger") == "timer":
            c.step_timer = self.create_timer(c.loop.period, self._guard(self._on_step_timer, "control_step"))
            c.step_timer.cancel()
            c.timers.append(c.step_timer)
        self.c = c

    def _teardown(self):
        c, self.c = self.c, None
        self.active = False
        if c is None:
            return
        loop, cmd_pub = c.__dict__.get("loop"), c.__dict__.get("cmd_pub")
        if loop is not None and cmd_pub is not None and loop.safety.prev is not None:
            # what the driver holds now, by joint name, for the next configure's start
            self._last_sent = (cmd_pub.topic_name, dict(zip(loop.model.joint_names,
                                                            np.array(loop.safety.prev, dtype=float))))
        for t in c.__dict__.get("timers", []):
            self.destroy_timer(t)
        for s in c.__dict__.get("subs", []):
            self.destroy_subscription(s)
        for p in ("cmd_pub", "state_pub", "jc_pub"):
            if c.__dict__.get(p) is not None:
                self.destroy_publisher(c.__dict__[p])

    def on_activate(self, state):
        with self._lock:
            c = self.c
            c.loop.activate(time.monotonic())      # the law holds the first valid state; the filter
            self.active = True                     # ramps from the last command sent (deactivate's)
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
            # ramp to the safe command at the rate limit, one control period's step per message, then
            # stop.  Bounded by a number of steps (the limit span / (rate x period)), not by wall time:
            # on a loaded machine the steps take longer than a period, and a wall-clock deadline would
            # stop short of the safe command (the next configure would then start from another one)
            c.loop.deactivate()
            for _ in range(int(np.ceil(min(c.loop.safe_ramp_time(), 10.0) / c.safe_period)) + 2):
                if self._publish_safe():
                    break
                time.sleep(c.safe_period)
        self.active = False
        c.loop.deactivate()
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
            self._flush_commands()
            self._teardown()
        return SUCCESS

    def _flush_commands(self, timeout=0.5):
        """The process is about to end: wait (bounded) until reliable subscribers have acknowledged the
        last commands (the safe command), so that it is not lost with the process under load."""
        c = self.c
        if c is None:
            return
        from rclpy.duration import Duration
        for pub in (getattr(c, "cmd_pub", None), getattr(c, "jc_pub", None)):
            if pub is not None:
                try:
                    pub.wait_for_all_acked(Duration(seconds=timeout))
                except Exception:                      # noqa: BLE001 (best effort on the way out)
                    pass

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
                st = msg.header.stamp
                eff = msg.effort                       # measured torques (payload identification)
                if len(eff) == len(msg.name):
                    np.asarray(eff, dtype=np.float64).take(c.mapper._idx, out=c.effort_np)
                c.loop.update_state(c.mapper.q, c.mapper.v, now,
                                    (st.sec + st.nanosec * 1e-9) if (st.sec or st.nanosec) else None,
                                    c.effort_np if len(eff) == len(msg.name) else None)
            else:
                c.loop.reject_state(c.mapper.reason, c.mapper.detail, now)
            if self.active and c.step_timer is None:
                if ok:
                    self._step(now)
                else:
                    self._publish_safe()

    def _on_wrench(self, msg):
        c = self.c
        if c is None or not c.cartesian:
            return
        w = wrench_to_array(msg.wrench)
        with self._lock:
            c.loop.set_wrench(w, msg.header.frame_id, time.monotonic())

    def _reference(self, what, convert):
        """convert() -> a reference for the loop, or ValueError (counted as rejected.<what>)."""
        c = self.c
        if c is None:
            return
        with self._lock:
            try:
                ref = convert(c)
            except ValueError as e:
                c.loop.reject_reference(what, str(e), time.monotonic())
                return
            if what == "target_wrench":
                c.loop.set_target_wrench(ref, what, time.monotonic())
            else:
                c.loop.set_reference(ref, what, time.monotonic())

    def _on_trajectory(self, msg):
        def convert(c):
            if c.cartesian:
                raise ValueError(f"{c.law_name} takes no joint trajectory")
            times, P, V, A = trajectory_arrays(list(c.model.joint_names), msg)
            return JointTrajectory(times, P, V, A, lower=c.model.lower_limits, upper=c.model.upper_limits)
        self._reference("joint_trajectory", convert)

    def _on_target_joint_state(self, msg):
        def convert(c):
            if c.cartesian:
                raise ValueError(f"{c.law_name} takes no joint reference")
            names = list(c.model.joint_names)
            q = map_joint_values(names, msg.name, msg.position, "target_joint_state position")
            v = (map_joint_values(names, msg.name, msg.velocity, "target_joint_state velocity")
                 if len(msg.velocity) else None)
            return JointReference(q, v)
        self._reference("target_joint_state", convert)

    def _check_base_frame(self, c, frame_id, what):
        ok = ("", "world", c.model.frame_names[0])
        if frame_id not in ok:
            raise ValueError(f"{what}: frame {frame_id!r} is not the robot base "
                             f"({c.model.frame_names[0]!r}); no tf lookup in this node")

    def _on_target_pose(self, msg):
        def convert(c):
            if not c.cartesian:
                raise ValueError(f"{c.law_name} takes no Cartesian reference")
            self._check_base_frame(c, msg.header.frame_id, "target_pose")
            R, p = pose_to_rp(msg.pose)
            tw = self._target_twist            # the latest ~/target_twist, if at most 0.1 s old
            if tw is not None and time.monotonic() - tw[0] <= TARGET_TWIST_MAX_AGE:
                return CartesianReference(R, p, twist=tw[1])
            return CartesianReference(R, p)
        self._reference("target_pose", convert)

    def _on_target_twist(self, msg):
        """Stored (base-frame axes, [linear; angular]) and sent with the next ~/target_pose."""
        c = self.c
        if c is None:
            return
        try:
            if not c.cartesian:
                raise ValueError(f"{c.law_name} takes no Cartesian reference")
            self._check_base_frame(c, msg.header.frame_id, "target_twist")
            tw = twist_from_msg(msg)
        except ValueError as e:
            self._target_twist = None
            c.loop.reject_reference("target_twist", str(e), time.monotonic())
            return
        self._target_twist = (time.monotonic(), tw)

    def _on_cartesian_trajectory(self, msg):
        def convert(c):
            if not c.cartesian:
                raise ValueError(f"{c.law_name} takes no Cartesian trajectory")
            self._check_base_frame(c, msg.header.frame_id, "cartesian_trajectory")
            return cartesian_trajectory_from_msg(msg)
        self._reference("cartesian_trajectory", convert)

    def _on_target_wrench(self, msg):
        def convert(c):
            if not c.cartesian:
                raise ValueError(f"{c.law_name} takes no wrench reference")
            self._check_base_frame(c, msg.header.frame_id, "target_wrench")
            w = wrench_to_array(msg.wrench)
            if not np.all(np.isfinite(w)):
                raise ValueError("target_wrench: values must be finite")
            return w
        self._reference("target_wrench", convert)

    # ---------------------------------------------------------------- the control step
    def _on_step_timer(self):
        c = self.c
        if c is None or not self.active:
            return
        now = time.monotonic()
        with self._lock:
            if c.loop.stale(now):
                c.loop.check_watchdog(now)
                self._publish_safe()
                return
            self._step(now)

    def _step(self, now):
        """The loop's step (law -> safety filter, or the safe command) -> publish.  Runs under the lock."""
        c = self.c
        t0 = time.perf_counter()
        try:
            c.stamp_ns = ns = self._clock_handle.get_now().nanoseconds   # the one clock read: the law's
            tau, safe = c.loop.step(now, ns * 1e-9)                       # time and the message stamps
            self._send(tau, safe)
            if c.obs_wrench_pub is not None:
                self._publish_observer(c, now, safe)
            run = c.loop.payload_run
            if run is not None and run.ok and run is not self._payload_published:
                self._publish_payload(run)
        except Exception as e:                         # noqa: BLE001
            self._on_exception("control_step", e)
            return
        self._gc_ctl.tick(now)                         # rt_gc_mode manual: after the command left
        if safe:
            return
        lat = time.perf_counter() - t0
        c.stats_steps += 1
        c.stats_lat_sum += lat
        if lat > c.stats_lat_max:
            c.stats_lat_max = lat

    def _make_observer_outputs(self, c):
        """~/external_wrench (WrenchStamped, frame_id = observer.frame), ~/external_torque (JointState,
        r in `joints` order in effort) and ~/collision (Bool, TRANSIENT_LOCAL, on every change)."""
        c.obs_wrench_pub = c.obs_torque_pub = c.collision_pub = None
        obs = c.loop.observer
        if obs is None:
            return
        c.obs_wrench_pub = self.create_publisher(WrenchStamped, "~/external_wrench", 1)
        c.obs_torque_pub = self.create_publisher(JointState, "~/external_torque", 1)
        c.collision_pub = self.create_publisher(
            Bool, "~/collision", QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST,
                                            reliability=ReliabilityPolicy.RELIABLE,
                                            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        c.obs_wrench_msg = WrenchStamped()
        c.obs_wrench_msg.header.frame_id = obs.frame
        c.obs_torque_msg = JointState(name=list(c.loop.joints))
        c.obs_last_pub = -float("inf")
        c.collision_pub.publish(Bool(data=False))

    def _publish_observer(self, c, now, safe):
        """After a control step: ~/collision on a change, the wrench and r at observer.publish_rate."""
        loop = c.loop
        if safe or loop._obs_last is None:
            return
        obs = loop.observer
        if loop.obs_edge:
            c.collision_pub.publish(Bool(data=bool(obs.collision)))
        rate = loop.params["observer.publish_rate"]
        if rate > 0 and now - c.obs_last_pub < 1.0 / rate:
            return
        c.obs_last_pub = now
        sec, nanosec = divmod(c.stamp_ns, 1_000_000_000)
        w = loop.observer_wrench(c.stamp_ns * 1e-9)
        m = c.obs_wrench_msg
        m.header.stamp.sec, m.header.stamp.nanosec = sec, nanosec
        f, t = m.wrench.force, m.wrench.torque
        f.x, f.y, f.z, t.x, t.y, t.z = (float(x) for x in w)
        c.obs_wrench_pub.publish(m)
        tm = c.obs_torque_msg
        tm.header.stamp.sec, tm.header.stamp.nanosec = sec, nanosec
        tm.effort = obs.r[loop.perm].tolist()
        c.obs_torque_pub.publish(tm)

    def _send(self, tau, safe):
        """Publish, tell the loop when the command left (the rate limit counts from there), and keep
        the safe-ramp timer running while a safe command has not reached its target."""
        c = self.c
        self._publish(tau, safe)
        c.loop.sent(time.monotonic())
        if not safe:
            return True
        reached = c.loop.safe_reached
        if not reached and not c.safe_ramping:
            c.safe_ramping = True
            c.safe_timer.reset()
        elif reached and c.safe_ramping:
            c.safe_ramping = False
            c.safe_timer.cancel()
        return reached

    def _safe_torque(self):
        """The safe command in model order: zero, or g(q) at the last valid q, clipped to the limits."""
        return self.c.loop._safe_torque()

    def _publish_safe(self):
        """Publish one step of the safe command (ControlLoop.safe_step: from the last command sent
        toward zero or g(q) at the torque-rate limit, at most rate x one control period per message).
        Until it is reached, the safe-ramp timer publishes the next steps at the control period.
        Returns True once the command equals the safe torque."""
        c = self.c
        if c is None:
            return True
        tau = c.loop.safe_step(time.monotonic())
        c.stamp_ns = self._clock_handle.get_now().nanoseconds
        return self._send(tau, True)

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
            info = c.loop.info
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
    def _on_watchdog(self):
        c = self.c
        if c is None or not self.active:
            return
        with self._lock:
            if c.loop.check_watchdog(time.monotonic()) and c.step_timer is None:
                if c.loop.watchdog != "ok" or not c.loop.have_state:
                    self._publish_safe()

    # ---------------------------------------------------------------- services
    def _on_hold(self, req, resp):
        try:
            with self._lock:
                c = self.c
                if c is None or not self.active:
                    resp.success, resp.message = False, "not active with a valid joint state"
                    return resp
                resp.success, resp.message = c.loop.hold()
        except Exception as e:                         # noqa: BLE001
            self.counts["errors.hold"] += 1
            resp.success, resp.message = False, f"{type(e).__name__}: {e}"
        return resp

    def _payload_service(self, what):
        """The Trigger handler of one payload identification service (identify returns at once: the
        run advances with the control steps)."""
        def handler(req, resp):
            try:
                with self._lock:
                    c = self.c
                    if c is None:
                        resp.success, resp.message = False, "not configured"
                        return resp
                    loop = c.loop
                    if what == "identify":
                        if not self.active:
                            resp.success, resp.message = False, "refused: the controller is not active"
                        else:
                            resp.success, resp.message = loop.start_payload_id(time.monotonic())
                    elif what == "status":
                        resp.success, resp.message = loop.payload_status()
                    elif what == "cancel":
                        resp.success, resp.message = loop.cancel_payload_id()
                    elif what == "attach":
                        resp.success, resp.message = loop.attach_payload_estimate()
                    else:
                        resp.success, resp.message = loop.detach_payload_estimate()
                if what in ("attach", "detach") and resp.success:
                    self._log.info(f"payload: {resp.message}")
            except Exception as e:                     # noqa: BLE001
                self.counts[f"errors.payload_{what}"] += 1
                resp.success, resp.message = False, f"{type(e).__name__}: {e}"
            return resp
        return handler

    def _publish_payload(self, run):
        """~/payload_estimate (latched) of a successful run."""
        self._payload_published = run
        e = run.estimate
        msg = InertiaStamped()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = e.frame
        msg.inertia.m = float(e.mass)
        msg.inertia.com.x, msg.inertia.com.y, msg.inertia.com.z = (float(x) for x in e.com)
        if e.inertia is not None:
            I = e.inertia
            i = msg.inertia
            i.ixx, i.ixy, i.ixz, i.iyy, i.iyz, i.izz = (float(I[0, 0]), float(I[0, 1]), float(I[0, 2]),
                                                        float(I[1, 1]), float(I[1, 2]), float(I[2, 2]))
        self._payload_pub.publish(msg)

    def _on_tare(self, req, resp):
        try:
            with self._lock:
                c = self.c
                if c is None:
                    resp.success, resp.message = False, "no wrench processing (configure with cartesian_impedance)"
                else:
                    resp.success, resp.message = c.loop.tare()
        except Exception as e:                         # noqa: BLE001
            self.counts["errors.tare"] += 1
            resp.success, resp.message = False, f"{type(e).__name__}: {e}"
        return resp

    # ---------------------------------------------------------------- parameters
    def _on_set_parameters(self, params):
        try:
            return self._set_parameters(params)
        except Exception as e:                         # noqa: BLE001 (nothing may escape a callback)
            self.counts["errors.parameters"] += 1
            return SetParametersResult(successful=False, reason=f"{type(e).__name__}: {e}")

    def _set_parameters(self, params):
        """Every value is checked here (ROS-side rules); while configured, the live ones of the control
        loop go to ControlLoop.set_params, which applies them all or none."""
        c = self.c
        n = c.n if c is not None else (len(self._p("joints") or []) or None)
        errors, loop_updates = [], {}
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
            err = check_value(spec, v, n if spec.law_key not in SIX_KEYS else 6)
            if err:
                errors.append(err)
                continue
            if c is not None and p.name in LOOP_PARAM_NAMES and (spec.live or p.name == "sensor_frame"):
                loop_updates[p.name] = v
        if errors:
            return SetParametersResult(successful=False, reason="; ".join(errors))
        if loop_updates:
            with self._lock:
                ok, reason = c.loop.set_params(loop_updates)
            if not ok:
                return SetParametersResult(successful=False, reason=reason)
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
                       ("model_warnings", str(len(c.model.warnings)))]
                kv += [(f"model_warning.{i}", w) for i, w in enumerate(c.model.warnings)]
                lvl, msg, loop_kv = c.loop.diagnostics()
                level = DIAG_LEVELS[lvl]
                kv += loop_kv
                if not self.active:
                    level, msg = DiagnosticStatus.OK, "inactive"
        for r in REJECT_REASONS:
            kv.append((f"rejected.joint_states.{r}", str(self.counts[f"rejected.joint_states.{r}"])))
        total = sum(v for k, v in self.counts.items() if k.startswith("rejected.joint_states."))
        kv.append(("rejected.joint_states", str(total)))
        if self.rt_report is not None:
            kv += realtime.diagnostics_values(self.rt_report)
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
        node.apply_realtime()                       # RealtimeError (rt_required): logged, exit code 1
        name = "multi" if "--multi-threaded" in extra else node.get_parameter("executor").value
        executor = make_executor(name)              # ValueError: logged, exit code 1
        node.get_logger().info(f"executor: {name}")
        return executor

    def safe_stop(node):
        # the shutdown transition publishes the safe command on the way out
        if node.lifecycle_state in ("active", "inactive", "unconfigured"):
            node.trigger_shutdown()

    return run(TorqueControllerNode, args=argv, executor_factory=executor_for, on_exit=safe_stop,
               exit_process=True)


if __name__ == "__main__":
    sys.exit(main())
