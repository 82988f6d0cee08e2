"""Forward kinematics: body transforms Xup, world placements, velocities and accelerations."""
import numpy as np

from . import spatial
from .jcalc import body_pose, joint_velocity, vslice


def forward_kinematics(tree, data, q, v=None, a=None):
    """First-order pass: Xup_i, (oR_i, op_i), and, when v (and a) are given, body velocities
    v_i = Xup_i v_p + S_i qd_i and accelerations a_i = Xup_i a_p + S_i qdd_i + v_i x (S_i qd_i)
    (no gravity)."""
    for i in range(tree.nb):
        p = tree.parent[i]
        R, pos = body_pose(tree, i, q)
        data.Xup[i] = spatial.xform(R, pos)
        if p < 0:
            data.oR[i], data.op[i] = R, pos
        else:
            data.oR[i] = data.oR[p] @ R
            data.op[i] = data.op[p] + data.oR[p] @ pos
        if v is None:
            continue
        vJ = joint_velocity(tree, data, i, v)
        data.v[i] = vJ if p < 0 else data.Xup[i] @ data.v[p] + vJ              # v_i = X v_p + vJ
        if a is None:
            continue
        aJ = data.S[i] @ a[vslice(tree, i)]
        if p < 0:
            data.a[i] = aJ
        else:
            data.a[i] = data.Xup[i] @ data.a[p] + aJ + spatial.crm(data.v[i]) @ vJ  # a_i = X a_p + S qdd + v x vJ
    return data


def frame_placement(tree, data, name):
    """(R, p) of frame `name` in the world, after forward_kinematics."""
    fr = tree.frames[name]
    if fr.body < 0:
        return fr.R.copy(), fr.p.copy()
    oR, op = data.oR[fr.body], data.op[fr.body]
    return oR @ fr.R, op + oR @ fr.p


def frame_velocity(tree, data, name, reference="local"):
    """Spatial velocity of frame `name` (after forward_kinematics with v): 'local' in the frame,
    'world' at the world origin in world axes, 'local_world_aligned' at the frame origin in world axes."""
    fr = tree.frames[name]
    if fr.body < 0:
        return np.zeros(6)
    v_local = spatial.xform(fr.R, fr.p) @ data.v[fr.body]
    R, p = frame_placement(tree, data, name)
    if reference == "local":
        return v_local
    v_lwa = np.concatenate([R @ v_local[:3], R @ v_local[3:]])
    if reference == "local_world_aligned":
        return v_lwa
    return np.concatenate([v_lwa[:3] + np.cross(p, v_lwa[3:]), v_lwa[3:]])  # world: v0 = v_p + w x (0 - p) = v_p + p x w
