"""Batched reference algorithms: RNEA and the gravity vector over N states at once.

    bd = BatchData(tree)                          # constants of the tree, built once
    tau = rnea_batched(tree, bd, Q, V, A)         # Q, V, A: (N, nv)  ->  tau: (N, nv)
    g = gravity_batched(tree, bd, Q)

The recursion is the book's (RNEA, Featherstone RBDA table 5.1): a forward loop over bodies for
velocities and accelerations, a backward loop for forces.  Every line acts on all N states at once
(arrays (6, N) per body: one row per spatial component, one column per state), so Python pays per
body, not per state.

Joint frames are turned once, at construction, so that every joint axis is z (as in spatial_v2's
jcalc: Rz, Pz): body frame i' = body frame i rotated by Ra_i with Ra_i z = axis_i, so that

    Xtree'_i = xform(Ra_p^T R_tree Ra_i, Ra_p^T p_tree),   I'_i = E I_i E^T,   E = blkdiag(Ra_i^T)
    revolute:   XJ = blkdiag(Rz(q)^T):  x' = c x + s y,  y' = -s x + c y   (linear and angular rows)
    prismatic:  XJ = xform(1, z q):     vx' = vx + q wy,  vy' = vy - q wx
    S = [0; z] or [z; 0], so tau_i = S^T f_i is one row of f_i.

A joint transform is then a few rows scaled by cos q and sin q, and Xtree one constant 6x6 product.
Fixed-base trees of revolute, continuous and prismatic joints (every arm); a free-flyer raises
ValueError (use the single-state algorithms there).

Speed: the work arrays of a batch size N live in the BatchData and are reused by the next call with
that N (so one BatchData per thread); every update is in place through out= or a scratch row, so a call
allocates only its inputs' transposes and the returned tau.  On the Panda at N = 1000 this is what
brings RNEA below a Python loop over raw pin.rnea (bench/batched.py).
"""
import numpy as np

from . import spatial


def _axis_frame(k):
    """A rotation Ra with Ra z = k (k a unit vector)."""
    k = np.asarray(k, float) / np.linalg.norm(k)
    t = np.array([1.0, 0.0, 0.0]) if abs(k[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    x = np.cross(t, k)
    x /= np.linalg.norm(x)
    return np.column_stack([x, np.cross(k, x), k])


class BatchData:
    """Constants of the batched recursion: topology and the z-aligned joint frames.  Inertias are
    read from the tree on every call, so an attached payload is seen."""

    def __init__(self, tree):
        if any(t == "free" for t in tree.jtype):
            raise ValueError("batched algorithms: free-flyer joints are not supported "
                             "(fixed-base trees of revolute, continuous and prismatic joints)")
        nb = self.nb = tree.nb
        self.nv = tree.nv
        self.parent = list(tree.parent)
        self.prismatic = [t == "prismatic" for t in tree.jtype]
        self.Ra = np.array([_axis_frame(k) for k in tree.axis])
        self.E = np.zeros((nb, 6, 6))                        # i'_X_i = blkdiag(Ra^T)
        self.E[:, :3, :3] = self.E[:, 3:, 3:] = self.Ra.transpose(0, 2, 1)
        self.Xtree = np.zeros((nb, 6, 6))
        for i in range(nb):
            p = tree.parent[i]
            Rp = np.eye(3) if p < 0 else self.Ra[p]
            self.Xtree[i] = spatial.xform(Rp.T @ tree.R_tree[i] @ self.Ra[i], Rp.T @ tree.p_tree[i])
        self.XtreeT = np.ascontiguousarray(self.Xtree.transpose(0, 2, 1))
        self.iq = np.array(tree.iq, dtype=int)
        self.iq_identity = np.array_equal(self.iq, np.arange(nb)) and tree.nq == nb

    def inertias(self, tree):
        """I'_i = E_i I_i E_i^T, (nb, 6, 6)."""
        return self.E @ np.array(tree.I) @ self.E.transpose(0, 2, 1)


def _columns(bd, X, what, N=None):
    """(N, nv) user array -> (nv, N) contiguous, states as columns."""
    if type(X) is not np.ndarray or X.dtype != np.float64:
        X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[None, :]
    if X.ndim != 2 or X.shape[1] != bd.nv or (N is not None and X.shape[0] != N):
        want = f"({'N' if N is None else N}, {bd.nv})"
        raise ValueError(f"{what}: expected an array of shape {want}, got {X.shape}")
    return np.ascontiguousarray(X.T)


def _joint_transform(x, prismatic, c, s, q, t=None):
    """x <- XJ x in place, for motion vectors x (6, ...) whose last axis is the state.
    t: optional scratch (2, *x[0::3].shape) so that nothing is allocated."""
    if prismatic:                                            # v' = v - (z q) x w
        x[0] += q * x[4]
        x[1] -= q * x[3]
        return
    xs, ys = x[0::3], x[1::3]                                # rows x, y of the linear and angular parts
    sx, sy = (np.empty((2,) + xs.shape) if t is None else t)
    np.multiply(xs, s, out=sx)
    np.multiply(ys, s, out=sy)
    xs *= c                                                  # Rz^T: x' = c x + s y
    xs += sy
    ys *= c                                                  #       y' = c y - s x
    ys -= sx


def _joint_transform_T(f, prismatic, c, s, q, t=None):
    """f <- XJ^T f in place, for forces f (6, N)."""
    if prismatic:                                            # n' = n + (z q) x f
        f[3] -= q * f[1]
        f[4] += q * f[0]
        return
    xs, ys = f[0::3], f[1::3]
    sx, sy = (np.empty((2,) + xs.shape) if t is None else t)
    np.multiply(xs, s, out=sx)
    np.multiply(ys, s, out=sy)
    xs *= c                                                  # Rz: x' = c x - s y
    xs -= sy
    ys *= c                                                  #     y' = s x + c y
    ys += sx


def _crf_add(v, h, out, t=None):
    """out += v x* h, component by component; v, h, out have the 6 spatial components on their first
    axis (any trailing shape, broadcast): v x* h = [w x f; vl x f + w x n], v = [vl; w], h = [f; n].
    (Products go through one scratch array t: no temporaries allocated per term.)"""
    vx, vy, vz, wx, wy, wz = v
    fx, fy, fz, nx, ny, nz = h
    if t is None:
        t = np.empty(np.broadcast_shapes(vx.shape, fx.shape))
    for o, terms in ((out[0], ((wy, fz), (wz, fy))),
                     (out[1], ((wz, fx), (wx, fz))),
                     (out[2], ((wx, fy), (wy, fx))),
                     (out[3], ((vy, fz), (vz, fy), (wy, nz), (wz, ny))),
                     (out[4], ((vz, fx), (vx, fz), (wz, nx), (wx, nz))),
                     (out[5], ((vx, fy), (vy, fx), (wx, ny), (wy, nx)))):
        for k, (p, q) in enumerate(terms):                   # + p q - p q + p q - p q
            np.multiply(p, q, out=t)
            if k % 2:
                o -= t
            else:
                o += t


class _Work:
    """Buffers of one batch size, allocated on the first call with that N and reused (no allocation,
    hence no page faults on fresh memory, in the recursion)."""

    def __init__(self, nb, N):
        self.va = np.empty((nb, 6, 2 * N))                   # [v_i | a_i] per body
        self.Ih = np.empty((nb, 6, 2 * N))                   # [I v_i | I a_i]
        self.x6 = np.empty((6, N))                           # Xtree^T XJ^T f_i
        self.t4 = np.empty((2, 2, 2, N))                     # joint-rotation scratch, [v | a]
        self.t2 = np.empty((2, 2, N))                        # joint-rotation scratch, forces
        self.t1 = np.empty((2, N))                           # v_i x S qd
        self.tc = np.empty((nb, N))                          # v x* I v products
        self.cs = np.empty((2, nb, N))                       # cos q, sin q


def _work(bd, N):
    w = bd.__dict__.setdefault("_work", {})
    if N not in w:
        if len(w) > 4:
            w.clear()
        w[N] = _Work(bd.nb, N)
    return w[N]


def _backward(bd, f, Qt, c, s, w=None):
    """Backward pass on body forces f (nb, 6, N), consumed: tau_i = S^T f_i, f_p += Xup_i^T f_i.
    Returns tau (N, nv)."""
    N = f.shape[2]
    tau = np.empty((N, bd.nb))
    x6 = np.empty((6, N)) if w is None else w.x6
    t2 = None if w is None else w.t2
    for i in reversed(range(bd.nb)):
        pr = bd.prismatic[i]
        tau[:, i] = f[i, 2 if pr else 5]                     # tau_i = S_i^T f_i
        p = bd.parent[i]
        if p >= 0:
            _joint_transform_T(f[i], pr, c[i], s[i], Qt[i], t2)   # XJ^T f_i
            np.matmul(bd.XtreeT[i], f[i], out=x6)            # f_p += Xtree^T XJ^T f_i
            f[p] += x6
    return tau


def _trig(bd, Qt, w=None):
    qb = Qt if bd.iq_identity else Qt[bd.iq]
    if w is None:
        return np.cos(qb), np.sin(qb), qb
    np.cos(qb, out=w.cs[0])
    np.sin(qb, out=w.cs[1])
    return w.cs[0], w.cs[1], qb


def rnea_batched(tree, bd, Q, V, A, fext=None):
    """tau = M(q) a + C(q, v) v + g(q) for every row of Q, V, A (shape (N, nv)) -> (N, nv).
    fext: optional (N, nb, 6) or (nb, 6) body wrenches [f; n] in body frames, as in `rnea`."""
    Qt = _columns(bd, Q, "Q")
    N, nb = Qt.shape[1], bd.nb
    qd, qdd = _columns(bd, V, "V", N), _columns(bd, A, "A", N)   # 1-DoF joints: body i <-> dof i
    w = _work(bd, N)
    c, s, qb = _trig(bd, Qt, w)
    va, t1 = w.va, w.t1
    a0 = np.concatenate([-tree.gravity, np.zeros(3)])
    for i in range(nb):                                      # forward pass
        p, x = bd.parent[i], va[i]
        if p < 0:
            x[:, :N] = 0.0
            x[:, N:] = (bd.Xtree[i] @ a0)[:, None]           # a_i = Xup_i a_0 (then XJ below)
        else:
            np.matmul(bd.Xtree[i], va[p], out=x)             # Xtree [v_p | a_p]
        v, a = x[:, :N], x[:, N:]
        if bd.prismatic[i]:
            _joint_transform(v, True, None, None, qb[i])
            _joint_transform(a, True, None, None, qb[i])
            a[0] += qd[i] * v[4]                             # a += v_i x S qd = [w x z; 0] qd
            a[1] -= qd[i] * v[3]
            v[2] += qd[i]                                    # v_i = Xup v_p + S qd
            a[2] += qdd[i]                                   # a_i = Xup a_p + S qdd + v_i x S qd
        else:
            _joint_transform(x.reshape(6, 2, N), False, c[i], s[i], None, w.t4)
            v[5] += qd[i]                                    # v_i = Xup v_p + S qd
            a[5] += qdd[i]                                   # a_i = Xup a_p + S qdd + v_i x S qd
            np.multiply(v[1::3], qd[i], out=t1)              # v_i x S qd = [vl x z; w x z] qd
            a[0::3] += t1                                    # (v_i's z row does not enter)
            np.multiply(v[0::3], qd[i], out=t1)
            a[1::3] -= t1
    Ih = np.matmul(bd.inertias(tree), va, out=w.Ih)          # [I v | I a]
    f = Ih[:, :, N:]                                         # f_i = I a_i + v_i x* I v_i
    _crf_add(va[:, :, :N].transpose(1, 0, 2), Ih[:, :, :N].transpose(1, 0, 2), f.transpose(1, 0, 2), w.tc)
    if fext is not None:
        fe = np.asarray(fext, dtype=float)
        fe = fe.transpose(1, 2, 0) if fe.ndim == 3 else fe[:, :, None]
        f -= bd.E @ fe if fe.shape[2] == N or fe.shape[2] == 1 else fe
    tau = _backward(bd, f, qb, c, s, w)
    if tree.armature_v is not None:
        tau = tau + np.asarray(A, float) * tree.armature_v   # + Ia qdd (rotor inertia)
    return tau


def gravity_batched(tree, bd, Q):
    """g(q) for every row of Q: RNEA with v = a = 0, so only a_i = Xup_i a_p and f_i = I_i a_i."""
    Qt = _columns(bd, Q, "Q")
    N, nb = Qt.shape[1], bd.nb
    w = _work(bd, N)
    c, s, qb = _trig(bd, Qt, w)
    a, f = w.va.reshape(-1)[:nb * 6 * N].reshape(nb, 6, N), w.Ih.reshape(-1)[:nb * 6 * N].reshape(nb, 6, N)
    a0 = np.concatenate([-tree.gravity, np.zeros(3)])
    for i in range(nb):
        p = bd.parent[i]
        if p < 0:
            a[i] = (bd.Xtree[i] @ a0)[:, None]
        else:
            np.matmul(bd.Xtree[i], a[p], out=a[i])
        _joint_transform(a[i], bd.prismatic[i], c[i], s[i], qb[i], w.t2)   # a_i = Xup_i a_p
    np.matmul(bd.inertias(tree), a, out=f)                   # f_i = I_i a_i
    return _backward(bd, f, qb, c, s, w)
