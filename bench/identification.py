"""The arm's own dynamics identified on a MuJoCo plant (robot_dynamics/dynamics/identification.py):
per-joint rotor inertia, viscous and Coulomb friction against the plant's values, the validation
torque on a trajectory the identification did not see, and the base parameters of a link whose
inertials the URDF has 20 % wrong.  No assertions: tables.

    .venv/bin/python bench/identification.py                     # Panda, seed 7, noise on
    .venv/bin/python bench/identification.py --seed 3 --noise-q 0 --noise-tau 0

The plant: the URDF in MuJoCo (RK4, 1 ms) with per-joint armature U(0.05, 0.2) kg m^2, damping
U(0.1, 0.5) N m s/rad and friction loss U(0.2, 1.0) N m drawn from the seed; it follows the Fourier
excitation by computed torque on the URDF model; the measured effort and the state are paired at mid
step (MujocoSim.track), Gaussian noise added to q and tau.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robot_dynamics.dynamics import Model, PinocchioBackend  # noqa: E402
from robot_dynamics.dynamics import identification as idn  # noqa: E402
from robot_dynamics.hardware.franka import scale_link_mass  # noqa: E402
from robot_dynamics.sim.mujoco_sim import MujocoSim  # noqa: E402

Q_START = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.6, 0.8])


def record(backend, sim, exc, periods, rng, noise_q, noise_tau):
    ca, cb, q0, om, _ = exc
    sim.reset(Q_START)
    t = np.arange(int(periods * 2 * np.pi / om / sim.dt)) * sim.dt
    t, q, tau = sim.track(backend, *idn.fourier_trajectory(ca, cb, q0, om, t))
    return t, q + rng.normal(0, noise_q, q.shape), tau + rng.normal(0, noise_tau, tau.shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--noise-q", type=float, default=1e-5, help="rad")
    ap.add_argument("--noise-tau", type=float, default=0.02, help="N m")
    ap.add_argument("--periods", type=int, default=2, help="of the 5 s excitation")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    model = Model.from_robot("panda")
    P = PinocchioBackend(model)
    n = model.nv
    Ia, fv, fc = rng.uniform(0.05, 0.2, n), rng.uniform(0.1, 0.5, n), rng.uniform(0.2, 1.0, n)
    sim = MujocoSim(model, damping=fv, friction=fc, armature=Ia, limits=False)

    t0 = time.perf_counter()
    exc = idn.fourier_excitation(model, Q_START, inertial=False, a_max=6.0, candidates=30, seed=a.seed)
    t_exc = time.perf_counter() - t0
    t, q, tau = record(P, sim, exc, a.periods, rng, a.noise_q, a.noise_tau)
    t0 = time.perf_counter()
    W, y, mask = idn.dataset(model, t, q, tau, inertial=False)
    est = idn.solve(W, y, idn.base_parameters(model, inertial=False), mask=mask)
    t_id = time.perf_counter() - t0
    terms = est.joint_terms(model)
    print(f"Panda on MuJoCo, seed {a.seed}, noise q {a.noise_q:g} rad / tau {a.noise_tau:g} N m; "
          f"excitation cond {exc[4]:.2f} ({t_exc:.1f} s to choose), {len(t)} samples, identification "
          f"{t_id:.2f} s, weighted cond {est.cond:.0f}")
    print()
    print("| joint | Ia plant | Ia est | err % | fv plant | fv est | err % | fc plant | fc est | err % | off est |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for j, name in enumerate(model.joint_names):
        row = [name]
        for key, truth in (("Ia", Ia), ("fv", fv), ("fc", fc)):
            v = terms[key][0][j]
            row += [f"{truth[j]:.4f}", f"{v:.4f}", f"{100 * (v / truth[j] - 1):+.2f}"]
        row.append(f"{terms['off'][0][j]:+.4f}")
        print("| " + " | ".join(row) + " |")

    exc2 = idn.fourier_excitation(model, Q_START, inertial=False, a_max=5.0, candidates=5, seed=a.seed + 100)
    t2, q2, tau2 = record(P, sim, exc2, 1, rng, a.noise_q, a.noise_tau)
    W2, y2, _ = idn.dataset(model, t2, q2, tau2, inertial=False)
    r0 = np.sqrt(np.mean(y2 ** 2, axis=0))
    r1 = np.sqrt(np.mean((y2 - est.predict(W2)) ** 2, axis=0))
    print()
    print("validation (another excitation): torque RMS [N m]")
    print("| joint | URDF only | identified | ratio |")
    print("|---|--:|--:|--:|")
    for j, name in enumerate(model.joint_names):
        print(f"| {name} | {r0[j]:.4f} | {r1[j]:.4f} | {r1[j] / r0[j]:.3f} |")

    heavy = Model.from_urdf_string(scale_link_mass(model.urdf, "panda_link5", 1.2))
    sim_h = MujocoSim(heavy, damping=fv, friction=fc, armature=Ia, limits=False)
    exc3 = idn.fourier_excitation(model, Q_START, inertial=True, a_max=6.0, candidates=30, seed=a.seed + 200)
    t3, q3, tau3 = record(P, sim_h, exc3, 3, rng, a.noise_q, a.noise_tau)
    base = idn.base_parameters(model)
    W3, y3, m3 = idn.dataset(model, t3, q3, tau3)
    est3 = idn.solve(W3, y3, base, theta_prior=idn.prior_parameters(model), mask=m3)
    true_b = base.beta(idn.prior_parameters(heavy, Ia=Ia, fv=fv, fc=fc))
    prior_b = base.beta(idn.prior_parameters(model, Ia=Ia, fv=fv, fc=fc))
    print()
    print(f"all {base.r} base parameters together, link 5 with 20 % more mass and inertia than the URDF "
          f"(excitation cond {exc3[4]:.1f}): the base parameters of link 5")
    print("| base parameter | plant | URDF | estimate | err % | rel std % |")
    print("|---|--:|--:|--:|--:|--:|")
    for k, i in enumerate(base.base):
        if base.names[i].startswith("panda_link5."):
            print(f"| {base.regrouping()[k][:60]} | {true_b[k]:.5f} | {prior_b[k]:.5f} | {est3.beta[k]:.5f} | "
                  f"{100 * (est3.beta[k] / true_b[k] - 1):+.2f} | {est3.rel_std[k]:.2f} |")
    report = idn.consistency(model, est3.theta())
    print()
    print("physical consistency of the reconstructed parameters: " + ("consistent" if not report else "; ".join(report)))
    for note in est3.notes:
        print("note: " + note)


if __name__ == "__main__":
    main()
