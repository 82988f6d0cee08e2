#!/usr/bin/env python3
"""The safety matrix of test/test_safety_matrix.py as a slower sweep: N random cases (numpy's RNG, seed
fixed) over the same space (the four laws, Cartesian stiffness 100-5000 N/m, joint gains 0.25-1 x the
shipped ones, torque-rate limits 200-5000 N m/s, a table 6-20 cm below the TCP tilted up to 0.3 rad,
radii 0-5 cm, steps toward and through it), each run without and with the envelope on a MuJoCo Panda.
Prints per law: the cases, how many break each invariant, and the worst margins (peak joint speed with /
without the envelope, kinetic energy with / without, the deepest the sphere went below the plane).
Nothing is asserted.

    .venv/bin/python bench/safety_matrix.py [N] [seed]
"""
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))
from test_safety_matrix import JI_GAINS, KE_SLOW, PB, PENETRATION, Q0, SLOW, TCP, run  # noqa: E402
from robot_dynamics.control.laws.base import CartesianReference, JointReference  # noqa: E402


def draw(rng):
    law = rng.choice(["cartesian_impedance", "joint_impedance", "computed_torque", "gravity_compensation"])
    rate = float(np.exp(rng.uniform(np.log(200.0), np.log(5000.0))))
    below, tilt, radius = rng.uniform(0.06, 0.2), rng.uniform(0.0, 0.3), float(rng.choice([0.0, 0.025, 0.05]))
    R0, p0 = PB.frame_placement(Q0, TCP)
    n = np.array([np.sin(tilt), 0.0, np.cos(tilt)])
    plane = (*n, float(n @ p0) - radius - below)
    params, target, v0 = {"torque_rate_limit": rate}, None, None
    if law == "cartesian_impedance":
        k = float(np.exp(rng.uniform(np.log(100.0), np.log(5000.0))))
        params.update({f"cartesian_impedance.task.k_pos_{a}": k for a in "xyz"})
        params.update({f"cartesian_impedance.task.k_rot_{a}": 50.0 for a in "xyz"})
        params["cartesian_impedance.frame"] = TCP
        target = CartesianReference(R0, p0 + np.array([rng.uniform(-0.15, 0.15), 0.0, -rng.uniform(0.1, 0.4)]))
    elif law in ("joint_impedance", "computed_torque"):
        scale = rng.uniform(0.25, 1.0)
        if law == "joint_impedance":
            params["joint_impedance.k_gains"] = (scale * JI_GAINS).tolist()
        else:
            params["computed_torque.omega"] = 5.0 + 20.0 * scale
        q = Q0.copy()
        q[1] += rng.uniform(0.1, 0.6)
        q[3] += rng.uniform(0.0, 0.6)
        target = JointReference(q=q)
    else:
        v0 = np.zeros(7)
        v0[1] = rng.uniform(0.3, 1.5)
    return str(law), params, plane, radius, target, v0


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 120
    rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 41)
    rows = defaultdict(lambda: {"n": 0, "speed": 0, "energy": 0, "depth": 0, "ratio": 0.0, "ke_ratio": 0.0,
                                "peak": 0.0, "deep": -np.inf})
    for _ in range(n):
        law, params, plane, radius, target, v0 = draw(rng)
        fp, fk, _ = run(law, params, plane, radius, target, v0, envelope=False)
        p, k, d = run(law, params, plane, radius, target, v0, envelope=True)
        r = rows[law]
        r["n"] += 1
        r["speed"] += target is not None and p > max(1.05 * fp + 0.05, SLOW)
        r["energy"] += k > max(1.05 * fk + 0.05, KE_SLOW)
        r["depth"] += d > PENETRATION
        r["ratio"] = max(r["ratio"], p / max(fp, 1e-9))
        r["ke_ratio"] = max(r["ke_ratio"], k / max(fk, 1e-9))
        r["peak"] = max(r["peak"], p)
        r["deep"] = max(r["deep"], d)
    print("| law | cases | speed broken | energy broken | depth broken | worst peak with/without | "
          "worst KE with/without | fastest joint with [rad/s] | deepest [mm] |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for law, r in sorted(rows.items()):
        print(f"| {law} | {r['n']} | {r['speed']} | {r['energy']} | {r['depth']} | {r['ratio']:.2f} | "
              f"{r['ke_ratio']:.2f} | {r['peak']:.2f} | {r['deep'] * 1e3:+.1f} |")


if __name__ == "__main__":
    main()
