"""Closed kinematic chains: relative frame constraints (reference/constrained.py) and loop closures from
YAML (dynamics/loops.py), against independent oracles.

- Pinocchio 4.1: `RigidConstraintModel(ctype, model, joint1, placement1, joint2, placement2,
  LOCAL_WORLD_ALIGNED)` + `constraintDynamics`: the Panda's tcp constrained to link 1 (point, 6d; random
  placements and states; Baumgarte terms for the point), a redundant 6d (tcp to link 3: 4 joints between
  them, rank 4 of 6) against Pinocchio's proximal solver, the four-bar's closure (point), two Pandas
  holding one object (6d between the two hands, five configurations on the closure), the 6d's Baumgarte
  terms at states where the two error definitions agree, and the two Pandas' box resting on a support
  (the 6d grasp with a unilateral contact in contact_dynamics: the contact conditions from Pinocchio's
  M, h, Jacobians and drifts).  Tolerance 1e-9 scaled by max(1, |x|): both solve the
  same equations exactly ("6d" on states with J v = 0, where Pinocchio's spatial drift equals our
  classical one; see constrained.py).
- MuJoCo 4's `<equality><connect site1 site2/>` on the four-bar built from MJCF with the same bodies:
  joint accelerations and the closure force at states on the constraint manifold, within 5e-4
  relative (MuJoCo's constraints are soft: solimp 0.9999, its stiffest, leaves (1 - d)/d = 1e-4 of
  the constraint acceleration unenforced; measured 3e-5 on the states drawn, 2e-4 on others); a
  0.5 s trajectory (RK4, dt = 1 ms both, ours with Baumgarte (2500, 100), MuJoCo solref 5 ms) within
  1e-5 rad (measured 3e-7).
- MuJoCo 4's `<equality><weld site1 site2/>` (solimp 0.9999, torquescale 10): the four-bar with its
  closing hinge kept in the tree and the hinge's other half, a bearing block, welded to the ground
  (ours a "fixed" closure: 6 rows, rank 3 in the plane, min_norm); and the two Pandas holding the box
  (a payload of the left hand, a body fixed in its tcp in MuJoCo, which loads the same URDF text:
  the unconstrained M and h agree to 1e-15), welded to the right tcp (and, the same mechanism, the
  box a free body welded to each hand: a within 1e-3, the wrench 5e-3).  MuJoCo's weld rows are ours
  mapped by weld_map (1e-12), its drift ours (1e-6), a and the wrench within 5e-4 relative (the arms'
  wrench 2e-3: the translational regulariser against the loop's smallest Delassus eigenvalue), and
  MuJoCo's answer is our KKT system regularised by its own efc_R to 1e-10 (the whole gap is its
  softness); trajectories (0.5 s, 0.2 s; RK4 at 1 ms both) within 1e-5 rad (measured 6e-7, 7e-8).
- Finite differences: the rows J of point / 6d / revolute constraints are d e / dt, their drift
  Jdot v = d/dt (J v) along q + t v, to 1e-6 relative (central differences, h = 1e-6).
- Closed form: the four-bar's loop-closing angles (two circles' intersection), to 1e-10 rad; the crank
  torque holding the four-bar still is dV/d(theta_crank) along the closed chain (virtual work, V by
  finite differences, 1e-6 N m).
- Drift (semi-implicit Euler, 1 kHz, 2 s, under gravity from rest): printed, and bounded: with
  Baumgarte (2500, 100) the loop stays closed within 2 mm and at least 20 times better than without
  (measured 0.87 mm against 56 mm); post-stabilised within 1e-10 m.
"""
import re

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.dynamics import Model, robots
from robot_dynamics.dynamics import reference as ref
from robot_dynamics.dynamics.loops import ClosedChain, LoopClosure, rk4
from robot_dynamics.dynamics.reference import spatial
from robot_dynamics.dynamics.reference.constrained import (Contact, FrameConstraint, constrained_dynamics,
                                                           constraint_error, constraint_jacobian, contact_dynamics)
from robot_dynamics.dynamics.urdf import lock_joints

TOL = 1e-9
TCP = "panda_hand_tcp"

# ---- the four-bar: ground pivots A = 0 and D = (GROUND, 0, 0), crank a, coupler b, rocker c, in the
# x-z plane (gravity -z), every joint about y.  Grashof: s + l = 0.1 + 0.4 <= p + q = 0.35 + 0.3, the
# shortest link (the crank) next to the ground: a crank-rocker (the crank turns fully); the transmission
# angle stays within 54-100 deg (never singular).  The URDF is the open chain A-B-C-tip; the loop is
# closed by a revolute joint between the rocker's tip and D.
LINKS = {"crank": (0.10, 0.40), "coupler": (0.35, 0.80), "rocker": (0.30, 0.70)}    # length m, mass kg
GROUND = 0.40
WIDTH = 0.02
# the weld closure's bearing block at D: mass kg, centre of mass in its frame (m), principal inertia kg m^2
PIN = (1.0, (0.05, 0.0, 0.04), (4e-3, 6e-3, 4e-3))
SOLIMP = "0.9999 0.9999 0.001 0.5 2"      # MuJoCo's stiffest impedance (d = 0.9999, its ceiling)
TORQUESCALE = 10.0                        # MuJoCo weld rotational rows x 10 (see weld_map)


def bar_inertia(L, m):
    """A bar of length L along x, square section WIDTH: (Ixx, Iyy, Izz) about its centre of mass."""
    return m * 2 * WIDTH ** 2 / 12, m * (L ** 2 + WIDTH ** 2) / 12, m * (L ** 2 + WIDTH ** 2) / 12


def four_bar_urdf(pin=False):
    """The open chain ground-crank-coupler-rocker; pin=True adds the closing hinge's other half: a
    bearing block `pin` (PIN) hinged to the rocker's tip about y (`pin_joint`), for the weld closure."""
    out, parent, off = ['<robot name="four_bar">', '<link name="ground"/>'], "ground", 0.0
    for name, (L, m) in LINKS.items():
        ixx, iyy, izz = bar_inertia(L, m)
        out.append(f'<link name="{name}"><inertial><origin xyz="{L / 2} 0 0"/><mass value="{m}"/>'
                   f'<inertia ixx="{ixx}" iyy="{iyy}" izz="{izz}" ixy="0" ixz="0" iyz="0"/></inertial></link>')
        out.append(f'<joint name="{name}_joint" type="revolute"><parent link="{parent}"/><child link="{name}"/>'
                   f'<origin xyz="{off} 0 0"/><axis xyz="0 1 0"/>'
                   '<limit lower="-100" upper="100" effort="100" velocity="100"/></joint>')
        parent, off = name, L
    if pin:
        m, (cx, cy, cz), (ixx, iyy, izz) = PIN
        out.append(f'<link name="pin"><inertial><origin xyz="{cx} {cy} {cz}"/><mass value="{m}"/>'
                   f'<inertia ixx="{ixx}" iyy="{iyy}" izz="{izz}" ixy="0" ixz="0" iyz="0"/></inertial></link>')
        out.append(f'<joint name="pin_joint" type="revolute"><parent link="rocker"/><child link="pin"/>'
                   f'<origin xyz="{off} 0 0"/><axis xyz="0 1 0"/>'
                   '<limit lower="-100" upper="100" effort="100" velocity="100"/></joint>')
    return "\n".join(out + ["</robot>"])


def four_bar_loops(kind="revolute", offset2=(0.0, 0.0, 0.0), actuated="[crank_joint]"):
    axis = "\n    axis: [0, 1, 0]" if kind == "revolute" else ""
    x, y, z = np.array([GROUND, 0.0, 0.0]) + offset2
    return f"""
loop_closures:
  - name: rocker_to_ground
    frame1: rocker
    frame2: ground
    placement1: {{xyz: [{LINKS['rocker'][0]}, 0, 0]}}
    placement2: {{xyz: [{x}, {y}, {z}], rpy: [0, 0, 0]}}
    type: {kind}{axis}
actuated: {actuated}
"""


def four_bar_mjcf(solref="0.005 1", solimp=SOLIMP, timestep=0.001, closure="connect"):
    """The same bodies in MJCF, the loop closed by a connect equality between two sites (closure=
    "connect"), or (closure="weld") the pin of four_bar_urdf(pin=True) hinged to the rocker's tip and
    welded to the ground at D (site semantic, torquescale TORQUESCALE)."""
    body, close, off = "", "", 0.0
    for name, (L, m) in LINKS.items():
        ixx, iyy, izz = bar_inertia(L, m)
        body += (f'<body name="{name}" pos="{off} 0 0"><joint name="{name}_joint" type="hinge" axis="0 1 0"/>'
                 f'<inertial pos="{L / 2} 0 0" mass="{m}" diaginertia="{ixx} {iyy} {izz}"/>')
        close += "</body>"
        off = L
    if closure == "connect":
        body += f'<site name="rocker_tip" pos="{LINKS["rocker"][0]} 0 0"/>'
        eq = f'<connect site1="rocker_tip" site2="ground_D" solref="{solref}" solimp="{solimp}"/>'
    else:
        m, (cx, cy, cz), (ixx, iyy, izz) = PIN
        body += (f'<body name="pin" pos="{off} 0 0"><joint name="pin_joint" type="hinge" axis="0 1 0"/>'
                 f'<inertial pos="{cx} {cy} {cz}" mass="{m}" diaginertia="{ixx} {iyy} {izz}"/>'
                 '<site name="pin_site"/></body>')
        eq = (f'<weld site1="pin_site" site2="ground_D" solref="{solref}" solimp="{solimp}" '
              f'torquescale="{TORQUESCALE}"/>')
    tol = ' tolerance="0"' if closure == "weld" else ""        # weld: the solver run to convergence
    return (f'<mujoco model="four_bar"><option timestep="{timestep}" integrator="RK4" gravity="0 0 -9.81" '
            f'jacobian="dense"{tol}/><worldbody><site name="ground_D" pos="{GROUND} 0 0"/>{body}{close}</worldbody>'
            f'<equality>{eq}</equality></mujoco>')


def four_bar_weld_loops():
    """The pin welded to the ground at D (type fixed: 6 rows, rank 3 in the plane), both motors on."""
    return f"""
loop_closures:
  - name: pin_to_ground
    frame1: pin
    frame2: ground
    placement2: {{xyz: [{GROUND}, 0, 0]}}
    type: fixed
actuated: [crank_joint, pin_joint]
"""


def closing_angles(theta1):
    """Closed form: coupler and rocker joint angles closing the loop for crank angle theta1 (the
    open-linkage branch with C above the line BD).  A rotation by theta about +y maps x to
    (cos theta, 0, -sin theta): in the x-z plane the link direction angle is -theta."""
    a, b, c, d = LINKS["crank"][0], LINKS["coupler"][0], LINKS["rocker"][0], GROUND
    B = a * np.array([np.cos(theta1), -np.sin(theta1)])               # (x, z)
    D = np.array([d, 0.0])
    BD = D - B
    L = np.linalg.norm(BD)
    x = (b ** 2 - c ** 2 + L ** 2) / (2 * L)                           # along BD from B
    h = np.sqrt(b ** 2 - x ** 2)
    u = BD / L
    C = B + x * u + h * np.array([-u[1], u[0]])                      # the branch left of B -> D
    ang_bc = np.arctan2(C[1] - B[1], C[0] - B[0])
    ang_cd = np.arctan2(D[1] - C[1], D[0] - C[0])
    return np.array([theta1, -ang_bc - theta1, -ang_cd + ang_bc])


def scaled_err(x, y):
    """max |x - y| / max(1, |x|); inf if either holds a NaN (max() would skip it)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return np.inf
    return float(np.max(np.abs(x - y))) / max(1.0, float(np.max(np.abs(x))))


@pytest.fixture(scope="module")
def rd(model):
    return ref.RefData(model.tree)


@pytest.fixture(scope="module")
def four_bar():
    model = Model.from_urdf_string(four_bar_urdf())
    return ClosedChain.from_yaml(model, four_bar_loops())


def four_bar_state(chain, theta1, rng):
    q = chain.solve_configuration(closing_angles(theta1) + [0.0, *(0.05 * rng.normal(size=2))], fixed=["crank_joint"])
    v = chain.project_velocity(q, rng.normal(size=3) * 2.0)
    return q, v


# ---------------------------------------------------------------------------------------------------
# Pinocchio: RigidConstraintModel between two joints
# ---------------------------------------------------------------------------------------------------
def pin_relative(model, f1, pl1, f2, pl2, kind, q, v, tau, baumgarte=None, prox=(1e-14, 0.0, 1)):
    """Pinocchio's constraintDynamics with one relative constraint (LOCAL_WORLD_ALIGNED): (a, lambda)."""
    pm = model.pin_model
    fr1, fr2 = pm.frames[model.frame_ids[f1]], pm.frames[model.frame_ids[f2]]
    se3 = lambda pl: pin.SE3.Identity() if pl is None else pin.SE3(pl[0], pl[1])  # noqa: E731
    ctype = pin.ContactType.CONTACT_3D if kind == "point" else pin.ContactType.CONTACT_6D
    cm = pin.RigidConstraintModel(ctype, pm, fr1.parentJoint, fr1.placement * se3(pl1), fr2.parentJoint,
                                  fr2.placement * se3(pl2), pin.LOCAL_WORLD_ALIGNED)
    if baumgarte is not None:
        cm.m_baumgarte_parameters.Kp, cm.m_baumgarte_parameters.Kd = baumgarte
    cms, cds = pin.StdVec_RigidConstraintModel(), pin.StdVec_RigidConstraintData()
    cms.append(cm)
    cds.append(cm.createData())
    d = pm.createData()
    pin.initConstraintDynamics(pm, d, cms, cds)
    to_pin = np.argsort(model.v_to_pin)                 # x_pin = x[to_pin]; x = x_pin[v_to_pin]
    a = pin.constraintDynamics(pm, d, model.q_to_pin(q), v[to_pin], tau[to_pin], cms, cds,
                               pin.ProximalSettings(*prox))
    return a[model.v_to_pin], cds[0].contact_force.vector[:3 if kind == "point" else 6].copy()


def random_placement(rng, scale=0.1):
    return spatial.rpy_to_matrix(rng.uniform(-np.pi, np.pi, 3)), rng.normal(size=3) * scale


def on_manifold_velocity(tree, rd, q, v, cons):
    J, _, _ = constraint_jacobian(tree, rd, q, v, cons)
    return v - np.linalg.pinv(J) @ (J @ v)


@pytest.mark.parametrize("kind", ["point", "6d"])
def test_relative_constraint_matches_pinocchio(model, rd, kind):
    """The tcp tied to link 1 (6 joints between them: full rank), random placements on both sides and
    random states (J's condition number under 1e3); constrained_dynamics and contact_dynamics (as a
    bilateral constraint) vs Pinocchio."""
    rng = np.random.default_rng(11)
    worst, n = 0.0, 0
    while n < 4:
        q, v, tau = model.random_configuration(rng), rng.normal(size=7), rng.normal(size=7) * 5.0
        pl1, pl2 = random_placement(rng), random_placement(rng)
        c = FrameConstraint(TCP, kind, frame2="panda_link1", placement1=pl1, placement2=pl2)
        if np.linalg.cond(constraint_jacobian(model.tree, rd, q, v, [c])[0]) > 1e3:
            continue                # near a singularity both answers lose digits (lambda ~ 1e5 N there)
        n += 1
        if kind == "6d":
            v = on_manifold_velocity(model.tree, rd, q, v, [c])
        a_pin, f_pin = pin_relative(model, TCP, pl1, "panda_link1", pl2, kind, q, v, tau)
        a, (w,) = constrained_dynamics(model.tree, rd, q, v, tau, [c])
        a2, _, (w2,) = contact_dynamics(model.tree, rd, q, v, tau, [], bilateral=[c])
        for x, y in ((a_pin, a), (f_pin, w), (a_pin, a2), (f_pin, w2)):
            worst = max(worst, scaled_err(x, y))
    print(f"relative {kind} vs Pinocchio: worst scaled error {worst:.1e}")
    assert worst < TOL


def test_relative_point_baumgarte_matches_pinocchio(model, rd):
    """Off the manifold (the two points apart), Baumgarte (Kp, Kd) on p1 - p2 and v_p1 - v_p2 is
    Pinocchio's corrector (its 3D contact error -c1Mc2.translation, rotated to the world)."""
    rng = np.random.default_rng(12)
    worst = 0.0
    for _ in range(4):
        q, v, tau = model.random_configuration(rng), rng.normal(size=7), rng.normal(size=7) * 5.0
        pl1, pl2 = random_placement(rng), random_placement(rng)
        c = FrameConstraint(TCP, "point", frame2="panda_link1", placement1=pl1, placement2=pl2)
        assert np.linalg.norm(constraint_error(model.tree, rd, q, [c])) > 0.05
        a_pin, f_pin = pin_relative(model, TCP, pl1, "panda_link1", pl2, "point", q, v, tau, baumgarte=(100.0, 20.0))
        a, (w,) = constrained_dynamics(model.tree, rd, q, v, tau, [c], baumgarte=(100.0, 20.0))
        worst = max(worst, scaled_err(a_pin, a), scaled_err(f_pin, w))
    print(f"relative point + Baumgarte vs Pinocchio: worst scaled error {worst:.1e}")
    assert worst < TOL


def test_relative_6d_baumgarte_matches_pinocchio(model, rd):
    """Baumgarte (Kp, Kd) on a 6d relative constraint (the tcp welded to link 1) off the manifold vs
    Pinocchio's corrector on its CONTACT_6D between the two joints.  The error definitions differ:
    Pinocchio's is R1 (-log6(c1Mc2)) = R1 [V^-1(phi) R1^T (p1 - p2); log3(R2^T R1)] (world axes, phi =
    log3(R2^T R1), V the SE(3) left Jacobian's rotation block), ours [p1 - p2; R2 log3(R2^T R1)].  The
    rotational parts are equal (R2^T R1 fixes its own axis, so R1 phi = R2 phi); the translational ones
    are equal exactly when R1^T (p1 - p2) is parallel to phi (V^-1 leaves vectors along phi unchanged),
    else they differ at second order (phi x R1^T (p1 - p2) / 2).  And the drifts: Pinocchio's 6D rows use
    the two bodies' spatial accelerations at p1, ours the exact d/dt (J v); they differ by (w1 - w2) x
    v_p1 (see constrained.py), zero when the point p1 is at rest.  So the states drawn: random q and
    placement1, C2 = C1 * (exp(theta k), d k) (a screw displacement along one random axis k: theta up
    to 0.6 rad, d up to 0.1 m), placement2 making it so; v random with v_p1 = 0 (J v != 0, its angular
    rows too: the Kd term on all six rows).  There ours and Pinocchio's e agree (1e-12) and a and the
    wrench agree to 1e-9.  At generic displacements (k not along the translation) the two errors differ
    (printed; > 1e-4)."""
    tree = model.tree
    rng = np.random.default_rng(16)
    worst = worst_e = generic = 0.0
    n = 0
    while n < 4:
        q, tau = model.random_configuration(rng), rng.normal(size=7) * 5.0
        pl1 = random_placement(rng)
        ref.forward_kinematics(tree, rd, q)
        R1, p1 = ref.frame_placement(tree, rd, TCP)
        Rf, pf = ref.frame_placement(tree, rd, "panda_link1")
        Rc, pc = R1 @ pl1[0], p1 + R1 @ pl1[1]                        # C1 in the world
        k = rng.normal(size=3)
        k /= np.linalg.norm(k)
        theta, dist = rng.uniform(0.1, 0.6), rng.uniform(0.02, 0.1)

        def closing(t):
            """The constraint with C2 = C1 * (exp(theta k), t), and |our e - Pinocchio's| there."""
            Rt, pt = Rc @ pin.exp3(theta * k), pc + Rc @ t
            c = FrameConstraint(TCP, "6d", frame2="panda_link1", placement1=pl1,
                                placement2=(Rf.T @ Rt, Rf.T @ (pt - pf)))
            err = -pin.log6(pin.SE3(Rc, pc).actInv(pin.SE3(Rt, pt)))     # Pinocchio's, in C1's axes
            e_pin = np.r_[Rc @ err.linear, Rc @ err.angular]
            return c, float(np.max(np.abs(constraint_error(tree, rd, q, [c]) - e_pin)))
        across = np.cross(k, rng.normal(size=3))
        generic = max(generic, closing(dist * across / np.linalg.norm(across))[1])
        c, de = closing(dist * k)                                       # the screw along k
        J, _, _ = constraint_jacobian(tree, rd, q, np.zeros(7), [c])
        if np.linalg.cond(J) > 1e3:
            continue
        n += 1
        worst_e = max(worst_e, de)
        _, _, ((Jp1, _, _),) = pin_point_terms(model, q, np.zeros(7), [(TCP, pl1)])
        v = np.linalg.svd(Jp1[:3])[2][3:].T @ rng.normal(size=4)        # v_p1 = 0
        assert np.max(np.abs(Jp1[:3] @ v)) < 1e-12 and np.max(np.abs((J @ v)[3:])) > 0.1
        for gains in ((100.0, 20.0), (0.0, 20.0), (100.0, 0.0)):
            a_pin, f_pin = pin_relative(model, TCP, pl1, "panda_link1", c.placement2, "6d", q, v, tau, baumgarte=gains)
            a, (w,) = constrained_dynamics(tree, rd, q, v, tau, [c], baumgarte=gains)
            worst = max(worst, scaled_err(a_pin, a), scaled_err(f_pin, w))
    print(f"relative 6d + Baumgarte vs Pinocchio (screw displacements, v_p1 = 0): e {worst_e:.1e}, "
          f"a and wrench worst scaled error {worst:.1e}; generic displacements: e differs by {generic:.1e}")
    assert worst_e < 1e-12 and worst < TOL and generic > 1e-4


def test_redundant_relative_6d_least_norm_matches_pinocchio(model, rd):
    """The tcp welded to link 3: only joints 4-7 lie between them, so the 6 rows have rank 4.  The
    default refuses it; redundant="min_norm" gives Pinocchio's a (to 1e-9) on states with J v = 0 (where
    the rows are consistent), the same generalised force J^T lambda, and the least-norm lambda, which
    Pinocchio's proximal iterations approach (mu 1e-4, 5000 iterations: within 1e-6; with mu 1e-8 and 100
    iterations they stop 3e-5 away, at a larger norm)."""
    rng = np.random.default_rng(13)
    worst_a = worst_f = worst_jf = 0.0
    for _ in range(3):
        q, v, tau = model.random_configuration(rng), rng.normal(size=7), rng.normal(size=7) * 5.0
        pl1, pl2 = random_placement(rng), random_placement(rng)
        c = FrameConstraint(TCP, "6d", frame2="panda_link3", placement1=pl1, placement2=pl2)
        v = on_manifold_velocity(model.tree, rd, q, v, [c])
        with pytest.raises(ValueError, match="redundant"):
            constrained_dynamics(model.tree, rd, q, v, tau, [c])
        a, (w,) = constrained_dynamics(model.tree, rd, q, v, tau, [c], redundant="min_norm")
        J, _, _ = constraint_jacobian(model.tree, rd, q, v, [c])
        assert np.linalg.matrix_rank(J) == 4
        a_pin, f_pin = pin_relative(model, TCP, pl1, "panda_link3", pl2, "6d", q, v, tau, prox=(1e-13, 1e-8, 100))
        worst_a = max(worst_a, scaled_err(a_pin, a))
        worst_jf = max(worst_jf, scaled_err(J.T @ f_pin, J.T @ w))
        assert np.linalg.norm(w) <= np.linalg.norm(f_pin) + 1e-12
        _, f_pin = pin_relative(model, TCP, pl1, "panda_link3", pl2, "6d", q, v, tau, prox=(1e-14, 1e-4, 5000))
        worst_f = max(worst_f, scaled_err(f_pin, w))
    print(f"redundant 6d (rank 4) vs Pinocchio proximal: a {worst_a:.1e}, J^T lambda {worst_jf:.1e}, "
          f"lambda (converged proximal) {worst_f:.1e}")
    assert worst_a < TOL and worst_jf < TOL and worst_f < 1e-6


ARMS = [f"{s}_panda_joint{k}" for s in ("l", "r") for k in range(1, 8)]


def two_arm_urdf():
    """Two Pandas on one table 0.8 m apart, facing each other along y (all joints, fingers too)."""
    text = robots.robot_urdf_path("panda").read_text()
    body = text[text.index(">", text.index("<robot")) + 1:text.rindex("</robot>")]
    arms = []
    for side in ("l", "r"):
        arms.append(re.sub(r'(name|link|joint)="panda_', rf'\1="{side}_panda_', body))
    return ('<robot name="two_pandas"><link name="table"/>'
            '<joint name="l_mount" type="fixed"><parent link="table"/><child link="l_panda_link0"/>'
            '<origin xyz="0 0.4 0" rpy="0 0 -1.5707963"/></joint>'
            '<joint name="r_mount" type="fixed"><parent link="table"/><child link="r_panda_link0"/>'
            '<origin xyz="0 -0.4 0" rpy="0 0 1.5707963"/></joint>' + "".join(arms) + "</robot>")


def two_arm_model():
    """Two Pandas (fingers locked) on one table 0.8 m apart, facing each other along y."""
    return Model.from_urdf_string(two_arm_urdf(), active_joints=ARMS)


Q_GRASP = np.tile([0.0, 0.3, 0.0, -1.8, 0.0, 2.1, 0.785], 2)


def two_arm_grasp(inertia=None):
    """A 1.5 kg box in the left hand (a payload 0.15 m ahead of the tcp, `inertia` about its centre in
    the tcp's axes), the right tcp welded to the box's frame as it is at Q_GRASP (the right tcp faces
    the left one 0.3 m ahead of it, its z axis reversed): (model, pl1, pl2, the 6d constraint)."""
    model = two_arm_model()
    tree = model.tree
    rd = ref.RefData(tree)
    model.attach_payload("l_panda_hand_tcp", 1.5, com=[0.0, 0.0, 0.15], inertia=inertia)
    ref.forward_kinematics(tree, rd, Q_GRASP)
    R1, p1 = ref.frame_placement(tree, rd, "l_panda_hand_tcp")
    Rr, pr = ref.frame_placement(tree, rd, "r_panda_hand_tcp")
    pl1 = (np.eye(3), np.array([0.0, 0.0, 0.15]))
    Rc, pc = R1, p1 + R1 @ pl1[1]                                     # the box's centre, world
    pl2 = (Rr.T @ Rc, Rr.T @ (pc - pr))                               # the same frame seen from the right tcp
    c = FrameConstraint("l_panda_hand_tcp", "6d", frame2="r_panda_hand_tcp", placement1=pl1, placement2=pl2)
    assert np.max(np.abs(constraint_error(tree, rd, Q_GRASP, [c]))) < 1e-12
    return model, pl1, pl2, c


def test_two_arms_holding_one_object_match_pinocchio():
    """A 1.5 kg box in the left hand (a payload 0.15 m ahead of the tcp), the right hand's tcp welded to
    it (6d, relative, the two arms share no joint), vs Pinocchio's 6D two-joint constraint: a and the
    internal wrench at the grasp configuration and at four others on the closure (the left arm moved
    from the grasp by normal joint offsets of 0.15 rad, the right arm solved onto the closure by
    Gauss-Newton, solve_configuration: the box's placement changes with them), each with random
    velocities projected onto J v = 0 and random torques (5 N m)."""
    model, pl1, pl2, c = two_arm_grasp()
    chain = ClosedChain(model, [LoopClosure("grasp", c.frame, c.frame2, "fixed", *pl1, *pl2)])
    tree = model.tree
    rd = ref.RefData(tree)
    rng = np.random.default_rng(14)
    configs = [Q_GRASP] + [chain.solve_configuration(Q_GRASP + np.r_[0.15 * rng.normal(size=7), np.zeros(7)],
                                                     fixed=ARMS[:7]) for _ in range(4)]
    worst, moved = 0.0, 0.0
    for q0 in configs:
        assert np.max(np.abs(constraint_error(tree, rd, q0, [c]))) < 1e-10    # on the closure
        moved = max(moved, float(np.max(np.abs(q0 - Q_GRASP))))
        for _ in range(2):
            v = on_manifold_velocity(tree, rd, q0, rng.normal(size=14) * 0.5, [c])
            tau = rng.normal(size=14) * 5.0
            a_pin, f_pin = pin_relative(model, "l_panda_hand_tcp", pl1, "r_panda_hand_tcp", pl2, "6d", q0, v, tau)
            a, (w,) = constrained_dynamics(tree, rd, q0, v, tau, [c])
            worst = max(worst, scaled_err(a_pin, a), scaled_err(f_pin, w))
            J, gamma, _ = constraint_jacobian(tree, rd, q0, v, [c])
            assert np.max(np.abs(J @ a + gamma)) < 1e-9                     # the box stays in both hands
    print(f"two arms + box (6d relative) vs Pinocchio, {len(configs)} configurations (joints up to "
          f"{moved:.2f} rad from the grasp), 2 states each: worst scaled error {worst:.1e}")
    assert moved > 0.1 and worst < TOL


def pin_point_terms(model, q, v, points):
    """Pinocchio's M, h and, per point (frame name, (R, p) placement in it), the LOCAL_WORLD_ALIGNED
    Jacobian (6 x nv) of the frame composed with the placement and its drift Jdot v (the point's
    classical acceleration at a = 0: linear rows; the angular acceleration: angular rows), all in our
    joint order.  The points are frames added to a copy of the model."""
    pm = pin.Model(model.pin_model)
    fids = []
    for k, (name, (R, p)) in enumerate(points):
        fr = pm.frames[model.frame_ids[name]]
        fids.append(pm.addFrame(pin.Frame(f"check_point_{k}", fr.parentJoint, model.frame_ids[name],
                                          fr.placement * pin.SE3(np.asarray(R, float), np.asarray(p, float)),
                                          pin.FrameType.OP_FRAME)))
    d = pm.createData()
    to_pin = np.argsort(model.v_to_pin)
    qp, vp = model.q_to_pin(q), v[to_pin]
    M = pin.crba(pm, d, qp)
    M = np.triu(M) + np.triu(M, 1).T
    h = pin.nonLinearEffects(pm, d, qp, vp)
    pin.computeJointJacobians(pm, d, qp)
    pin.computeJointJacobiansTimeVariation(pm, d, qp, vp)
    pin.updateFramePlacements(pm, d)
    out = []
    for fid in fids:
        J = pin.getFrameJacobian(pm, d, fid, pin.LOCAL_WORLD_ALIGNED)
        dJ = pin.getFrameJacobianTimeVariation(pm, d, fid, pin.LOCAL_WORLD_ALIGNED)
        out.append((J[:, to_pin], dJ @ vp, d.oMf[fid].translation.copy()))
    return M[np.ix_(to_pin, to_pin)], h[to_pin], out


def pin_dynamics_with_contact(model, pl1, pl2, r_local, q, v, tau):
    """Pinocchio's constraintDynamics with the grasp (CONTACT_6D, left tcp * pl1 to right tcp * pl2)
    and the contact point held in the world (CONTACT_3D at the left tcp * (1, r_local)), both
    LOCAL_WORLD_ALIGNED: (a, the grasp wrench, the contact force), our joint order."""
    pm = model.pin_model
    fl, fr = pm.frames[model.frame_ids["l_panda_hand_tcp"]], pm.frames[model.frame_ids["r_panda_hand_tcp"]]
    grasp = pin.RigidConstraintModel(pin.ContactType.CONTACT_6D, pm, fl.parentJoint, fl.placement * pin.SE3(*pl1),
                                     fr.parentJoint, fr.placement * pin.SE3(*pl2), pin.LOCAL_WORLD_ALIGNED)
    point = pin.RigidConstraintModel(pin.ContactType.CONTACT_3D, pm, fl.parentJoint,
                                     fl.placement * pin.SE3(np.eye(3), r_local), pin.LOCAL_WORLD_ALIGNED)
    cms, cds = pin.StdVec_RigidConstraintModel(), pin.StdVec_RigidConstraintData()
    for cm in (grasp, point):
        cms.append(cm)
        cds.append(cm.createData())
    d = pm.createData()
    pin.initConstraintDynamics(pm, d, cms, cds)
    to_pin = np.argsort(model.v_to_pin)
    a = pin.constraintDynamics(pm, d, model.q_to_pin(q), v[to_pin], tau[to_pin], cms, cds,
                               pin.ProximalSettings(1e-14, 0.0, 1))
    return a[model.v_to_pin], cds[0].contact_force.vector.copy(), cds[1].contact_force.vector[:3].copy()


def test_two_arms_holding_a_box_on_a_support_contact_conditions():
    """A relative constraint together with a unilateral contact in contact_dynamics: the two arms
    holding the box (6d between the hands, as above) while the box's lower end (0.3 m below the left
    tcp, which points down; a point of the left hand's body) rests on a support of normal +z with
    friction (mu 0.5, the 4-facet pyramid).  States on the closure (as above), velocities on J_grasp
    v = 0 with the contact point's normal velocity zero (it may slip), torques h + J_c^T F + noise for
    downward pushes F with small and large sideways parts and for upward pulls.  Checked with
    Pinocchio's M, h, the two grasp frames' and the contact point's Jacobians and Jdot v (frames added
    to its model): M a + h = tau + J_grasp^T w + J_c^T f (1e-9 scaled); the grasp rows J_grasp a +
    Jdot v = 0 (their drift-corrected zero: Pinocchio's classical accelerations of the two grasp
    frames, J v = 0); f in the pyramid, the contact point's acceleration c'' in its dual cone (c''_n >=
    0 and c'' . e >= 0 on the edges n +- mu t_k), f . c'' = 0.  Each of sticking (f inside the cone,
    c'' = 0: then also Pinocchio's constraintDynamics with the grasp and a 3D contact, 1e-9), sliding
    (f on the pyramid's boundary) and separation (f = 0: then a is constrained_dynamics' with the grasp
    alone and Pinocchio's, 1e-9) must occur."""
    model, pl1, pl2, c = two_arm_grasp()
    chain = ClosedChain(model, [LoopClosure("grasp", c.frame, c.frame2, "fixed", *pl1, *pl2)])
    tree, rd = model.tree, ref.RefData(model.tree)
    mu, n = 0.5, np.array([0.0, 0.0, 1.0])
    r_local = np.array([0.0, 0.0, 0.30])                 # the box's end, in the left tcp's axes
    rng = np.random.default_rng(42)
    seen, worst = {"stick": 0, "slide": 0, "lift": 0}, {"eom": 0.0, "rows": 0.0, "compl": 0.0, "pin": 0.0}
    pushes = [[0.1, -0.05, -1.0], [0.8, 0.3, -1.0], [0.0, 0.0, 1.0]]
    for k in range(6):
        q = chain.solve_configuration(Q_GRASP + np.r_[0.1 * rng.normal(size=7), np.zeros(7)], fixed=ARMS[:7])
        ref.forward_kinematics(tree, rd, q)
        R1, _ = ref.frame_placement(tree, rd, "l_panda_hand_tcp")
        contact = Contact("l_panda_hand_tcp", normal=n, mu=mu, offset=R1 @ r_local)
        _, _, ((Jc, gc, _),) = pin_point_terms(model, q, np.zeros(14), [("l_panda_hand_tcp", (np.eye(3), r_local))])
        Jg, _, _ = constraint_jacobian(tree, rd, q, np.zeros(14), [c])
        A = np.vstack([Jg, n @ Jc[:3]])
        v = rng.normal(size=14) * 0.3
        v = v - np.linalg.pinv(A) @ (A @ v)              # the grasp held, the point on the support
        M, h, ((J1, g1, p1), (J2, g2, p2), (Jc, gc, _)) = pin_point_terms(
            model, q, v, [("l_panda_hand_tcp", pl1), ("r_panda_hand_tcp", pl2), ("l_panda_hand_tcp", (np.eye(3), r_local))])
        assert np.max(np.abs(p1 - p2)) < 1e-10 and np.max(np.abs((J1 - J2) @ v)) < 1e-10
        F = 30.0 * np.array(pushes[k % 3])
        tau = h + Jc[:3].T @ F + rng.normal(size=14)
        a, f, (w,) = contact_dynamics(tree, rd, q, v, tau, [contact], bilateral=[c])
        f = f[0]
        worst["eom"] = max(worst["eom"], scaled_err(M @ a + h, tau + (J1 - J2).T @ w + Jc[:3].T @ f))
        worst["rows"] = max(worst["rows"], float(np.max(np.abs((J1 - J2) @ a + g1 - g2))))
        acc = Jc[:3] @ a + gc[:3]
        scale = max(1.0, float(np.max(np.abs(f))))
        assert f[2] >= -1e-9 and abs(f[0]) + abs(f[1]) <= mu * f[2] + 1e-9          # f in the pyramid
        assert acc[2] >= -1e-7                                                    # c''_n >= 0
        for e in ([mu, 0, 1], [-mu, 0, 1], [0, mu, 1], [0, -mu, 1]):
            assert acc @ np.array(e) >= -1e-7                                     # c'' in the dual cone
        worst["compl"] = max(worst["compl"], abs(f @ acc) / scale)
        if f[2] < 1e-9:
            seen["lift"] += 1
            assert acc[2] > 1e-3                                                  # it leaves the support
            a_b, (w_b,) = constrained_dynamics(tree, rd, q, v, tau, [c])
            a_pin, w_pin = pin_relative(model, "l_panda_hand_tcp", pl1, "r_panda_hand_tcp", pl2, "6d", q, v, tau)
            worst["pin"] = max(worst["pin"], scaled_err(a_b, a), scaled_err(w_b, w), scaled_err(a_pin, a),
                               scaled_err(w_pin, w))
        elif abs(f[0]) + abs(f[1]) < mu * f[2] - 1e-6 * scale:
            seen["stick"] += 1
            assert np.max(np.abs(acc)) < 1e-7
            a_pin, w_pin, f_pin = pin_dynamics_with_contact(model, pl1, pl2, r_local, q, v, tau)
            worst["pin"] = max(worst["pin"], scaled_err(a_pin, a), scaled_err(w_pin, w), scaled_err(f_pin, f))
        else:
            seen["slide"] += 1
            assert np.linalg.norm(acc[:2]) > 1e-4 and f[:2] @ acc[:2] < 0          # slides, friction dissipates
    print(f"two arms + box on a support (6d relative + contact, mu {mu}): {seen}; equations of motion "
          f"{worst['eom']:.1e}, grasp rows {worst['rows']:.1e}, complementarity {worst['compl']:.1e}, "
          f"vs Pinocchio (sticking: 6D + 3D contact; lifting: 6D alone) {worst['pin']:.1e}")
    assert all(seen.values())
    assert worst["eom"] < TOL and worst["rows"] < 1e-9 and worst["compl"] < 1e-7 and worst["pin"] < TOL


# ---------------------------------------------------------------------------------------------------
# finite differences: rows and drift of point / 6d / revolute
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["point", "6d", "revolute"])
def test_rows_and_drift_by_finite_differences(model, rd, kind):
    """At a closed state (placement2 chosen so that C2 = C1 at q), J v = d/dt e(q + t v) and
    Jdot v = d/dt [J(q + t v) v], central differences (h = 1e-6), to 1e-6 relative."""
    tree = model.tree
    rng = np.random.default_rng(15)
    h = 1e-6
    for _ in range(3):
        q, v = model.random_configuration(rng), rng.normal(size=7)
        pl1 = random_placement(rng)
        ref.forward_kinematics(tree, rd, q)
        R1, p1 = ref.frame_placement(tree, rd, TCP)
        R2, p2 = ref.frame_placement(tree, rd, "panda_link2")
        Rc, pc = R1 @ pl1[0], p1 + R1 @ pl1[1]
        pl2 = (R2.T @ Rc, R2.T @ (pc - p2))
        axis = rng.normal(size=3) if kind == "revolute" else None
        c = FrameConstraint(TCP, kind, frame2="panda_link2", placement1=pl1, placement2=pl2, axis=axis)
        assert np.max(np.abs(constraint_error(tree, rd, q, [c]))) < 1e-12
        J, gamma, Jv = constraint_jacobian(tree, rd, q, v, [c])
        de = (constraint_error(tree, rd, q + h * v, [c]) - constraint_error(tree, rd, q - h * v, [c])) / (2 * h)
        Jp, _, _ = constraint_jacobian(tree, rd, q + h * v, v, [c])
        Jm, _, _ = constraint_jacobian(tree, rd, q - h * v, v, [c])
        dJv = (Jp - Jm) @ v / (2 * h)
        assert scaled_err(de, Jv) < 1e-6
        assert scaled_err(dJv, gamma) < 1e-6
        if kind == "revolute":          # at the closed state: the 6d rows with the rotation about the axis left out
            J6, _, _ = constraint_jacobian(tree, rd, q, v, [FrameConstraint(TCP, "6d", frame2="panda_link2",
                                                                            placement1=pl1, placement2=pl2)])
            ax = Rc @ (axis / np.linalg.norm(axis))
            N = np.linalg.lstsq(J6[3:].T, J[3:].T, rcond=None)[0]     # J_rot = N^T J6_ang
            assert scaled_err(J[:3], J6[:3]) < 1e-12 and scaled_err(N.T @ J6[3:], J[3:]) < 1e-12
            assert np.allclose(N.T @ N, np.eye(2), atol=1e-9) and np.max(np.abs(N.T @ ax)) < 1e-9


# ---------------------------------------------------------------------------------------------------
# the four-bar
# ---------------------------------------------------------------------------------------------------
def test_four_bar_closes_as_the_closed_form_says(four_bar):
    rng = np.random.default_rng(21)
    for theta1 in np.linspace(-np.pi, np.pi, 9):
        q_cf = closing_angles(theta1)
        q = four_bar.solve_configuration(q_cf + [0.0, *(0.05 * rng.normal(size=2))], fixed=["crank_joint"])
        assert np.max(np.abs(q - q_cf)) < 1e-10
        assert four_bar.position_error(q) < 1e-12


def test_four_bar_matches_pinocchio(four_bar):
    """The closure as Pinocchio's CONTACT_3D between the rocker (tip placement) and the universe (D):
    a and the in-plane force against our revolute closure (5 rows, 3 redundant) and spherical one
    (3 rows, 1 redundant), at states on the manifold with random crank torques."""
    model = four_bar.model
    spherical = ClosedChain.from_yaml(model, four_bar_loops("spherical"))
    pl1 = (np.eye(3), np.array([LINKS["rocker"][0], 0.0, 0.0]))
    pl2 = (np.eye(3), np.array([GROUND, 0.0, 0.0]))
    rng = np.random.default_rng(22)
    worst = 0.0
    for theta1 in np.linspace(-3.0, 3.0, 5):
        q, v = four_bar_state(four_bar, theta1, rng)
        u = rng.normal(size=1)
        a_pin, f_pin = pin_relative(model, "rocker", pl1, "ground", pl2, "point", q, v, four_bar.torque(u),
                                    prox=(1e-14, 1e-14, 1))      # mu > 0: the zero y row (mu = 0 gives NaN)
        a, w = four_bar.forward_dynamics(q, v, u)
        a3, w3 = spherical.forward_dynamics(q, v, u)
        f, f3 = w["rocker_to_ground"], w3["rocker_to_ground"]
        worst = max(worst, scaled_err(a_pin, a), scaled_err(f_pin, f[:3]), scaled_err(a_pin, a3),
                    scaled_err(f_pin, f3))
        assert np.max(np.abs(f[3:])) < 1e-9 and abs(f[1]) < 1e-9       # redundant rows carry nothing
    print(f"four-bar vs Pinocchio: worst scaled error {worst:.1e}")
    assert worst < TOL


def test_four_bar_matches_mujoco_connect(four_bar):
    """MuJoCo's connect equality on the same bodies: accelerations and the closure force on the
    manifold (5e-4 relative), and a 0.5 s trajectory from rest (1e-5 rad)."""
    m = mujoco.MjModel.from_xml_string(four_bar_mjcf())
    d = mujoco.MjData(m)
    rng = np.random.default_rng(23)
    worst_a = worst_f = 0.0
    for theta1 in np.linspace(-3.0, 3.0, 5):
        q, v = four_bar_state(four_bar, theta1, rng)
        u = rng.normal(size=1)
        a, w = four_bar.forward_dynamics(q, v, u)
        d.qpos[:], d.qvel[:], d.qfrc_applied[:] = q, v, four_bar.torque(u)
        mujoco.mj_forward(m, d)
        assert d.nefc == 3 and np.all(np.isfinite(d.qacc)) and np.all(np.isfinite(a))
        worst_a = max(worst_a, np.max(np.abs(d.qacc - a)) / np.max(np.abs(a)))
        worst_f = max(worst_f, np.max(np.abs(d.efc_force - w["rocker_to_ground"][:3])) /
                      np.max(np.abs(w["rocker_to_ground"])))
    print(f"four-bar vs MuJoCo connect: a {worst_a:.1e}, force {worst_f:.1e} (relative)")
    assert worst_a < 5e-4 and worst_f < 5e-4
    # trajectory: 0.5 s from rest at theta1 = -1, RK4 at 1 ms in both
    q = four_bar.solve_configuration(closing_angles(-1.0), fixed=["crank_joint"])
    v = np.zeros(3)
    mujoco.mj_resetData(m, d)
    d.qpos[:] = q
    dt, K = 1e-3, (2500.0, 100.0)
    f = lambda q, v: four_bar.forward_dynamics(q, v, [0.0], K)[0]   # noqa: E731
    worst_q = 0.0
    for _ in range(500):
        q, v = rk4(f, q, v, dt)
        mujoco.mj_step(m, d)
        worst_q = max(worst_q, np.max(np.abs(q - d.qpos)))
    print(f"four-bar 0.5 s trajectory vs MuJoCo: max |q - q_mj| {worst_q:.1e} rad, |v| up to "
          f"{np.max(np.abs(v)):.1f} rad/s")
    assert worst_q < 1e-5


# ---------------------------------------------------------------------------------------------------
# MuJoCo: weld equality (the four-bar's bearing block welded to the ground; two arms holding one box)
# ---------------------------------------------------------------------------------------------------
def weld_map(m, d, site1, site2, torquescale=TORQUESCALE):
    """T with MuJoCo's weld rows = T (our 6d rows), at a closed weld (site semantic, the two sites
    coincident, R their common orientation): MuJoCo's translational rows are the sites' velocity
    difference, ours too when p1 = p2; its rotational rows are torquescale times the rate of the
    vector part of q2^-1 q1 (the sites' world quaternions), s (ts / 2) R^T (w1 - w2), s the sign of
    q2^-1 q1's scalar part (q and -q are one orientation: a weld closed at q1 = -q2 has its rotational
    rows, and forces, negated).  So its efc_force f is our wrench lambda = T^T f ([f_lin;
    s (ts / 2) R f_rot]: on site1's body, by site2's, at the sites, world axes)."""
    q1, q2, q2inv, rel = (np.zeros(4) for _ in range(4))
    mujoco.mju_mulQuat(q1, d.xquat[m.site_bodyid[site1]], m.site_quat[site1])
    mujoco.mju_mulQuat(q2, d.xquat[m.site_bodyid[site2]], m.site_quat[site2])
    mujoco.mju_negQuat(q2inv, q2)
    mujoco.mju_mulQuat(rel, q2inv, q1)
    T = np.eye(6)
    T[3:, 3:] = 0.5 * torquescale * np.sign(rel[0]) * d.site_xmat[site1].reshape(3, 3).T
    return T


def rel_err(x, ref_):
    return float(np.max(np.abs(np.asarray(x) - ref_))) / float(np.max(np.abs(ref_)))


def against_mujoco_weld(m, d, chain, q, v, tau, a, lam, site1, site2):
    """One mj_forward at (q, v, tau) (MuJoCo's coordinates are ours) against our (a, lam) for a chain
    closed by one weld on MuJoCo's side and one 6d closure on ours.  Errors:
      rows:  max |efc_J - T J| (our rows against MuJoCo's, T = weld_map);
      drift: |efc_aref + T Jdot v| / max(1, |T Jdot v|): on the manifold MuJoCo's reference
             acceleration is -Jdot v (its stabilisation terms act on efc_pos, efc_vel, both ~0);
      a, f:  raw, relative to max |ours| (f: T^T efc_force against lambda);
      soft a, soft f: MuJoCo's answer against our KKT system made soft as MuJoCo makes it: with its
             regulariser R = efc_R ((1 - d)/d of its diagonal estimate, d = solimp's 0.9999) and its
             right-hand side efc_aref, its solver's optimum for equality rows alone is
             (Jm M^-1 Jm^T + R) f = aref - Jm a_free, a = a_free + M^-1 Jm^T f, Jm = T J, from our
             M, h, J.  R = 0 gives our hard solution: so the raw gap is MuJoCo's softness, to this.
             (The models set MuJoCo's solver tolerance to 0, its Newton iterations run to convergence:
             at its default 1e-8 it stops after one, 3e-8 short of its own optimum here.)"""
    d.qpos[:], d.qvel[:], d.qfrc_applied[:] = q, v, tau
    mujoco.mj_forward(m, d)
    assert d.nefc == 6 and np.all(np.isfinite(d.qacc)) and np.max(np.abs(d.efc_pos)) < 1e-9
    tree, rd = chain.tree, chain.data
    J, gamma, _ = constraint_jacobian(tree, rd, q, v, chain.constraints)
    T = weld_map(m, d, site1, site2)
    Jm = T @ J
    M, h = ref.crba(tree, rd, q), ref.nonlinear_effects(tree, rd, q, v)
    a_free = np.linalg.solve(M, tau - h)
    MiJt = np.linalg.solve(M, Jm.T)
    f_soft = np.linalg.solve(Jm @ MiJt + np.diag(d.efc_R), d.efc_aref - Jm @ a_free)
    return {"rows": float(np.max(np.abs(d.efc_J.reshape(6, m.nv) - Jm))),
            "drift": float(np.max(np.abs(d.efc_aref + T @ gamma))) / max(1.0, float(np.max(np.abs(T @ gamma)))),
            "a": rel_err(d.qacc, a), "f": rel_err(T.T @ d.efc_force, lam),
            "soft a": rel_err(d.qacc, a_free + MiJt @ f_soft), "soft f": rel_err(d.efc_force, f_soft)}


def trajectory_against_mujoco(m, d, chain, q, u, steps, dt=1e-3, baumgarte=(2500.0, 100.0)):
    """From rest at q under constant actuated torques u: RK4 at dt in both, ours with Baumgarte
    terms, MuJoCo with its own (solref 5 ms): (max |q - q_mj| over the run, max |v|)."""
    mujoco.mj_resetData(m, d)
    d.qpos[:], d.qfrc_applied[:] = q, chain.torque(u)
    v = np.zeros(chain.tree.nv)
    f = lambda q, v: chain.forward_dynamics(q, v, u, baumgarte)[0]   # noqa: E731
    worst_q = vmax = 0.0
    for _ in range(steps):
        q, v = rk4(f, q, v, dt)
        mujoco.mj_step(m, d)
        worst_q = max(worst_q, float(np.max(np.abs(q - d.qpos))))
        vmax = max(vmax, float(np.max(np.abs(v))))
    return worst_q, vmax


def four_bar_weld_chain():
    return ClosedChain.from_yaml(Model.from_urdf_string(four_bar_urdf(pin=True)), four_bar_weld_loops())


def test_four_bar_closed_by_a_weld_matches_mujoco(four_bar):
    """MuJoCo's weld on the four-bar.  A weld welds; the four-bar's closing joint at D is a hinge, so
    the hinge is kept as a joint of the tree and the weld put where the mechanism really is rigid:
    the URDF (and the MJCF) carry the hinge's other half, a 1 kg bearing block `pin` (centre of mass
    off the axis) on a hinge at the rocker's tip (pin_joint, motorised: the motor at D), and the loop
    is closed by welding the pin to the ground at D: ours a "fixed" closure (6d, 6 rows; in the plane
    rank 3: the out-of-plane rows are zero and take nothing, min_norm), MuJoCo's `<weld site1 site2>`.
    Nothing is over-constrained: the open tree has 4 joints, the weld removes 3 in-plane freedoms,
    the mechanism keeps its 1.  And it is the same four-bar: with the pin held still, a[:3] equal the
    revolute-closed four-bar's under the same motor torque (the pin's -u_pin on each of the 3 joints:
    its power), and the weld's force is the hinge's plus the pin's weight (1e-9).
    Against MuJoCo (mj_forward, states on the manifold, random torques on both motors): MuJoCo's rows
    are T J (1e-12; weld_map), its drift -T Jdot v (1e-6), joint accelerations and the weld's wrench
    T^T efc_force within 5e-4 relative (solimp 0.9999: a regulariser of 1e-4 of MuJoCo's diagonal
    estimate; torquescale 10 makes the rotational rows' Delassus block 100 times larger against the
    same regulariser, as for the arms); and exactly our KKT regularised by MuJoCo's
    R (1e-10: all of the gap is MuJoCo's softness).  Then 0.5 s from rest, RK4 at 1 ms both (1e-5 rad)."""
    chain = four_bar_weld_chain()
    assert chain.closures[0].kind == "6d" and chain.actuated == ["crank_joint", "pin_joint"]
    rev = ClosedChain.from_yaml(four_bar.model, four_bar_loops(actuated="[crank_joint, coupler_joint, rocker_joint]"))
    m = mujoco.MjModel.from_xml_string(four_bar_mjcf(closure="weld"))
    d = mujoco.MjData(m)
    sites = m.site("pin_site").id, m.site("ground_D").id
    weight = np.array([0.0, 0.0, PIN[0] * 9.81])
    rng = np.random.default_rng(24)
    worst, exact = {}, 0.0
    for theta1 in np.linspace(-3.0, 3.0, 5):
        q_cf = closing_angles(theta1)
        q = chain.solve_configuration(np.r_[q_cf, -q_cf.sum()] + [0.0, *(0.05 * rng.normal(size=3))],
                                      fixed=["crank_joint"])
        v = chain.project_velocity(q, rng.normal(size=4) * 2.0)
        u = rng.normal(size=2)
        a, w = chain.forward_dynamics(q, v, u)
        lam = w["pin_to_ground"]
        a_rev, w_rev = rev.forward_dynamics(q[:3], v[:3], [u[0] - u[1], -u[1], -u[1]])
        exact = max(exact, abs(q[3] + q[:3].sum()), scaled_err(a_rev, a[:3]),
                    scaled_err(w_rev["rocker_to_ground"][:3] + weight, lam[:3]))
        for k, x in against_mujoco_weld(m, d, chain, q, v, chain.torque(u), a, lam, *sites).items():
            worst[k] = max(worst.get(k, 0.0), x)
    print(f"four-bar weld vs MuJoCo weld: a {worst['a']:.1e}, wrench {worst['f']:.1e} (relative); MuJoCo vs "
          f"our KKT with its regulariser: a {worst['soft a']:.1e}, force {worst['soft f']:.1e}; rows "
          f"{worst['rows']:.1e}, drift {worst['drift']:.1e}; vs the revolute closure {exact:.1e}")
    assert exact < TOL and worst["rows"] < 1e-12 and worst["drift"] < 1e-6
    assert worst["a"] < 5e-4 and worst["f"] < 5e-4
    assert worst["soft a"] < 1e-10 and worst["soft f"] < 1e-10
    q_cf = closing_angles(-1.0)
    q = chain.solve_configuration(np.r_[q_cf, -q_cf.sum()], fixed=["crank_joint"])
    worst_q, vmax = trajectory_against_mujoco(m, d, chain, q, [0.0, 0.0], 500)
    print(f"four-bar weld 0.5 s trajectory vs MuJoCo: max |q - q_mj| {worst_q:.1e} rad, |v| up to {vmax:.1f} rad/s")
    assert worst_q < 1e-5


BOX_INERTIA = np.diag([0.0125, 0.0125, 0.0025])       # 1.5 kg, 0.1 x 0.1 x 0.3 m (its long side along z)


def mat_quat(R):
    out = np.zeros(4)
    mujoco.mju_mat2Quat(out, np.ascontiguousarray(R, dtype=float).ravel())
    return out


def two_arm_mujoco(pl1, pl2, free_box=False, solref=(0.005, 1.0)):
    """The two Pandas in MuJoCo from the same URDF text as two_arm_model: the fingers locked by the
    same lock_joints (Model.from_urdf_string's active_joints), the meshes and the URDF's joint damping
    (<dynamics>, which the Model does not read) dropped, MuJoCo's joint limits off (the Model's
    dynamics has none), static links kept as bodies (fusestatic off: the tcps exist).  The box: a body
    fixed in the left tcp at pl1 (the payload), or (free_box) a free body welded to a site on the left
    tcp at pl1; a weld joins it to a site on the right tcp at pl2.  RK4 at 1 ms, dense Jacobians."""
    urdf = lock_joints(two_arm_urdf(), ARMS)
    urdf = re.sub(r"<(visual|collision)\b.*?</\1>", "", urdf, flags=re.S)
    urdf = re.sub(r"<dynamics[^>]*/>", "", urdf)
    urdf = urdf.replace("</robot>", '<mujoco><compiler fusestatic="false" discardvisual="true" '
                        'balanceinertia="false"/></mujoco></robot>')
    spec = mujoco.MjSpec.from_string(urdf)
    spec.option.timestep = 1e-3
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_RK4
    spec.option.jacobian = mujoco.mjtJacobian.mjJAC_DENSE
    spec.option.tolerance = 0.0                     # the solver run to convergence (see against_mujoco_weld)
    for j in spec.joints:
        j.limited = mujoco.mjtLimited.mjLIMITED_FALSE
    welds = [("box", "r_grip")]
    if free_box:
        box = spec.worldbody.add_body(name="box")
        box.add_freejoint()
        spec.body("l_panda_hand_tcp").add_site(name="l_grip", pos=pl1[1], quat=mat_quat(pl1[0]))
        welds.insert(0, ("box", "l_grip"))
    else:
        box = spec.body("l_panda_hand_tcp").add_body(name="box", pos=pl1[1], quat=mat_quat(pl1[0]))
    box.explicitinertial = True
    box.mass, box.ipos, box.inertia = 1.5, [0.0, 0.0, 0.0], np.diag(BOX_INERTIA)
    box.add_site(name="box")
    spec.body("r_panda_hand_tcp").add_site(name="r_grip", pos=pl2[1], quat=mat_quat(pl2[0]))
    for s1, s2 in welds:
        eq = spec.add_equality(type=mujoco.mjtEq.mjEQ_WELD, objtype=mujoco.mjtObj.mjOBJ_SITE, name1=s1,
                               name2=s2, solref=list(solref), solimp=[float(x) for x in SOLIMP.split()])
        eq.data[10] = TORQUESCALE
    m = spec.compile()
    assert m.nv == 14 + 6 * free_box and np.all(m.eq_data[:, 10] == TORQUESCALE) and not np.any(m.dof_damping)
    assert [m.joint(k).name for k in range(14)] == ARMS
    return m, mujoco.MjData(m)


def box_state(tree, rd, q, v, pl1):
    """The box's free-joint coordinates when it moves with the left tcp: qpos (centre, quaternion),
    qvel (the centre's velocity, world axes; the angular velocity in the box's axes), and the map P
    (6 x 14) from the arms' v to that qvel."""
    ref.forward_kinematics(tree, rd, q, v)
    R, p = ref.frame_placement(tree, rd, "l_panda_hand_tcp")
    J = ref.frame_jacobian(tree, rd, "l_panda_hand_tcp", "local_world_aligned")
    Rb, r = R @ pl1[0], R @ pl1[1]
    P = np.vstack([J[:3] - spatial.skew(r) @ J[3:], Rb.T @ J[3:]])
    return np.r_[p + r, mat_quat(Rb)], P @ v, P


def test_two_arms_holding_one_object_match_mujoco_weld():
    """The box of the Pinocchio test (now with its rotational inertia) in the left hand, the right
    tcp welded to it, against MuJoCo's weld.  Ours: the box a payload of the left tcp, one 6d closure
    to the right tcp (14 coordinates).  MuJoCo, twice: (1) the box a body fixed in the left tcp, one
    weld to the right tcp: the same 14 coordinates, so the models are compared directly (the
    unconstrained M and h, box included, at every state: 1e-12), and MuJoCo's answer against our KKT
    system with its regulariser (1e-10); (2) the box a free body welded to each hand (20
    coordinates, 12 rows): the same mechanism (a rigid weld to the left hand removes the box's 6
    freedoms: P^T M_mj P is our M, 1e-12, P the box's velocity from the arms'), checked on a and the
    right weld's wrench.  States: the left arm 0.15 rad (normal) away from the grasp configuration,
    the right arm solved onto the closure (Gauss-Newton, solve_configuration), random velocities
    projected onto it, random torques (5 N m); the free box placed and moved with the left tcp.
    Rows 1e-12, drift 1e-6; raw a 5e-4 and wrench 2e-3 relative (solimp 0.9999: the translational
    rows' regulariser efc_R = 6.7e-5 against 0.2, the smallest eigenvalue of MuJoCo's Delassus matrix
    Jm M^-1 Jm^T, leaves some 3e-4 of the wrench; torquescale 10 lifts the rotational block to
    eigenvalues above 750 against efc_R 9.6e-3, where at torquescale 1 they leave 2e-2); (2) a 1e-3
    and wrench 5e-3 (two soft welds in series, efc_R 1.1e-4 against a smallest eigenvalue of 0.11).
    Then 0.2 s from rest at the grasp (gravity compensation + constant random torques), (1), 1e-5 rad."""
    model, pl1, pl2, c = two_arm_grasp(BOX_INERTIA)
    chain = ClosedChain(model, [LoopClosure("grasp", c.frame, c.frame2, "fixed", *pl1, *pl2)])
    tree, rd = chain.tree, chain.data
    m, d = two_arm_mujoco(pl1, pl2)
    mf, df = two_arm_mujoco(pl1, pl2, free_box=True)
    sites = m.site("box").id, m.site("r_grip").id
    Mm, Mf = np.zeros((14, 14)), np.zeros((20, 20))
    rng = np.random.default_rng(41)
    worst, ident, free = {}, 0.0, {"a": 0.0, "f": 0.0}
    for _ in range(4):
        q = chain.solve_configuration(Q_GRASP + np.r_[0.15 * rng.normal(size=7), np.zeros(7)], fixed=ARMS[:7])
        v = chain.project_velocity(q, rng.normal(size=14) * 0.5)
        tau = rng.normal(size=14) * 5.0
        a, w = chain.forward_dynamics(q, v, tau)
        M, h = ref.crba(tree, rd, q), ref.nonlinear_effects(tree, rd, q, v)
        for k, x in against_mujoco_weld(m, d, chain, q, v, tau, a, w["grasp"], *sites).items():
            worst[k] = max(worst.get(k, 0.0), x)
        mujoco.mj_fullM(m, d, Mm)
        ident = max(ident, scaled_err(M, Mm), scaled_err(h, d.qfrc_bias))
        # (2) the free box, welded to each hand
        qb, vb, P = box_state(tree, rd, q, v, pl1)
        df.qpos[:], df.qvel[:], df.qfrc_applied[:] = np.r_[q, qb], np.r_[v, vb], np.r_[tau, np.zeros(6)]
        mujoco.mj_forward(mf, df)
        assert df.nefc == 12 and np.max(np.abs(df.efc_pos)) < 1e-9 and np.max(np.abs(df.efc_vel)) < 1e-9
        mujoco.mj_fullM(mf, df, Mf)
        Pf = np.vstack([np.eye(14), P])
        ident = max(ident, scaled_err(M, Pf.T @ Mf @ Pf))
        T = weld_map(mf, df, mf.site("box").id, mf.site("r_grip").id)
        free["a"] = max(free["a"], rel_err(df.qacc[:14], a))
        free["f"] = max(free["f"], rel_err(T.T @ df.efc_force[6:], w["grasp"]))
    print(f"two arms + box vs MuJoCo weld: unconstrained M, h {ident:.1e}; a {worst['a']:.1e}, wrench "
          f"{worst['f']:.1e} (relative); MuJoCo vs our KKT with its regulariser: a {worst['soft a']:.1e}, "
          f"force {worst['soft f']:.1e}; rows {worst['rows']:.1e}, drift {worst['drift']:.1e}; free box "
          f"welded to each hand: a {free['a']:.1e}, wrench {free['f']:.1e}")
    assert ident < 1e-12 and worst["rows"] < 1e-12 and worst["drift"] < 1e-6
    assert worst["a"] < 5e-4 and worst["f"] < 2e-3 and free["a"] < 1e-3 and free["f"] < 5e-3
    assert worst["soft a"] < 1e-10 and worst["soft f"] < 1e-10
    u = ref.nonlinear_effects(tree, rd, Q_GRASP, np.zeros(14)) + rng.normal(size=14) * 2.0
    worst_q, vmax = trajectory_against_mujoco(m, d, chain, Q_GRASP, u, 200)
    print(f"two arms + box 0.2 s trajectory vs MuJoCo: max |q - q_mj| {worst_q:.1e} rad, |v| up to "
          f"{vmax:.1f} rad/s")
    assert worst_q < 1e-5


def test_crank_torque_holds_the_four_bar_still(four_bar):
    """Virtual work: the crank torque that holds the mechanism at rest is u = dV/d(theta1) along the
    closed chain (V the potential energy at the closing angles).  With it, a = 0."""
    model = four_bar.model
    rd = ref.RefData(model.tree)
    for theta1 in (-2.0, -0.5, 1.0, 2.5):
        h = 1e-6
        V = [ref.potential_energy(model.tree, rd, closing_angles(theta1 + s * h)) for s in (1, -1)]
        u = (V[0] - V[1]) / (2 * h)
        q = closing_angles(theta1)
        a, _ = four_bar.forward_dynamics(q, np.zeros(3), [u])
        assert np.max(np.abs(a)) < 1e-5, (theta1, u, a)
        a0, _ = four_bar.forward_dynamics(q, np.zeros(3), [0.0])
        assert np.max(np.abs(a0)) > 1.0                              # passive: it falls


def four_bar_drift(chain, baumgarte, T=2.0, dt=1e-3, theta1=-1.0, energy=False, project=False):
    """Semi-implicit Euler from rest under gravity: (max |p1 - p2| over the run, m; max |energy - E0|, J,
    if asked; max |v|, rad/s)."""
    q = chain.solve_configuration(closing_angles(theta1), fixed=["crank_joint"])
    v = np.zeros(3)
    E0, emax, dE, vmax = chain.energy(q, v), 0.0, 0.0, 0.0
    for _ in range(int(round(T / dt))):
        q, v = chain.step(q, v, [0.0], dt, baumgarte, project=project)
        emax = max(emax, chain.position_error(q))
        vmax = max(vmax, float(np.max(np.abs(v))))
        if energy:
            dE = max(dE, abs(chain.energy(q, v) - E0))
    assert np.all(np.isfinite(q)) and np.all(np.isfinite(v))
    return emax, dE, vmax


def test_four_bar_drift_with_and_without_baumgarte(four_bar):
    """The loop gap over 2 s at 1 kHz: Euler's step leaves the manifold by about dt^2/2 times the joint
    centres' centripetal acceleration (joints up to 29 rad/s here), which Baumgarte terms only hold to a
    steady gap; the post-stabilised step (project=True) closes it to the Gauss-Newton tolerance."""
    free, _, _ = four_bar_drift(four_bar, (0.0, 0.0))
    held, _, _ = four_bar_drift(four_bar, (2500.0, 100.0))
    proj, _, _ = four_bar_drift(four_bar, (0.0, 0.0), T=0.5, project=True)
    print(f"four-bar, 2 s at 1 kHz (semi-implicit Euler): max loop gap {free:.2e} m without Baumgarte, "
          f"{held:.2e} m with (2500, 100); {proj:.1e} m post-stabilised (0.5 s)")
    assert held < 2e-3 and held < free / 20.0 and proj < 1e-10


# ---------------------------------------------------------------------------------------------------
# redundancy, inconsistency, bad inputs
# ---------------------------------------------------------------------------------------------------
def test_planar_redundancy_needs_min_norm_and_inconsistency_is_refused(four_bar):
    model = four_bar.model
    rng = np.random.default_rng(31)
    q, v = four_bar_state(four_bar, 0.5, rng)
    with pytest.raises(ValueError, match="redundant"):             # the default refuses singular G
        constrained_dynamics(model.tree, four_bar.data, q, v, np.zeros(3), four_bar.constraints)
    # a loop closing 1 cm out of the mechanism's plane: nothing can close it
    off = ClosedChain.from_yaml(model, four_bar_loops("spherical", offset2=(0.0, 0.01, 0.0)))
    with pytest.raises(ValueError, match="do not close"):
        off.solve_configuration(q, fixed=["crank_joint"])
    a, _ = off.forward_dynamics(q, v, [0.0])                       # the acceleration rows are consistent
    assert np.all(np.isfinite(a))
    with pytest.raises(ValueError, match=r"inconsistent.*rocker_to_ground y"):
        off.forward_dynamics(q, v, [0.0], baumgarte=(100.0, 10.0))  # ... but not its Baumgarte error
    # two targets for one point
    tree, rd = model.tree, four_bar.data
    cons = [FrameConstraint("rocker", "point", target_p=[0.4, 0.0, 0.0]),
            FrameConstraint("rocker", "point", target_p=[0.5, 0.0, 0.0])]
    with pytest.raises(ValueError, match="inconsistent"):
        constrained_dynamics(tree, rd, q, v, np.zeros(3), cons, baumgarte=(100.0, 0.0), redundant="min_norm")
    with pytest.raises(ValueError, match="inconsistent"):
        contact_dynamics(tree, rd, q, v, np.zeros(3), [], bilateral=cons, baumgarte=(100.0, 0.0))
    with pytest.raises(ValueError, match="redundant="):
        constrained_dynamics(tree, rd, q, v, np.zeros(3), cons, redundant="lstsq")


def test_loop_yaml_and_actuation(four_bar, tmp_path):
    path = tmp_path / "loops.yaml"
    path.write_text(four_bar_loops())
    import yaml
    for spec in (path, str(path), yaml.safe_load(four_bar_loops())):          # a file, its path, a dict
        chain = ClosedChain.from_yaml(four_bar.model, spec)
        assert chain.closures[0].name == "rocker_to_ground" and chain.actuated == ["crank_joint"]
    with pytest.raises(ValueError, match="not found"):
        ClosedChain.from_yaml(four_bar.model, str(tmp_path / "missing.yaml"))
    spec = yaml.safe_load(four_bar_loops())
    del spec["actuated"]                                                      # absent: all actuated
    assert ClosedChain.from_yaml(four_bar.model, spec).passive == []
    assert four_bar.actuated == ["crank_joint"] and four_bar.passive == ["coupler_joint", "rocker_joint"]
    assert np.array_equal(four_bar.torque([2.5]), [2.5, 0.0, 0.0])
    (cl,) = four_bar.closures
    assert cl.kind == "revolute" and cl.dim == 5 and np.allclose(cl.p2, [GROUND, 0, 0])
    all_act = ClosedChain.from_yaml(four_bar.model, four_bar_loops(actuated="[rocker_joint, crank_joint]"))
    assert all_act.actuated == ["crank_joint", "rocker_joint"]           # model order
    assert np.array_equal(all_act.torque([1.0, 2.0]), [1.0, 0.0, 2.0])
    fixed = ClosedChain.from_yaml(four_bar.model, four_bar_loops("fixed"))
    assert fixed.constraints[0].kind == "6d"


BAD_YAML = [
    ("frame1: rocker", "frame1: nowhere", "not a frame"),
    ("type: revolute", "type: prismatic", "type 'prismatic'"),
    ("placement1: {xyz: [0.3, 0, 0]}", "placement1: {xyz: [.nan, 0, 0]}", "not finite"),
    ("placement1: {xyz: [0.3, 0, 0]}", "placement1: {xyz: [0.3, 0]}", "3 numbers"),
    ("placement1: {xyz: [0.3, 0, 0]}", "placement1: {xyz: [0.3, 0, 0], rot: [1, 0, 0]}", "xyz"),
    ("\n    axis: [0, 1, 0]", "", "needs an axis"),
    ("axis: [0, 1, 0]", "axis: [0, 0, 0]", "axis is zero"),
    ("frame2: ground", "frame2: rocker", "same rigid body"),
    ("type: revolute", "typ: revolute", "unknown key"),
    ("actuated: [crank_joint]", "actuated: [motor]", "unknown joint"),
    ("actuated: [crank_joint]", "actuators: [crank_joint]", "unknown key"),
    ("frame1: rocker", "frame1: [rocker", "not valid YAML"),
]


@pytest.mark.parametrize("old,new,match", BAD_YAML, ids=[b[2] for b in BAD_YAML])
def test_bad_loop_yaml_is_refused(four_bar, old, new, match):
    text = four_bar_loops()
    assert old in text
    with pytest.raises(ValueError, match=match):
        ClosedChain.from_yaml(four_bar.model, text.replace(old, new))


def test_bad_inputs_are_refused(four_bar, model, rd):
    q = closing_angles(0.3)
    with pytest.raises(ValueError, match="q"):
        four_bar.forward_dynamics(np.array([np.nan, 0.0, 0.0]), np.zeros(3), [0.0])
    with pytest.raises(ValueError, match="u"):
        four_bar.forward_dynamics(q, np.zeros(3), [0.0, 1.0])
    with pytest.raises(ValueError, match="unknown frame"):
        constrained_dynamics(model.tree, rd, np.zeros(7), np.zeros(7), np.zeros(7),
                             [FrameConstraint(TCP, "point", frame2="panda_link99")])
    with pytest.raises(ValueError, match="axis"):
        constrained_dynamics(model.tree, rd, np.zeros(7), np.zeros(7), np.zeros(7),
                             [FrameConstraint(TCP, "revolute", frame2="panda_link1")])
    with pytest.raises(ValueError, match="rotation"):
        constrained_dynamics(model.tree, rd, np.zeros(7), np.zeros(7), np.zeros(7),
                             [FrameConstraint(TCP, "6d", frame2="panda_link1",
                                              placement1=(2 * np.eye(3), np.zeros(3)))])
    with pytest.raises(ValueError, match="same body"):
        constrained_dynamics(model.tree, rd, np.zeros(7), np.zeros(7), np.zeros(7),
                             [FrameConstraint(TCP, "point", frame2="panda_hand")])
    with pytest.raises(ValueError, match="tau"):
        constrained_dynamics(model.tree, rd, np.zeros(7), np.zeros(7), np.zeros(6), [FrameConstraint(TCP)])
