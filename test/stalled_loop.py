"""A control loop on a starved host, ROS-free (the harness of test_hold_bound.py and bench/hold_bound.py).

The shipped config's ControlLoop (config/<robot>_<law>.yaml, the parameters grouped as the node groups
them) closes the loop around the MuJoCo sim of its robot (config/sim_<robot>.yaml: its start pose): the
plant steps at 1 kHz and holds the last command between commands (a driver's, or the sim node's, zero-order
hold); the loop sees each state DELAY_MS late.  For the first SETTLE seconds the loop steps every
millisecond with the arm on its brakes at the start pose (activation and its ramp, as the sim node holds the
arm until a live controller's command has settled); then the brakes open, and from then on, after each step, with probability
`p_stall`, the loop stalls for 1 + Exp(mean_ms) ms (rounded down): no state taken, no command sent, the plant
keeps the last one; as the brakes open the arm gets a tap (KICK): what a CPU hog beside the controller node did to it (issue 42's sweep: 761 of 1900
states answered in 1.9 s, a 0.147 s watchdog trip).  The loop runs on the plant's clock (now = t = plant
time), its watchdog and its start ramps as configured.

The joint speed stop is off here (`safety.joint_speed_stop` 0): the plant's own speed is the oracle, and a
stop would only hide whether the loop itself is stable (over DDS it engaged at 1-5x the limits, late).

    r = run("ur5e", "joint_impedance", seed=0, p_stall=0.2, mean_ms=40.0)
    r["speed"]        # the largest |v_j| / velocity limit_j the plant reached after SETTLE (the URDF's limits)
    r["joint"], r["capped"], r["trips"], r["answered"]   # which joint; steps the hold bound slowed; watchdog
                                                         # trips; the fraction of the plant's states stepped on
"""
from pathlib import Path

import numpy as np
import yaml

from robot_dynamics.control import CartesianReference, ControlLoop, JointReference
from robot_dynamics.control.laws.base import flatten_params
from robot_dynamics.dynamics import Model
from robot_dynamics.sim import MujocoSim

CONFIG = Path(__file__).resolve().parents[1] / "config"
DT = 0.001              # s: the plant's step
DELAY_MS = 2            # the loop sees each state this late
SETTLE = 1.5            # s: no stalls before this (activation and its 0.5 s ramp done, the arm held)
JOINT_STEP = 0.1        # rad: the joint laws' target, every joint (within the limits less 0.05 rad)
CART_STEP = np.array([0.03, -0.03, 0.03])   # m: the Cartesian law's target, from the start position
KICK = 0.05             # the tap as the brakes open: each joint's speed set to this x its velocity limit ...
KICK_SIGNS = np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0])   # ... with these signs (a perfect hold of an
                        # exact equilibrium shows no instability: something must disturb it)


def shipped(name):
    with open(CONFIG / f"{name}.yaml") as f:
        return flatten_params(yaml.safe_load(f)["/**"]["ros__parameters"])


def run(robot, law, seed=0, p_stall=0.2, mean_ms=40.0, hold_bound=True, target=False, duration=8.0,
        overrides=None, kick=KICK, damped_ramp=True):
    """See the module docstring.  target: at SETTLE a step target is set (JOINT_STEP / CART_STEP);
    hold_bound False: the loop's hold bound off (its HOLD_FREE raised past any hold); damped_ramp False:
    the ramp after a trip from the torque last sent (both False: the loop before the hold bound)."""
    p = shipped(f"{robot}_{law}")
    start = np.array(shipped(f"sim_{robot}")["initial_positions"], dtype=float)
    p["safety.joint_speed_stop"] = 0.0
    p.update(overrides or {})
    model = Model.from_robot(p["robot"])
    assert list(p["joints"]) == list(model.joint_names)       # the configs list joints in model order
    loop = ControlLoop.from_params(model, p, log=lambda level, text: None)
    if not hold_bound:
        loop.HOLD_FREE = float("inf")
    if not damped_ramp:                   # the old loop: the ramp after a trip from the torque last sent
        loop.damped_ramp = lambda: None
    sim = MujocoSim(model, dt=DT)
    sim.reset(start)
    n = model.nv
    seen = [(start.copy(), np.zeros(n))] * (DELAY_MS + 1)
    rng = np.random.default_rng(seed)
    vlim = np.asarray(model.velocity_limits, dtype=float)
    loop.update_state(start, np.zeros(n), 0.0)
    loop.activate(0.0)
    tau = np.zeros(n)
    speed = np.zeros(n)
    nxt, steps, settle = 0, 0, int(round(SETTLE / DT))
    for k in range(int(round(duration / DT))):
        t = k * DT
        if k == settle and target:
            if law == "cartesian_impedance":
                R, pos = sim.frame_pose(p["cartesian_impedance.frame"])
                ok, why = loop.set_reference(CartesianReference(R, pos + CART_STEP))
            else:
                qd = np.clip(start + JOINT_STEP, model.lower_limits + 0.05, model.upper_limits - 0.05)
                ok, why = loop.set_reference(JointReference(qd))
            assert ok, why
        if k >= nxt:
            q, v = seen[0]
            loop.update_state(q, v, t)
            out, _ = loop.step(t, t)
            tau = out.copy()
            loop.sent(t, t)
            steps += k >= settle
            stall = k >= settle and rng.random() < p_stall
            nxt = k + (1 + int(rng.exponential(mean_ms)) if stall else 1)
        sim.step(tau)
        if k < settle:
            sim.reset(start)          # the brakes (the sim node's, until a live command has settled)
        elif k == settle and kick:
            sim.reset(sim.q, kick * vlim * KICK_SIGNS[:n])  # a tap on the arm as the brakes open
        seen.append((sim.q, sim.v))
        seen.pop(0)
        if k >= settle:
            np.maximum(speed, np.abs(sim.v) / vlim, out=speed)
    after = int(round(duration / DT)) - settle
    return {"speed": float(speed.max()), "joint": model.joint_names[int(np.argmax(speed))],
            "capped": int(loop.counts.get("hold_capped_steps", 0)),
            "trips": int(loop.counts.get("watchdog_trips", 0)), "answered": steps / after,
            "hold_longest": loop.hold_longest}
