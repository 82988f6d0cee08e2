"""Per-step cost of ControlLoop.step with and without the momentum observer (Panda, joint impedance,
a fixed state), and of observer_wrench (an SVD, called at observer.publish_rate).  Prints a table [us].

    .venv/bin/python bench/observer_loop.py
"""
import time, numpy as np
from robot_dynamics.control import ControlLoop
from robot_dynamics.dynamics import Model
m = Model.from_robot("panda"); q = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])
print("| loop | step median | step p99 | observer_wrench median |")
print("|---|---|---|---|")
for obs in (False, True):
    loop = ControlLoop.from_params(m, {"controller": "joint_impedance", "observer.enabled": obs,
                                       "observer.threshold": [3.0], "observer.frame": "panda_hand_tcp"})
    loop.activate(0.0)
    ts = []; tw = []
    for k in range(3000):
        now = 1e-3 * k
        loop.update_state(q, np.zeros(7), now)
        t0 = time.perf_counter(); loop.step(now); ts.append(time.perf_counter() - t0)
        if obs and k % 10 == 0:
            t0 = time.perf_counter(); loop.estimation.observer_wrench(); tw.append(time.perf_counter() - t0)
    ts = np.array(ts[500:]) * 1e6
    print(f"| observer {'on ' if obs else 'off'} | {np.median(ts):.0f} | {np.percentile(ts, 99):.0f} | "
          f"{(np.median(tw) * 1e6 if tw else 0):.0f} |")
