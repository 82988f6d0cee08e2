"""The one interface every control law implements: (state, reference, measured wrench) -> tau.

No ROS here.  A law is built once with the model and a backend (whose Data it reuses every cycle),
keeps its own preallocated buffers, and its `compute` does no allocation-heavy work beyond what the
math needs.  The ROS node converts messages into `State` / references and calls:

    law = make_law("joint_impedance", model, backend, params)   # at configure
    law.reset(state)                                            # at activate: hold where we are
    law.set_reference(JointReference(...))                      # when a reference message arrives
    tau = law.compute(state)                                    # every cycle, then the SafetyFilter

Vectors are in model order (`model.joint_names`), length model.nv (fixed-base arms).
"""
from dataclasses import dataclass, field

import numpy as np


@dataclass
class State:
    """Measured robot state at time t [s]: q [rad | m], v [rad/s | m/s], optional measured wrench
    [f; n] (N, N m) already expressed in `wrench_frame` (after tare and tool-gravity removal)."""
    q: np.ndarray
    v: np.ndarray
    t: float = 0.0
    wrench: np.ndarray = None
    wrench_frame: str = ""


@dataclass
class JointReference:
    """Desired joint position, velocity and acceleration (model order)."""
    q: np.ndarray
    v: np.ndarray = None
    a: np.ndarray = None


@dataclass
class CartesianReference:
    """Desired pose of the controlled frame in the world (R 3x3, p 3), optional twist [v; w] and
    feed-forward wrench [f; n] in local-world-aligned axes."""
    R: np.ndarray
    p: np.ndarray
    twist: np.ndarray = None
    wrench: np.ndarray = None


@dataclass
class LawInfo:
    """What a law reports each cycle for the controller-state topic: reference, error, torque."""
    reference: np.ndarray = field(default_factory=lambda: np.zeros(0))
    error: np.ndarray = field(default_factory=lambda: np.zeros(0))


class ControlLaw:
    """Base class.  Subclasses set `name` and implement `compute`."""
    name = "base"

    def __init__(self, model, backend, params=None):
        self.model = model
        self.dyn = backend
        self.nv = model.nv
        self.params = dict(params or {})
        self.info = LawInfo()
        self.gravity_enabled = bool(self.params.get("compensate_gravity", True))

    def reset(self, state):
        """Called on activation: take the current state as the reference (hold position)."""

    def set_reference(self, ref):
        raise NotImplementedError(f"{self.name} takes no reference of type {type(ref).__name__}")

    def set_params(self, params):
        """Validate and apply new parameters atomically: raise ValueError and keep the old ones on
        any bad value."""
        self.params.update(params)

    def compute(self, state):
        raise NotImplementedError
