"""Every URDF that example-robot-data ships, loaded as a user would (Model.from_urdf_file).

For each file: Pinocchio is the oracle of what is a loadable URDF.  If Pinocchio's own reader refuses
it, so must Model (a ValueError, never another exception).  Otherwise the Model loads it, or refuses it
for the reason stated in REFUSED (not a bug), and then:
- both backends agree to 1e-9 (the self-check, including the frames named by a link AND a joint);
- the load warnings (non-physical inertials, inertia added to a joint that moves none) each name the
  link or joint and the numbers, and `strict=True` refuses exactly the files that warn;
- for a sample (every file that warns, and every third of the rest), MuJoCo's inverse dynamics of the
  simulator built from the same model agrees with Pinocchio's RNEA to 1e-6.

`python test/test_all_urdfs.py` prints the table (loaded / warned / refused, with the reasons).
Cost: about 20 s of one core for the 69 files (self-check on 2 random states each).
"""
import re
import warnings

import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.dynamics import InertiaWarning, Model, PinocchioBackend, self_check
from robot_dynamics.dynamics.robots import robots_dir

ROBOTS = robots_dir()
FILES = sorted(str(p.relative_to(ROBOTS)) for p in ROBOTS.rglob("*.urdf"))
TOL = 1e-9
MUJOCO_TOL = 1e-6

# file -> reason (regex of the ValueError) for a refusal that is not a bug
NO_MOVABLE_JOINT = "no movable joint.*floating_base=True"
REFUSED = {
    "hector_description/robots/quadrotor_base.urdf": NO_MOVABLE_JOINT,   # a quadrotor: only a
    "iris_description/robots/iris_simple.urdf": NO_MOVABLE_JOINT,        # floating base moves it
}
NUMBER = r"-?\d+(\.\d+)?(e[-+]?\d+)?"


def pinocchio_loads(path):
    try:
        pin.buildModelFromUrdf(str(path))
        return True
    except (RuntimeError, ValueError):
        return False


def load(rel, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InertiaWarning)
        return Model.from_urdf_file(ROBOTS / rel, **kw)


def shared_names(model):
    """Names that are both a link and a joint of the URDF (one frame name, two Pinocchio frames)."""
    links = {f.name for f in model.pin_model.frames if f.type == pin.FrameType.BODY}
    joints = {f.name for f in model.pin_model.frames
              if f.type in (pin.FrameType.JOINT, pin.FrameType.FIXED_JOINT)}
    return sorted(links & joints)


def test_every_shipped_urdf_is_listed():
    assert len(FILES) >= 68


@pytest.mark.parametrize("rel", FILES)
def test_urdf(rel):
    path = ROBOTS / rel
    if not pinocchio_loads(path):
        with pytest.raises(ValueError):
            load(rel)
        return
    if rel in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[rel]):
            load(rel)
        m = load(rel, floating_base=True)         # the stated reason holds: a free-flyer moves it
        assert max(self_check(m, n_states=1, tol=TOL).values()) <= TOL
        return
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always", InertiaWarning)
        model = Model.from_urdf_file(path)
    assert [str(w.message) for w in rec if w.category is InertiaWarning] == model.warnings
    for msg in model.warnings:
        assert re.search(r"(URDF link|joint) '[^']+'", msg) and re.search(NUMBER, msg), msg
    if model.warnings:
        with pytest.raises(ValueError, match="strict=True"):
            Model.from_urdf_file(path, strict=True)
    frames = [model.frame_names[-1]] + shared_names(model)
    report = self_check(model, n_states=2, tol=TOL, frames=frames)
    assert max(report.values()) <= TOL
    if model.warnings or FILES.index(rel) % 3 == 0:
        from robot_dynamics.sim import MujocoSim
        sim, P = MujocoSim(model), PinocchioBackend(model)
        rng = np.random.default_rng(1)
        q, v, a = model.random_configuration(rng), rng.normal(size=model.nv), rng.normal(size=model.nv)
        tau = P.rnea(q, v, a)
        err = np.max(np.abs(sim.inverse_dynamics(q, v, a) - tau)) / max(1.0, np.max(np.abs(tau)))
        assert err <= MUJOCO_TOL


def table():
    """Rows (file, status, detail) for every shipped URDF."""
    rows = []
    for rel in FILES:
        if not pinocchio_loads(ROBOTS / rel):
            try:
                load(rel)
                rows.append((rel, "LOADED?", "Pinocchio refuses it"))
            except ValueError as e:
                rows.append((rel, "refused", f"Pinocchio refuses it too: {str(e)[:70]}"))
            continue
        try:
            m = load(rel)
        except ValueError as e:
            rows.append((rel, "refused", str(e)))
            continue
        if m.warnings:
            rows.append((rel, f"warned ({len(m.warnings)})", m.warnings[0]))
        else:
            rows.append((rel, "loaded", f"nv={m.nv}"))
    return rows


if __name__ == "__main__":
    rows = table()
    for rel, status, detail in rows:
        print(f"| {rel} | {status} | {detail} |")
    print({s.split()[0]: sum(r[1].split()[0] == s.split()[0] for r in rows) for s in ("loaded", "warned", "refused")})
