"""Model building: DH / modified-DH tables against the equivalent URDF, payloads against an
independent oracle, locked joints against the full model, and clear ValueErrors on bad input."""
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from robot_dynamics.dynamics import (InertiaWarning, Model, PinocchioBackend, ReferenceBackend,
                                     SelfCheckError, self_check)
from robot_dynamics.dynamics import robots
from robot_dynamics.dynamics.reference import spatial
from test_dynamics_crosscheck import scaled_err

# Two descriptions of the same robot built along different paths (DH -> URDF text with rpy origins
# vs the published URDF): they differ only by rounding in rpy <-> matrix conversions, ~1e-15.
TOL_MODEL = 1e-9
# A payload's effect against its closed-form oracle (J^T m g, m Jp^T Jp + Jw^T I Jw): rounding only.
TOL_PAYLOAD = 1e-9
# Detaching restores the original inertias exactly (they are copied back, not subtracted).
TOL_DETACH = 1e-12

PANDA_MDH = Path(__file__).resolve().parent.parent / "config" / "panda_mdh.yaml"
BACKENDS = [PinocchioBackend, ReferenceBackend]
BACKEND_IDS = ["pinocchio", "reference"]


def rand_state(model, rng):
    nv = model.nv
    return model.random_configuration(rng), rng.normal(size=nv), rng.normal(size=nv)


def assert_same_dynamics(A, B, qs_a, qs_b, frames, rng, tol=TOL_MODEL):
    """Backends A and B (on two models of one robot) agree on gravity, M, rnea, aba and placements."""
    for qa, qb in zip(qs_a, qs_b):
        v, a = rng.normal(size=A.model.nv), rng.normal(size=A.model.nv)
        assert scaled_err(A.gravity(qa).copy(), B.gravity(qb)) <= tol
        assert scaled_err(A.mass_matrix(qa).copy(), B.mass_matrix(qb)) <= tol
        assert scaled_err(A.rnea(qa, v, a).copy(), B.rnea(qb, v, a)) <= tol
        assert scaled_err(A.aba(qa, v, a).copy(), B.aba(qb, v, a)) <= tol
        for fa, fb in frames:
            Ra, pa = (x.copy() for x in A.frame_placement(qa, fa))
            Rb, pb = B.frame_placement(qb, fb)
            assert scaled_err(np.r_[Ra.ravel(), pa], np.r_[Rb.ravel(), pb]) <= tol, (fa, fb)


# ---------------------------------------------------------------- DH: Panda from its Craig table
def _inertials_behind(urdf, frame_link, links):
    """(mass, com, inertia) of each URDF link in `links`, expressed in `frame_link`'s frame, read from
    the URDF text by walking the joint origins (movable joints at q = 0).  Independent of both
    backends' URDF readers."""
    root = ET.fromstring(urdf)
    joint_of = {j.find("child").get("link"): j for j in root.findall("joint")}
    link_el = {ln.get("name"): ln for ln in root.findall("link")}

    def origin(el):
        o = el.find("origin")
        xyz = [float(x) for x in o.get("xyz", "0 0 0").split()] if o is not None else [0, 0, 0]
        rpy = [float(x) for x in o.get("rpy", "0 0 0").split()] if o is not None else [0, 0, 0]
        return spatial.rpy_to_matrix(rpy), np.array(xyz)

    out = []
    for name in links:
        R, p, cur = np.eye(3), np.zeros(3), name
        while cur != frame_link:                         # pose of `name` in `frame_link`
            j = joint_of[cur]
            Rj, pj = origin(j)
            R, p = Rj @ R, Rj @ p + pj
            cur = j.find("parent").get("link")
        inert = link_el[name].find("inertial")
        Ri, pi = origin(inert)
        ie = inert.find("inertia")
        k = {a: float(ie.get(a)) for a in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
        Ic = np.array([[k["ixx"], k["ixy"], k["ixz"]], [k["ixy"], k["iyy"], k["iyz"]],
                       [k["ixz"], k["iyz"], k["izz"]]])
        m = float(inert.find("mass").get("value"))
        out.append((m, R @ pi + p, (R @ Ri) @ Ic @ (R @ Ri).T))
    return out


HAND = ["panda_hand", "panda_leftfinger", "panda_rightfinger"]


def panda_dh_with_hand():
    """config/panda_mdh.yaml plus the hand and fingers (from panda.urdf) as payloads on the flange."""
    dh = Model.from_dh_yaml(PANDA_MDH)
    urdf = robots.robot_urdf_path("panda").read_text()
    for name, (m, c, Ic) in zip(HAND, _inertials_behind(urdf, "panda_link8", HAND)):
        dh.attach_payload("panda_link8", m, c, Ic, name=name)
    return dh


def test_panda_mdh_table_reads():
    dh = Model.from_dh_yaml(PANDA_MDH)
    urdf = Model.from_robot("panda")
    assert dh.joint_names == urdf.joint_names
    np.testing.assert_array_equal(dh.lower_limits, urdf.lower_limits)
    np.testing.assert_array_equal(dh.upper_limits, urdf.upper_limits)
    np.testing.assert_array_equal(dh.effort_limits, urdf.effort_limits)
    np.testing.assert_array_equal(dh.velocity_limits, urdf.velocity_limits)
    assert {f"panda_link{i}" for i in range(9)} <= set(dh.frame_names)
    assert max(self_check(dh, n_states=2).values()) <= TOL_MODEL


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_panda_mdh_matches_urdf(backend):
    """The Craig-DH Panda (+ hand as payload) and example-robot-data's panda.urdf: same gravity, M,
    rnea, aba, and the same placement of every DH link frame and of the flange."""
    dh, urdf = panda_dh_with_hand(), Model.from_robot("panda")
    A, B = backend(dh), backend(urdf)
    rng = np.random.default_rng(0)
    qs = [dh.random_configuration(rng) for _ in range(4)]
    frames = [(f"panda_link{i}", f"panda_link{i}") for i in range(1, 9)]
    assert_same_dynamics(A, B, qs, qs, frames, rng)


def test_panda_mdh_without_hand_differs_by_the_hand_only():
    """Without the payloads the flange placement is unchanged and gravity is lighter by the hand."""
    bare, full = PinocchioBackend(Model.from_dh_yaml(PANDA_MDH)), PinocchioBackend(Model.from_robot("panda"))
    q = Model.from_robot("panda").random_configuration(np.random.default_rng(1))
    R1, p1 = (x.copy() for x in bare.frame_placement(q, "panda_link8"))
    R2, p2 = full.frame_placement(q, "panda_link8")
    assert scaled_err(np.r_[R1.ravel(), p1], np.r_[R2.ravel(), p2]) <= TOL_MODEL
    assert np.max(np.abs(bare.gravity(q).copy() - full.gravity(q))) > 0.1


# ---------------------------------------------------------------- DH: standard vs modified
# A 3-dof arm (revolute, revolute with an angle offset, prismatic with an angle offset), written
# once in standard DH (a_i, alpha_i, d_i, theta_i) ...
STD = [  # name, type, a, alpha, d, theta, mass, com (std frame i), principal moments
    ("j1", "revolute", 0.05, np.pi / 2, 0.35, 0.0, 3.0, [0.0, -0.15, 0.02], [0.04, 0.035, 0.012]),
    ("j2", "revolute", 0.40, 0.0, 0.0, 0.3, 2.0, [-0.2, 0.01, 0.03], [0.005, 0.03, 0.028]),
    ("j3", "prismatic", 0.05, -np.pi / 2, 0.1, 0.2, 1.2, [0.01, 0.05, -0.04], [0.006, 0.004, 0.0035]),
]
LIMITS = {"revolute": {"lower": -2.5, "upper": 2.5, "velocity": 2.0, "effort": 100.0},
          "prismatic": {"lower": -0.2, "upper": 0.3, "velocity": 0.5, "effort": 300.0}}


def _std_table():
    quat = np.array([0.1, -0.2, 0.3, 0.9])
    Rp = spatial.quat_to_matrix(quat / np.linalg.norm(quat))   # principal axes tilted: a full tensor
    joints = []
    for name, jt, a, alpha, d, theta, m, com, mom in STD:
        Ic = Rp @ np.diag(mom) @ Rp.T
        joints.append(dict(name=name, type=jt, a=a, alpha=alpha, d=d, theta=theta, link=f"{name}_link",
                           mass=m, com=list(com), inertia=[Ic[0, 0], Ic[0, 1], Ic[0, 2], Ic[1, 1], Ic[1, 2],
                                                           Ic[2, 2]], limits=LIMITS[jt]))
    return {"name": "arm3", "convention": "standard", "joints": joints, "tool": {"name": "tool"}}


def _to_modified(std):
    """... and converted to modified DH by hand: joint i takes (a, alpha) of standard joint i-1 and
    keeps (d_i, theta_i); standard frame i sits at Tx(a_i) Rx(alpha_i) in modified frame i, so the
    inertial moves by that, and the tool (at standard frame 3) is at Tx(a_3) Rx(alpha_3)."""
    mod = {"name": "arm3", "convention": "modified", "joints": []}
    prev_a, prev_alpha = 0.0, 0.0
    for e in std["joints"]:
        R = spatial.rotation_about(np.array([1.0, 0.0, 0.0]), e["alpha"])
        p = np.array([e["a"], 0.0, 0.0])
        i = e["inertia"]
        Ic = np.array([[i[0], i[1], i[2]], [i[1], i[3], i[4]], [i[2], i[4], i[5]]])
        Im = R @ Ic @ R.T
        mod["joints"].append(dict(e, a=prev_a, alpha=prev_alpha, com=list(p + R @ np.array(e["com"])),
                                  inertia=[Im[0, 0], Im[0, 1], Im[0, 2], Im[1, 1], Im[1, 2], Im[2, 2]]))
        prev_a, prev_alpha = e["a"], e["alpha"]
    mod["tool"] = {"name": "tool", "xyz": [prev_a, 0.0, 0.0], "rpy": [prev_alpha, 0.0, 0.0]}
    return mod


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_standard_and_modified_dh_give_the_same_robot(backend):
    std = _std_table()
    ms, mm = Model.from_dh(std), Model.from_dh(_to_modified(std))
    assert ms.joint_types == mm.joint_types == ["revolute", "revolute", "prismatic"]
    rng = np.random.default_rng(4)
    qs = [ms.random_configuration(rng) for _ in range(4)]
    # the tool is the same frame in both; the link frames differ (standard frame i is at the distal end)
    assert_same_dynamics(backend(ms), backend(mm), qs, qs, [("tool", "tool")], rng)
    assert max(self_check(ms, n_states=2).values()) <= TOL_MODEL
    assert max(self_check(mm, n_states=2).values()) <= TOL_MODEL


def test_standard_dh_frames_are_the_dh_frames():
    """Standard DH: frame i = frame i-1 . Rz(q_i + theta_i) Tz(d_i) Tx(a_i) Rx(alpha_i), by hand."""
    std = _std_table()
    P = PinocchioBackend(Model.from_dh(std))
    q = np.array([0.4, -0.7, 0.12])
    T = np.eye(4)
    for k, (name, jt, a, alpha, d, theta, *_) in enumerate(STD):
        th, dd = (theta + q[k], d) if jt == "revolute" else (theta, d + q[k])
        A = np.eye(4)
        A[:3, :3] = spatial.rotation_about(np.array([0, 0, 1.0]), th) @ spatial.rotation_about(
            np.array([1.0, 0, 0]), alpha)
        A[:3, 3] = spatial.rotation_about(np.array([0, 0, 1.0]), th) @ np.array([a, 0, 0]) + [0, 0, dd]
        T = T @ A
        Rf, pf = P.frame_placement(q, f"{name}_link")
        assert scaled_err(np.r_[T[:3, :3].ravel(), T[:3, 3]], np.r_[Rf.ravel(), pf]) <= TOL_MODEL, name


# ---------------------------------------------------------------- payload
@pytest.mark.parametrize("frame", ["panda_hand_tcp", "panda_link5"])
def test_payload_changes_dynamics_by_exactly_its_contribution(frame):
    """Oracle, from the frame Jacobian of the unloaded model: the payload's centre of mass moves with
    Jp = Jv - [R c]x Jw (local_world_aligned), so the gravity torque grows by -Jp^T m g and the mass
    matrix by m Jp^T Jp + Jw^T (R Ic R^T) Jw.  Backends built before the attach see it too."""
    model = Model.from_robot("panda")
    P, R = PinocchioBackend(model), ReferenceBackend(model)
    m, c = 1.7, np.array([0.02, -0.01, 0.06])
    Ic = np.array([[0.004, 0.0005, 0.0], [0.0005, 0.003, 0.0002], [0.0, 0.0002, 0.005]])
    rng = np.random.default_rng(5)
    qs = [model.random_configuration(rng) for _ in range(3)]
    before = []
    for q in qs:
        Rf, _ = (x.copy() for x in P.frame_placement(q, frame))
        J = P.frame_jacobian(q, frame, "local_world_aligned").copy()
        Jp = J[:3] - spatial.skew(Rf @ c) @ J[3:]
        dg = -Jp.T @ (m * model.gravity)
        dM = m * Jp.T @ Jp + J[3:].T @ (Rf @ Ic @ Rf.T) @ J[3:]
        before.append((P.gravity(q).copy(), P.mass_matrix(q).copy(), dg, dM))
    model.attach_payload(frame, m, c, Ic)
    for q, (g0, M0, dg, dM) in zip(qs, before):
        for B in (P, R):
            assert scaled_err(g0 + dg, B.gravity(q)) <= TOL_PAYLOAD, B.name
            assert scaled_err(M0 + dM, B.mass_matrix(q)) <= TOL_PAYLOAD, B.name
    model.detach_payload()
    for q, (g0, M0, _, _) in zip(qs, before):
        for B in (P, R):
            assert scaled_err(g0, B.gravity(q)) <= TOL_DETACH, B.name
            assert scaled_err(M0, B.mass_matrix(q)) <= TOL_DETACH, B.name
    assert max(self_check(model, n_states=2).values()) <= TOL_MODEL


def test_payloads_add_and_replace_by_name():
    model = Model.from_robot("panda")
    P = PinocchioBackend(model)
    q = model.random_configuration(np.random.default_rng(6))
    g0 = P.gravity(q).copy()
    model.attach_payload("panda_hand_tcp", 1.0, [0, 0, 0.05])
    g1 = P.gravity(q).copy()
    model.attach_payload("panda_hand_tcp", 1.0, [0, 0, 0.05], name="second")
    assert scaled_err(g0 + 2 * (g1 - g0), P.gravity(q)) <= TOL_PAYLOAD       # two equal payloads
    model.attach_payload("panda_hand_tcp", 2.0, [0, 0, 0.05])                  # replaces "payload"
    assert scaled_err(g0 + 3 * (g1 - g0), P.gravity(q)) <= TOL_PAYLOAD
    model.detach_payload("second")
    model.detach_payload()
    assert scaled_err(g0, P.gravity(q)) <= TOL_DETACH
    with pytest.raises(ValueError, match="no payload named 'payload'"):
        model.detach_payload()


# ---------------------------------------------------------------- locked joints
@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_locked_joints_equal_full_model_with_joints_held(backend):
    """Panda with joints 3 and 5 locked at given angles = the 7-dof Panda with those joints held
    there (zero velocity and acceleration): the reduced M, g, rnea are the sub-blocks of the full ones."""
    active = ["panda_joint1", "panda_joint2", "panda_joint4", "panda_joint6", "panda_joint7"]
    held = {"panda_joint3": 0.4, "panda_joint5": -0.7}
    full = Model.from_robot("panda")
    red = Model.from_robot("panda", active_joints=active, locked_joints=held)
    assert red.joint_names == active
    idx = [full.joint_names.index(n) for n in active]
    F, Rd = backend(full), backend(red)
    rng = np.random.default_rng(7)
    for _ in range(3):
        q, v, a = rand_state(red, rng)
        qf, vf, af = np.zeros(7), np.zeros(7), np.zeros(7)
        qf[idx], vf[idx], af[idx] = q, v, a
        for n, x in held.items():
            qf[full.joint_names.index(n)] = x
        assert scaled_err(F.gravity(qf)[idx], Rd.gravity(q)) <= TOL_MODEL
        assert scaled_err(F.mass_matrix(qf)[np.ix_(idx, idx)], Rd.mass_matrix(q)) <= TOL_MODEL
        assert scaled_err(F.rnea(qf, vf, af)[idx], Rd.rnea(q, v, a)) <= TOL_MODEL
        Rf, pf = (x.copy() for x in F.frame_placement(qf, "panda_hand_tcp"))
        Rr, pr = Rd.frame_placement(q, "panda_hand_tcp")
        assert scaled_err(np.r_[Rf.ravel(), pf], np.r_[Rr.ravel(), pr]) <= TOL_MODEL


def test_talos_arm_torso_is_talos_with_the_rest_held_at_neutral():
    """robots.py's talos_arm_torso (active joints of the full Talos, the rest locked at 0 clamped into
    the limits) against the full fixed-base Talos held at its neutral configuration."""
    full, red = Model.from_robot("talos_fixed"), Model.from_robot("talos_arm_torso")
    idx = [full.joint_names.index(n) for n in red.joint_names]
    F, Rd = PinocchioBackend(full), ReferenceBackend(red)
    rng = np.random.default_rng(8)
    for _ in range(2):
        q, v, a = rand_state(red, rng)
        qf, vf, af = full.neutral(), np.zeros(full.nv), np.zeros(full.nv)
        qf[idx], vf[idx], af[idx] = q, v, a
        assert scaled_err(F.gravity(qf)[idx], Rd.gravity(q)) <= TOL_MODEL
        assert scaled_err(F.mass_matrix(qf)[np.ix_(idx, idx)], Rd.mass_matrix(q)) <= TOL_MODEL
        assert scaled_err(F.rnea(qf, vf, af)[idx], Rd.rnea(q, v, a)) <= TOL_MODEL


# ---------------------------------------------------------------- bad input
INERTIAL = '<inertial><mass value="{m}"/><inertia ixx="{ixx}" ixy="0" ixz="0" iyy="{iyy}" iyz="0" izz="{izz}"/></inertial>'


def two_link_urdf(jtype="revolute", limit=True, m=1.0, ixx=0.01, iyy=0.01, izz=0.01, extra=""):
    lim = '<limit lower="-1" upper="1" velocity="1" effort="1"/>' if limit else ""
    return (f'<robot name="r"><link name="base"/>'
            f'<link name="l1">{INERTIAL.format(m=m, ixx=ixx, iyy=iyy, izz=izz)}</link>'
            f'<joint name="j1" type="{jtype}"><parent link="base"/><child link="l1"/>'
            f'<origin xyz="0 0 0.1"/><axis xyz="0 0 1"/>{lim}</joint>{extra}</robot>')


def test_two_link_urdf_is_valid():
    m = Model.from_urdf_string(two_link_urdf())
    assert m.joint_names == ["j1"]


@pytest.mark.parametrize("urdf,match", [
    ('<robot name="r"><link name="a"></robot>', "malformed XML"),
    ("", "empty robot description"),
    ('<model name="r"/>', "expected <robot>"),
    (two_link_urdf(jtype="floating"), "unsupported type 'floating'"),
    (two_link_urdf(jtype="planar"), "unsupported type 'planar'"),
    (two_link_urdf(limit=False), "revolute joint 'j1' needs a <limit>"),
    (two_link_urdf(jtype="prismatic", limit=False), "prismatic joint 'j1' needs a <limit>"),
    (two_link_urdf(extra='<link name="l2"/><joint name="j2" type="planar"><parent link="l1"/>'
                         '<child link="l2"/></joint>'), "unsupported type 'planar'"),
    (two_link_urdf(extra='<joint name="j2" type="fixed"><parent link="l1"/><child link="nowhere"/></joint>'),
     "unknown link 'nowhere'"),
    (two_link_urdf(jtype="fixed"), "no movable joint"),
], ids=["malformed", "empty", "not-robot", "floating",
        "planar", "no-limit-revolute", "no-limit-prismatic", "planar-inside-tree", "unknown-link",
        "no-movable-joint"])
def test_bad_urdf_raises_clear_valueerror(urdf, match):
    with pytest.raises(ValueError, match=match):
        Model.from_urdf_string(urdf)


def test_missing_urdf_file():
    with pytest.raises(ValueError, match="URDF file not found"):
        Model.from_urdf_file("/nonexistent/robot.urdf")


def test_unknown_joint_names():
    with pytest.raises(ValueError, match="unknown joint 'nope'"):
        Model.from_robot("panda", active_joints=["panda_joint1", "nope"])
    with pytest.raises(ValueError, match="unknown joint 'elbow'"):
        Model.from_robot("panda", locked_joints={"elbow": 0.1})
    with pytest.raises(ValueError, match="unknown robot"):
        Model.from_robot("no_such_robot")


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_unknown_frame_and_reference(backend):
    model = Model.from_robot("panda")
    dyn, q = backend(model), model.neutral()
    for call in (lambda: dyn.frame_placement(q, "nope"), lambda: dyn.frame_jacobian(q, "nope"),
                 lambda: dyn.frame_velocity(q, q, "nope"), lambda: dyn.frame_jacobian_dot(q, q, "nope")):
        with pytest.raises(ValueError, match="unknown frame 'nope'"):
            call()
    with pytest.raises(ValueError, match="unknown reference 'global'"):
        dyn.frame_jacobian(q, "panda_hand_tcp", "global")
    with pytest.raises(ValueError, match="unknown frame 'nope'"):
        model.attach_payload("nope", 1.0)


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_wrong_length_and_non_finite_vectors(backend):
    model = Model.from_robot("panda")
    dyn = backend(model)
    q, v, a = model.neutral(), np.zeros(7), np.zeros(7)
    with pytest.raises(ValueError, match=r"q: expected 7 values, got shape \(6,\)"):
        dyn.rnea(q[:6], v, a)
    with pytest.raises(ValueError, match=r"v: expected 7 values"):
        dyn.nonlinear_effects(q, np.zeros(8))
    with pytest.raises(ValueError, match=r"a: expected 7 values"):
        dyn.rnea(q, v, np.zeros(6))
    with pytest.raises(ValueError, match=r"tau: expected 7 values"):
        dyn.aba(q, v, np.zeros(3))
    with pytest.raises(ValueError, match=r"fext: expected a finite \(7, 6\) array"):
        dyn.rnea(q, v, a, np.zeros((6, 6)))
    with pytest.raises(ValueError, match="not a numeric vector"):
        dyn.gravity(["a"] * 7)
    for which in ("q", "v", "a"):
        x = {"q": q.copy(), "v": v.copy(), "a": a.copy()}
        x[which][3] = np.nan
        with pytest.raises(ValueError, match=rf"{which}: nan at panda_joint4 \(values must be finite\)"):
            dyn.rnea(x["q"], x["v"], x["a"])
    # a NaN in any joint reaches every algorithm's check, also where the result does not depend on
    # that joint (M never depends on the first joint's angle)
    for k in range(7):
        qn = q.copy()
        qn[k] = np.nan
        for call in (lambda: dyn.mass_matrix(qn), lambda: dyn.gravity(qn), lambda: dyn.rnea(qn, v, a),
                     lambda: dyn.nonlinear_effects(qn, v), lambda: dyn.coriolis_matrix(qn, v),
                     lambda: dyn.aba(qn, v, a), lambda: dyn.kinetic_energy(qn, v),
                     lambda: dyn.frame_jacobian(qn, "panda_hand_tcp")):
            with pytest.raises(ValueError, match="finite"):
                call()
    v_inf = v.copy()
    v_inf[0] = np.inf
    with pytest.raises(ValueError, match="must be finite"):
        dyn.mass_matrix(q + v_inf)
    fext = np.zeros((7, 6))
    fext[2, 4] = np.nan
    with pytest.raises(ValueError, match="fext"):
        dyn.aba(q, v, a, fext)


def test_bad_payload():
    model = Model.from_robot("panda")
    with pytest.raises(ValueError, match="mass must be a finite number >= 0"):
        model.attach_payload("panda_hand_tcp", -0.5)
    with pytest.raises(ValueError, match="triangle inequality"):
        model.attach_payload("panda_hand_tcp", 1.0, inertia=[0.01, 0, 0, 0.01, 0, 0.05])
    with pytest.raises(ValueError, match="not positive definite"):
        model.attach_payload("panda_hand_tcp", 1.0, inertia=np.diag([0.01, 0.01, -0.01]))
    with pytest.raises(ValueError, match="com must be 3 finite numbers"):
        model.attach_payload("panda_hand_tcp", 1.0, com=[0, np.nan, 0])
    with pytest.raises(ValueError, match="fixed to the world"):
        model.attach_payload("panda_link0", 1.0)
    assert model.payloads == {}


def _panda_table():
    import yaml
    return yaml.safe_load(PANDA_MDH.read_text())


@pytest.mark.parametrize("edit,match", [
    (lambda t: t["joints"][2].update(mass=float("inf")), "joint 'panda_joint3'.*mass must be finite"),
    (lambda t: t["joints"][1].update(a="x"), "panda_joint2.*a='x' is not a number"),
    (lambda t: t["joints"][1].update(d=float("nan")), "panda_joint2.*d must be finite"),
    (lambda t: t["joints"][4].update(type="spherical"), "panda_joint5.*type must be"),
    (lambda t: t["joints"][4].update(com=[0, 0]), "panda_joint5.*com needs 3 numbers"),
    (lambda t: t.update(convention="craig"), "convention must be 'modified' or 'standard'"),
    (lambda t: t.update(joints=[]), "non-empty 'joints' list"),
], ids=["infinite-mass", "not-a-number", "nan", "joint-type", "com-length",
        "convention", "no-joints"])
def test_bad_dh_table_raises_clear_valueerror(edit, match):
    table = _panda_table()
    edit(table)
    with pytest.raises(ValueError, match=match):
        Model.from_dh(table)


@pytest.mark.parametrize("edit,match", [
    (lambda t: t["joints"][2].update(mass=-3.0), "link 'panda_link3'.*negative mass -3"),
    (lambda t: t["joints"][0].update(inertia=[0.1, 0, 0, 0.1, 0, 0.5]), "panda_link1.*triangle inequality"),
    (lambda t: t["joints"][0].update(inertia=[0.1, 0, 0, 0.1, 0, -0.01]), "panda_link1.*not positive definite"),
], ids=["negative-mass", "triangle", "non-pd"])
def test_non_physical_dh_table_warns_and_strict_refuses(edit, match):
    table = _panda_table()
    edit(table)
    with pytest.warns(InertiaWarning, match=match):
        Model.from_dh(table)
    with pytest.raises(ValueError, match="strict=True.*" + match):
        Model.from_dh(table, strict=True)


# ---- models a user brings: non-physical inertials, massless joints, name clashes, xacro ----
@pytest.mark.parametrize("m,ixx,iyy,izz,match", [
    (-1.0, 0.01, 0.01, 0.01, r"negative mass -1 kg"),
    (1.0, -0.01, 0.01, 0.01, r"not positive definite \(eigenvalues \[-0.01"),
    (1.0, 0.01, 0.01, 0.05, r"triangle inequality I1 \+ I2 >= I3 \(0.02 < 0.05\)"),
    (0.0, 0.02, 0.02, 0.03, r"zero mass with a non-zero rotational inertia"),
], ids=["negative-mass", "non-pd", "triangle", "zero-mass-with-inertia"])
@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_non_physical_inertia_warns_and_keeps_the_urdf_values(m, ixx, iyy, izz, match, backend):
    """Loaded with an InertiaWarning naming the link and the numbers, listed in model.warnings, and
    computed with the URDF's values: one body on a z joint at its centre of mass has M = izz."""
    urdf = two_link_urdf(m=m, ixx=ixx, iyy=iyy, izz=izz)
    with pytest.warns(InertiaWarning, match="URDF link 'l1': .*" + match):
        model = Model.from_urdf_string(urdf)
    assert len(model.warnings) == 1 and re.search(match, model.warnings[0])
    assert backend(model).mass_matrix(np.zeros(1))[0, 0] == pytest.approx(izz, abs=1e-15)
    assert self_check(model, n_states=2).warnings == model.warnings
    with pytest.raises(ValueError, match=r"strict=True\): URDF link 'l1': .*" + match):
        Model.from_urdf_string(urdf, strict=True)


def massless_tail_urdf():
    """l1 (1 kg) on revolute j1; then l2 (no <inertial>) on revolute j2 and l3 (no <inertial>) on
    prismatic j3: j2 and j3 move nothing, two zero rows of M."""
    lim = '<limit lower="-1" upper="1" velocity="1" effort="1"/>'
    return ('<robot name="r"><link name="base"/>'
            f'<link name="l1">{INERTIAL.format(m=1.0, ixx=0.01, iyy=0.01, izz=0.01)}</link>'
            '<link name="l2"/><link name="l3"/>'
            f'<joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><axis xyz="0 0 1"/>{lim}</joint>'
            f'<joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/>'
            f'<origin xyz="0.3 0 0"/><axis xyz="0 0 1"/>{lim}</joint>'
            f'<joint name="j3" type="prismatic"><parent link="l2"/><child link="l3"/><axis xyz="0 0 1"/>{lim}</joint>'
            '</robot>')


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_massless_joints_get_the_documented_inertia_and_m_stays_positive_definite(backend):
    from robot_dynamics.dynamics.model import MIN_JOINT_INERTIA as eps
    with pytest.warns(InertiaWarning, match="joint 'j[23]' moves no inertia"):
        model = Model.from_urdf_string(massless_tail_urdf())
    assert [w.split()[1] for w in model.warnings] == ["'j2'", "'j3'"]
    assert "1e-06 kg m^2 added to link 'l2'" in model.warnings[0]
    assert "1e-06 kg added to link 'l3'" in model.warnings[1]
    dyn = backend(model)
    q = np.array([0.2, -0.4, 0.0])
    M = dyn.mass_matrix(q)
    # j2 turns l2's isotropic rotor (eps) and l3's point mass (eps) on its axis; j3 lifts eps kg;
    # j1 adds them to its own 0.01 + 0.3^2 lever arm for l3's mass
    assert M[1, 1] == pytest.approx(eps, rel=1e-12) and M[2, 2] == pytest.approx(eps, rel=1e-12)
    assert M[0, 0] == pytest.approx(0.01 + eps + eps * 0.3 ** 2, rel=1e-12)
    np.linalg.cholesky(M)
    v, tau = np.array([0.3, -0.1, 0.2]), np.array([0.5, 1e-7, -2e-7])
    a = dyn.aba(q, v, tau)
    assert np.all(np.isfinite(a))
    assert np.allclose(a, np.linalg.solve(M, tau - dyn.nonlinear_effects(q, v)), rtol=1e-9, atol=1e-9)
    # gravity is the URDF's up to the documented eps kg lifted by j3 (the rotor has no mass)
    assert np.allclose(dyn.gravity(q), [0.0, 0.0, eps * 9.81], atol=1e-15)
    assert max(self_check(model, n_states=3).values()) <= 1e-9


def test_massless_joints_without_regularisation_are_refused_by_the_self_check():
    with pytest.warns(InertiaWarning):
        model = Model.from_urdf_string(massless_tail_urdf(), min_joint_inertia=0)
    M = PinocchioBackend(model).mass_matrix(np.zeros(3))
    assert np.all(M[1:, :] == 0.0)
    with pytest.raises(SelfCheckError, match="not positive definite.*load warnings: joint 'j2'"):
        self_check(model, n_states=1)
    with pytest.raises(ValueError, match=r"strict=True\): joint 'j2' moves no inertia"):
        Model.from_urdf_string(massless_tail_urdf(), strict=True)


def shared_name_urdf():
    """anymal_c's pattern: link 'hip' fixed on l1 at x = 0.2, and a joint also called 'hip' whose
    parent is that link; the joint turns 'thigh' about y."""
    lim = '<limit lower="-3" upper="3" velocity="1" effort="1"/>'
    inert = INERTIAL.format(m=1.0, ixx=0.01, iyy=0.01, izz=0.01)
    return ('<robot name="r"><link name="base"/>'
            f'<link name="l1">{inert}</link><link name="hip"/><link name="thigh">{inert}</link>'
            f'<joint name="j1" type="revolute"><parent link="base"/><child link="l1"/>'
            f'<origin xyz="0 0 0.1"/><axis xyz="0 0 1"/>{lim}</joint>'
            '<joint name="f" type="fixed"><parent link="l1"/><child link="hip"/><origin xyz="0.2 0 0"/></joint>'
            f'<joint name="hip" type="revolute"><parent link="hip"/><child link="thigh"/><axis xyz="0 1 0"/>{lim}</joint>'
            '</robot>')


@pytest.mark.parametrize("backend", BACKENDS, ids=BACKEND_IDS)
def test_link_and_joint_of_the_same_name_resolve_to_the_link(backend):
    """The name is the link's frame: it turns with j1 only (the joint's own frame is 'thigh')."""
    model = Model.from_urdf_string(shared_name_urdf())
    dyn = backend(model)
    q1, q2 = 0.7, -1.1
    R, p = dyn.frame_placement(np.array([q1, q2]), "hip")
    assert np.allclose(p, [0.2 * np.cos(q1), 0.2 * np.sin(q1), 0.1], atol=1e-15)
    assert np.allclose(R, spatial.rotation_about(np.array([0.0, 0, 1]), q1), atol=1e-15)
    J = dyn.frame_jacobian(np.array([q1, q2]), "hip", "world")
    assert np.allclose(J[:, 1], 0.0)                       # the joint 'hip' does not move the link
    Rt, _ = dyn.frame_placement(np.array([q1, q2]), "thigh")
    assert np.allclose(Rt, spatial.rotation_about(np.array([0.0, 0, 1]), q1)
                       @ spatial.rotation_about(np.array([0.0, 1, 0]), q2), atol=1e-15)
    assert max(self_check(model, n_states=2, frames=["hip", "thigh"]).values()) <= 1e-9


MACROS_XACRO = """<?xml version="1.0"?>
<robot xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:macro name="arm_link" params="name mass length">
    <link name="${name}">
      <inertial><origin xyz="${length} 0 0"/><mass value="${mass}"/>
        <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.001" iyz="0" izz="0.001"/></inertial>
    </link>
  </xacro:macro>
</robot>
"""
ROBOT_XACRO = """<?xml version="1.0"?>
<robot name="xarm" xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:arg name="mass" default="1.0"/>
  <xacro:arg name="length" default="0.5"/>
  <xacro:arg name="prefix" default=""/>
  <xacro:include filename="macros.xacro"/>
  <xacro:property name="p" value="$(arg prefix)"/>
  <link name="${p}base"/>
  <xacro:arm_link name="${p}link1" mass="$(arg mass)" length="$(arg length)"/>
  <joint name="${p}joint1" type="revolute">
    <parent link="${p}base"/><child link="${p}link1"/><axis xyz="0 1 0"/>
    <limit lower="-3" upper="3" velocity="1" effort="${10 * 2}"/>
  </joint>
</robot>
"""


@pytest.fixture
def xacro_file(tmp_path):
    (tmp_path / "macros.xacro").write_text(MACROS_XACRO)
    path = tmp_path / "robot.urdf.xacro"
    path.write_text(ROBOT_XACRO)
    return path


@pytest.mark.parametrize("args,mass,length,prefix", [
    (None, 1.0, 0.5, ""),
    ({"mass": 2.5, "length": 0.4, "prefix": "left_"}, 2.5, 0.4, "left_"),
], ids=["defaults", "args"])
def test_xacro_file_with_arguments(xacro_file, args, mass, length, prefix):
    """Macro + include + args expanded by the xacro package: the names, the effort expression and the
    gravity torque of a mass m at length L on a y axis (g(0) = -m g L) are the arguments'."""
    model = Model.from_urdf_file(xacro_file, xacro_args=args)
    assert model.joint_names == [f"{prefix}joint1"] and f"{prefix}link1" in model.frame_names
    assert model.effort_limits[0] == 20.0
    for backend in BACKENDS:
        assert backend(model).gravity(np.zeros(1))[0] == pytest.approx(-mass * 9.81 * length, rel=1e-12)
    same = Model.from_description(str(xacro_file), xacro_args=args)
    assert same.urdf == model.urdf and same.source == str(xacro_file)


def test_from_description_takes_text_or_path(tmp_path, xacro_file):
    text = two_link_urdf()
    assert Model.from_description(text).joint_names == ["j1"]
    (tmp_path / "r.urdf").write_text(text)
    assert Model.from_description(tmp_path / "r.urdf").joint_names == ["j1"]
    with pytest.raises(ValueError, match="xacro_args apply to a .xacro file"):
        Model.from_description(text, xacro_args={"a": 1})
    with pytest.raises(ValueError, match="URDF file not found"):
        Model.from_description(str(tmp_path / "none.urdf.xacro"))
    bad = tmp_path / "bad.urdf.xacro"
    bad.write_text(ROBOT_XACRO.replace("$(arg mass)", "${undefined_property}"))
    with pytest.raises(ValueError, match="xacro bad.urdf.xacro:.*undefined_property"):
        Model.from_urdf_file(bad)


def test_urdf_a_robot_reports_is_a_model_source():
    """The FR3 URDF that franky-sim sends when a client asks the robot for its model (as a real Franka
    does): loaded from the text, both backends agree, MuJoCo builds from it."""
    urdf_mod = pytest.importorskip("franky_sim.urdf", reason="franky-sim (the Franka simulator) not installed")
    from robot_dynamics.sim import MujocoSim
    model = Model.from_description(urdf_mod.FR3_URDF)
    assert model.joint_names == [f"joint{i}" for i in range(1, 8)] and not model.warnings
    assert max(self_check(model, n_states=2).values()) <= 1e-9
    sim, dyn = MujocoSim(model), PinocchioBackend(model)
    q = model.random_configuration(np.random.default_rng(2))
    assert np.allclose(sim.inverse_dynamics(q, np.ones(7), np.ones(7)), dyn.rnea(q, np.ones(7), np.ones(7)),
                       atol=1e-9)
