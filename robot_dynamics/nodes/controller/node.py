"""The torque controller node: JointState (+ wrench, references) -> control law -> safety filter ->
effort command.  A thin rclpy adapter (message -> numpy, name mapping, QoS, parameters, lifecycle,
publishing) over robot_dynamics.control.ControlLoop, which holds the law, the safety filter and the
supervisor (watchdog, safe command, start ramp, resume without a jump) and which a hardware bridge
drives in-process the same way.  One class, importable, so several controllers can share one
executor:

    ros2 run robot_dynamics controller_node --ros-args -p robot:=panda -p controller:=joint_impedance
    python -m robot_dynamics.nodes.controller --ros-args --params-file config/panda_joint_impedance.yaml
    (python -m robot_dynamics.nodes.controller_node ... : the same, the documented entry)

The package (nodes/controller/), one concern a file, all mixins of the one node class here:
    node.py            the lifecycle node: parameters declared, configure (model, self-check, ControlLoop,
                       subscriptions, control thread), activate / deactivate / cleanup / shutdown, main()
    description.py     where the model comes from; autostart; unknown-parameter warnings
    control_thread.py  the control thread's handlers: joint state -> loop step -> command; watchdog wake-ups
    inputs.py          the references (converted on the executor, handed over under the lock); input QoS
    outputs.py         the command, ~/state and the observer / pose / marker outputs
    services.py        ~/hold, ~/tare, the identification services, parameter validation, /diagnostics
    params.py          the parameter specs and the interface tables (--print-params)
    partners.py        a cell's other arms: distance rows from their joint states, hold while one is lost
Reads: /joint_states, /clock (use_sim_time), the wrench, the references, its parameters.  Writes: the
command (command_topic), ~/state and the other outputs, /diagnostics.  Guarantees: the control
thread and the executor meet under one lock, so every change applies whole between two steps; an
exception in any callback publishes the safe command and is counted, the node keeps running.

Two threads.  The control thread (nodes/control_path.py, started at configure, ended at cleanup) waits
on the joint-state subscription itself: it takes each joint state (its serialized bytes, read in place:
nodes/cdr.py), steps the ControlLoop and publishes the command (outputs.py), with no
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

Interfaces: see TOPICS / SERVICES and the parameters in params.py (exported as a Markdown
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
import sys
import threading
import time
from collections import defaultdict

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import InertiaStamped, PoseStamped, TwistStamped, WrenchStamped
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import JointState
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory as JointTrajectoryMsg
from trajectory_msgs.msg import MultiDOFJointTrajectory

from ...control import ControlLoop
from ... import realtime
from ...dynamics import self_check
from ..cdr import JointStateCdr
from ..common import JointStateMapper, check_value, declare_all, make_executor, make_qos, param_value
from ..control_path import ControlPath, TakeSubscription
from ..follow_joint_trajectory import FollowJointTrajectoryServer
from .control_thread import ControlThread
from .description import ModelSource
from .inputs import (QOS_LATCHED, QOS_REFERENCE, QOS_SENSOR, ReferenceInputs,  # noqa: F401 (QOS_LATCHED: re-exported)
                     warm_type_supports)
from .outputs import Outputs
from .params import LOOP_PARAM_NAMES, all_param_specs, interface_tables_markdown
from .partners import PartnerArms
from .services import ControllerServices

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE

# parameters read on the hot path -> the attribute caching them (refreshed after every parameter set)
HOT_PARAMS = {"publish_state": "_publish_state"}


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


class TorqueControllerNode(ModelSource, ControlThread, ReferenceInputs, ControllerServices, FollowJointTrajectoryServer,
                           PartnerArms, LifecycleNode):
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
        self._partners_subscribe()             # a cell's other arms (partners.py)
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
        self._partner_timeout = float(self._p("arm_distance.timeout"))
        self._partners_configure(c, extra)         # a cell's other arms: their states, commands (partners.py)
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

# ------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------
def main(args=None):
    """Run one controller node.  Extra (non-ROS) arguments: --print-params, --multi-threaded (an alias
    of `-p executor:=multi`).  The executor is the node's `executor` parameter, read at start-up.
    SIGINT / SIGTERM (repeated ones included) end it cleanly with exit 0 (nodes/runner.py), after
    the lifecycle shutdown transition has published the safe command."""
    from rclpy.utilities import remove_ros_args

    from ..runner import run
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
