"""Control laws (no ROS): gravity compensation, computed torque, joint and Cartesian impedance,
trajectory interpolation, wrench processing and the safety filter.

    from robot_dynamics.control import make_law, LAWS, SafetyFilter, SafetyParams, JointTrajectory, \
        WrenchProcessor, State, JointReference, CartesianReference
    law = make_law("joint_impedance", model, backend, {"k_gains": [...], "damping_ratio": 1.0})
    law.reset(state); law.set_reference(ref); tau = law.compute(state)
    tau_safe = SafetyFilter(model).apply(tau, state, dt, fallback=g)

The whole loop (law + safety filter + supervisor), driven by the controller node and by in-process
hardware bridges alike: `from robot_dynamics.control import ControlLoop` (see control/loop.py).
"""
from .laws.base import CartesianReference, ControlLaw, JointReference, LawInfo, State
from .laws.cartesian_impedance import CartesianImpedance
from .laws.computed_torque import ComputedTorque
from .laws.gravity import GravityCompensation
from .laws.joint_impedance import JointImpedance
from .stages.safety import SafetyFilter, SafetyParams
from .trajectory import JointTrajectory
from .wrench import WrenchProcessor

from .loop import ControlLoop  # noqa: E402 (needs make_law below at call time only)

LAW_CLASSES = {c.name: c for c in (GravityCompensation, ComputedTorque, JointImpedance, CartesianImpedance)}
LAWS = tuple(LAW_CLASSES)


def make_law(name, model, backend, params=None):
    """Build the law `name` (one of LAWS) on a model and backend, with params (dict; ValueError on
    an unknown name or a bad parameter)."""
    if name not in LAW_CLASSES:
        raise ValueError(f"unknown control law {name!r}; use one of {LAWS}")
    return LAW_CLASSES[name](model, backend, params)


__all__ = ["make_law", "LAWS", "LAW_CLASSES", "ControlLaw", "State", "JointReference", "CartesianReference",
           "LawInfo", "GravityCompensation", "ComputedTorque", "JointImpedance", "CartesianImpedance",
           "SafetyFilter", "SafetyParams", "JointTrajectory", "WrenchProcessor", "ControlLoop"]
