"""Payload identification run by the control loop (ControlLoop + PayloadRun, issue 17) against MuJoCo.

    .venv/bin/python bench/payload_id.py [--poses N] [--source torques|ft|both] [--mode static|excitation] [--quick]

No ROS: the loop (joint_impedance, 1 kHz) closes on MujocoSim in process, the sim carrying a payload
at panda_hand_tcp; the run moves through its static poses, settles, averages, solves and goes back.
Table per payload (mass, com): the estimate's mass error [%], com error [mm], the reported std,
the condition number, the run's simulated duration [s] (poses + way back) and the CPU time of this
process for it.  Then the hold's static error before / after attaching the estimate.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robot_dynamics.control import ControlLoop  # noqa: E402
from robot_dynamics.dynamics import Model  # noqa: E402
from robot_dynamics.sim import MujocoSim  # noqa: E402

TCP = "panda_hand_tcp"
Q_HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
DT = 1e-3
PAYLOADS = [(0.5, [0.04, -0.03, 0.02]), (1.0, [0.03, 0.03, 0.05]), (2.0, [0.03, -0.02, 0.06]),
            (3.0, [-0.03, 0.02, 0.08])]


def run_one(mass, com, params, ft):
    model = Model.from_robot("panda")
    sim = MujocoSim(model, dt=DT, ft_sensor_frame=TCP if ft else None,
                    payload=dict(frame=TCP, mass=mass, com=com, inertia=[1e-3, 0, 0, 1e-3, 0, 1e-3]))
    sim.reset(Q_HOME)
    p = {"controller": "joint_impedance", "update_rate": 1.0 / DT, "ramp_time": 0.0, "watchdog_timeout": 0.05,
         "joint_impedance.k_gains": [600.0, 600.0, 500.0, 500.0, 150.0, 150.0, 50.0]}
    if ft:
        p["sensor_frame"] = TCP
    p.update(params)
    loop = ControlLoop.from_params(model, p, log=lambda lvl, text: None)
    loop.activate(0.0)

    def step():
        now = sim.t
        loop.update_state(sim.q, sim.v, now, effort=sim.measured_effort)
        if ft:
            loop.estimation.set_wrench(sim.ft_wrench(), TCP, now)
        tau, _ = loop.step(now)
        sim.step(tau)
    for _ in range(800):
        step()
    sag0 = float(np.max(np.abs(sim.q - Q_HOME)))
    ok, msg = loop.runs.start_payload_id(sim.t)
    if not ok:
        raise SystemExit(msg)
    run = loop.runs.payload
    t0, c0 = sim.t, time.process_time()
    while run.busy and sim.t - t0 < 120:
        step()
    dur, cpu = sim.t - t0, time.process_time() - c0
    if not run.ok:
        return dict(mass=mass, failed=run.message)
    e = run.estimate
    ok, msg = loop.runs.attach_payload_estimate()
    for _ in range(1500):
        step()
    sag1 = float(np.max(np.abs(sim.q - Q_HOME)))
    return dict(mass=mass, com=com, m_err=100 * (e.mass / mass - 1), c_err=1e3 * np.linalg.norm(e.com - com),
                m_std=e.mass_std, c_std=1e3 * float(np.max(e.com_std)), cond=e.cond, dur=dur, cpu=cpu,
                sag0=sag0, sag1=sag1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--poses", type=int, default=8)
    ap.add_argument("--source", default="torques", choices=("torques", "both", "ft"))
    ap.add_argument("--quick", action="store_true", help="5 poses, faster moves")
    ap.add_argument("--mode", default="static", choices=("static", "excitation"))
    a = ap.parse_args()
    params = {"payload_id.poses": a.poses, "payload_id.source": a.source, "payload_id.mode": a.mode}
    if a.quick:
        params.update({"payload_id.poses": 5, "payload_id.wrist_span": 0.8, "payload_id.vel_frac": 0.8,
                       "payload_id.move_time": 0.6})
    print(f"source {a.source}, mode {a.mode}, {params['payload_id.poses']} poses (static), defaults otherwise "
          f"(settle_velocity 0.002 rad/s, settle_time 0.3 s)")
    print("| payload kg | com [m] | mass err % | com err mm | mass std kg | com std mm (max) | cond | "
          "run time s (sim) | CPU s | hold error before / after attach rad |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mass, com in PAYLOADS:
        r = run_one(mass, np.array(com), params, a.source != "torques")
        if "failed" in r:
            print(f"| {mass} | {com} | failed: {r['failed']} |")
            continue
        print(f"| {mass} | {com} | {r['m_err']:+.3f} | {r['c_err']:.2f} | {r['m_std']:.4f} | {r['c_std']:.2f} | "
              f"{r['cond']:.1f} | {r['dur']:.1f} | {r['cpu']:.1f} | {r['sag0']:.1e} / {r['sag1']:.1e} |")


if __name__ == "__main__":
    main()
