"""The Franka bridge's in_process surface (a mixin of nodes/franka_bridge.FrankaBridge): what ROS sees
of the ControlLoop that hardware/franka_loop.FrankaLoop steps in the robot's control callback.

- its outputs: ~/commands (the torque sent to the robot, robot order) and ~/state (as the controller
  node's, only while subscribed), both written from the robot's callback, preallocated;
- its parameters: every loop parameter declared as the controller node declares them, the live ones
  handed to the loop under its lock (`<law>.compensate_gravity: true` refused: the Franka adds gravity);
- its references: ~/joint_trajectory, ~/target_joint_state, ~/target_pose, converted on the executor,
  then handed over under the loop's lock (a conversion error counted as rejected.<topic>);
- its F/T sensor (cartesian_impedance): wrench_topic, handed to the loop stamped with the robot's time
  of the newest state (the loop's clock: a silent sensor goes stale after watchdog_timeout of it);
- its services: ~/hold, ~/resume, ~/identify_dynamics, ~/identify_dynamics_status,
  ~/cancel_dynamics_identification;
- its action: ~/follow_joint_trajectory (joint_impedance, computed_torque) and ~/controller_state, the
  controller node's own (nodes/follow_joint_trajectory.py, control/trajectory_goal.py), the goal's
  header.stamp and the check of its age taken on the robot's time.

Reads: the references, parameter changes, service calls.  Writes: the loop's reference, parameters and
runs (under its lock, between two robot cycles), ~/commands and ~/state.
"""
from types import SimpleNamespace

from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.clock import Clock, ClockType
from rcl_interfaces.msg import SetParametersResult
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from ..control.params import loop_param_specs
from ..hardware.franka import N
from ..hardware.franka_commands import RUNNING
from .cdr import Float64ArrayCdr
from .common import (check_value, declare_all, map_joint_values, param_value, pose_to_rp, ros_param_spec,
                     trajectory_arrays, trigger_handler, wrench_to_array)
from .controller.inputs import QOS_SENSOR
from .controller.outputs import StateOutput
from .follow_joint_trajectory import FJT_PARAMS, FollowJointTrajectoryServer


class InProcessSurface(FollowJointTrajectoryServer):
    """~/commands, ~/state, the loop's parameters, references, services and action (see the module
    docstring).  Needs self.robot (a FrankaLoop), self.p (the bridge's own PARAMETERS) and self._loop_specs."""

    def _in_process_init(self):
        """In __init__ (in_process): the action's parameters declared as the controller node declares
        them, and what nodes/follow_joint_trajectory.py reads of its host (`c` once the loop exists,
        the lock the loop's, a steady clock, the logger)."""
        self._specs = {s.name: s for s in FJT_PARAMS}
        declare_all(self, [s for s in FJT_PARAMS if not self.has_parameter(s.name)])
        self._lock = self.robot.loop_lock
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._log = self.get_logger()
        self.c = None
        self.counts = {}
        self._fjt_declare()                    # constraints.<joint>.* (FollowJointTrajectory)

    def _p(self, name):
        return param_value(self, name)

    @property
    def active(self):
        """The action's goals are taken while torque control runs with the loop (as JTC's while active)."""
        return self.c is not None and self.robot.state_name == RUNNING

    def _guard(self, fn, where):
        """A timer callback that never raises: logged (throttled) and counted as errors.<where>."""
        def wrapped(*args):
            try:
                return fn(*args)
            except Exception as e:             # noqa: BLE001 (nothing may escape a callback)
                self.counts[f"errors.{where}"] = self.counts.get(f"errors.{where}", 0) + 1
                self._log.error(f"{where}: {type(e).__name__}: {e}", throttle_duration_sec=5.0)
        return wrapped

    def _fjt_times(self, stamp):
        """The goal's header.stamp (ROS clock) and now on the loop's clock, the robot's time."""
        t = self.robot.t_robot
        if t is None:
            return stamp, 0.0
        return (None if stamp is None else stamp - self._robot_time_offset()), t

    def _robot_time_offset(self):
        """ROS time - robot time [s] now: this node's /clock is start-up wall time + robot time
        (publish_clock), else the system clock's difference to the robot's time now."""
        if self.pub_clock is not None and self.t0_ns is not None:
            return self.t0_ns * 1e-9
        return self._clock_handle.get_now().nanoseconds * 1e-9 - self.robot.t_robot

    def _check_in_process_param(self, prm):
        """An action parameter (FJT_PARAMS, constraints.<joint>.*) checked as the controller node
        checks it: an error string or None."""
        spec = self._specs.get(prm.name)
        if spec is None:
            return None
        if not spec.live:
            return f"{prm.name} is read at start-up"
        return check_value(spec, prm.value)

    def loop_state(self, tau, info, safe):
        """in_process, under the loop's lock: ~/state (only while subscribed)."""
        if self.state_out.wanted():
            sec, nsec = divmod(self._clock_handle.get_now().nanoseconds, 1_000_000_000)
            self.state_out.publish(tau, sec, nsec, info, safe)

    def loop_command(self, tau):
        """in_process: ~/commands, the torque the loop sends the robot (robot order)."""
        self.cmd_out.data[:] = tau
        self.pub_cmd.publish(self.cmd_out.bytes())

    def loop_built(self, loop):
        """in_process (start-up thread): every loop parameter declared as the controller node declares
        them (ros2 param set /franka_bridge <k> <v>; the live ones change the loop), its outputs,
        references and services."""
        specs, over = self._loop_specs, self.robot.loop_params
        # the given and forced values, else the default (an identified friction model set live on a
        # bridge started without one)
        for sp in loop_param_specs():
            k = sp.name
            if k in self.p or self.has_parameter(k):
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
            with self.robot.loop_lock:
                ok, reason = loop.set_params(changes)
            return SetParametersResult(successful=bool(ok), reason=reason or "")
        self.add_on_set_parameters_callback(on_set)
        self.cmd_out = Float64ArrayCdr(N, "joints")     # ~/commands, serialized, preallocated
        self.pub_cmd = self.create_publisher(Float64MultiArray, "~/commands", 10)
        self.state_out = StateOutput(self, loop)           # ~/state, as the controller node's
        self.create_subscription(JointTrajectory, "~/joint_trajectory", self._on_trajectory, 10)
        self.create_subscription(JointState, "~/target_joint_state", self._on_target_joint_state, 10)
        self.create_subscription(PoseStamped, "~/target_pose", self._on_target_pose, 10)
        if loop.law_name == "cartesian_impedance":
            self.create_subscription(WrenchStamped, self.p["wrench_topic"], self._guard(self._on_wrench, "wrench"),
                                     QOS_SENSOR)
        # ~/follow_joint_trajectory (joint laws): the controller node's server over this loop
        self.counts = loop.counts
        self.c = SimpleNamespace(loop=loop, model=self.robot.model, law_name=loop.law_name,
                                 out=SimpleNamespace(cmd_np=self.cmd_out.data))
        self._fjt_configure(self.c)            # (before the torque motion starts: no cycle to hold up)
        lock = self.robot.loop_lock
        self.create_service(Trigger, "~/hold", trigger_handler(lock, self._hold))
        # ~/resume: leave a joint speed stop or a safety-envelope stop of the in-process loop (safety.*)
        self.create_service(Trigger, "~/resume", trigger_handler(lock, lambda: loop.resume()))
        for srv, what in (("~/identify_dynamics", "identify"), ("~/identify_dynamics_status", "status"),
                          ("~/cancel_dynamics_identification", "cancel")):
            self.create_service(Trigger, srv, self._dynamics_service(what))

    def _reference(self, what, convert):
        loop = self.robot.loop
        try:
            ref = convert(loop)
        except ValueError as e:
            loop.references.reject(what, str(e))
            return
        with self.robot.loop_lock:
            loop.set_reference(ref, what)

    def _on_trajectory(self, msg):
        from ..control import JointTrajectory as Traj
        m = self.robot.model

        def convert(loop):
            times, P, V, A = trajectory_arrays(list(m.joint_names), msg)
            tr = Traj(times, P, V, A, lower=m.lower_limits, upper=m.upper_limits)
            st = msg.header.stamp
            if (st.sec or st.nanosec) and self.robot.t_robot is not None:
                # header.stamp on the ROS clock (this node's /clock, or the system clock) -> the loop's
                # robot time, from the offset between the two now (the controller node's semantics)
                tr.stamp = st.sec + 1e-9 * st.nanosec - self._robot_time_offset()
                if tr.stamp + float(times[-1]) < self.robot.t_robot:
                    raise ValueError("joint_trajectory: it ends in the past (header.stamp + last "
                                     "time_from_start before now); stamp it 0 to start on receipt")
            return tr
        self._reference("joint_trajectory", convert)

    def _on_target_joint_state(self, msg):
        from ..control import JointReference
        names = list(self.robot.model.joint_names)

        def convert(loop):
            q = map_joint_values(names, msg.name, msg.position, "target_joint_state position")
            v = (map_joint_values(names, msg.name, msg.velocity, "target_joint_state velocity")
                 if len(msg.velocity) else None)
            return JointReference(q, v)
        self._reference("target_joint_state", convert)

    def _on_target_pose(self, msg):
        from ..control import CartesianReference

        def convert(loop):
            if msg.header.frame_id not in ("", "world", self.robot.model.frame_names[0]):
                raise ValueError(f"target_pose: frame {msg.header.frame_id!r} is not the robot base")
            R, p = pose_to_rp(msg.pose)
            if not loop.cartesian:             # a joint law: the pose of ik.frame, through the IK
                return loop.references.cartesian_goal(CartesianReference(R, p))
            return CartesianReference(R, p)
        self._reference("target_pose", convert)

    def _on_wrench(self, msg):
        """The F/T sensor's reading, on the robot's time of the newest state (the loop checks it: a
        non-finite one is counted and not used, a silent sensor goes stale)."""
        t = self.robot.t_robot
        if t is None:
            return
        w = wrench_to_array(msg.wrench)
        with self.robot.loop_lock:
            self.robot.loop.estimation.set_wrench(w, msg.header.frame_id, t)

    def _hold(self):
        ok, msg = self.robot.loop.hold()
        return ok, msg or "holding"

    def _dynamics_service(self, what):
        """~/identify_dynamics (started on the robot's clock; only while torque control runs),
        ~/identify_dynamics_status, ~/cancel_dynamics_identification of the in-process loop: the run
        advances in the robot's control callback, torques from the robot's tau_J."""
        def action():
            r = self.robot
            if what == "identify" and (r.state_name != RUNNING or r.t_robot is None):
                return False, f"refused: torque control is not running (state {r.state_name})"
            return r.loop.runs.dynamics_request(what, r.t_robot)
        return trigger_handler(self.robot.loop_lock, action)
