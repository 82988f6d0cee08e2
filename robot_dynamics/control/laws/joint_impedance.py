"""Joint impedance control:

    tau = K (q_d - q) + D (v_d - v) + g(q)  [+ C(q, v) v_d  if coriolis_feedforward]
                                             [+ M(q) a_d     if inertia_feedforward]   [+ friction]

k_gains, d_gains (nv each).  With d_gains, D = diag(d_gains).  Without d_gains (or with an empty
list), D is the full matrix that damps every mode of M(q) e'' + D e' + K e = 0 (the law's error
dynamics about a fixed reference, Coriolis neglected) with the ratio zeta = damping_ratio:

    D = 2 zeta M^1/2 (M^-1/2 K M^-1/2)^1/2 M^1/2          (K = diag(k_gains), M at the current q)

computed every cycle from one nv x nv eigensolve: of K^-1/2 M K^-1/2 (damping.MeanDamping: M # K = K # M,
and K^1/2 is a diagonal), applied to the velocity error without forming D; with a zero gain (or one
below damping.MEAN_DAMPING_SPREAD of the largest), from the Cholesky factor of M (damping.critical_damping).
"Critical" (zeta = 1) means exactly that: each generalised eigenmode K phi = w^2 M phi gets the modal
damping 2 w.  A diagonal 2 zeta sqrt(k_i m_ii) (the earlier rule) is not: its modal ratios on the
Panda spread from about 0.6 to above 1.

Errors of continuous joints are the shortest angle (wrapped to [-pi, pi)).
"""
import numpy as np
import pinocchio as pin
from scipy.linalg.lapack import dpotrf, dtrtri

from .base import JointLaw, check_bool, check_gain, check_gains
from .damping import critical_damping, mean_damping


class JointImpedance(JointLaw):
    name = "joint_impedance"
    DEFAULTS = {"k_gains": 100.0, "d_gains": None, "damping_ratio": 1.0,
                "coriolis_feedforward": False, "inertia_feedforward": False}

    def _preprocess_merged(self, p, new):
        d = p.get("d_gains")
        if isinstance(d, (list, tuple, np.ndarray)) and len(d) == 0:
            p["d_gains"] = None

    def _validate(self, p):
        n = self.nv
        p["k_gains"] = check_gains("k_gains", p["k_gains"], n)
        p["d_gains"] = check_gains("d_gains", p["d_gains"], n, allow_none=True)
        p["damping_ratio"] = check_gain("damping_ratio", p["damping_ratio"])
        p["coriolis_feedforward"] = check_bool("coriolis_feedforward", p["coriolis_feedforward"])
        p["inertia_feedforward"] = check_bool("inertia_feedforward", p["inertia_feedforward"])

    def _apply(self, p):
        self.k = p["k_gains"].copy()
        self.d = None if p["d_gains"] is None else p["d_gains"].copy()
        self._two_zeta = 2.0 * p["damping_ratio"]
        self._mean = mean_damping(self.k, self._two_zeta)
        self._dbuf = np.zeros(self.nv)
        self._M = np.zeros((self.nv, self.nv))
        self._zero = np.zeros(self.nv)

    stiffness_keys = ("k_gains",)
    damping_ratio_key = ("damping_ratio", "d_gains")

    def approach_gains(self, m):
        k = np.asarray(self.k, dtype=float)
        d = self.d if self.d is not None else self._two_zeta * np.sqrt(k * m)
        return k, np.asarray(d, dtype=float)

    def gain_problem(self, M, jacobian, w2, how):
        """k_j <= w2 M_jj."""
        m = np.diagonal(M)
        bad = np.flatnonzero(np.asarray(self.k) > w2 * m)
        if bad.size:
            j = int(bad[0])
            return (f"joint_impedance.k_gains: {self.k[j]:g} N m/rad on {self.model.joint_names[j]} is above its "
                    f"bound {w2 * m[j]:.4g} = M_jj {m[j]:.4g} kg m^2 x {how} at the current pose: refused")
        return ""

    def damping(self, q):
        """The damping used at q: the d_gains vector when given, else the nv x nv matrix D(q)."""
        if self.d is not None:
            return self.d
        return self._damping_matrix(np.array(self.dyn.mass_matrix(q), dtype=float))

    def _damping_matrix(self, M, k=None):
        """2 zeta M # K from M (upper triangle read); NaN if M is not positive definite.  k: the
        stiffnesses (default the law's; others by the Cholesky route)."""
        if k is None and self._mean is not None:
            if not self._mean.factor(M, inverse=False):
                return np.full((self.nv, self.nv), np.nan)
            return self._mean.matrix()
        U, info = dpotrf(M, lower=0, clean=1)            # M = U^T U
        if info != 0:
            return np.full((self.nv, self.nv), np.nan)
        Ui, _ = dtrtri(U, lower=0)
        return critical_damping(Ui.T, U, self.k if k is None else k, self._two_zeta)   # L = U^T: L^-1 = U^-T

    def compute(self, state):
        q, v = self._state_ok(state)
        tau = self._tau
        if q is None:
            return tau.copy()
        p = self._params
        _, v_d, a_d = self._desired(state, q, v)
        D = mean = M = None
        k, d, cap = self.k, self.d, self.omega_cap
        self.capped = 0
        if d is None or p["inertia_feedforward"] or cap < np.inf:
            M = self._mass(q, self._M) if p["inertia_feedforward"] else self._mass_upper(q)
        if cap < np.inf:                              # the hold bound: sqrt(k_i / m_ii) <= cap
            m = np.diagonal(M)
            over = k > cap * cap * m
            if over.any():
                self.capped = int(np.count_nonzero(over))
                k = np.where(over, cap * cap * m, k)
                if d is not None:                     # d_i T / m_ii <= 2 cap T (= 1 at the loop's bound)
                    d = np.minimum(d, 2.0 * cap * m)
        if d is None:
            mean = self._mean if k is self.k else mean_damping(k, self._two_zeta)
            if mean is None:
                D = self._damping_matrix(M, k)
            elif not mean.factor(M, inverse=False):
                tau.fill(np.nan)                      # M not positive definite: refused (safe command)
                return tau.copy()
        np.multiply(k, self._e, out=tau)
        if mean is not None:
            damp = mean.apply(self._ed, out=self._dbuf)
        elif d is None:
            damp = D @ self._ed
        else:
            damp = d * self._ed
        tau += damp
        if self.track_damping_power:                  # e'^T D e' >= 0: what the damping dissipates
            self.damping_power = float(self._ed @ damp)
        if self.gravity_enabled:
            tau += self._g(q)
        if p["coriolis_feedforward"]:
            tau += self._coriolis(q, v) @ v_d
        if p["inertia_feedforward"]:
            tau += M @ a_d
        self._add_friction(tau, v)
        return tau.copy()

    def _mass_upper(self, q):
        """M(q) with at least the diagonal valid (no symmetrisation)."""
        if self.fast:
            return pin.crba(self.pm, self.pdata, q)
        return self.dyn.mass_matrix(q)
