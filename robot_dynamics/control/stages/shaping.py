"""The shaping stage: what changes the law's command, or its gains, before the limits.  Today the energy
tank: live stiffness changes pass through it.

Reads: the law's declared `stiffness_keys` (the parameters a tank may lower: joint impedance's k_gains,
Cartesian impedance's six task stiffnesses), its `stiffness_error` and `damping_power`; the cycle's dt;
the parameter safety.tank_capacity.  Writes: the law's stiffness (law.set_params of those keys).

Why it cannot inject energy: the law's spring stores V = 1/2 e^T K e; a stiffness change adds
1/2 e^T dK e to the arm's energy without any work done on it, and the tank pays for it (a change it
cannot pay is made in part, the tank then empty); the tank is filled only by what the law's damping
dissipates (e'^T D e' >= 0) and by changes that release energy, up to its capacity.  So over any run the
energy stiffness changes inject is at most the capacity plus what the damping took out: the law stays
passive with respect to its own storage function (test_envelope.py, the tank tests).  With capacity 0
(the default) live stiffness changes apply at once, as without the stage.
"""
import numpy as np


class EnergyTank:
    """A passivity-based energy tank for live stiffness changes (after Ferraguti, Secchi, Fantuzzi).

    The law's spring stores V = 1/2 e^T K e (K diagonal: joint or task axes, e its error).  Changing K to
    K + dK at the error e adds 1/2 e^T dK e to the arm's energy without any work being done on it; the
    tank pays for it.  Each step the effective stiffness moves toward the one asked for as far as the
    tank's level allows (all of it when it can pay, else the fraction level / need, the tank then empty);
    energy a change releases (need < 0) and the energy the law's damping dissipates, e'^T D e', flow into
    the tank up to its capacity.  So the energy stiffness changes inject is bounded by the capacity plus
    what the damping has taken out."""

    def __init__(self, capacity=0.0):
        self.capacity = self.level = float(capacity)
        self.target = None                  # the stiffness asked for, not yet reached
        self.paid = 0.0                     # energy the changes took from the tank [J], since construction

    def set_capacity(self, capacity):
        self.capacity = float(capacity)
        self.level = min(self.level, self.capacity) if self.capacity > 0 else 0.0
        if self.capacity <= 0:
            self.target = None

    def step(self, k, e):
        """The stiffness to use now (k: the effective one, e: the spring's error), toward `target`."""
        dk = self.target - k
        need = 0.5 * float(np.dot(dk, e * e))
        if need <= self.level:
            self.level = min(self.capacity, self.level - need)
            self.paid += max(need, 0.0)
            k, self.target = self.target, None
            return k
        alpha = self.level / need
        self.paid += self.level
        self.level = 0.0
        return k + alpha * dk

    def refill(self, energy):
        if energy > 0.0:
            self.level = min(self.capacity, self.level + energy)


class TankStage:
    """The energy tank in the cycle: live stiffness changes of the law go through it."""

    def __init__(self, law, capacity):
        self.law = law
        self.keys = law.stiffness_keys
        self.tank = EnergyTank(capacity if self.keys else 0.0)
        law.track_damping_power = self.on = self.tank.capacity > 0      # on: the tank takes part

    def set_capacity(self, capacity):
        if self.keys:
            self.tank.set_capacity(capacity)
            self.law.track_damping_power = self.on = self.tank.capacity > 0

    def touches(self, law_updates):
        """True when these law parameter changes are stiffness changes the tank pays for."""
        return self.on and any(k in law_updates for k in self.keys)

    def stiffness(self):
        """The law's stiffness under the tank, one vector (joint impedance: k_gains, model order; Cartesian
        impedance: the six task.k_*)."""
        p = self.law.params
        return np.concatenate([np.atleast_1d(np.asarray(p[k], dtype=float)) for k in self.keys])

    def set_stiffness(self, k):
        keys = self.keys
        if len(keys) == 1:
            self.law.set_params({keys[0]: np.broadcast_to(k, (self.law.nv,)).tolist()})
        else:
            self.law.set_params({key: float(k[i]) for i, key in enumerate(keys)})

    def asked(self, k_now):
        """The law was just given a new stiffness: it becomes the tank's target, the law keeps k_now."""
        self.tank.target = self.stiffness()
        self.set_stiffness(k_now)

    def before_law(self):
        if self.tank.target is not None:
            self.set_stiffness(self.tank.step(self.stiffness(), self.law.stiffness_error))

    def after_law(self, dt):
        if self.tank.capacity > 0:
            self.tank.refill(self.law.damping_power * dt)

    def diagnostics(self):
        t = self.tank
        if t.capacity <= 0:
            return []
        return [("tank.level", f"{t.level:.4f}"), ("tank.paid", f"{t.paid:.4f}"),
                ("tank.change_pending", str(t.target is not None))]
