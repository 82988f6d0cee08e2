"""A Coriolis matrix C(q, v) with C v = h(q, v) - g(q) and M' - 2C skew-symmetric.

With world-frame body Jacobians J_i, M = sum J_i^T I_i J_i and the body equations f_i = I_i a_i +
v_i x* I_i v_i give C = sum_i J_i^T (I_i dJ_i + B_i J_i), where

    B_i = 1/2 (v_i x* I_i - I_i v_i x + hbar(I_i v_i)),   hbar(h) v = v x* h,  hbar skew.

Then M' - 2C = sum (dJ^T I J - J^T I dJ) + J^T (I' - 2B) J with I' = v x* I - I v x, and
I' - 2B = -hbar(I v) is skew: so is M' - 2C.  (Echeverria, Wensing et al. use the same B.)
"""

from . import spatial
from .jacobian import _world_columns
from .kinematics import forward_kinematics


def coriolis_matrix(tree, data, q, v):
    forward_kinematics(tree, data, q, v)
    C = data.C
    C[:] = 0.0
    for i in range(tree.nb):
        Jw, dJw = _world_columns(tree, data, i, v=True)
        Xi = spatial.xform(data.oR[i], data.op[i])           # i_X_world
        Iw = Xi.T @ tree.I[i] @ Xi                            # world-frame inertia
        vw = Jw @ v                                           # world-frame velocity of body i
        B = 0.5 * (spatial.crf(vw) @ Iw - Iw @ spatial.crm(vw) + spatial.hbar(Iw @ vw))
        C += Jw.T @ (Iw @ dJw + B @ Jw)
    return C
