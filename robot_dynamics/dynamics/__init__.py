"""Dynamics layer: Model (built once) + backends holding preallocated Data.  No ROS imports.

    from robot_dynamics.dynamics import Model, PinocchioBackend, ReferenceBackend, self_check
    model = Model.from_robot("panda")          # or from_urdf_file / from_urdf_string / from_dh_yaml
    dyn = PinocchioBackend(model)
    tau = dyn.rnea(q, v, a)
"""
from .backends import Backend, PinocchioBackend, ReferenceBackend, make_backend
from .model import Model
from .selfcheck import SelfCheckError, SelfCheckReport, self_check
from .urdf import InertiaWarning

__all__ = ["Model", "Backend", "PinocchioBackend", "ReferenceBackend", "make_backend", "self_check",
           "SelfCheckError", "SelfCheckReport", "InertiaWarning"]
