"""Friction compensation pushed (issue 43): the MuJoCo Panda of test/friction_rig.py (per-joint rotor
inertia, damping and dry friction; implicitfast as franky-sim), its friction loss sharp (solref 0.002 s)
or MuJoCo's default soft (0.02 s), identified first by the loop's own run (control/runs/dynamics.py,
from the commands sent), then Cartesian impedance k 450 N/m at the flange pushed along x with F = 5 N,
then 2F, each held 4 s, then released.  ROS-free, in process.

    .venv/bin/python bench/friction_push.py

Per row: stiffness from the F -> 2F slope and from the first push alone, the flange's distance from
its start 2 s after the release, the fastest joint over the last 0.5 s of each hold and of the release
(creep); compensations: none, the identified fv and fc with the fixed 0.01 rad/s band at full size (the
file as written before issue 43), the file as written now (identified velocity scale, band margin 2,
stiction 0.05), and that without the stiction term.
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from friction_rig import K_PUSH, SHARP, SOFT, identify, law_friction, push  # noqa: E402

from robot_dynamics.dynamics import Model  # noqa: E402


def main():
    model = Model.from_robot("panda")
    rows = []
    for name, solref in (("sharp", SHARP), ("soft", SOFT)):
        run = identify(model, solref)
        if not run.ok:
            raise SystemExit(f"identification failed: {run.message}")
        fr = law_friction(run.params)
        print(f"{name}: identified velocity scale [rad/s] {np.round(run.bands, 4).tolist()}", flush=True)
        old = {**fr, "friction_velocity_scale": [0.0] * 7, "friction_smoothing": 0.01, "friction_band_margin": 1.0,
               "friction_stiction": 0.0}
        for label, f in (("none", None), ("identified fv, fc; fixed band 0.01 rad/s (before)", old),
                         ("identified file as written", fr),
                         ("the same, friction_stiction 0", {**fr, "friction_stiction": 0.0})):
            r = push(model, f, solref=solref)
            rows.append((name, label, r))
            print(f"  {label}: {r}", flush=True)

    def pct(k):
        return f"{k:.0f} ({100 * (k / K_PUSH - 1):+.1f} %)"
    print(f"\nMuJoCo Panda, Cartesian impedance k {K_PUSH:.0f} N/m, flange pushed along x with 5 N then 10 N "
          "(4 s each), released 2 s")
    print("| dry friction | compensation | slope [N/m] | single push [N/m] | back within [mm] | creep max \\|dq\\| [rad/s] |")
    print("|---|---|--:|--:|--:|--:|")
    for name, label, r in rows:
        print(f"| {name} | {label} | {pct(r['k_slope'])} | {pct(r['k_single'])} | {1e3 * r['back']:.2f} | "
              f"{r['creep']:.1e} |")


if __name__ == "__main__":
    main()
