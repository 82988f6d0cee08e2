"""Constrained forward dynamics of the reference layer against independent oracles:
Pinocchio 4's constraint dynamics (RigidConstraintModel + constraintDynamics), the contact (Signorini,
Coulomb pyramid) conditions evaluated with Pinocchio's M, h and Jacobians, and MuJoCo's contact solver
on a Panda pressing on a table.

Tolerances: against Pinocchio 1e-9 (scaled by max(1, |x|)); both solve the same equations exactly.
Against MuJoCo 2e-3 relative on the contact force at rest: MuJoCo's contacts are soft (solref 2 ms,
solimp 0.99-0.999) and the arm is at rest only to ~1e-4 rad/s.
"""
import mujoco
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.dynamics import reference as ref
from robot_dynamics.dynamics.reference.constrained import (Contact, FrameConstraint, constrained_dynamics,
                                                           contact_dynamics)

TOL = 1e-9
TCP = "panda_hand_tcp"
Q0 = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785])     # hand pointing down, tcp 0.41 m high


def scaled_err(x, y):
    x = np.asarray(x, float)
    return float(np.max(np.abs(x - np.asarray(y, float)))) / max(1.0, float(np.max(np.abs(x))))


@pytest.fixture(scope="module")
def rd(model):
    return ref.RefData(model.tree)


def pin_tcp_constraint(model, kind):
    """Pinocchio's (data, constraint models, constraint datas) for the tcp held in the world: a point
    (CONTACT_3D) or its whole placement (CONTACT_6D), LOCAL_WORLD_ALIGNED; initialised."""
    pm = model.pin_model
    fr = pm.frames[pm.getFrameId(TCP)]
    ctype = pin.ContactType.CONTACT_3D if kind == "point" else pin.ContactType.CONTACT_6D
    cm = pin.RigidConstraintModel(ctype, pm, fr.parentJoint, fr.placement, pin.LOCAL_WORLD_ALIGNED)
    cms, cds = pin.StdVec_RigidConstraintModel(), pin.StdVec_RigidConstraintData()
    cms.append(cm)
    cds.append(cm.createData())
    d = pm.createData()
    pin.initConstraintDynamics(pm, d, cms, cds)
    return d, cms, cds


def pin_constraint_dynamics(model, q, v, tau, kind):
    d, cms, cds = pin_tcp_constraint(model, kind)
    a = pin.constraintDynamics(model.pin_model, d, q, v, tau, cms, cds, pin.ProximalSettings(1e-14, 0.0, 1))
    return a, cds[0].contact_force.vector[:3 if kind == "point" else 6]


def pin_terms(model, q, v):
    """M, h and the tcp's LOCAL_WORLD_ALIGNED Jacobian and drift Jdot v, from Pinocchio."""
    pm = model.pin_model
    d = pm.createData()
    fid = pm.getFrameId(TCP)
    M = pin.crba(pm, d, q)
    M = np.triu(M) + np.triu(M, 1).T
    h = pin.nonLinearEffects(pm, d, q, v)
    J = pin.computeFrameJacobian(pm, d, q, fid, pin.LOCAL_WORLD_ALIGNED)
    pin.computeJointJacobiansTimeVariation(pm, d, q, v)
    pin.updateFramePlacements(pm, d)
    dJ = pin.getFrameJacobianTimeVariation(pm, d, fid, pin.LOCAL_WORLD_ALIGNED)
    return M, h, J, dJ @ v


@pytest.mark.parametrize("kind", ["point", "6d"])
def test_bilateral_matches_pinocchio(model, rd, kind):
    """Pinocchio's 6D contact holds the frame's spatial acceleration, ours the classical one: the two
    agree on states that satisfy the velocity constraint, so v is projected onto J v = 0 for 6d."""
    rng = np.random.default_rng(1)
    for _ in range(4):
        q = model.random_configuration(rng)
        v, tau = rng.normal(size=7), rng.normal(size=7) * 5.0
        if kind == "6d":
            _, _, J, _ = pin_terms(model, q, v)
            v = v - np.linalg.pinv(J) @ (J @ v)
        a_pin, f_pin = pin_constraint_dynamics(model, q, v, tau, kind)
        a, (w,) = constrained_dynamics(model.tree, rd, q, v, tau, [FrameConstraint(TCP, kind)])
        assert scaled_err(a_pin, a) < TOL
        assert scaled_err(f_pin, w) < TOL


def test_baumgarte_terms_set_the_constraint_acceleration(model, rd):
    """With gains (Kp, Kd) the frame origin accelerates as p'' = -Kd p' - Kp (p - p*), p'' and p'
    from Pinocchio's Jacobians at the solved a."""
    rng = np.random.default_rng(2)
    q, v, tau = model.random_configuration(rng), rng.normal(size=7), rng.normal(size=7)
    target = np.array([0.3, 0.1, 0.5])
    a, _ = constrained_dynamics(model.tree, rd, q, v, tau, [FrameConstraint(TCP, "point", target_p=target)],
                                baumgarte=(100.0, 20.0))
    _, _, J, gamma = pin_terms(model, q, v)
    pm = model.pin_model
    d = pm.createData()
    pin.framesForwardKinematics(pm, d, q)
    p = d.oMf[pm.getFrameId(TCP)].translation
    expected = -20.0 * (J[:3] @ v) - 100.0 * (p - target)
    assert scaled_err(expected, J[:3] @ a + gamma[:3]) < TOL


def check_contact_conditions(model, q, v, tau, a, f, mu=None):
    """Equations of motion and the contact conditions, with Pinocchio's M, h, J, Jdot v.
    Frictionless: Signorini (lambda_n >= 0, c''_n >= 0, lambda_n c''_n = 0), no tangential force.
    Pyramid (F = 4, |f_t1| + |f_t2| <= mu f_n): f in the cone K, c'' in its dual cone K* (c'' . e >= 0
    on every edge e = n +- mu t_k of K) and f . c'' = 0: the KKT conditions of Gauss's principle over
    the cone (Anitescu's relaxation of Coulomb friction, MuJoCo's too)."""
    M, h, J, gamma = pin_terms(model, q, v)
    assert scaled_err(M @ a + h, tau + J[:3].T @ f) < TOL            # M a + h = tau + J^T f
    acc = J[:3] @ a + gamma[:3]                                      # contact point acceleration
    scale = max(1.0, float(np.max(np.abs(f))))
    assert f[2] >= -1e-9 and acc[2] >= -1e-7                          # lambda_n >= 0, c''_n >= 0
    assert abs(f @ acc) < 1e-7 * scale                               # complementarity
    if mu is None:
        assert np.max(np.abs(f[:2])) < 1e-9
    else:
        assert abs(f[0]) + abs(f[1]) <= mu * f[2] + 1e-9
        for e in ([mu, 0, 1], [-mu, 0, 1], [0, mu, 1], [0, -mu, 1]):
            assert acc @ np.array(e) >= -1e-7
    return acc


def test_unilateral_contact_releases_when_pulled(model, rd, pinb):
    """A torque lifting the hand: no contact force, the free ABA acceleration."""
    _, _, J, _ = pin_terms(model, Q0, np.zeros(7))
    tau = pinb.gravity(Q0) + J[:3].T @ np.array([0.0, 0.0, 20.0])
    a, f, _ = contact_dynamics(model.tree, rd, Q0, np.zeros(7), tau, [Contact(TCP)])
    assert np.max(np.abs(f)) < 1e-9
    assert scaled_err(pinb.aba(Q0, np.zeros(7), tau), a) < TOL
    acc = check_contact_conditions(model, Q0, np.zeros(7), tau, a, f[0])
    assert acc[2] > 1.0                                              # the hand leaves the table


def test_unilateral_contact_pushes_when_pressed(model, rd, pinb):
    rng = np.random.default_rng(3)
    v = rng.normal(size=7) * 0.1
    _, _, J, _ = pin_terms(model, Q0, v)
    tau = pinb.gravity(Q0) + J[:3].T @ np.array([2.0, -1.0, -30.0])
    a, f, _ = contact_dynamics(model.tree, rd, Q0, v, tau, [Contact(TCP, mu=0.8)])
    acc = check_contact_conditions(model, Q0, v, tau, a, f[0], mu=0.8)
    assert f[0][2] > 10.0 and np.max(np.abs(acc)) < 1e-7              # sticking: c'' = 0
    a_pin, f_pin = pin_constraint_dynamics(model, Q0, v, tau, "point")  # = the bilateral contact
    assert scaled_err(a_pin, a) < 1e-8 and scaled_err(f_pin, f[0]) < 1e-8


def test_unilateral_contact_slides_on_the_pyramid(model, rd, pinb):
    """Pushed sideways beyond mu: the force sits on the pyramid's face and opposes the sliding."""
    _, _, J, _ = pin_terms(model, Q0, np.zeros(7))
    tau = pinb.gravity(Q0) + J[:3].T @ np.array([15.0, 0.0, -20.0])
    a, f, _ = contact_dynamics(model.tree, rd, Q0, np.zeros(7), tau, [Contact(TCP, mu=0.3)])
    f = f[0]
    acc = check_contact_conditions(model, Q0, np.zeros(7), tau, a, f, mu=0.3)
    assert abs(abs(f[0]) + abs(f[1]) - 0.3 * f[2]) < 1e-9 * f[2]     # on the boundary
    assert acc[0] > 1e-3 and f[0] < 0                                # slides along +x, friction -x
    assert f[:2] @ acc[:2] < 0                                       # friction dissipates


def sliding_state(model, speed=(0.2, 0.05)):
    """Q0 with the tcp moving along the table at `speed` (x, y) [m/s] (minimum-norm joint velocity)."""
    _, _, J, _ = pin_terms(model, Q0, np.zeros(7))
    return np.linalg.pinv(J[:3]) @ np.array([*speed, 0.0])


@pytest.mark.parametrize("mu", [0.3, 0.8])
def test_sliding_contact_exact_stays_on_the_surface_with_coulomb_friction(model, rd, pinb, mu):
    """Bug: the exact option's friction not opposite the slip, its normal not complementary, or the
    relaxation returned.  The tcp slides on the table at (0.2, 0.05) m/s, pressed down (30 N) and
    pushed sideways: sliding="exact" gives c''_n = 0 (it stays on the surface) with f_n > 0, and the
    friction f_t = -mu f_n u_t / |u_t| exactly (Coulomb's sliding law, the circular cone); with the
    equations of motion from Pinocchio's M, h, J.  The relaxed QP, which does not see the slip
    velocity, answers the same state with a friction that holds the tangential acceleration instead
    (not opposite the slip, not on the cone's edge: printed): the difference the option exists for."""
    v = sliding_state(model)
    M, h, J, gamma = pin_terms(model, Q0, v)
    tau = pinb.gravity(Q0) + J[:3].T @ np.array([5.0, -3.0, -30.0])
    out = {}
    for mode in ("relaxed", "exact"):
        a, f, _ = contact_dynamics(model.tree, rd, Q0, v, tau, [Contact(TCP, mu=mu)], sliding=mode)
        out[mode] = (a, f[0], J[:3] @ a + gamma[:3])
    a, f, acc = out["exact"]
    u = J[:3] @ v
    ut = u - u[2] * np.array([0.0, 0.0, 1.0])
    fr = out["relaxed"][1]
    print(f"mu {mu}: normal acceleration relaxed {out['relaxed'][2][2]:.1e} m/s^2, exact {acc[2]:.1e}; f relaxed "
          f"{np.round(fr, 3)} N, exact {np.round(f, 3)} N; slip direction {np.round(ut[:2] / np.linalg.norm(ut), 3)}")
    assert scaled_err(M @ a + h, tau + J[:3].T @ f) < TOL
    assert f[2] > 1.0 and abs(acc[2]) < 1e-9
    assert scaled_err(f[:2], -mu * f[2] * ut[:2] / np.linalg.norm(ut)) < 1e-9
    assert scaled_err(fr[:2], -mu * fr[2] * ut[:2] / np.linalg.norm(ut)) > 1e-2   # not Coulomb's sliding law


def test_sliding_exact_on_random_states_and_the_relaxation_lift(model, rd, pinb):
    """Random sliding states of the Panda's tcp on the table (a configuration away from singular ones,
    a slip of up to ~0.5 m/s, pressed down 5-40 N and pushed sideways; mu 0.3 and 0.8), with
    Pinocchio's M, h, J and Jdot v: the exact option keeps c''_n = 0 with f_n > 0 and Coulomb's sliding
    friction f_t = -mu f_n u_t/|u_t| wherever it pushes (or refuses a state without a consistent
    solution, Painleve's case, with a ValueError: counted), the equations of motion hold; the relaxed
    QP lifts the sliding tcp off the table (c''_n > 0 while it pushes) on part of the same states: the
    figures the README gives for the choice."""
    rng = np.random.default_rng(5)
    lifts, n, refused, pushing, worst_an, worst_cf = [], 0, 0, 0, 0.0, 0.0
    for mu in (0.3, 0.8):
        for _ in range(40):
            q = model.random_configuration(rng, margin=0.1)
            _, _, J, _ = pin_terms(model, q, np.zeros(7))
            if np.linalg.svd(J[:3], compute_uv=False)[-1] < 0.05:
                continue
            Jp = np.linalg.pinv(J[:3])
            v = Jp @ np.array([*rng.normal(size=2) * 0.3, 0.0]) + (np.eye(7) - Jp @ J[:3]) @ rng.normal(size=7) * 0.5
            M, h, J, gamma = pin_terms(model, q, v)
            tau = pinb.gravity(q) + J[:3].T @ np.array([*rng.normal(size=2) * 10, -rng.uniform(5, 40)]) \
                + rng.normal(size=7)
            n += 1
            a, f, _ = contact_dynamics(model.tree, rd, q, v, tau, [Contact(TCP, mu=mu)])
            if f[0][2] > 1e-6:
                lifts.append((J[:3] @ a + gamma[:3])[2])
            try:
                a, f, _ = contact_dynamics(model.tree, rd, q, v, tau, [Contact(TCP, mu=mu)], sliding="exact")
            except ValueError as e:
                assert "sliding" in str(e) or "Painlev" in str(e), e
                refused += 1
                continue
            f = f[0]
            assert scaled_err(M @ a + h, tau + J[:3].T @ f) < TOL
            if f[2] > 1e-6:
                pushing += 1
                ut = (J[:3] @ v)[:2]
                worst_an = max(worst_an, abs((J[:3] @ a + gamma[:3])[2]))
                worst_cf = max(worst_cf, float(np.max(np.abs(f[:2] + mu * f[2] * ut / np.linalg.norm(ut)))) / max(1.0, f[2]))
    lifts = np.array(lifts)
    print(f"\n{n} sliding states: exact pushing on {pushing}, refused {refused} (no consistent solution), "
          f"|c''_n| <= {worst_an:.1e} m/s^2, Coulomb residual {worst_cf:.1e}; relaxed pushing on {lifts.size}, "
          f"lifting (c''_n > 1e-6) on {int((lifts > 1e-6).sum())}, up to {lifts.max():.3g} m/s^2")
    assert n >= 50 and pushing >= 0.8 * n and refused <= 0.1 * n
    assert worst_an < 1e-8 and worst_cf < 1e-9
    assert (lifts > 1e-6).sum() >= 0.2 * lifts.size        # the relaxation's lift is real, not rare


def test_sliding_contact_exact_separates_and_sticks_as_before(model, rd, pinb):
    """Bug: the exact option changing what it should not.  Sliding but pulled up: no force, as the
    relaxed model; at rest (no slip): the same answer as the relaxed QP (exact there)."""
    v = sliding_state(model)
    _, _, J, _ = pin_terms(model, Q0, v)
    tau = pinb.gravity(Q0) + J[:3].T @ np.array([0.0, 0.0, 25.0])
    _, f, _ = contact_dynamics(model.tree, rd, Q0, v, tau, [Contact(TCP, mu=0.5)], sliding="exact")
    assert np.max(np.abs(f)) < 1e-9
    tau = pinb.gravity(Q0) + J[:3].T @ np.array([2.0, -1.0, -30.0])
    a1, f1, _ = contact_dynamics(model.tree, rd, Q0, np.zeros(7), tau, [Contact(TCP, mu=0.8)])
    a2, f2, _ = contact_dynamics(model.tree, rd, Q0, np.zeros(7), tau, [Contact(TCP, mu=0.8)], sliding="exact")
    assert np.array_equal(a1, a2) and np.array_equal(f1, f2)
    with pytest.raises(ValueError, match="sliding"):
        contact_dynamics(model.tree, rd, Q0, v, tau, [Contact(TCP, mu=0.8)], sliding="exactly")


def test_bad_constraints_are_refused(model, rd):
    q, v, tau = Q0, np.zeros(7), np.zeros(7)
    with pytest.raises(ValueError, match="kind"):
        constrained_dynamics(model.tree, rd, q, v, tau, [FrameConstraint(TCP, "plane")])
    with pytest.raises(ValueError, match="redundant"):
        constrained_dynamics(model.tree, rd, q, v, tau, [FrameConstraint(TCP, "6d"), FrameConstraint(TCP, "6d")])
    with pytest.raises(ValueError, match="mu"):
        contact_dynamics(model.tree, rd, q, v, tau, [Contact(TCP, mu=-1.0)])


def test_contact_force_matches_mujoco_on_a_table(model, rd, pinb):
    """The Panda's hand (a 1 cm sphere at the tcp) pressed on a table in MuJoCo (pyramidal cone,
    mu = 0.8, stiff contacts), held by PD + gravity compensation + a pushing force, settles; at the
    final state both solvers give the contact force from (q, v, tau)."""
    from robot_dynamics.sim.mujoco_sim import MujocoSim
    r = 0.01
    top = pinb.frame_placement(Q0, TCP)[1][2] - r - 0.003
    sim = MujocoSim(model, dt=0.0005, table=top, damping=2.0, integrator="RK4")
    mm = sim.m
    mm.opt.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    mm.geom_friction[:, 0] = 0.8
    mm.geom_solref[:] = [0.002, 1.0]
    mm.geom_solimp[:] = [0.99, 0.999, 0.001, 0.5, 2.0]
    sim.reset(Q0)
    push = np.array([3.0, -2.0, -15.0])

    def control(q, v):
        J = pinb.frame_jacobian(q, TCP, "local_world_aligned")[:3]
        return pinb.gravity(q) + 100.0 * (Q0 - q) - 10.0 * v + J.T @ push
    for _ in range(4000):
        sim.step(control(sim.q, sim.v))
    q, v = sim.q, sim.v
    tau = control(q, v)
    d = sim.d
    d.ctrl[sim._act] = tau
    mujoco.mj_forward(mm, d)
    assert d.ncon == 1 and np.max(np.abs(v)) < 1e-3
    f6 = np.zeros(6)
    mujoco.mj_contactForce(mm, d, 0, f6)
    f_mj = d.contact[0].frame.reshape(3, 3).T @ f6[:3]               # on geom2, from geom1 (world axes)
    if mm.geom(d.contact[0].geom1).name == "contact_sphere":
        f_mj = -f_mj                                                  # we want the force on the robot
    a, f, _ = contact_dynamics(model.tree, rd, q, v, tau, [Contact(TCP, mu=0.8, offset=[0.0, 0.0, -r])])
    assert np.linalg.norm(f[0] - f_mj) < 2e-3 * np.linalg.norm(f_mj)
    assert f[0][2] > 10.0 and abs(f[0][0]) > 1.0                      # pressing, and friction holding
    assert np.max(np.abs(a - d.qacc[sim._dadr])) < 1e-2
