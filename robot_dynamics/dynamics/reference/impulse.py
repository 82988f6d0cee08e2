"""Impacts: the velocity jump when contacts close (rigid impulses, Newton's restitution, friction cone).

Over an impact of zero duration q is fixed and finite forces do nothing; the contact impulses Lambda
(world axes, on the robot) change the velocity:

    M(q) (v+ - v-) = J^T Lambda                                                          (1)

so v+ = v- + M^-1 J^T Lambda (Cholesky of M, never inv(M)) and the contact velocities jump by
u+ = u- + G Lambda, u = J v, G = J M^-1 J^T the Delassus matrix (as in constrained.py).

Unilateral point contacts (`Contact`): a contact closing or at rest (normal velocity u_n- <= 0) takes
part; one already separating (u_n- > 0) gets no impulse.  Newton's restitution on the normal,
u_n+ >= -e u_n-, Lambda_n >= 0, Lambda_n (u_n+ + e u_n-) = 0, and the contact's friction pyramid as in
contact_dynamics: these are the KKT conditions of the QP (Gauss's principle over the impulse)

    min 1/2 Lambda^T G Lambda + b^T Lambda   s.t.  Lambda in the cone(s),   b = u- + e u_n- n     (2)

solved by quadprog like contact_dynamics' (constrained.contact_qp: same cone rows, same Tikhonov term
on the contacts' block).  A frictionless contact's impulse is along n (one variable).  A contact whose
impulse stays inside the cone sticks, u+ = -e u_n- n; on its boundary it slides, the impulse opposing
the sliding, and leaves with u_n+ >= -e u_n- (Anitescu's relaxation lifts a sliding contact, as in
contact_dynamics).
Bilateral constraints (`FrameConstraint`, relative ones too) follow Pinocchio's impulseDynamics:
J v+ = -e J v- on all their rows (b = (1 + e) u-; a closed loop has J v- = 0 and keeps J v+ = 0); their
rows are reduced to independent ones first (constrained.independent_rows; the velocity-level rows are
always consistent).

Energy.  Delta T = Lambda . u- + 1/2 Lambda^T G Lambda.  With frictionless contacts and bilateral rows
the QP's conditions give Lambda^T G Lambda = -(1 + e) Lambda . u-, so Delta T = -(1 - e) / (2 (1 + e))
Lambda^T G Lambda <= 0 for e <= 1, zero at e = 1.  With friction and e = 0 Delta T is the QP's optimal
value, <= 0.  With friction and e > 0 Newton's law can create energy (Kane's paradox: the tangential
impulse that stops the sliding feeds the normal rebound through G's coupling; on the Panda's tcp with
mu = 0.3 and e = 1 it did on a third of random approaches, by up to 0.27 J), so the default
`law="auto"` takes Poisson's there (Newton's only on request): `law="poisson"` solves
the compression impulse Lambda_c (the QP at e = 0) and applies (1 + e) Lambda_c, so that
Delta T = (1 - e^2)/2 Lambda_c . u- <= 0 always; a contact active in compression then leaves at
u_n+ = -e u_n- too, and a sticking one with its tangential velocity reversed and scaled,
u_t+ = -e u_t- (Pinocchio's rule for all rows).

Checks (test/test_impacts.py): Pinocchio 4.1's impulseDynamics (RigidConstraintModel, 3D / 6D,
LOCAL_WORLD_ALIGNED) on bilateral and sticking impacts, to 1e-9 (scaled by max(1, |x|)); the impact
conditions with Pinocchio's M and J (M (v+ - v-) = J^T Lambda, u_n+ = -e u_n-, the impulse in the cone,
the post-impact velocity in the dual cone, complementarity) to 1e-9; energy: Delta T <= 1e-9 T where it
must not grow, |Delta T| <= 1e-9 T at e = 1 (frictionless single contact).  Pinocchio's impulseDynamics
reads only joint 1's velocity for the right-hand side, so it is no oracle for two-joint constraints
(those are checked by the conditions and on the four-bar, whose second joint is the ground).
"""
import numpy as np
from scipy.linalg.lapack import dpotrs

from .constrained import (Contact, FrameConstraint, _mass_factor, _split, _stack, _tangents, check_constraint,
                          check_contact, check_state, contact_qp, independent_rows)

LAWS = ("auto", "newton", "poisson")

__all__ = ["impulse_dynamics", "Contact", "FrameConstraint"]


def impulse_dynamics(tree, data, q, v_minus, contacts, restitution=0.0, bilateral=(), reg=1e-12, law="auto"):
    """Velocity after an impact: (v_plus, impulses, wrenches) with impulses (k, 3) the contact impulses
    on the robot (world axes, N s; zero for a separating contact) and wrenches the impulses of the
    bilateral constraints (as constrained_dynamics returns its wrenches).  restitution e in [0, 1]
    (one for all); law "newton" (u_n+ = -e u_n-), "poisson" (see the module docstring) or "auto" (the
    default: Poisson's when a contact with friction takes part and e > 0, where Newton's can create
    energy; Newton's otherwise, where both agree on bilateral rows and a single frictionless
    contact, and Newton's is the one Pinocchio's impulseDynamics applies)."""
    q, v = check_state(tree, q, v_minus, None, "impulse_dynamics")
    try:
        e = float(restitution) if np.ndim(restitution) == 0 else np.nan
    except (TypeError, ValueError):
        e = np.nan
    if not (np.isfinite(e) and 0.0 <= e <= 1.0):
        raise ValueError(f"impulse_dynamics: the restitution coefficient must be in [0, 1], got {restitution!r}")
    if law not in LAWS:
        raise ValueError(f"impulse_dynamics: law={law!r}; use one of {LAWS}")
    for c in bilateral:
        check_constraint(tree, c)
    for c in contacts:
        check_contact(tree, c)
    bilateral, contacts = list(bilateral), list(contacts)
    J, _, _, Ns = _stack(tree, data, q, v, bilateral + contacts, drift=False)
    nb = sum(c.dim for c in bilateral)
    u = J @ v                                           # pre-impact constraint velocities u-
    normals = [_tangents(c.normal)[0] for c in contacts]
    un = [n @ u[nb + 3 * k:nb + 3 * k + 3] for k, n in enumerate(normals)]
    act = [k for k in range(len(contacts)) if un[k] <= 0.0]             # separating: no impulse
    rows = list(range(nb)) + [nb + 3 * k + i for k in act for i in range(3)]
    Ja, ua = J[rows], u[rows]
    L = _mass_factor(tree, data, q)
    MiJt = dpotrs(L, Ja.T, lower=1)[0] if Ja.shape[0] else np.zeros((tree.nv, 0))
    if law == "auto":
        law = "poisson" if e > 0.0 and any(contacts[k].mu for k in act) else "newton"
    eb = 0.0 if law == "poisson" else e                 # Poisson: the compression phase first
    b = ua.copy()
    b[:nb] *= 1.0 + eb                                  # bilateral: J v+ = -e J v-
    for j, k in enumerate(act):                         # contacts: u_n+ >= -e u_n-
        b[nb + 3 * j:nb + 3 * j + 3] += eb * un[k] * normals[k]
    if nb:
        Vr = independent_rows(L, Ja[:nb], -b[:nb], max(1.0, float(np.max(np.abs(ua[:nb])))), bilateral,
                              "impulse_dynamics")
    else:
        Vr = np.zeros((0, 0))
    lam = contact_qp(Ja @ MiJt, b, Vr, [contacts[k] for k in act], reg)   # (2)
    if law == "poisson":
        lam *= 1.0 + e                                  # restitution impulse e Lambda_c after compression
    v_plus = v + MiJt @ lam                             # (1)
    P = np.zeros((len(contacts), 3))
    for j, k in enumerate(act):
        P[k] = lam[nb + 3 * j:nb + 3 * j + 3]
    return v_plus, P, _split(lam[:nb], bilateral, Ns)
