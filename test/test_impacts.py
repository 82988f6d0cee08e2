"""Impacts (reference/impulse.py): the velocity jump of rigid impulses with restitution, against
independent oracles.

- Pinocchio 4.1's `impulseDynamics(model, data, q, v_before, contact_models, contact_datas, r_coeff,
  prox_settings)` (RigidConstraintModel on the tcp, LOCAL_WORLD_ALIGNED; J v+ = -e J v- on all rows):
  our bilateral point / 6d impacts for e in {0, 0.4, 1}, and our unilateral contact with a wide friction
  cone where it sticks (e = 0, or a purely normal approach for e > 0), to 1e-9 scaled by max(1, |x|).
  Pinocchio's impulseDynamics takes the pre-impact velocity of joint 1 only, so relative (two-joint)
  constraints are checked by the impact conditions instead.
- The impact conditions with Pinocchio's M and J: M (v+ - v-) = J^T P, u_n+ = -e u_n-, the impulse in
  the cone (frictionless: along n), to 1e-9.
- Energy: Delta T <= 1e-9 T for frictionless contacts and for friction at e = 0; |Delta T| <= 1e-9 T at
  e = 1 with one frictionless contact; Poisson's law keeps Delta T = (1 - e^2)/2 P_c . u- <= 0 with
  friction, where Newton's can gain energy (Kane's paradox; shown on the Panda).
- Closed chain: the four-bar (1 DoF) hitting a frictionless floor: any impulse on a 1-DoF system gives
  v+ = -e v- exactly (u_n = j theta', u_n+ = -e u_n-), the loop stays closed (J v+ = 0, 1e-12).
"""
import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.dynamics import Model
from robot_dynamics.dynamics import reference as ref
from robot_dynamics.dynamics.loops import ClosedChain
from robot_dynamics.dynamics.reference.constrained import Contact, FrameConstraint
from robot_dynamics.dynamics.reference.impulse import impulse_dynamics
from test_closed_chains import LINKS, closing_angles, four_bar_loops, four_bar_urdf, scaled_err
from test_constrained import pin_tcp_constraint

TOL = 1e-9
TCP = "panda_hand_tcp"


@pytest.fixture(scope="module")
def rd(model):
    return ref.RefData(model.tree)


def pin_mj(model, q, frame=TCP):
    """Pinocchio's M and the frame's LOCAL_WORLD_ALIGNED Jacobian."""
    pm = model.pin_model
    d = pm.createData()
    M = pin.crba(pm, d, q)
    M = np.triu(M) + np.triu(M, 1).T
    J = pin.computeFrameJacobian(pm, d, q, model.frame_ids[frame], pin.LOCAL_WORLD_ALIGNED)
    return M, J


def pin_impulse(model, kind, q, v, e):
    d, cms, cds = pin_tcp_constraint(model, kind)
    vp = pin.impulseDynamics(model.pin_model, d, q, v, cms, cds, e, pin.ProximalSettings(1e-14, 0.0, 1))
    return vp.copy(), cds[0].contact_force.vector[:3 if kind == "point" else 6].copy()


def approaching(model, rng, frame=TCP, normal_only=False, speed=0.5):
    """A random state whose point `frame` moves towards the floor (z down) at `speed` m/s, with a
    random tangential velocity unless normal_only."""
    q = model.random_configuration(rng)
    _, J = pin_mj(model, q, frame)
    v = rng.normal(size=model.nv)
    target = np.array([*(rng.normal(size=2) * 0.3 * (not normal_only)), -speed])
    v = v + np.linalg.pinv(J[:3]) @ (target - J[:3] @ v)                # J_lin v = target
    return q, v


def kinetic(M, v):
    return 0.5 * v @ M @ v


@pytest.mark.parametrize("kind", ["point", "6d"])
def test_bilateral_impact_matches_pinocchio(model, rd, kind):
    rng = np.random.default_rng(41)
    worst = 0.0
    for e in (0.0, 0.4, 1.0):
        for _ in range(3):
            q, v = model.random_configuration(rng), rng.normal(size=7)
            vp_pin, P_pin = pin_impulse(model, kind, q, v, e)
            vp, P, (w,) = impulse_dynamics(model.tree, rd, q, v, [], e, bilateral=[FrameConstraint(TCP, kind)])
            worst = max(worst, scaled_err(vp_pin, vp), scaled_err(P_pin, w))
            _, J = pin_mj(model, q)
            J = J[:3] if kind == "point" else J
            assert scaled_err(-e * (J @ v), J @ vp) < TOL                 # J v+ = -e J v-
    print(f"bilateral {kind} impact vs Pinocchio impulseDynamics: worst scaled error {worst:.1e}")
    assert worst < TOL


def test_sticking_impact_matches_pinocchio(model, rd):
    """A unilateral contact with a wide pyramid (mu = 5) sticks where Pinocchio's bilateral impulse lies
    inside it: e = 0 from any approach (u+ = 0), e > 0 from a purely normal approach (u+ = -e u-)."""
    rng = np.random.default_rng(42)
    worst, n = 0.0, 0
    cases = [(0.0, False)] * 4 + [(0.5, True)] * 3 + [(1.0, True)] * 3
    for e, normal_only in cases:
        for _ in range(50):
            q, v = approaching(model, rng, normal_only=normal_only)
            vp_pin, P_pin = pin_impulse(model, "point", q, v, e)
            if P_pin[2] > 0 and abs(P_pin[0]) + abs(P_pin[1]) < 0.9 * 5.0 * np.cos(np.pi / 4) * P_pin[2]:
                break
        else:
            pytest.fail("no state with Pinocchio's impulse inside the cone")
        vp, P, _ = impulse_dynamics(model.tree, rd, q, v, [Contact(TCP, mu=5.0)], e)
        worst = max(worst, scaled_err(vp_pin, vp), scaled_err(P_pin, P[0]))
        n += 1
    print(f"sticking impact vs Pinocchio impulseDynamics ({n} states): worst scaled error {worst:.1e}")
    assert worst < TOL


def test_frictionless_impact_conditions_and_energy(model, rd):
    rng = np.random.default_rng(43)
    worst, worst_e1 = -np.inf, 0.0
    for e in (0.0, 0.3, 0.7, 1.0):
        for _ in range(4):
            q, v = approaching(model, rng)
            vp, P, _ = impulse_dynamics(model.tree, rd, q, v, [Contact(TCP)], e)
            M, J = pin_mj(model, q)
            P = P[0]
            assert scaled_err(M @ (vp - v), J[:3].T @ P) < TOL           # M (v+ - v-) = J^T P
            assert np.max(np.abs(P[:2])) < 1e-12 and P[2] > 0             # along the normal, pushing
            un_m, un_p = J[2] @ v, J[2] @ vp
            assert abs(un_p + e * un_m) < TOL * max(1.0, abs(un_m))       # u_n+ = -e u_n-
            T0, T1 = kinetic(M, v), kinetic(M, vp)
            worst = max(worst, (T1 - T0) / T0)
            if e == 1.0:
                worst_e1 = max(worst_e1, abs(T1 - T0) / T0)
    print(f"frictionless impacts: max relative Delta T {worst:.1e}; at e = 1 |Delta T| / T {worst_e1:.1e}")
    assert worst <= 1e-9 and worst_e1 < 1e-9


def test_frictional_impact_cone_and_energy(model, rd):
    """mu = 0.3 (pyramid, F = 4): the conditions of the impulse QP with Pinocchio's M and J: P in the
    cone K (|P_t1| + |P_t2| <= mu P_n), c = u+ + e u_n- n in the dual cone K* (c . (n +- mu t_k) >= 0)
    and P . c = 0; sticking (P inside K): u+ = -e u_n- n; sliding: u_n+ >= -e u_n- (Anitescu's
    relaxation lifts a sliding contact, as in contact_dynamics).  Energy: not growing at e = 0 (Newton)
    nor ever with Poisson's law, for which Delta T = (1 - e^2)/2 P_c . u- with P_c the compression
    impulse; Newton's law at e = 1 gains energy on some states (Kane's paradox), hence Poisson's, the
    default's choice with friction and e > 0."""
    rng = np.random.default_rng(44)
    gains, slid, stuck = [], 0, 0
    mu = 0.3
    for _ in range(30):
        q, v = approaching(model, rng)
        M, J = pin_mj(model, q)
        c = [Contact(TCP, mu=mu)]
        T0 = kinetic(M, v)
        for e in (0.0, 0.6, 1.0):
            vp, P, _ = impulse_dynamics(model.tree, rd, q, v, c, e, law="newton")
            P = P[0]
            scale = max(1.0, float(np.max(np.abs(J[:3] @ v))))
            assert scaled_err(M @ (vp - v), J[:3].T @ P) < TOL                  # M (v+ - v-) = J^T P
            assert abs(P[0]) + abs(P[1]) <= mu * P[2] + 1e-9 and P[2] > 0        # P in K
            cc = J[:3] @ vp + np.array([0.0, 0.0, e * (J[2] @ v)])             # c = u+ + e u_n- n
            for edge in ([mu, 0, 1], [-mu, 0, 1], [0, mu, 1], [0, -mu, 1]):
                assert cc @ np.array(edge) >= -1e-9 * scale                     # c in K*
            assert abs(P @ cc) < 1e-9 * scale * max(1.0, np.max(np.abs(P)))   # complementarity
            if abs(P[0]) + abs(P[1]) < mu * P[2] * (1 - 1e-6):                  # inside: sticks
                assert np.max(np.abs(cc)) < 1e-9 * scale
                stuck += 1
            else:
                assert cc[2] >= -1e-9 * scale                                   # u_n+ >= -e u_n-
                slid += 1
            if e == 0.0:
                assert kinetic(M, vp) - T0 <= 1e-9 * T0
            if e == 1.0:
                gains.append(kinetic(M, vp) - T0)
            vp_p, P_p, _ = impulse_dynamics(model.tree, rd, q, v, c, e, law="poisson")
            _, P_c, _ = impulse_dynamics(model.tree, rd, q, v, c, 0.0, law="newton")
            assert scaled_err(P_p[0], (1 + e) * P_c[0]) < TOL
            dT = kinetic(M, vp_p) - T0
            assert dT <= 1e-9 * T0 and abs(dT - 0.5 * (1 - e * e) * P_c[0] @ (J[:3] @ v)) < 1e-9 * T0
            # the default law: Poisson's here (friction, e > 0), Newton's at e = 0; never a gain
            vp_d, _, _ = impulse_dynamics(model.tree, rd, q, v, c, e)
            assert np.array_equal(vp_d, vp_p if e > 0 else vp) and kinetic(M, vp_d) - T0 <= 1e-9 * T0
    print(f"mu = 0.3: {stuck} sticking and {slid} sliding impacts; Newton e = 1: Delta T > 0 on "
          f"{sum(g > 1e-9 for g in gains)} of {len(gains)} states (up to {max(gains):.3g} J)")
    assert stuck > 0 and slid > 0 and max(gains) > 1e-6


def test_separating_contact_gets_no_impulse(model, rd):
    rng = np.random.default_rng(45)
    q, v = approaching(model, rng)
    vp, P, _ = impulse_dynamics(model.tree, rd, q, -v, [Contact(TCP, mu=0.5)], 0.5)   # moving up
    assert np.array_equal(vp, -v) and np.array_equal(P, np.zeros((1, 3)))
    # two contacts: the tcp hits, link 5 (moving up in this state) gets nothing
    _, J5 = pin_mj(model, q, "panda_link5")
    c = [Contact(TCP), Contact("panda_link5")]
    if J5[2] @ v < 0:
        v5 = np.linalg.pinv(J5[:3]) @ np.array([0.0, 0.0, 0.4 - J5[2] @ v])
        _, J = pin_mj(model, q)
        v = v + v5 - np.linalg.pinv(J[:3]) @ (J[:3] @ v5)             # keep the tcp's approach
    assert J5[2] @ v > 0
    vp, P, _ = impulse_dynamics(model.tree, rd, q, v, c, 0.2)
    assert P[0][2] > 0 and np.array_equal(P[1], np.zeros(3))


@pytest.mark.parametrize("kind", ["point", "6d"])
def test_impact_on_a_constraint_between_two_moving_bodies(model, rd, kind):
    """A loop closed between two moving links of the Panda (the tcp and a point of panda_link3 at the
    same place, point or welded): no oracle in Pinocchio (its impulseDynamics reads joint 1's velocity
    only), so the impact's conditions with Pinocchio's M and two frame Jacobians: M (v+ - v-) in the
    range of J_rel^T, J_rel v+ = -e J_rel v- on every row, and Delta T <= 0 (zero at e = 1), where
    J_rel = J_C1 - J_C2 (the point: J_lin - [r]x J_ang of its link; 6d: the angular rows too)."""
    rng = np.random.default_rng(46)
    pm, worst, worst_dT = model.pin_model, 0.0, -np.inf
    for e in (0.0, 0.5, 1.0):
        for _ in range(4):
            q = model.random_configuration(rng)
            v = rng.normal(size=model.nv)
            d = pm.createData()
            pin.framesForwardKinematics(pm, d, q)
            o1 = d.oMf[model.frame_ids[TCP]]
            o2 = d.oMf[model.frame_ids["panda_link3"]]
            p2 = o2.rotation.T @ (o1.translation - o2.translation)     # C2: link3's point at the tcp
            R2 = o2.rotation.T @ o1.rotation                            # and C2's axes = the tcp's
            c = FrameConstraint(TCP, kind, frame2="panda_link3", placement2=(R2, p2))
            vp, _, _ = impulse_dynamics(model.tree, rd, q, v, [], e, bilateral=[c])
            M, J1 = pin_mj(model, q, TCP)
            _, J2 = pin_mj(model, q, "panda_link3")
            r = o1.translation - o2.translation
            J2p = J2[:3] - pin.skew(r) @ J2[3:]                         # C2's point velocity rows
            Jr = J1[:3] - J2p if kind == "point" else np.vstack([J1[:3] - J2p, J1[3:] - J2[3:]])
            dv = vp - v
            lam = np.linalg.lstsq(Jr.T, M @ dv, rcond=None)[0]
            scale = max(1.0, float(np.max(np.abs(Jr @ v))))
            worst = max(worst, scaled_err(Jr.T @ lam, M @ dv), float(np.max(np.abs(Jr @ vp + e * Jr @ v))) / scale)
            dT = (kinetic(M, vp) - kinetic(M, v)) / kinetic(M, v)
            worst_dT = max(worst_dT, dT)
            assert dT <= 1e-9
            if e == 1.0:
                assert abs(dT) < 1e-9
    print(f"impact on a {kind} loop tcp - panda_link3: worst condition error {worst:.1e}, largest relative "
          f"Delta T {worst_dT:.1e}")
    assert worst < TOL


def test_four_bar_impact_with_the_loop_closed():
    """The four-bar's coupler midpoint hits a frictionless floor: on the 1-DoF mechanism v+ = -e v-
    exactly; the loop (5 revolute rows, 3 redundant) stays closed; the loop's impulse is the joint's."""
    model = Model.from_urdf_string(four_bar_urdf())
    chain = ClosedChain.from_yaml(model, four_bar_loops())
    rd = ref.RefData(model.tree)
    q = chain.solve_configuration(closing_angles(-1.0), fixed=["crank_joint"])
    v = chain.project_velocity(q, np.array([1.0, 0.0, 0.0]))
    ref.forward_kinematics(model.tree, rd, q)
    R, _ = ref.frame_placement(model.tree, rd, "coupler")
    floor = Contact("coupler", offset=R @ [LINKS["coupler"][0] / 2, 0.0, 0.0])
    hits = 0
    for e in (0.0, 0.5, 1.0):
        for sign in (1.0, -1.0):
            vm = sign * v
            vp, P, (w,) = impulse_dynamics(model.tree, rd, q, vm, [floor], e, bilateral=chain.constraints)
            if P[0][2] == 0.0:                                      # this direction separates
                assert scaled_err(vm, vp) < 1e-12                   # (the loop's rows: J v- ~ 1e-16)
                continue
            hits += 1
            assert scaled_err(-e * vm, vp) < TOL
            assert np.max(np.abs(chain.closure_velocity(q, vp))) < 1e-12
            assert chain.energy(q, vp) <= chain.energy(q, vm) + 1e-12
            assert np.max(np.abs(w[3:])) < 1e-9 and abs(w[1]) < 1e-9     # redundant rows: no impulse
    assert hits == 3


def test_project_velocity_is_the_kinetic_energy_projection():
    """project_velocity = the e = 0 impulse on the loop = N (N^T M N)^-1 N^T M v, N spanning J's null
    space (Pinocchio's M; J by SVD)."""
    model = Model.from_urdf_string(four_bar_urdf())
    chain = ClosedChain.from_yaml(model, four_bar_loops())
    q = chain.solve_configuration(closing_angles(0.7), fixed=["crank_joint"])
    v = np.array([0.3, -1.2, 2.0])
    vp = chain.project_velocity(q, v)
    pm = model.pin_model
    M = pin.crba(pm, pm.createData(), q)
    M = np.triu(M) + np.triu(M, 1).T
    from robot_dynamics.dynamics.reference.constrained import constraint_jacobian
    J, _, _ = constraint_jacobian(model.tree, chain.data, q, v, chain.constraints)
    _, s, Vt = np.linalg.svd(J)
    N = Vt[int(np.sum(s > 1e-9)):].T
    expected = N @ np.linalg.solve(N.T @ M @ N, N.T @ M @ v)
    assert scaled_err(expected, vp) < TOL and np.max(np.abs(J @ vp)) < 1e-12


def test_bad_impact_inputs_are_refused(model, rd):
    q, v = np.zeros(7), np.zeros(7)
    for e in (1.5, -0.1, np.nan, np.inf, [0.5]):
        with pytest.raises(ValueError, match="restitution"):
            impulse_dynamics(model.tree, rd, q, v, [Contact(TCP)], e)
    with pytest.raises(ValueError, match="v"):
        impulse_dynamics(model.tree, rd, q, np.full(7, np.nan), [Contact(TCP)], 0.5)
    with pytest.raises(ValueError, match="q"):
        impulse_dynamics(model.tree, rd, np.zeros(6), v, [Contact(TCP)], 0.5)
    with pytest.raises(ValueError, match="unknown frame"):
        impulse_dynamics(model.tree, rd, q, v, [Contact("nowhere")], 0.5)
    with pytest.raises(ValueError, match="mu"):
        impulse_dynamics(model.tree, rd, q, v, [Contact(TCP, mu=np.nan)], 0.5)
    with pytest.raises(ValueError, match="law"):
        impulse_dynamics(model.tree, rd, q, v, [Contact(TCP)], 0.5, law="stronge")
