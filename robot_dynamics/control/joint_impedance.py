"""Joint impedance control:

    tau = K (q_d - q) + D (v_d - v) + g(q)  [+ C(q, v) v_d  if coriolis_feedforward]
                                             [+ M(q) a_d     if inertia_feedforward]   [+ friction]

k_gains, d_gains (nv each).  Without d_gains (or with an empty list): d_i = 2 zeta sqrt(k_i m_ii(q))
with zeta = damping_ratio and m_ii the diagonal of M at the current q (recomputed every cycle).
"""
import numpy as np
import pinocchio as pin

from .base import JointLaw, check_bool, check_scalar, check_vector


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
        p["k_gains"] = check_vector("k_gains", p["k_gains"], n)
        p["d_gains"] = check_vector("d_gains", p["d_gains"], n, allow_none=True)
        p["damping_ratio"] = check_scalar("damping_ratio", p["damping_ratio"], 0.0)
        p["coriolis_feedforward"] = check_bool("coriolis_feedforward", p["coriolis_feedforward"])
        p["inertia_feedforward"] = check_bool("inertia_feedforward", p["inertia_feedforward"])

    def _apply(self, p):
        self.k = p["k_gains"].copy()
        self.d = None if p["d_gains"] is None else p["d_gains"].copy()
        self._two_zeta_sqrt_k = 2.0 * p["damping_ratio"] * np.sqrt(self.k)
        self._dbuf = np.zeros(self.nv)
        self._M = np.zeros((self.nv, self.nv))
        self._zero = np.zeros(self.nv)

    def damping(self, q):
        """The damping gains used at q."""
        if self.d is not None:
            return self.d
        M = self.dyn.mass_matrix(q)
        return self._two_zeta_sqrt_k * np.sqrt(np.diagonal(M))

    def compute(self, state):
        q, v = self._state_ok(state)
        tau = self._tau
        if q is None:
            return tau.copy()
        p = self._params
        _, v_d, a_d = self._desired(state, q, v)
        if self.d is None:
            M = self._mass(q, self._M) if p["inertia_feedforward"] else self._mass_upper(q)
            np.sqrt(np.diagonal(M), out=self._dbuf)
            self._dbuf *= self._two_zeta_sqrt_k
            d = self._dbuf
        else:
            d = self.d
            if p["inertia_feedforward"]:
                M = self._mass(q, self._M)
        np.multiply(self.k, self._e, out=tau)
        tau += d * self._ed
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
