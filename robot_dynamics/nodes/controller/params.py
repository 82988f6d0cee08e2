"""The torque controller node's interface tables: its parameters (the control loop's, from
control/params.py, and the node's own: model source, topics, QoS, trigger, lifecycle, executor, the
real-time option), topics and services, and their Markdown tables
(`python -m robot_dynamics.nodes.controller --print-params`)."""
from rclpy.parameter import Parameter

from ...control import params as loop_params
from ... import realtime
from ..common import (EXECUTORS, RELIABILITIES, ParamSpec, params_table_markdown, parse_xacro_args,  # noqa: F401
                     ros_param_spec)
from ..follow_joint_trajectory import FJT_PARAMS
from .partners import PARAMS as PARTNER_PARAMS

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
    ParamSpec("trigger", "joint_state", "what runs the control step: each joint state, or the update_rate "
              "clock (both on the control thread, which waits on the joint-state subscription itself)",
              "choices", ("joint_state", "timer")),
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
    _loop("armature"),
    _loop("effort_link_side"),
    _loop("effort_scale"),
    _loop("torque_rate_limit"),
    _loop("setpoint_shaping"),
    _loop("ramp_time"),
    _loop("hold_bound"),
    _loop("position_margin"),
    _loop("position_stiffness"),
    _loop("velocity_damping"),
    _loop("log_throttle_period"),
    *[_loop(n) for n in _LOOP if n.startswith("observer.") or n == "cartesian_impedance.wrench_source"],
    *[_loop(n) for n in _LOOP if n.startswith("payload_id.")],
    *[_loop(n) for n in _LOOP if n.startswith("dynamics_id.")],
    *[_loop(n) for n in _LOOP if n.startswith("safety.") or n.startswith("ik.")],
    ParamSpec("diagnostics_period", 1.0, "period of /diagnostics [s]", "positive", startup=True),
    ParamSpec("executor", "single", "rclpy executor of main() for everything but the per-message path "
              "(parameters, services, references, lifecycle, diagnostics): SingleThreadedExecutor, "
              "rclpy.experimental.EventsExecutor or MultiThreadedExecutor (the --multi-threaded flag = "
              "multi).  The joint states, the F/T wrench, the control step and the commands run on the "
              "node's control thread whatever the executor (nodes/control_path.py)", "choices", EXECUTORS, startup=True),
    *[ParamSpec(*p, startup=True) for p in realtime.PARAMS],   # applied by main() once the node exists
    *FJT_PARAMS,
    *PARTNER_PARAMS,
]
assert {s.name for s in GENERAL_PARAMS} >= set(_LOOP), "every loop parameter is a node parameter"


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
     "joint trajectory (computed_torque, joint_impedance); header.stamp as JointTrajectoryController "
     "reads it (zero: start on receipt; future: start then; past: the points due skipped; all due: "
     "rejected), on the node's clock; starts from the reference being followed (no jump)"),
    ("sub", "~/target_joint_state", "sensor_msgs/JointState", "joint set-point (position, optional velocity)"),
    ("sub", "~/target_pose", "geometry_msgs/PoseStamped",
     "pose of the controlled frame in the base frame (cartesian_impedance); for joint_impedance / "
     "computed_torque the pose of ik.frame, turned into a joint goal by the inverse kinematics (refused with "
     "the reason when out of reach or singular)"),
    ("sub", "~/target_wrench", "geometry_msgs/WrenchStamped",
     "feed-forward wrench the robot exerts, base-frame axes (cartesian_impedance)"),
    ("sub", "~/cartesian_trajectory", "trajectory_msgs/MultiDOFJointTrajectory",
     "trajectory of the controlled frame (cartesian_impedance): joint_names empty or naming that frame "
     "(else rejected), its transform per point, optional velocities / accelerations (feed-forward); "
     "interpolated on SE(3); header.stamp as for ~/joint_trajectory; starts from the pose, twist and "
     "acceleration being followed.  joint_impedance / computed_torque: ik.frame's points solved by the "
     "inverse kinematics one after the other, followed as a joint trajectory at the points' times (refused "
     "with the point when one is out of reach, singular, or needs a joint beyond its velocity limit)"),
    ("sub", "~/target_twist", "geometry_msgs/TwistStamped",
     "twist of the streamed target, base-frame axes; sent with the next ~/target_pose (<= 0.1 s old)"),
    ("pub", "command_topic (/effort_controller/commands)", "std_msgs/Float64MultiArray",
     "torque command in `joints` order"),
    ("pub", "~/joint_command", "sensor_msgs/JointState", "the same command as efforts (publish_joint_command)"),
    ("pub", "~/state", "sensor_msgs/JointState",
     "controller state: position = reference, velocity = error, effort = command (every law: the command per "
     "joint, for plotting beside the joint states; the Cartesian law's pose and error are on the three "
     "topics below)"),
    ("pub", "~/current_pose, ~/desired_pose", "geometry_msgs/PoseStamped",
     "cartesian_impedance: the controlled frame's pose and the reference, base frame, stamped like the command, "
     "while subscribed (not while the safe command is out)"),
    ("pub", "~/pose_error", "geometry_msgs/TwistStamped",
     "cartesian_impedance: linear p_d - p [m], angular log3(R_d R^T) [rad], base axes, the same"),
    ('pub', '~/external_wrench', 'geometry_msgs/WrenchStamped',
     "observer.enabled: the momentum observer's estimate of the wrench the environment exerts at `observer.frame` (frame_id), about its origin, in its axes; stamp = the control step's; at observer.publish_rate"),
    ('pub', '~/external_torque', 'sensor_msgs/JointState',
     'observer.enabled: the residual r (external joint torques [N m]) in `effort`, `joints` order, same rate'),
    ('pub', '~/collision', 'std_msgs/Bool',
     'observer.enabled, reliable, TRANSIENT_LOCAL: the collision flag (threshold / release hysteresis), on every change'),
    ("pub", "~/safety_markers", "visualization_msgs/MarkerArray",
     "the safety envelope's planes (thin squares) and boxes (translucent cubes) in the base frame, reliable "
     "TRANSIENT_LOCAL: at configure and after every safety.* change (RViz, Foxglove)"),
    ("action", "~/follow_joint_trajectory", "control_msgs/action/FollowJointTrajectory",
     "joint_impedance, computed_torque: JointTrajectoryController's action (MoveIt's FollowJointTrajectory "
     "controller type): goal checks, path / goal tolerances and goal_time (constraints.*), feedback at "
     "action_monitor_rate, cancel holds; a new goal or reference preempts (README: MoveIt)"),
    ("pub", "~/controller_state", "control_msgs/msg/JointTrajectoryControllerState",
     "joint_impedance, computed_torque: as JointTrajectoryController publishes it (reference, feedback, error, "
     "output = the command's efforts, speed_scaling_factor), at controller_state_rate while subscribed"),
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
    ("~/resume", "std_srvs/Trigger", "leave a joint speed stop or a safety-envelope stop (safety.*): the law holds "
     "the current position, the command ramps from the one sent; refused, with the reason, while a joint is not "
     "at rest (speed stop) or a frame is still outside or too fast"),
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


