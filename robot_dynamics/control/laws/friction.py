"""Joint friction compensation added by every law (issue 43).  No ROS.

The identified model of a joint's friction (dynamics.identification, per joint):

    f(v) = fv v + fc tanh(v / vs) + off

fv viscous [N m s/rad], fc Coulomb [N m], vs the velocity scale [rad/s] over which the dry friction
rises (`friction_velocity_scale`, per joint, identified by the same run from its slow excitation; 0 or unset: the scalar
`friction_smoothing`, the fixed band of files written before it was identified), off a constant offset.

The compensation each law adds is

    c(v) = s (fv v + fc sat(v) + off),   sat(v) = sign(v) min(|x| / m, |tanh x|),  x = v / vs,
    s = friction_scale in [0, 1],  m = friction_band_margin >= 1

the model's dry friction wherever it has risen past the line fc |x| / m (|x| > 1.3 at m = 1.5), that
line below: near rest its slope is 1 / m of the model's.  Why it cannot inject energy (passive with
respect to the identified friction): the joint's net friction torque on the arm is c(v) - f(v); with
s <= 1 and |sat| <= |tanh x| of the same sign, v c(v) <= v f(v) at every v, so the friction left,
f - c, still takes power out of every joint as long as the plant's friction is at least the model's:
the compensated joint stays dissipative.  The margin is for the plant falling short of the model near
rest: a plant's dry friction rarely has the tanh's shape there (MuJoCo's friction loss is a saturated
ramp min(fc, b v); the best-fitting tanh is 1.2-1.3 x steeper at zero), and wherever the
compensation's slope exceeds the plant's by more than the law's own damping the joint has negative
damping: it creeps in a limit cycle.  Measured on the MuJoCo Panda of test/friction_rig.py with its
default (soft) friction loss, the identified vs and the Cartesian push (bench/friction_push.py): m = 1
kept a joint cycling at 4.8e-3 rad/s, 1.25 at 3.2e-3; 1.5 (the default) settled below 2e-4; the fixed
0.01 rad/s band at m = 1 (before issue 43) cycled at 0.076.  The full model beyond the line matters
where the plant's ramp is steep: on franky-sim (Cartesian k 300 N/m, bench/franka_push.py) the
F -> 2F stiffness came out 297 N/m with this shape at m = 1.5, 254 with tanh(x / 1.5) in its place
(less compensation between rest and a few vs), 303 at m = 1.
The offset is not friction (a constant torque, bias) and is
compensated as identified.

Stiction at rest (`friction_stiction` k in [0, 1], default 0; the identification writes 1): a
velocity-sign model gives nothing at rest (tanh(0) = 0), so an arm released after a push stops where
the law's spring no longer beats the static friction (1.14 mm at the flange on the sharp MuJoCo plant,
k 450 N/m).  At rest the dry term gets k fc along the pull p, fading as the joint slides:

    fc [sat(v) + k (1 - |sat(v)|) h g fade(p) tanh(p / p0)],     p0 = friction_stiction_torque

at most fc in size at every speed for any k <= 1 (|sat| + k (1 - |sat|) <= 1; h, g and fade within
[0, 1]; h and g without a sensor, 1 with one).  h, the term's share on the joint, is
clip(2 - vs / STICTION_VS, 0, 1): in full where the
identified friction rises within STICTION_VS (0.003 rad/s: the slow excitation's floor band_min 0.002
is where a static friction sharper than the data resolve lands), none from twice that.  Below a
plant's own vs the term is more than the friction it meets (at most fc, while the plant's has not
risen), so a joint it frees creeps home at up to about tanh(p / p0) vs: on franky-sim (k 450 N/m,
bench/franka_push.py) the term in full on every joint kept joint 5 (vs 0.0062) creeping at 1.3e-3
rad/s 4-5 s after the release and 5.6e-4 at 6-7 s; with the share, the shipped config's file, 3.4e-5
at 6-7 s and 6.4e-5 at 4-5 s, the release 0.26 mm (identified with 4 s periods: 3.9e-5, joint 6 still
returning at 4-5 s in some runs, up to 1.1e-3, and 0.44 mm).  A friction that rises over a resolved
band is held near rest by the velocity model already.
What p is, and g, decide who meets the term:
- without a measurement of the environment's torque, p is the law's own pull (its torque with
  gravity left out: the spring and damper's, the posture's).  Nothing in q, v or the motor torque
  tells an arm stuck by its own friction from an arm a hand holds off the law's set point, but the
  way it came to rest does: stuck on its way back, the arm last moved along the law's pull; pushed and
  held, against it.  So g = 1 where the law moved the arm last, 0 elsewhere: the term keeps the arm's
  displacement while sliding (`moved`: the joints faster than their vs; forgotten over TRAVEL of such
  travel, and at the balance, every joint's pull within BALANCE p0) and acts while the pull is along
  it (p . moved > 0).  Per joint it also fades out as the pull grows from fc to FADE fc (fade(p)): a
  joint at rest under more pull than its friction holds is held by something else (a hand, through
  the chain).  Along every pull (g = 1 throughout, as before the gate) a hand met the term as k fc more
  friction: the soft plant's first push +25.3 % at k 1, +4.1 to 5.6 % at 0.1-0.2, where the sharp
  plant's release first came back (0.31 mm).  The arm's last motion, not each joint's: at the release
  the wrist jerked against its own later pull (coupling), and during the push it slid back along its
  (the rotation spring's) while the hand held the arm; nor the pull's work on the arm, which the
  damper turns negative before a returning arm stops.  Gated, the term at 1 frees the sharp plant's
  arm (0.46 mm after 2 s) and leaves the pushes as without it (bench/friction_push.py).  Where the
  arm stays stuck: where p + k fc tanh(p / p0) no longer beats fc (p0 0.05 N m, fc 0.8 N m: a pull of
  0.075 N m).  A push from the side an arm came back from meets the term while it breaks the arm away
  (until the arm has moved against the pull), unless the arm reached the balance first.
- with a sensor (cartesian_impedance with an F/T sensor, State.wrench_source "sensor"), p is the
  law's pull plus the environment's torque J^T w of the measured wrench w, i.e. every torque on the
  joint but its friction, and the fraction is `friction_stiction_sensed` (default 1).  A hand
  pushing the arm is measured, so the term pulls toward where law and hand balance; the arm at rest
  sits where it would without friction, and after the release it returns where the law holds it
  (bench/friction_push.py: the Panda rig, k 450 N/m, the first push +2.7 % and +0.5 % stiff on the
  sharp and soft plants with the sensor at fraction 1, +6.6 % and +25.3 % at 1 along every pull
  without it, before the gate; a Franka's
  friction at franky-sim's start pose, k 300 N/m, k_rot 10, 9 N: +64 % with the file as written,
  +1.2 % with the sensor; at k_rot 30 the rotation spring frees the arm itself, doc/identification.md).
  The sensor's noise enters p through J^T, and the tanh's slope fc / p0 turns it into torque: near
  rest the term flipped with it and the arm dithered (the rig, k 450 N/m, the file's p0 0.05 N m,
  noise 0.08 N and 0.028 N m: 2.7e-3 rad/s at rest on the sharp plant, 7.9e-3 on the soft; a deadband
  p0 of 0.3 N m, ten times the moment noise, left the soft one at 2.3e-3). So with a sensor the pull
  passes a dead zone first:

      p -> sign(p) max(|p| - d, 0),   d_i = NOISE_DEADZONE sigma_i

  sigma_i the noise joint i gets from the sensor (sensed_deadzone): the raw reading's noise (its 6x6
  covariance: a sensor's channels share gauges), estimated as its samples arrive
  (wrench.NoiseEstimate: from second differences over 10 ms, over about 1 s; repeats skipped),
  carried through what the loop does to the reading (the frame change, the low-pass's noise gain:
  WrenchProcessor.noise_covariance, State.wrench_cov) and through what the pull takes of it:
  J^T diag(R, R), and on force axes the force law's kp too.  A steady noise-free reading, or one moving
  along a straight line, gives d = 0: the term above.  At 4 sigma the noise leaves the dead zone on
  6e-5 of the samples: at rest the released arms of bench/stiction_noise.py move at most 1.5e-4 rad/s
  where they moved at up to 1.2e-2.  The arm stops where the pull is within d of the balance (a
  hand's push meets up to d more friction).  An estimated wrench (wrench_source "observer": from the
  motor torques) is not used for it: it holds the friction too, and p would be the law's pull less
  itself.
- with link-side joint torque sensors (`effort_link_side`: the joint states' effort is the torque
  after the gear and its friction, a Franka's tau_J, a KUKA iiwa's), p is the law's pull plus the
  environment's torque on each joint they measure, tau_ext = g(q) - tau_J at rest
  (stages/estimation.py: tared over the first 0.2 s after the law starts, low-passed by link_filter,
  which keeps the loop the arm's own acceleration closes through the reading stable), State.tau_ext:
  every contact on the arm, not only the tool's, and it takes precedence over an F/T sensor's wrench.
  The dead zone is NOISE_DEADZONE times the noise the filtered reading keeps of the sensors' (estimated
  from the efforts as they arrive).  With them the file as written meets the push's four figures on
  all twelve random plants of each friction (bench/friction_push.py --random 12, noise 0.03 N m),
  the four sharp ones whose 5 N push stays under a loaded joint's static friction without a sensor
  included.  A motor-side effort (a UR's, from its currents; a simulator's applied torque,
  franky-sim's tau_J) holds the friction itself and must not be read so.
Its size is the identified fc, the speed it fades over and the joints it acts on the identified vs
(the same run's data); k = 1 is written, TRAVEL, BALANCE, FADE and STICTION_VS are fixed (a
presliding state, Dahl's or LuGre's, holds the friction at rest but does not tell which way the arm
should go, which is what breaks it free; the arm's last motion against the law's pull is the part of
such a history that does).  It does work only in the direction p pulls, toward the equilibrium, and
vanishes there (p -> 0).
Measured in test_friction.py and bench/friction_push.py.
"""
import math

import numpy as np

NOISE_DEADZONE = 4.0      # with a sensor, the pull's dead zone: this many x the noise it gives each joint
TRAVEL = 0.01             # [rad] without a sensor, the arm's last motion is its displacement over about this
BALANCE = 0.25            # ... forgotten where the pull is within this x p0 on every joint (at the balance)
FADE = 1.5                # ... and the term fades out as a joint's pull grows from fc to this x fc
STICTION_VS = 0.003       # [rad/s] the term in full on joints whose vs is within this, none from twice it
LINK_MARGIN = 2.0         # link-side joint torque sensors: the low-pass's margin on the loop through the arm


class FrictionCompensation:
    """c(v) as above.  Built from the flat law parameters; `add(tau, v)` in place on the control
    path (the law sets `pull` first when stiction is on), `torque(v)` (without the stiction term)
    and `model(v)` for tests and plots."""

    def __init__(self, n):
        self.n = n
        self.active = False
        self.fv = np.zeros(n)
        self.fc = np.zeros(n)
        self.vs = np.full(n, 0.01)            # the model's velocity scale
        self.off = np.zeros(n)
        self.scale, self.margin = 1.0, 1.0
        self._inv_vs, self._inv_m = np.zeros(n), 1.0
        self._fv, self._fc, self._fo = np.zeros(n), np.zeros(n), np.zeros(n)
        self._tmp = np.zeros(n)
        self.stiction, self.pull_scale, self.stiction_sensed = 0.0, 0.05, 0.0
        self.sensed = False                   # pull includes the environment's measured torque (this step)
        self.pull = np.zeros(n)               # the law's torque without gravity (set by the law)
        self._w = np.zeros(n)
        self.deadzone = np.zeros(n)           # per joint, with a sensor (sensed_deadzone) [N m]
        self.noisy = False                    # the dead zone is wider than p0 on some joint
        self._Bt, self._Ct, self._Jg = np.zeros((6, n)), np.zeros((6, n)), np.zeros((6, n))
        self._p = np.zeros(n)
        self.returning = False                # the arm's last motion was along the law's pull
        self.moved = np.zeros(n)              # the arm's last motion: its displacement over about TRAVEL
        self._sv = np.zeros(n)
        self._on = np.zeros(n, dtype=bool)

    def set(self, p):
        """From the validated flat parameters: friction_compensation, _viscous, _coulomb,
        _smoothing (scalar), _velocity_scale (per joint; 0 = _smoothing), _offset, _scale, _band_margin,
        _stiction, _stiction_torque."""
        vs = np.asarray(p["friction_velocity_scale"], float)
        self.vs = np.where(vs > 0.0, vs, float(p["friction_smoothing"]))
        self.fv = np.asarray(p["friction_viscous"], float)
        self.fc = np.asarray(p["friction_coulomb"], float)
        self.off = np.asarray(p["friction_offset"], float)
        self.scale, self.margin = float(p["friction_scale"]), float(p["friction_band_margin"])
        k = self.scale
        self._fv, self._fc, self._fo = k * self.fv, k * self.fc, k * self.off
        self._inv_vs, self._inv_m = 1.0 / self.vs, 1.0 / self.margin
        self._fade = 1.0 / ((FADE - 1.0) * np.maximum(self.fc, 1e-12))   # 1 - (|p| - fc) _fade
        self.sharp = np.clip(2.0 - self.vs / STICTION_VS, 0.0, 1.0)    # the term's share per joint
        self.stiction, self.pull_scale = float(p["friction_stiction"]), float(p["friction_stiction_torque"])
        self.stiction_sensed = float(p["friction_stiction_sensed"])
        self.active = bool(p["friction_compensation"]) and bool(np.any(self._fv) or np.any(self._fc) or np.any(self._fo))

    def add(self, tau, v, dt=0.0):
        """tau += c(v) (when active)."""
        if self.active:
            t, w = self._tmp, self._w
            np.multiply(v, self._inv_vs, out=t)          # x = v / vs
            np.abs(t, out=t)
            np.tanh(t, out=w)                            # |tanh x|
            t *= self._inv_m                             # |x| / m
            np.minimum(t, w, out=t)
            np.copysign(t, v, out=t)                     # sign(v) min(|x| / m, |tanh x|)
            k = self.stiction_sensed if self.sensed else self.stiction
            # at rest (1 - |sat| -> 1) k fc along the pull; without a sensor only where the law moved the
            # arm last (_last_motion tracks that every step and says so)
            if k > 0.0 and (self.sensed or self._last_motion(v, dt)):
                np.abs(t, out=w)
                np.subtract(1.0, w, out=w)
                if self.sensed:                  # the pull beyond the sensor noise's dead zone
                    p = np.abs(self.pull, out=self._p)
                    p -= self.deadzone
                    np.maximum(p, 0.0, out=p)
                    np.copysign(p, self.pull, out=p)
                    w *= np.tanh(p / self.pull_scale)
                else:
                    sv, p = self._sv, self.pull
                    np.abs(p, out=sv)                    # fading from fc to FADE fc of pull: beyond its
                    sv *= self._fade                     # friction a joint is held by something else
                    np.subtract(1.0 + 1.0 / (FADE - 1.0), sv, out=sv)
                    np.clip(sv, 0.0, 1.0, out=sv)
                    w *= sv
                    w *= self.sharp
                    w *= np.tanh(p / self.pull_scale)
                w *= k
                t += w
            t *= self._fc
            tau += t
            tau += self._fv * v
            tau += self._fo
        return tau

    def _last_motion(self, v, dt):
        """Who moved the arm last, without a sensor: `moved` is its displacement while sliding (the joints
        with |v| > vs; dt the state's step), forgotten over TRAVEL of such travel and at the balance (the
        pull within BALANCE p0 on every joint); `returning` (returned): the law's pull is along it
        (p . moved > 0), the law moved the arm last, not the environment."""
        p, sv, on, m = self.pull, self._sv, self._on, self.moved
        if dt > 0.0:
            np.abs(v, out=sv)
            np.greater(sv, self.vs, out=on)
            sv *= on
            travel = float(sv.sum()) * dt
            if travel > 0.0:
                m *= math.exp(-travel / TRAVEL)
                np.multiply(v, dt, out=sv)
                sv *= on
                m += sv
        np.abs(p, out=sv)
        if float(sv.max()) < BALANCE * self.pull_scale:
            m.fill(0.0)
        self.returning = float(p.dot(m)) > 0.0
        return self.returning

    def sensed_deadzone(self, J, R, cov, gain=None):
        """The pull's dead zone per joint with a sensor: J (6 x n) the frame's world-aligned Jacobian, R
        the rotation of the wrench's axes to the world's (None: world-aligned already), cov the 6x6
        covariance of the noise on the wrench (State.wrench_cov; None: not known, no dead zone), gain
        (6, world-aligned axes; None: ones) what the pull takes of the world wrench per axis.  Sets and
        returns self.deadzone = NOISE_DEADZONE sqrt(diag(B cov B^T)), B = J^T diag(gain) diag(R, R)
        (the wrench to the pull)."""
        dz = self.deadzone
        if cov is None:
            dz.fill(0.0)
            self.noisy = False
            return dz
        if gain is not None:
            J = np.multiply(J, gain[:, None], out=self._Jg)
        Bt = J                                             # B^T = diag(R^T, R^T) diag(gain) J
        if R is not None:
            Bt = self._Bt
            np.dot(R.T, J[:3], out=Bt[:3])
            np.dot(R.T, J[3:], out=Bt[3:])
        t = self._Ct
        np.dot(cov, Bt, out=t)                             # diag(B cov B^T)
        np.multiply(t, Bt, out=t)
        np.add.reduce(t, axis=0, out=dz)
        np.fmax(dz, 0.0, out=dz)                           # (a NaN from a broken estimate: no dead zone)
        np.sqrt(dz, out=dz)
        dz *= NOISE_DEADZONE
        self.noisy = bool(dz.max() > self.pull_scale)
        return dz

    def link_filter(self, period):
        """The time constant [s] of the low-pass on the environment's torque from link-side joint torque
        sensors (stages/estimation.py), `period` the control period [s].  A link-side sensor reads the
        arm's own acceleration too (tau_J = M a + C v + g - tau_ext): the term's torque accelerates the
        arm, and the next reading brings -M a into the pull, through the term's slope k fc / p0 (16 at
        fc 0.8 N m, k 1, p0 0.05 N m) back into the torque: a loop through the arm's inertia (M of the
        links, less than the arm's with its rotors: a gain below g = k max(fc) / p0) with a period's
        delay, whose pole z = -g rings at half the control rate (measured on the rig without a dead zone:
        the arm held in a two-step oscillation, up to 0.26 N m of M a in the reading).  Low-passed, y += (1 - b)
        (x - y), the pole is b - (1 - b) g; at 1 - b = 1 / (LINK_MARGIN (1 + g)) it is 1 - 1 / LINK_MARGIN
        (0.5; with two periods of delay the poles are within 0.71).  The filter's noise gain,
        sqrt((1 - b) / (1 + b)), narrows the dead zone as much."""
        g = self.stiction_sensed * float(self._fc.max()) / self.pull_scale
        return LINK_MARGIN * (1.0 + g) * period

    def joint_deadzone(self, sd):
        """The pull's dead zone per joint with link-side joint torque sensors: sd the spread of their
        noise per joint [N m] (None: not known, no dead zone).  Sets and returns self.deadzone =
        NOISE_DEADZONE sd."""
        dz = self.deadzone
        if sd is None:
            dz.fill(0.0)
        else:
            np.multiply(sd, NOISE_DEADZONE, out=dz)
            np.fmax(dz, 0.0, out=dz)                       # (a NaN from a broken estimate: no dead zone)
        self.noisy = bool(dz.max() > self.pull_scale)
        return dz

    def torque(self, v):
        """c(v) without the stiction term, through add() (the control path's own code): what the law
        adds when friction_compensation is on.  v (..., n)."""
        v = np.asarray(v, dtype=float)
        out = np.zeros(np.broadcast_shapes(v.shape, (self.n,)))
        vb = np.broadcast_to(v, out.shape)
        active, stiction, sensed = self.active, self.stiction, self.sensed
        self.active, self.stiction, self.sensed = True, 0.0, False
        try:
            for idx in np.ndindex(out.shape[:-1]):
                self.add(out[idx], np.ascontiguousarray(vb[idx]))
        finally:
            self.active, self.stiction, self.sensed = active, stiction, sensed
        return out

    def model(self, v):
        """f(v): the identified model the compensation is bounded by."""
        v = np.asarray(v, dtype=float)
        return self.fv * v + self.fc * np.tanh(v / self.vs) + self.off
