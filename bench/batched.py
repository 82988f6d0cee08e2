#!/usr/bin/env python3
"""Batched reference algorithms vs a Python loop over raw `pin` vs a loop over the single-state reference.

    .venv/bin/python bench/batched.py                      (Panda, N = 1, 10, 100, 1000, 10000)
    .venv/bin/python bench/batched.py --robot ur5 --sizes 1 100 1000

Microseconds per state: for each N, the best of --repeats runs of the whole batch (batched) or of the
loop over its rows (loops), divided by N; the three run in turn within each repeat.  Times are the
process's CPU time (time.process_time), not wall time: on a shared, loaded machine a long batch is
preempted more often than a short one, which wall time would charge to it; and not the thread's, which
would leave out the CPU of BLAS worker threads in the batched calls.  "pin loop" calls
pin.rnea / computeGeneralizedGravity / computeJointTorqueRegressor on each row with Pinocchio's own q (no conversion, no checks); "ref loop"
calls the single-state reference (`reference.rnea`, `reference.gravity`) on each row.  The loops are
cut to --loop-cap rows (per-state cost does not depend on N for a loop) and say so with a '*'.
Nothing here is asserted.
"""
import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from robot_dynamics.dynamics import Model  # noqa: E402
from robot_dynamics.dynamics import reference as ref  # noqa: E402
from robot_dynamics.dynamics.reference.batched import BatchData, gravity_batched, rnea_batched  # noqa: E402
from robot_dynamics.dynamics.reference.regressor import regressor_batched  # noqa: E402


def best_us_per_state(fns, ns, repeats):
    """Best time per state of each fn (run on ns[k] states), the fns interleaved in every repeat so
    that a change of machine load hits all of them alike."""
    best = [float("inf")] * len(fns)
    for fn in fns:
        fn()                                                 # warm up
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return [1e6 * b / n for b, n in zip(best, ns)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robot", default="panda")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000, 10000])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--loop-cap", type=int, default=1000, help="rows timed in the pin loops")
    ap.add_argument("--ref-cap", type=int, default=100, help="rows timed in the reference loops")
    args = ap.parse_args(argv)
    model = Model.from_robot(args.robot)
    tree, pm = model.tree, model.pin_model
    pd, rd, bd = pm.createData(), ref.RefData(tree), BatchData(tree)
    rng = np.random.default_rng(0)
    print(f"# batched reference algorithms, {args.robot} (nv={model.nv}): Python {platform.python_version()}, "
          f"pinocchio {pin.__version__}, numpy {np.__version__}")
    print(f"# microseconds per state, best of {args.repeats}; * = loop timed on its first "
          f"{args.loop_cap} (pin) / {args.ref_cap} (reference) rows")
    print(f"| {'algorithm':<9} | {'N':>6} | {'batched':>9} | {'pin loop':>10} | {'ref loop':>10} "
          f"| {'pin/batched':>11} | {'ref/batched':>11} |")
    print(f"|{'-' * 11}|{'-' * 7}:|{'-' * 10}:|{'-' * 11}:|{'-' * 11}:|{'-' * 12}:|{'-' * 12}:|")
    for N in args.sizes:
        Q = np.array([model.random_configuration(rng) for _ in range(N)])
        V, A = rng.normal(size=(N, model.nv)), rng.normal(size=(N, model.nv))
        Qp = np.array([model.q_to_pin(q) for q in Q])
        npin, nref = min(N, args.loop_cap), min(N, args.ref_cap)
        reps = max(3, min(args.repeats, int(2e5 // N) + 1))

        def pin_loop(f, n):
            return lambda: [f(k) for k in range(n)]
        cases = {
            "rnea": (lambda: rnea_batched(tree, bd, Q, V, A),
                     pin_loop(lambda k: pin.rnea(pm, pd, Qp[k], V[k], A[k]), npin),
                     pin_loop(lambda k: ref.rnea(tree, rd, Q[k], V[k], A[k]), nref)),
            "gravity": (lambda: gravity_batched(tree, bd, Q),
                        pin_loop(lambda k: pin.computeGeneralizedGravity(pm, pd, Qp[k]), npin),
                        pin_loop(lambda k: ref.gravity(tree, rd, Q[k]), nref)),
            "regressor": (lambda: regressor_batched(tree, bd, Q, V, A),
                          pin_loop(lambda k: pin.computeJointTorqueRegressor(pm, pd, Qp[k], V[k], A[k]), npin),
                          None),
        }
        for algo, (batched, pl, rl) in cases.items():
            fns, ns = [batched, pl] + ([rl] if rl else []), [N, npin] + ([nref] if rl else [])
            b, p, *r = best_us_per_state(fns, ns, reps)
            r = r[0] if r else float("nan")
            star_p, star_r = ("*" if npin < N else " "), ("*" if nref < N else " ")
            print(f"| {algo:<9} | {N:>6} | {b:9.2f} | {p:9.2f}{star_p} | {r:9.1f}{star_r} "
                  f"| {p / b:11.2f} | {r / b:11.1f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
