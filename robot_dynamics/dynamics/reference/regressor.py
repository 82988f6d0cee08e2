"""Inertial-parameter regressor: tau = Y(q, v, a) pi, over N states at once.

pi stacks 10 parameters per body, in the body (joint) frame, in Pinocchio's order:
    pi_i = [m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]
with I the rotational inertia about the body origin (not the centre of mass), so that the spatial
inertia I_i = [[m 1, -(mc)x], [(mc)x, I]] is linear in pi_i.  Then the body force is linear in pi_i,

    f_i = I_i a_i + v_i x* I_i v_i = (K(a_i) + crf(v_i) K(v_i)) pi_i,    I x = K(x) pi,
    K([xl; xw]) = [[xl, (xw)x, 0], [0, -(xl)x, L(xw)]],   L(w) Ivec = I w,

and tau_j = S_j^T sum_{i in subtree(j)} jX_i^T f_i:  column block i of Y, row j, is S_j^T jX_i^T A_i,
carried from body i to the root by the backward pass of RNEA (Atkeson, An, Hollerbach 1986).
Runs on the batched data (z-aligned joint frames); the columns are turned back to the tree's frames.
"""
import numpy as np

from .batched import BatchData, _columns, _crf_add, _joint_transform, _joint_transform_T, _trig  # noqa: F401

# K(x) = Kt . x : (6, 10) matrix linear in x (6,)
_K = np.zeros((6, 10, 6))
for _j in range(3):
    _K[_j, 0, _j] = 1.0                                      # m xl
_e = np.eye(3)
for _m in range(3):                                          # column 1 + m: (xw)x e_m and -(xl)x e_m
    for _r in range(3):
        for _k in range(3):
            w = np.zeros(3)
            w[_k] = 1.0
            val = np.cross(w, _e[_m])[_r]
            _K[_r, 1 + _m, 3 + _k] = val                     # linear rows:  xw x (mc)
            _K[3 + _r, 1 + _m, _k] = -val                    # angular rows: -(xl x (mc)) = (mc) x xl
for _col, (_r, _c) in enumerate([(0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2)]):
    _K[3 + _r, 4 + _col, 3 + _c] = 1.0                       # I w, symmetric I
    _K[3 + _c, 4 + _col, 3 + _r] = 1.0
_SYM = [(0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2)]


def _sym(I):
    return np.array([I[r, c] for r, c in _SYM])


def _unsym(x):
    I = np.zeros((3, 3))
    for k, (r, c) in enumerate(_SYM):
        I[r, c] = I[c, r] = x[k]
    return I


def inertial_parameters(tree):
    """pi (10 nb,): the tree's inertias as regressor parameters (body frames, Pinocchio's order)."""
    out = []
    for I in tree.I:
        mcx = I[3:, :3]                                      # (m c)x
        out += [I[0, 0], mcx[2, 1], mcx[0, 2], mcx[1, 0], *_sym(I[3:, 3:])]
    return np.array(out)


def _param_rotation(Ra):
    """Phi with pi' = Phi pi for a body frame turned by Ra: mc' = Ra^T mc, I' = Ra^T I Ra."""
    Phi = np.zeros((10, 10))
    Phi[0, 0] = 1.0
    Phi[1:4, 1:4] = Ra.T
    for k in range(6):
        e = np.zeros(6)
        e[k] = 1.0
        Phi[4:, 4 + k] = _sym(Ra.T @ _unsym(e) @ Ra)
    return Phi


def regressor_batched(tree, bd, Q, V, A):
    """Y (N, nv, 10 nb) with rnea(q, v, a) = Y pi for every row of Q, V, A."""
    Qt = _columns(bd, Q, "Q")
    N, nb = Qt.shape[1], bd.nb
    qd, qdd = _columns(bd, V, "V", N), _columns(bd, A, "A", N)
    c, s, qb = _trig(bd, Qt)
    va = np.empty((nb, 6, 2 * N))
    a0 = np.concatenate([-tree.gravity, np.zeros(3)])
    for i in range(nb):                                      # forward pass, as in rnea_batched
        p, x = bd.parent[i], va[i]
        if p < 0:
            x[:, :N] = 0.0
            x[:, N:] = (bd.Xtree[i] @ a0)[:, None]
        else:
            np.dot(bd.Xtree[i], va[p], out=x)
        v, a = x[:, :N], x[:, N:]
        if bd.prismatic[i]:
            _joint_transform(v, True, None, None, qb[i])
            _joint_transform(a, True, None, None, qb[i])
            a[0] += qd[i] * v[4]
            a[1] -= qd[i] * v[3]
            v[2] += qd[i]
            a[2] += qdd[i]
        else:
            _joint_transform(x.reshape(6, 2, N), False, c[i], s[i], None)
            a[0::3] += qd[i] * v[1::3]
            a[1::3] -= qd[i] * v[0::3]
            v[5] += qd[i]
            a[5] += qdd[i]
    Kt = _K.reshape(60, 6)
    Y = np.zeros((N, nb, nb, 10))                            # [state, joint j, body i, parameter]
    for i in reversed(range(nb)):
        v, a = va[i, :, :N], va[i, :, N:]
        W = (Kt @ a).reshape(6, 10, N)                       # A_i = K(a_i) + v_i x* K(v_i)
        _crf_add(v[:, None, :], (Kt @ v).reshape(6, 10, N), W)
        j = i
        while True:
            Y[:, j, i, :] = W[2 if bd.prismatic[j] else 5].T     # Y_ji = S_j^T jX_i^T A_i
            p = bd.parent[j]
            if p < 0:
                break
            _joint_transform_T(W, bd.prismatic[j], c[j][None], s[j][None], qb[j][None])
            W = (bd.XtreeT[j] @ W.reshape(6, 10 * N)).reshape(6, 10, N)   # to the parent: Xup_j^T
            j = p
    Phi = np.array([_param_rotation(R) for R in bd.Ra])      # (nb, 10, 10): back to the tree's frames
    Y = np.einsum("njik,ikl->njil", Y, Phi)
    return Y.reshape(N, nb, 10 * nb)


def regressor(tree, bd, q, v, a):
    """Y (nv, 10 nb) for one state: rnea(q, v, a) = Y pi."""
    return regressor_batched(tree, bd, q[None, :], v[None, :], a[None, :])[0]
