"""Microseconds per compute() of each control law, and per apply() of the safety filter, on the Panda
with the Pinocchio backend (and, for comparison, the in-repo reference backend).

    .venv/bin/python bench/control.py [--batches 30] [--batch 2000]

Each figure is the median over batches of (batch time / calls); states vary (a ring of 64 random
states within the joint limits) so nothing is cached between calls.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from robot_dynamics.control import (CartesianReference, JointReference, JointTrajectory,  # noqa: E402
                                    SafetyFilter, State, make_law)
from robot_dynamics.dynamics import Model, PinocchioBackend, ReferenceBackend  # noqa: E402

TARGETS = {"gravity_compensation": 10, "computed_torque": 25, "joint_impedance": None,
           "cartesian_impedance": 50}


def per_call_us(fn, args, batches, batch):
    k = len(args)
    for i in range(200):
        fn(args[i % k])
    res = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for i in range(batch):
            fn(args[i % k])
        res.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--batch", type=int, default=2000)
    a = ap.parse_args()
    model = Model.from_robot("panda")
    rng = np.random.default_rng(0)
    states = [State(q=model.random_configuration(rng, 0.1), v=rng.uniform(-1, 1, model.nv), t=0.001 * i)
              for i in range(64)]
    rows = []
    for bname, B, batch in (("pinocchio", PinocchioBackend, a.batch), ("reference", ReferenceBackend, 20)):
        backend = B(model)
        for name, params in (("gravity_compensation", {}),
                             ("computed_torque", {"omega": 20.0}),
                             ("joint_impedance", {"k_gains": [600, 600, 600, 600, 250, 150, 50],
                                                  "d_gains": [50, 50, 50, 20, 20, 20, 10]}),
                             ("joint_impedance", {"k_gains": [600, 600, 600, 600, 250, 150, 50]}),
                             ("cartesian_impedance", {"frame": "panda_hand_tcp"}),
                             ("cartesian_impedance", {"frame": "panda_hand_tcp", "task.d_pos_x": 40,
                                                      "task.d_pos_y": 40, "task.d_pos_z": 40, "task.d_rot_x": 5,
                                                      "task.d_rot_y": 5, "task.d_rot_z": 5})):
            law = make_law(name, model, backend, params)
            law.reset(states[0])
            if name == "computed_torque":
                law.set_reference(JointTrajectory([1.0, 2.0], [states[1].q, states[2].q]))
                label = name + " (trajectory)"
            elif name == "joint_impedance":
                law.set_reference(JointReference(q=states[1].q))
                label = name + (" (d_gains)" if "d_gains" in params else " (damping_ratio)")
            elif name == "cartesian_impedance":
                R, p = backend.frame_placement(states[1].q, "panda_hand_tcp")
                law.set_reference(CartesianReference(R=np.array(R), p=np.array(p) + 0.01))
                label = name + (" (fixed D)" if "task.d_pos_x" in params else " (D from Lambda)")
            else:
                label = name
            us = per_call_us(law.compute, states, a.batches, batch)
            rows.append((label, bname, us, TARGETS.get(name)))
    sf = SafetyFilter(model)
    taus = [rng.uniform(-100, 100, model.nv) for _ in range(64)]
    pairs = list(zip(taus, states))
    rows.append(("safety_filter.apply", "-", per_call_us(lambda x: sf.apply(x[0], x[1], 0.001), pairs,
                                                         a.batches, a.batch), None))
    sfp = SafetyFilter(model, {"position_margin": 0.1, "position_stiffness": 50.0, "velocity_damping": 1.0})
    rows.append(("safety_filter.apply (limits+damping)", "-",
                 per_call_us(lambda x: sfp.apply(x[0], x[1], 0.001), pairs, a.batches, a.batch), None))
    traj = JointTrajectory([0.5, 1.0, 2.0], [states[1].q, states[2].q, states[3].q]).start(0.0, states[0].q,
                                                                                         states[0].v)
    rows.append(("JointTrajectory.sample", "-", per_call_us(traj.sample, [0.1 * i for i in range(25)],
                                                            a.batches, a.batch), None))
    print(f"Panda (nv={model.nv}), median of {a.batches} batches, microseconds per call")
    print(f"{'what':42s} {'backend':10s} {'us/call':>9s} {'target':>7s}")
    for label, bname, us, tgt in rows:
        t = "" if tgt is None or bname != "pinocchio" else f"<= {tgt}"
        print(f"{label:42s} {bname:10s} {us:9.1f} {t:>7s}")


if __name__ == "__main__":
    main()
