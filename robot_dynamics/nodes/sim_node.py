"""MuJoCo simulation node: presents what Gazebo + gz_ros2_control present to a torque controller.

    ros2 run robot_dynamics sim_node --ros-args -p robot:=panda
    python -m robot_dynamics.nodes.sim_node --ros-args --params-file config/sim_panda.yaml

Interface (names are parameters; remap as usual):

  publishes   /joint_states            sensor_msgs/JointState   position, velocity, effort (applied), `joints` order
              /clock                   rosgraph_msgs/Clock      simulated time (for use_sim_time:=true)
              /ft_sensor/wrench        geometry_msgs/WrenchStamped  F/T sensor at `ft_sensor_frame`, in that frame
              /robot_description       std_msgs/String (transient local), if publish_robot_description
  subscribes  /effort_controller/commands  std_msgs/Float64MultiArray  efforts [N m | N] in `joints` order
              ~/apply_wrench           geometry_msgs/WrenchStamped  external push: header.frame_id = the model
                                       frame pushed, wrench in WORLD axes about that frame's origin; an
                                       all-zero wrench clears the push on that frame
  services    ~/reset                  std_srvs/Trigger  back to initial_positions at zero velocity, pushes
                                       cleared; the effort command is kept (running controllers see a jump)

Command handling, as a ros2_control JointGroupEffortController + effort interface would do it: a
message of the wrong length, or with a NaN / inf, is rejected with a (throttled) warning and the last
good command is held (`bad_command_policy: hold`, the ForwardCommandController behaviour), or the
command is zeroed (`bad_command_policy: zero`).  Efforts are clamped at the URDF effort limits (as
gz_ros2_control does with the ros2_control tag's min/max).

A controller that dies (issue 42): with `command_timeout` > 0 (0.1 s by default) and no command for
that long once commands came, the sim does what a robot driver's communication watchdog does: it
stops the arm and holds it.  It brakes first, tau = bias(q, v) - M(q) v / stop_time_constant (gravity
held, every joint speed decaying with that time constant, within the effort limits:
MujocoSim.braking_torque), and once every joint is slower than `stop_rest_speed` the brakes close
and hold the arm where it came to rest (as the start-up brakes hold it at initial_positions).  A WARN
says so, and /diagnostics reports level WARN with the count (`timeouts`) while stopped.  The brakes
open again as at start-up, once a live controller's command has settled (brake_release_tolerance /
brake_settle_time / brake_release_timeout).  Joint position limits are hard end stops in the sim
(MujocoSim).  `command_timeout` 0: the last command is applied forever (Gazebo's and a ros2_control
JointGroupEffortController's behaviour: ros2_controllers #95).

Timing: physics runs in its own thread, paced by the wall clock: every 1/publish_rate s it steps as
many dt steps as the real-time factor asks (sim time = real_time_factor x wall time), then publishes.
That thread is a control path (nodes/control_path.py): it waits on the command subscription itself
between cycles and takes each command when it arrives (the executor never sees them), and its
outputs are preallocated serialized messages (nodes/cdr.py).
If it falls more than `max_catchup` steps behind (machine overloaded) it drops the backlog and slows
down instead of bursting; the node logs the count of such slips at shutdown.  The simulated clock starts at
the wall-clock time of start-up (`sim_time_origin: wall`, so stamps are comparable to a node that does
not use sim time) or at zero as in Gazebo (`sim_time_origin: zero`).
"""
import math
import sys
import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import WrenchStamped
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger

from .. import realtime
from .cdr import ClockWriter, JointStateWriter, WrenchStampedWriter
from .common import command_values, parse_xacro_args
from .control_path import ControlPath, TakeSubscription
from .runner import run

# Every parameter the node declares: name -> (default, description).  Tests and the launch checks use
# this table (config YAML keys must be here).  A Parameter.Type default is a typed parameter with no
# value (it then comes from the model); an empty string means the same for strings.
PARAMETERS = {
    "robot": ("panda", "example-robot-data name (robot_dynamics.dynamics.robots.ROBOTS)"),
    "urdf_path": ("", "URDF file (.urdf, or .xacro expanded with xacro_args); overrides `robot`"),
    "xacro_args": (Parameter.Type.STRING_ARRAY, "xacro arguments 'name:=value' for a .xacro urdf_path"),
    "robot_description": ("", "URDF text; overrides `urdf_path` and `robot`"),
    "joints": (Parameter.Type.STRING_ARRAY, "joint order of the command array and of /joint_states (default: model order); "
               "a subset of the model's joints: those are simulated on a fixed base, every other joint "
               "locked at zero (any example-robot-data arm, e.g. of a mobile manipulator)"),
    "initial_positions": (Parameter.Type.DOUBLE_ARRAY, "start configuration in `joints` order (default: a robot-specific "
                                 "home pose, else zero clamped into the limits)"),
    "dt": (0.001, "physics step [s]"),
    "real_time_factor": (1.0, "simulated seconds per wall-clock second"),
    "integrator": ("RK4", "MuJoCo integrator: RK4 (4 evaluations per step; accurate without contacts), "
                          "implicitfast or euler (1 evaluation: a quarter of the physics CPU)"),
    "publish_rate": (1000.0, "joint_states / clock / wrench rate [Hz] (wall clock); at most 1/dt"),
    "max_catchup": (50, "most steps run in one cycle before the backlog is dropped"),
    "spin_wait": (0.0, "[s] the physics thread polls (does not sleep) this long before each cycle: "
                       "cycles on time where timer wake-ups are late (a shared virtual machine), for "
                       "the CPU of the window (0.0003 at 1 kHz: about 30 % of a core); 0: sleep"),
    "sim_time_origin": ("wall", "'wall': sim clock starts at the wall time of start-up; 'zero': at 0"),
    "joint_states_topic": ("/joint_states", "sensor_msgs/JointState out"),
    "command_topic": ("/effort_controller/commands", "std_msgs/Float64MultiArray in"),
    "wrench_topic": ("/ft_sensor/wrench", "geometry_msgs/WrenchStamped out (F/T sensor)"),
    "ft_sensor_frame": ("", "frame carrying the F/T sensor ('' -> the flange: panda_link8, "
                            "tool0, j2s6s200_link_6, else the last frame; 'none' disables)"),
    "publish_clock": (True, "publish /clock"),
    "publish_robot_description": (False, "publish the URDF on /robot_description (transient local)"),
    "bad_command_policy": ("hold", "wrong length / non-finite command: 'hold' last good, or 'zero'"),
    "command_timeout": (0.1, "[s] without a command (once commands came) -> brake to rest and hold, as a "
                             "driver's watchdog; 0: apply the last command forever (Gazebo)"),
    "stop_time_constant": (0.05, "[s] the timeout stop's braking: joint speeds decay as exp(-t / this)"),
    "stop_rest_speed": (0.01, "[rad/s] the timeout stop closes the brakes once every joint is slower"),
    "hold_until_first_command": (True, "brakes: keep the arm still at initial_positions until the "
                                       "controller's command has settled (see brake_release_tolerance); "
                                       "false: the arm moves at once, as in Gazebo"),
    "brake_release_tolerance": (0.01, "brakes open once the (non-zero) command has stayed within this "
                                      "[N m] of itself for brake_settle_time (a ramping or rate-limited "
                                      "start-up has finished) ..."),
    "brake_settle_time": (0.05, "... [s]: a time window, not two consecutive messages, so that commands "
                                "arriving in bursts (two control steps microseconds apart) do not look "
                                "settled in the middle of a ramp"),
    "brake_release_timeout": (3.0, "... or this long [s] after the first non-zero command"),
    "damping": (0.0, "viscous joint damping [N m s/rad], all joints"),
    "friction": (0.0, "joint friction loss [N m], all joints"),
    "armature": (0.0, "rotor inertia behind each joint's gear [kg m^2], all joints (the URDF has none)"),
    "effort_limits": (True, "clamp applied efforts at the URDF effort limits"),
    "payload.frame": ("", "frame carrying a rigid payload (MujocoSim payload); '': none"),
    "payload.mass": (0.0, "payload mass [kg]"),
    "payload.com": ([0.0, 0.0, 0.0], "payload centre of mass in payload.frame [m]"),
    "payload.inertia": ([0.0] * 6, "payload inertia about its centre of mass in payload.frame's axes: ixx ixy "
                        "ixz iyy iyz izz [kg m^2]"),
    "diagnostics_period": (1.0, "period of /diagnostics [s] (physics stats, the rt_* report); 0: none"),
}
# the real-time option (robot_dynamics/realtime.py), read at start-up, applied by main() to every
# thread of the process (the physics thread included) once the node exists
PARAMETERS.update({p[0]: (p[1], p[2]) for p in realtime.PARAMS})

# Home poses used when `initial_positions` is not given (model order).
HOME = {
    "panda": [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785],
    "ur5": [0.0, -1.571, 1.571, -1.571, -1.571, 0.0],
    "kinova": [0.0, 2.9, 1.3, -2.07, 1.4, 0.0],
}


def load_model(robot="panda", urdf_path="", robot_description="", xacro_args=None, joints=None):
    """The Model the node simulates: robot_description text > urdf_path (.urdf or .xacro, with
    `xacro_args` ['name:=value', ...]) > example-robot-data name.  `joints` (a list): only those move,
    on a fixed base, every other joint locked."""
    from ..dynamics import Model
    kw = {"active_joints": list(joints), "floating_base": False} if joints else {}
    if robot_description:
        return Model.from_description(robot_description, **kw)
    if urdf_path:
        return Model.from_description(urdf_path, xacro_args=parse_xacro_args(xacro_args) or None, **kw)
    return Model.from_robot(robot, **kw)


# Where the F/T sensor sits when `ft_sensor_frame` is not given: the flange.
FT_FRAME = {"panda": "panda_link8", "ur5": "tool0", "kinova": "j2s6s200_link_6"}


def default_ft_frame(model, robot):
    for f in (FT_FRAME.get(robot), "panda_link8", "tool0"):
        if f and f in model.frame_names:
            return f
    return model.frame_names[-1]


class Paced:
    """The pacing both sim nodes share (this one and nodes/cell_sim.py): after a cycle of n physics
    steps, count it, publish, tick the collector; the next wake-up one period on (re-anchored when late
    by more than a period); the clock's stamp; stop.  Needs _steps, stats, _period, _next_wake, _path,
    _gc_ctl, pub_clock, _clock_out, sim_time() and _publish()."""

    def _stepped(self, n, now):
        self._steps += n
        self.stats["steps"] = self._steps
        self.stats["cycles"] += 1
        self._publish()
        self._gc_ctl.tick(now)          # rt_gc_mode manual: after the publish

    def _wake_next(self):
        period = self._period
        self._next_wake += period
        if self._next_wake < time.monotonic() - period:   # late by more than a period: re-anchor
            self._next_wake = time.monotonic()
        self._path.wake_at(self._next_wake)

    def _publish_clock(self):
        """(sec, nsec) of the sim time now; /clock published with it when enabled."""
        t = self.sim_time()
        sec = int(math.floor(t))
        nsec = int((t - sec) * 1e9)
        if self.pub_clock is not None:
            self._clock_out.set_stamp(sec, nsec)
            self.pub_clock.publish(self._clock_out.bytes())
        return sec, nsec

    def stop(self):
        if self._path is not None and self._path.stop():
            self._path.destroy()
            self._path = None


class MujocoSimNode(Paced, Node):
    """Simulated arm on the ROS graph (see the module docstring)."""

    def __init__(self, node_name="mujoco_sim", **kwargs):
        super().__init__(node_name, **kwargs)
        for name, (default, desc) in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {}
        for name in PARAMETERS:
            try:
                p[name] = self.get_parameter(name).value
            except ParameterUninitializedException:
                p[name] = None
        self.p = p
        joints = [j for j in (p["joints"] or []) if j]
        self.model = load_model(p["robot"], p["urdf_path"], p["robot_description"], p["xacro_args"],
                                joints)
        m = self.model
        self.joints = joints or list(m.joint_names)
        missing = [j for j in self.joints if j not in m.joint_names]
        if missing or len(set(self.joints)) != len(self.joints):
            raise ValueError(f"joints {self.joints}: unknown {missing} or repeated; the model has "
                             f"{m.joint_names}")
        if sorted(self.joints) != sorted(m.joint_names):
            raise ValueError(f"joints must list every actuated joint of the model {m.joint_names}")
        # index maps: message order <-> model order
        self.msg_to_model = np.array([self.joints.index(n) for n in m.joint_names])
        self.model_to_msg = np.array([m.joint_names.index(n) for n in self.joints])
        self.n = len(self.joints)

        ft = str(p["ft_sensor_frame"])
        if ft == "":
            ft = default_ft_frame(m, p["robot"])
        self.ft_frame = None if ft.lower() == "none" else m.check_frame(ft)

        from ..sim import MujocoSim
        self.dt = float(p["dt"])
        if not (self.dt > 0 and p["real_time_factor"] > 0 and p["publish_rate"] > 0):
            raise ValueError("dt, real_time_factor and publish_rate must be positive")
        payload = None
        if p["payload.frame"]:
            payload = dict(frame=m.check_frame(str(p["payload.frame"])), mass=float(p["payload.mass"]),
                           com=[float(x) for x in p["payload.com"]],
                           inertia=[float(x) for x in p["payload.inertia"]])
        self.sim = MujocoSim(m, dt=self.dt, damping=float(p["damping"]), friction=float(p["friction"]),
                             armature=float(p["armature"]),
                             ft_sensor_frame=self.ft_frame, effort_limits=bool(p["effort_limits"]),
                             payload=payload, integrator=str(p["integrator"]))
        q0 = list(p["initial_positions"] or [])
        if len(q0) == self.n:
            self.q0 = np.asarray(q0, dtype=float)[self.msg_to_model]
        elif not q0:
            home = HOME.get(p["robot"]) if not (p["urdf_path"] or p["robot_description"]) else None
            self.q0 = np.asarray(home, dtype=float) if home is not None and len(home) == self.n else \
                np.clip(np.zeros(self.n), m.lower_limits, m.upper_limits)
        else:
            raise ValueError(f"initial_positions: expected {self.n} values in `joints` order, got {q0}")
        self.sim.reset(self.q0)
        self.effort_max = np.where(np.isfinite(m.effort_limits) & (m.effort_limits > 0),
                                   m.effort_limits, np.inf)

        self._lock = threading.Lock()
        self._cmd = np.zeros(self.n)            # model order
        self._cmd_time = None
        self._braked = bool(p["hold_until_first_command"])
        self._hold_q = self.q0                  # where the brakes hold the arm
        self._stopping = False                  # command timeout: braking to rest (then braked)
        if not (float(p["command_timeout"]) >= 0 and float(p["stop_time_constant"]) > 0
                and float(p["stop_rest_speed"]) > 0):
            raise ValueError("command_timeout must be >= 0, stop_time_constant and stop_rest_speed > 0")
        self._first_nonzero = None
        self._settle_ref, self._settle_t = None, 0.0   # brakes: command at the start of the settle window
        self._bad = 0
        self._pending_wrench = {}
        self._pending_reset = False
        self.policy = str(p["bad_command_policy"])
        if self.policy not in ("hold", "zero"):
            raise ValueError("bad_command_policy must be 'hold' or 'zero'")
        self.t0 = time.time() if p["sim_time_origin"] == "wall" else 0.0
        if p["sim_time_origin"] not in ("wall", "zero"):
            raise ValueError("sim_time_origin must be 'wall' or 'zero'")

        qos = QoSProfile(depth=10)
        self.pub_js = self.create_publisher(JointState, p["joint_states_topic"], qos)
        self.pub_clock = self.create_publisher(Clock, "/clock", qos) if p["publish_clock"] else None
        self.pub_wrench = self.create_publisher(WrenchStamped, p["wrench_topic"], qos) \
            if self.ft_frame else None
        if p["publish_robot_description"]:
            latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                                 reliability=ReliabilityPolicy.RELIABLE)
            self.pub_desc = self.create_publisher(String, "/robot_description", latched)
            self.pub_desc.publish(String(data=m.urdf))
        # the commands: taken by the physics thread at the start of each cycle (serialized), never by
        # the executor (which keeps ~/apply_wrench, ~/reset and /diagnostics)
        self._cmd_sub = TakeSubscription(self, Float64MultiArray, p["command_topic"], qos, raw=True)
        self.create_subscription(WrenchStamped, "~/apply_wrench", self._on_wrench, qos)
        self.create_service(Trigger, "~/reset", self._on_reset)

        # the outputs, preallocated and published as serialized bytes (nodes/cdr.py)
        self._js = JointStateWriter(self.joints)
        self._wmsg = WrenchStampedWriter(self.ft_frame or "")
        self._clock_out = ClockWriter()
        self._timed_out = False                 # the present stop (if any) came from a command timeout
        self.stats = {"cycles": 0, "steps": 0, "slips": 0, "bad_commands": 0, "timeouts": 0,
                      "commands": 0, "superseded_commands": 0}
        self.rt_report = None                   # realtime.apply's report once apply_realtime() ran
        self._gc_ctl = realtime.GcControl(realtime.Settings())   # a no-op until apply_realtime()
        if float(p["diagnostics_period"]) > 0:
            self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
            self.create_timer(float(p["diagnostics_period"]), self._publish_diagnostics)
        # the physics thread: a control path (nodes/control_path.py) waiting on the command subscription
        # itself, with a wake-up at every physics cycle; commands are taken as they arrive, never by the
        # executor (which keeps ~/apply_wrench, ~/reset and /diagnostics)
        self._path = ControlPath(self, self._cmd_sub, self._on_command, self._cycle, self._on_path_error,
                                 name="mujoco_sim", spin=float(p["spin_wait"]))
        self._rtf = float(p["real_time_factor"])
        self._period = max(1.0 / float(p["publish_rate"]), self.dt / self._rtf)
        self._max_catchup = int(p["max_catchup"])
        self._wall0 = self._next_wake = time.monotonic()
        self._steps0 = self._steps = 0
        self._path.wake_at(self._next_wake)
        self._path.start()
        self.get_logger().info(
            f"simulating {m.name!r} ({self.n} joints) dt={self.dt} s rtf={p['real_time_factor']} "
            f"publish {p['publish_rate']} Hz on {p['joint_states_topic']}; commands on "
            f"{p['command_topic']}; F/T frame {self.ft_frame}")

    def apply_realtime(self):
        """Apply the rt_* parameters (realtime.apply) to the process, once (main() calls it before
        the executor exists; the physics thread, already running, is covered by rt_scope process).
        realtime.RealtimeError (a RuntimeError) when rt_required and a setting was refused."""
        settings = realtime.settings_from(lambda n: self.p.get(n))

        def log(text):                          # one call site per severity (rclpy)
            if "refused" in text:
                self.get_logger().warning(text)
            else:
                self.get_logger().info(text)
        self.rt_report = realtime.apply(settings, log=log)
        self._gc_ctl = realtime.GcControl(settings)
        return self.rt_report

    def _publish_diagnostics(self):
        stopped = self._stopping or (self._braked and self._timed_out)
        st = DiagnosticStatus(name=f"{self.get_name()}: mujoco sim", hardware_id=self.model.name,
                              level=DiagnosticStatus.WARN if stopped else DiagnosticStatus.OK,
                              message=(f"command timeout ({self.stats['timeouts']}): "
                                       f"{'braking' if self._stopping else 'holding'}") if stopped else "ok")
        kv = [(k, str(v)) for k, v in self.stats.items()] + [("sim_time", f"{self.sim.t:.3f}"),
                                                             ("brakes", "on" if self._braked else "off"),
                                                             ("timeout_stop", "braking" if self._stopping else
                                                              "holding" if stopped else "off")]
        if self.rt_report is not None:
            kv += realtime.diagnostics_values(self.rt_report)
        st.values = [KeyValue(key=k, value=v) for k, v in kv]
        arr = DiagnosticArray(status=[st])
        arr.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(arr)

    # ---- commands (the physics thread) ----
    def _on_command(self, raw, now, last):
        """A command (serialized), taken by the physics thread when it arrives; the newest of those
        taken together applies (as a JointGroupEffortController's real-time buffer keeps the latest).
        A message of the wrong length or with a NaN / inf: rejected with a (throttled) warning, the
        last good command held (or zero)."""
        self.stats["commands"] += 1
        if not last:
            self.stats["superseded_commands"] += 1
            return
        u = command_values(raw)
        ok = u.shape == (self.n,) and math.isfinite(float(u.dot(u)))
        released = False
        with self._lock:
            self._cmd_time = now
            if ok:
                if self._braked and not self._stopping and np.any(u):
                    released = self._brake_check(u)
                self._cmd = u[self.msg_to_model]
        if released:                                   # logged outside the lock (see _command)
            self.get_logger().info("commands again: brakes released after the command-timeout stop")
        if ok:
            return
        with self._lock:
            self._bad += 1
            if self.policy == "zero":
                self._cmd = np.zeros(self.n)
        self.get_logger().warning(
            f"command rejected ({'length %d, expected %d' % (u.size, self.n) if u.size != self.n else 'non-finite value'}); "
            f"{'holding the last good command' if self.policy == 'hold' else 'commanding zero effort'}",
            throttle_duration_sec=1.0)

    def _on_path_error(self, where, e):
        self.get_logger().error(f"physics thread ({where}): {type(e).__name__}: {e}", throttle_duration_sec=1.0)

    def _brake_check(self, u):
        """Open the brakes once the (non-zero) command has settled, or after brake_release_timeout."""
        now = time.monotonic()
        if self._first_nonzero is None:
            self._first_nonzero = now
        if self._settle_ref is None or np.max(np.abs(u - self._settle_ref)) >= self.p["brake_release_tolerance"]:
            self._settle_ref, self._settle_t = u.copy(), now     # still moving: restart the window
        elif now - self._settle_t >= self.p["brake_settle_time"]:
            self._braked = False
        if now - self._first_nonzero > self.p["brake_release_timeout"]:
            self._braked = False
        if not self._braked and self._timed_out:
            self._timed_out = False
            return True                                # the caller logs it, outside the lock
        return False

    def _on_wrench(self, msg):
        frame = msg.header.frame_id or self.ft_frame
        f, t = msg.wrench.force, msg.wrench.torque
        w = np.array([f.x, f.y, f.z, t.x, t.y, t.z])
        if frame not in self.model.frame_names or not np.all(np.isfinite(w)):
            self.get_logger().warning(f"apply_wrench: unknown frame {frame!r} or non-finite wrench; ignored")
            return
        with self._lock:
            self._pending_wrench[frame] = w

    def _on_reset(self, request, response):
        with self._lock:
            self._pending_reset = True
        response.success = True
        response.message = "reset to initial_positions"
        return response

    # ---- physics thread ----
    def _command(self, now):
        with self._lock:
            cmd = self._cmd
            timeout = self.p["command_timeout"]
            if (timeout > 0 and self._cmd_time is not None and now - self._cmd_time > timeout
                    and not (self._braked or self._stopping)):
                # the controller is gone: brake to rest, then hold (the module docstring)
                self.stats["timeouts"] += 1
                self._stopping = self._timed_out = True
                self._first_nonzero = self._settle_ref = None     # a new controller must settle first
                timed_out = now - self._cmd_time
            else:
                timed_out = None
            wrenches, self._pending_wrench = self._pending_wrench, {}
            reset, self._pending_reset = self._pending_reset, False
            self.stats["bad_commands"] = self._bad
        if timed_out is not None:      # logged outside the lock: a log call under it (rosout's publish)
            self.get_logger().warning(  # must not hold up the executor's thread at shutdown
                f"no command for {timed_out:.3f} s (command_timeout {timeout} s): "
                f"braking the arm to rest and holding it there")
        if reset:       # the command is kept (as Gazebo's world reset leaves controllers running)
            self.sim.clear_wrench()
            self._hold_q = self.q0
            self._reset_keep_time()
        for frame, w in wrenches.items():
            if np.any(w):
                self.sim.apply_wrench(frame, w)
            else:
                self.sim.clear_wrench(frame)
        return np.clip(cmd, -self.effort_max, self.effort_max)

    def _reset_keep_time(self, q=None):
        """Back to q (default q0) at rest; the simulated clock keeps running (never jumps back)."""
        t = self.sim.t
        self.sim.reset(self.q0 if q is None else q)
        self.sim.d.time = t

    def _cycle(self, now):
        """One physics cycle (the control path's wake-up): as many dt steps as the real-time factor
        asks since the last cycle (sim time = real_time_factor x wall time), then publish, then the
        next wake-up one publish period later.  More than max_catchup steps behind (an overloaded
        machine): the backlog is dropped and the sim slows down instead of bursting."""
        target = self._steps0 + int((now - self._wall0) * self._rtf / self.dt)
        n = target - self._steps
        if n <= 0:                      # woken before the next step is due (a timer returning a little
            due = self._wall0 + (self._steps + 1 - self._steps0) * self.dt / self._rtf   # early): wait
            self._path.wake_at(max(due, now + 1e-6))     # for it, the cycle is not lost
            return
        if n > self._max_catchup:
            self.stats["slips"] += 1
            self._wall0, self._steps0 = now, self._steps
            n = 1
        if n > 0:
            tau = self._command(now)
            if self._stopping:          # command timeout: the driver's braking stop (module docstring)
                tau = np.clip(self.sim.braking_torque(self.p["stop_time_constant"]),
                              -self.effort_max, self.effort_max)
            self.sim.step(tau, n)
            if self._stopping and np.max(np.abs(self.sim.v)) < self.p["stop_rest_speed"]:
                with self._lock:        # at rest: the brakes close where the arm is
                    self._stopping, self._braked = False, True
                    self._hold_q = self.sim.q
            if self._braked:            # brakes on: time runs, the arm stays where they hold it
                self._reset_keep_time(self._hold_q)
            self._stepped(n, now)
        self._wake_next()

    def sim_time(self):
        return self.t0 + self.sim.t

    def _publish(self):
        sec, nsec = self._publish_clock()
        js, idx = self._js, self.model_to_msg
        js.set_stamp(sec, nsec)
        self.sim.q.take(idx, out=js.position)
        self.sim.v.take(idx, out=js.velocity)
        self.sim.measured_effort.take(idx, out=js.effort)
        self.pub_js.publish(js.bytes())
        if self.pub_wrench is not None:
            m = self._wmsg
            m.set_stamp(sec, nsec)
            m.wrench[:] = self.sim.ft_wrench()
            self.pub_wrench.publish(m.bytes())

    def destroy_node(self):
        self.stop()
        msg = f"stopped: {self.stats} sim time {self.sim.t:.3f} s"
        if self.context.ok():
            self.get_logger().info(msg)
        else:                       # after SIGINT the context is gone: /rosout is closed
            print(f"[mujoco_sim] {msg}", file=sys.stderr)
        return super().destroy_node()


def main(args=None):
    """Spin until SIGINT / SIGTERM (repeated ones included), then exit 0 (nodes/runner.py).  With an
    `arms` parameter the node is the cell's (nodes/cell_sim.py: several arms in one world).  The
    rt_* parameters are applied once the node exists; rt_required and a refusal: exit code 1."""
    from rclpy.executors import SingleThreadedExecutor

    from .cell_sim import CellSimNode, wants_cell

    def executor_for(node):
        node.apply_realtime()                   # RealtimeError: logged by the runner, exit code 1
        return SingleThreadedExecutor()
    # an `arms` parameter: several arms in one world (nodes/cell_sim.py); else the one-arm node
    node_class = CellSimNode if wants_cell(sys.argv if args is None else args) else MujocoSimNode
    return run(node_class, args=args, executor_factory=executor_for, exit_process=True)


if __name__ == "__main__":
    sys.exit(main())
