"""Friction compensation that stays passive whatever the combination (issue 43's "never injects
energy", swept as issue 41's safety matrix is): in process on the MuJoCo Panda of test/friction_rig.py
at 1 kHz, over what a user configures together: the plant (franky-sim's joint friction at its start
pose, or the rig's own at the home pose; MuJoCo's soft or sharp friction loss), the Cartesian gains
(k 100-1000 N/m, k_rot 5-60 N m/rad), the torque-rate limit (200-5000 N m/s), the compensation's model
(fc 90-100 % and fv 80-100 % of the plant's, each joint's velocity scale 1-3 x the one the loop's
identification finds on that plant), the stiction fraction without a sensor and with one (0-1 each;
the file writes 1), its deadband p0 (0.01-0.2 N m), an F/T sensor at the flange, link-side joint
torque sensors (effort_link_side) or none, with white noise on the reading (up to 0.1 N, 0.03 N m;
0.1 N m: p0 under the noise mapped to the joints as often as over it; the term's dead zone, 4 x that
noise as the loop estimates it from the sensor's samples, is what keeps it from flipping with the
noise at rest), and the rotor inertia in the law's model (the file's `armature`, within 5 % of the
plant's) or not (the URDF alone).

The plant adds gravity itself (a Franka's driver; the law leaves it out, as the fr3 configs do), so the
arm does not sag while a slow torque-rate limit ramps the law in.  Each case pushes the flange along x
(F, then 2 F), releases it, and is judged on the plant (MuJoCo's state): after the release the arm's
kinetic energy never exceeds that of the same law releasing the same push on the plant without any
friction or damping (the ideal arm: a compensation that is at most the plant's friction leaves the rest
dissipative; compensating 1.3 x the model's dry friction fails it), the arm goes back toward where the
law holds it (no farther than the push took it), and it comes to rest: no joint faster than REST over
5.5-6 s after the release (a creep or a limit cycle is not at rest; at a low k_rot the law's own return
is still under way 3 s after it: a case at k_rot 11 moved at 2.1e-3 rad/s then).

test_the_file_as_written_on_plants_nobody_chose draws the plant itself (rotor inertia, damping and dry
friction per joint, as bench/friction_push.py --random) and runs the identification on it first: the
compensation is then the file as written, not a fraction of the plant's.

Not swept: a velocity scale below the plant's.  A band narrower than the one the plant's friction
rises over over-compensates near rest, which is negative damping (control/laws/friction.py): drawn
from 0.002 rad/s up on MuJoCo's soft friction (where the identification finds up to 0.027 at the
wrist), a case cycled at 0.13 rad/s after the release.  The identified scale is what to use.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("mujoco")

from friction_rig import (FRANKA, K_PUSH, PLANT, Q_FRANKY, Q_HOME, RANGES, SHARP, SOFT, file_loop,  # noqa: E402
                          identify, law_friction, push)

from robot_dynamics.dynamics import Model  # noqa: E402

REST = 2e-3                 # rad/s: every joint at the end (the issue's 1e-3 at rest, twice for the noise)
KE_MARGIN = (1.05, 0.005)   # the ideal arm's peak kinetic energy x 1.05 + 5 mJ


@pytest.fixture(scope="module")
def model():
    return Model.from_robot("panda")


@pytest.fixture(scope="module")
def bands(model):
    """Each joint's velocity scale the loop's identification finds, per plant and friction softness."""
    out = {}
    for name, plant in (("franka", FRANKA), ("rig", PLANT)):
        for solref in (SHARP, SOFT):
            run = identify(model, solref, plant=plant)
            assert run.ok, run.message
            out[name, solref] = np.asarray(run.bands, float)
    return out


@st.composite
def cases(draw):
    franka = draw(st.booleans())
    plant, q0 = (FRANKA, Q_FRANKY) if franka else (PLANT, Q_HOME)
    name = "franka" if franka else "rig"
    solref = draw(st.sampled_from([SHARP, SOFT]))
    k = draw(st.floats(100.0, 1000.0))
    k_rot = draw(st.floats(5.0, 60.0))
    force = 0.01 * k * draw(st.floats(0.3, 1.0))     # 2 F within 2 cm: inside the law's pose error clip
    sensor = draw(st.sampled_from(["none", "F/T", "link"]))
    # white noise on the sensor's reading up to 0.1 N and 0.03 N m (a 6-axis sensor's at 1 kHz: tens of
    # mN, a few mN m; a noisy one's several times that); link-side joint torque sensors: up to 0.1 N m
    noise = {"none": None, "F/T": (draw(st.floats(0.0, 0.1)), draw(st.floats(0.0, 0.03))),
             "link": draw(st.floats(0.0, 0.1))}[sensor]
    fr = {"friction_compensation": True,
          "friction_coulomb": list(plant["friction"] * draw(st.floats(0.9, 1.0))),
          "friction_viscous": list(plant["damping"] * draw(st.floats(0.8, 1.0))),
          "vs_scale": draw(st.floats(1.0, 3.0)),
          "friction_stiction": draw(st.floats(0.0, 1.0)),
          "friction_stiction_sensed": draw(st.floats(0.0, 1.0)),
          # the deadband p0 whatever the noise (without the dead zone, p0 0.020 N m under 0.029 N m of
          # moment noise kept a joint at 2.7e-3 rad/s at rest, p0 0.025 under 0.18 N of force noise at 2.1e-3)
          "friction_stiction_torque": draw(st.floats(0.01, 0.2))}
    rate = draw(st.floats(200.0, 5000.0))
    # the law's model with the rotor inertia (the file's armature, within 5 %) or without (the URDF alone)
    armature = list(plant["armature"] * draw(st.floats(0.95, 1.05))) if draw(st.booleans()) else None
    return dict(name=name, plant=plant, q0=q0, solref=solref, k=k, k_rot=k_rot, force=force, sensor=sensor,
                noise=noise, friction=fr, rate=rate, armature=armature)


@pytest.mark.slow                               # 12 cases, two closed-loop MuJoCo runs each
@settings(max_examples=12, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(cases())
# a noisy sensor under the file's p0 (0.08 N, 0.028 N m on the soft rig): without the stiction term's dead
# zone the released arm dithers at 7.9e-3 rad/s (bench/stiction_noise.py)
@example(dict(name="rig", plant=PLANT, q0=Q_HOME, solref=SOFT, k=450.0, k_rot=50.0, force=2.7, sensor="F/T",
              noise=(0.08, 0.028), rate=1000.0, armature=list(PLANT["armature"]),
              friction={"friction_compensation": True, "friction_coulomb": list(PLANT["friction"]),
                        "friction_viscous": list(PLANT["damping"]), "vs_scale": 1.0, "friction_stiction": 1.0,
                        "friction_stiction_sensed": 1.0, "friction_stiction_torque": 0.05}))
def test_the_compensation_injects_no_energy_and_the_released_arm_comes_to_rest(model, bands, case):
    c = case
    fr = dict(c["friction"])
    fr["friction_velocity_scale"] = list(fr.pop("vs_scale") * bands[c["name"], c["solref"]])
    kw = dict(force=c["force"], hold=2.0, back=3.0, settle=0.5, k=c["k"], k_rot=c["k_rot"], q0=c["q0"],
              loop_over={"torque_rate_limit": c["rate"], "armature": c["armature"]}, adds_gravity=True)
    ideal = push(model, None, solref=c["solref"], plant={**c["plant"], "friction": np.zeros(7),
                                                         "damping": np.zeros(7)}, **kw)
    rng = np.random.default_rng(7)
    noise = (rng, *c["noise"]) if c["sensor"] == "F/T" else None
    link = (rng, c["noise"]) if c["sensor"] == "link" else None
    r = push(model, fr, solref=c["solref"], plant=c["plant"], sensor=c["sensor"] == "F/T", noise=noise, link=link,
             rest=3.0, **kw)
    what = {**{key: val for key, val in c.items() if key not in ("plant", "friction")}, **fr}
    assert r["ke_release"] <= KE_MARGIN[0] * ideal["ke_release"] + KE_MARGIN[1], (what, r, ideal)
    assert r["back"] <= r["pushed"] + 1e-5, (what, r)
    assert r["creep_each"][-1] < REST, (what, r)


@st.composite
def plants(draw):
    """A plant nobody chose, as bench/friction_push.py --random draws them: per joint rotor inertia,
    damping and dry friction, each within RANGES."""
    plant = {}
    for key, ((lo, hi), scale) in RANGES.items():
        plant[key] = np.array([draw(st.floats(lo, hi)) * s for s in scale])
    return plant, draw(st.sampled_from([SHARP, SOFT])), draw(st.sampled_from(["none", "F/T", "link"]))


@pytest.mark.slow                               # 8 cases: an identification and two closed-loop runs each
@settings(max_examples=8, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(plants())
def test_the_file_as_written_on_plants_nobody_chose(model, case):
    """What a user gets on an arm nobody tuned for: the plant drawn (RANGES, sharp or soft friction
    loss), the loop's identification (the joint law's defaults, hold_pairing start), the file as
    written, the rig's push (k 450 N/m, 5 N then 10 N, released), with the push measured by an F/T
    sensor at the flange, by link-side joint torque sensors (effort_link_side, white noise 0.03 N m),
    or not at all.  Judged on the plant: every identified dry friction within 2 % of the plant's;
    after the release the arm's kinetic energy at most the ideal arm's (no friction, no damping: the
    compensation injects none), back within 1 mm 2 s after the release, at rest (no joint faster than
    REST over the last 0.5 s of each hold and 4.5-5 s after the release); with a sensor the slope
    within 3 % of k and the first push within 5 %.  Without one a joint the push loads can stay held by
    its static friction under the hand (bench/friction_push.py --random: 4 of 12 sharp plants), which
    nothing in the state tells: the stiffness is not asserted there."""
    plant, solref, sensor = case
    run = identify(model, solref, plant=plant)
    assert run.ok, run.message
    np.testing.assert_allclose(run.estimate.joint_terms(model)["fc"][0], plant["friction"], rtol=0.02)
    fr = law_friction(run.params)
    kw = dict(solref=solref, rest=3.0)
    ideal = push(model, None, plant={**plant, "friction": np.zeros(7), "damping": np.zeros(7)}, **kw)
    r = push(model, fr, plant=plant, sensor=sensor == "F/T", loop_over=file_loop(run.params),
             link=(np.random.default_rng(5), 0.03) if sensor == "link" else None, **kw)
    what = dict(solref=solref, sensor=sensor, bands=run.bands, **{k: np.round(v, 3) for k, v in plant.items()})
    assert r["ke_release"] <= KE_MARGIN[0] * ideal["ke_release"] + KE_MARGIN[1], (what, r, ideal)
    assert r["back"] < 1e-3 and max(r["creep_each"]) < REST, (what, r)
    if sensor != "none":
        assert abs(r["k_slope"] / K_PUSH - 1) < 0.03 and abs(r["k_single"] / K_PUSH - 1) < 0.05, (what, r)
