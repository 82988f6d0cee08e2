"""How fast a pushed arm goes back, and how much of that is the law's own pace: the Cartesian law with
the fr3 config's gains (k 300 N/m, k_rot 10 N m/rad) holding franky-sim's start pose on MuJoCo, with
franky-sim's joint friction, damping and rotor inertia (its fr3.xml; soft friction loss, MuJoCo's default
as franky-sim's), the plant adding gravity as a Franka does; pushed along x with 9 N then 18 N, 2 s
each, as bench/franka_push.py pushes franky-sim, then released.  ROS-free, in process.

    .venv/bin/python bench/release_pace.py

Per row, the pushed frame's distance from its start 0.5-5 s after the release [mm], on two models: the
Panda's flange (test/friction_rig.py's rig) and the FR3 with the end effector and TCP franky-sim reports
(the model the Franka bridge builds, friction_rig.fr3_model: what bench/franka_push.py pushes).  Rows:
the law on the same arm without friction or damping (the law's own pace), with the rotor inertia in the
law's model and without it (the URDF alone: the law's damping designed for a lighter arm); the
friction compensated by the loop's identification on that plant (the file as written, its rotor
inertia included), the push measured by an ideal F/T sensor at the frame.  Then the law's task-space
modes on the FR3 at the TCP (K phi = w^2 Lambda phi, Pinocchio, the rotor inertia in M) for k_rot 10
and 30: each critically damped, the slowest sets the release's pace.
"""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from friction_rig import FLANGE, FRANKA, Q_FRANKY, SOFT, file_loop, fr3_model, identify, law_friction, push  # noqa: E402

from robot_dynamics.dynamics import Model  # noqa: E402

TIMES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0)       # s after the release


def modes(model, frame, k_rot, armature):
    """The law's task-space modes at franky-sim's start pose: K phi = w^2 Lambda phi (Lambda at the
    frame, world-aligned axes, from Pinocchio with the rotor inertia), w [rad/s] slowest first, and the
    slowest mode's shape (largest component 1)."""
    import pinocchio as pin
    from scipy.linalg import eigh
    pm = pin.buildModelFromXML(model.urdf)
    pm.armature[:] = armature
    d = pm.createData()
    M = pin.crba(pm, d, Q_FRANKY)
    M = np.triu(M) + np.triu(M, 1).T
    pin.computeJointJacobians(pm, d, Q_FRANKY)
    pin.updateFramePlacements(pm, d)
    J = pin.getFrameJacobian(pm, d, pm.getFrameId(frame), pin.LOCAL_WORLD_ALIGNED)
    lam = np.linalg.inv(J @ np.linalg.solve(M, J.T))
    w2, phi = eigh(np.diag([300.0] * 3 + [k_rot] * 3), lam)
    return np.sqrt(w2), phi[:, 0] / phi[np.argmax(np.abs(phi[:, 0])), 0], lam


def main():
    kw = dict(solref=SOFT, q0=Q_FRANKY, k=300.0, k_rot=10.0, force=9.0, hold=2.0, back=TIMES[-1], settle=1.0,
              adds_gravity=True, trace=TIMES)
    frictionless = {**FRANKA, "friction": np.zeros(7), "damping": np.zeros(7)}
    rows = []
    for name, (model, frame) in (("Panda, flange", (Model.from_robot("panda"), FLANGE)), ("FR3, TCP", fr3_model())):
        run = identify(model, SOFT, plant=FRANKA)
        if not run.ok:
            raise SystemExit(f"identification failed: {run.message}")
        arm = {"armature": list(FRANKA["armature"])}
        cases = [("no friction or damping, the law knows the rotor inertia", frictionless, None, arm, False),
                 ("no friction or damping, the URDF alone", frictionless, None, None, False),
                 ("franky-sim's friction, the file as written, F/T sensor", FRANKA, law_friction(run.params),
                  file_loop(run.params), True)]
        for label, plant, friction, over, sensor in cases:
            r = push(model, friction, plant=plant, loop_over=over, sensor=sensor, frame=frame, **kw)
            rows.append((name, label, r["trace"]))
            print(f"{name} | {label}: {np.round(1e3 * np.array(r['trace']), 2).tolist()}", flush=True)
    model, frame = fr3_model()
    for k_rot in (10.0, 30.0):
        w, shape, lam = modes(model, frame, k_rot, FRANKA["armature"])
        print(f"FR3, TCP, k_rot {k_rot:g}: task-space modes {np.round(w, 2).tolist()} rad/s; the slowest "
              f"[x y z rx ry rz] {np.round(shape, 3).tolist()}; Lambda's pitch {lam[4, 4]:.2f} kg m^2, "
              f"x {lam[0, 0]:.1f} kg, x-pitch {lam[0, 4]:.2f} kg m")
    print("\nCartesian impedance k 300 N/m, k_rot 10 N m/rad at franky-sim's start pose, pushed 9 N then 18 N "
          "(2 s each), released: distance from the start [mm]")
    print("| model | arm | " + " | ".join(f"{t:g} s" for t in TIMES) + " |")
    print("|---|---|" + "--:|" * len(TIMES))
    for name, label, tr in rows:
        print(f"| {name} | {label} | " + " | ".join(f"{1e3 * x:.2f}" for x in tr) + " |")


if __name__ == "__main__":
    main()
