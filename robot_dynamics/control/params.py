"""The control loop's parameters: names, defaults, validation rules.  No ROS.

One table serves both front ends: the controller node declares these as ROS parameters (beside its
own topic / QoS / lifecycle ones), and `ControlLoop.from_params` / `set_params` validate a flat dict
with the same names by the same rules (`check_value`).  Per-joint values are given in `joints` order.

    loop_param_specs()        # [Spec, ...]: the loop's general parameters, then `<law>.<key>` of every law
    check_value(spec, v, n)   # None, or an error string naming the parameter
"""
import math
from dataclasses import dataclass

import numpy as np


class Unset:
    """Default of a parameter that is not set unless given (its value comes from elsewhere: the
    URDF, the law); `type_name` is what it holds when set ('double', 'double[]', 'string[]')."""

    def __init__(self, type_name):
        self.type_name = type_name

    def __repr__(self):
        return f"Unset({self.type_name!r})"


UNSET_DOUBLE, UNSET_DOUBLE_ARRAY, UNSET_STRING_ARRAY = Unset("double"), Unset("double[]"), Unset("string[]")


@dataclass
class Spec:
    """One parameter.  `check` names the validation rule: 'nonneg', 'positive', 'finite', 'choices',
    'per_joint' (1 or len(joints) numbers >= 0), 'per_joint_any' (1 or len(joints) finite numbers),
    'vec3', 'vec2_nonneg', or None.  `live`: changeable while configured."""
    name: str
    default: object
    description: str
    check: str = None
    choices: tuple = ()
    live: bool = False
    law_key: str = None          # for law parameters: the key in the law's params dict
    startup: bool = False


LAWS = ("gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")

LOOP_PARAMS = [
    Spec("controller", "gravity_compensation", "control law", "choices", LAWS),
    Spec("joints", UNSET_STRING_ARRAY,
         "active joints = command order; other movable joints are locked at 0 (clamped into "
         "limits); not set: all movable joints of the model, in model order"),
    Spec("backend", "pinocchio", "dynamics backend of the control laws", "choices", ("pinocchio", "reference")),
    Spec("update_rate", 1000.0, "control rate [Hz]: the timer trigger's rate, the safe-command ramp's period "
         "and the command period of the torque-rate limit (the most a command may change is "
         "torque_rate_limit / update_rate, however long the gap since the last one)", "positive"),
    Spec("sensor_frame", "", "F/T sensor frame; empty: header.frame_id of the wrench messages"),
    Spec("tool_mass", 0.0, "mass of the tool beyond the sensor [kg], removed from the wrench", "nonneg"),
    Spec("tool_com", [0.0, 0.0, 0.0], "tool centre of mass in the sensor frame [m]", "vec3"),
    Spec("wrench_filter_cutoff_hz", 0.0, "low-pass cut-off of the wrench [Hz]; 0: no filter", "nonneg"),
    Spec("wrench_deadband", [0.0, 0.0], "deadband on |force| [N] and |torque| [N m]", "vec2_nonneg"),
    Spec("watchdog_timeout", 0.1, "joint states older than this [s] (or no control step for this long) -> "
         "the safe command", "positive", live=True),
    Spec("safe_command", "zero", "command when the input is stale or invalid, and on deactivate: "
         "zero torque, or gravity compensation at the last valid position", "choices",
         ("zero", "gravity"), live=True),
    Spec("effort_limits", UNSET_DOUBLE_ARRAY, "torque limits [N m] in `joints` order; not set: the URDF's",
         "per_joint", live=True),
    Spec("armature", UNSET_DOUBLE_ARRAY, "rotor inertia behind each joint's gear [kg m^2] in `joints` order "
         "(URDF cannot state it; dynamics.identification estimates it): added to the model's mass matrix in "
         "both backends and every algorithm, read at configure; not set: the model's (none)", "per_joint"),
    Spec("effort_link_side", False, "the joint states' effort is measured by link-side joint torque sensors (after "
         "the gear and its friction: a Franka's tau_J, a KUKA iiwa's or a Kinova Gen3's): the friction's stiction "
         "term then takes the environment's torque on each joint from it, g(q) - effort less its mean over the "
         "first 0.2 s after the law starts, and meets a push anywhere on the arm (friction_stiction_sensed); "
         "false: a motor-side effort (a UR's, from its currents) or a simulator's applied torque, which hold the "
         "friction too"),
    Spec("effort_scale", 1.0, "fraction (0, 1] of the effort limits actually allowed", "positive", live=True),
    Spec("torque_rate_limit", 1000.0, "largest torque change per second [N m/s]", "positive", live=True),
    Spec("setpoint_shaping", True, "a joint set-point (~/target_joint_state: no velocity) is approached on a "
         "rest-to-rest quintic whose speed keeps the law's torque change within half the torque-rate limit "
         "and the joints within 0.8 x their velocity limits; a Cartesian pose step the rate limit would not "
         "pass in 10 ms is approached likewise (streamed paths are followed as sent): a step never "
         "saturates the rate limit, whose lag inside the loop can turn a stable law into a limit cycle; "
         "false: stepped to", live=True),
    Spec("hold_bound", True, "a command is held until the next one; when the loop steps late (a stalled "
         "host: the longest recent time T between the stamps of the states stepped on, above 1.5 control periods), the law's feedback is "
         "slowed to a natural frequency of at most 0.5 / T (stiffness by s^2, damping by s: the damping ratio "
         "kept), the joint-limit repulsion and the stops' damping likewise, so that the held command stays "
         "stable; counted (hold_capped_steps) and logged at info; false: the configured gains whatever the "
         "hold (a light wrist at k 50 N m/rad then diverges at 18 ms stalls)", live=True),
    Spec("ramp_time", 0.5, "torque ramp from zero on activation and after a watchdog trip [s]", "nonneg",
         live=True),
    Spec("position_margin", 0.0, "distance to a position limit where a repulsive torque starts "
         "[rad | m]; 0: off", "nonneg", live=True),
    Spec("position_stiffness", 0.0, "stiffness of that repulsive torque [N m/rad]", "nonneg", live=True),
    Spec("velocity_damping", 0.0, "extra joint damping added by the safety filter [N m s/rad]", "nonneg",
         live=True),
    Spec("log_throttle_period", 1.0, "per-message conditions (rejected joint states, references, wrenches, "
         "watchdog) log at most one line per condition per this many seconds, plus the end of a logged "
         "episode; the counts in /diagnostics stay exact; 0: one line per episode", "nonneg", live=True),
    Spec("observer.enabled", False, "run the generalized-momentum observer every control step (external joint "
         "torques, a wrench estimate at observer.frame, a collision flag)"),
    Spec("observer.gain", [50.0], "observer gain K [1/s] (1 or one per joint, > 0): time constant 1/K", "per_joint"),
    Spec("observer.frame", "", "frame of the wrench estimate (about its origin, in its axes); empty: the "
         "Cartesian law's frame, else the last frame of the model"),
    Spec("observer.threshold", [0.0], "collision threshold per joint on |r| [N m] (1 or one per joint); "
         "0: no collision detection", "per_joint", live=True),
    Spec("observer.release", 0.5, "hysteresis: the flag clears when every |r_i| < release * threshold_i; "
         "in (0, 1)", "positive", live=True),
    Spec("observer.on_collision", "none", "reaction on the rising edge of the flag: none, or hold (the law "
         "holds the current position)", "choices", ("none", "hold"), live=True),
    Spec("observer.driver_adds_gravity", "auto", "the torque applied is the command + g(q) (a Franka adds "
         "gravity itself); auto: true when the law's compensate_gravity is false", "choices",
         ("auto", "true", "false")),
    Spec("observer.publish_rate", 100.0, "rate of ~/external_wrench and ~/external_torque [Hz]; 0: every "
         "control step (~/collision is published on every change)", "nonneg", live=True),
    Spec("cartesian_impedance.wrench_source", "sensor", "the wrench the force control closes on: sensor (F/T "
         "on wrench_topic) or observer (the momentum observer's estimate; needs observer.enabled and "
         "observer.frame = the law's frame)", "choices", ("sensor", "observer")),
    # payload identification (control/runs/payload.py): read at each start of a run
    Spec("payload_id.source", "torques", "what the payload is identified from: torques (the joint states' "
         "measured effort when they carry one, else the command sent, + g(q) when the driver adds gravity), "
         "ft (the F/T sensor on wrench_topic; needs sensor_frame) or both", "choices", ("torques", "ft", "both"),
         live=True),
    Spec("payload_id.frame", "", "frame the payload is identified at (com in its axes); empty: sensor_frame "
         "for ft / both, else observer.frame with the observer, else panda_hand_tcp if the model has it, else "
         "the last frame", live=True),
    Spec("payload_id.mode", "static", "static (poses held at rest: mass and com) or excitation (a bounded "
         "multi-sine around the held reference: mass, com and inertia)", "choices", ("static", "excitation"),
         live=True),
    Spec("payload_id.duration", 8.0, "excitation: its duration [s] (with a 1 s fade in and out)", "positive",
         live=True),
    Spec("payload_id.acc_max", 4.0, "excitation: joint acceleration cap [rad/s^2]", "positive", live=True),
    Spec("payload_id.sample_period", 0.01, "excitation: one sample per this [s]", "positive", live=True),
    Spec("payload_id.poses", 8, "number of static poses (an integer >= 3)", "positive", live=True),
    Spec("payload_id.wrist_span", 1.0, "rotation of the last three joints between poses [rad] (clipped into "
         "the limits minus payload_id.margin)", "positive", live=True),
    Spec("payload_id.margin", 0.1, "distance kept from the position limits [rad]", "nonneg", live=True),
    Spec("payload_id.move_time", 1.0, "shortest move between poses [s] (a rest-to-rest quintic, lengthened so "
         "no joint exceeds payload_id.vel_frac of its velocity limit)", "positive", live=True),
    Spec("payload_id.vel_frac", 0.5, "peak joint speed of the moves as a fraction (0, 1] of the velocity "
         "limits", "positive", live=True),
    Spec("payload_id.settle_velocity", 0.002, "a pose counts as at rest while every joint speed is below this "
         "[rad/s]", "positive", live=True),
    Spec("payload_id.settle_time", 0.3, "time at rest per pose [s]; q and the torques are averaged over it",
         "positive", live=True),
    Spec("payload_id.max_hold", 4.0, "a pose not at rest this long after its move [s] aborts the run",
         "positive", live=True),
    Spec("payload_id.attach", False, "attach the estimate to the model when the run succeeds (else "
         "~/attach_payload)", live=True),
    Spec("payload_id.name", "payload", "name of the payload in the model (attach / detach)", live=True),
    # identification of the arm's own dynamics (control/runs/dynamics.py): read at each start of a run
    Spec("dynamics_id.period", 5.0, "period of the Fourier excitation [s]", "positive", live=True),
    Spec("dynamics_id.periods", 2, "periods of it the estimate uses (an integer >= 1); one period of a "
         "second excitation follows for the validation", "positive", live=True),
    Spec("dynamics_id.harmonics", 4, "harmonics per joint (an integer >= 1)", "positive", live=True),
    Spec("dynamics_id.vel_frac", 0.5, "peak joint speed as a fraction (0, 1] of the velocity limits", "positive",
         live=True),
    Spec("dynamics_id.acc_max", 3.0, "joint acceleration cap [rad/s^2]", "positive", live=True),
    Spec("dynamics_id.margin", 0.1, "distance kept from the position limits [rad] (half of it reached aborts)",
         "nonneg", live=True),
    Spec("dynamics_id.inertial", False, "identify all base parameters (inertials too); false: the URDF's "
         "inertials trusted, rotor inertia and friction per joint", live=True),
    Spec("dynamics_id.derivative_cutoff", 50.0, "zero-phase low-pass of q before differentiating [Hz]",
         "positive", live=True),
    Spec("dynamics_id.cutoff", 10.0, "parallel low-pass of the regressor and the torque [Hz]", "positive",
         live=True),
    Spec("dynamics_id.v_min", 0.03, "a joint's rows near its velocity reversals (|v| below this) are left out "
         "[rad/s]", "nonneg", live=True),
    Spec("dynamics_id.fit_band", True, "identify each joint's dry-friction velocity scale vs (fc tanh(v / vs)) "
         "from the same run and write it as friction_velocity_scale; false: the fixed 0.01 rad/s band", live=True),
    Spec("dynamics_id.slow_speed", 0.032, "peak joint speed [rad/s] of the short slow excitation after the "
         "validation that identifies the velocity scales (every joint out and back at 1/16, 1/4 and 1 of it, 2 s "
         "each, 7 s in all; at most slow_speed x 0.64 s from the start; refused over vel_frac x the velocity "
         "limits, over acc_max / pi, or where it would come within margin of a limit); 0: they come from the "
         "fast excitation's rows", "nonneg", live=True),
    Spec("dynamics_id.band_min", 0.002, "the smallest vs written [rad/s]; the run also keeps each joint's vs "
         "above 4 x the noise it measures on the joint velocities (a band narrower than the noise chatters; a "
         "wider one only compensates less)", "positive", live=True),
    Spec("dynamics_id.stiction", 1.0, "friction_stiction written with the result, [0, 1] (0: none)", "nonneg",
         live=True),
    Spec("dynamics_id.scale", 1.0, "friction_scale written with the result (the fraction compensated)",
         "nonneg", live=True),
    Spec("dynamics_id.max_gap", 0.005, "a gap in the recorded states longer than this [s] (states the loop did "
         "not see) is interpolated across and the rows within the filters' reach of it are left out",
         "positive", live=True),
    Spec("dynamics_id.seed", 0, "seed of the excitation's random candidates", "nonneg", live=True),
    Spec("dynamics_id.torque_timing", "instant", "when the measured effort of a joint state acts: instant (measured "
         "at the state's time: a Franka's tau_J) or held_before (the effort held over the period before the state: "
         "a simulator's applied effort, MuJoCo's and this package's sim node); the command sent is always "
         "held over the period after it", "choices", ("instant", "held_before"), live=True),
    Spec("dynamics_id.hold_pairing", "mid", "where a torque held over a period (held_before, or the command "
         "sent) acts: mid (the period's middle: a continuous-time plant, a real arm, an RK4 simulator) or start "
         "(a plant integrated by semi-implicit Euler: MuJoCo's Euler / implicit / implicitfast integrators, "
         "franky-sim, Gazebo's ODE and DART; paired mid there, fv came out 9-27 % high)",
         "choices", ("mid", "start"), live=True),
    Spec("dynamics_id.output", "", "write the result (every law's friction_*, armature) to this parameters "
         "file; empty: not written (the result is still in the status)", live=True),
    Spec("payload_id.max_mass_std", 0.05, "refuse to attach an estimate whose mass std / mass exceeds this",
         "positive", live=True),
    # Cartesian goals for the joint laws (control/ik_reference.py)
    Spec("ik.frame", "", "frame a Cartesian goal (~/target_pose, ~/cartesian_trajectory) of joint_impedance / "
         "computed_torque places, through the inverse kinematics; empty: the model's last frame (the tool tip)",
         live=True),
    Spec("ik.min_singular_value", 0.02, "a goal whose IK solution has the frame Jacobian's smallest singular "
         "value below this is refused (a singular configuration)", "nonneg", live=True),
    # the Cartesian safety envelope (control/stages/envelope.py): every law, live; checked as a whole
    Spec("safety.frames", UNSET_STRING_ARRAY, "frames kept inside the workspace planes / boxes and under the "
         "speed limits (the TCP, the flange, the elbow, ...); not set: no envelope", live=True),
    Spec("safety.frame_radii", UNSET_DOUBLE_ARRAY, "radius [m] of the sphere kept inside around each frame's "
         "origin (1 or one per frame); not set: 0", live=True),
    Spec("safety.planes", UNSET_DOUBLE_ARRAY, "half-spaces the frames stay in, 4 numbers each: nx ny nz d "
         "(base frame; allowed n . p >= d, e.g. [0, 0, 1, 0.02]: 2 cm above a table at z = 0)", live=True),
    Spec("safety.boxes", UNSET_DOUBLE_ARRAY, "boxes the frames stay inside, 6 numbers each: xmin ymin zmin xmax "
         "ymax zmax (base frame)", live=True),
    Spec("safety.margin", 0.05, "distance from a plane where the repulsion starts and the command's push "
         "outward begins to be removed [m]", "nonneg", live=True),
    Spec("safety.stiffness", 1000.0, "stiffness of the repulsion from the margin's edge [N/m]", "nonneg", live=True),
    Spec("safety.damping", 100.0, "damping of the approach inside the margin [N s/m] (leaving is not damped; "
         "ramped in over the first quarter of the margin)",
         "nonneg", live=True),
    Spec("safety.max_linear_speed", 0.0, "translational speed limit of each frame [m/s] (collaborative: "
         "0.25); 0: none", "nonneg", live=True),
    Spec("safety.max_angular_speed", 0.0, "rotational speed limit of each frame [rad/s]; 0: none", "nonneg",
         live=True),
    Spec("safety.speed_damping", 100.0, "damping of the speed above the limit [N s/m]", "nonneg", live=True),
    Spec("safety.time_scaling", True, "a joint law's trajectory whose reference would move a frame faster than "
         "0.9 x its speed limit is slowed down (its clock runs at s < 1, v_d and a_d scaled), not chased",
         live=True),
    Spec("safety.angular_speed_damping", 5.0, "damping of the angular speed above the limit [N m s/rad]",
         "nonneg", live=True),
    Spec("safety.force_frame", "", "frame whose commanded wrench is limited (the command as sent: after the "
         "workspace correction and the rate limit; the force limit wins over the workspace rows); empty: the "
         "model's last frame",
         live=True),
    Spec("safety.max_force", 0.0, "bound on the norm of the force the command exerts at safety.force_frame "
         "(J^+T of the command beyond gravity) [N]; 0: none", "nonneg", live=True),
    Spec("safety.max_force_axis", [0.0, 0.0, 0.0], "bound per base axis on that force [N]; 0: none", "vec3",
         live=True),
    Spec("safety.max_torque", 0.0, "bound on the norm of the moment the command exerts there [N m]; 0: none",
         "nonneg", live=True),
    Spec("safety.stop_time", 0.5, "violations (a frame outside, or above 1.05 x its speed limit) adding up to "
         "this long stop the arm (damping to rest, then a hold; ~/resume leaves it) [s]; the time leaks away at "
         "a quarter of the rate while nothing is violated, so an arm that keeps crossing is stopped too; "
         "0: never", "nonneg",
         live=True),
    Spec("safety.joint_speed_stop", 0.0, "a joint faster than this x its velocity limit (the model's: URDF "
         "<limit velocity>) while the law runs stops the arm, as a Franka's joint-velocity reflex does (1.2: "
         "20 % above the limit): the safe command with joint damping (safety.stop_damping, at most 25 M_ii per "
         "joint: robust to late commands), or the envelope's stop when safety.frames are set; latched: ~/resume "
         "(every joint below 0.02 rad/s) and the law holds the position reached (a trajectory being followed is "
         "abandoned); joints without a velocity limit are not watched; 0: off", "nonneg", live=True),
    Spec("safety.stop_damping", 10.0, "joint damping of the stops (the envelope's, the joint speed stop's) "
         "[N m s/rad], at most 0.5 M_ii / dt per joint (discrete-time stable)", "nonneg", live=True),
    Spec("safety.stop_stiffness", 100.0, "joint stiffness of the hold after the stop [N m/rad], at most "
         "40^2 M_ii per joint (stable)", "nonneg",
         live=True),
    Spec("safety.tank_capacity", 0.0, "energy tank for live stiffness changes of joint_impedance (k_gains) and "
         "cartesian_impedance (task.k_*) [J]: a change is applied as far as the tank pays for the spring energy "
         "it adds, 1/2 e^T dK e, the rest as the law's damping refills it; starts full; 0: off", "nonneg",
         live=True),
]

# loop parameter -> EnvelopeParams field
ENVELOPE_KEYS = {s.name: s.name[len("safety."):] for s in LOOP_PARAMS
                 if s.name.startswith("safety.") and s.name not in ("safety.tank_capacity", "safety.time_scaling",
                                                                 "safety.joint_speed_stop")}
ENVELOPE_KEYS["safety.frame_radii"] = "radii"

# loop parameter -> SafetyParams field
SAFETY_KEYS = {"effort_limits": "effort_limits", "effort_scale": "effort_scale", "torque_rate_limit": "rate_limit",
               "ramp_time": "ramp_time", "position_margin": "position_margin",
               "position_stiffness": "position_stiffness", "velocity_damping": "velocity_damping"}

# law parameter keys: kind ('per_joint' nonneg vector, 'per_joint_any', 'vec6' nonneg, 'bool',
# 'double' nonneg, 'string', 'bool6') and description.  Defaults come from the law classes.
LAW_KEYS = {
    "compensate_gravity": ("bool", "add g(q) (false when the robot driver compensates gravity)"),
    "friction_compensation": ("bool", "add the friction model below"),
    "friction_viscous": ("per_joint", "viscous friction [N m s/rad]"),
    "friction_coulomb": ("per_joint", "Coulomb friction [N m]"),
    "friction_smoothing": ("positive", "tanh smoothing velocity of the Coulomb term [rad/s] where "
                                       "friction_velocity_scale is 0 (files written before it was identified)"),
    "friction_velocity_scale": ("per_joint", "identified velocity scale vs of the Coulomb term fc tanh(v / vs) "
                                             "[rad/s] per joint; 0: friction_smoothing"),
    "friction_band_margin": ("positive", "the compensation's tanh band is this (>= 1) times the model's: at most "
                                         "the identified friction at every speed, 1 / margin of it near rest"),
    "friction_stiction": ("double", "at rest, this fraction [0, 1] of friction_coulomb along the law's own pull "
                                    "(its torque without gravity) where the law moved the arm last (the pull "
                                    "along the arm's last motion), fading as the joint slides and as its pull "
                                    "exceeds its friction: the breakaway a velocity-sign model does not give "
                                    "(0: off)"),
    "friction_stiction_sensed": ("double", "the same fraction [0, 1] where a sensor measures the environment's "
                                           "torque (cartesian_impedance with an F/T sensor; every law with "
                                           "effort_link_side): along the law's pull plus J^T of the measured "
                                           "wrench or the joint torques measured, zero where they balance (0: the "
                                           "measurement is not used for it; friction_stiction applies)"),
    "friction_stiction_torque": ("positive", "the law's pull [N m] at which friction_stiction reaches 76 % (tanh)"),
    "friction_offset": ("per_joint_any", "constant torque offset [N m] (any sign)"),
    "friction_scale": ("double", "fraction [0, 1] of the friction model compensated"),
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
    "nullspace_damping_ratio": ("double", "damping ratio of the posture task when nullspace_damping is not set"),
    "q_nullspace": ("per_joint_any", "posture [rad]; not set: the configuration at activation / hold"),
    "damped_pinv_lambda": ("double", "damping of the pseudo-inverse"),
    "force_axes": ("bool6", "task axes [x y z rx ry rz] under force control instead of stiffness"),
    "force_kp": ("vec6", "force-control proportional gain per task axis"),
    "force_ki": ("vec6", "force-control integral gain per task axis"),
    "force_integral_limit": ("double", "bound on the force integral term [N | N m]"),
    "max_pos_error": ("double", "clip the position error [m]; 0: no clipping"),
    "max_rot_error": ("double", "clip the rotation error angle [rad]; 0: no clipping"),
    "velocity_product_compensation": ("bool", "add C(q, qd) qd - J^T Lambda Jdot qd (exact task error dynamics "
                                              "on a moving reference)"),
    "reference_extrapolation": ("double", "first-order hold of a streamed pose along its twist for at most this "
                                          "[s], then held at rest; 0: zero-order hold"),
    "estimate_target_velocity": ("bool", "a pose-only stream gets its twist from consecutive poses"),
    "target_jump_pos": ("double", "a streamed pose farther than this [m] is approached within the approach "
                                  "bounds, not stepped to; 0: off"),
    "target_jump_rot": ("double", "the same for the rotation [rad]; 0: off"),
    "approach_linear_velocity": ("positive", "approach bound (trajectory start, target jumps) [m/s]"),
    "approach_angular_velocity": ("positive", "approach bound [rad/s]"),
    "approach_linear_acceleration": ("positive", "approach bound [m/s^2]"),
    "approach_angular_acceleration": ("positive", "approach bound [rad/s^2]"),
}
for _a in ("x", "y", "z"):
    LAW_KEYS[f"task.k_pos_{_a}"] = ("double", f"translational stiffness along {_a} [N/m]")
    LAW_KEYS[f"task.k_rot_{_a}"] = ("double", f"rotational stiffness about {_a} [N m/rad]")
    LAW_KEYS[f"task.d_pos_{_a}"] = ("double_opt", f"translational damping along {_a} [N s/m]; not set: critical")
    LAW_KEYS[f"task.d_rot_{_a}"] = ("double_opt", f"rotational damping about {_a} [N m s/rad]; not set: critical")

SIX_KEYS = ("force_kp", "force_ki")        # 1 or 6 values (task axes), never reordered


def law_param_specs():
    """`<law>.<key>` parameters for every law, typed from LAW_KEYS, defaults from the law classes."""
    from . import LAW_CLASSES
    from .laws.base import COMMON_DEFAULTS
    specs = []
    for law in LAWS:
        defaults = dict(COMMON_DEFAULTS)
        defaults.update(LAW_CLASSES[law].DEFAULTS)
        for key, dflt in defaults.items():
            kind, desc = LAW_KEYS.get(key, (None, key))
            if kind is None:                               # a key the table does not know: infer
                kind = ("bool" if isinstance(dflt, bool) else "double" if isinstance(dflt, (int, float))
                        else "string" if isinstance(dflt, str) else "per_joint_any")
            if kind == "bool":
                default, check = bool(dflt), None
            elif kind in ("double", "positive"):
                default, check = float(dflt), ("positive" if kind == "positive" else "nonneg")
            elif kind == "double_opt":
                default, check = (UNSET_DOUBLE if dflt is None else float(dflt)), "nonneg"
            elif kind == "string":
                default, check = ("" if dflt is None else str(dflt)), None
            elif kind == "bool6":
                default, check = [bool(x) for x in dflt], None
            else:                                          # per_joint, per_joint_any, vec6
                default = UNSET_DOUBLE_ARRAY if dflt is None else (
                    [float(dflt)] if np.isscalar(dflt) else [float(x) for x in dflt])
                check = "per_joint" if kind == "vec6" else kind   # vec6: 1 or 6 values >= 0
            if kind == "vec6":
                desc += " (1 or 6 values)"
            specs.append(Spec(f"{law}.{key}", default, desc, check, live=(key != "frame"), law_key=key))
    return specs


def loop_param_specs():
    return LOOP_PARAMS + law_param_specs()


def check_value(spec, value, n_joints=None):
    """Validate one parameter value against its spec; returns an error string or None."""
    name, rule = spec.name, spec.check
    if value is None:
        return None
    if rule == "choices":
        return None if value in spec.choices else f"{name}: {value!r} is not one of {list(spec.choices)}"
    if rule in ("nonneg", "positive", "finite"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{name}: expected a number, got {value!r}"
        if not math.isfinite(value):
            return f"{name}: {value} is not finite"
        if rule == "nonneg" and value < 0:
            return f"{name}: {value} must be >= 0"
        if rule == "positive" and value <= 0:
            return f"{name}: {value} must be > 0"
        return None
    if rule in ("per_joint", "per_joint_any", "vec3", "vec2_nonneg"):
        try:
            if isinstance(value, (str, bytes)) or any(isinstance(x, (bool, str, bytes)) for x in value):
                raise TypeError
            a = np.asarray(list(value), dtype=float)
            if a.ndim != 1:
                raise TypeError
        except (TypeError, ValueError):
            return f"{name}: expected a list of numbers, got {value!r}"
        if rule == "vec3" and a.size != 3:
            return f"{name}: expected 3 values, got {a.size}"
        if rule == "vec2_nonneg" and a.size != 2:
            return f"{name}: expected 2 values, got {a.size}"
        if rule.startswith("per_joint"):
            ok = (1,) if n_joints is None else (1, n_joints)
            if a.size not in ok and n_joints is not None:
                return f"{name}: expected 1 or {n_joints} values (one per joint), got {a.size}"
            if a.size == 0:
                return f"{name}: expected at least 1 value"
        if not np.all(np.isfinite(a)):
            return f"{name}: values must be finite, got {a.tolist()}"
        if rule in ("per_joint", "vec2_nonneg") and np.any(a < 0):
            i = int(np.flatnonzero(a < 0)[0])
            return f"{name}: element {i} is {a[i]}, must be >= 0"
        return None
    return None
