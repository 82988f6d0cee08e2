"""MuJoCo plants with dry friction, the control loop driving them each millisecond, and the push
experiment of issue 43 (test_friction.py, bench/friction_push.py).  No ROS.

The plant: the Panda URDF in MuJoCo (implicitfast, as franky-sim), per-joint rotor inertia, viscous
damping and dry friction (MuJoCo's friction loss) the rig sets, and the friction loss's softness
(`solref` of its constraint): MuJoCo's default (0.02 s) makes the dry friction a ramp min(fc, b v)
whose slope b scales with the joint's inertia (at the light wrist it reaches fc only near 0.05-0.1
rad/s), 0.002 s (the smallest at a 1 ms step) ten times steeper.  `adds_gravity`: the plant adds g(q)
at the state each command is applied at (a Franka's driver), so the loop sends commands without it.
"""
import copy
import math

import mujoco
import numpy as np

from robot_dynamics.control import ControlLoop
from robot_dynamics.dynamics import Model
from robot_dynamics.sim.mujoco_sim import MujocoSim

DT = 0.001
Q_HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
FLANGE = "panda_link8"
PLANT = {"armature": np.array([0.2, 0.2, 0.1, 0.1, 0.02, 0.01, 0.005]),
         "damping": np.array([0.3, 0.3, 0.2, 0.2, 0.1, 0.1, 0.05]),
         "friction": np.array([0.8, 0.8, 0.6, 0.6, 0.4, 0.3, 0.3])}
FRANKA = {"armature": np.array([0.195, 0.195, 0.195, 0.195, 0.074, 0.074, 0.074]),      # franky-sim's
          "damping": np.full(7, 0.21),                                                   # assets/fr3.xml
          "friction": np.array([1.137, 1.137, 1.137, 1.137, 0.763, 0.44, 0.248])}
Q_FRANKY = np.array([0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785])       # franky-sim's start pose
# plants nobody chose (bench/friction_push.py --random, test_friction_sweep.py): per joint uniform within
# these, times the per-joint scale (the wrist's lighter)
RANGES = {"armature": ((0.05, 0.4), [1, 1, 1, 1, 0.4, 0.3, 0.2]),      # kg m^2
          "damping": ((0.05, 0.5), [1] * 7),                          # N m s/rad
          "friction": ((0.2, 1.5), [1, 1, 1, 1, 0.7, 0.6, 0.5])}      # N m, dry
SOFT, SHARP = 0.02, 0.002          # friction loss solref time constant [s]
K_PUSH = 450.0                     # N/m along x, the Cartesian stiffness


def random_plant(seed):
    """A plant nobody chose: per joint rotor inertia, damping and dry friction drawn uniformly within RANGES
    (seeded)."""
    rng = np.random.default_rng(seed)
    return {key: rng.uniform(lo, hi, 7) * np.array(scale) for key, ((lo, hi), scale) in RANGES.items()}


class Plant:
    """MujocoSim plus the driver: step(command) applies command (+ g(q) at the present state)."""

    def __init__(self, model, solref=SOFT, adds_gravity=False, plant=None, q0=Q_HOME, frame=FLANGE):
        self.plant, self.frame = dict(PLANT if plant is None else plant), frame
        self.sim = MujocoSim(model, limits=False, integrator="implicitfast", **self.plant)
        self.sim.m.dof_solref[:] = [solref, 1.0]
        self.sim.reset(q0)
        self.model, self.adds_gravity = model, adds_gravity
        from robot_dynamics.dynamics import make_backend
        self.dyn = make_backend(model, "pinocchio")
        self.sim.d.ctrl[self.sim._act] = self.dyn.gravity(q0)      # held before the loop's first command
        mujoco.mj_forward(self.sim.m, self.sim.d)                 # (what link_torque reads before a step)

    def step(self, tau):
        if self.adds_gravity:
            tau = tau + self.dyn.gravity(self.sim.q)
        self.sim.step(tau)

    def sensed_wrench(self):
        """What an ideal F/T sensor at the pushed frame (the flange) reads: the wrench the rig applies
        there (the push), in the frame's axes."""
        w = self.sim._wrench.get(self.frame, (None, np.zeros(6)))[1]
        R = self.sim.frame_pose(self.frame)[0]
        return np.concatenate([R.T @ w[:3], R.T @ w[3:]])

    def link_torque(self):
        """What link-side joint torque sensors (after the gear: a Franka's tau_J) read at the present state:
        the torque the drive passes on to the link, the motor's less the gear's friction and damping and the
        rotor's inertial torque, from MuJoCo's own forces (qfrc_actuator + qfrc_passive + qfrc_constraint
        - armature qacc: the rig has no joint limits and its arm touches nothing, so that its constraint
        forces are the friction loss's)."""
        m, d, i = self.sim.m, self.sim.d, self.sim._dadr
        return (d.qfrc_actuator + d.qfrc_passive + d.qfrc_constraint - m.dof_armature * d.qacc)[i]


class SensorNoise:
    """A sensor's noise each ms: Gaussian, per axis sigma_force [N] and sigma_moment [N m]; with
    `on_board_hz` the sensor low-passes it itself (first order, y += (1 - b)(x - y), b = exp(-2 pi f
    DT): consecutive samples correlated), its white input scaled by sqrt((1 + b) / (1 - b)) so that
    the reading's spread is still the sigmas."""

    def __init__(self, rng, sf, sm, on_board_hz=None):
        self.rng, self.sd = rng, np.array([sf] * 3 + [sm] * 3)
        self.b = 0.0 if not on_board_hz else math.exp(-2.0 * math.pi * on_board_hz * DT)
        self.sd *= math.sqrt((1.0 + self.b) / (1.0 - self.b))
        self.y = np.zeros(6)
        if self.b:                              # from its stationary spread
            self.y = self.rng.normal(0.0, 1.0, 6) * self.sd * math.sqrt((1.0 - self.b) / (1.0 + self.b))

    def __call__(self):
        self.y += (1.0 - self.b) * (self.rng.normal(0.0, 1.0, 6) * self.sd - self.y)
        return self.y


def drive(loop, plant, t0, seconds, until=None, record=None, sensor=False, noise=None, v_noise=None, link=None):
    """The loop drives the plant for `seconds`: each ms the state (sensor: and the flange's F/T
    reading; noise: (rng, sigma_force [N], sigma_moment [N m]) white noise added to it, or a
    SensorNoise; v_noise: (rng, sigma [rad/s]) white noise on the joint velocities the loop gets; link:
    (rng, sigma [N m][, offset [N m] per joint]) the state's effort is the link-side joint torque with that
    white noise and offset), a step, the command held one ms."""
    sim = plant.sim
    k0 = int(round(t0 / DT))
    for k in range(k0, k0 + int(round(seconds / DT))):
        now = k * DT
        if sensor:
            w = plant.sensed_wrench()
            if callable(noise):
                w = w + noise()
            elif noise is not None:
                rng, sf, sm = noise
                w = w + np.concatenate([rng.normal(0.0, sf, 3), rng.normal(0.0, sm, 3)])
            loop.estimation.set_wrench(w, plant.frame, now)
        v = sim.v if v_noise is None else sim.v + v_noise[0].normal(0.0, v_noise[1], len(sim.v))
        effort = None
        if link is not None:
            effort = plant.link_torque() + link[0].normal(0.0, link[1], len(sim.v))
            if len(link) > 2:
                effort += link[2]
        loop.update_state(sim.q, v, now, effort=effort)
        tau, _ = loop.step(now)
        plant.step(tau)
        if record is not None:
            record(now, sim)
        if until is not None and until():
            return (k + 1) * DT
    return (k0 + int(round(seconds / DT))) * DT


def measured_friction(model, joint, speeds, solref=SOFT, plant=None, q0=Q_HOME, seconds=1.5):
    """The plant's dry + viscous friction at steady joint speeds, measured directly (the oracle): the
    joint driven at each speed by a stiff velocity servo on top of its bias torque (the others held
    by a PD), the friction read from MuJoCo's constraint and passive forces after `seconds`.
    Returns (speed reached, friction torque) per requested speed."""
    import mujoco
    p = Plant(model, solref=solref, plant=plant, q0=q0)
    sim = p.sim
    out = []
    for vt in speeds:
        sim.reset(q0)
        for _ in range(int(seconds / DT)):
            q, v = sim.q, sim.v
            tau = sim.d.qfrc_bias[sim._dadr].copy() + 500.0 * (q0 - q) - 20.0 * v
            mjj = p.dyn.mass_matrix(q)[joint, joint] + p.plant["armature"][joint]   # the joint's inertia
            tau[joint] = sim.d.qfrc_bias[sim._dadr][joint] + 0.2 * mjj / DT * (vt - v[joint])
            sim.step(tau)
        mujoco.mj_forward(sim.m, sim.d)
        f = -(sim.d.qfrc_constraint + sim.d.qfrc_passive)[sim._dadr][joint]
        out.append((sim.v[joint], f))
    return np.array(out)


def cartesian_loop(model, friction=None, compensate_gravity=True, k=K_PUSH, k_rot=50.0, loop_over=None,
                   frame=FLANGE):
    """Cartesian impedance at the flange, k along x (and y, z), the rotation held stiffly; `friction`:
    the law parameters of the compensation (without the law prefix) or None (none); loop_over: loop
    parameters over these (e.g. torque_rate_limit; armature: the loop sets it on its model, here a copy
    of `model`, so that it stays the caller's)."""
    if loop_over and loop_over.get("armature") is not None:
        model = copy.deepcopy(model)
    law = {"frame": frame, "task.damping_ratio": 1.0, "nullspace_stiffness": [10.0],
           "compensate_gravity": compensate_gravity, **(friction or {})}
    for a in "xyz":
        law[f"task.k_pos_{a}"] = k
        law[f"task.k_rot_{a}"] = k_rot
    loop = ControlLoop.from_params(model, {"controller": "cartesian_impedance", "watchdog_timeout": 0.05,
                                           "torque_rate_limit": 1e5, "ramp_time": 0.0,
                                           **{f"cartesian_impedance.{key}": v for key, v in law.items()},
                                           **(loop_over or {})})
    return loop


def push(model, friction=None, solref=SOFT, force=5.0, hold=4.0, back=2.0, settle=1.0, window=0.5, plant=None,
         k=K_PUSH, k_rot=50.0, q0=Q_HOME, sensor=False, noise=None, loop_over=None, adds_gravity=False, rest=0.0,
         frame=FLANGE, trace=(), link=None):
    """The issue's experiment: the law holds the flange, it is pushed along x with `force` then 2
    `force`, each held `hold` s, then released (sensor: the loop reads the push from an ideal F/T
    sensor at the flange).  Returns the stiffness from the first push (F / dx),
    from the F -> 2F slope, the distance from the start `back` s after the release [m], and the largest
    joint speed over the last `window` s of each hold and of the release period (creep: the soft
    friction's slow settling has decayed below 1e-3 rad/s by then; a limit cycle has not), and the
    arm's largest kinetic energy after the release [J] (MuJoCo's M, the rotor inertia in it, every
    10 ms).  noise, loop_over: drive's and cartesian_loop's; adds_gravity: the plant adds g(q) (a
    Franka's driver) and the law leaves it out, so that a torque-rate limit does not let the arm sag at
    activation; rest > 0: the release's creep is taken over the last `window` s of `rest` more s after
    `back` (an arm still going back at `back` is not creeping; "moving_at_back": the largest joint speed
    over the last `window` s of `back`, the creep's window without `rest`); frame: the pushed and controlled frame
    (the Panda's flange; fr3_model()'s TCP); trace: times [s] after the release (within `back`) at
    which the frame's distance from the start is also returned, as "trace" [m]; link: (rng, sigma [N m])
    the loop reads link-side joint torque sensors with that noise (effort_link_side)."""
    plant = Plant(model, solref=solref, plant=plant, q0=q0, adds_gravity=adds_gravity, frame=frame)
    sim = plant.sim
    if link is not None:
        loop_over = {**(loop_over or {}), "effort_link_side": True}
    loop = cartesian_loop(model, friction, compensate_gravity=not adds_gravity, k=k, k_rot=k_rot,
                          loop_over=loop_over, frame=frame)
    loop.activate(0.0)
    t = drive(loop, plant, 0.0, settle, sensor=sensor, noise=noise, link=link)
    ke = [0.0]

    def energy(now, s):
        if int(round(now / DT)) % 10 == 0:
            ke.append(0.5 * float(s.v @ s.mass_matrix(s.q) @ s.v))
    x0 = sim.frame_pose(frame)[1].copy()
    marks = {int(round(tm / DT)) for tm in trace}
    traced = []
    dx, creep = [], []

    def recorder(speeds, t_end, released, k_release=None):
        def record(now, s):
            if now >= t_end - window:
                speeds.append(np.abs(s.v))
            if released:
                energy(now, s)
            # the state after the step that started at `now` is (k + 1) DT from the release's start
            if k_release is not None and int(round(now / DT)) + 1 - k_release in marks:
                traced.append(float(np.linalg.norm(s.frame_pose(frame)[1] - x0)))
        return record

    for f in (force, 2 * force, 0.0):
        if f:
            sim.apply_wrench(frame, np.array([f, 0, 0, 0, 0, 0]))
        else:
            sim.clear_wrench()
        span = hold if f else back
        speeds = []
        t = drive(loop, plant, t, span, sensor=sensor, noise=noise, link=link,
                  record=recorder(speeds, t + span, not f, None if f else int(round(t / DT))))
        dx.append(sim.frame_pose(frame)[1] - x0)
        if not f and rest > 0.0:
            moving = float(np.max(speeds))
            speeds = []
            t = drive(loop, plant, t, rest, sensor=sensor, noise=noise, link=link,
                      record=recorder(speeds, t + rest, True))
        creep.append(float(np.max(speeds)))
    return {"k_single": force / dx[0][0], "k_slope": force / (dx[1][0] - dx[0][0]),
            "back": float(np.linalg.norm(dx[2])), "creep": max(creep), "creep_each": creep,
            "moving_at_back": moving if rest > 0.0 else creep[-1],
            "pushed": float(np.linalg.norm(dx[1])), "ke_release": max(ke), "trace": traced}


def identify(model, solref=SOFT, adds_gravity=False, params=None, plant=None, v_noise=None):
    """The identification the loop runs (control/runs/dynamics.py) from the commands it sends, on the
    plant (hold_pairing start: implicitfast), joint impedance driving the excitation (v_noise: drive's).
    Returns the finished run (run.ok, run.estimate, run.params: what the parameters file gets,
    run.bands)."""
    p = Plant(model, solref=solref, adds_gravity=adds_gravity, plant=plant)
    loop = ControlLoop.from_params(model, {"controller": "joint_impedance", "watchdog_timeout": 0.05,
                                           "torque_rate_limit": 1e5, "dynamics_id.acc_max": 6.0,
                                           "dynamics_id.hold_pairing": "start",
                                           "joint_impedance.compensate_gravity": not adds_gravity,
                                           **(params or {})})
    loop.activate(0.0)
    t = drive(loop, p, 0.0, 1.0, v_noise=v_noise)
    ok, msg = loop.runs.start_dynamics_id(t)
    assert ok, msg
    run = loop.runs.dynamics
    t = drive(loop, p, t, 60.0, until=lambda: run.phase == "solving" or run.done, v_noise=v_noise)
    while not run.done:
        t = drive(loop, p, t, 0.05, v_noise=v_noise)
    return run


def fr3_model():
    """The model the Franka bridge builds for franky-sim's arm (its FR3 URDF, the end effector and TCP
    franky-sim reports: 0.73 kg, F_T_EE 0.1034 m along z turned -45 deg), and the TCP frame's name."""
    from franky_sim.urdf import FR3_URDF

    from robot_dynamics.hardware.franka import prepare_urdf
    tcp = np.eye(4)
    c, s = np.cos(-np.pi / 4), np.sin(-np.pi / 4)
    tcp[:2, :2] = [[c, -s], [s, c]]
    tcp[2, 3] = 0.1034
    ee = (0.73, np.array([-0.01, 0.0, 0.03]), np.diag([0.001, 0.0025, 0.0017]))
    urdf, _ = prepare_urdf(FR3_URDF, [f"fr3_joint{i}" for i in range(1, 8)], ee=ee, tcp=tcp, prefix="fr3_")
    return Model.from_urdf_string(urdf), "fr3_tcp"


def file_loop(params):
    """The loop parameter of an identification's parameters (the file as written) beside the laws'
    friction: the rotor inertia (`armature`), which the law's mass matrix and damping design take."""
    return {"armature": list(params["armature"])}


def law_friction(params, law="cartesian_impedance"):
    """The friction keys of `law` in an identification's parameters (the file as written), unprefixed."""
    pre = f"{law}."
    return {k[len(pre):]: v for k, v in params.items() if k.startswith(pre + "friction_")}
