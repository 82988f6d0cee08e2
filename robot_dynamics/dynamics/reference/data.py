"""Preallocated work arrays of the reference algorithms (Pinocchio's Data)."""
import numpy as np


class RefData:
    """Per-body quantities of the last call, in body coordinates unless prefixed with `o` (world)."""

    def __init__(self, tree):
        nb, nv = tree.nb, tree.nv
        self.S = [tree.motion_subspace(i) for i in range(nb)]
        self.Xup = np.zeros((nb, 6, 6))   # i_X_parent(i)
        self.v = np.zeros((nb, 6))        # body spatial velocities
        self.a = np.zeros((nb, 6))        # body spatial accelerations (gravity included in RNEA)
        self.f = np.zeros((nb, 6))        # body forces
        self.oR = np.zeros((nb, 3, 3))    # body orientations in the world
        self.op = np.zeros((nb, 3))       # body origins in the world
        self.tau = np.zeros(nv)
        self.M = np.zeros((nv, nv))
        self.C = np.zeros((nv, nv))
        self.ddq = np.zeros(nv)
