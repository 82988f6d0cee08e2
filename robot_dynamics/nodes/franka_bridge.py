"""Franka bridge: a Franka Panda / FR3 over libfranka's protocol (franky), presented as a ros2_control
hardware interface would present it (the role of franka_ros2's hardware interface).

    python -m robot_dynamics.nodes.franka_bridge --ros-args --params-file config/fr3_bridge.yaml \
        -p robot_ip:=172.16.0.2
    ros2 launch robot_dynamics franka.launch.py robot_ip:=127.0.0.1 controller:=joint_impedance mode:=topic

  publishes   /joint_states            sensor_msgs/JointState  q, dq, measured tau_J at the robot rate (1 kHz),
                                       `joints` names (fr3_joint1.. / panda_joint1..)
              /robot_description       std_msgs/String (transient local): the robot's URDF, joints renamed,
                                       its end effector (mass from the robot state) as a fixed link, TCP frame
              /diagnostics             diagnostic_msgs/DiagnosticArray: state, reason, cycles, lost cycles,
                                       watchdog / guard trips, model cross-check figures, last robot error
              ~/commands, ~/state      in_process: the loop's command (Float64MultiArray) and its state
                                       (sensor_msgs/JointState as the controller node's ~/state: reference,
                                       error, command; only while subscribed)
  subscribes  /effort_controller/commands  std_msgs/Float64MultiArray (topic mode), `joints` order [N m],
                                       WITHOUT gravity (the robot adds it); taken by a thread of its
                                       own waiting on the subscription (nodes/control_path.py)
  services    ~/recover                std_srvs/Trigger: after a robot error: automatic error recovery and a
                                       new torque motion from zero torque; after a watchdog stop: resume.
                                       Both hold where the arm is: topic mode applies the controller's
                                       commands only once its ~/hold answered and they came down to the
                                       torque applied; in_process drops a reference handed over meanwhile.
                                       The next commands are blended in over ramp_time (no torque jump).
                                       Never automatic.
              ~/hold, ~/resume         std_srvs/Trigger (in_process): hold the current position; leave a
                                       safety-envelope stop (safety.* parameters, control/envelope.py)
              ~/identify_dynamics, ~/identify_dynamics_status, ~/cancel_dynamics_identification
                                       std_srvs/Trigger (in_process): the arm's friction and rotor
                                       inertia identified in the control callback from tau_J
                                       (dynamics_id.* parameters, control/dynamics_run.py)

Modes (`mode`): `topic`: the controller node runs elsewhere over DDS; `in_process`: the bridge runs
the ROS-free control loop (law + safety filter + supervisor, robot_dynamics.control.loop) itself in
the robot's control callback (no DDS hop), and still publishes state and diagnostics.

At connect: the robot's URDF (or `robot_description` / `urdf_path`) is loaded with Pinocchio and
compared with the robot's own model (gravity, mass matrix, Coriolis) at the current and nearby
configurations; above the tolerances the bridge refuses to start torque control (it stays up,
publishing state and the reason).

Gravity: the Franka adds g(q) to every torque command.  A command that carries g(q) (a law with
compensate_gravity: true) lifts the arm with its own weight; the bridge's gravity guard stops the arm
when the commanded torque at low speed is mostly g(q) (see hardware.franka.GravityGuard), and the
in-process mode builds its law with compensate_gravity false whatever the parameters say.

Safety: no command for `command_timeout` (controller or its topics died) -> the bridge's watchdog
applies a damping torque -D dq (robot holds its weight): the arm stops; franky's own watchdog
(`signal_timeout`) ends the torque motion if the bridge itself stalls.  A robot error (reflex,
communication) ends the motion; the reason is logged and published; `~/recover` is the way back.
"""
import gc
import sys
import threading
import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from rcl_interfaces.srv import GetParameters
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from .. import realtime
from ..dynamics import Model, PinocchioBackend
from ..hardware import franka as fh
from .cdr import Float64ArrayCdr, JointStateWriter
from .common import (command_values, map_joint_values, pose_to_rp, ros_param_spec, trajectory_arrays,
                     trigger_handler)
from .control_path import ControlPath, TakeSubscription
from .controller.outputs import StateOutput
from .controller.services import DIAG_LEVELS
from .runner import run

MODES = ("topic", "in_process")
CTL_CHECK_RETRY = 1.0        # s: a controller-parameter request unanswered this long is asked again
PARAMETERS = {
    "robot_ip": ("127.0.0.1", "robot (FCI) address; franky-sim: the loopback address it printed"),
    "mode": ("topic", "topic: commands from /effort_controller/commands; in_process: run the control "
                      "loop in the robot's callback (read at start-up)"),
    "realtime": (True, "require a real-time kernel (libfranka RealtimeConfig.Enforce); false: Ignore "
                       "(franky-sim, or a test bench)"),
    "joints": (list(fh.FR3_JOINTS), "names of joints 1..7 on /joint_states, in the URDF and the commands"),
    "robot_description": ("", "URDF text of the controller's model; empty: the robot's own URDF"),
    "urdf_path": ("", "URDF file of the controller's model (when robot_description is empty)"),
    "add_end_effector": (True, "add the end effector the robot reports (m_ee, F_x_Cee, I_ee + load) to "
                               "the robot's own URDF, and its TCP frame"),
    "load_mass": (0.0, "[kg] payload the robot is told it carries (libfranka setLoad, at connect, before "
                       "the model is read): the robot adds its gravity, and m_total and the URDF include it"),
    "load_com": ([0.0, 0.0, 0.0], "[m] the payload's centre of mass in the flange frame (F_x_Cload)"),
    "load_inertia": ([0.0, 0.0, 0.0], "[kg m^2] its inertia about the centre of mass: 3 principal moments or "
                                      "9 values column-major (I_load)"),
    "publish_robot_description": (True, "publish the model's URDF on robot_description_topic (transient local)"),
    "joint_states_topic": ("/joint_states", "sensor_msgs/JointState out"),
    "command_topic": ("/effort_controller/commands", "std_msgs/Float64MultiArray in (topic mode)"),
    "robot_description_topic": ("/robot_description", "std_msgs/String out"),
    "autostart": (True, "start torque control after a passed cross-check; false: on ~/recover"),
    "command_timeout": (0.1, "[s] without a command (topic mode, once running) -> damping stop (live)"),
    "ramp_time": (0.5, "[s] blend from the applied torque to the commands at start and resume"),
    "stop_damping": ([20.0, 20.0, 20.0, 20.0, 5.0, 5.0, 2.0], "[N m s/rad] damping of the stop"),
    "signal_timeout": (0.05, "[s] franky's watchdog on set_torque (ends the motion)"),
    "max_delta_tau": (1.0, "[N m] largest torque change per robot cycle (franky; libfranka allows 1000 N m/s)"),
    "cross_check_gravity_tol": (0.3, "[N m] largest |g_ours - g_robot| accepted"),
    "cross_check_mass_tol": (0.03, "[kg m^2] largest |M_ours - M_robot| element accepted"),
    "cross_check_coriolis_tol": (0.1, "[N m] largest |C_ours v - c_robot| accepted (|v_i| = 0.5 rad/s)"),
    "cross_check_configs": (6, "nearby configurations besides the current one"),
    "cross_check_spread": (0.3, "[rad] how far they are from the current one"),
    "gravity_guard": (True, "stop the arm when commands carry g(q) (double compensation)"),
    "controller_node": ("/torque_controller", "topic mode: the controller node whose "
                        "<controller>.compensate_gravity is checked (must be false) before and while its "
                        "commands are applied; '' : no check (other controllers: the dynamic guard only)"),
    "controller_check_timeout": (3.0, "[s] wait this long for that node's parameters, then apply the "
                                      "commands with a warning (dynamic guard only)"),
    "publish_clock": (False, "publish /clock from the robot's time (start-up wall time + robot time) and "
                             "stamp /joint_states with it: run the controller with use_sim_time when the "
                             "robot is a simulator that can fall behind the wall clock (franky-sim)"),
    "connect_timeout": (20.0, "[s] keep trying to connect this long at start-up"),
    "diagnostics_period": (1.0, "[s]"),
    "record_latency": (False, "keep per-command latency samples (bench/franka_latency.py)"),
}
# the real-time option (robot_dynamics/realtime.py), applied once when the node is created, before the
# robot connection (libfranka's control thread inherits the policy).  The bridge's garbage collector
# defaults to `freeze`: a full collection of this process (rclpy, pinocchio, franky, numpy: ~57k
# objects) takes ~30 ms on an idle core and far longer on a busy one, with the GIL held, while the
# robot's control callback must answer every millisecond; franky ends the motion when it is stalled for
# signal_timeout.  After the freeze the collector only scans what the loop itself allocates.
PARAMETERS.update({p[0]: (p[1], p[2]) for p in realtime.PARAMS})
PARAMETERS["rt_gc_mode"] = ("freeze", PARAMETERS["rt_gc_mode"][1] + " (bridge default: freeze, see above)")


def _floats(x):
    return "" if x is None else " ".join(f"{v:.5f}" for v in x)


class FrankaBridge(Node):
    def __init__(self, name="franka_bridge", **kw):
        super().__init__(name, **kw)
        for k, (default, desc) in PARAMETERS.items():
            self.declare_parameter(k, default)
        p = {k: self.get_parameter(k).value for k in PARAMETERS}
        self.p = p
        if p["mode"] not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {p['mode']!r}")
        self.mode = p["mode"]
        self.joints = list(p["joints"])
        if len(self.joints) != fh.N:
            raise ValueError(f"joints: 7 names expected, got {self.joints}")
        self.lock = threading.Lock()
        self.state_name, self.reason = fh.IDLE, "connecting"
        self.last_error = ""
        self.n_errors = 0
        self.n_guard = 0
        self.n_commands = 0
        self.check = None
        self.model = self.backend = None
        self.index = None
        self._vlim = None                # the model's joint velocity limits, robot order
        self.q = self.dq = self.tau_J = None
        self.g = np.zeros(fh.N)
        self.t_robot = None
        self.t_state_pub = None          # robot time of the last published state
        self.pending = None              # robot time of the state a just-set command answers
        self.latency = []                # (robot time of the state, robot time of the applying cycle)
        self.n_superseded = 0
        self.loop = None                 # in-process ControlLoop
        self._qm, self._vm, self._em = np.zeros(fh.N), np.zeros(fh.N), np.zeros(fh.N)
        self.loop_error = None
        self.guard = fh.GravityGuard()
        self.gate = fh.CommandGate(p["command_timeout"], p["ramp_time"], p["stop_damping"])
        self.arm = fh.FrankaArm(p["robot_ip"], realtime=p["realtime"], signal_timeout=p["signal_timeout"],
                                max_delta_tau=p["max_delta_tau"], on_cycle=self._on_cycle)

        self.js = JointStateWriter(self.joints)          # serialized, preallocated (nodes/cdr.py)
        self._clock_handle = self.get_clock().handle
        # reliable, as the sim node and joint_state_broadcaster publish: best-effort readers (the
        # controller node's default) match it too
        self.pub_js = self.create_publisher(JointState, p["joint_states_topic"], QoSProfile(depth=10))
        self.pub_desc = self.create_publisher(
            String, p["robot_description_topic"], QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.pub_diag = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.pub_clock = self.create_publisher(Clock, "/clock", 10) if p["publish_clock"] else None
        self.clock_msg = Clock()
        self.t0_ns = None
        self.ctl_check = "none" if (self.mode != "topic" or not p["controller_node"]) else "pending"
        self.ctl_check_since = time.monotonic()
        self.ctl_future = None
        self.ctl_sent = 0.0
        self.ctl_client = None
        if self.ctl_check == "pending":
            self.gate.permitted = False
            self.ctl_client = self.create_client(GetParameters, p["controller_node"].rstrip("/") + "/get_parameters")
            self.create_timer(0.5, self._check_controller)
        self._cmd_path = None
        if self.mode == "topic":
            # the commands: a thread of their own waits on the subscription (nodes/control_path.py), no
            # executor per message; the executor keeps services, timers and parameters
            sub = TakeSubscription(self, Float64MultiArray, p["command_topic"], 10, raw=True)
            self._cmd_path = ControlPath(self, sub, self._on_command_raw, name="commands",
                                         on_error=self._on_path_error)
        # topic mode: ~/recover first asks the controller to hold the arm where it is (its ~/hold), and
        # applies its commands only once it answered: a controller that kept the target it had when
        # the bridge stopped would otherwise drive the arm back toward it (issue 42: 55 rad/s)
        self.hold_client = None
        self.hold_wanted = False         # ~/recover asked for the controller's ~/hold, not answered yet
        self.hold_future = None
        self.hold_sent = 0.0
        self.hold_settle_until = None    # set once the controller holds: its commands still settling
        self.hold_worst = 0.0            # largest |command - applied| seen while they settle [N m]
        self.n_dropped_holding = 0
        if self.mode == "topic" and p["controller_node"]:
            self.hold_client = self.create_client(Trigger, p["controller_node"].rstrip("/") + "/hold")
        self.create_service(Trigger, "~/recover", self._srv_recover)
        self.create_timer(0.05, self._poll)
        self.create_timer(0.01, self._idle_state)
        self.create_timer(p["diagnostics_period"], self._publish_diagnostics)
        self.add_on_set_parameters_callback(self._on_set_bridge_params)
        self.rt_settings = realtime.settings_from(lambda n: p.get(n))
        self.rt_report = realtime.apply(self.rt_settings, log=self._rt_log)   # RealtimeError: rt_required
        if self._cmd_path is not None:
            self._cmd_path.start()
        self._starter = threading.Thread(target=self._connect_and_start, daemon=True)
        self._starter.start()

    LIVE = ("command_timeout",)

    def _on_set_bridge_params(self, params):
        """`command_timeout` is live (> 0 s, e.g. tightened once the controller runs); the bridge's other
        parameters are read at start-up, and a change is refused saying so.  Parameters that are not
        the bridge's own (the in-process loop's) are left to their callback."""
        from rcl_interfaces.msg import SetParametersResult
        for prm in params:
            if prm.name not in PARAMETERS:
                continue
            if prm.name not in self.LIVE:
                return SetParametersResult(successful=False, reason=f"{prm.name} is read at start-up "
                                           f"(live: {', '.join(self.LIVE)})")
            v = prm.value
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < float(v) < float("inf"):
                return SetParametersResult(successful=False,
                                           reason=f"command_timeout must be a number of seconds > 0, got {v!r}")
        for prm in params:
            if prm.name == "command_timeout":
                self.gate.command_timeout = float(prm.value)
                self.p["command_timeout"] = float(prm.value)
                self.get_logger().info(f"command_timeout: {float(prm.value)} s")
        return SetParametersResult(successful=True)

    def _rt_log(self, text):
        if "refused" in text:                  # one call site per severity (rclpy)
            self.get_logger().warning(text)
        else:
            self.get_logger().info(text)

    def _freeze_gc(self):
        """rt_gc_mode freeze / manual: what start-up built (the model, the loop) is frozen too."""
        if self.rt_settings.gc_mode != "default":
            gc.collect()
            gc.freeze()

    # ---- start-up ----
    def _set_state(self, state, reason=""):
        with self.lock:
            self.state_name, self.reason = state, reason

    def _connect_error(self, e):
        """A failed connection: the state `error` with what to change (hardware.franka.connect_error_hint)."""
        _, hint = fh.connect_error_hint(e, self.p["robot_ip"], self.p["realtime"])
        self._set_state(fh.ERROR, f"cannot connect: {hint}")
        self.get_logger().error(self.reason)

    def _connect_and_start(self):
        p = self.p
        if p["realtime"]:
            rt, found = fh.realtime_kernel()
            if not rt:      # libfranka refuses such a kernel once the robot answers: say so now
                self.get_logger().warning(f"realtime: true, but this kernel is not real-time ({found}): "
                                          f"libfranka will refuse the connection; {fh.REALTIME_HINT}")
        t_end = time.monotonic() + p["connect_timeout"]
        warned = False
        while True:
            try:
                self.arm.connect()
                break
            except Exception as e:
                retry, hint = fh.connect_error_hint(e, p["robot_ip"], p["realtime"])
                if not retry or time.monotonic() > t_end or not rclpy.ok():
                    self._connect_error(e)
                    return
                if not warned:      # the robot may still be booting: retried, but the user sees why
                    warned = True
                    self._set_state(fh.IDLE, f"connecting, retried until connect_timeout "
                                             f"({p['connect_timeout']} s): {hint}")
                    self.get_logger().warning(self.reason)
                time.sleep(0.5)
        try:        # always: 0 kg clears a load set before (the robot keeps it across connections)
            m, c, inertia = fh.payload(p["load_mass"], p["load_com"], p["load_inertia"])
            self.arm.robot.set_load(m, c.tolist(), inertia.tolist())
            # the model is built from the state's m_total: wait for a state that has the payload (one
            # read right after setLoad may still be the one before: a URDF without it was published)
            t_end = time.monotonic() + 2.0
            while abs(float(self.arm.state.m_load) - m) > 1e-4:     # float32 on the wire
                if time.monotonic() > t_end:
                    raise RuntimeError(f"the robot state reports m_load {float(self.arm.state.m_load)} kg "
                                       f"2 s after setLoad({m} kg)")
                time.sleep(0.005)
        except Exception as e:
            self._set_state(fh.REFUSED, f"payload: {type(e).__name__}: {e}")
            self.get_logger().error(self.reason)
            return
        if m > 0.0:
            self.get_logger().info(f"payload: {m} kg, centre of mass {c.tolist()} m in the flange frame")
        try:
            self._load_model()
        except Exception as e:
            self._set_state(fh.REFUSED, f"model: {type(e).__name__}: {e}")
            self.get_logger().error(self.reason)
            return
        self.get_logger().info(self.check.message())
        if not self.check.ok:
            self._set_state(fh.REFUSED, self.check.message())
            self.get_logger().error(self.reason)
            return
        if self.mode == "in_process":
            try:
                self._build_loop()
            except Exception as e:
                self._set_state(fh.REFUSED, f"control loop: {type(e).__name__}: {e}")
                self.get_logger().error(self.reason)
                return
        self._freeze_gc()
        if p["autostart"]:
            self._start_motion()
        else:
            self._set_state(fh.IDLE, "connected; call ~/recover to start torque control")

    def _load_model(self):
        p = self.p
        state = self.arm.state
        if p["robot_description"]:
            urdf = p["robot_description"]
        elif p["urdf_path"]:
            with open(p["urdf_path"]) as f:
                urdf = f.read()
        else:
            ee = None
            tcp = None
            if p["add_end_effector"]:
                ee = fh.end_effector(state)
                tcp = fh.affine_matrix(state.F_T_EE)
            urdf, _ = fh.prepare_urdf(self.arm.robot.model_urdf, self.joints, ee=ee, tcp=tcp,
                                      prefix=self.joints[0].rsplit("joint", 1)[0])
        model = Model.from_urdf_string(urdf)
        missing = [j for j in self.joints if j not in model.joint_names]
        if missing or model.nv != fh.N:
            raise ValueError(f"the model's joints {model.joint_names} are not the 7 `joints` {self.joints}")
        self.model, self.urdf = model, urdf
        self.backend = PinocchioBackend(model)
        self.index = np.array([model.joint_names.index(j) for j in self.joints])
        self._vlim = np.asarray(model.velocity_limits, float)[self.index]
        tol = fh.CrossCheckTolerance(p["cross_check_gravity_tol"], p["cross_check_mass_tol"],
                                     p["cross_check_coriolis_tol"])
        self.check = fh.cross_check(self.backend, self.arm.robot.model, np.asarray(state.q),
                                    fh.end_effector(state), self.index, tol, n=p["cross_check_configs"],
                                    spread=p["cross_check_spread"])
        if p["publish_robot_description"]:
            self.pub_desc.publish(String(data=urdf))

    def _loop_log(self, level, text):
        """The control loop's log callable: one call site per severity (rclpy refuses a call site whose
        severity changes between calls)."""
        log = self.get_logger()
        if level == "error":
            log.error(text)
        elif level == "warn":
            log.warning(text)
        else:
            log.info(text)

    def _build_loop(self):
        """in_process: the ROS-free ControlLoop (control/loop.py) from the controller parameters given
        to this node (the same file the controller node reads), with gravity compensation and a
        gravity safe command forced off (the Franka adds g(q))."""
        from rcl_interfaces.msg import SetParametersResult
        from ..control.loop import ControlLoop
        from ..control.params import loop_param_specs
        specs = {sp.name for sp in loop_param_specs()}
        over = {k: v.value for k, v in self._parameter_overrides.items() if k in specs}
        law = over.get("controller", "gravity_compensation")
        for name in [n for n in specs if n.endswith(".compensate_gravity")]:
            if over.get(name):
                self.get_logger().warning(f"{name}: true ignored: the Franka adds gravity itself "
                                          "(in_process forces it false)")
            over[name] = False
        if over.get("safe_command") == "gravity":
            self.get_logger().warning("safe_command: gravity ignored: the Franka adds gravity (zero used)")
        over["safe_command"] = "zero"
        over["joints"] = list(self.joints)
        over["update_rate"] = 1000.0                      # the robot's rate
        for k in list(over):
            if hasattr(over[k], "tolist"):
                over[k] = over[k].tolist()
            elif isinstance(over[k], (list, tuple)) or type(over[k]).__name__ == "array":
                over[k] = list(over[k])
        self.loop = ControlLoop.from_params(self.model, over, log=self._loop_log)
        self.loop_lock = threading.Lock()
        self.loop_params = over
        # every loop parameter declared, as the controller node declares them (ros2 param set
        # /franka_bridge <k> <v>; the live ones change the loop): the given and forced values, else the
        # default (an identified friction model set live on a bridge started without one)
        for sp in loop_param_specs():
            k = sp.name
            if k in PARAMETERS or self.has_parameter(k):
                continue
            v = over.get(k)
            try:
                if v is not None and v != []:
                    self.declare_parameter(k, v)
                else:
                    rs = ros_param_spec(sp)
                    self.declare_parameter(k, rs.default, rs.descriptor())
            except Exception:                              # noqa: BLE001  (a type rclpy cannot hold)
                pass

        def on_set(params):
            changes = {p.name: (list(p.value) if isinstance(p.value, (list, tuple)) or
                                type(p.value).__name__ == "array" else p.value)
                       for p in params if p.name in specs}
            if not changes:
                return SetParametersResult(successful=True)
            if any(k.endswith(".compensate_gravity") and v for k, v in changes.items()):
                return SetParametersResult(successful=False, reason="the Franka adds gravity itself")
            with self.loop_lock:
                ok, reason = self.loop.set_params(changes)
            return SetParametersResult(successful=bool(ok), reason=reason or "")
        self.add_on_set_parameters_callback(on_set)
        self.cmd_out = Float64ArrayCdr(fh.N, "joints")     # ~/commands, serialized, preallocated
        self.pub_cmd = self.create_publisher(Float64MultiArray, "~/commands", 10)
        self.state_out = StateOutput(self, self.loop)      # ~/state, as the controller node's
        self.create_subscription(JointTrajectory, "~/joint_trajectory", self._on_trajectory, 10)
        self.create_subscription(JointState, "~/target_joint_state", self._on_target_joint_state, 10)
        self.create_subscription(PoseStamped, "~/target_pose", self._on_target_pose, 10)
        self.create_service(Trigger, "~/hold", trigger_handler(self.loop_lock, self._hold))
        # ~/resume: leave a joint speed stop or a safety-envelope stop of the in-process loop (safety.*)
        self.create_service(Trigger, "~/resume", trigger_handler(self.loop_lock, lambda: self.loop.resume()))
        for srv, what in (("~/identify_dynamics", "identify"), ("~/identify_dynamics_status", "status"),
                          ("~/cancel_dynamics_identification", "cancel")):
            self.create_service(Trigger, srv, self._dynamics_service(what))
        self.get_logger().info(f"in_process: {law} in the robot's control callback")

    def _reference(self, what, convert):
        loop = self.loop
        try:
            ref = convert(loop)
        except ValueError as e:
            loop.reject_reference(what, str(e))
            return
        with self.loop_lock:
            loop.set_reference(ref, what)

    def _on_trajectory(self, msg):
        from ..control import JointTrajectory as Traj
        m = self.model

        def convert(loop):
            times, P, V, A = trajectory_arrays(list(m.joint_names), msg)
            tr = Traj(times, P, V, A, lower=m.lower_limits, upper=m.upper_limits)
            st = msg.header.stamp
            if (st.sec or st.nanosec) and self.t_robot is not None:
                # header.stamp on the ROS clock (this node's /clock, or the system clock) -> the loop's
                # robot time, from the offset between the two now (the controller node's semantics)
                ros_now = (self.t0_ns if self.pub_clock is not None and self.t0_ns is not None
                           else None)
                offset = (ros_now * 1e-9 if ros_now is not None else
                          self._clock_handle.get_now().nanoseconds * 1e-9 - self.t_robot)
                tr.stamp = st.sec + 1e-9 * st.nanosec - offset
                if tr.stamp + float(times[-1]) < self.t_robot:
                    raise ValueError("joint_trajectory: it ends in the past (header.stamp + last "
                                     "time_from_start before now); stamp it 0 to start on receipt")
            return tr
        self._reference("joint_trajectory", convert)

    def _on_target_joint_state(self, msg):
        from ..control import JointReference
        names = list(self.model.joint_names)

        def convert(loop):
            q = map_joint_values(names, msg.name, msg.position, "target_joint_state position")
            v = (map_joint_values(names, msg.name, msg.velocity, "target_joint_state velocity")
                 if len(msg.velocity) else None)
            return JointReference(q, v)
        self._reference("target_joint_state", convert)

    def _on_target_pose(self, msg):
        from ..control import CartesianReference

        def convert(loop):
            if msg.header.frame_id not in ("", "world", self.model.frame_names[0]):
                raise ValueError(f"target_pose: frame {msg.header.frame_id!r} is not the robot base")
            R, p = pose_to_rp(msg.pose)
            if not loop.cartesian:             # a joint law: the pose of ik.frame, through the IK
                return loop.cartesian_goal(CartesianReference(R, p))
            return CartesianReference(R, p)
        self._reference("target_pose", convert)

    def _hold(self):
        ok, msg = self.loop.hold()
        return ok, msg or "holding"

    def _dynamics_service(self, what):
        """~/identify_dynamics (started on the robot's clock; only while torque control runs),
        ~/identify_dynamics_status, ~/cancel_dynamics_identification of the in-process loop: the run
        advances in the robot's control callback, torques from the robot's tau_J."""
        def action():
            if what == "identify" and (self.state_name != fh.RUNNING or self.t_robot is None):
                return False, f"refused: torque control is not running (state {self.state_name})"
            return self.loop.dynamics_request(what, self.t_robot)
        return trigger_handler(self.loop_lock, action)

    def _start_motion(self, hold=False):
        """(Re)start torque control from zero torque.  `hold` (after a robot error, topic mode): the
        controller's commands wait for its ~/hold (_ask_hold)."""
        self.gate.restart()
        self.guard.reset()
        if self.loop is not None:
            self._loop_activate()
        self.arm.start()
        self._set_state(fh.RUNNING if self.mode == "in_process" else fh.WAITING,
                        "torque control on" if self.mode == "in_process" else "waiting for commands")
        if hold and self.hold_client is not None:
            self._ask_hold()

    def _idle_state(self):
        """Without a torque motion (refused, idle, after an error) the state is still published, at
        100 Hz, read from the robot."""
        arm = self.arm
        if arm.robot is None or arm.motion is not None or self.state_name == fh.RUNNING:
            return
        try:
            st = arm.robot.state
        except Exception:              # noqa: BLE001  (connection lost: reported by ~/recover)
            return
        self._publish_state(np.asarray(st.q), np.asarray(st.dq), np.asarray(st.tau_J), st.time.to_sec())

    def _publish_state(self, q, dq, tau_J, t):
        self.q, self.dq, self.tau_J, self.t_robot = q, dq, tau_J, t
        js = self.js
        if self.pub_clock is not None:
            if self.t0_ns is None:
                self.t0_ns = time.time_ns() - int(round(t * 1e9))
            ns = self.t0_ns + int(round(t * 1e9))
            st = self.clock_msg.clock
            st.sec, st.nanosec = divmod(ns, 1_000_000_000)
            self.pub_clock.publish(self.clock_msg)
        else:
            ns = self._clock_handle.get_now().nanoseconds
        js.set_stamp(*divmod(ns, 1_000_000_000))
        js.position[:], js.velocity[:], js.effort[:] = q, dq, tau_J
        self.t_state_pub = t
        self.pub_js.publish(js.bytes())

    # ---- the robot's control callback (libfranka's thread) ----
    def _on_cycle(self, state, t):
        q = np.asarray(state.q)
        dq = np.asarray(state.dq)
        tau_J = np.asarray(state.tau_J)
        if self.pending is not None:
            if self.p["record_latency"]:
                self.latency.append((self.pending, t))
            self.pending = None
        tau = None
        if self.loop is not None:
            tau = self._loop_cycle(q, dq, tau_J, t)
        self._publish_state(q, dq, tau_J, t)
        if self.loop is not None:
            if tau is not None:
                self.pending = t
            return tau
        out = self.gate.on_cycle(dq, time.monotonic(), q)
        if out is None and self.gate.last_cmd_time is not None \
                and time.monotonic() - self.gate.last_cmd_time > 0.02:
            out = self.gate.applied      # keep franky's watchdog fed between late commands
        return out

    # ---- topic mode ----
    def _on_command_raw(self, raw, now, last):
        """A command on the commands thread (serialized): the newest of those taken together applies."""
        if not last:
            return
        self._on_command(command_values(raw), now)

    def _on_path_error(self, where, e):
        self.get_logger().error(f"commands thread ({where}): {type(e).__name__}: {e}", throttle_duration_sec=5.0)

    def _on_command(self, tau, now=None):
        now = time.monotonic() if now is None else now
        tau = np.array(tau, dtype=float).reshape(-1)
        if tau.shape != (fh.N,) or not np.all(np.isfinite(tau)):
            self.gate.n_rejected += 1
            self.get_logger().warning(f"command rejected (7 finite numbers expected): {tau.tolist()[:8]}",
                                      throttle_duration_sec=1.0)
            return
        self.n_commands += 1
        if self.hold_wanted:                 # ~/recover waits for the controller's ~/hold: not yet
            self.n_dropped_holding += 1
            return
        if self.hold_settle_until is not None and not self._hold_settled(tau):
            self.n_dropped_holding += 1
            return
        if self.p["gravity_guard"] and self.q is not None and self.gate.state == fh.RUNNING:
            qm = np.empty(fh.N)
            qm[self.index] = self.q
            g = self.backend.gravity(qm)[self.index]
            if self.guard.check(tau, g, self.dq, now):
                self.n_guard += 1
                reason = fh.guard_reason(self.guard.ratio, self.dq, self.ctl_check == "ok",
                                         self.p["controller_node"], self._vlim)
                self.gate.stop(reason, now, self.q, self.dq)
                self.guard.reset()
                self.get_logger().error(reason)
                return
        out = self.gate.on_command(tau, now)
        if out is not None:
            self.arm.set_torque(out)
            if self.pending is not None:
                self.n_superseded += 1
            self.pending = self.t_state_pub

    def _check_controller(self):
        """Topic mode: <controller>.compensate_gravity of the controller node must be false (the
        Franka adds gravity).  Asked every 0.5 s (a request unanswered for CTL_CHECK_RETRY is asked
        again); commands are applied only once it answered false (or after controller_check_timeout
        without an answer: warning, dynamic guard only)."""
        f = self.ctl_future
        if f is not None and not f.done():
            if time.monotonic() - self.ctl_sent < CTL_CHECK_RETRY:
                return
            # no answer: the request or its response was lost (rmw_fastrtps drops a response sent
            # before the client's reader is matched; the check then waited forever in a loaded run)
            self.ctl_client.remove_pending_request(f)
            self.ctl_future = f = None
        if f is not None:
            self.ctl_future = None
            try:
                vals = f.result().values
                law = vals[0].string_value
                names = ["gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance"]
                cg = vals[1 + names.index(law)].bool_value if law in names else False
            except Exception as e:        # noqa: BLE001  (a node without these parameters)
                law, cg = None, False
                self.get_logger().warning(f"cannot read {self.p['controller_node']}'s parameters: {e}",
                                          throttle_duration_sec=10.0)
            if cg:
                reason = (f"{self.p['controller_node']}: {law}.compensate_gravity is true, but the Franka "
                          "adds gravity itself (the arm would get it twice): set it false; commands refused")
                if self.gate.state != fh.STOPPED or self.gate.reason != reason:
                    self.n_guard += 1
                    self.get_logger().error(reason)
                self.gate.permitted = False
                self.gate.stop(reason, time.monotonic(), self.q, self.dq)
                self.ctl_check = "compensate_gravity true"
            else:
                if self.ctl_check != "ok":
                    self.get_logger().info(f"{self.p['controller_node']}: {law}.compensate_gravity false: OK")
                self.gate.permitted = True          # a stopped gate still waits for ~/recover
                self.ctl_check = "ok"
        if self.ctl_client.service_is_ready():
            req = GetParameters.Request()
            req.names = ["controller"] + [f"{n}.compensate_gravity" for n in (
                "gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")]
            self.ctl_future = self.ctl_client.call_async(req)
            self.ctl_sent = time.monotonic()
        if self.ctl_check == "pending" and self.ctl_future is None and self.gate.last_cmd_time is not None \
                and time.monotonic() - self.ctl_check_since > self.p["controller_check_timeout"]:
            self.get_logger().warning(f"no parameters from {self.p['controller_node']}: applying its commands "
                                      "without the compensate_gravity check (dynamic gravity guard only)")
            self.ctl_check = "unverified"
            self.gate.permitted = True

    # ---- in-process mode (ControlLoop) ----
    def _loop_activate(self):
        """(Re)start: the torque motion starts from zero torque, so the loop ramps from zero."""
        with self.loop_lock:
            self.loop.deactivate()
            self.loop.safety.reset(start=np.zeros(fh.N))
            self.loop.activate()
            # the law holds where the arm is (activate): a reference or pose target handed over before
            # (while stopped, or the one the arm was following) is not followed afterwards
            self.loop.pending_ref = None
            self.loop.pose_target = None

    def _loop_cycle(self, q, dq, tau_J, t):
        """The law, safety filter and supervisor on this cycle's state (robot time t; the measured
        joint torques tau_J as the state's effort, which the identification runs take); the torque is
        applied in the next robot cycle."""
        loop = self.loop
        qm, vm, em = self._qm, self._vm, self._em
        qm[self.index] = q
        vm[self.index] = dq
        em[self.index] = tau_J
        with self.loop_lock:
            loop.update_state(qm, vm, t, effort=em)
            tau_m, safe = loop.step(t)
            tau = tau_m[self.index]
            if self.state_out.wanted():
                sec, nsec = divmod(self._clock_handle.get_now().nanoseconds, 1_000_000_000)
                self.state_out.publish(tau, sec, nsec, loop.info, safe)
        self.cmd_out.data[:] = tau
        self.pub_cmd.publish(self.cmd_out.bytes())
        return tau

    def _hold_note(self):
        return (f": resuming once {self.p['controller_node']}/hold answered (the controller then holds the arm "
                "where it is; the target it had is dropped) and its commands came down to the torque "
                "applied; until then the stop's damping" if self.hold_wanted else "")

    def _hold_settled(self, tau):
        """While the controller's commands settle after its ~/hold: True (resume, the gate blends them
        in) once a command is within RESUME_TOLERANCE of the torque applied now.  A law holding the arm
        where it rests commands about that (the Franka adds gravity; joint and Cartesian impedance,
        computed torque: zero error and speed), but its own torque-rate limit ramps its command down
        from the one it sent for the old target: those were blended in before and moved the arm
        (0.03 rad at 0.5 rad/s on franky-sim's aligned joints 1 and 3)."""
        d = float(np.max(np.abs(tau - self.gate.applied)))
        if d >= self.RESUME_TOLERANCE:
            self.hold_worst = d
            return False
        if self.gate.state == fh.STOPPED:
            self.gate.resume(time.monotonic())
        self.hold_settle_until = None
        self._set_state(fh.WAITING, f"resumed: {self.p['controller_node']} holds the arm where it is; "
                                    "its commands are blended in")
        return True

    def _ask_hold(self):
        """~/recover (topic mode): the controller's commands are not applied until it answered ~/hold
        (asked now and again until it does: a controller started later answers once active) and they
        came down to the torque applied (_hold_settled)."""
        self.hold_wanted = True
        self.hold_future = None
        self.hold_sent = 0.0
        self._set_state(self.state_name, f"resuming once {self.p['controller_node']}/hold answers")
        self._check_hold()

    def _check_hold(self):
        """Polled: ask the controller's ~/hold (again after HOLD_RETRY without an answer or after a
        refusal); on success its commands settle (_hold_settled), or, when they do not within
        RESUME_SETTLE, the arm stays stopped, saying why."""
        node = self.p["controller_node"]
        now = time.monotonic()
        until = self.hold_settle_until
        if until is not None and now > until:
            self.hold_settle_until = None
            why = (f"not resumed: {node}'s commands did not come within {self.RESUME_TOLERANCE} N m of the "
                   f"torque applied in {self.RESUME_SETTLE} s after its ~/hold (last: {self.hold_worst:.2f} "
                   "N m off)")
            self.gate.stop(why, now, self.q, self.dq)
            self._set_state(fh.STOPPED, why + "; the arm stays stopped, ~/recover to try again")
            self.get_logger().error(self.reason)
            return
        if not self.hold_wanted:
            return
        f = self.hold_future
        if f is None:
            if now - self.hold_sent < self.HOLD_RETRY:
                return
            if not self.hold_client.service_is_ready():
                self._set_state(self.state_name, f"resuming once {node}/hold answers (not available: is the "
                                                 "controller running?); until then the stop's damping")
                return
            self.hold_future = self.hold_client.call_async(Trigger.Request())
            self.hold_sent = now
            return
        if not f.done():
            if now - self.hold_sent > self.HOLD_RETRY:      # lost, or a killed controller's stale entry
                self.hold_client.remove_pending_request(f)
                self.hold_future = None
            return
        self.hold_future = None
        try:
            res = f.result()
            ok, msg = bool(res.success), res.message
        except Exception as e:          # noqa: BLE001
            ok, msg = False, f"{type(e).__name__}: {e}"
        if ok:
            self.hold_wanted = False
            self.hold_worst = 0.0
            self.hold_settle_until = now + self.RESUME_SETTLE
            self.get_logger().info(f"{node}/hold: {msg}; its commands are applied once they are within "
                                   f"{self.RESUME_TOLERANCE} N m of the torque applied now")
        else:
            self._set_state(self.state_name, f"resuming once {node}/hold answers (it answered: {msg}; "
                                             "asking again)")

    # ---- supervision ----
    def _poll(self):
        self._check_hold()
        if self.arm.robot is None or self.arm.motion is None:
            return
        err = self.arm.poll()
        if self.arm.callback_error:
            # an exception in the control callback: no torque was set in that cycle, so a run of them
            # ends the motion by franky's signal timeout; the exception is the cause to report
            cb = "control callback: " + self.arm.callback_error
            self.arm.callback_error = None
            err = cb if err is None else f"{err} (after {cb})"
        if err is not None:
            self.n_errors += 1
            self.last_error = err
            self._set_state(fh.ERROR, f"robot error: {err}; call ~/recover")
            self.get_logger().error(self.reason)
            return
        if self.mode == "topic":
            g = self.gate
            if g.state == fh.STOPPED and self.state_name != fh.STOPPED:
                self._set_state(fh.STOPPED, g.reason + "; call ~/recover to resume")
                self.get_logger().error(self.reason)
            elif g.state == fh.RUNNING and self.state_name != fh.RUNNING:
                self._set_state(fh.RUNNING, "applying commands")
                self.get_logger().info(f"applying the commands of {self.p['command_topic']} "
                                       f"({self.n_commands} received so far)")

    HOLD_TIMEOUT = 3.0       # s: the controller's ~/hold unanswered this long -> not resumed
    RESUME_TOLERANCE = 2.0   # N m: after the controller's ~/hold, its commands apply once this close to
                             # the torque applied (_hold_settled)
    RESUME_SETTLE = 3.0      # s: ... or the arm stays stopped
    HOLD_RETRY = 1.0         # s: ~/hold asked again after this long without an answer

    def _srv_recover(self, request, response):
        st = self.state_name
        try:
            if self.hold_wanted or self.hold_settle_until is not None:
                response.success, response.message = True, f"already resuming: {self.reason}"
            elif st == fh.ERROR or (st == fh.IDLE and self.check is not None and self.check.ok):
                if st == fh.ERROR and not self.arm.recover():
                    response.success, response.message = False, "the robot still reports errors"
                    return response
                self._start_motion(hold=st == fh.ERROR)
                response.success, response.message = True, "torque control restarted from zero torque" + (
                    self._hold_note() if st == fh.ERROR else "")
            elif st == fh.STOPPED:
                self.guard.reset()
                if self.hold_client is not None:
                    self._ask_hold()
                    response.success, response.message = True, "resuming" + self._hold_note()
                else:
                    self.gate.resume(time.monotonic())
                    self._set_state(fh.WAITING, "resumed: waiting for commands (blended in)")
                    response.success, response.message = True, (
                        "resumed; controller_node '': the bridge cannot ask the controller to hold, its "
                        "commands are blended in as they come (make it hold first)")
            elif st == fh.REFUSED:
                response.success, response.message = False, f"refused: {self.reason}"
            else:
                response.success, response.message = False, f"nothing to recover ({st})"
        except Exception as e:
            response.success, response.message = False, f"{type(e).__name__}: {e}"
        self.get_logger().info(f"~/recover: {response.message}")
        return response

    def diagnostics(self):
        """(level, message, {key: value}) of the bridge now."""
        st, reason = self.state_name, self.reason
        level = {fh.RUNNING: DiagnosticStatus.OK, fh.WAITING: DiagnosticStatus.WARN,
                 fh.IDLE: DiagnosticStatus.WARN}.get(st, DiagnosticStatus.ERROR)
        d = {"state": st, "reason": reason, "mode": self.mode, "robot_ip": self.p["robot_ip"],
             "cycles": self.arm.n_cycles, "lost_cycles": self.arm.n_lost, "commands": self.n_commands,
             "rejected_commands": self.gate.n_rejected, "watchdog_trips": self.gate.n_watchdog,
             "gravity_guard_trips": self.n_guard, "commands_dropped_resuming": self.n_dropped_holding, "controller_check": self.ctl_check,
             "robot_errors": self.n_errors,
             "last_robot_error": self.last_error,
             # where the arm was and how fast it went when the last stop came (robot joint order; ''
             # before any)
             "stop_q": _floats(self.gate.stop_q), "stop_dq": _floats(self.gate.stop_dq)}
        if self.check is not None:
            d.update({"cross_check_gravity": self.check.gravity, "cross_check_mass": self.check.mass,
                      "cross_check_coriolis": self.check.coriolis, "cross_check_ok": self.check.ok})
        message = f"{st}: {reason}"
        if self.loop is not None:
            d.update(self._loop_diagnostics())
            # in_process: the loop's state is the arm's too (a safety-envelope stop, a tripped loop
            # watchdog, rejected states): the status takes the worse level, and says why
            loop_level = DIAG_LEVELS[d["loop_level"]]
            if ord(loop_level) > ord(level):
                level, message = loop_level, f"{message}; loop: {d['loop']}"
        d.update(realtime.diagnostics_values(self.rt_report))
        return level, message, d

    def _loop_diagnostics(self):
        level, message, kv = self.loop.diagnostics()
        d = {"loop_level": level, "loop": message}
        d.update({f"loop.{k}": v for k, v in kv})
        d.update({f"loop.{k}": v for k, v in sorted(dict(self.loop.counts).items())})   # accepted.*, rejected.*
        return d

    def _publish_diagnostics(self):
        level, msg, d = self.diagnostics()
        s = DiagnosticStatus(name=f"{self.get_name()}: franka bridge", hardware_id=self.p["robot_ip"],
                             level=level, message=msg[:500])
        s.values = [KeyValue(key=k, value=str(v)) for k, v in d.items()]
        arr = DiagnosticArray(status=[s])
        arr.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(arr)

    def destroy_node(self):
        if self._cmd_path is not None:
            self._cmd_path.destroy()
        try:
            self.arm.close()
        except Exception:
            pass
        return super().destroy_node()


def main(args=None):
    """Spin until SIGINT / SIGTERM (repeated ones included), then end the torque motion and exit 0
    (nodes/runner.py); a node that cannot start (bad parameter, rt_required refused): exit code 1."""
    return run(FrankaBridge, args=args, exit_process=True)


if __name__ == "__main__":
    sys.exit(main())
