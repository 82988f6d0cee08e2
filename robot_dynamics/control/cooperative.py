"""Cooperative carry: two arms holding one rigid object (a box squeezed between the two hands) move it
along a Cartesian trajectory of the object frame, with the internal (squeezing) force held at a set value
and the object's mass and inertia compensated.  No ROS.

    arms = [CarryArm(Model.from_robot("panda"), base=(R_b1, p_b1), grasp=(R_X1, p_X1)), CarryArm(...)]
    law = CooperativeCarry(arms, CarryObject(mass=1.5, inertia=I_o), trajectory, squeeze=30.0)
    law.reset(t0, [(q1, v1), (q2, v2)])
    tau1, tau2 = law.compute(t, [(q1, v1, t1), (q2, v2, t2)])    # t_i: stamp of arm i's state

Frames and symbols (world axes, spatial vectors [linear; angular], the torque about the point named):
  T_hi = (R_hi, p_hi)   grasp frame of hand i (`hand_frame` of arm i, through its base pose (R_bi, p_bi))
  X_i  = (R_Xi, p_Xi)   the object frame (its centre of mass) in the grasp frame of hand i: T_o = T_hi X_i
  T_o  = (R_o, p_o)     the object's pose estimated from both hands: p_o the mean of p_hi + R_hi p_Xi,
                        R_o halfway between R_h1 R_X1 and R_h2 R_X2 (geodesic); (v_o, w_o) likewise
  r_i  = p_hi - p_o     grasp point i seen from the object's centre

Grasp matrix (hand wrenches on the object -> the object's resultant wrench at its centre):

    W_o = G [w_1; w_2],    G = [[I, 0, I, 0], [S(r_1), I, S(r_2), I]]      S(r) f = r x f       (1)

and G^T maps the object's twist to the hands' twists (rigid grasp): [v_hi; w_hi] = G_i^T [v_o; w_o].
Internal wrenches are the null space of G; the squeeze is the one along the line between the hands,
n = (p_h2 - p_h1) / |p_h2 - p_h1|:  w_int = f_sq [n; 0; -n; 0]  (G w_int = 0 since r_1 - r_2 || n).

Law (one pass, per cycle):
    a_c = a_d + Kp (p_d - p_o) + Kd (v_d - v_o),   alpha_c = Kr log3(R_d R_o^T) + Dr (w_d - w_o)
    W_o = [m (a_c - g);  I_w alpha_c + w_o x I_w w_o]                (object dynamics, I_w = R_o I R_o^T)
    [w_1; w_2] = G^+ W_o + w_int                                     (G^+ = G^T (G G^T)^-1: least norm)
    F_i = Lambda_i (xdd_hi - Jdot_i v_i) + w_i + P_int K_rel e_i + D_rel (xd_hi,d - xd_hi)
    tau_i = J_i^T F_i + h_i(q_i, v_i) + N_i^T (K_ns (q_ns - q_i) - D_ns v_i)
with xdd_hi = [a_c + alpha_c x r_i + w_o x (w_o x r_i); alpha_c] (the hand moving rigidly with the object),
Lambda_i = (J_i M_i^-1 J_i^T)^-1 the hand's operational-space inertia, h_i = C v + g, N_i^T = I - J_i^T
Lambda_i J_i M_i^-1.  So each arm carries its own inertia along the object's commanded acceleration and
applies its share of the object's wrench; the sum over the hands accelerates the object at (a_c, alpha_c).
e_i = [p_hi,d - p_hi; log3(R_hi,d R_hi^T)], T_hi,d = T_o X_i^-1, is the hand's departure from the rigid
grasp (equal and opposite on the two hands: a relative motion); P_int removes its component along n, so
the relative stiffness holds the five other internal directions (shear, bending, twist) while the
squeeze direction is force-controlled only (no stiffness fights f_sq).

The closed chain.  `cell_chain` builds the pair as one closed chain (arm 1 carrying the object, arm 2's
hand welded to it by a `FrameConstraint`, "fixed" closure): its KKT multiplier is the wrench the object
applies on hand 2, the internal wrench of the cut.  The law above is that chain's inverse dynamics split
per arm: run through the chain's constrained forward dynamics (the reference layer's KKT solve), the
law's torques give the object exactly (a_c, alpha_c) and a multiplier carrying the set squeeze
(test_cooperative.py, to 1e-6).  Per cycle (bench/cell_carry.py, this 2-core host under load): the law
for both arms 151 us median, one arm's share (the partner's kinematics only) 121 us; one forward KKT
solve of the 14-joint chain 990 us in the reference layer, 4.4 us in Pinocchio's constraintDynamics.

The form: one controller for both arms.  Two controllers cost about as much each (121 vs 151 us) but
must exchange their states; with the partner's state 4 ms old (a DDS hop under load on these cores,
DESIGN.md) the box's pose error grows five to ten times (0.06 -> 0.37 mm, 0.3 -> 2.7 mrad max), and the
partner's loss is seen only as silence.  One controller sees both states of one instant.  `compute(...,
arms=(i,))` still gives one arm's share for a split deployment.

Partner lost: an arm whose state is older than `stale_after` (by the law's clock t, the stamps the
caller gives) or not finite no longer counts: the other arm falls back to holding its own hand where it
was at that moment (Cartesian impedance `hold_*` on the grasp frame, posture kept), its share of the
object's wrench and its squeeze ramped to zero over `release_time` (no torque step).  The hold latches:
the carry resumes only through `reset`.  A lost arm's own command is a hold of its last state too
(whatever arrives at it, its own controller, if alive, decides).
"""
import math
from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin
from scipy.linalg import solve_triangular
from scipy.linalg.lapack import dpotrf, dpotrs

from ..dynamics.backends import PinocchioBackend

_LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
_GRAVITY = np.array([0.0, 0.0, -9.81])


def _cross(a, b):
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def _skew(r):
    return np.array([[0.0, -r[2], r[1]], [r[2], 0.0, -r[0]], [-r[1], r[0], 0.0]])


def _pose(pose, what):
    try:
        R, p = pose
        R, p = np.asarray(R, dtype=float), np.asarray(p, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected (R, p), a 3x3 rotation and a 3-vector") from None
    if R.shape != (3, 3) or p.shape != (3,) or not (np.all(np.isfinite(R)) and np.all(np.isfinite(p))):
        raise ValueError(f"{what}: expected (R, p), a finite 3x3 rotation and a 3-vector")
    if np.max(np.abs(R.T @ R - np.eye(3))) > 1e-6 or np.linalg.det(R) < 0:
        raise ValueError(f"{what}: R is not a rotation matrix")
    return R, p


def grasp_matrix(p_o, points):
    """G (6 x 6k): hand wrenches [f_i; n_i] (world axes, about the grasp points `points`) -> the object's
    resultant wrench about p_o.  Eq. (1)."""
    G = np.zeros((6, 6 * len(points)))
    for i, p in enumerate(points):
        G[:3, 6 * i:6 * i + 3] = np.eye(3)
        G[3:, 6 * i:6 * i + 3] = _skew(np.asarray(p, float) - p_o)
        G[3:, 6 * i + 3:6 * i + 6] = np.eye(3)
    return G


def squeeze_direction(p_h1, p_h2):
    d = p_h2 - p_h1
    n = float(np.linalg.norm(d))
    if not n > 1e-9:
        raise ValueError("the two grasp points coincide: no squeeze direction")
    return d / n


def internal_force(w1, w2, n):
    """The squeeze in a pair of hand wrenches on the object: the part of the hands' forces along n that
    cancels, (f_1 - f_2) . n / 2 (positive: the hands press the object between them)."""
    return 0.5 * float((np.asarray(w1)[:3] - np.asarray(w2)[:3]) @ n)


@dataclass
class CarryObject:
    """The carried object: mass [kg], rotational inertia about its centre of mass in its own axes."""
    mass: float
    inertia: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))

    def __post_init__(self):
        if not (math.isfinite(self.mass) and self.mass >= 0):
            raise ValueError(f"object mass must be a finite number >= 0, got {self.mass}")
        I = np.asarray(self.inertia, dtype=float)
        if I.shape != (3, 3) or not np.all(np.isfinite(I)) or np.max(np.abs(I - I.T)) > 1e-12:
            raise ValueError("object inertia must be a finite symmetric 3x3 matrix")
        if np.min(np.linalg.eigvalsh(I)) < -1e-12:
            raise ValueError("object inertia must be positive semi-definite")
        self.inertia = I

    @classmethod
    def box(cls, mass, size):
        """A uniform box of `mass` and edge lengths `size` (x, y, z)."""
        a, b, c = (float(s) for s in size)
        return cls(mass, mass / 12.0 * np.diag([b * b + c * c, a * a + c * c, a * a + b * b]))


class CarryTrajectory:
    """The object's pose along straight legs between waypoints (positions; the orientation held), each a
    quintic (minimum-jerk) blend at rest to rest, its duration set by the peak speed (1.875 d / T),
    with `dwell` seconds at rest at each waypoint and `start` seconds at rest before the first leg."""

    def __init__(self, p0, R0, waypoints, max_speed=0.1, dwell=0.5, start=1.0):
        self.R = _pose((R0, p0), "trajectory start")[0]
        if not (math.isfinite(max_speed) and max_speed > 0):
            raise ValueError(f"max_speed must be > 0, got {max_speed}")
        pts = [np.asarray(p0, float)] + [np.asarray(w, float) for w in waypoints]
        self.legs, t = [], float(start)
        for a, b in zip(pts[:-1], pts[1:]):
            d = float(np.linalg.norm(b - a))
            T = max(1.875 * d / max_speed, 1e-6)
            self.legs.append((t, T, a, b))
            t += T + dwell
        self.p0, self.end = pts[0], t
        self.last = pts[-1]

    def sample(self, t):
        """(p, v, a) of the object's centre at time t (s from the trajectory's start)."""
        p, z = self.p0, np.zeros(3)
        for t0, T, a, b in self.legs:
            if t < t0:
                return p, z, z
            if t <= t0 + T:
                s = (t - t0) / T
                f = s ** 3 * (10 - 15 * s + 6 * s * s)
                fd = 30 * s * s * (1 - s) ** 2 / T
                fdd = 60 * s * (1 - 3 * s + 2 * s * s) / (T * T)
                return a + f * (b - a), fd * (b - a), fdd * (b - a)
            p = b
        return p, z, z


class CarryArm:
    """One arm of the pair: its Model (an arm in its own base frame), the base pose in the world, the
    grasp (object frame in the hand's grasp frame) and the grasp frame's name."""

    def __init__(self, model, base=(np.eye(3), np.zeros(3)), grasp=(np.eye(3), np.zeros(3)),
                 hand_frame="panda_hand_tcp", name=None, gravity=_GRAVITY):
        self.model = model
        self.backend = PinocchioBackend(model)
        if not model.q_identity or model.floating_base:
            raise ValueError("CarryArm: fixed-base arms in Pinocchio's joint order only")
        model.check_frame(hand_frame)
        self.R_b, self.p_b = _pose(base, "base pose")
        self.R_X, self.p_X = _pose(grasp, "grasp")
        self.hand_frame, self.name = hand_frame, name or hand_frame
        self.pm, self.data = self.backend.pm, self.backend.data
        self.pm.gravity.linear = self.R_b.T @ np.asarray(gravity, float)     # the world's, in base axes
        self.fid = model.frame_ids[hand_frame]
        self.n = model.nv
        self._zero = np.zeros(self.n)
        self._B = np.zeros((6, 6))                    # base axes -> world axes on [linear; angular]
        self._B[:3, :3] = self._B[3:, 3:] = self.R_b

    def kinematics(self, q, v, dynamics=True):
        """World pose, Jacobian (6 x n, [linear; angular] world axes at the grasp point), twist and
        Jdot v of the grasp frame; with dynamics also M (upper triangle: what dpotrf reads) and
        h = C v + g."""
        pm, d = self.pm, self.data
        if dynamics:
            pin.computeAllTerms(pm, d, q, v)
        else:
            pin.computeJointJacobians(pm, d, q)
        pin.forwardKinematics(pm, d, q, v, self._zero)
        M = pin.updateFramePlacement(pm, d, self.fid)
        B = self._B
        k = _Kin()
        k.R = self.R_b @ M.rotation
        k.p = self.R_b @ M.translation + self.p_b
        k.J = B @ pin.getFrameJacobian(pm, d, self.fid, _LWA)
        tw = B @ pin.getFrameVelocity(pm, d, self.fid, _LWA).vector
        k.v, k.w = tw[:3], tw[3:]
        k.gamma = B @ pin.getFrameClassicalAcceleration(pm, d, self.fid, _LWA).vector
        k.q, k.qd = q, v
        if dynamics:
            k.M, k.h = d.M, d.nle
        # the object seen from this hand: T_o = T_h X
        k.R_o = k.R @ self.R_X
        r = k.R @ self.p_X
        k.p_o = k.p + r
        k.v_o = k.v + _cross(k.w, r)
        return k


class _Kin:
    __slots__ = ("R", "p", "J", "v", "w", "gamma", "q", "qd", "M", "h", "R_o", "p_o", "v_o")


@dataclass
class CarryGains:
    kp: float = 400.0          # 1/s^2   object position (acceleration per m of error)
    kd: float = 40.0           # 1/s
    kr: float = 400.0          # 1/s^2   object orientation
    dr: float = 40.0           # 1/s
    k_rel: float = 2000.0      # N/m     hands' relative pose, off the squeeze axis
    d_rel: float = 40.0        # N s/m
    k_rel_rot: float = 50.0    # N m/rad
    d_rel_rot: float = 2.0     # N m s/rad
    k_ns: float = 10.0         # N m/rad posture (null space)
    d_ns: float = 2.0          # N m s/rad
    hold_k: float = 1000.0     # N/m     own hand's hold when the partner is lost
    hold_k_rot: float = 50.0   # N m/rad
    hold_zeta: float = 1.0     # damping ratio of the hold (on the hand's operational-space inertia)


def _osc_torque(i, k, F, xdd, q_ns, g):
    """tau = J^T (F + Lambda (xdd - Jdot v)) + h + N^T tau_0 with N^T tau_0 = tau_0 - J^T Lambda J M^-1
    tau_0, Lambda = (J M^-1 J^T)^-1, M = U^T U (LAPACK on M's upper triangle, no inverse formed),
    tau_0 = k_ns (q_ns - q) - d_ns v.  Returns (tau, U_A) with U_A the Cholesky factor of Lambda^-1."""
    U, info = dpotrf(k.M, lower=0, clean=0)
    if info:
        raise ValueError(f"arm {i}: mass matrix not positive definite")
    X = dpotrs(U, k.J.T, lower=0)[0]               # M^-1 J^T
    UA, info = dpotrf(k.J @ X, lower=0)             # Lambda^-1 = J M^-1 J^T
    if info:
        raise ValueError(f"arm {i}: the grasp frame's Jacobian lost rank (singular)")
    tau0 = g.k_ns * (q_ns - k.q) - g.d_ns * k.qd
    F = F + dpotrs(UA, xdd - k.gamma - X.T @ tau0, lower=0)[0]
    return k.J.T @ F + k.h + tau0, UA


class CooperativeCarry:
    """Both arms' torques from both arms' states (see the module docstring for the law)."""

    def __init__(self, arms, obj, trajectory, squeeze=30.0, gains=None, stale_after=0.02,
                 release_time=0.2, t0=0.0):
        if len(arms) != 2:
            raise ValueError(f"CooperativeCarry: two arms, got {len(arms)}")
        if not (math.isfinite(squeeze) and squeeze >= 0):
            raise ValueError(f"squeeze must be a finite force >= 0 N, got {squeeze}")
        if not (math.isfinite(stale_after) and stale_after > 0):
            raise ValueError(f"stale_after must be > 0 s, got {stale_after}")
        self.arms, self.obj, self.traj = list(arms), obj, trajectory
        self.squeeze = float(squeeze)
        self.g = gains or CarryGains()
        self.stale_after, self.release_time = float(stale_after), float(release_time)
        self.t0 = float(t0)
        self.q_ns = [None, None]
        self.lost = [False, False]       # latched: arm i's state went stale or bad
        self.hold = [None, None]         # (t_start, R, p, last w_i) of an arm holding its own hand
        self.last = [None, None]         # the last good (q, v) of each arm
        self.info = {}

    def reset(self, t0, states):
        """Start the carry at law time t0 (the trajectory's time origin) from the arms' present states."""
        self.t0 = float(t0)
        self.lost, self.hold = [False, False], [None, None]
        for i, (q, v) in enumerate(states):
            q, v = self._check(i, q, v)
            self.q_ns[i] = q.copy()
            self.last[i] = (q.copy(), v.copy())

    def _check(self, i, q, v):
        n = self.arms[i].n
        q, v = np.asarray(q, dtype=float), np.asarray(v, dtype=float)
        if q.shape != (n,) or v.shape != (n,):
            raise ValueError(f"arm {i} ({self.arms[i].name}): expected {n} positions and velocities, "
                             f"got {q.shape} and {v.shape}")
        return q, v

    # ---- the object from the hands ----
    @staticmethod
    def object_state(k1, k2):
        """(R_o, p_o, v_o, w_o) from both hands (means; R_o halfway on the geodesic)."""
        R = k1.R_o @ pin.exp3(0.5 * pin.log3(k1.R_o.T @ k2.R_o))
        return R, 0.5 * (k1.p_o + k2.p_o), 0.5 * (k1.v_o + k2.v_o), 0.5 * (k1.w + k2.w)

    def object_wrench(self, t, R_o, p_o, v_o, w_o):
        """The commanded object accelerations (a_c, alpha_c) and the wrench W_o the hands must apply."""
        g = self.g
        p_d, v_d, a_d = self.traj.sample(t - self.t0)
        e_r = pin.log3(self.traj.R @ R_o.T)
        a_c = a_d + g.kp * (p_d - p_o) + g.kd * (v_d - v_o)
        al_c = g.kr * e_r - g.dr * w_o
        Iw = R_o @ self.obj.inertia @ R_o.T
        W = np.concatenate([self.obj.mass * (a_c - _GRAVITY), Iw @ al_c + _cross(w_o, Iw @ w_o)])
        self.info.update(p_d=p_d, e_p=p_d - p_o, e_r=e_r, a_c=a_c, alpha_c=al_c)
        return a_c, al_c, W

    def hand_wrenches(self, p_o, k1, k2, W):
        """[w_1; w_2] = G^+ W + f_sq [n; 0; -n; 0] and n."""
        G = grasp_matrix(p_o, (k1.p, k2.p))
        U, info = dpotrf(G @ G.T, lower=0)
        w = G.T @ dpotrs(U, W, lower=0)[0]
        n = squeeze_direction(k1.p, k2.p)
        w[:3] += self.squeeze * n
        w[6:9] -= self.squeeze * n
        return w[:6], w[6:], n

    def _arm_torque(self, i, k, F, xdd):
        return _osc_torque(i, k, F, xdd, self.q_ns[i], self.g)

    def compute(self, t, states, arms=(0, 1)):
        """states: [(q_i, v_i, stamp_i)] per arm (stamp: the law time the state was measured; None or a
        non-finite q/v marks the arm lost).  Returns [tau_1, tau_2] (each arm's model order).
        arms: the arms whose torques to compute (the others' are None): (0, 1) is one controller for
        both arms; (i,) is arm i's own controller in a pair of controllers sharing their states (the
        partner's kinematics only, no dynamics)."""
        ok = []
        for i, s in enumerate(states):
            good = s is not None and s[2] is not None and math.isfinite(s[2]) and \
                t - s[2] <= self.stale_after
            if good:
                q, v = self._check(i, s[0], s[1])
                good = bool(np.all(np.isfinite(q)) and np.all(np.isfinite(v)))
            if good:
                self.last[i] = (q, v)
            ok.append(good)
        kins = [self.arms[i].kinematics(*self.last[i], dynamics=i in arms) for i in range(2)]
        for i in range(2):
            if not ok[i] and not self.lost[i]:
                self.lost[i] = True
        if any(self.lost):
            return [self._hold(i, t, kins[i]) if i in arms else None for i in range(2)]
        k1, k2 = kins
        R_o, p_o, v_o, w_o = self.object_state(k1, k2)
        a_c, al_c, W = self.object_wrench(t, R_o, p_o, v_o, w_o)
        w1, w2, n = self.hand_wrenches(p_o, k1, k2, W)
        P = np.eye(3) - np.outer(n, n)
        g, out = self.g, []
        for i, (k, w) in enumerate(((k1, w1), (k2, w2))):
            if i not in arms:
                out.append(None)
                continue
            arm = self.arms[i]
            r = k.p - p_o
            xdd = np.concatenate([a_c + _cross(al_c, r) + _cross(w_o, _cross(w_o, r)), al_c])
            R_hd = R_o @ arm.R_X.T                     # T_h,d = T_o X^-1
            p_hd = p_o - R_hd @ arm.p_X
            v_hd = v_o + _cross(w_o, r)
            F = w.copy()
            F[:3] += P @ (g.k_rel * (p_hd - k.p) + g.d_rel * (v_hd - k.v))
            F[3:] += g.k_rel_rot * pin.log3(R_hd @ k.R.T) + g.d_rel_rot * (w_o - k.w)
            out.append(self._arm_torque(i, k, F, xdd)[0])
            self.hold[i] = (k.R.copy(), k.p.copy(), w.copy())
        self.info.update(w1=w1, w2=w2, n=n, p_o=p_o, R_o=R_o, squeeze=internal_force(w1, w2, n))
        return out

    def _hold(self, i, t, k):
        """Arm i holds its own grasp frame where it was when the pair broke; its last feed-forward wrench
        (share of the object, squeeze) ramps to zero over release_time."""
        g = self.g
        if self.hold[i] is None or len(self.hold[i]) == 3:
            R, p, w = self.hold[i] if self.hold[i] is not None else (k.R.copy(), k.p.copy(), np.zeros(6))
            self.hold[i] = (t, R, p, w)
        t_h, R, p, w = self.hold[i]
        fade = max(0.0, 1.0 - (t - t_h) / self.release_time) if self.release_time > 0 else 0.0
        e = np.concatenate([g.hold_k * (p - k.p), g.hold_k_rot * pin.log3(R @ k.R.T)])
        tau, UA = self._arm_torque(i, k, fade * w + e, np.zeros(6))
        # damping 2 zeta sqrt(K Lambda_jj) per axis (Lambda's diagonal: a passive hold, critically
        # damped axis by axis on the hand's own inertia)
        Uinv = solve_triangular(UA, np.eye(6))
        lam = np.einsum("ij,ij->i", Uinv, Uinv)      # diag(Lambda) = diag(U^-1 U^-T)
        kk = np.array([g.hold_k] * 3 + [g.hold_k_rot] * 3)
        D = 2.0 * g.hold_zeta * np.sqrt(kk * lam)
        tau -= k.J.T @ (D * np.concatenate([k.v, k.w]))
        return tau


# ---- before the carry: the hands to the grasp ----
class HandPath:
    """A grasp frame's pose along straight legs between poses (R, p), each a quintic rest-to-rest blend
    (position along the segment, rotation along the geodesic), timed by the slower of
    1.875 |dp| / max_speed and 1.875 angle / max_rate; starts at t0."""

    def __init__(self, poses, t0=0.0, max_speed=0.1, max_rate=0.5):
        self.legs, t = [], float(t0)
        for (R0, p0), (R1, p1) in zip(poses[:-1], poses[1:]):
            dth = pin.log3(R0.T @ R1)
            T = max(1.875 * np.linalg.norm(p1 - p0) / max_speed, 1.875 * np.linalg.norm(dth) / max_rate, 1e-3)
            self.legs.append((t, T, R0, p0, R1, p1, dth))
            t += T
        self.first, self.last, self.end = poses[0], poses[-1], t

    def sample(self, t):
        """(R, p, [v; w], [a; alpha]) at time t (world axes)."""
        z = np.zeros(6)
        if t <= self.legs[0][0]:
            return self.first[0], self.first[1], z, z
        for t0, T, R0, p0, R1, p1, dth in self.legs:
            if t <= t0 + T:
                s = (t - t0) / T
                f = s ** 3 * (10 - 15 * s + 6 * s * s)
                fd = 30 * s * s * (1 - s) ** 2 / T
                fdd = 60 * s * (1 - 3 * s + 2 * s * s) / (T * T)
                w = R0 @ dth                                   # the geodesic's axis, world axes
                return (R0 @ pin.exp3(f * dth), p0 + f * (p1 - p0), np.concatenate([fd * (p1 - p0), fd * w]),
                        np.concatenate([fdd * (p1 - p0), fdd * w]))
        return self.last[0], self.last[1], z, z


class HandApproach:
    """Each arm's grasp frame along its own HandPath (computed torque in task space, no contact
    expected): F = Lambda (xdd_d + kp e + kd (xd_d - xd) - Jdot v), tau = J^T F + h + N^T tau_0;
    e = [p_d - p; log3(R_d R^T)].  Posture: the q at construction."""

    def __init__(self, arms, paths, q_now, kp=400.0, kd=40.0, gains=None):
        self.arms, self.paths, self.kp, self.kd = list(arms), list(paths), float(kp), float(kd)
        self.g = gains or CarryGains()
        self.q_ns = [np.array(q, dtype=float) for q in q_now]
        self.end = max(p.end for p in self.paths)

    def compute(self, t, states):
        out = []
        for i, (arm, path, (q, v)) in enumerate(zip(self.arms, self.paths, [s[:2] for s in states])):
            q, v = np.asarray(q, float), np.asarray(v, float)
            if q.shape != (arm.n,) or v.shape != (arm.n,):
                raise ValueError(f"arm {i} ({arm.name}): expected {arm.n} positions and velocities")
            k = arm.kinematics(q, v)
            R_d, p_d, xd_d, xdd_d = path.sample(t)
            e = np.concatenate([p_d - k.p, pin.log3(R_d @ k.R.T)])
            xdd = xdd_d + self.kp * e + self.kd * (xd_d - np.concatenate([k.v, k.w]))
            out.append(_osc_torque(i, k, np.zeros(6), xdd, self.q_ns[i], self.g)[0])
        return out

    def error(self, states):
        """Largest distance of a grasp frame from its path's end (m)."""
        return max(float(np.linalg.norm(a.kinematics(np.asarray(s[0], float), np.zeros(a.n), dynamics=False).p
                                        - p.last[1])) for a, p, s in zip(self.arms, self.paths, states))


def plan_grasp(models, bases, box_pose, box_size, contact_offsets, hand_frame="panda_hand_tcp",
               seed=(0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785), gap=0.03):
    """The grasp of a box by two arms (hands pointing down beside it, each grasp frame's y axis along the
    horizontal line from its arm's base to the box, `contact_offsets[i]` outside the face at the height
    of the box's centre): ([CarryArm], [q_grasp] by IK, [pre-grasp pose] `gap` m further out)."""
    from ..dynamics.ik import PositionIK
    R_o, p_o = _pose(box_pose, "box pose")
    size = np.asarray(box_size, dtype=float)
    arms, qs, pre = [], [], []
    for i, (model, base, off) in enumerate(zip(models, bases, contact_offsets)):
        R_b, p_b = _pose(base, f"arm {i} base")
        d = p_o - p_b
        d[2] = 0.0
        if np.linalg.norm(d) < 1e-6:
            raise ValueError(f"arm {i}: the box is above its base: no grasp direction")
        y_ax = d / np.linalg.norm(d)
        z_ax = np.array([0.0, 0.0, -1.0])
        R_h = np.column_stack([np.cross(y_ax, z_ax), y_ax, z_ax])
        half = 0.5 * float(np.abs(R_o.T @ y_ax) @ size)
        p_h = p_o - (half + float(off)) * y_ax
        arm = CarryArm(model, base=(R_b, p_b), grasp=(R_h.T @ R_o, R_h.T @ (p_o - p_h)), hand_frame=hand_frame,
                       name=f"arm {i}")
        res = PositionIK(model, hand_frame).solve(np.asarray(seed, float), R_b.T @ (p_h - p_b), R_b.T @ R_h)
        if not res.success:
            raise ValueError(f"arm {i}: no grasp configuration ({res.status}): the box at {p_o} is out of its reach")
        arms.append(arm)
        qs.append(res.q)
        pre.append((R_h, p_h - gap * y_ax))
    return arms, qs, pre


# ---- the pair as one closed chain (reference layer): oracle and timing ----
def _prefixed_arm(urdf, prefix):
    import xml.etree.ElementTree as ET
    root = ET.fromstring(urdf)
    for link in root.findall("link"):
        link.set("name", prefix + link.get("name"))
    for j in root.findall("joint"):
        j.set("name", prefix + j.get("name"))
        for tag in ("parent", "child"):
            e = j.find(tag)
            e.set("link", prefix + e.get("link"))
        m = j.find("mimic")
        if m is not None:
            m.set("joint", prefix + m.get("joint"))
    for e in list(root):
        if e.tag not in ("link", "joint"):
            root.remove(e)
    return root


def _rpy(R):
    """URDF rpy (fixed X, Y, Z) of a rotation matrix."""
    return np.array([math.atan2(R[2, 1], R[2, 2]), math.atan2(-R[2, 0], math.hypot(R[2, 1], R[2, 2])),
                     math.atan2(R[1, 0], R[0, 0])])


def _origin(parent, R, p):
    import xml.etree.ElementTree as ET
    o = ET.SubElement(parent, "origin")
    o.set("xyz", " ".join(f"{x:.17g}" for x in p))
    o.set("rpy", " ".join(f"{x:.17g}" for x in _rpy(R)))


def pair_urdf(arms, prefixes=("a1_", "a2_"), obj=None, root_name="cell_base"):
    """One URDF of both arms (links and joints prefixed) on a common root at their base poses; with
    obj=(CarryObject, arm index) the object as a link `object` welded to that arm's grasp frame at X."""
    import xml.etree.ElementTree as ET
    root = ET.Element("robot", name="carry_pair")
    ET.SubElement(root, "link", name=root_name)
    for arm, pre in zip(arms, prefixes):
        sub = _prefixed_arm(arm.model.urdf, pre)
        child = [lk.get("name") for lk in sub.findall("link")
                 if lk.get("name") not in {j.find("child").get("link") for j in sub.findall("joint")}][0]
        for e in sub:
            root.append(e)
        j = ET.SubElement(root, "joint", name=f"{pre}base_joint", type="fixed")
        _origin(j, arm.R_b, arm.p_b)
        ET.SubElement(j, "parent", link=root_name)
        ET.SubElement(j, "child", link=child)
    if obj is not None:
        o, i = obj
        link = ET.SubElement(root, "link", name="object")
        inert = ET.SubElement(link, "inertial")
        ET.SubElement(inert, "origin", xyz="0 0 0", rpy="0 0 0")
        ET.SubElement(inert, "mass", value=f"{o.mass:.17g}")
        I = o.inertia
        ET.SubElement(inert, "inertia", ixx=f"{I[0, 0]:.17g}", ixy=f"{I[0, 1]:.17g}", ixz=f"{I[0, 2]:.17g}",
                      iyy=f"{I[1, 1]:.17g}", iyz=f"{I[1, 2]:.17g}", izz=f"{I[2, 2]:.17g}")
        j = ET.SubElement(root, "joint", name="object_joint", type="fixed")
        _origin(j, arms[i].R_X, arms[i].p_X)
        ET.SubElement(j, "parent", link=prefixes[i] + arms[i].hand_frame)
        ET.SubElement(j, "child", link="object")
    return ET.tostring(root, encoding="unicode")


def cell_chain(arms, obj, prefixes=("a1_", "a2_")):
    """The pair holding the object as one closed chain: arm 1 carries the object (welded at X_1), arm 2's
    grasp frame is welded to it by a "fixed" loop closure (C1 = hand 2 * X_2, C2 = the object's frame).
    Its multiplier (ClosedChain.forward_dynamics) is the wrench the object applies on hand 2 at the
    object's centre, world axes: minus hand 2's wrench on the object."""
    from ..dynamics.loops import ClosedChain, LoopClosure
    from ..dynamics.model import Model
    model = Model.from_urdf_string(pair_urdf(arms, prefixes, obj=(obj, 0)))
    a2 = arms[1]
    closure = LoopClosure("grasp2", prefixes[1] + a2.hand_frame, "object", "fixed",
                          a2.R_X, a2.p_X, np.eye(3), np.zeros(3))
    return ClosedChain(model, [closure])
