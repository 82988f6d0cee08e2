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

Relative constraints (closed kinematic chains, `frame2` set).  The constraint frame C1 is frame
`frame` composed with `placement1` (R, p in that frame), C2 is `frame2` composed with `placement2`;
p1, p2 their origins, R1, R2 their orientations (world), w1, w2 the angular velocities of the bodies
carrying them, v_p1, v_p2 the velocities of the two points, all in world axes.  As in Pinocchio 4's
`RigidConstraintModel(ctype, model, joint1, placement1, joint2, placement2, LOCAL_WORLD_ALIGNED)`:

    "point" (3 rows, a spherical joint):  J v = v_p1 - v_p2,          J a + Jdot v = p1'' - p2''
    "6d" (6 rows, welded frames):         J v = [v_p1 - (v_p2 + w2 x (p1 - p2)); w1 - w2]
                                          (body 2's motion taken at p1), J a + Jdot v = d/dt (J v)
    "revolute" (5 rows, a hinge about `axis`, given in C1's axes = C2's when closed): the point rows
                                          and n_k . (w1 - w2), k = 1, 2, n_1, n_2 = R1 [two unit
                                          vectors normal to the axis] (rotating with body 1)

Jdot v is the exact time derivative of J v along the motion (classical accelerations: for "6d" it
includes (w1 - w2) x v_p1, which Pinocchio's 6D drift leaves out; the two agree when J v = 0, as for
the one-frame "6d" constraint).  Baumgarte errors: e = p1 - p2 (point rows), R2 log3(R2^T R1) (the
"6d" rotation), n_k . (a2 x a1) with a_i = R_i axis (the revolute's two tilts); Pinocchio's "6d"
linear error is the translation of log6, equal to p1 - p2 to first order.  The multipliers are the
internal loop wrench: lambda = [f] ("point") or [f; n] ("6d", "revolute": there n = n_1 mu_1 + n_2 mu_2
is normal to the axis), world axes, applied by body 2 on body 1 at p1; body 2 receives -lambda (the
force at p2 for "point"), so J^T lambda = J_1^T lambda - J_2^T lambda.  Without `frame2` the second
side is the world placement (target_p, target_R) and lambda the environment's wrench, as before.

Redundant constraints (a planar loop closed by a "point" or "revolute" joint has out-of-plane rows that
repeat what the plane already holds) make G singular.  `redundant="raise"` (the default) refuses them;
`redundant="min_norm"` solves with the rank-revealing factorisation G = B^T B, B = L^-1 J^T, by the SVD
B = U S V^T: rank r = #{s_k > RANK_RTOL s_max}, lambda = V_r S_r^-2 V_r^T rhs, the multipliers of least
norm (the dependent rows carry no part of the wrench they cannot tell apart; a is unique either way;
Pinocchio's proximal solver converges to the same least-norm lambda).  The rows outside the rank,
V_0^T (J a - rhs) = -V_0^T rhs, must vanish: if |V_0^T rhs| > CONSISTENCY_RTOL max(1, |a_des|, |Jdot v|,
|J a_free|) (infinity norms) the constraints cannot all hold (conflicting targets, a loop that does not
close out of its plane under Baumgarte) and a ValueError names the constraints involved.

Unilateral contacts (a point touching a surface of normal n, world axes) add the Signorini conditions
lambda_n >= 0, c''_n >= 0, lambda_n c''_n = 0 at the acceleration level, and optionally a friction
pyramid (F facets inscribed in the Coulomb cone |lambda_t| <= mu lambda_n; F = 4 is MuJoCo's pyramidal
cone, |lambda_t1| + |lambda_t2| <= mu lambda_n).  With c'' = G lambda + b these are the KKT
conditions of the convex QP

    min 1/2 lambda^T G lambda + b^T lambda   s.t.  lambda in the cone(s),   b = J a_free + Jdot v - a_des

(Gauss's principle of least constraint in force space).  It is solved exactly by quadprog's dual
active-set method (Goldfarb-Idnani): a dense QP of 3 variables per contact with friction and 1 per
frictionless contact (its force along n), solved to machine precision in microseconds, with the active
set (which contacts push, which slide) as a by-product.  Sliding in
this relaxation is Anitescu's / MuJoCo's (a sliding contact may also separate slightly); sticking and
separation are exact.  Bilateral constraints among the contacts are first reduced to their independent
rows (the same SVD as above, consistency checked).  Impacts: `impulse.py`.

Checks (test/test_constrained.py, test/test_closed_chains.py): Pinocchio 4.1's constraintDynamics to
1e-9 (scaled by max(1, |x|)), MuJoCo's equality constraints to their softness (stated there).
"""
from dataclasses import dataclass, field

import numpy as np
import quadprog
from scipy.linalg import solve_triangular
from scipy.linalg.lapack import dpotrf, dpotrs

from . import spatial
from .crba import crba
from .jacobian import frame_jacobian, frame_jacobian_dot
from .kinematics import forward_kinematics, frame_placement
from .rnea import nonlinear_effects

KINDS = ("point", "6d", "revolute")
DIMS = {"point": 3, "6d": 6, "revolute": 5}
ROW_NAMES = {"point": ("x", "y", "z"), "6d": ("x", "y", "z", "rx", "ry", "rz"),
             "revolute": ("x", "y", "z", "tilt1", "tilt2")}
RANK_RTOL = 1e-8            # singular values of B = L^-1 J^T below RANK_RTOL s_max: dependent rows
CONSISTENCY_RTOL = 1e-8     # |V_0^T rhs| above this (relative): inconsistent constraints
REDUNDANT = ("raise", "min_norm")


@dataclass
class FrameConstraint:
    """A bilateral constraint on frame `frame`: its origin ("point") or its whole placement ("6d")
    does not accelerate (or, with Baumgarte gains, returns to `target_p` / `target_R`).
    With `frame2`: a loop closure between C1 = frame * placement1 and C2 = frame2 * placement2
    ("point": the points coincide, "6d": the frames are welded, "revolute": a hinge about `axis`, a
    unit vector in C1's axes); placements are (R, p) in the frame's axes, None = identity.
    `name` labels the constraint in error messages."""
    frame: str
    kind: str = "point"
    target_p: np.ndarray = None
    target_R: np.ndarray = None
    frame2: str = None
    placement1: tuple = None
    placement2: tuple = None
    axis: np.ndarray = None
    name: str = None

    @property
    def dim(self):
        return DIMS.get(self.kind, 6)

    @property
    def label(self):
        if self.name:
            return self.name
        return self.frame if self.frame2 is None else f"{self.frame}-{self.frame2}"


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


def _finite(x, shape, what):
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected {shape} finite numbers, got {x!r}") from None
    if a.shape != shape or not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: expected {shape} finite numbers, got {x!r}")
    return a


def _rotation(R, what):
    R = _finite(R, (3, 3), what)
    if np.max(np.abs(R.T @ R - np.eye(3))) > 1e-9 or np.linalg.det(R) < 0:
        raise ValueError(f"{what}: not a rotation matrix (R^T R != 1 or det < 0)")
    return R


def _placement(pl, what):
    if pl is None:
        return None
    try:
        R, p = pl
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected (R, p), a 3x3 rotation and a 3-vector") from None
    return _rotation(R, f"{what} R"), _finite(p, (3,), f"{what} p")


def _check_frame(tree, name, what):
    if name not in tree.frames:
        raise ValueError(f"{what}: unknown frame {name!r}; frames are {sorted(tree.frames)}")


def check_constraint(tree, c):
    """Validate a FrameConstraint against the tree (ValueError naming the problem)."""
    _check_kind(c)
    what = f"constraint {c.label!r}"
    _check_frame(tree, c.frame, what)
    if c.frame2 is not None:
        _check_frame(tree, c.frame2, what)
        if c.target_p is not None or c.target_R is not None:
            raise ValueError(f"{what}: target_p / target_R are for a constraint to the world; a "
                             "relative constraint closes on frame2 * placement2")
        if tree.frames[c.frame].body == tree.frames[c.frame2].body:
            raise ValueError(f"{what}: frames {c.frame!r} and {c.frame2!r} are on the same body "
                             "(the constraint rows would be zero)")
    elif c.placement2 is not None:
        raise ValueError(f"{what}: placement2 needs frame2 (use target_p / target_R for the world)")
    _placement(c.placement1, f"{what} placement1")
    _placement(c.placement2, f"{what} placement2")
    if c.target_p is not None:
        _finite(c.target_p, (3,), f"{what} target_p")
    if c.target_R is not None:
        _rotation(c.target_R, f"{what} target_R")
    if c.kind == "revolute":
        if c.axis is None:
            raise ValueError(f"{what}: a revolute constraint needs an axis")
        ax = _finite(c.axis, (3,), f"{what} axis")
        if np.linalg.norm(ax) < 1e-9:
            raise ValueError(f"{what}: the axis is zero")
    elif c.axis is not None:
        raise ValueError(f"{what}: an axis is only for kind 'revolute', not {c.kind!r}")


def check_state(tree, q, v, tau=None, what="state"):
    """Shapes and finiteness of (q, v[, tau]) at a public entry point."""
    q = _finite(q, (tree.nq,), f"{what}: q")
    v = _finite(v, (tree.nv,), f"{what}: v")
    if tau is None:
        return q, v
    return q, v, _finite(tau, (tree.nv,), f"{what}: tau")


def _cross(a, b):
    """a x b of two 3-vectors (np.cross costs ten times more on these)."""
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def _normal_pair(axis):
    """The unit axis and two unit vectors n1, n2 completing it to a right-handed basis (n1, n2, axis):
    _tangents' pair, negated (n1 = t x a = -(a x t))."""
    a, t1, t2 = _tangents(axis)
    return a, -t1, -t2


def _pose(tree, data, name, placement):
    """(R, p, r): world pose of C = frame * placement after forward_kinematics, r = p - frame origin."""
    R, p = frame_placement(tree, data, name)
    if placement is None:
        return R, p, None
    Rc, pc = placement
    r = R @ np.asarray(pc, float)
    return R @ np.asarray(Rc, float), p + r, r


def _side(tree, data, v, name, placement, drift=True):
    """Constraint frame C = frame * placement: (R, p) in the world, its LOCAL_WORLD_ALIGNED Jacobian
    J (at p, world axes) and g = Jdot v (p's classical acceleration, the drift part; zeros if not
    drift)."""
    J = frame_jacobian(tree, data, name, "local_world_aligned")
    g = frame_jacobian_dot(tree, data, name, "local_world_aligned") @ v if drift else np.zeros(6)
    R, p, r = _pose(tree, data, name, placement)
    if r is not None:                                   # a point at r from the frame origin:
        w = J[3:] @ v                                   # p' = v_o + w x r,  p'' = a_o + w' x r + w x (w x r)
        J = np.vstack([J[:3] - spatial.skew(r) @ J[3:], J[3:]])
        if drift:
            g = np.concatenate([g[:3] - _cross(r, g[3:]) + _cross(w, _cross(w, r)), g[3:]])
    return R, p, J, g


def _world_side(c, R1, p1):
    """The second side of a constraint to the world: the target placement (the first side's own where
    no target is given, so that its error is zero)."""
    R2 = R1 if c.target_R is None else np.asarray(c.target_R, float)
    p2 = p1 if c.target_p is None else np.asarray(c.target_p, float)
    return R2, p2


def _error(c, R1, p1, R2, p2):
    """Baumgarte error: p1 - p2, then R2 log3(R2^T R1) ("6d") or n_k . (a2 x a1) ("revolute")."""
    if c.kind == "point":
        return p1 - p2
    if c.kind == "6d":
        return np.concatenate([p1 - p2, R2 @ spatial.log3(R2.T @ R1)])
    a, n1, n2 = _normal_pair(c.axis)
    return np.concatenate([p1 - p2, np.column_stack([n1, n2]).T @ (R1.T @ _cross(R2 @ a, R1 @ a))])


def _constraint_rows(tree, data, v, c, drift=True):
    """(J_c, gamma_c, e_c, N) of one constraint: rows, drift Jdot v, Baumgarte error; N (3 x 2) maps
    a revolute's two rotational multipliers to a moment (None otherwise)."""
    R1, p1, J1, g1 = _side(tree, data, v, c.frame, c.placement1, drift)
    if c.frame2 is None:
        (R2, p2), J2, g2 = _world_side(c, R1, p1), np.zeros((6, tree.nv)), np.zeros(6)
    else:
        R2, p2, J2, g2 = _side(tree, data, v, c.frame2, c.placement2, drift)
    e = _error(c, R1, p1, R2, p2)
    if c.kind == "point":                               # p1' - p2',  p1'' - p2''
        return J1[:3] - J2[:3], g1[:3] - g2[:3], e, None
    w1, w2 = J1[3:] @ v, J2[3:] @ v
    if c.kind == "6d":
        r = p1 - p2                                     # body 2 at p1: v_p2 + w2 x r
        J2a = np.vstack([J2[:3] - spatial.skew(r) @ J2[3:], J2[3:]])
        v12 = J1[:3] @ v - J2[:3] @ v                   # r' = v_p1 - v_p2
        g2a = np.concatenate([g2[:3] - _cross(r, g2[3:]) + _cross(w2, v12), g2[3:]])
        return J1 - J2a, g1 - g2a, e, None
    _, n1, n2 = _normal_pair(c.axis)                    # revolute: point rows + N^T (w1 - w2)
    N = R1 @ np.column_stack([n1, n2])                  # rotates with body 1: N' = w1 x N
    Jr = N.T @ (J1[3:] - J2[3:])
    gr = N.T @ (g1[3:] - g2[3:]) + N.T @ _cross(w1 - w2, w1)      # (w1 x n_k) . (w1 - w2)
    return np.vstack([J1[:3] - J2[:3], Jr]), np.concatenate([g1[:3] - g2[:3], gr]), e, N


def _contact_rows(tree, data, v, c, drift=True):
    J = frame_jacobian(tree, data, c.frame, "local_world_aligned")
    g = frame_jacobian_dot(tree, data, c.frame, "local_world_aligned") @ v if drift else np.zeros(6)
    r = c.offset
    if r is not None:                                   # a point at r from the origin (world axes):
        r = np.asarray(r, float)                        # p' = v_o + w x r,  p'' = a_o + w' x r + w x (w x r)
        w = J[3:] @ v
        J = np.vstack([J[:3] - spatial.skew(r) @ J[3:], J[3:]])
        if drift:
            g = np.concatenate([g[:3] - _cross(r, g[3:]) + _cross(w, _cross(w, r)), g[3:]])
    return J[:3], g[:3]


def _stack(tree, data, q, v, constraints, drift=True):
    """Rows of all constraints: J, gamma = Jdot v (zeros if not drift: impacts need none), the
    Baumgarte errors (bilateral; zeros for contacts) and per constraint its N (see _constraint_rows)."""
    forward_kinematics(tree, data, q, v)
    Js, gs, es, Ns = [], [], [], []
    for c in constraints:
        if isinstance(c, FrameConstraint):
            J, g, e, N = _constraint_rows(tree, data, v, c, drift)
        else:
            (J, g), e, N = _contact_rows(tree, data, v, c, drift), np.zeros(3), None
        Js.append(J)
        gs.append(g)
        es.append(e)
        Ns.append(N)
    if not Js:
        return np.zeros((0, tree.nv)), np.zeros(0), np.zeros(0), []
    return np.vstack(Js), np.concatenate(gs), np.concatenate(es), Ns


def constraint_jacobian(tree, data, q, v, constraints):
    """(J, Jdot v, J v) stacked over the constraints (rows of the LOCAL_WORLD_ALIGNED Jacobians;
    relative constraints as in the module docstring)."""
    J, gamma, _, _ = _stack(tree, data, q, v, constraints)
    return J, gamma, J @ v


def constraint_error(tree, data, q, constraints):
    """The Baumgarte position errors e stacked over the frame constraints (p1 - p2, the rotation or
    the tilts; see the module docstring)."""
    forward_kinematics(tree, data, q)
    es = []
    for c in constraints:
        R1, p1, _ = _pose(tree, data, c.frame, c.placement1)
        R2, p2 = _world_side(c, R1, p1) if c.frame2 is None else _pose(tree, data, c.frame2, c.placement2)[:2]
        es.append(_error(c, R1, p1, R2, p2))
    return np.concatenate(es) if es else np.zeros(0)


def _mass_factor(tree, data, q):
    return _cholesky(crba(tree, data, q), "the mass matrix")


def _free_motion(tree, data, q, v, tau, J):
    """Cholesky factor L of M, a_free = M^-1 (tau - h) and M^-1 J^T."""
    L = _mass_factor(tree, data, q)
    h = nonlinear_effects(tree, data, q, v)
    x = dpotrs(L, np.column_stack([tau - h, J.T]), lower=1)[0]    # M x = b with M = L L^T
    return x[:, 0], x[:, 1:], L


def _cholesky(A, what):
    L, info = dpotrf(A, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"{what} is not positive definite")
    return L


def _labels(constraints):
    out = []
    for c in constraints:
        if isinstance(c, FrameConstraint):
            out += [(c.label, r) for r in ROW_NAMES.get(c.kind, ())]
        else:
            out += [(f"contact {c.frame}", r) for r in ("x", "y", "z")]
    return out


def independent_rows(L, J, rhs, scale, constraints, what):
    """Rank-revealing reduction of the rows J (m x nv) with right-hand side rhs (the rows must give
    J x = rhs for the x = M^-1 J^T lambda they act through): B = L^-1 J^T = U S V^T, r = #{s_k >
    RANK_RTOL s_max}.  Returns V_r (m x r): the independent combinations V_r^T J, whose multipliers mu
    give lambda = V_r mu (least norm).  ValueError if |V_0^T rhs| > CONSISTENCY_RTOL * scale."""
    m = J.shape[0]
    if m == 0:
        return np.zeros((0, 0))
    B = solve_triangular(L, J.T, lower=True, check_finite=False)     # G = J M^-1 J^T = B^T B
    _, s, Vt = np.linalg.svd(B, full_matrices=True)
    r = int(np.sum(s > RANK_RTOL * max(s[0], 1e-300))) if s.size else 0
    V0 = Vt[r:].T
    if V0.shape[1]:
        res = V0.T @ rhs                                # what no constraint force can change
        k = int(np.argmax(np.abs(res)))
        if abs(res[k]) > CONSISTENCY_RTOL * scale:
            labels = _labels(constraints)
            rows = [f"{labels[i][0]} {labels[i][1]}" for i in np.argsort(-np.abs(V0[:, k]))
                    if abs(V0[i, k]) > 1e-6][:6]
            raise ValueError(f"{what}: inconsistent constraints: rows ({', '.join(rows)}) cannot all be "
                             f"satisfied (residual {abs(res[k]):.3g} in a direction no joint motion "
                             "reaches: conflicting targets, or a loop that does not close in a "
                             "direction it cannot move, under Baumgarte terms)")
    return Vt[:r].T


def _split(lam, constraints, Ns):
    """Per constraint: [f] (point), [f; n] (6d), [f; N mu] (revolute)."""
    out, k = [], 0
    for c, N in zip(constraints, Ns):
        x = lam[k:k + c.dim]
        if c.kind == "revolute":
            x = np.concatenate([x[:3], N @ x[3:]])
        out.append(x)
        k += c.dim
    return out


def constrained_dynamics(tree, data, q, v, tau, constraints, baumgarte=(0.0, 0.0), redundant="raise"):
    """Bilateral frame constraints: (a, wrenches), wrenches a list of [f] (point) or [f; n] (6d,
    revolute) per constraint, world axes at the (first) constraint point, applied on the robot (on
    frame's body by frame2's for a relative constraint).  baumgarte = (Kp, Kd).
    redundant: "raise" (ValueError if J M^-1 J^T is singular) or "min_norm" (rank-revealing solve,
    least-norm multipliers, ValueError for inconsistent constraints): see the module docstring."""
    q, v, tau = check_state(tree, q, v, tau, "constrained_dynamics")
    if redundant not in REDUNDANT:
        raise ValueError(f"constrained_dynamics: redundant={redundant!r}; use one of {REDUNDANT}")
    for c in constraints:
        check_constraint(tree, c)
    J, gamma, e, Ns = _stack(tree, data, q, v, constraints)
    a_free, MiJt, L = _free_motion(tree, data, q, v, tau, J)
    Kp, Kd = baumgarte
    a_des = -Kd * (J @ v)
    if Kp:
        a_des -= Kp * e
    rhs = a_des - gamma - J @ a_free                    # (2)
    if redundant == "raise":
        G = J @ MiJt                                    # Delassus matrix J M^-1 J^T
        try:
            lam = dpotrs(_cholesky(G, "J M^-1 J^T"), rhs, lower=1)[0]
        except np.linalg.LinAlgError:
            raise ValueError("constrained_dynamics: the constraints are redundant or singular "
                             "(J M^-1 J^T not positive definite); remove a constraint, or pass "
                             "redundant='min_norm' (e.g. a planar loop's out-of-plane rows)") from None
    else:
        scale = max(1.0, *(float(np.max(np.abs(x), initial=0.0)) for x in (a_des, gamma, J @ a_free)))
        Vr = independent_rows(L, J, rhs, scale, constraints, "constrained_dynamics")
        Jr = Vr.T @ J                                   # independent rows, G_r = Jr M^-1 Jr^T > 0
        mu = dpotrs(_cholesky(Jr @ MiJt @ Vr, "J M^-1 J^T (independent rows)"), Vr.T @ rhs, lower=1)[0]
        lam = Vr @ mu                                   # least-norm multipliers
    a = a_free + MiJt @ lam
    return a, _split(lam, constraints, Ns)


def _tangents(n):
    n = np.asarray(n, float) / np.linalg.norm(n)
    t = np.array([1.0, 0.0, 0.0]) if abs(n[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    t1 = _cross(n, t)
    t1 /= np.linalg.norm(t1)
    return n, t1, _cross(n, t1)


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


def check_contact(tree, c):
    _check_frame(tree, c.frame, f"contact on {c.frame!r}")
    n = _finite(c.normal, (3,), f"contact on {c.frame!r}: normal")
    if np.linalg.norm(n) < 1e-9:
        raise ValueError(f"contact on {c.frame!r}: the normal is zero")
    if c.offset is not None:
        _finite(c.offset, (3,), f"contact on {c.frame!r}: offset")
    _cone_rows(c)


def contact_qp(G, b, Vr, contacts, reg):
    """lambda (over the rows of G: nb bilateral rows, then 3 per contact) minimising
    1/2 lambda^T G lambda + b^T lambda with the bilateral multipliers lambda_b = V_r mu (free; V_r from
    independent_rows) and each contact's force in its cone: frictionless lambda_c = n x_n, x_n >= 0 (one
    variable: no tangential direction left for the QP to resolve); pyramid lambda_c = x (3), C x >= 0.
    In the variables, G_x = T G T^T (lambda = T^T x); the contacts' block is regularised by
    reg * trace / rows (Tikhonov, so that redundant contacts still give a unique answer; G_x stays
    positive definite, the bilateral block being so and its Schur complement PSD).
    quadprog: min 1/2 x^T G x - a^T x  s.t.  C^T x >= b0."""
    nb, nf = Vr.shape
    cols = [1 if c.mu is None else 3 for c in contacts]
    T = np.zeros((nf + sum(cols), G.shape[0]))
    T[:nf, :nb] = Vr.T
    rows, k, r = [], nf, nb
    for c, n_k in zip(contacts, cols):
        C = _cone_rows(c)                               # in world axes, on the 3-vector lambda_c
        if c.mu is None:
            T[k, r:r + 3] = _tangents(c.normal)[0]      # lambda_c = n x_n
            rows.append((k, np.ones(1)))
        else:
            T[k:k + 3, r:r + 3] = np.eye(3)
            rows += [(k, row) for row in C]
        k, r = k + n_k, r + 3
    Gx, bx = T @ G @ T.T, T @ b
    Gx = 0.5 * (Gx + Gx.T)
    m = Gx.shape[0]
    if m > nf:
        Gx[nf:, nf:] += reg * max(np.trace(Gx[nf:, nf:]), 1e-300) / (m - nf) * np.eye(m - nf)
    if rows:
        Cx = np.zeros((len(rows), m))
        for row, (k, c) in enumerate(rows):
            Cx[row, k:k + len(c)] = c
        x = quadprog.solve_qp(Gx, -bx, Cx.T, np.zeros(len(rows)), 0)[0]
    elif m:
        x = dpotrs(_cholesky(Gx, "J M^-1 J^T (independent rows)"), -bx, lower=1)[0]
    else:
        x = np.zeros(0)
    return T.T @ x


def _exact_sliding(G, b, Vr, contacts, reg, u, nb, lam, slip_velocity, tol=1e-13, max_iterations=200):
    """Sliding contacts exactly (contact_dynamics' sliding="exact"): a contact with friction whose
    point slips (|u_t| > slip_velocity, u its velocity) gets Coulomb's sliding friction opposite the
    slip, lambda_t = -mu lambda_n u_t / |u_t| (the circular cone's edge), and the Signorini conditions
    on its normal alone (lambda_n >= 0, c''_n >= 0, lambda_n c''_n = 0: it stays on the surface while
    it pushes).  Not a QP (the friction does not follow the normal's constraint): a fixed point over the
    sliding contacts' normal forces, each iterate the QP with those contacts frictionless and their
    friction as a known force, c'' = G (lambda_qp + lambda_t) + b.  It contracts when mu times the
    coupling of friction into the normal acceleration is below 1; else ValueError (Painleve's paradox
    or its neighbourhood: no or several solutions)."""
    slide = {}
    for i, c in enumerate(contacts):
        if c.mu is None:
            continue
        n = _tangents(c.normal)[0]
        ut = u[i] - (u[i] @ n) * n
        s_ = float(np.linalg.norm(ut))
        if s_ > slip_velocity:
            slide[i] = (n, ut / s_, float(c.mu))
    if not slide:
        return lam
    normal_only = [Contact(c.frame, c.normal, None, c.facets, c.offset) if i in slide else c
                   for i, c in enumerate(contacts)]
    lam_n = {i: max(float(lam[nb + 3 * i:nb + 3 * i + 3] @ n), 0.0) for i, (n, _, _) in slide.items()}
    for _ in range(max_iterations):
        lt = np.zeros_like(b)
        for i, (n, d, mu) in slide.items():
            lt[nb + 3 * i:nb + 3 * i + 3] = -mu * lam_n[i] * d
        lq = contact_qp(G, b + G @ lt, Vr, normal_only, reg)
        new = {i: float(lq[nb + 3 * i:nb + 3 * i + 3] @ n) for i, (n, _, _) in slide.items()}
        change = max(abs(new[i] - lam_n[i]) for i in slide)
        lam_n = new
        if change <= tol * max(1.0, max(abs(x) for x in new.values())):
            return lq + lt
    raise ValueError("contact_dynamics: sliding=\"exact\" did not converge (friction coupling into the "
                     "normal too strong for this mu: Painleve's paradox or near it); use the relaxed model")


def contact_dynamics(tree, data, q, v, tau, contacts, bilateral=(), baumgarte=(0.0, 0.0), reg=1e-12,
                     sliding="relaxed", slip_velocity=1e-6):
    """Unilateral point contacts (plus optional bilateral frame constraints, relative ones too): (a,
    forces, wrenches) with forces (k, 3) the contact forces on the robot (world axes) and wrenches those
    of the bilateral constraints (as constrained_dynamics returns them).  The contacts are taken as
    closed (gap zero); the caller decides which.
    baumgarte: Kd damps every constraint velocity, Kp acts on the bilateral constraints' errors.
    reg: Tikhonov term added to the Delassus matrix (relative to its trace) so that redundant
    contacts (more than the arm can resist independently) still give a unique, smallest-norm answer.
    The bilateral rows are first reduced to independent ones (as redundant="min_norm" does).
    sliding: "relaxed" (the QP over the cones: exact for sticking and separating contacts, a sliding
    contact may lift, Anitescu's / MuJoCo's relaxation) or "exact" (contacts slipping faster than
    slip_velocity get Coulomb's sliding friction opposite the slip and stay on the surface while they
    push; see _exact_sliding)."""
    if sliding not in ("relaxed", "exact"):
        raise ValueError(f"contact_dynamics: sliding must be 'relaxed' or 'exact', got {sliding!r}")
    q, v, tau = check_state(tree, q, v, tau, "contact_dynamics")
    for c in bilateral:
        check_constraint(tree, c)
    for c in contacts:
        check_contact(tree, c)
    bilateral, contacts = list(bilateral), list(contacts)
    J, gamma, e, Ns = _stack(tree, data, q, v, bilateral + contacts)
    a_free, MiJt, L = _free_motion(tree, data, q, v, tau, J)
    Kp, Kd = baumgarte
    a_des = -Kd * (J @ v)
    nb = sum(c.dim for c in bilateral)
    if Kp and bilateral:
        a_des[:nb] -= Kp * e[:nb]
    b = J @ a_free + gamma - a_des                      # c'' = G lambda + b
    Vr = np.zeros((0, 0))
    if nb:                                              # bilateral rows: independent combinations
        scale = max(1.0, *(float(np.max(np.abs(x[:nb]), initial=0.0)) for x in (a_des, gamma, J @ a_free)))
        Vr = independent_rows(L, J[:nb], -b[:nb], scale, bilateral, "contact_dynamics")
    G = J @ MiJt
    lam = contact_qp(G, b, Vr, contacts, reg)           # Gauss's principle over the cones
    if sliding == "exact" and contacts:
        u = (J @ v)[nb:].reshape(-1, 3)                 # the contact points' velocities
        lam = _exact_sliding(G, b, Vr, contacts, reg, u, nb, lam, float(slip_velocity))
    a = a_free + MiJt @ lam
    return a, lam[nb:].reshape(-1, 3), _split(lam[:nb], bilateral, Ns)
