"""The way back after an aborted dynamics identification, on a rate-limited joint impedance whose
commands reach the plant late (issue 24: over DDS on a loaded host the arm ended 3.2 rad from its
reference after such an abort; in CI, after a stall, it had not come back 200 s later).  No ROS, no
assertions: a table.

    .venv/bin/python bench/abort_return.py                   # delays 2, 4 and 8 ms
    .venv/bin/python bench/abort_return.py --delays 2 --ats 2.5 --stalls 0.4

The loop (ControlLoop, the Panda's joint impedance gains, torque_rate_limit 1000 N m/s as the shipped
configurations) drives a MuJoCo Panda (RK4, 1 ms; armature 0.1, damping 0.3, friction loss 0.5 on
every joint, as test_node_dynamics.py) from HOME through the identification's excitation; its commands
reach the plant `delay` ms late, and `stall` seconds from `at` into the excitation the loop takes no
state (the plant holds its last torque), which makes the run abort.  Per case and way back: why the run
ended, the fastest joint at the abort and after it, how far the arm is from HOME at the end and its
speed there.  The ways back: as it is (a brake to rest first when the law was at an effort limit or a
joint faster than the run's speeds: payload_run.needs_brake, then payload_run.move_back from the
arm's state), without the brake (move_back at once), and from the reference the arm had left (the
first way back).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import robot_dynamics.control.runs.dynamics as dr  # noqa: E402
from robot_dynamics.control import ControlLoop  # noqa: E402
from robot_dynamics.control.trajectory import JointTrajectory  # noqa: E402
from robot_dynamics.dynamics import Model  # noqa: E402
from robot_dynamics.sim.mujoco_sim import MujocoSim  # noqa: E402

HOME = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
K = [400.0] * 4 + [100.0, 50.0, 15.0]
MOVE_BACK = dr.move_back
NEEDS_BRAKE = dr.needs_brake


def from_reference(loop, target, vmax, t_min):
    """The way back before: a trajectory from the law's reference (the excitation's, which the arm left)."""
    T = max(t_min, 15.0 / 8.0 * float(np.max(np.abs(target - loop.q) / vmax)))
    traj = JointTrajectory([T], [target], lower=None, upper=None)
    loop.law.set_reference(traj)
    return traj


WAYS = {"now": (MOVE_BACK, NEEDS_BRAKE), "no brake": (MOVE_BACK, lambda loop, vmax: False),
        "from the reference": (from_reference, lambda loop, vmax: False)}


def case(model, at, stall, delay, way):
    dr.move_back, dr.needs_brake = WAYS[way]
    try:
        return _case(model, at, stall, delay)
    finally:
        dr.move_back, dr.needs_brake = MOVE_BACK, NEEDS_BRAKE


def _case(model, at, stall, delay):
    sim = MujocoSim(model, limits=False, armature=0.1, damping=0.3, friction=0.5)
    sim.reset(HOME)
    loop = ControlLoop.from_params(model, {
        "controller": "joint_impedance", "joint_impedance.k_gains": K, "torque_rate_limit": 1000.0,
        "watchdog_timeout": 0.5, "dynamics_id.period": 4.0, "dynamics_id.periods": 2,
        "dynamics_id.acc_max": 4.0, "dynamics_id.torque_timing": "held_before"})
    loop.activate(0.0)
    late, tau, run = [np.zeros(7)] * delay, np.zeros(7), None
    v_abort = v_after = float("nan")
    for k in range(30000):
        t = k * 1e-3
        if k == 1500:
            ok, msg = loop.runs.start_dynamics_id(t)
            if not ok:
                raise RuntimeError(msg)
            run = loop.runs.dynamics
        if run is not None and run.phase == "finished" and t - run.t0 > 8.0:
            break
        if not (run is not None and run.phase == "excite" and at <= t - run.t0 < at + stall):
            loop.update_state(sim.q, sim.v, t, effort=sim.measured_effort)
            tau, _ = loop.step(t)
        if run is not None and run.done:
            speed = float(np.max(np.abs(sim.v)))
            if v_abort != v_abort:
                v_abort = v_after = speed
            v_after = max(v_after, speed)
        late.append(tau.copy())
        sim.step(late.pop(0))
    why = "completed" if run.ok else ("effort limit" if "effort limit" in run.message
                                      else "position margin" if "margin" in run.message else run.message[:30])
    return why, v_abort, v_after, float(np.max(np.abs(sim.q - HOME))), float(np.max(np.abs(sim.v)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delays", type=int, nargs="+", default=[2, 4, 8], help="command delay [ms]")
    ap.add_argument("--ats", type=float, nargs="+", default=[1.1, 2.0, 2.5, 3.0],
                    help="stall start, seconds into the excitation")
    ap.add_argument("--stalls", type=float, nargs="+", default=[0.3, 0.4], help="stall length [s]")
    a = ap.parse_args()
    model = Model.from_robot("panda")
    print(f"{'delay':>5} {'at':>4} {'stall':>5}  {'way back':<18} {'ended by':<14} {'|v| abort':>9} "
          f"{'|v| after':>9} {'|q-HOME| end':>12} {'|v| end':>7}")
    print(f"{'ms':>5} {'s':>4} {'s':>5}  {'':<18} {'':<14} {'rad/s':>9} {'rad/s':>9} {'rad':>12} {'rad/s':>7}")
    for d in a.delays:
        for at in a.ats:
            for st in a.stalls:
                for way in WAYS:
                    why, va, vb, e, v = case(model, at, st, d, way)
                    print(f"{d:5d} {at:4.1f} {st:5.2f}  {way:<18} {why:<14} {va:9.2f} {vb:9.2f} {e:12.3f} {v:7.2f}",
                          flush=True)


if __name__ == "__main__":
    main()
