"""The safety envelope's small LCP: mu >= 0 with G mu + b >= 0, mu^T (G mu + b) = 0, G symmetric positive
definite (control/envelope.py, step 2.: the smallest correction of the command that brings every row's
acceleration to its bound).  A few rows at a time, every active step: the closed form for one row, the
active sets enumerated up to LCP_ENUMERATE rows (small Cholesky solves on Python floats, cheaper than
numpy at this size), quadprog beyond.  No ROS.
"""
import math
from itertools import combinations

import numpy as np
import quadprog

LCP_ENUMERATE = 3         # up to this many rows the LCP is solved by enumerating its active sets


def solve_lcp(G, b):
    """mu >= 0 with G mu + b >= 0, mu^T (G mu + b) = 0 (the smallest correction A^T mu in the M^-1
    metric that brings every row's acceleration to its bound), or None when b >= 0 (nothing to do).
    G positive definite: the solution is unique, so the closed form (one row), the enumeration of
    the active sets (up to LCP_ENUMERATE rows) and quadprog (beyond, or if rounding leaves the
    enumeration without an answer) give the same mu."""
    bl = b.tolist()                                  # (a few rows: Python floats, cheaper than numpy)
    if min(bl) >= 0.0:
        return None
    k = len(bl)
    if k == 1:
        return np.array([-bl[0] / G[0, 0]])
    if k <= LCP_ENUMERATE:
        mu = _lcp_active_sets(G.tolist(), bl)
        if mu is not None:
            return np.array(mu)
    C = _MU_GE_0.get(k)
    if C is None:
        C = _MU_GE_0[k] = (np.eye(k), np.zeros(k))  # mu >= 0 (quadprog leaves them unchanged)
    return np.maximum(quadprog.solve_qp(G, -b, *C)[0], 0.0)


_MU_GE_0 = {}             # k -> quadprog's constraints mu >= 0: (I, 0)

# k -> {active set S: the rows off it}, by size: the candidates of _lcp_active_sets
_ACTIVE_SETS = {k: {S: tuple(j for j in range(k) if j not in S)
                    for n in range(1, k + 1) for S in combinations(range(k), n)}
                for k in range(2, LCP_ENUMERATE + 1)}


def _lcp_active_sets(G, b):
    """solve_lcp's mu for a few rows (G, b: lists), by enumerating the active sets S: mu_S = -G_SS^-1 b_S
    (a small Cholesky), 0 elsewhere, is the solution iff mu_S >= 0 and w = G mu + b >= 0 off S (the KKT
    conditions of min 1/2 mu^T G mu + b^T mu, mu >= 0; G positive definite: exactly one S passes, up
    to ties where they give the same mu).  The rows with b < 0 first (usually the answer).  w is
    tested to its rounding (1e-12 of its terms), mu_S exactly (a mu_i rounded below 0 is a tie: S
    without i passes).  None if no set passes (rounding; the caller then asks quadprog)."""
    sets = _ACTIVE_SETS[len(b)]
    first = tuple(i for i, x in enumerate(b) if x < 0.0)
    for S in [first] + [S for S in sets if S != first]:
        m = _solve_spd([[G[i][j] for j in S] for i in S], [-b[i] for i in S])
        if m is None or min(m) < 0.0:
            continue
        for j in sets[S]:                               # w_j = b_j + G_jS mu_S >= 0
            terms = [G[j][i] * x for i, x in zip(S, m)]
            if b[j] + sum(terms) < -1e-12 * (abs(b[j]) + sum(map(abs, terms))):
                break
        else:
            mu = [0.0] * len(b)
            for i, x in zip(S, m):
                mu[i] = x
            return mu
    return None


def _solve_spd(G, b):
    """x with G x = b, G a small symmetric positive definite matrix (lists): Cholesky G = L L^T, then
    the two triangular solves; None if G is not numerically positive definite."""
    n = len(b)
    if n == 1:
        return [b[0] / G[0][0]] if G[0][0] > 0.0 else None
    L = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            s = G[i][j]
            for m in range(j):
                s -= L[i][m] * L[j][m]
            if i == j:
                if s <= 0.0:
                    return None
                L[i][i] = math.sqrt(s)
            else:
                L[i][j] = s / L[j][j]
    x = list(b)
    for i in range(n):                                 # L y = b
        for m in range(i):
            x[i] -= L[i][m] * x[m]
        x[i] /= L[i][i]
    for i in reversed(range(n)):                       # L^T x = y
        for m in range(i + 1, n):
            x[i] -= L[m][i] * x[m]
        x[i] /= L[i][i]
    return x
