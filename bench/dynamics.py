#!/usr/bin/env python3
"""Per-call cost of the dynamics layer: raw `pin` calls, PinocchioBackend, ReferenceBackend.

    .venv/bin/python bench/dynamics.py            (or ./run.sh bench dynamics)
    .venv/bin/python bench/dynamics.py --robots panda --batches 9

For every robot and algorithm: microseconds per call, each the median over several batches of
back-to-back calls (a timer around a batch, divided by its length), on one fixed random
state, in the thread's CPU time (time.thread_time: on a shared machine wall time would count the
time other processes hold the core).  "raw" calls pinocchio directly on model.pin_model with its
own pin.Data and Pinocchio's own q (no conversion, no checks); "backend" is PinocchioBackend
(checked inputs, user q, symmetric M); "reference" is the in-repo numpy implementation.  Ratios: backend/raw (the cost of the wrapper) and
reference/backend (how far the oracle is from production).  Nothing here is asserted.
"""
import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from robot_dynamics.dynamics import Model, PinocchioBackend, ReferenceBackend  # noqa: E402

FRAMES = {"panda": "panda_hand_tcp", "ur5": "tool0", "talos": "gripper_left_base_link"}
LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED


def raw_calls(model, frame, q, v, a):
    """The same computations as the backends, straight on pin (Pinocchio's q and v order)."""
    pm = model.pin_model
    d = pm.createData()
    qp = np.array(model.q_to_pin(q), copy=True)
    vp, ap = np.empty(model.nv), np.empty(model.nv)
    vp[model.v_to_pin], ap[model.v_to_pin] = v, a
    fid = model.frame_ids[frame]

    def placement():
        pin.forwardKinematics(pm, d, qp)
        return pin.updateFramePlacement(pm, d, fid)

    def velocity():
        pin.forwardKinematics(pm, d, qp, vp)
        pin.updateFramePlacement(pm, d, fid)
        return pin.getFrameVelocity(pm, d, fid, LWA)

    def jacobian_dot():
        pin.computeJointJacobiansTimeVariation(pm, d, qp, vp)
        pin.updateFramePlacement(pm, d, fid)
        return pin.getFrameJacobianTimeVariation(pm, d, fid, LWA)

    return {
        "rnea": lambda: pin.rnea(pm, d, qp, vp, ap),
        "gravity": lambda: pin.computeGeneralizedGravity(pm, d, qp),
        "nonlinear_effects": lambda: pin.nonLinearEffects(pm, d, qp, vp),
        "mass_matrix": lambda: pin.crba(pm, d, qp),
        "coriolis_matrix": lambda: pin.computeCoriolisMatrix(pm, d, qp, vp),
        "aba": lambda: pin.aba(pm, d, qp, vp, ap),
        "frame_placement": placement,
        "frame_velocity": velocity,
        "frame_jacobian": lambda: pin.computeFrameJacobian(pm, d, qp, fid, LWA),
        "frame_jacobian_dot": jacobian_dot,
        "kinetic_energy": lambda: pin.computeKineticEnergy(pm, d, qp, vp),
        "potential_energy": lambda: pin.computePotentialEnergy(pm, d, qp),
    }


def backend_calls(dyn, frame, q, v, a):
    ref = "local_world_aligned"
    return {
        "rnea": lambda: dyn.rnea(q, v, a),
        "gravity": lambda: dyn.gravity(q),
        "nonlinear_effects": lambda: dyn.nonlinear_effects(q, v),
        "mass_matrix": lambda: dyn.mass_matrix(q),
        "coriolis_matrix": lambda: dyn.coriolis_matrix(q, v),
        "aba": lambda: dyn.aba(q, v, a),
        "frame_placement": lambda: dyn.frame_placement(q, frame),
        "frame_velocity": lambda: dyn.frame_velocity(q, v, frame, ref),
        "frame_jacobian": lambda: dyn.frame_jacobian(q, frame, ref),
        "frame_jacobian_dot": lambda: dyn.frame_jacobian_dot(q, v, frame, ref),
        "kinetic_energy": lambda: dyn.kinetic_energy(q, v),
        "potential_energy": lambda: dyn.potential_energy(q),
    }


def per_call_us(fn, batches, batch_seconds):
    """Median over `batches` batches of the mean time per call, in microseconds."""
    for _ in range(3):
        fn()                                           # warm up (allocations, caches)
    t0 = time.thread_time()
    fn()
    one = max(time.thread_time() - t0, 1e-7)
    n = max(3, min(200_000, int(batch_seconds / one)))
    times = []
    for _ in range(batches):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        times.append((time.thread_time() - t0) / n)
    return 1e6 * statistics.median(times)


def bench_robot(name, batches, batch_seconds, seed=0):
    model = Model.from_robot(name)
    rng = np.random.default_rng(seed)
    q = model.random_configuration(rng)
    v, a = rng.normal(size=model.nv), rng.normal(size=model.nv)
    frame = FRAMES.get(name, model.frame_names[-1])
    impls = {"raw": raw_calls(model, frame, q, v, a),
             "backend": backend_calls(PinocchioBackend(model), frame, q, v, a),
             "reference": backend_calls(ReferenceBackend(model), frame, q, v, a)}
    rows = []
    for algo in impls["raw"]:
        us = {k: per_call_us(impls[k][algo], batches, batch_seconds) for k in impls}
        rows.append((algo, us["raw"], us["backend"], us["reference"]))
    return model, frame, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robots", nargs="+", default=["panda", "ur5", "talos"])
    ap.add_argument("--batches", type=int, default=7, help="batches per cell (median taken)")
    ap.add_argument("--batch-ms", type=float, default=20.0, help="target duration of one batch")
    args = ap.parse_args(argv)
    print(f"# robot_dynamics dynamics benchmark: Python {platform.python_version()}, pinocchio "
          f"{pin.__version__}, numpy {np.__version__}, {platform.machine()}")
    print(f"# microseconds per call, median of {args.batches} batches of ~{args.batch_ms:g} ms; "
          "frame Jacobians in local_world_aligned")
    for name in args.robots:
        model, frame, rows = bench_robot(name, args.batches, args.batch_ms / 1e3)
        kind = "floating base" if model.floating_base else "fixed base"
        print(f"\n## {name}: nq={model.nq} nv={model.nv} bodies={model.tree.nb} ({kind}), frame {frame}")
        print(f"| {'algorithm':<19} | {'raw pin':>9} | {'backend':>9} | {'reference':>10} "
              f"| {'backend/raw':>11} | {'ref/backend':>11} |")
        print(f"|{'-' * 21}|{'-' * 10}:|{'-' * 10}:|{'-' * 11}:|{'-' * 12}:|{'-' * 12}:|")
        for algo, raw, be, ref in rows:
            print(f"| {algo:<19} | {raw:9.2f} | {be:9.2f} | {ref:10.1f} | {be / raw:11.2f} | {ref / be:11.1f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
