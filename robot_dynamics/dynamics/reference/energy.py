"""Kinetic and potential energy."""
import numpy as np

from .kinematics import forward_kinematics


def kinetic_energy(tree, data, q, v):
    """T = 1/2 sum_i v_i^T I_i v_i  (= 1/2 v^T M v)."""
    forward_kinematics(tree, data, q, v)
    T = 0.5 * sum(data.v[i] @ tree.I[i] @ data.v[i] for i in range(tree.nb))
    if tree.armature_v is not None:
        T += 0.5 * float(np.dot(tree.armature_v, np.asarray(v) ** 2))    # + 1/2 Ia qd^2 (rotors)
    return T


def potential_energy(tree, data, q):
    """V = - sum_i m_i g . c_i, with c_i the centre of mass of body i in the world."""
    forward_kinematics(tree, data, q)
    V = 0.0
    for i in range(tree.nb):
        m = tree.I[i][0, 0]
        if m != 0:                      # a negative mass (a CAD export) counts too, as in Pinocchio
            cx = tree.I[i][3:, :3] / m
            c = np.array([cx[2, 1], cx[0, 2], cx[1, 0]])
            V -= m * tree.gravity @ (data.op[i] + data.oR[i] @ c)
    return V
