"""Reference backend vs Pinocchio, algorithm by algorithm, on example-robot-data robots and on
randomly generated URDF trees (random topology, joint types, axes, origins, inertias, fixed joints).

Every comparison is the largest absolute difference scaled by the magnitude of the result:
    err = max|pinocchio - reference| / max(1, max|pinocchio|)
"""
import numpy as np
import pytest

from robot_dynamics.dynamics import Model, PinocchioBackend, ReferenceBackend
from robot_dynamics.dynamics.backends import REFERENCES
from robot_dynamics.dynamics.reference import spatial

# Both backends evaluate the same floating-point formulas in a different order: agreement is at the
# 1e-14 level; 1e-9 leaves room for long chains (talos, 50 dof) and still catches any modelling slip
# (a wrong axis, inertia or frame offset shows at 1e-3 or more).
TOL = 1e-9

# (robot, number of random states): few states on the large ones to keep the suite fast
ROBOTS = [
    ("panda", 6),
    ("panda_gripper", 4),           # 2 prismatic finger joints
    ("ur5", 4),
    ("kinova", 4),                  # continuous joints
    ("double_pendulum", 4),
    ("double_pendulum_continuous", 4),
    ("tiago", 4),                   # prismatic torso, continuous wheels
    ("talos_arm_torso", 3),         # a chain cut out of a tree by locking joints
    ("solo12", 4),                  # floating base
    ("talos", 2),                   # floating base, tree, 50 dof
]


def scaled_err(ref, other):
    ref, other = np.asarray(ref, float), np.asarray(other, float)
    return float(np.max(np.abs(ref - other))) / max(1.0, float(np.max(np.abs(ref))))


# ---------------------------------------------------------------- random URDF trees
def _rand_rotation(rng):
    q = rng.normal(size=4)
    return spatial.quat_to_matrix(q / np.linalg.norm(q))


def _xyz(v):
    return " ".join(repr(float(x)) for x in v)


def _random_inertial(rng):
    """A physically valid rigid body: m > 0, principal moments I1 = b + c, I2 = a + c, I3 = a + b with
    a, b, c > 0 (so every triangle inequality holds), principal axes rotated at random."""
    m = rng.uniform(0.2, 3.0)
    a, b, c = rng.uniform(0.002, 0.05, 3)
    R = _rand_rotation(rng)
    Ic = R @ np.diag([b + c, a + c, a + b]) @ R.T
    com = rng.uniform(-0.1, 0.1, 3)
    rpy = rng.uniform(-np.pi, np.pi, 3) * np.array([1.0, 0.45, 1.0])   # the inertial's own origin rpy
    # the <inertia> is given in the inertial frame's axes: undo its rotation
    Ri = spatial.rpy_to_matrix(rpy)
    Ii = (Ri.T @ Ic @ Ri).tolist()                                     # Python floats: exact repr
    m = float(m)
    return (f'<inertial><origin xyz="{_xyz(com)}" rpy="{_xyz(rpy)}"/><mass value="{m!r}"/>'
            f'<inertia ixx="{Ii[0][0]!r}" ixy="{Ii[0][1]!r}" ixz="{Ii[0][2]!r}" iyy="{Ii[1][1]!r}" '
            f'iyz="{Ii[1][2]!r}" izz="{Ii[2][2]!r}"/></inertial>')


def random_tree_urdf(seed, n_links=12, p_fixed=0.2):
    """URDF of a random tree: link k (k >= 1) hangs from a random earlier link, by a revolute,
    continuous, prismatic or (with probability p_fixed) fixed joint with a random axis (sometimes a
    coordinate axis, which Pinocchio models with a specialised joint) and a random origin.  Every
    link moved by a joint has a mass; a link behind a fixed joint may have none."""
    rng = np.random.default_rng(seed)
    out = [f'<robot name="random_tree_{seed}">', '<link name="L0"/>']
    # joint names are shuffled so that the depth-first, name-sorted order differs from creation order
    tags = rng.permutation(n_links)
    for k in range(1, n_links):
        parent = int(rng.integers(0, k))
        jt = "fixed" if rng.random() < p_fixed else str(rng.choice(["revolute", "continuous", "prismatic"]))
        if k == 1 and jt == "fixed":
            jt = "revolute"
        xyz, rpy = rng.uniform(-0.3, 0.3, 3), rng.uniform(-np.pi, np.pi, 3) * np.array([1.0, 0.45, 1.0])
        r = rng.random()
        if r < 0.3:
            axis = np.eye(3)[rng.integers(0, 3)] * rng.choice([1.0, -1.0])
        else:
            axis = rng.normal(size=3)
            axis /= np.linalg.norm(axis)
        j = f'<joint name="j{tags[k]:02d}_{k}" type="{jt}"><parent link="L{parent}"/><child link="L{k}"/>'
        j += f'<origin xyz="{_xyz(xyz)}" rpy="{_xyz(rpy)}"/>'
        if jt != "fixed":
            j += f'<axis xyz="{_xyz(axis)}"/>'
        if jt == "revolute":
            j += '<limit lower="-2.5" upper="2.0" velocity="3.0" effort="50.0"/>'
        elif jt == "prismatic":
            j += '<limit lower="-0.4" upper="0.5" velocity="1.0" effort="200.0"/>'
        out.append(j + "</joint>")
        massless = jt == "fixed" and rng.random() < 0.5
        out.append(f'<link name="L{k}">{"" if massless else _random_inertial(rng)}</link>')
    out.append("</robot>")
    return "\n".join(out)


def random_tree_model(seed, floating_base=False):
    return Model.from_urdf_string(random_tree_urdf(seed), floating_base=floating_base)


# ---------------------------------------------------------------- the comparison
def test_frames(model, n=4):
    """Up to n frames worth checking: one on each leaf body (deepest first), one on a body half-way
    down the tree, and the last frame of the model."""
    t = model.tree
    by_body = {}
    for name, fr in t.frames.items():
        if fr.body >= 0 and name in model.frame_ids:
            by_body[fr.body] = name                  # the last frame declared on that body
    leaves = [i for i in reversed(range(t.nb)) if i not in t.parent and i in by_body]
    out = [by_body[i] for i in leaves][:n - 2]
    mid = by_body.get(t.nb // 2)
    last = [f for f in model.frame_names if f in model.frame_ids and t.frames[f].body >= 0][-1]
    for f in (mid, last):
        if f is not None and f not in out:
            out.append(f)
    return out


test_frames.__test__ = False   # a helper, not a test


def compare_all(model, n_states, seed=0):
    """Largest scaled error of every algorithm over n_states random states: {algorithm: err}."""
    P, R = PinocchioBackend(model), ReferenceBackend(model)
    rng = np.random.default_rng(seed)
    nv, nb = model.nv, model.tree.nb
    frames = test_frames(model)
    errs = {}

    def rec(name, p, r):
        errs[name] = max(errs.get(name, 0.0), scaled_err(p, r))

    for _ in range(n_states):
        q = model.random_configuration(rng)
        v, a, tau = rng.normal(size=nv), rng.normal(size=nv), rng.normal(size=nv) * 5
        fext = rng.normal(size=(nb, 6))
        # copies: returned arrays may be views into each backend's Data
        rec("rnea", P.rnea(q, v, a).copy(), R.rnea(q, v, a))
        rec("rnea_fext", P.rnea(q, v, a, fext).copy(), R.rnea(q, v, a, fext))
        rec("gravity", P.gravity(q).copy(), R.gravity(q))
        rec("nonlinear_effects", P.nonlinear_effects(q, v).copy(), R.nonlinear_effects(q, v))
        rec("mass_matrix", P.mass_matrix(q).copy(), R.mass_matrix(q))
        rec("coriolis_matrix", P.coriolis_matrix(q, v).copy(), R.coriolis_matrix(q, v))
        rec("aba", P.aba(q, v, tau).copy(), R.aba(q, v, tau))
        rec("aba_fext", P.aba(q, v, tau, fext).copy(), R.aba(q, v, tau, fext))
        rec("kinetic_energy", P.kinetic_energy(q, v), R.kinetic_energy(q, v))
        rec("potential_energy", P.potential_energy(q), R.potential_energy(q))
        for f in frames:
            Rp, pp = P.frame_placement(q, f)
            Rr, pr = R.frame_placement(q, f)
            rec("frame_placement", np.r_[Rp.ravel(), pp], np.r_[Rr.ravel(), pr])
            for ref in REFERENCES:
                rec(f"frame_velocity[{ref}]", P.frame_velocity(q, v, f, ref).copy(),
                    R.frame_velocity(q, v, f, ref))
                rec(f"frame_jacobian[{ref}]", P.frame_jacobian(q, f, ref).copy(), R.frame_jacobian(q, f, ref))
                rec(f"frame_jacobian_dot[{ref}]", P.frame_jacobian_dot(q, v, f, ref).copy(),
                    R.frame_jacobian_dot(q, v, f, ref))
    return errs


EXPECTED = {"rnea", "rnea_fext", "gravity", "nonlinear_effects", "mass_matrix", "coriolis_matrix", "aba",
            "aba_fext", "kinetic_energy", "potential_energy", "frame_placement"} | {
    f"{alg}[{ref}]" for alg in ("frame_velocity", "frame_jacobian", "frame_jacobian_dot") for ref in REFERENCES}


def _assert_agree(errs):
    assert set(errs) == EXPECTED
    bad = {k: e for k, e in errs.items() if not e <= TOL}
    assert not bad, f"reference and Pinocchio differ (tolerance {TOL:g}): {bad}"


@pytest.mark.parametrize("robot,n_states", ROBOTS, ids=[r for r, _ in ROBOTS])
def test_reference_matches_pinocchio(robot, n_states):
    _assert_agree(compare_all(Model.from_robot(robot), n_states))


@pytest.mark.parametrize("seed,floating", [(1, False), (2, False), (3, False), (4, True), (5, True)])
def test_random_tree_matches_pinocchio(seed, floating):
    model = random_tree_model(seed, floating)
    t = model.tree
    # a real tree, not a chain: some body has two or more children, and the frames compared lie on
    # different branches (two leaves; a chain, where every parent has one child, fails this)
    assert model.nv >= 6 and any(t.parent.count(p) > 1 for p in set(t.parent) if p >= 0), t.parent
    leaves = [i for i in range(t.nb) if i not in t.parent]
    assert len(leaves) >= 2, t.parent
    _assert_agree(compare_all(model, 4, seed=seed))


def test_random_tree_generator_covers_the_cases():
    """The generated trees exercise what they are meant to: branching, every joint type, fixed joints
    merged into bodies, non-unit-axis joints, and an order of joints differing from creation order."""
    kinds, branching, fixed = set(), False, 0
    for seed in (1, 2, 3, 4, 5):
        urdf = random_tree_urdf(seed)
        fixed += urdf.count('type="fixed"')
        t = Model.from_urdf_string(urdf).tree
        kinds |= set(t.jtype)
        branching |= any(t.parent.count(p) > 1 for p in set(t.parent))
    assert kinds == {"revolute", "continuous", "prismatic"}
    assert branching and fixed > 0
