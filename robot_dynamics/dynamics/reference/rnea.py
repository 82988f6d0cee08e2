"""Recursive Newton-Euler inverse dynamics, spatial form (Featherstone, RBDA table 5.1), written with
the tree's spatial operators (Rodriguez, Jain & Kreutz-Delgado 1991) so that one state costs a few
dozen numpy calls instead of a dozen per body.

The recursions of RNEA are linear in the unknown stacks V = [v_1; ...; v_nb], A, F (6 nb each):

    v_i = Xup_i v_p + S_i qd_i                  (I - P) V = S qd                  forward
    a_i = Xup_i a_p + S_i qdd_i + v_i x S_i qd_i  (I - P) A = S qdd + c + a_g
    f_i = I_i a_i + v_i x* I_i v_i - fext_i
    F_i = f_i + sum_children Xup_c^T F_c        (I - P)^T F = f                   backward
    tau_i = S_i^T F_i                           tau = S^T F

with P the block matrix holding Xup_i at block (i, parent(i)): I - P is unit block lower-triangular
(parent < child), so each recursion is one triangular solve (LAPACK trtrs) in the body order of the
book's loops: forward substitution is the forward pass, back substitution (transposed) the backward
pass.  c_i = v_i x S_i qd_i = -qd_i crm(S_i) v_i for a 1-DoF joint (0 for a free-flyer at the root,
where v_i = S_i qd_i), a_g: Xup_i a_0 on the root bodies (gravity as a base acceleration a_0 = -g).
The loop form, vectorised over N states instead, is in `batched.py`.
"""
import numpy as np
from scipy.linalg.lapack import dtrtrs

from . import spatial
from .jcalc import body_pose

_CRF_ROWS = spatial._CRF.transpose(2, 1, 0).reshape(36, 6)   # crf(v) h = (v h^T).ravel() @ _CRF_ROWS


class _Operators:
    """Constant parts of the operators of one tree, built on first use and kept on the RefData."""

    def __init__(self, tree):
        nb, nv = tree.nb, tree.nv
        n6 = 6 * nb
        self.nb, self.n6 = nb, n6
        self.one = np.array([i for i in range(nb) if tree.jtype[i] != "free"], dtype=int)
        self.free = [i for i in range(nb) if tree.jtype[i] == "free"]
        if any(tree.parent[i] >= 0 for i in self.free):
            raise ValueError("reference rnea: a free-flyer joint must be a root")
        self.iq = np.array([tree.iq[i] for i in self.one], dtype=int)
        self.revolute = np.array([tree.jtype[i] != "prismatic" for i in self.one], dtype=bool)
        self.all_revolute = bool(self.revolute.all())
        T = np.zeros((len(self.one), 3, 36))                 # Xup_i = sum_m c_m(q) T_m (see batched.py)
        for k, i in enumerate(self.one):
            Xtree = spatial.xform(tree.R_tree[i], tree.p_tree[i])
            K = spatial.skew(tree.axis[i])
            B1, B2 = np.zeros((6, 6)), np.zeros((6, 6))
            if tree.jtype[i] == "prismatic":
                B1[:3, 3:] = -K                              # xform(1, k q) = 1 + q [[0, -kx], [0, 0]]
            else:
                B1[:3, :3] = B1[3:, 3:] = K.T                # blkdiag(Rot(k, q)^T) = 1 + s K^T + (1 - c) K K
                B2[:3, :3] = B2[3:, 3:] = K @ K
            T[k] = [Xtree.ravel(), (B1 @ Xtree).ravel(), (B2 @ Xtree).ravel()]
        self.negT = -T                                       # c @ negT = -Xup: the blocks of I - P
        self.coef = np.ones((len(self.one), 1, 3))
        self.L = np.asfortranarray(np.eye(n6))               # I - P
        self.nonroot = np.array([i for i in range(nb) if tree.parent[i] >= 0], dtype=int)
        rows, cols = [], []                                  # where -Xup_i goes in L (Fortran memory)
        for i in self.nonroot:
            p = tree.parent[i]
            r, c = np.meshgrid(np.arange(6 * i, 6 * i + 6), np.arange(6 * p, 6 * p + 6), indexing="ij")
            rows.append(r.ravel())
            cols.append(c.ravel())
        self.Lidx = (np.concatenate(cols) * n6 + np.concatenate(rows)) if rows else np.zeros(0, int)
        self.Lflat = self.L.reshape(-1, order="F")           # a view
        self.S = np.zeros((n6, nv))                          # block column of the S_i
        self.CS = np.zeros((n6, n6))                         # blkdiag(-crm(S_i)) for 1-DoF joints
        self.dof_of_row = np.zeros(n6, dtype=int)
        for i in range(nb):
            Si = tree.motion_subspace(i)
            k = tree.iv[i]
            self.S[6 * i:6 * i + 6, k:k + Si.shape[1]] = Si
            self.dof_of_row[6 * i:6 * i + 6] = k
            if tree.jtype[i] != "free":
                self.CS[6 * i:6 * i + 6, 6 * i:6 * i + 6] = -spatial.crm(Si[:, 0])
        self.roots = [i for i in range(nb) if tree.parent[i] < 0]
        self.ST = np.ascontiguousarray(self.S.T)
        self.all_one = len(self.one) == nb
        self.iq_identity = self.all_one and np.array_equal(self.iq, np.arange(nb)) and tree.nq == nb
        chain = np.array_equal(self.nonroot, np.arange(1, nb))
        self.nonroot_slice = slice(1, nb) if chain else self.nonroot
        self.negXup = np.zeros((nb, 6, 6))
        self.ag = np.zeros(n6)
        self.g6 = np.zeros(6)
        self.I_src, self.I, self.Ibig = None, None, np.zeros((n6, n6))

    def inertias(self, tree):
        """Stacked and block-diagonal inertias, rebuilt only when a body's inertia array changed
        (attach_payload replaces the array)."""
        src = self.I_src
        if src is None or any(x is not y for x, y in zip(src, tree.I)):
            self.I_src = list(tree.I)
            self.I = np.array(tree.I)
            for i in range(self.nb):
                self.Ibig[6 * i:6 * i + 6, 6 * i:6 * i + 6] = self.I[i]
        return self.I, self.Ibig


def _ops(tree, data):
    ops = getattr(data, "_ops", None)
    if ops is None or ops.nb != tree.nb:
        ops = data._ops = _Operators(tree)
    return ops


def _transforms(tree, ops, q):
    """-Xup_i for every body, into I - P, and a_g."""
    qb = q if ops.iq_identity else q[ops.iq]
    c = ops.coef
    if ops.all_revolute:
        np.sin(qb, out=c[:, 0, 1])
        np.cos(qb, out=c[:, 0, 2])
        np.subtract(1.0, c[:, 0, 2], out=c[:, 0, 2])
    else:
        c[:, 0, 1] = np.where(ops.revolute, np.sin(qb), qb)
        c[:, 0, 2] = np.where(ops.revolute, 1.0 - np.cos(qb), 0.0)
    nX = ops.negXup                                          # -Xup_i = -XJ(q_i) Xtree_i
    if ops.all_one:
        np.matmul(c, ops.negT, out=nX.reshape(-1, 1, 36))
    else:
        nX[ops.one] = (c @ ops.negT).reshape(-1, 6, 6)
        for i in ops.free:
            nX[i] = -spatial.xform(*body_pose(tree, i, q))
    ops.Lflat[ops.Lidx] = nX[ops.nonroot_slice].ravel()      # L = I - P
    ops.g6[:3] = tree.gravity                                # -a_0
    for i in ops.roots:
        np.dot(nX[i], ops.g6, out=ops.ag[6 * i:6 * i + 6])  # a_g: Xup_i a_0 on the roots
    return nX


def rnea(tree, data, q, v, a, fext=None):
    """tau = M(q) a + C(q, v) v + g(q) - sum_i J_i^T fext_i.

    Gravity enters as an acceleration of the base, a_0 = -g.  fext: optional (nb, 6) array of external
    wrenches [f; n] on each body, expressed in the body frame (as Pinocchio's fext).  Fills data.v,
    data.a (gravity included) and data.f (the forces F_i transmitted by joint i).
    """
    return _rnea(tree, data, q, v, a, fext, False)


def _rnea(tree, data, q, v, a, fext, gravity_only):
    ops = _ops(tree, data)
    nb, L = ops.nb, ops.L
    nX = _transforms(tree, ops, q)
    I, Ibig = ops.inertias(tree)
    if gravity_only:                                         # v = a = 0: V = 0, (I - P) A = a_g, f = I a
        A = dtrtrs(L, ops.ag, lower=1, unitdiag=1)[0]
        data.v = np.zeros((nb, 6))
        f = Ibig.dot(A)
    else:
        V = dtrtrs(L, ops.S @ v, lower=1, unitdiag=1)[0]     # (I - P) V = S qd
        c = (ops.CS @ V) * v[ops.dof_of_row]                 # c_i = v_i x S_i qd_i
        A = dtrtrs(L, ops.S @ a + c + ops.ag, lower=1, unitdiag=1)[0]   # (I - P) A = S qdd + c + a_g
        Iv = Ibig.dot(V).reshape(nb, 1, 6)
        V = V.reshape(nb, 6)
        f = Ibig.dot(A) + (V[:, :, None] * Iv).reshape(nb, 36).dot(_CRF_ROWS).ravel()   # f = I a + v x* I v
        data.v = V
    if fext is not None:
        f = f - fext.ravel()
    F = dtrtrs(L, f.reshape(-1), lower=1, trans=1, unitdiag=1)[0]   # (I - P)^T F = f
    data.a, data.f = A.reshape(nb, 6), F.reshape(nb, 6)     # (fresh arrays: bound, not copied)
    tau = data.tau
    np.dot(ops.ST, F, out=tau)                               # tau = S^T F
    if tree.armature_v is not None and not gravity_only:
        tau += tree.armature_v * a                           # + Ia qdd (rotor inertia)
    return tau


def gravity(tree, data, q):
    """g(q) = rnea(q, 0, 0)."""
    return _rnea(tree, data, q, None, None, None, True)


def nonlinear_effects(tree, data, q, v):
    """h(q, v) = C(q, v) v + g(q) = rnea(q, v, 0)."""
    return rnea(tree, data, q, v, np.zeros(tree.nv))
