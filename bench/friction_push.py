"""Friction compensation pushed (issue 43): the MuJoCo Panda of test/friction_rig.py (per-joint rotor
inertia, damping and dry friction; implicitfast as franky-sim), its friction loss sharp (solref 0.002 s)
or MuJoCo's default soft (0.02 s), identified first by the loop's own run (control/runs/dynamics.py,
from the commands sent), then Cartesian impedance k 450 N/m at the flange pushed along x with F = 5 N,
then 2F, each held 4 s, then released.  ROS-free, in process.

    .venv/bin/python bench/friction_push.py             # the Panda rig (the issue's table)
    .venv/bin/python bench/friction_push.py --franka    # and franky-sim's friction at its start pose

Per row: stiffness from the F -> 2F slope and from the first push alone, the flange's distance from
its start 2 s after the release, the fastest joint over the last 0.5 s of each hold and of the release
(creep); compensations (each file row with the file's rotor inertia, `armature`, in the law's model as
the nodes load it; the row "none" is the URDF alone): none, the identified fv and fc with the fixed
0.01 rad/s band at full size (the file as written before issue 43), the file as written now (identified
velocity scale, band margin 1.5, stiction 1: at rest fc along the law's pull where the law moved the arm
last), that without the stiction term, the file with the push measured by an F/T sensor at the
flange (friction_stiction_sensed 1: the stiction along the law's pull plus J^T of the measured wrench),
and the file with link-side joint torque sensors (effort_link_side: a Franka's tau_J, here MuJoCo's
motor torque less the gear's friction, damping and rotor inertia, with white noise LINK_NOISE: the
stiction along the law's pull plus the environment's torque they measure).

--random N: N plants nobody chose, drawn per seed 0..N-1 (rotor inertia 0.05-0.4 kg m^2, damping 0.05-0.5 N m
s/rad, dry friction 0.2-1.5 N m, uniform per joint, the wrist's scaled down), each sharp and soft: the loop's
identification, then the push without compensation and with the file as written; per plant the identified
velocity scales, the joints the run found held by their static friction in the slow excitation, and
how the first push (5 N) compares with the dry friction (the smallest ratio of its static torque J^T F
to fc over the joints it loads: below 1 that joint moves only if the push's start breaks it free, and a
compensation without a sensor cannot tell the hand's push; the F/T sensor's row, added then, shows the
law with it; the link-side joint torque sensors' row is there for every plant); |dq| both 1.5-2 s after
the release (the arm may still be on its way back) and at rest, 4.5-5 s after it.

--link-sweep: link-side joint torque sensors on random plant 9 (sharp), over the stiction deadband p0
(0.01, 0.05, 0.2 N m) and the sensors' white noise (0, 0.03, 0.1 N m per joint).

--franka: franky-sim's joint friction, damping and rotor inertia (its fr3.xml) on the same Panda
model, at franky-sim's start pose, with config/fr3_cartesian_impedance.yaml's gains (read from it: k
300 N/m, k_rot 10 N m/rad; --k-rot to compare another), 9 N then 18 N, each held 3 s, released 2 s
(creep at rest: the release's over 4.5-5 s after it).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

LINK_NOISE = 0.03        # [N m] white noise on the link-side joint torques (effort_link_side rows)
LINK = f"the file, link-side joint torque sensors (noise {LINK_NOISE} N m)"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from friction_rig import (FRANKA, K_PUSH, Q_FRANKY, SHARP, SOFT, file_loop, identify,  # noqa: E402
                          law_friction, push, random_plant)

from robot_dynamics.dynamics import Model  # noqa: E402


def rows_for(model, name, solref, cases, **kw):
    out = []
    run = identify(model, solref, plant=kw.get("plant"))
    if not run.ok:
        raise SystemExit(f"identification failed: {run.message}")
    fr = law_friction(run.params)
    print(f"{name}: identified velocity scale [rad/s] {np.round(run.bands, 4).tolist()}", flush=True)
    old = {**fr, "friction_velocity_scale": [0.0] * 7, "friction_smoothing": 0.01, "friction_band_margin": 1.0,
           "friction_stiction": 0.0}
    table = {"none": (None, ""), "identified fv, fc; fixed band 0.01 rad/s (before)": (old, ""),
             "identified file as written": (fr, ""),
             "the same, friction_stiction 0": ({**fr, "friction_stiction": 0.0}, ""),
             "the file, the push measured by an F/T sensor": (fr, "F/T"),
             LINK: (fr, "link")}
    for label in cases:
        f, sensor = table[label]
        # a file's row loads all of it: the laws' friction and the rotor inertia (the loop's armature)
        r = push(model, f, solref=solref, loop_over=None if f is None else file_loop(run.params), **sensed(sensor),
                 **kw)
        out.append((name, label, r))
        print(f"  {label}: {r}", flush=True)
    return out


def sensed(kind):
    """push()'s arguments for a sensor kind: '' none, 'F/T' at the flange, 'link' link-side joint torques."""
    if kind == "link":
        return {"link": (np.random.default_rng(0), LINK_NOISE)}
    return {"sensor": kind == "F/T"}


def print_table(title, rows, k):
    def pct(x):
        return f"{x:.0f} ({100 * (x / k - 1):+.1f} %)"
    print(f"\n{title}")
    print("| dry friction | compensation | slope [N/m] | single push [N/m] | back within [mm] | creep max \\|dq\\| [rad/s] |")
    print("|---|---|--:|--:|--:|--:|")
    for name, label, r in rows:
        print(f"| {name} | {label} | {pct(r['k_slope'])} | {pct(r['k_single'])} | {1e3 * r['back']:.2f} | "
              f"{r['creep']:.1e} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--franka", action="store_true", help="also franky-sim's friction at its start pose")
    ap.add_argument("--k-rot", type=float, default=None,
                    help="--franka: this rotation stiffness [N m/rad] instead of the fr3 config's")
    ap.add_argument("--random", type=int, default=0, metavar="N", help="N plants drawn at random (seeds 0..N-1)")
    ap.add_argument("--link-sweep", action="store_true",
                    help="link-side joint torque sensors on random plant 9 (sharp) over p0 and their noise")
    args = ap.parse_args()
    model = Model.from_robot("panda")
    if args.random:
        return random_plants(model, args.random)
    if args.link_sweep:
        return link_sweep(model)
    everything = ["none", "identified fv, fc; fixed band 0.01 rad/s (before)", "identified file as written",
                  "the same, friction_stiction 0", "the file, the push measured by an F/T sensor", LINK]
    rows = []
    for name, solref in (("sharp", SHARP), ("soft", SOFT)):
        rows += rows_for(model, name, solref, everything)
    print_table(f"MuJoCo Panda, Cartesian impedance k {K_PUSH:.0f} N/m, flange pushed along x with 5 N then 10 N "
                "(4 s each), released 2 s", rows, K_PUSH)
    if args.franka:
        import yaml
        task = yaml.safe_load(open(ROOT / "config" / "fr3_cartesian_impedance.yaml"))["/**"]["ros__parameters"][
            "cartesian_impedance"]["task"]
        k, k_rot = task["k_pos_x"], task["k_rot_y"] if args.k_rot is None else args.k_rot
        kw = dict(plant=FRANKA, q0=Q_FRANKY, k=k, k_rot=k_rot, force=9.0, hold=3.0, back=2.0, rest=3.0)
        rows = []
        for name, solref in (("sharp", SHARP), ("soft", SOFT)):
            rows += rows_for(model, name, solref, ["none", "identified file as written",
                                                   "the same, friction_stiction 0",
                                                   "the file, the push measured by an F/T sensor", LINK], **kw)
        print_table(f"franky-sim's friction (fr3.xml) on the Panda at franky-sim's start pose, k {k:.0f} N/m, k_rot "
                    f"{k_rot:g}, 9 N then 18 N (3 s each), released 2 s", rows, k)


def link_sweep(model, seed=9):
    """Link-side joint torque sensors (effort_link_side) on a plant whose loaded joints the 5 N push does
    not break free without a sensor: the file as written with its stiction deadband p0 replaced, white
    noise per joint on the efforts."""
    plant = random_plant(seed)
    run = identify(model, SHARP, plant=plant)
    fr = law_friction(run.params)
    print(f"random plant {seed}, sharp dry friction, the file as written with p0 (friction_stiction_torque) "
          "replaced, link-side joint torque sensors (effort_link_side) with white noise per joint\n")
    print("| p0 [N m] | noise [N m] | slope [N/m] | first push [N/m] | back after 2 s [mm] | at rest \\|dq\\| |")
    print("|--:|--:|--:|--:|--:|--:|")
    for p0 in (0.01, 0.05, 0.2):
        for sigma in (0.0, 0.03, 0.1):
            r = push(model, {**fr, "friction_stiction_torque": p0}, solref=SHARP, plant=plant, rest=3.0,
                     loop_over=file_loop(run.params), link=(np.random.default_rng(1), sigma))
            pct = lambda x: f"{x:.0f} ({100 * (x / K_PUSH - 1):+.1f} %)"  # noqa: E731
            print(f"| {p0} | {sigma} | {pct(r['k_slope'])} | {pct(r['k_single'])} | {1e3 * r['back']:.2f} | "
                  f"{max(r['creep_each']):.1e} |", flush=True)


def breakaway(model, plant, force=5.0):
    """The smallest ratio over the joints a push of `force` along x at the flange loads (|J^T F| over 0.05
    N m) of that torque to the joint's dry friction: below 1 the push alone cannot move that joint."""
    from friction_rig import FLANGE, Q_HOME

    from robot_dynamics.dynamics import make_backend
    J = make_backend(model, "pinocchio").frame_jacobian(Q_HOME, FLANGE, reference="local_world_aligned")
    t = np.abs(J[0] * force)
    on = t > 0.05
    return float(np.min(t[on] / plant["friction"][on]))


def random_plants(model, n):
    print("| plant | dry friction | fc [N m] | identified vs [rad/s] (held) | 5 N / fc | compensation | slope "
          "[N/m] | first push [N/m] | back after 2 s [mm] | \\|dq\\| 1.5-2 s | at rest |")
    print("|---|---|---|---|--:|---|--:|--:|--:|--:|--:|")
    for seed in range(n):
        plant = random_plant(seed)
        ratio = breakaway(model, plant)
        for name, solref in (("sharp", SHARP), ("soft", SOFT)):
            run = identify(model, solref, plant=plant)
            if not run.ok:
                print(f"| {seed} | {name} | identification failed: {run.message} |", flush=True)
                continue
            held = ", ".join(model.joint_names[j] for j in np.flatnonzero(run.stuck)) if run.stuck is not None else ""
            fr = law_friction(run.params)
            cases = [("none", None, ""), ("file as written", fr, ""), ("the file, joint torque sensors", fr, "link")]
            if ratio < 1.0:
                cases.append(("the file, F/T sensor", fr, "F/T"))
            for label, f, sensor in cases:
                r = push(model, f, solref=solref, plant=plant, rest=3.0, **sensed(sensor),
                         loop_over=None if f is None else file_loop(run.params))
                pct = lambda x: f"{x:.0f} ({100 * (x / K_PUSH - 1):+.1f} %)"  # noqa: E731
                print(f"| {seed} | {name} | {np.round(plant['friction'], 2).tolist()} | "
                      f"{np.round(run.bands, 4).tolist()}{f' ({held})' if held else ''} | {ratio:.2f} | {label} | "
                      f"{pct(r['k_slope'])} | {pct(r['k_single'])} | {1e3 * r['back']:.2f} | "
                      f"{r['moving_at_back']:.1e} | {max(r['creep_each']):.1e} |", flush=True)


if __name__ == "__main__":
    main()
