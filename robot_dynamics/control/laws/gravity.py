"""Gravity compensation: tau = g(q) (+ friction compensation).  A payload attached to the model
(`model.attach_payload`) is included by the dynamics.  With compensate_gravity False (robots whose
driver already compensates gravity) only the friction term remains."""
import numpy as np

from .base import ControlLaw


class GravityCompensation(ControlLaw):
    name = "gravity_compensation"
    DEFAULTS = {}

    def __init__(self, model, backend, params=None):
        super().__init__(model, backend, params)
        self.info.reference = np.zeros(self.nv)
        self.info.error = np.zeros(self.nv)

    def reset(self, state):
        self.info.reference = np.array(state.q, dtype=float).copy()

    def compute(self, state):
        q, v = self._state_ok(state)
        tau = self._tau
        if q is None:
            return tau.copy()
        if self.gravity_enabled:
            tau[:] = self._g(q)
        else:
            tau.fill(0.0)
        self._add_friction(tau, v)
        self.info.reference[:] = q
        return tau.copy()
