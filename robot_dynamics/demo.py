"""The main job: load a robot, run the backend self-check and print a dynamics summary."""
import argparse
import sys

import numpy as np

from .dynamics import Model, PinocchioBackend, self_check
from .dynamics.robots import ROBOTS


def summary(model, out=sys.stdout):
    dyn = PinocchioBackend(model)
    q = model.neutral()
    report = self_check(model)
    w = out.write
    w(f"robot {model.name!r} from {model.source}\n")
    w(f"  nq={model.nq} nv={model.nv} floating_base={model.floating_base} frames={len(model.frame_names)}\n")
    w(f"  {'joint':<24}{'type':<12}{'lower':>9}{'upper':>9}{'vel':>8}{'effort':>8}{'g(q0) N m':>12}\n")
    g = dyn.gravity(q)
    off = 6 if model.floating_base else 0
    for k, (n, t) in enumerate(zip(model.joint_names, model.joint_types)):
        w(f"  {n:<24}{t:<12}{model.lower_limits[k]:>9.3f}{model.upper_limits[k]:>9.3f}"
          f"{model.velocity_limits[k]:>8.2f}{model.effort_limits[k]:>8.1f}{g[off + k]:>12.4f}\n")
    M = dyn.mass_matrix(q)
    ev = np.linalg.eigvalsh(M)
    w(f"  mass matrix at q0: eigenvalues in [{ev[0]:.4g}, {ev[-1]:.4g}]\n")
    w("  backend self-check (largest scaled |pinocchio - reference|):\n")
    for k, e in report.items():
        w(f"    {k:<20}{e:.2e}\n")
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--robot", default="panda", help=f"one of {sorted(ROBOTS)}")
    ap.add_argument("--urdf", help="a URDF file instead of --robot")
    args = ap.parse_args(argv)
    model = Model.from_urdf_file(args.urdf) if args.urdf else Model.from_robot(args.robot)
    summary(model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
