"""The hold bound on a starved host: the plant's peak joint speed (x its URDF velocity limit) under every
shipped robot x law, the loop before the bound (hold_bound off, the ramp after a trip from the frozen
torque) and now, on two hosts: one answering ~40 % of the states (stalls of 1 + Exp(30 ms) after 5 % of
the steps: what a CPU hog did in CI, 761 of 1900 states) and one answering ~10 % (1 + Exp(40 ms) after
20 %).  ROS-free: test/stalled_loop.py (MuJoCo plant at 1 kHz holding the last command, states 2 ms late,
the arm tapped to 5 % of its velocity limits as the brakes open, the joint speed stop off).  Each cell:
the worst of the seeds.

    python bench/hold_bound.py [--seeds 2]
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from stalled_loop import run  # noqa: E402

HOSTS = {"40 %": (0.05, 30.0), "10 %": (0.2, 40.0)}
LAWS = ("gravity_compensation", "joint_impedance", "computed_torque", "cartesian_impedance")


def worst(robot, law, target, p, mean, new, seeds):
    rs = [run(robot, law, seed=s, p_stall=p, mean_ms=mean, target=target, hold_bound=new, damped_ramp=new)
          for s in range(seeds)]
    r = max(rs, key=lambda r: r["speed"])
    return r["speed"], r["joint"], sum(x["trips"] for x in rs) / len(rs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=2)
    a = ap.parse_args()
    print(f"peak |v_j| / velocity limit_j of the plant (worst of {a.seeds} seeds); 'trips': watchdog trips "
          "per run (mean)")
    print(f"| robot | law | motion | host answers | before | now | worst joint now | trips |")
    print("|---|---|---|---|--:|--:|---|--:|")
    for robot in ("ur5e", "panda", "kinova"):
        for law in LAWS:
            for target in (False, True):
                if target and law == "gravity_compensation":
                    continue
                for host, (p, mean) in HOSTS.items():
                    before, _, _ = worst(robot, law, target, p, mean, False, a.seeds)
                    now, joint, trips = worst(robot, law, target, p, mean, True, a.seeds)
                    print(f"| {robot} | {law} | {'step' if target else 'held'} | {host} | {before:.3g} | "
                          f"{now:.3g} | {joint} | {trips:.1f} |", flush=True)


if __name__ == "__main__":
    main()
