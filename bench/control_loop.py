"""Cost of one ControlLoop cycle (update_state + step) per law on the Panda, in-process, no ROS: what
an in-process front end (the Franka bridge) pays per robot cycle, beside the law alone and the safe
command's step; and the Cartesian law with the friction compensation a file writes, without and with
link-side joint torque sensors (effort_link_side: the gravity torque, the efforts' noise estimate and
the filter each cycle).  Prints a table (microseconds per call: median, p99, max).

    .venv/bin/python bench/control_loop.py [--n 20000]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from robot_dynamics.control import ControlLoop, State  # noqa: E402
from robot_dynamics.dynamics import Model  # noqa: E402

Q0 = np.array([0.1, -0.5, 0.2, -2.0, 0.1, 1.5, 0.3])


def stats(x):
    x = np.asarray(x) * 1e6
    return np.median(x), np.percentile(x, 99), x.max()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    a = ap.parse_args()
    model = Model.from_robot("panda")
    rng = np.random.default_rng(0)
    qs = Q0 + 0.01 * rng.standard_normal((a.n, 7))
    rows = []
    # the friction compensation as an identification writes it (the stiction term on), then with
    # link-side joint torque sensors read from the state's effort (effort_link_side)
    fr = {"cartesian_impedance.friction_compensation": True, "cartesian_impedance.friction_coulomb": [0.8] * 7,
          "cartesian_impedance.friction_viscous": [0.3] * 7, "cartesian_impedance.friction_velocity_scale": [0.002] * 7,
          "cartesian_impedance.friction_stiction": 1.0}
    cases = [(law, law, {}) for law in ("gravity_compensation", "computed_torque", "joint_impedance",
                                        "cartesian_impedance")]
    cases += [("cartesian_impedance, friction compensation", "cartesian_impedance", fr),
              ("the same, effort_link_side", "cartesian_impedance", {**fr, "effort_link_side": True})]
    effort = 0.05 * rng.standard_normal((a.n, 7))
    for name, law, extra in cases:
        loop = ControlLoop.from_params(model, {"controller": law, "watchdog_timeout": 1e9, **extra},
                                       log=lambda *_: None)
        loop.activate(0.0)
        v = np.zeros(7)
        cyc, law_only = [], []
        link = bool(extra.get("effort_link_side"))
        for k in range(a.n):
            now = k * 1e-3
            t0 = time.perf_counter()
            loop.update_state(qs[k], v, now, effort=effort[k] if link else None)
            loop.step(now)
            cyc.append(time.perf_counter() - t0)
        st = State(qs[0].copy(), v, 0.0)
        for k in range(a.n):
            st.q[:] = qs[k]
            t0 = time.perf_counter()
            loop.law.compute(st)
            law_only.append(time.perf_counter() - t0)
        safe = []
        loop.deactivate()
        for k in range(min(a.n, 5000)):
            t0 = time.perf_counter()
            loop.step(100.0 + k * 1e-3)
            safe.append(time.perf_counter() - t0)
        rows.append((name, stats(cyc), stats(law_only), stats(safe)))
    print(f"ControlLoop on the Panda, {a.n} cycles per law (us per call: median / p99 / max)\n")
    print("| law | update_state + step | law.compute alone | safe-command step |")
    print("|---|---|---|---|")
    for law, c, l_, s in rows:
        f = " / ".join
        print(f"| {law} | {f(f'{x:.1f}' for x in c)} | {f(f'{x:.1f}' for x in l_)} | {f(f'{x:.1f}' for x in s)} |")


if __name__ == "__main__":
    main()
