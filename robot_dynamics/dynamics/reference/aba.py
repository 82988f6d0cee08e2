"""Articulated-body algorithm for forward dynamics (Featherstone, RBDA table 7.1)."""
import numpy as np

from . import spatial
from .jcalc import body_pose, joint_velocity, vslice


def aba(tree, data, q, v, tau, fext=None):
    """qdd solving M(q) qdd + h(q, v) = tau + sum_i J_i^T fext_i, in O(n)."""
    nb = tree.nb
    a0 = np.concatenate([-tree.gravity, np.zeros(3)])
    c, IA, pA = np.zeros((nb, 6)), [None] * nb, np.zeros((nb, 6))
    for i in range(nb):                                               # pass 1: velocities, bias
        p = tree.parent[i]
        R, pos = body_pose(tree, i, q)
        X = data.Xup[i] = spatial.xform(R, pos)
        vJ = joint_velocity(tree, data, i, v)
        if p < 0:
            data.v[i] = vJ
        else:
            data.v[i] = X @ data.v[p] + vJ                            # v_i = Xup v_p + vJ
            c[i] = spatial.crm(data.v[i]) @ vJ                        # c_i = v_i x vJ
        IA[i] = tree.I[i].copy()                                      # IA_i = I_i
        pA[i] = spatial.crf(data.v[i]) @ (tree.I[i] @ data.v[i])      # pA_i = v x* I v
        if fext is not None:
            pA[i] -= fext[i]
    U, d_inv, u = [None] * nb, [None] * nb, [None] * nb
    for i in reversed(range(nb)):                                     # pass 2: articulated inertias
        p, si, S = tree.parent[i], vslice(tree, i), data.S[i]
        U[i] = IA[i] @ S                                              # U = IA S
        d = S.T @ U[i]                                                # d = S^T U (+ Ia: rotor inertia)
        if tree.armature_v is not None:
            d = d + np.diag(tree.armature_v[si])
        d_inv[i] = np.linalg.inv(d) if S.shape[1] > 1 else 1.0 / d
        u[i] = tau[si] - S.T @ pA[i]                                  # u = tau - S^T pA
        if p >= 0:
            Ud = U[i] @ d_inv[i]
            Ia = IA[i] - Ud @ U[i].T                                  # Ia = IA - U d^-1 U^T
            pa = pA[i] + Ia @ c[i] + Ud @ u[i]                        # pa = pA + Ia c + U d^-1 u
            X = data.Xup[i]
            IA[p] = IA[p] + X.T @ Ia @ X                              # IA_p += Xup^T Ia Xup
            pA[p] = pA[p] + X.T @ pa                                  # pA_p += Xup^T pa
    qdd = data.ddq
    for i in range(nb):                                               # pass 3: accelerations
        p, si, S = tree.parent[i], vslice(tree, i), data.S[i]
        ap = data.Xup[i] @ (a0 if p < 0 else data.a[p]) + c[i]        # a' = Xup a_p + c
        qdd[si] = d_inv[i] @ (u[i] - U[i].T @ ap)                     # qdd = d^-1 (u - U^T a')
        data.a[i] = ap + S @ qdd[si]                                  # a_i = a' + S qdd
    return qdd
