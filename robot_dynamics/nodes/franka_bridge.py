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
when the commanded torque at low speed is mostly g(q) (see hardware.franka_commands.GravityGuard), and the
in-process mode builds its law with compensate_gravity false whatever the parameters say.

Safety: no command for `command_timeout` (controller or its topics died) -> the bridge's watchdog
applies a damping torque -D dq (robot holds its weight): the arm stops; franky's own watchdog
(`signal_timeout`) ends the torque motion if the bridge itself stalls.  A robot error (reflex,
communication) ends the motion; the reason is logged and published; `~/recover` is the way back.

Layout: this file is the ROS adapter only (parameters, topics, services, diagnostics, the commands
thread); the robot's side, from connect to the torque set in each 1 kHz cycle (the in-process
ControlLoop, the topic mode's gate and gravity guard), is hardware/franka_loop.FrankaLoop, which
imports no rclpy; the controller-node hand-shakes of topic mode are nodes/franka_link.py.
Reads: the parameters, the commands (topic mode), the references (in_process).  Writes: the topics
above, /diagnostics.  Guarantees: the adapter never blocks the robot's callback on the executor
(the callback only publishes, preallocated and serialized); a change from the executor reaches the
in-process loop under its lock, between two robot cycles; bad input (a command of the wrong length
or not finite, a reference that does not convert) is rejected and counted, the arm keeps its command.
"""
import gc
import sys
import threading
import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger

from .. import realtime
from ..hardware import franka as fh
from ..hardware.franka_commands import ERROR, IDLE, REFUSED, RUNNING, STOPPED, WAITING
from ..hardware.franka_loop import MODES, FrankaLoop  # noqa: F401 (MODES: the parameter's choices)
from .cdr import JointStateWriter
from .common import command_values
from .control_path import ControlPath, TakeSubscription
from .controller.services import DIAG_LEVELS
from .franka_in_process import InProcessSurface
from .franka_link import ControllerLink
from .runner import run

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
    "wrench_topic": ("/ft_sensor/wrench", "geometry_msgs/WrenchStamped in (in_process, cartesian_impedance): an "
                                          "F/T sensor's reading, for force control and the friction's stiction"),
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



class FrankaBridge(ControllerLink, InProcessSurface, Node):
    """The ROS adapter over a FrankaLoop (`self.robot`); it is the loop's sink (log, publish_state,
    publish_description, loop_state, loop_command, loop_built, freeze_gc)."""

    def __init__(self, name="franka_bridge", **kw):
        super().__init__(name, **kw)
        for k, (default, desc) in PARAMETERS.items():
            self.declare_parameter(k, default)
        p = {k: self.get_parameter(k).value for k in PARAMETERS}
        self.p = p
        self.joints = list(p["joints"])
        # the in-process loop's parameters: those given to this node that the loop knows
        from ..control.params import loop_param_specs
        self._loop_specs = {sp.name for sp in loop_param_specs()}
        given = {k: v.value for k, v in self._parameter_overrides.items() if k in self._loop_specs}
        self.robot = FrankaLoop(p, self, loop_params=given)     # ValueError: mode, joints
        self.mode = self.robot.mode
        self.arm = self.robot.arm

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
        self._link_init()                # topic mode: the controller node's check and ~/hold (franka_link.py)
        if self.mode == "in_process":
            self._in_process_init()      # the action's parameters (franka_in_process.py)
        self._cmd_path = None
        if self.mode == "topic":
            # the commands: a thread of their own waits on the subscription (nodes/control_path.py), no
            # executor per message; the executor keeps services, timers and parameters
            sub = TakeSubscription(self, Float64MultiArray, p["command_topic"], 10, raw=True)
            self._cmd_path = ControlPath(self, sub, self._on_command_raw, name="commands",
                                         on_error=self._on_path_error)
        self.create_service(Trigger, "~/recover", self._srv_recover)
        self.create_timer(0.05, self._poll)
        self.create_timer(0.01, self.robot.publish_idle_state)
        self.create_timer(p["diagnostics_period"], self._publish_diagnostics)
        self.add_on_set_parameters_callback(self._on_set_bridge_params)
        self.rt_settings = realtime.settings_from(lambda n: p.get(n))
        self.rt_report = realtime.apply(self.rt_settings, log=self._rt_log)   # RealtimeError: rt_required
        if self._cmd_path is not None:
            self._cmd_path.start()
        self._starter = threading.Thread(target=self.robot.connect_and_start, args=(rclpy.ok,), daemon=True)
        self._starter.start()

    # the robot side's state, read by the services, diagnostics and bench/franka_latency.py
    state_name = property(lambda self: self.robot.state_name)
    reason = property(lambda self: self.robot.reason)
    loop = property(lambda self: self.robot.loop)

    LIVE = ("command_timeout",)

    def _on_set_bridge_params(self, params):
        """`command_timeout` is live (> 0 s, e.g. tightened once the controller runs); the bridge's other
        parameters are read at start-up, and a change is refused saying so.  Parameters that are not
        the bridge's own (the in-process loop's) are left to their callback."""
        from rcl_interfaces.msg import SetParametersResult
        for prm in params:
            if prm.name not in PARAMETERS:
                err = self._check_in_process_param(prm) if self.mode == "in_process" else None
                if err:
                    return SetParametersResult(successful=False, reason=err)
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
                self.robot.gate.command_timeout = float(prm.value)
                self.p["command_timeout"] = float(prm.value)
                self.get_logger().info(f"command_timeout: {float(prm.value)} s")
        return SetParametersResult(successful=True)

    def _rt_log(self, text):
        if "refused" in text:                  # one call site per severity (rclpy)
            self.get_logger().warning(text)
        else:
            self.get_logger().info(text)

    # ---- the robot side's sink ----
    def freeze_gc(self):
        """rt_gc_mode freeze / manual: what start-up built (the model, the loop) is frozen too."""
        if self.rt_settings.gc_mode != "default":
            gc.collect()
            gc.freeze()

    def log(self, level, text):
        self._loop_log(level, text)

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

    def publish_description(self, urdf):
        self.pub_desc.publish(String(data=urdf))

    def publish_state(self, q, dq, tau_J, t):
        """/joint_states (and /clock from the robot's time with publish_clock), every robot cycle."""
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
        self.pub_js.publish(js.bytes())

    # ---- topic mode: the commands thread ----
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
        r = self.robot
        if tau.shape != (fh.N,) or not np.all(np.isfinite(tau)):
            r.gate.n_rejected += 1
            self.get_logger().warning(f"command rejected (7 finite numbers expected): {tau.tolist()[:8]}",
                                      throttle_duration_sec=1.0)
            return
        r.n_commands += 1
        if self.hold_wanted:                 # ~/recover waits for the controller's ~/hold: not yet
            self.n_dropped_holding += 1
            return
        if self.hold_settle_until is not None and not self._hold_settled(tau):
            self.n_dropped_holding += 1
            return
        r.gravity_checked_false = self.ctl_check == "ok"
        stopped = r.command(tau, now)
        if stopped is not None:          # the gravity guard stopped the arm: say why
            self.get_logger().error(stopped)

    # ---- supervision ----
    def _poll(self):
        self._check_hold()
        said = self.robot.poll()
        if said is not None:
            self._loop_log(*said)

    def _start_motion(self, hold=False):
        """(Re)start torque control from zero torque.  `hold` (after a robot error, topic mode): the
        controller's commands wait for its ~/hold (_ask_hold)."""
        self.robot.start_motion()
        if hold and self.hold_client is not None:
            self._ask_hold()

    def _srv_recover(self, request, response):
        r = self.robot
        st = r.state_name
        try:
            if self.hold_wanted or self.hold_settle_until is not None:
                response.success, response.message = True, f"already resuming: {r.reason}"
            elif st == ERROR or (st == IDLE and r.check is not None and r.check.ok):
                if st == ERROR and not self.arm.recover():
                    response.success, response.message = False, "the robot still reports errors"
                    return response
                self._start_motion(hold=st == ERROR)
                response.success, response.message = True, "torque control restarted from zero torque" + (
                    self._hold_note() if st == ERROR else "")
            elif st == STOPPED:
                r.guard.reset()
                if self.hold_client is not None:
                    self._ask_hold()
                    response.success, response.message = True, "resuming" + self._hold_note()
                else:
                    r.gate.resume(time.monotonic())
                    r.set_state(WAITING, "resumed: waiting for commands (blended in)")
                    response.success, response.message = True, (
                        "resumed; controller_node '': the bridge cannot ask the controller to hold, its "
                        "commands are blended in as they come (make it hold first)")
            elif st == REFUSED:
                response.success, response.message = False, f"refused: {r.reason}"
            else:
                response.success, response.message = False, f"nothing to recover ({st})"
        except Exception as e:
            response.success, response.message = False, f"{type(e).__name__}: {e}"
        self.get_logger().info(f"~/recover: {response.message}")
        return response

    # ---- diagnostics ----
    def diagnostics(self):
        """(level, message, {key: value}) of the bridge now."""
        r = self.robot
        st, reason = r.state_name, r.reason
        level = {RUNNING: DiagnosticStatus.OK, WAITING: DiagnosticStatus.WARN,
                 IDLE: DiagnosticStatus.WARN}.get(st, DiagnosticStatus.ERROR)
        d = r.diagnostics_values()
        d.update({"commands_dropped_resuming": self.n_dropped_holding, "controller_check": self.ctl_check,
                  "robot_errors": r.n_errors, "last_robot_error": r.last_error})
        d.update(r.stop_values())
        d.update(r.check_values())
        message = f"{st}: {reason}"
        if r.loop is not None:
            d.update(self._loop_diagnostics())
            # in_process: the loop's state is the arm's too (a safety-envelope stop, a tripped loop
            # watchdog, rejected states): the status takes the worse level, and says why
            loop_level = DIAG_LEVELS[d["loop_level"]]
            if ord(loop_level) > ord(level):
                level, message = loop_level, f"{message}; loop: {d['loop']}"
        d.update(realtime.diagnostics_values(self.rt_report))
        return level, message, d

    def _loop_diagnostics(self):
        loop = self.robot.loop
        level, message, kv = loop.diagnostics()
        d = {"loop_level": level, "loop": message}
        d.update({f"loop.{k}": v for k, v in kv})
        d.update({f"loop.{k}": v for k, v in sorted(dict(loop.counts).items())})   # accepted.*, rejected.*
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
            self.robot.close()
        except Exception:
            pass
        return super().destroy_node()


def main(args=None):
    """Spin until SIGINT / SIGTERM (repeated ones included), then end the torque motion and exit 0
    (nodes/runner.py); a node that cannot start (bad parameter, rt_required refused): exit code 1."""
    return run(FrankaBridge, args=args, exit_process=True)


if __name__ == "__main__":
    sys.exit(main())
