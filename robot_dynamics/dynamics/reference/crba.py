"""Composite-rigid-body algorithm for the joint-space mass matrix (Featherstone, RBDA table 6.2)."""

import numpy as np

from . import spatial
from .jcalc import body_pose, vslice


def crba(tree, data, q):
    """M(q), symmetric positive definite, nv x nv."""
    nb = tree.nb
    for i in range(nb):
        R, pos = body_pose(tree, i, q)
        data.Xup[i] = spatial.xform(R, pos)
    IC = [Ii.copy() for Ii in tree.I]                      # composite inertias
    for i in reversed(range(nb)):
        p = tree.parent[i]
        if p >= 0:
            IC[p] += data.Xup[i].T @ IC[i] @ data.Xup[i]   # IC_p += Xup^T IC_i Xup
    M = data.M
    M[:] = 0.0
    for i in range(nb):
        si = vslice(tree, i)
        F = IC[i] @ data.S[i]                              # F = IC_i S_i
        M[si, si] = data.S[i].T @ F                        # H_ii = S_i^T F
        j = i
        while tree.parent[j] >= 0:
            F = data.Xup[j].T @ F                          # F = Xup_j^T F
            j = tree.parent[j]
            sj = vslice(tree, j)
            M[si, sj] = F.T @ data.S[j]                    # H_ij = F^T S_j
            M[sj, si] = M[si, sj].T
    if tree.armature_v is not None:
        M[np.diag_indices_from(M)] += tree.armature_v       # + diag(Ia) (rotor inertia)
    return M
