"""Recursive Newton-Euler inverse dynamics, spatial form (Featherstone, RBDA table 5.1).

(`.dot` rather than `@`: on these small arrays numpy's matmul operator costs twice as much.)
"""
import numpy as np

from . import spatial
from .jcalc import body_pose, joint_velocity, vslice


def rnea(tree, data, q, v, a, fext=None):
    """tau = M(q) a + C(q, v) v + g(q) - sum_i J_i^T fext_i.

    Gravity enters as an acceleration of the base, a_0 = -g.  fext: optional (nb, 6) array of external
    wrenches [f; n] on each body, expressed in the body frame (as Pinocchio's fext).
    """
    a0 = np.concatenate([-tree.gravity, np.zeros(3)])
    for i in range(tree.nb):                      # forward pass: kinematics
        p = tree.parent[i]
        R, pos = body_pose(tree, i, q)
        X = data.Xup[i] = spatial.xform(R, pos)   # Xup_i = XJ Xtree_i
        vJ = joint_velocity(tree, data, i, v)
        aJ = data.S[i].dot(a[vslice(tree, i)])
        if p < 0:
            data.v[i] = vJ                        # v_i = vJ
            data.a[i] = X.dot(a0) + aJ            # a_i = Xup_i a_0 + S qdd_i
        else:
            data.v[i] = X.dot(data.v[p]) + vJ                                       # v_i = Xup v_p + vJ
            data.a[i] = X.dot(data.a[p]) + aJ + spatial.crm(data.v[i]).dot(vJ)      # + v_i x vJ
        Iv = tree.I[i].dot(data.v[i])
        data.f[i] = tree.I[i].dot(data.a[i]) + spatial.crf(data.v[i]).dot(Iv)      # f_i = I a + v x* I v
        if fext is not None:
            data.f[i] -= fext[i]
    tau = data.tau
    for i in reversed(range(tree.nb)):            # backward pass: forces
        p = tree.parent[i]
        tau[vslice(tree, i)] = data.S[i].T.dot(data.f[i])                            # tau_i = S^T f_i
        if p >= 0:
            data.f[p] += data.Xup[i].T.dot(data.f[i])                                # f_p += Xup^T f_i
    return tau


def gravity(tree, data, q):
    """g(q) = rnea(q, 0, 0)."""
    z = np.zeros(tree.nv)
    return rnea(tree, data, q, z, z)


def nonlinear_effects(tree, data, q, v):
    """h(q, v) = C(q, v) v + g(q) = rnea(q, v, 0)."""
    return rnea(tree, data, q, v, np.zeros(tree.nv))
