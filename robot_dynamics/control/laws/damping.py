"""The damping design of the impedance laws: D = 2 zeta (B # K), the damping that gives every mode of
B x'' + D x' + K x = 0 the damping ratio zeta, B the joint inertia M (joint impedance) or the task
inertia Lambda (Cartesian impedance, its posture task on M), K = diag(k).  critical_damping from a
Cholesky factor of B, exact for any k >= 0; MeanDamping from one eigensolve of a scaled B or B^-1, for
every k_i > 0 (mean_damping says when).  No ROS.
"""
import numpy as np
from scipy.linalg.lapack import dsyev

MEAN_DAMPING_SPREAD = 1e-9
"""MeanDamping (the one-eigensolve design) scales by K^-1/2: it is used when every stiffness is at least
this fraction of the largest (and 1e-100 absolute); below it (a stiffness of 1e-308 made the scaled
matrix inf and the torques NaN) critical_damping, exact for any k >= 0, designs the damping."""


def critical_damping(Linv, G, k, two_zeta):
    """D = 2 zeta (B # K): the damping matrix that gives every mode of B x'' + D x' + K x = 0 the
    damping ratio zeta ("critical" for zeta = 1), for B symmetric positive definite and K = diag(k) >= 0.
    The caller passes a factor of B = L L^T as Linv = L^-1 and G = L^T (triangular, from the Cholesky
    factorisation it has anyway).  With C = L^-1 K L^-T = Q diag(w^2) Q^T (one symmetric eigensolve):

        D = 2 zeta L C^1/2 L^T = 2 zeta (Q^T G)^T diag(w) (Q^T G)

    which is 2 zeta B^1/2 (B^-1/2 K B^-1/2)^1/2 B^1/2 for any factor (L = B^1/2 O, O orthogonal), and
    also 2 zeta B Phi diag(w) Phi^T B with K Phi = B Phi diag(w^2), Phi^T B Phi = I (Phi = L^-T Q):
    the modes Phi diagonalise B, K and D together, modal damping 2 zeta w_i.  k_i = 0 gives a mode
    with w_i = 0 and no damping."""
    C = (Linv * k) @ Linv.T
    w2, Q, info = dsyev(C, compute_v=1, lower=0)
    if info != 0:
        return np.full((len(k), len(k)), np.nan)
    w = np.sqrt(np.maximum(w2, 0.0))
    H = Q.T @ G
    return (two_zeta * (H.T * w)) @ H


class MeanDamping:
    """D = 2 zeta (B # K) for K = diag(k) with every k_i > 0, as a factor: D = H diag(w) H^T, applied
    to a vector without forming D.  The geometric mean is symmetric, B # K = K # B, and K's square
    root is a diagonal, so one symmetric eigensolve of a scaled matrix is all it takes:

        B # K = K^1/2 (K^-1/2 B K^-1/2)^1/2 K^1/2:   C = K^-1/2 B K^-1/2 = Q diag(c) Q^T,
                                                      H = K^1/2 Q,  w = 2 zeta sqrt(c)          (from B)
        with B = A^-1 (the task inertia Lambda from A = J M^-1 J^T), K^-1/2 B K^-1/2 = (K^1/2 A K^1/2)^-1:
                                                      C = K^1/2 A K^1/2,  w = 2 zeta / sqrt(c)   (from A)

    so the task damping needs neither Lambda nor a triangular inverse, and M's square root never
    appears.  It is the same D as critical_damping (the tests compare both, and the modal ratios, to
    1e-9).  With some k_i = 0 use critical_damping (that mode has no damping)."""

    def __init__(self, k, two_zeta):
        k = np.asarray(k, dtype=float)
        self.sk = np.sqrt(k)
        self.scale = np.outer(self.sk, self.sk)        # K^1/2 X K^1/2 = X * scale
        self.iscale = 1.0 / self.scale                 # K^-1/2 X K^-1/2 = X * iscale
        self.two_zeta = float(two_zeta)
        self.H = self.w = None

    def factor(self, X, inverse):
        """X = B (inverse False) or A = B^-1 (inverse True), upper triangle read.  False when the
        eigensolve failed or X is not positive definite (the caller then damps with NaN: refused)."""
        c, Q, info = dsyev(X * (self.scale if inverse else self.iscale), compute_v=1, lower=0)
        if info != 0 or not c[0] > 0.0:
            self.H = self.w = None
            return False
        w = np.sqrt(c)
        self.w = (self.two_zeta / w) if inverse else (self.two_zeta * w)
        Q *= self.sk[:, None]
        self.H = Q
        return True

    def apply(self, u, out=None):
        """D u."""
        y = self.H.T.dot(u)
        y *= self.w
        return self.H.dot(y, out=out)

    def matrix(self):
        H = self.H
        return (H * self.w) @ H.T


def mean_damping(k, two_zeta):
    """MeanDamping for the stiffnesses k when it applies (every k_i > 0 and within MEAN_DAMPING_SPREAD
    of the largest), else None: the caller designs with critical_damping."""
    k = np.asarray(k, dtype=float)
    if k.size and k.min() >= max(MEAN_DAMPING_SPREAD * k.max(), 1e-100):
        return MeanDamping(k, two_zeta)
    return None
