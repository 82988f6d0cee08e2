"""Momentum observer and payload identification: cost per call and accuracy in MuJoCo (issue 17).

    .venv/bin/python bench/observer.py [--quick] [--cost-only]

Tables:
1. microseconds (CPU time of this process, so that other load on the machine does not count) per
   MomentumObserver.update / .wrench on the Panda (Pinocchio backend), median over batches, states from
   a ring of 64 random ones;
2. a push [10, -15, 20 N; 0.5, -0.5, 1 N m] at the TCP of the Panda held by joint impedance, per
   observer gain K: steady wrench error, 63 % rise time (expected 1/K), detection delay at a 3 N m
   threshold, and the residual's noise when the measured velocity carries white noise of 1e-3 rad/s
   (the price of a fast observer);
3. fast free motion (computed torque, q0 + A (1 - cos pi t) / 2 at 85 % of the velocity limits, the
   simulated joints with 0.2 N m s/rad + 0.3 N m unmodelled friction): largest |r| per K, against which
   the collision threshold must be set;
4. payload identification from 8 static poses (F/T at the TCP, joint efforts, both) and from an 8 s
   excitation (F/T with central-difference accelerations): mass and com errors, std, condition number.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))

from robot_dynamics.control import State, make_law  # noqa: E402
from robot_dynamics.control.observer import MomentumObserver  # noqa: E402
from robot_dynamics.control.payload_id import (ExcitationTrajectory, PayloadIdentifier,  # noqa: E402
                                               inertial_params, static_poses)
from robot_dynamics.dynamics import Model, PinocchioBackend  # noqa: E402
from robot_dynamics.sim import MujocoSim  # noqa: E402

DT = 1e-3
TCP = "panda_hand_tcp"
Q_HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
KP = np.array([600.0, 600.0, 500.0, 500.0, 100.0, 100.0, 50.0])
KD = np.array([50.0, 50.0, 40.0, 40.0, 10.0, 8.0, 5.0])


def table(title, head, rows):
    print(f"\n{title}")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def cost(model, dyn, batches, batch):
    rng = np.random.default_rng(0)
    states = [(model.random_configuration(rng, 0.1), rng.uniform(-1, 1, 7), rng.normal(size=7))
              for _ in range(64)]
    obs = MomentumObserver(model, dyn, gain=50.0, frame=TCP, threshold=5.0)
    obs.reset(states[0][0], states[0][1])

    def per_call(fn):
        for i in range(200):
            fn(states[i % 64])
        res = []
        for _ in range(batches):
            t0 = time.process_time()          # CPU time: robust to a machine shared with others
            for i in range(batch):
                fn(states[i % 64])
            res.append((time.process_time() - t0) / batch * 1e6)
        return statistics.median(res)
    rows = [("update (M, C, g, filter, flag)", per_call(lambda s: obs.update(s[0], s[1], s[2], DT))),
            ("wrench (J, SVD, damped LS)", per_call(lambda s: obs.wrench(s[0])))]
    table("MomentumObserver cost, Panda, Pinocchio backend", ["call", "CPU us per call (median)"],
          [(n, f"{t:.1f}") for n, t in rows])


def push(model, dyn, K, noise=0.0, rng=None):
    sim = MujocoSim(model)
    law = make_law("joint_impedance", model, dyn, {"k_gains": [300, 300, 200, 200, 50, 50, 20],
                                                   "damping_ratio": 1.0})
    sim.reset(Q_HOME)
    law.reset(State(sim.q, sim.v, sim.t))
    obs = MomentumObserver(model, dyn, gain=K, frame=TCP, threshold=3.0)
    obs.reset(sim.q, sim.v)
    F = np.array([10.0, -15.0, 20.0, 0.5, -0.5, 1.0])
    t_on, n = 200, 1000 if noise == 0 else 400
    W, flags, R = [], [], []
    for k in range(n):
        if k == t_on and noise == 0:
            sim.apply_wrench(TCP, F)
        tau = law.compute(State(sim.q, sim.v, sim.t))
        sim.step(tau)
        v = sim.v + (rng.normal(size=7) * noise if noise else 0.0)
        obs.update(sim.q, v, tau, DT)
        R.append(obs.r.copy())
        if noise == 0:
            W.append(obs.wrench(sim.q))
            flags.append(obs.collision)
    if noise:
        return float(np.sqrt(np.mean(np.array(R[100:]) ** 2)))
    W = np.array(W)
    err = np.linalg.norm(W[-200:] - F, axis=1).max()
    t63 = (np.flatnonzero(W[t_on:, 2] > (1 - np.exp(-1)) * F[2])[0] + 1) * DT
    det = (np.flatnonzero(flags)[0] - t_on + 1) * DT
    return err, t63, det


def free_motion(model, dyn, K):
    sim = MujocoSim(model, damping=0.2, friction=0.3)
    w = np.pi
    A = 2 * 0.85 * model.velocity_limits / w * np.array([1, 1, -1, 1, 1, 1, -1])
    sim.reset(Q_HOME)
    obs = MomentumObserver(model, dyn, gain=K)
    obs.reset(sim.q, sim.v)
    rmax = np.zeros(7)
    for _ in range(2000):
        t = sim.t
        q_d, v_d, a_d = (Q_HOME + A * (1 - np.cos(w * t)) / 2, A * w * np.sin(w * t) / 2,
                         A * w * w * np.cos(w * t) / 2)
        q, v = sim.q, sim.v
        tau = dyn.mass_matrix(q) @ (a_d + 40 * (v_d - v) + 400 * (q_d - q)) + dyn.nonlinear_effects(q, v)
        sim.step(tau)
        obs.update(sim.q, sim.v, tau, DT)
        rmax = np.maximum(rmax, np.abs(obs.r))
    return rmax


def identification(model, dyn, payload):
    from test_payload_id import _visit
    sim = MujocoSim(model, ft_sensor_frame=TCP, payload=dict(frame=TCP, **payload))
    sim.reset(Q_HOME)
    ft, tq, both = (PayloadIdentifier(model, dyn, TCP) for _ in range(3))

    def sample():
        q, w, e = sim.q, sim.ft_wrench(), sim.measured_effort
        ft.add_ft(q, w)
        tq.add_torques(q, e)
        both.add_ft(q, w)
        both.add_torques(q, e)
    t0 = sim.t
    _visit(sim, dyn, static_poses(model, Q_HOME, n=8), sample)
    t_static = sim.t - t0
    out = [("static F/T", ft.solve(), t_static), ("static torques", tq.solve(), t_static),
           ("static both", both.solve(), t_static)]
    ex = ExcitationTrajectory(model, Q_HOME, duration=8.0, amplitude=1.0, vel_frac=0.4, acc_max=5.0)
    sim.reset(Q_HOME)
    log = []
    for k in range(8000):
        q_d, v_d, a_d = ex.sample(sim.t)
        q, v = sim.q, sim.v
        tau = dyn.mass_matrix(q) @ (a_d + 40 * (v_d - v) + 400 * (q_d - q)) + dyn.nonlinear_effects(q, v)
        sim.step(tau)
        log.append((sim.q, sim.v, sim.ft_wrench(), sim.measured_effort))
    fd, td = PayloadIdentifier(model, dyn, TCP), PayloadIdentifier(model, dyn, TCP)
    for k in range(1, len(log) - 1, 10):
        q, v, w, e = log[k]
        a = (log[k + 1][1] - log[k - 1][1]) / (2 * DT)
        fd.add_ft(q, w, v, a)
        td.add_torques(q, e, v, a)
    out += [("excitation F/T", fd.solve(), 8.0), ("excitation torques", td.solve(), 8.0)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer batches, one payload")
    ap.add_argument("--cost-only", action="store_true", help="table 1 only")
    a = ap.parse_args()
    model = Model.from_robot("panda")
    dyn = PinocchioBackend(model)
    cost(model, dyn, 5 if a.quick else 20, 500 if a.quick else 2000)
    if a.cost_only:
        return

    rng = np.random.default_rng(1)
    rows = []
    for K in (20.0, 50.0, 100.0, 200.0):
        err, t63, det = push(model, dyn, K)
        nz = push(model, dyn, K, noise=1e-3, rng=rng)
        rows.append((f"{K:g}", f"{1e3 / K:.1f}", f"{1e3 * t63:.1f}", f"{err:.3f}", f"{1e3 * det:.0f}", f"{nz:.3f}"))
    table("Push at the TCP (|f| 26.9 N), joint impedance hold, MuJoCo 1 kHz",
          ["K [1/s]", "1/K [ms]", "t63 [ms]", "steady |F_est - F| [N, N m]", "detect @3 N m [ms]",
           "r noise rms, v noise 1e-3 rad/s [N m]"], rows)

    rows = []
    for K in (20.0, 50.0, 200.0):
        rmax = free_motion(model, dyn, K)
        rows.append((f"{K:g}", np.array2string(rmax, precision=2), f"{rmax.max():.2f}"))
    table("Fast free motion (85 % of velocity limits), unmodelled friction 0.2 N m s/rad + 0.3 N m",
          ["K [1/s]", "max |r| per joint [N m]", "max [N m]"], rows)

    payloads = [dict(mass=0.5, com=[0.04, -0.03, 0.02], inertia=[2e-3, 0, 0, 1.5e-3, 0, 1e-3]),
                dict(mass=3.0, com=[-0.03, 0.02, 0.08], inertia=[0.02, 1e-3, 0, 0.015, 2e-3, 0.01])]
    rows = []
    for p in payloads[1:] if a.quick else payloads:
        Ic = inertial_params(0.0, inertia=p["inertia"])[4:]
        Ic = np.array([[Ic[0], Ic[1], Ic[2]], [Ic[1], Ic[3], Ic[4]], [Ic[2], Ic[4], Ic[5]]])
        for name, e, t in identification(model, dyn, p):
            ierr = "-" if e.inertia is None else f"{100 * np.linalg.norm(e.inertia - Ic) / np.linalg.norm(Ic):.1f}"
            rows.append((f"{p['mass']:g}", name, f"{t:.1f}", f"{100 * (e.mass / p['mass'] - 1):+.3f}",
                         f"{100 * e.mass_std / p['mass']:.3f}", f"{1e3 * np.linalg.norm(e.com - p['com']):.2f}",
                         f"{1e3 * np.linalg.norm(e.com_std):.2f}", ierr, f"{e.cond:.1f}"))
    table("Payload identification at the TCP, MuJoCo (spec: mass 2 %, com 5 mm)",
          ["m [kg]", "data", "robot time [s]", "mass err [%]", "mass std [%]", "com err [mm]", "com std [mm]",
           "inertia err [%]", "cond"], rows)


if __name__ == "__main__":
    main()
