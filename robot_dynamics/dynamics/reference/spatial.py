"""Spatial (6D) algebra in Pinocchio's ordering: motion m = [v; w], force f = [f; n].

Featherstone writes [w; v]; we keep Pinocchio's [linear; angular] so that Jacobians, wrenches and
Data fields compare element by element.  Symbols follow spatial_v2:

    crm(v)   motion cross product      v x  m
    crf(v)   force cross product       v x* f  = -crm(v)^T f
    X        Plucker motion transform  B_X_A  (A coordinates -> B coordinates)
    X^T      maps forces back          A_f  = B_X_A^T  B_f
"""
import math

import numpy as np


def skew(w):
    """3x3 matrix of the cross product: skew(w) @ x = w x x."""
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def _crm_explicit(v):
    wx, vx = skew(v[3:]), skew(v[:3])
    out = np.zeros((6, 6))
    out[:3, :3] = wx
    out[:3, 3:] = vx
    out[3:, 3:] = wx
    return out


# crm is linear in v: crm(v) = sum_k v_k crm(e_k), one tensor contraction instead of two skews
_CRM = np.stack([_crm_explicit(e) for e in np.eye(6)], axis=-1)     # (6, 6, 6)
_CRF = -_CRM.transpose(1, 0, 2)


def crm(v):
    """Motion cross product matrix: crm(v) m = v x m = [w x mv + v x mw; w x mw]."""
    return _CRM.dot(v)


def crf(v):
    """Force cross product matrix: crf(v) f = v x* f = [w x f; v x f + w x n] = -crm(v)^T f."""
    return _CRF.dot(v)


def hbar(h):
    """Skew matrix with hbar(h) @ v = crf(v) @ h, for a momentum h = [f; n] (used by the Coriolis matrix).

    crf(v) h = [w x f; v x f + w x n] = [[0, -fx], [-fx, -nx]] [v; w]; the matrix is skew because
    (fx)^T = -fx.
    """
    fx, nx = skew(h[:3]), skew(h[3:])
    out = np.zeros((6, 6))
    out[:3, 3:] = -fx
    out[3:, :3] = -fx
    out[3:, 3:] = -nx
    return out


def xform(R, p):
    """Motion transform B_X_A for a frame B with orientation R and origin p in A:
    B_X_A = [[R^T, -R^T px], [0, R^T]]."""
    Rt = R.T
    X = np.zeros((6, 6))
    X[:3, :3] = Rt
    X[:3, 3:] = -Rt.dot(skew(p))
    X[3:, 3:] = Rt
    return X


def xform_inv(R, p):
    """A_X_B, the inverse of xform(R, p): [[R, px R], [0, R]]."""
    X = np.zeros((6, 6))
    X[:3, :3] = R
    X[:3, 3:] = skew(p) @ R
    X[3:, 3:] = R
    return X


def inertia(m, c, Ic):
    """Spatial inertia about the frame origin, of mass m with centre of mass c and rotational inertia Ic
    about the centre of mass (all in that frame):  I = [[m 1, -m cx], [m cx, Ic - m cx cx]]."""
    cx = skew(c)
    out = np.zeros((6, 6))
    out[:3, :3] = m * np.eye(3)
    out[:3, 3:] = -m * cx
    out[3:, :3] = m * cx
    out[3:, 3:] = Ic - m * cx @ cx
    return out


def inertia_params(I):
    """Inverse of `inertia`: (m, c, Ic) from a 6x6 spatial inertia."""
    m = I[0, 0]
    if m <= 0.0:
        return 0.0, np.zeros(3), I[3:, 3:].copy()
    cx = I[3:, :3] / m
    c = np.array([cx[2, 1], cx[0, 2], cx[1, 0]])
    return m, c, I[3:, 3:] + m * cx @ cx


def transform_inertia(I, R, p):
    """Spatial inertia I given in frame B, expressed in frame A where B has pose (R, p) in A:
    A_I = B_X_A^T  B_I  B_X_A."""
    X = xform(R, p)
    return X.T @ I @ X


def rotation_about(axis, angle):
    """Rodrigues: R = 1 + sin(a) K + (1 - cos(a)) K^2, K = skew(axis), axis a unit vector."""
    K = skew(axis)
    return np.eye(3) + math.sin(angle) * K + (1.0 - math.cos(angle)) * K.dot(K)


def rpy_to_matrix(rpy):
    """URDF convention: R = Rz(yaw) Ry(pitch) Rx(roll)."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array([
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ])


def matrix_to_rpy(R):
    """Inverse of rpy_to_matrix (roll, pitch, yaw), pitch in [-pi/2, pi/2]."""
    sp = -R[2, 0]
    if abs(sp) < 1.0 - 1e-12:
        return np.array([np.arctan2(R[2, 1], R[2, 2]), np.arcsin(sp), np.arctan2(R[1, 0], R[0, 0])])
    # gimbal lock: choose roll = 0
    return np.array([0.0, np.copysign(np.pi / 2, sp), np.arctan2(-R[0, 1], R[1, 1])])


def quat_to_matrix(qxyzw):
    """Rotation matrix of a unit quaternion (x, y, z, w), as geometry_msgs and Pinocchio store it."""
    x, y, z, w = qxyzw
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def matrix_to_quat(R):
    """Unit quaternion (x, y, z, w) with w >= 0 of a rotation matrix (Shepperd's method)."""
    t = np.trace(R)
    if t > 0:
        s = 2.0 * np.sqrt(1.0 + t)
        q = [(R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s, 0.25 * s]
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k])
        q = [0.0, 0.0, 0.0, (R[k, j] - R[j, k]) / s]
        q[i] = 0.25 * s
        q[j] = (R[j, i] + R[i, j]) / s
        q[k] = (R[k, i] + R[i, k]) / s
    q = np.array(q)
    return q if q[3] >= 0 else -q


def log3(R):
    """Rotation vector (axis * angle) of R, angle in [0, pi]."""
    c = np.clip((np.trace(R) - 1.0) / 2.0, -1.0, 1.0)
    theta = np.arccos(c)
    w = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    if theta < 1e-6:
        return 0.5 * w * (1.0 + theta * theta / 6.0)
    if np.pi - theta < 1e-4:
        # near pi: axis from the symmetric part, sign from w
        B = (R + R.T) / 2.0 - c * np.eye(3)
        i = int(np.argmax(np.diag(B)))
        axis = B[:, i] / np.sqrt(max(B[i, i], 1e-300))
        if axis @ w < 0:
            axis = -axis
        return axis * theta
    return w * theta / (2.0 * np.sin(theta))
