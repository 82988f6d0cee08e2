"""Joint models: the pose of the body relative to its joint frame, and the motion subspace S.

    revolute / continuous   R_J = Rot(axis, q),  p_J = 0,         S = [0; axis]
    prismatic               R_J = 1,             p_J = axis q,    S = [axis; 0]
    free (free-flyer)       q = [p; quat x y z w], v = [v; w] in the body frame, S = 1 (6x6)

Then Xup_i = XJ Xtree_i: the body pose in its parent is (R_tree R_J, p_tree + R_tree p_J).
"""
import numpy as np

from . import spatial


def joint_pose(tree, i, q):
    """(R_J, p_J): pose of body i relative to its joint frame at configuration q (user form)."""
    t, k = tree.jtype[i], tree.iq[i]
    if t == "free":
        quat = q[k + 3:k + 7]
        n = np.linalg.norm(quat)
        return spatial.quat_to_matrix(quat / n), q[k:k + 3]
    if t == "prismatic":
        return np.eye(3), tree.axis[i] * q[k]
    return spatial.rotation_about(tree.axis[i], q[k]), np.zeros(3)


def body_pose(tree, i, q):
    """(R, p): pose of body i in its parent body at q."""
    RJ, pJ = joint_pose(tree, i, q)
    Rt, pt = tree.R_tree[i], tree.p_tree[i]
    return Rt @ RJ, pt + Rt @ pJ


def joint_velocity(tree, data, i, v):
    """vJ = S qd_i, in body coordinates."""
    k = tree.iv[i]
    if tree.jtype[i] == "free":
        return v[k:k + 6]
    return data.S[i][:, 0] * v[k]


def vslice(tree, i):
    k = tree.iv[i]
    return slice(k, k + (6 if tree.jtype[i] == "free" else 1))
