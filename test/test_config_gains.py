"""The gains shipped in config/<robot>_<controller>.yaml are stable in simulation: each law, built
from its YAML exactly as the controller node groups the parameters (`<law>.<key>`), closes the loop
around the MuJoCo simulator of that robot with a realistic loop (control at CONTROL_RATE with a
DELAY_STEPS transport delay, zero-order hold) and must settle on a step in the reference.
No ROS: the laws and the simulator only."""
from pathlib import Path

import numpy as np
import pytest
import yaml

from robot_dynamics.control.laws.base import flatten_params
from robot_dynamics.control import CartesianReference, JointReference, State, make_law
from robot_dynamics.description import CONTROLLERS, LAUNCH_ROBOTS
from robot_dynamics.dynamics import Model, PinocchioBackend
from robot_dynamics.sim import MujocoSim

CONFIG = Path(__file__).resolve().parents[1] / "config"
DT = 0.001
CONTROL_EVERY = 4            # control step every 4 ms (250 Hz: what the Python DDS loop reaches on a loaded 2-core machine)
DELAY_STEPS = 4              # the command acts on a state 4 ms old
T_END = 3.0                  # s
JOINT_STEP = 0.1             # rad, reference step on every joint (joint laws)
CART_STEP = np.array([0.03, -0.03, 0.03])   # m, reference step of the controlled frame (Cartesian)
TOL_JOINT = {"computed_torque": 2e-3, "joint_impedance": 2e-2}   # rad, final |q_d - q|
TOL_CART = 5e-3              # m, final position error
TOL_V = 0.02                 # rad/s, largest |v| over the last 0.5 s (settled, no oscillation)
HOLD_TOL = 1e-6              # rad, gravity compensation from rest at q0 stays at q0
# every config must settle at CONTROL_EVERY / DELAY_STEPS (no per-config faster loop: the sim route
# runs all of them at the same rate); the Kinova Cartesian gains (light wrist, the most rate-sensitive)
# are also checked at the sim's own 1 kHz / 1 ms
EXTRA_LOOPS = {("kinova", "cartesian_impedance"): [(1, 1)]}


def load_params(path):
    with open(path) as f:
        return flatten_params(yaml.safe_load(f)["/**"]["ros__parameters"])


def law_params(flat, law):
    """`<law>.<key>` -> key, a one-element list meaning "all joints" (as the controller node does;
    the configs list per-joint values in model order, which is also their `joints` order)."""
    pre = law + "."
    out = {}
    for k, v in flat.items():
        if k.startswith(pre):
            out[k[len(pre):]] = float(v[0]) if isinstance(v, list) and len(v) == 1 else v
    return out


CASES = [(robot, law, loop) for robot in sorted(LAUNCH_ROBOTS) for law in CONTROLLERS
         for loop in [(CONTROL_EVERY, DELAY_STEPS)] + EXTRA_LOOPS.get((robot, law), [])]


@pytest.mark.parametrize("robot, law, loop", CASES)
def test_config_gains_settle_in_simulation(robot, law, loop):
    flat = load_params(CONFIG / f"{robot}_{law}.yaml")
    sim_cfg = load_params(CONFIG / f"sim_{robot}.yaml")
    model = Model.from_robot(flat["robot"])
    assert flat["joints"] == model.joint_names == sim_cfg["joints"]
    dyn = PinocchioBackend(model)
    lp = law_params(flat, law)
    ctl = make_law(law, model, dyn, lp)
    sim = MujocoSim(model, dt=DT)
    q0 = np.array(sim_cfg["initial_positions"])
    sim.reset(q0)
    ctl.reset(State(q0.copy(), np.zeros(model.nv), 0.0))
    if law in ("computed_torque", "joint_impedance"):
        qd = np.clip(q0 + JOINT_STEP, model.lower_limits + 0.05, model.upper_limits - 0.05)
        ctl.set_reference(JointReference(qd))
    elif law == "cartesian_impedance":
        R, p = sim.frame_pose(lp["frame"])
        pd = p + CART_STEP
        ctl.set_reference(CartesianReference(R, pd))
    every, delay = loop
    history = [(q0.copy(), np.zeros(model.nv))] * (delay + 1)
    tau = np.zeros(model.nv)
    vmax_end = 0.0
    n = int(T_END / DT)
    for k in range(n):
        if k % every == 0:
            qm, vm = history[-1 - delay]
            tau = np.clip(ctl.compute(State(qm.copy(), vm.copy(), k * DT)),
                          -model.effort_limits, model.effort_limits)
        sim.step(tau)
        history.append((sim.q, sim.v))
        history.pop(0)
        assert np.all(np.isfinite(sim.q)), f"{robot} {law}: diverged at t={k * DT:.3f}"
        if k * DT > T_END - 0.5:
            vmax_end = max(vmax_end, float(np.max(np.abs(sim.v))))
    q = sim.q
    if law == "gravity_compensation":
        assert np.max(np.abs(q - q0)) < HOLD_TOL
        return
    assert vmax_end < TOL_V, f"{robot} {law}: still moving at {vmax_end:.3f} rad/s"
    if law == "cartesian_impedance":
        _, p = sim.frame_pose(lp["frame"])
        assert np.linalg.norm(p - pd) < TOL_CART, (p, pd)
    else:
        assert np.max(np.abs(q - qd)) < TOL_JOINT[law], (q - qd)
