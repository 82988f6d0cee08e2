"""Joint friction compensation added by every law (issue 43).  No ROS.

The identified model of a joint's friction (dynamics.identification, per joint):

    f(v) = fv v + fc tanh(v / vs) + off

fv viscous [N m s/rad], fc Coulomb [N m], vs the velocity scale [rad/s] over which the dry friction
rises (`friction_velocity_scale`, per joint, identified from the same run; 0 or unset: the scalar
`friction_smoothing`, the fixed band of files written before it was identified), off a constant offset.

The compensation each law adds is

    c(v) = s (fv v + fc tanh(v / (m vs)) + off),     s = friction_scale in [0, 1],  m = friction_band_margin >= 1

Why it cannot inject energy (passive with respect to the identified friction): the joint's net
friction torque on the arm is c(v) - f(v).  With s <= 1 and m >= 1, for every v of either sign
v (fv v + fc tanh(v / (m vs))) s <= v (fv v + fc tanh(v / vs)) (tanh(x / m) <= tanh(x) for x >= 0), so
the friction left, f - c, still takes power out of every joint as long as the plant's friction is at
least the model's: the compensated joint stays dissipative.  The margin says how far the plant may fall
short of the model near rest: the compensated dry friction is tanh(x / m) / tanh(x) of the model's,
1 / m at rest (x = v / vs -> 0), 0.76 m / m ... to 1 at |v| >> m vs; with m = 2 (the default) a plant
whose dry friction rises up to twice as slowly as the identified tanh (MuJoCo's soft friction loss is a
saturated ramp, min(fc, b v), steeper at zero than a tanh with the same area and ~1.3 x the fitted
curve's initial slope on the data we have) keeps positive damping at every speed.  With the scale or
margin at 1 and a plant that rises more slowly than the model, the band near rest is negative damping:
the joint creeps or chatters (issue 43: the wrist creeping at 0.019 rad/s on MuJoCo's default
softness with the fixed 0.01 rad/s band).  The offset is not friction (a constant torque, bias) and is
compensated as identified.
"""
import numpy as np


class FrictionCompensation:
    """c(v) as above.  Built from the flat law parameters; `add(tau, v)` in place on the control
    path (preallocated), `torque(v)` and `model(v)` for tests and plots."""

    def __init__(self, n):
        self.n = n
        self.active = False
        self.fv = np.zeros(n)
        self.fc = np.zeros(n)
        self.vs = np.full(n, 0.01)            # the model's velocity scale
        self.off = np.zeros(n)
        self.scale, self.margin = 1.0, 1.0
        self._inv_band = np.zeros(n)          # 1 / (m vs)
        self._fv, self._fc, self._fo = np.zeros(n), np.zeros(n), np.zeros(n)
        self._tmp = np.zeros(n)

    def set(self, p):
        """From the validated flat parameters: friction_compensation, _viscous, _coulomb,
        _smoothing (scalar), _velocity_scale (per joint; 0 = _smoothing), _offset, _scale, _band_margin."""
        vs = np.asarray(p["friction_velocity_scale"], float)
        self.vs = np.where(vs > 0.0, vs, float(p["friction_smoothing"]))
        self.fv = np.asarray(p["friction_viscous"], float)
        self.fc = np.asarray(p["friction_coulomb"], float)
        self.off = np.asarray(p["friction_offset"], float)
        self.scale, self.margin = float(p["friction_scale"]), float(p["friction_band_margin"])
        k = self.scale
        self._fv, self._fc, self._fo = k * self.fv, k * self.fc, k * self.off
        self._inv_band = 1.0 / (self.margin * self.vs)
        self.active = bool(p["friction_compensation"]) and bool(np.any(self._fv) or np.any(self._fc) or np.any(self._fo))

    def add(self, tau, v):
        """tau += c(v) (when active)."""
        if self.active:
            t = self._tmp
            np.multiply(v, self._inv_band, out=t)
            np.tanh(t, out=t)
            t *= self._fc
            tau += t
            tau += self._fv * v
            tau += self._fo
        return tau

    def torque(self, v):
        """c(v): what the law adds when friction_compensation is on."""
        v = np.asarray(v, dtype=float)
        return self._fv * v + self._fc * np.tanh(v * self._inv_band) + self._fo

    def model(self, v):
        """f(v): the identified model the compensation is bounded by."""
        v = np.asarray(v, dtype=float)
        return self.fv * v + self.fc * np.tanh(v / self.vs) + self.off
