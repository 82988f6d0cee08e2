"""The torque controller node: JointState (+ wrench, references) -> control law -> safety filter ->
effort command.  A thin rclpy adapter (message -> numpy, name mapping, QoS, parameters, lifecycle,
publishing) over robot_dynamics.control.ControlLoop, which holds the law, the safety filter and the
supervisor (watchdog, safe command, start ramp, resume without a jump) and which a hardware bridge
drives in-process the same way.  One class, importable, so several controllers can share one
executor:

    ros2 run robot_dynamics controller_node --ros-args -p robot:=panda -p controller:=joint_impedance
    python -m robot_dynamics.nodes.controller_node --ros-args --params-file config/panda_joint_impedance.yaml

Two threads.  The control thread (nodes/control_path.py, started at configure, ended at cleanup) waits
on the joint-state subscription itself: it takes each joint state (its serialized bytes, read in place:
nodes/cdr.py), steps the ControlLoop and publishes the command (controller_outputs.py), with no
executor work per message; it also runs the `trigger: timer` clock, the watchdog and the safe-command
ramp (its wake-ups).  The executor thread keeps everything else: parameters, services, references,
the wrench, lifecycle transitions, diagnostics.  The two meet under one lock, held by the control
thread for a step and by the executor only to hand a change over: a reference, a parameter change or
a transition applies whole, between two steps.  References are converted from their messages before
the lock is taken, so a 1000-point trajectory does not hold the loop up (and Python's GIL switch
interval is lowered to 0.2 ms, control_path.SWITCH_INTERVAL, so the executor converting it lets go
of the interpreter quickly).

Lifecycle (rclpy.lifecycle): configure loads the model (the `robot_description` parameter, else the
/robot_description topic, else `urdf_path`, else `robot`), runs the backend self-check, builds the
backend, law, safety filter and wrench processor once, and starts the control thread; activate starts
commanding (the law holds the first valid state, the safety filter ramps from zero); deactivate
publishes the safe command and stops.  `autostart` (default true) configures and activates at
start-up.

Interfaces: see TOPICS / SERVICES and the parameters in controller_params.py (exported as a Markdown
table by `python -m robot_dynamics.nodes.controller_node --print-params`).

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
import struct
import sys
import threading
import time
from collections import defaultdict

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import InertiaStamped, PoseStamped, Transform, Twist, TwistStamped, WrenchStamped
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message
from rclpy.time import Time
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory as JointTrajectoryMsg
from trajectory_msgs.msg import JointTrajectoryPoint, MultiDOFJointTrajectory, MultiDOFJointTrajectoryPoint

from ..control import ControlLoop
from .. import realtime
from ..dynamics import Model, self_check
from .cdr import JointStateCdr, read_wrench_stamped
from .common import (SILENT_AFTER, JointStateMapper, check_value, declare_all, make_executor, make_qos,
                     param_value, silent_publisher_hint, wrench_to_array)
from .control_path import ControlPath, TakeSubscription
from .controller_inputs import ReferenceInputs
from .controller_outputs import Outputs
from .controller_params import LOOP_PARAM_NAMES, all_param_specs, interface_tables_markdown, parse_xacro_args
from .controller_services import ControllerServices
from .follow_joint_trajectory import FollowJointTrajectoryServer

# the joint-state input and the command output take their QoS from parameters (qos_*, output_qos_*).
# QOS_SENSOR is the wrench input's.
QOS_SENSOR = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
QOS_REFERENCE = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE)
QOS_LATCHED = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
SAFE_REPUBLISH_PERIOD = 0.05     # s: while the input is stale the safe command is sent again at this period
_STAMP = struct.Struct("<iI")   # a serialized builtin_interfaces/Time after the 4-byte CDR header

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE

# parameters read on the hot path -> the attribute caching them (refreshed after every parameter set)
HOT_PARAMS = {"publish_state": "_publish_state"}


def warm_type_supports():
    """Serialize and deserialize one message of every reference type (with a point each), so that the
    first reference a user sends does not pay rclpy's lazy import of the nested types' conversion code
    (50-80 ms for a MultiDOFJointTrajectory) in the executor while the control thread waits."""
    jt = JointTrajectoryMsg(points=[JointTrajectoryPoint(positions=[0.0], velocities=[0.0])])
    mt = MultiDOFJointTrajectory(points=[MultiDOFJointTrajectoryPoint(
        transforms=[Transform()], velocities=[Twist()], accelerations=[Twist()])])
    for m in (jt, mt, PoseStamped(), TwistStamped(), WrenchStamped(), JointState()):
        deserialize_message(serialize_message(m), type(m))


class _Configured:
    """Everything built at configure (and destroyed at cleanup): the ROS side (model source, mapper,
    control path, outputs, step statistics) here, the control state in `loop` (a ControlLoop).
    Attributes not found here are read from the loop (c.law, c.safety, c.perm, c.supervisor, c.state,
    ...)."""

    def __getattr__(self, name):
        loop = self.__dict__.get("loop")
        if loop is None:
            raise AttributeError(name)
        return getattr(loop, name)


class TorqueControllerNode(ReferenceInputs, ControllerServices, FollowJointTrajectoryServer, LifecycleNode):
    """Lifecycle torque controller; see the module docstring."""

    def __init__(self, node_name="torque_controller", **kwargs):
        super().__init__(node_name, **kwargs)
        self._specs = {s.name: s for s in all_param_specs()}
        declare_all(self, self._specs.values())
        self._fjt_declare()                    # constraints.<joint>.* (FollowJointTrajectory)
        self._lock = threading.RLock()
        self._log = self.get_logger()
        self.c = None                          # _Configured while configured
        self.active = False
        self.config_error = ""
        self.counts = defaultdict(int)         # rejected.*, errors.*, watchdog_trips (shared with the loop)
        self._rd_msg = None
        self._rd_sub = None
        self._subscribe_robot_description()
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        # the node's own housekeeping runs on the steady clock: with use_sim_time and no /clock (yet),
        # ROS-time timers never fire, and the node would neither start nor say why
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._diag_timer = self.create_timer(self.get_parameter("diagnostics_period").value,
                                             self._guard(self._publish_diagnostics, "diagnostics"),
                                             clock=self._steady)
        self._diag_last = time.monotonic()
        for srv_name, handler in self._trigger_services():
            self.create_service(Trigger, srv_name, handler)
        self._payload_pub = self.create_publisher(InertiaStamped, "~/payload_estimate", QOS_LATCHED)
        self._payload_published = None             # the PayloadRun whose estimate was published
        self._clock_handle = self.get_clock().handle   # one ROS clock read per step (sim time included)
        self._cache_params(HOT_PARAMS)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._on_parameters_set)
        self._t_created = time.monotonic()
        self._autostart_timer = None
        self._autostart_logged = -1e9          # `waited` when the last "waiting" line was logged
        self.rt_report = None                  # realtime.apply's report once apply_realtime() ran
        self._rt_thread = None                 # rt_scope thread: the settings the control thread applies
        self._gc_ctl = realtime.GcControl(realtime.Settings())   # a no-op until apply_realtime()
        self._warm = False                     # reference type supports loaded (warm_type_supports)
        self.cdr_reference_fallbacks = 0       # trajectory bytes cdr_trajectory refused (rclpy read them)
        if self.get_parameter("autostart").value:
            self._autostart_timer = self.create_timer(0.05, self._guard(self._autostart, "autostart"),
                                                      clock=self._steady)

    def apply_realtime(self):
        """Apply the rt_* parameters (realtime.apply) to this process, once (main() calls it before the
        executor exists).  rt_scope process: every thread now, and the threads created later (the
        control thread, at configure) inherit them; rt_scope thread: memory locking and the collector
        now, the policy, priority and affinity on the control thread alone when it starts.  Refusals
        are logged and reported on /diagnostics; realtime.RealtimeError (a RuntimeError) when
        rt_required and one was refused."""
        settings = realtime.settings_from(lambda n: self.get_parameter(n).value)
        thread_only = settings.scope == "thread"
        self.rt_report = realtime.apply(settings, log=self._rt_log,
                                        parts=("mlock", "gc") if thread_only else realtime.ALL_PARTS)
        self._rt_thread = settings if thread_only else None
        self._gc_ctl = realtime.GcControl(settings)
        return self.rt_report

    def _rt_log(self, text):
        if "refused" in text:                          # one call site per severity (rclpy)
            self._log.warning(text)
        else:
            self._log.info(text)

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
            with self._lock:
                if self.active and self.c is not None:
                    self._publish_safe()
                    self._schedule(time.monotonic())
        except Exception:                              # noqa: BLE001
            pass

    def _on_path_error(self, where, e):
        """An exception on the control thread (its handlers, or taking a message)."""
        self._on_exception("joint_states" if where in ("handler", "take") else f"control_path.{where}", e)

    @property
    def lifecycle_state(self):
        return self._state_machine.current_state[1]

    # ---------------------------------------------------------------- robot description / autostart
    RD_RESUBSCRIBE = 5.0            # s: a publisher seen this long without its TRANSIENT_LOCAL sample

    def _subscribe_robot_description(self):
        """(Re)create the /robot_description subscription: a new reader is a new match, and the
        publisher sends its TRANSIENT_LOCAL sample again (a restarted controller next to a running
        Franka bridge waited for it for minutes, the publisher seen: the first match's delivery lost)."""
        if self._rd_sub is not None:
            self.destroy_subscription(self._rd_sub)
        self._rd_sub = self.create_subscription(
            String, self.get_parameter("robot_description_topic").value, self._on_robot_description,
            QOS_LATCHED)
        self._rd_subscribed = time.monotonic()

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
                # say what it waits for, again every 10 s (a user's restarted controller must not sit
                # there in silence)
                pubs = self.count_publishers(self._p("robot_description_topic"))
                if pubs and time.monotonic() - self._rd_subscribed > self.RD_RESUBSCRIBE:
                    self._log.warn(f"autostart: {pubs} publisher(s) of {self._p('robot_description_topic')} "
                                   f"seen for {self.RD_RESUBSCRIBE:.0f} s and no description: subscribing again")
                    self._subscribe_robot_description()
                if not have_fallback and waited > 1.0 and waited - self._autostart_logged >= 10.0:
                    self._autostart_logged = waited
                    hint = ("; " + silent_publisher_hint(self._p("robot_description_topic"), pubs, waited)) \
                        if pubs and waited >= SILENT_AFTER else ""
                    self._log.warn(f"autostart: waiting {waited:.0f} s for a robot description on "
                                   f"{self._p('robot_description_topic')} ({pubs} publisher(s) seen; "
                                   "it is read TRANSIENT_LOCAL: a publisher that is up delivers it at "
                                   f"once), or set robot_description, urdf_path or robot{self._clock_note()}{hint}")
                return
        self._log.info(
            f"autostart: configuring ({'robot_description parameter' if have_param else ''}"
            f"{'' if have_param else (self._p('robot_description_topic') + ' received' if self._rd_msg else 'fallback ' + repr(self._p('urdf_path') or self._p('robot')) + ': no robot description came in ' + format(waited, '.1f') + ' s')})")
        self._end_autostart()
        if self.trigger_configure() == SUCCESS:
            self.trigger_activate()

    def _clock_note(self):
        """'' or, with use_sim_time, what the node's clock is doing (for the lines that say what the
        node waits for)."""
        if not self.get_parameter("use_sim_time").value:
            return ""
        ns = self._clock_handle.get_now().nanoseconds
        return ("; use_sim_time: no /clock received yet (" + str(self.count_publishers("/clock")) +
                " publisher(s))") if ns == 0 else ""

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
            src = f"robot {self._p('robot')!r} (example-robot-data's model, a stand-in)"
            try:
                model = Model.from_robot(self._p("robot"), **kw)
            except (ValueError, FileNotFoundError, KeyError) as e:
                raise ValueError(f"{src}: {e}") from None
            # named by the user (the `robot` parameter: the sim and demo configs, real_robot.launch.py's
            # fallback_robot), and still not the arm's own description: said at WARN (issue 42)
            self._log.warning(
                f"no robot description (parameter or {self._p('robot_description_topic')}): using "
                f"example-robot-data's {self._p('robot')!r} model, as the `robot` parameter names it; it is "
                "not your driver's URDF (dimensions, masses, limits and tool may differ)")
            return model, src
        else:
            raise ValueError(
                f"no robot description: none on the robot_description parameter or on "
                f"{self._p('robot_description_topic')} (start the robot's driver first: it publishes it, "
                f"TRANSIENT_LOCAL), and no urdf_path.  Pass one: real_robot.launch.py "
                f"robot_description:=\"$(xacro my_arm.urdf.xacro)\", or -p urdf_path:=/path/arm.urdf; "
                f"example-robot-data's model only if you name it (real_robot.launch.py fallback_robot:=panda, "
                f"the `robot` parameter)")
        try:
            return Model.from_urdf_string(urdf, **kw), src
        except Exception as e:                         # noqa: BLE001 (XML / parser errors of any type)
            raise ValueError(f"{src}: {e}") from None

    # ---------------------------------------------------------------- lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            with self._lock:
                self._configure()
            self._start_control_path()
        except Exception as e:                         # noqa: BLE001
            self.config_error = str(e)
            self._log.error(f"configure failed: {e}")
            self._stop_control_path()
            with self._lock:
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
                       f"commands on {self._p('command_topic')}, control thread on {c.js_sub.topic_name}")
        return SUCCESS

    def _configure(self):
        c = _Configured()
        joints = self._p("joints") or []
        if len(set(joints)) != len(joints):
            raise ValueError(f"joints: duplicate names in {joints}")
        self._warn_unknown_parameters()
        try:                                           # the joints first: a bad name is named, not the
            c.model, c.source = self._load_model(joints)   # gains that then have the wrong length
        except ValueError as e:
            if joints and "unknown joint" in str(e):
                raise ValueError(f"joints {joints}: {e}") from None
            raise
        for name in self._specs:                      # values set before configure, checked now
            err = check_value(self._specs[name], self._p(name), len(joints) or None)
            if err:
                raise ValueError(err)
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
        # a previous configuration's last command on the same topic (e.g. its safe command g(q) after
        # deactivate, which the driver still holds): the new loop ramps from it, not from zero
        last = self.__dict__.get("_last_sent")
        if (last is not None and last[0] == self.resolve_topic_name(self._p("command_topic"))
                and set(m.joint_names) <= set(last[1])):
            c.loop.safety.hold(np.array([last[1][j] for j in m.joint_names]))
        c.mapper = JointStateMapper(list(m.joint_names), require_velocity=self._p("require_velocity"))
        c.cdr = JointStateCdr()
        c.cdr_fallbacks = 0
        c.stats_steps, c.stats_lat_sum, c.stats_lat_max = 0, 0.0, 0.0
        c.stamp_ns = 0                             # ROS time of the message being published
        c.timer_trigger = self._p("trigger") == "timer"
        c.next_tick = None                         # trigger timer: the next step's time
        c.safe_period = c.loop.period              # the safe ramp's step period (no message arriving)
        c.safe_ramping = False
        qos_out = make_qos(self._p("output_qos_reliability"), self._p("output_qos_depth"))
        c.out = Outputs(self, c.loop, self._p("command_topic"), qos_out, self._p("publish_joint_command"))
        c.out.safety_markers(c.loop, c.model.frame_names[0])
        c.cmd_np, c.cmd_pub, c.state_pub = c.out.cmd_np, c.out.cmd_pub, c.out.state_pub
        # the joint states: taken by the control thread itself (serialized), never by the executor
        c.js_sub = TakeSubscription(self, JointState, self._p("joint_states_topic"),
                                    make_qos(self._p("qos_reliability"), self._p("qos_depth")), raw=True)
        # with use_sim_time, /clock too: rclpy's TimeSource would take it on the executor (1 kHz of
        # executor callbacks, and a clock that lags and jumps when the executor is late: seen 1-3 s
        # steps on a loaded host); the control thread takes it before each step
        extra = []
        c.clock_sub = None
        if self.get_parameter("use_sim_time").value:
            ts = self._time_source
            if ts._clock_sub is not None:
                self.destroy_subscription(ts._clock_sub)
                ts._clock_sub = None
            c.clock_sub = TakeSubscription(self, ClockMsg, "/clock", QOS_SENSOR, raw=True)
            extra.append((c.clock_sub, self._on_clock))
        # the F/T sensor (cartesian_impedance; payload_id from the sensor): taken on the control thread
        # too, the newest at each wake-up (a 1 kHz stream through the executor cost as much as the
        # joint states did before the control path)
        c.wrench_sub = None
        if c.cartesian or self._p("sensor_frame"):
            c.wrench_sub = TakeSubscription(self, WrenchStamped, self._p("wrench_topic"), QOS_SENSOR, raw=True)
            extra.append((c.wrench_sub, self._on_wrench_raw))
        c.path = ControlPath(self, c.js_sub, self._on_joint_state, self._on_wakeup, self._on_path_error,
                             name="control", extra=extra)
        c.subs = []
        for msg_type, topic, cb, raw in (         # raw: the trajectories, read from their bytes
                (JointTrajectoryMsg, "~/joint_trajectory", self._on_trajectory, True),
                (JointState, "~/target_joint_state", self._on_target_joint_state, False),
                (PoseStamped, "~/target_pose", self._on_target_pose, False),
                (WrenchStamped, "~/target_wrench", self._on_target_wrench, False),
                (MultiDOFJointTrajectory, "~/cartesian_trajectory", self._on_cartesian_trajectory, True),
                (TwistStamped, "~/target_twist", self._on_target_twist, False)):
            c.subs.append(self.create_subscription(msg_type, topic, self._guard(cb, topic[2:]), QOS_REFERENCE,
                                                   raw=raw))
        self._target_twist = None                  # (receipt time, twist [v; w]) from ~/target_twist
        if not self._warm:
            warm_type_supports()
            self._warm = True
        self.c = c
        self._fjt_configure(c)                     # ~/follow_joint_trajectory (joint laws, control_msgs)

    # parameters of rclpy itself or of the middleware, which a params file may carry for this node
    FOREIGN_PARAMS = ("use_sim_time", "qos_overrides.", "start_type_description_service")

    def _warn_unknown_parameters(self):
        """A params file's keys this node does not declare (a typo: `k_gain`, `watchdog_timout`) are
        dropped by rclpy in silence: a WARN each at configure, with the nearest known names."""
        import difflib
        overrides = getattr(self, "_parameter_overrides", {}) or {}
        known = list(self._specs)
        for name in sorted(overrides):
            if name in self._specs or name.startswith(self.FOREIGN_PARAMS):
                continue
            near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            self.counts["parameters.unknown"] += 1
            self._log.warning(f"parameter {name!r} is not a parameter of this node: ignored{hint}")

    def _start_control_path(self):
        """Start the configured control thread (the real-time policy of rt_scope thread applied to
        it); its report joins the node's rt.* diagnostics.  RealtimeError: rt_required, refused."""
        c = self.c
        report = c.path.start(self._rt_thread)
        if report is not None and self.rt_report is not None:
            for k in realtime.THREAD_PARTS:
                self.rt_report[k] = report[k]
            if report.get("status") == "refused":
                self.rt_report["status"] = "refused"

    def _on_clock(self, raw, now):
        """/clock (serialized) on the control thread: the node's ROS time, as rclpy's TimeSource sets it."""
        sec, nsec = _STAMP.unpack_from(raw, 4)
        t = Time(seconds=sec, nanoseconds=nsec, clock_type=ClockType.ROS_TIME)
        ts = self._time_source
        ts._last_time_set = t
        for clock in ts._associated_clocks:
            clock.set_ros_time_override(t)

    def _on_wrench_raw(self, raw, now):
        """The F/T sensor's newest WrenchStamped (serialized), on the control thread, before the step
        of the same wake-up; another encapsulation goes through rclpy."""
        c = self.c
        if c is None:
            return
        r = read_wrench_stamped(raw)
        if r is None:
            msg = deserialize_message(raw, WrenchStamped)
            r = msg.header.frame_id, wrench_to_array(msg.wrench)
        with self._lock:
            if c is self.c:
                c.loop.estimation.set_wrench(np.array(r[1]), r[0], now)

    def _give_clock_back(self):
        """After cleanup, /clock goes back to rclpy's TimeSource (if use_sim_time is still true)."""
        ts = self._time_source
        if ts.ros_time_is_active and ts._clock_sub is None:
            ts._subscribe_to_clock_topic()

    def _stop_control_path(self):
        """End the control thread (never while holding the lock: a step may be waiting for it)."""
        c = self.c
        path = c.__dict__.get("path") if c is not None else None
        if path is not None and not path.on_control_thread:
            path.stop()

    def _teardown(self):
        if self.c is not None:
            self._fjt_teardown()
        c, self.c = self.c, None
        self.active = False
        if c is None:
            return
        loop, out = c.__dict__.get("loop"), c.__dict__.get("out")
        if loop is not None and out is not None and loop.safety.prev is not None:
            # what the driver holds now, by joint name, for the next configure's start
            self._last_sent = (out.cmd_pub.topic_name, dict(zip(loop.model.joint_names,
                                                                np.array(loop.safety.prev, dtype=float))))
        path = c.__dict__.get("path")
        if path is not None:
            path.destroy()
        else:
            for sub in (c.__dict__.get("js_sub"), c.__dict__.get("clock_sub")):
                if sub is not None:
                    sub.destroy()
        if c.__dict__.get("clock_sub") is not None:
            self._give_clock_back()
        for s in c.__dict__.get("subs", []):
            self.destroy_subscription(s)
        if out is not None:
            out.destroy()

    def on_activate(self, state):
        with self._lock:
            c = self.c
            now = time.monotonic()
            c.loop.activate(now)                   # the law holds the first valid state; the filter
            self.active = True                     # ramps from the last command sent (deactivate's)
            c.next_tick = now + c.loop.period
            self._schedule(now)
        self._log.info(f"active: {c.law.name}, trigger {self._p('trigger')}, safe command "
                       f"{self._p('safe_command')!r}")
        if self.get_parameter("use_sim_time").value and self._clock_handle.get_now().nanoseconds == 0:
            self._log.warn("use_sim_time true and no /clock received yet: the law's time stays 0 (trajectories "
                           "and streamed references are timed by it) until /clock arrives")
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
            # stop short of the safe command (the next configure would then start from another one).
            # The lock is held throughout: the control thread waits, and does not step in between.
            c.loop.deactivate()
            for _ in range(int(np.ceil(min(c.loop.output.ramp_time(), 10.0) / c.safe_period)) + 2):
                if self._publish_safe():
                    break
                time.sleep(c.safe_period)
        self.active = False
        c.loop.deactivate()
        c.safe_ramping = False
        c.path.wake_at(None)

    def on_cleanup(self, state):
        self._stop_control_path()
        with self._lock:
            self._teardown()
        return SUCCESS

    def on_shutdown(self, state):
        self._stop_control_path()
        with self._lock:
            self._stop_commanding()
            if self.c is not None:
                self.c.out.flush()
            self._teardown()
        return SUCCESS

    def on_error(self, state):
        self._stop_control_path()
        with self._lock:
            try:
                self._stop_commanding()
            except Exception:                          # noqa: BLE001
                pass
            self._teardown()
        return SUCCESS

    def destroy_node(self):
        """The control thread ends before the node's handles go."""
        self._stop_control_path()
        with self._lock:
            self._teardown()
        return super().destroy_node()

    # ---------------------------------------------------------------- the control thread
    def _on_joint_state(self, raw, now, last=True):
        """A joint state (serialized bytes), on the control thread: map, hand to the loop, and step on
        the newest of those taken together (`last`; the older ones are counted, not stepped on)."""
        c = self.c
        if c is None:
            return
        with self._lock:
            if c is not self.c:                         # cleaned up while this message waited
                return
            r, mapper = c.cdr, c.mapper
            try:
                parsed = r.parse(raw)
            except (ValueError, IndexError) as e:       # a truncated or inconsistent buffer
                parsed = False
                if c.cdr_fallbacks == 0:
                    self._log.warning(f"joint state bytes not read ({e}): deserialising with rclpy instead")
            if parsed:
                ok = mapper.map_cdr(r)
                sec, nsec = r.sec, r.nanosec
            else:                                       # another encapsulation: rclpy reads it
                c.cdr_fallbacks += 1
                msg = deserialize_message(raw, JointState)
                ok = mapper.map(msg)
                st = msg.header.stamp
                sec, nsec = st.sec, st.nanosec
            loop = c.loop
            if ok:                                     # (the effort: measured torques, for the
                loop.update_state(mapper.q, mapper.v, now,      # payload identification)
                                  (sec + nsec * 1e-9) if (sec or nsec) else None,
                                  mapper.effort if mapper.have_effort else None)
            else:
                loop.reject_state(mapper.reason, mapper.detail, now)
            if last:
                if self.active and not c.timer_trigger:
                    if ok:
                        self._step(now)
                    else:
                        self._publish_safe()
                self._schedule(now)

    def _on_wakeup(self, now):
        """The control thread's wake-up without a message: a `trigger: timer` step, or the watchdog
        (stale input: the safe command, again every SAFE_REPUBLISH_PERIOD), or the next step of the
        safe-command ramp."""
        c = self.c
        if c is None:
            return
        with self._lock:
            if c is not self.c or not self.active:
                return
            loop = c.loop
            if c.timer_trigger and now >= c.next_tick:
                c.next_tick += c.loop.period
                if c.next_tick <= now:                  # late by a period or more: re-anchor
                    c.next_tick = now + c.loop.period
                if loop.supervisor.stale(now):
                    loop.supervisor.check_watchdog(now)
                    self._publish_safe()
                else:
                    self._step(now)
            elif c.safe_ramping:
                self._publish_safe()
            elif loop.supervisor.check_watchdog(now) and (loop.supervisor.watchdog != "ok" or not loop.cycle.have_state):
                self._publish_safe()
            self._schedule(now)

    def _schedule(self, now):
        """The control thread's next wake-up (under the lock): the next timer step; the next safe-ramp
        step; the moment the latest state goes stale (the watchdog trips on time, not on a poll);
        while stale, the next repeat of the safe command.  None while inactive."""
        c = self.c
        if not self.active:
            c.path.wake_at(None)
            return
        loop = c.loop
        if c.timer_trigger:
            t = c.next_tick
        elif c.safe_ramping:
            t = now + c.safe_period
        elif loop.cycle.have_state and loop.supervisor.watchdog == "ok" and not loop.supervisor.latest_rejected:
            t = loop.supervisor.stale_at() + 1e-4
        else:
            t = now + min(SAFE_REPUBLISH_PERIOD, 0.5 * loop.param("watchdog_timeout"))
        c.path.wake_at(t)

    def _step(self, now):
        """The loop's step (law -> safety filter, or the safe command) -> publish.  Under the lock."""
        c = self.c
        t0 = time.perf_counter()
        try:
            c.stamp_ns = ns = self._clock_handle.get_now().nanoseconds   # the one clock read: the law's
            tau, safe = c.loop.step(now, ns * 1e-9)                       # time and the message stamps
            self._send(tau, safe)
            c.out.observer(c.loop, now, ns, safe)
            run = c.loop.runs.payload
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

    def _send(self, tau, safe):
        """Publish, tell the loop when the command left (the rate limit counts from there), and keep
        the safe ramp going (control-thread wake-ups) while a safe command has not reached its target."""
        c = self.c
        self._publish(tau, safe)
        c.loop.sent(time.monotonic(), self._clock_handle.get_now().nanoseconds * 1e-9)
        if safe:
            c.safe_ramping = not c.loop.output.safe_reached
        return c.loop.output.safe_reached if safe else True

    def _safe_torque(self):
        """The safe command in model order: zero, or g(q) at the last valid q, clipped to the limits."""
        return self.c.loop.output.safe_torque()

    def _publish_safe(self):
        """Publish one step of the safe command (ControlLoop.safe_step: from the last command sent
        toward zero or g(q) at the torque-rate limit, at most rate x one control period per message).
        Until it is reached, the control thread publishes the next steps at the control period.
        Returns True once the command equals the safe torque."""
        c = self.c
        if c is None:
            return True
        tau = c.loop.output.safe_step(time.monotonic())
        c.stamp_ns = self._clock_handle.get_now().nanoseconds
        return self._send(tau, True)

    def _publish(self, tau, safe=False):
        """tau in model order -> the command (and ~/joint_command, ~/state) in `joints` order, stamped
        with c.stamp_ns (the caller's clock read)."""
        c = self.c
        if not safe:
            c.safe_ramping = False                     # a control step took over from the safe ramp
        c.out.command(tau, c.stamp_ns, safe, self._publish_state, c.loop.info)

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
