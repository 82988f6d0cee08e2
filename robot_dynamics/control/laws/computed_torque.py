"""Computed torque (inverse dynamics) control:

    tau = M(q) (a_d + kd (v_d - v) + kp (q_d - q)) + h(q, v)          evaluated as one RNEA call
        = rnea(q, v, a_cmd)     [- g(q) when compensate_gravity is False]   [+ friction]

so the closed-loop error obeys e'' + kd e' + kp e = 0 on a perfect model.  Gains: kp, kd (nv each), or
omega, zeta (natural frequency rad/s, damping ratio): kp = omega^2, kd = 2 zeta omega.  kp given
without kd: kd = 2 sqrt(kp) (critical damping).  Setting omega or zeta in an update drops kp/kd.
"Critical" is exact here: with a perfect model the error dynamics decouple into nv scalar equations,
each with damping ratio kd_i / (2 sqrt(kp_i)) (= zeta with omega, zeta).  The error q_d - q of a
continuous joint is the shortest angle (wrapped to [-pi, pi)).
"""
import numpy as np

from .base import GAIN_MAX, JointLaw, check_gain, check_gains


class ComputedTorque(JointLaw):
    name = "computed_torque"
    DEFAULTS = {"kp": None, "kd": None, "omega": 10.0, "zeta": 1.0}

    damping_ratio_key = ("zeta", "kd")

    def approach_gains(self, m):
        return m * self.kp, m * self.kd

    def gain_problem(self, M, jacobian, w2, how):
        """kp_j <= w2 (the error dynamics are decoupled: kp is k / m)."""
        bad = np.flatnonzero(self.kp > w2)
        if bad.size:
            j = int(bad[0])
            return (f"computed_torque.kp: {self.kp[j]:g} on {self.model.joint_names[j]} is above {w2:g} 1/s^2 = "
                    f"{how}: refused")
        return ""

    def _preprocess_merged(self, p, new):
        for k in ("kp", "kd"):
            if isinstance(p.get(k), (list, tuple, np.ndarray)) and len(p[k]) == 0:
                p[k] = None                       # an empty list (ROS parameter) means "not set"
        if ("omega" in new or "zeta" in new) and "kp" not in new:
            p["kp"] = None
        if ("omega" in new or "zeta" in new or "kp" in new) and "kd" not in new:
            p["kd"] = None

    def _validate(self, p):
        n = self.nv
        p["omega"] = check_gain("omega", p["omega"])
        p["zeta"] = check_gain("zeta", p["zeta"])
        p["kp"] = check_gains("kp", p["kp"], n, allow_none=True)
        p["kd"] = check_gains("kd", p["kd"], n, allow_none=True)
        # the gains omega and zeta give, under the same bound (omega**2 of 1e155 raised OverflowError)
        if p["kp"] is None and p["omega"] * p["omega"] > GAIN_MAX:
            raise ValueError(f"omega: {p['omega']} gives kp = omega^2 = {p['omega'] * p['omega']:g}, "
                             f"must be <= {GAIN_MAX:g}")
        if p["kd"] is None and p["kp"] is None and 2.0 * p["zeta"] * p["omega"] > GAIN_MAX:
            raise ValueError(f"zeta: {p['zeta']} with omega {p['omega']} gives kd = 2 zeta omega = "
                             f"{2.0 * p['zeta'] * p['omega']:g}, must be <= {GAIN_MAX:g}")

    def _apply(self, p):
        n = self.nv
        kp = p["kp"] if p["kp"] is not None else np.full(n, p["omega"] * p["omega"])
        if p["kd"] is not None:
            kd = p["kd"]
        elif p["kp"] is not None:
            kd = 2.0 * np.sqrt(kp)
        else:
            kd = np.full(n, 2.0 * p["zeta"] * p["omega"])
        self.kp, self.kd = kp.copy(), kd.copy()
        self._acmd = np.zeros(n)

    def compute(self, state):
        q, v = self._state_ok(state)
        tau = self._tau
        if q is None:
            return tau.copy()
        _, _, a_d = self._desired(state, q, v)
        a = self._acmd
        kp, kd, cap = self.kp, self.kd, self.omega_cap
        self.capped = 0
        if cap < np.inf:                      # the hold bound: the error dynamics' sqrt(kp_i) <= cap
            over = kp > cap * cap
            if over.any():
                self.capped = int(np.count_nonzero(over))
                s = np.where(over, cap / np.sqrt(np.where(over, kp, 1.0)), 1.0)
                kp, kd = kp * s * s, np.minimum(kd * s, 2.0 * cap)     # the damping ratio kept
        np.multiply(kp, self._e, out=a)
        a += kd * self._ed
        a += a_d
        tau[:] = self._rnea(q, v, a)
        if not self.gravity_enabled:
            tau -= self._g(q)
        self._add_friction(tau, v)
        return tau.copy()
