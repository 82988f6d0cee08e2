"""The in-repo reference algorithms, in spatial (6D) form, after Featherstone's spatial_v2.

One module per algorithm; each takes (tree, data, ...) like Pinocchio takes (model, data, ...).
They favour clarity over speed: the Pinocchio backend is the production path and this is its oracle.
"""
from .aba import aba
from .coriolis import coriolis_matrix
from .crba import crba
from .data import RefData
from .energy import kinetic_energy, potential_energy
from .jacobian import frame_jacobian, frame_jacobian_dot
from .kinematics import forward_kinematics, frame_placement, frame_velocity
from .rnea import gravity, nonlinear_effects, rnea

__all__ = ["RefData", "rnea", "gravity", "nonlinear_effects", "crba", "aba", "coriolis_matrix",
           "forward_kinematics", "frame_placement", "frame_velocity", "frame_jacobian",
           "frame_jacobian_dot", "kinetic_energy", "potential_energy"]
