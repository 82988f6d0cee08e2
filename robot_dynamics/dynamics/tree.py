"""The kinematic tree the in-repo algorithms run on: bodies numbered so that parent[i] < i.

A body is what moves with one joint: the child link of a movable joint plus every link attached to it
by fixed joints (merged, inertias added).  Body -1 is the world (the fixed root link and everything
fixed to it).  Built by `urdf.parse_urdf` (and so by the DH loader, which writes URDF).
"""
from dataclasses import dataclass, field

import numpy as np

from .reference import spatial


@dataclass
class Frame:
    """A named frame rigidly attached to a body (body -1 = world): pose (R, p) in the body frame."""
    name: str
    body: int
    R: np.ndarray
    p: np.ndarray
    kind: str = "link"  # "link" or "joint"


@dataclass
class KinematicTree:
    """Topology, joint models and inertias of a robot.  All lists are indexed by body i in 0..nb-1."""
    name: str = "robot"
    parent: list = field(default_factory=list)       # parent body, -1 for the world
    jtype: list = field(default_factory=list)        # "revolute" | "continuous" | "prismatic" | "free"
    axis: list = field(default_factory=list)         # unit joint axis in the joint (= body) frame
    joint_names: list = field(default_factory=list)
    body_names: list = field(default_factory=list)   # the URDF link that carries the joint
    R_tree: list = field(default_factory=list)       # pose of the joint frame in the parent body frame
    p_tree: list = field(default_factory=list)
    I: list = field(default_factory=list)            # 6x6 spatial inertia of the body, in its frame
    iq: list = field(default_factory=list)           # first index of the joint in q (user form)
    iv: list = field(default_factory=list)           # first index of the joint in v
    lower: list = field(default_factory=list)        # limits per joint (one number; +-inf if none)
    upper: list = field(default_factory=list)
    velocity: list = field(default_factory=list)
    effort: list = field(default_factory=list)
    damping: list = field(default_factory=list)
    friction: list = field(default_factory=list)
    frames: dict = field(default_factory=dict)       # name -> Frame
    gravity: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, -9.81]))
    root_link: str = ""
    # rotor (armature) inertia per velocity coordinate, added to M's diagonal by every algorithm
    # (Model.set_armature); None: none (the URDF has no such element)
    armature_v: object = None
    # (len(jtype), nq, nv): nq and nv are read on every control cycle, so they are computed once per
    # topology; add_body drops the cache, and a jtype list of another length recomputes it
    _dims: tuple = field(default=None, init=False, repr=False, compare=False)

    @property
    def nb(self):
        return len(self.parent)

    def _counts(self):
        d = self._dims
        if d is None or d[0] != len(self.jtype):
            d = self._dims = (len(self.jtype), sum(7 if t == "free" else 1 for t in self.jtype),
                              sum(6 if t == "free" else 1 for t in self.jtype))
        return d

    @property
    def nv(self):
        return self._counts()[2]

    @property
    def nq(self):
        return self._counts()[1]

    @property
    def floating(self):
        return bool(self.jtype) and self.jtype[0] == "free"

    def add_body(self, parent, jtype, axis, joint_name, body_name, R_tree, p_tree, I,
                 lower=-np.inf, upper=np.inf, velocity=np.inf, effort=np.inf, damping=0.0, friction=0.0):
        assert parent < self.nb, "bodies must be numbered parent < child"
        self.iq.append(self.nq)
        self.iv.append(self.nv)
        self.parent.append(parent)
        self.jtype.append(jtype)
        self._dims = None
        self.axis.append(np.asarray(axis, dtype=float))
        self.joint_names.append(joint_name)
        self.body_names.append(body_name)
        self.R_tree.append(np.asarray(R_tree, dtype=float))
        self.p_tree.append(np.asarray(p_tree, dtype=float))
        self.I.append(np.asarray(I, dtype=float))
        for lst, val in ((self.lower, lower), (self.upper, upper), (self.velocity, velocity),
                         (self.effort, effort), (self.damping, damping), (self.friction, friction)):
            lst.append(float(val))
        return self.nb - 1

    def motion_subspace(self, i):
        """S_i: 6 x nv_i, the joint's motion subspace in the body frame."""
        t = self.jtype[i]
        if t == "free":
            return np.eye(6)
        S = np.zeros((6, 1))
        if t == "prismatic":
            S[:3, 0] = self.axis[i]
        else:
            S[3:, 0] = self.axis[i]
        return S

    def subtree(self, i):
        """Bodies supported by body i (itself included)."""
        out = {i}
        for j in range(i + 1, self.nb):
            if self.parent[j] in out:
                out.add(j)
        return sorted(out)

    def body_mass(self, i):
        return self.I[i][0, 0]

    def add_inertia(self, body, m, c, Ic, R=None, p=None):
        """Add a rigid body (m, c, Ic in a frame with pose (R, p) in the body frame) to body `body`."""
        I = spatial.inertia(m, np.asarray(c, float), np.asarray(Ic, float))
        if R is not None:
            I = spatial.transform_inertia(I, R, p)
        self.I[body] = self.I[body] + I
