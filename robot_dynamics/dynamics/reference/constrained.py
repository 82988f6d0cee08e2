"""Constrained forward dynamics: bilateral frame constraints (KKT system) and unilateral contacts (QP).

Equations of motion with constraint forces (Lagrange multipliers lambda):

    M(q) a + h(q, v) = tau + J^T lambda,      J a + Jdot v = a_des                      (1)

i.e. the KKT system  [[M, J^T], [J, 0]] [a; -lambda] = [tau - h; a_des - Jdot v].  It is solved by its
Schur complement, never inv(M):  M = L L^T (Cholesky),  a_free = M^-1 (tau - h),  G = J M^-1 J^T (the
Delassus matrix, the inverse operational-space inertia of the constraints),

    G lambda = a_des - Jdot v - J a_free,      a = a_free + M^-1 J^T lambda.              (2)

Constraint rows are those of the frame's LOCAL_WORLD_ALIGNED Jacobian: a "point" constraint keeps the
frame origin's classical linear acceleration (3 rows: J_lin a + Jdot_lin v = p''), a "6d" one also the
angular acceleration (6 rows).  So lambda is the wrench the environment applies on the robot at the
frame origin, in world axes: [f] or [f; n].  a_des = -Kd (J v) - Kp e (Baumgarte stabilisation) holds
the constraint against drift; e is the position (and orientation, log3) error from a target placement.

Unilateral contacts (a point touching a surface of normal n, world axes) add the Signorini conditions
lambda_n >= 0, c''_n >= 0, lambda_n c''_n = 0 at the acceleration level, and optionally a friction
pyramid (F facets inscribed in the Coulomb cone |lambda_t| <= mu lambda_n; F = 4 is MuJoCo's pyramidal
cone, |lambda_t1| + |lambda_t2| <= mu lambda_n).  With c'' = G lambda + b these are the KKT
conditions of the convex QP

    min 1/2 lambda^T G lambda + b^T lambda   s.t.  lambda in the cone(s),   b = J a_free + Jdot v - a_des

(Gauss's principle of least constraint in force space).  It is solved exactly by quadprog's dual
active-set method (Goldfarb-Idnani): a dense QP of 3 per contact variables, solved to machine precision
in microseconds, with the active set (which contacts push, which slide) as a by-product.  Sliding in
this relaxation is Anitescu's / MuJoCo's (a sliding contact may also separate slightly); sticking and
separation are exact.
"""
from dataclasses import dataclass, field

import numpy as np
import quadprog
from scipy.linalg.lapack import dpotrf, dpotrs

from . import spatial
from .crba import crba
from .jacobian import frame_jacobian, frame_jacobian_dot
from .kinematics import forward_kinematics, frame_placement
from .rnea import nonlinear_effects

KINDS = ("point", "6d")


@dataclass
class FrameConstraint:
    """A bilateral constraint on frame `frame`: its origin ("point") or its whole placement ("6d")
    does not accelerate (or, with Baumgarte gains, returns to `target_p` / `target_R`)."""
    frame: str
    kind: str = "point"
    target_p: np.ndarray = None
    target_R: np.ndarray = None

    @property
    def dim(self):
        return 3 if self.kind == "point" else 6


@dataclass
class Contact:
    """A unilateral point contact at frame `frame` on a surface of unit normal `normal` (world axes,
    pointing from the surface to the robot).  mu=None: frictionless; else a pyramid of `facets`."""
    frame: str
    normal: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    mu: float = None
    facets: int = 4
    offset: np.ndarray = None       # contact point = frame origin + offset (world axes), e.g. -r n


def _check_kind(c):
    if c.kind not in KINDS:
        raise ValueError(f"constraint on {c.frame!r}: unknown kind {c.kind!r}; use one of {KINDS}")


def constraint_jacobian(tree, data, q, v, constraints):
    """(J, Jdot v, J v) stacked over the constraints (rows of the LOCAL_WORLD_ALIGNED Jacobians)."""
    forward_kinematics(tree, data, q, v)
    Js, gs = [], []
    for c in constraints:
        n = c.dim if isinstance(c, FrameConstraint) else 3
        J = frame_jacobian(tree, data, c.frame, "local_world_aligned")
        g = frame_jacobian_dot(tree, data, c.frame, "local_world_aligned") @ v
        r = getattr(c, "offset", None)
        if r is not None:                               # a point at r from the origin (world axes):
            r = np.asarray(r, float)                    # p' = v_o + w x r,  p'' = a_o + w' x r + w x (w x r)
            w = J[3:] @ v
            J = np.vstack([J[:3] - spatial.skew(r) @ J[3:], J[3:]])
            g = np.concatenate([g[:3] - np.cross(r, g[3:]) + np.cross(w, np.cross(w, r)), g[3:]])
        Js.append(J[:n])
        gs.append(g[:n])
    if not Js:
        return np.zeros((0, tree.nv)), np.zeros(0), np.zeros(0)
    J = np.vstack(Js)
    return J, np.concatenate(gs), J @ v


def _position_error(tree, data, c):
    R, p = frame_placement(tree, data, c.frame)
    e = np.zeros(c.dim)
    if c.target_p is not None:
        e[:3] = p - np.asarray(c.target_p, float)
    if c.dim == 6 and c.target_R is not None:
        e[3:] = np.asarray(c.target_R, float) @ spatial.log3(np.asarray(c.target_R, float).T @ R)
    return e


def _free_motion(tree, data, q, v, tau, J):
    """Cholesky factor of M, a_free = M^-1 (tau - h) and M^-1 J^T."""
    L = _cholesky(crba(tree, data, q), "the mass matrix")
    h = nonlinear_effects(tree, data, q, v)
    x = dpotrs(L, np.column_stack([tau - h, J.T]), lower=1)[0]    # M x = b with M = L L^T
    return x[:, 0], x[:, 1:]


def _cholesky(A, what):
    L, info = dpotrf(A, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"{what} is not positive definite")
    return L


def constrained_dynamics(tree, data, q, v, tau, constraints, baumgarte=(0.0, 0.0)):
    """Bilateral frame constraints: (a, wrenches), wrenches a list of [f] (point) or [f; n] (6d)
    per constraint, world axes at the frame origin, applied on the robot.  baumgarte = (Kp, Kd)."""
    for c in constraints:
        _check_kind(c)
    J, gamma, Jv = constraint_jacobian(tree, data, q, v, constraints)
    a_free, MiJt = _free_motion(tree, data, q, v, tau, J)
    Kp, Kd = baumgarte
    a_des = -Kd * Jv
    if Kp:
        a_des -= Kp * np.concatenate([_position_error(tree, data, c) for c in constraints])
    G = J @ MiJt                                        # Delassus matrix J M^-1 J^T
    rhs = a_des - gamma - J @ a_free                    # (2)
    try:
        lam = dpotrs(_cholesky(G, "J M^-1 J^T"), rhs, lower=1)[0]
    except np.linalg.LinAlgError:
        raise ValueError("constrained_dynamics: the constraints are redundant or singular "
                         "(J M^-1 J^T not positive definite); remove a constraint") from None
    a = a_free + MiJt @ lam
    out, k = [], 0
    for c in constraints:
        out.append(lam[k:k + c.dim])
        k += c.dim
    return a, out


def _tangents(n):
    n = np.asarray(n, float) / np.linalg.norm(n)
    t = np.array([1.0, 0.0, 0.0]) if abs(n[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    t1 = np.cross(n, t)
    t1 /= np.linalg.norm(t1)
    return n, t1, np.cross(n, t1)


def _cone_rows(c):
    """Rows C (k x 3) with C lambda >= 0: lambda_n >= 0 and the pyramid's facets
    mu cos(pi/F) lambda_n - d_m . lambda_t >= 0, d_m at angles (2m + 1) pi / F."""
    if c.mu is not None and (not np.isfinite(c.mu) or c.mu < 0 or c.facets < 3):
        raise ValueError(f"contact on {c.frame!r}: need mu >= 0 and at least 3 facets")
    n, t1, t2 = _tangents(c.normal)
    rows = [n]
    if c.mu is not None:
        F = int(c.facets)
        for m in range(F):
            ang = (2 * m + 1) * np.pi / F
            d = np.cos(ang) * t1 + np.sin(ang) * t2
            rows.append(c.mu * np.cos(np.pi / F) * n - d)
    return np.array(rows)


def contact_dynamics(tree, data, q, v, tau, contacts, bilateral=(), baumgarte=(0.0, 0.0), reg=1e-12):
    """Unilateral point contacts (plus optional bilateral frame constraints): (a, forces, wrenches)
    with forces (k, 3) the contact forces on the robot (world axes) and wrenches those of the
    bilateral constraints.  The contacts are taken as closed (gap zero); the caller decides which.
    baumgarte: Kd damps every constraint velocity, Kp acts on the bilateral constraints' targets.
    reg: Tikhonov term added to the Delassus matrix (relative to its trace) so that redundant
    contacts (more than the arm can resist independently) still give a unique, smallest-norm answer."""
    for c in bilateral:
        _check_kind(c)
    allc = list(bilateral) + list(contacts)
    J, gamma, Jv = constraint_jacobian(tree, data, q, v, allc)
    a_free, MiJt = _free_motion(tree, data, q, v, tau, J)
    Kp, Kd = baumgarte
    a_des = -Kd * Jv
    nb = sum(c.dim for c in bilateral)
    if Kp and bilateral:
        a_des[:nb] -= Kp * np.concatenate([_position_error(tree, data, c) for c in bilateral])
    G = J @ MiJt
    m = G.shape[0]
    G = 0.5 * (G + G.T) + reg * max(np.trace(G), 1e-300) / max(m, 1) * np.eye(m)
    b = J @ a_free + gamma - a_des
    # quadprog: min 1/2 x^T G x - a^T x  s.t.  C^T x >= b0, the first meq as equalities (bilateral: none
    # needed, their multipliers are free variables)
    # equalities first (quadprog's convention): a frictionless contact has no tangential force
    eq, ineq, k = [], [], nb
    for c in contacts:
        rows = _cone_rows(c)
        for r in rows:
            ineq.append((k, r))
        if c.mu is None:
            _, t1, t2 = _tangents(c.normal)
            eq += [(k, t1), (k, t2)]
        k += 3
    C = np.zeros((len(eq) + len(ineq), m))
    for row, (k, r) in enumerate(eq + ineq):
        C[row, k:k + 3] = r
    if C.shape[0]:
        lam = quadprog.solve_qp(G, -b, C.T, np.zeros(C.shape[0]), len(eq))[0]
    else:
        lam = np.linalg.solve(G, -b)
    a = a_free + MiJt @ lam
    wrenches, k = [], 0
    for c in bilateral:
        wrenches.append(lam[k:k + c.dim])
        k += c.dim
    return a, lam[nb:].reshape(-1, 3), wrenches
