#!/usr/bin/env python3
"""Joint set-point steps on the shipped configs (issue 41): the package's ControlLoop, built from
config/<robot>_<law>.yaml exactly as shipped, steps a MuJoCo plant (RK4, the URDF's limits and effort
limits) on one 1 ms clock from the sim config's start pose; a JointReference on joint J of `step` rad
(what `~/target_joint_state` hands the loop) after 0.5 s of holding.  Printed per case: the peak joint
speed as a fraction of that joint's URDF velocity limit (the worst joint), the peak |tau rate| sent
[N m/s], the largest distance of any joint past its position limit [rad], the final error of the
stepped joint [rad], the speed at the end, and whether the arm is at rest.  Nothing is asserted.

    .venv/bin/python bench/setpoint_steps.py [--robots panda,ur5e] [--laws joint_impedance,computed_torque]
        [--steps 0.15,0.3,-0.6,1.0] [--joints 0] [--time 4] [--robot-loop]

--robot-loop: the Franka's own loop behind the package's (libfranka's defaults): the command applied one
cycle late, through a 1000 N m/s rate limiter of its own.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from robot_dynamics.control import ControlLoop  # noqa: E402
from robot_dynamics.control.laws.base import JointReference  # noqa: E402
from robot_dynamics.control.params import loop_param_specs  # noqa: E402
from robot_dynamics.dynamics import Model  # noqa: E402
from robot_dynamics.sim import MujocoSim  # noqa: E402

DT = 0.001


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def shipped(name):
    """The ros__parameters of config/<name>.yaml, flattened (the node's dotted names)."""
    doc = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    return flat(next(iter(doc.values()))["ros__parameters"])


def loop_params(robot, law, **over):
    known = {s.name for s in loop_param_specs()}
    p = {k: v for k, v in shipped(f"{robot}_{law}").items() if k in known}
    p.update(over)
    return p


def run_case(model, robot, law, joint, step, t_end, robot_loop=False, over=None):
    p = loop_params(robot, law, **(over or {}))
    loop = ControlLoop.from_params(model, p, log=lambda level, text: None)
    q0 = np.array(shipped(f"sim_{robot}")["initial_positions"], dtype=float)
    sim = MujocoSim(model, dt=DT)
    sim.reset(q0)
    vl = np.asarray(model.velocity_limits, dtype=float)
    lo, hi = (np.asarray(a, dtype=float) for a in (model.lower_limits, model.upper_limits))
    loop.safety.hold(loop.gravity_backend.gravity(q0))   # held at activation (the node's safe command)
    loop.activate(0.0)
    t, peak, rate_peak, past = 0.0, 0.0, 0.0, 0.0
    prev = None
    held = np.zeros(model.nv)
    lim = 1000.0 * DT
    n = int(round(t_end / DT))
    for i in range(n):
        if i == 500:
            qd = q0.copy()
            qd[joint] += step
            ok, why = loop.set_reference(JointReference(q=qd), "target_joint_state", t)
            assert ok, why
        q, v = sim.q, sim.v
        loop.update_state(q, v, t)
        tau, safe = loop.step(t)
        tau = tau.copy()
        if prev is not None and i > 500:
            rate_peak = max(rate_peak, float(np.max(np.abs(tau - prev))) / DT)
        prev = tau
        if robot_loop:                       # the robot's own loop: one cycle late, its own limiter
            applied = held + np.clip(tau - held, -lim, lim)
            sim.step(held)
            held = applied
        else:
            sim.step(tau)
        t += DT
        if i >= 500:
            fin = np.isfinite(vl) & (vl > 0)
            peak = max(peak, float(np.max(np.abs(sim.v[fin]) / vl[fin])))
            past = max(past, float(np.max(np.maximum(sim.q - hi, lo - sim.q))))
    err = float(q0[joint] + step - sim.q[joint])
    vend = float(np.max(np.abs(sim.v)))
    return peak, rate_peak, max(past, 0.0), err, vend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--robots", default="panda,ur5e,kinova")
    ap.add_argument("--laws", default="joint_impedance,computed_torque")
    ap.add_argument("--steps", default="0.15,0.3,-0.6,1.0")
    ap.add_argument("--joints", default="0")
    ap.add_argument("--time", type=float, default=4.0)
    ap.add_argument("--robot-loop", action="store_true")
    ap.add_argument("--set", action="append", default=[], help="extra loop parameter key=yaml-value")
    a = ap.parse_args()
    over = {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        over[k] = yaml.safe_load(v)
    print(f"| robot | law | joint | step [rad] | peak speed / limit | peak tau rate [N m/s] | past limit [rad] "
          f"| final error [rad] | max speed at end [rad/s] | at rest |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|---|")
    for robot in a.robots.split(","):
        model = Model.from_robot(shipped(f"sim_{robot}").get("robot", robot))
        for law in a.laws.split(","):
            for j in (int(x) for x in a.joints.split(",")):
                for s in (float(x) for x in a.steps.split(",")):
                    peak, rate, past, err, vend = run_case(model, robot, law, j, s, a.time, a.robot_loop, over)
                    print(f"| {robot} | {law} | {j + 1} | {s:+.2f} | {peak:.2f} | {rate:.0f} | {past:.3f} | "
                          f"{err:+.4f} | {vend:.2e} | {'yes' if vend < 1e-3 else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
