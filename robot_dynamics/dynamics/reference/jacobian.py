"""Frame Jacobians and their time derivatives, in the three references Pinocchio offers.

world:                motion of the frame as a spatial velocity at the world origin, world axes
local:                spatial velocity of the frame in the frame's own axes
local_world_aligned:  linear velocity of the frame origin and angular velocity, both in world axes
"""
import numpy as np

from . import spatial
from .jcalc import vslice
from .kinematics import frame_placement, frame_velocity

REFERENCES = ("world", "local", "local_world_aligned")


def _world_columns(tree, data, body, v=None):
    """Columns of the world Jacobian of `body` (and of its time derivative if v is given):
    J_j = Ad(oM_j) S_j for every joint j supporting the body, dJ_j = (v_j^world x) J_j."""
    nv = tree.nv
    J, dJ = np.zeros((6, nv)), np.zeros((6, nv))
    j = body
    while j >= 0:
        Ad = spatial.xform_inv(data.oR[j], data.op[j])            # world_X_j
        sl = vslice(tree, j)
        J[:, sl] = Ad @ data.S[j]
        if v is not None:
            J_world_v = Ad @ data.v[j]                           # velocity of body j, world coords
            dJ[:, sl] = spatial.crm(J_world_v) @ J[:, sl]
        j = tree.parent[j]
    return J, dJ


def _change_reference(tree, data, name, reference, Jw):
    """Re-express a world Jacobian in the requested reference."""
    R, p = frame_placement(tree, data, name)
    if reference == "world":
        return Jw
    if reference == "local":
        return spatial.xform(R, p) @ Jw                          # f_X_world
    T = np.eye(6)
    T[:3, 3:] = -spatial.skew(p)                                 # v_p = v_0 - p x w
    return T @ Jw


def frame_jacobian(tree, data, name, reference="local"):
    """6 x nv Jacobian of frame `name` after forward_kinematics(q)."""
    if reference not in REFERENCES:
        raise ValueError(f"unknown reference {reference!r}; use one of {REFERENCES}")
    fr = tree.frames[name]
    if fr.body < 0:
        return np.zeros((6, tree.nv))
    Jw, _ = _world_columns(tree, data, fr.body)
    return _change_reference(tree, data, name, reference, Jw)


def frame_jacobian_dot(tree, data, name, reference="local"):
    """dJ/dt of frame `name` along the motion, after forward_kinematics(q, v).

    world:  dJw = [v_j x] J_j column by column.
    local:  J_l = fXo Jw, d(fXo)/dt = -(v_f^local x) fXo  =>  dJ_l = fXo dJw - (v_f x) J_l.
    local_world_aligned: J_a = T(p) Jw, T(p) = [[1, -px], [0, 1]]  =>  dJ_a = T dJw + [[0, -pdot x], [0, 0]] Jw.
    """
    if reference not in REFERENCES:
        raise ValueError(f"unknown reference {reference!r}; use one of {REFERENCES}")
    fr = tree.frames[name]
    if fr.body < 0:
        return np.zeros((6, tree.nv))
    Jw, dJw = _world_columns(tree, data, fr.body, v=True)
    if reference == "world":
        return dJw
    R, p = frame_placement(tree, data, name)
    if reference == "local":
        fXo = spatial.xform(R, p)
        return fXo @ dJw - spatial.crm(frame_velocity(tree, data, name, "local")) @ (fXo @ Jw)
    T = np.eye(6)
    T[:3, 3:] = -spatial.skew(p)
    pdot = frame_velocity(tree, data, name, "local_world_aligned")[:3]
    dT = np.zeros((6, 6))
    dT[:3, 3:] = -spatial.skew(pdot)
    return T @ dJw + dT @ Jw
