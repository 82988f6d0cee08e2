"""Model: built once from a URDF (file, string, robot_description) or a DH table; never per tick.

A Model holds two descriptions of the same robot, parsed independently from the same URDF text:
`tree` (the in-repo reader, for the reference backend) and `pin_model` (Pinocchio's urdfdom reader).
The backend self-check compares them.

Configuration vectors are what a user holds, as JointState carries them: one angle or displacement
per joint, in `joint_names` order.  A continuous joint is one angle here (Pinocchio stores cos, sin);
a floating base is [position (3); quaternion x, y, z, w (4)] followed by the joints, and its velocity
[linear; angular] in the base frame (as in Pinocchio), so nq = nv + 1 for a floating base.
"""
import copy
import math
import warnings
from pathlib import Path

import numpy as np
import pinocchio as pin

from . import robots
from .urdf import (InertiaWarning, add_joint_inertia, check_inertia, expand_xacro, lock_joints,
                   massless_joints, parse_urdf)

# Rotor inertia [kg m^2] (mass [kg] for a prismatic joint) given to a joint that moves no inertia at
# all (romeo.urdf's fingers: links without <inertial>), so that the mass matrix stays positive
# definite and ABA finite.  See Model.__init__.
MIN_JOINT_INERTIA = 1e-6


class Model:
    """Robot model. Build with `from_urdf_file`, `from_urdf_string`, `from_dh` or `from_robot`."""

    def __init__(self, urdf, floating_base=False, active_joints=None, locked_joints=None, source="urdf",
                 strict=False, min_joint_inertia=MIN_JOINT_INERTIA):
        """Inertials as the URDF writes them, physical or not (vendor CAD exports often are not):
        negative mass, a tensor not positive definite, principal moments breaking the triangle
        inequality and zero mass with rotational inertia each give an InertiaWarning naming the link
        and the numbers, listed in `self.warnings`; the values are kept for both backends and the
        simulator.  A joint that moves no inertia at all (its child link and all it carries have no
        <inertial>) would make M singular: its child link gets `min_joint_inertia` (an isotropic
        rotor of zero mass, kg m^2; kg of mass for a prismatic joint) in the URDF text every reader
        sees (`self.urdf`), with a warning; `min_joint_inertia=0` leaves M singular.
        strict=True: any of these refuses the model (ValueError listing them all)."""
        if active_joints is not None or locked_joints:
            urdf = lock_joints(urdf, active_joints, locked_joints)
        issues = []
        tree = parse_urdf(urdf, floating_base, issues)
        if tree.nb == 0:
            raise ValueError("URDF: the robot has no movable joint (a base that only a floating base "
                             "would move: load it with floating_base=True)")
        massless = massless_joints(tree)
        singular = [f"joint {tree.joint_names[i]!r} moves no inertia (link {tree.body_names[i]!r} and all "
                    "it carries have no <inertial>, or zero ones): the mass matrix would be singular"
                    for i in massless]
        if strict and (issues or singular):
            raise ValueError("URDF is not physically consistent (strict=True): "
                             + "; ".join(issues + singular))
        if massless and min_joint_inertia:
            eps = float(min_joint_inertia)
            if not eps > 0:
                raise ValueError(f"min_joint_inertia must be > 0 (or 0/None for none), got {eps}")
            urdf = add_joint_inertia(urdf, [(tree.body_names[i], tree.jtype[i], eps) for i in massless])
            tree = parse_urdf(urdf, floating_base, [])
            singular = [f"{msg}; {eps:g} {'kg' if tree.jtype[i] == 'prismatic' else 'kg m^2'} added to "
                        f"link {tree.body_names[i]!r}" for msg, i in zip(singular, massless)]
        issues += singular
        self.warnings = issues
        for msg in issues:
            warnings.warn(msg, InertiaWarning, stacklevel=3)
        self.urdf = urdf
        self.source = source
        self.tree = tree
        try:
            if floating_base:
                self.pin_model = pin.buildModelFromXML(urdf, pin.JointModelFreeFlyer())
            else:
                self.pin_model = pin.buildModelFromXML(urdf)
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"URDF: Pinocchio could not parse it: {e}") from None
        self._map_pinocchio()
        self._I0 = [I.copy() for I in self.tree.I]
        self._pin_I0 = [copy.deepcopy(self.pin_model.inertias[j]) for j in range(self.pin_model.njoints)]
        self.payloads = {}

    # ---- construction ----
    @classmethod
    def from_urdf_string(cls, urdf, **kw):
        return cls(urdf, **kw)

    @classmethod
    def from_urdf_file(cls, path, xacro_args=None, **kw):
        """From a .urdf file, or a .xacro one (expanded with `xacro_args`, see urdf.expand_xacro)."""
        p = Path(path)
        if not p.is_file():
            raise ValueError(f"URDF file not found: {path}")
        if p.suffix == ".xacro" or xacro_args is not None:
            return cls(expand_xacro(p, xacro_args), source=str(p), **kw)
        return cls(p.read_text(), source=str(p), **kw)

    @classmethod
    def from_description(cls, description, xacro_args=None, **kw):
        """From whatever a user holds as `robot_description`: URDF text (a robot's own report of its
        URDF, a topic's message) or the path of a .urdf or .urdf.xacro file."""
        if not isinstance(description, (str, Path)):
            raise ValueError(f"robot description must be URDF text or a file path, got "
                             f"{type(description).__name__}")
        text = str(description)
        if text.lstrip().startswith("<"):
            if xacro_args:
                raise ValueError("xacro_args apply to a .xacro file path, not to URDF text")
            return cls.from_urdf_string(text, **kw)
        return cls.from_urdf_file(text, xacro_args=xacro_args, **kw)

    @classmethod
    def from_dh(cls, table, **kw):
        """From a DH or modified-DH table (dict as in config/*_dh.yaml); see `dh.dh_to_urdf`."""
        from .dh import dh_to_urdf
        return cls(dh_to_urdf(table), source="dh", **kw)

    @classmethod
    def from_dh_yaml(cls, path, **kw):
        import yaml
        with open(path) as f:
            return cls.from_dh(yaml.safe_load(f), **kw)

    @classmethod
    def from_robot(cls, name, **kw):
        """A robot of example-robot-data by short name (see robots.ROBOTS): 'panda' is the 7-DoF arm
        with the fingers locked, 'panda_gripper' keeps them."""
        path = robots.robot_urdf_path(name)          # ValueError for an unknown name
        _, floating, active = robots.ROBOTS[name]
        kw.setdefault("floating_base", floating)
        kw.setdefault("active_joints", active)
        return cls(path.read_text(), source=str(path), **kw)

    # ---- Pinocchio correspondence ----
    def _map_pinocchio(self):
        t, pm = self.tree, self.pin_model
        names = list(pm.names)[1:]
        if sorted(names) != sorted(t.joint_names):
            raise ValueError(f"URDF read differently by Pinocchio and the in-repo reader: joints "
                             f"{sorted(set(names) ^ set(t.joint_names))} differ")
        self.pin_joint_id = [pm.getJointId(n) for n in t.joint_names]
        # index maps user (q, v) -> Pinocchio (q, v)
        pin_iv = []
        for i, jid in enumerate(self.pin_joint_id):
            pin_iv += list(range(pm.idx_vs[jid], pm.idx_vs[jid] + pm.nvs[jid]))
        self.v_to_pin = np.array(pin_iv, dtype=int)
        self.v_identity = bool(np.all(self.v_to_pin == np.arange(t.nv)))
        self.q_identity = self.v_identity and pm.nq == t.nq and all(
            tt in ("revolute", "prismatic") for tt in t.jtype)
        self._build_q_maps()
        # A link and a joint may share a name (z1's gripperStator, anymal_c's LF_HAA): Pinocchio then
        # has two frames of that name and getFrameId(name) refuses; ask for the frame of the kind the
        # in-repo reader kept under the name (the link: see urdf.parse_urdf).
        link_type = pin.FrameType.BODY
        joint_types = (pin.FrameType.JOINT, pin.FrameType.FIXED_JOINT)
        self.frame_ids = {}
        for name, fr in t.frames.items():
            if not pm.existFrame(name):
                continue
            for ftype in ((link_type,) if fr.kind == "link" else joint_types):
                if pm.existFrame(name, ftype):
                    self.frame_ids[name] = pm.getFrameId(name, ftype)
                    break

    def _build_q_maps(self):
        """Index arrays for q_to_pin: one fancy-indexing per joint kind instead of a Python loop."""
        t, pm = self.tree, self.pin_model
        plain_u, plain_p, cont_u, cos_p, free_u, free_p = [], [], [], [], [], []
        for i, jid in enumerate(self.pin_joint_id):
            k, kp = t.iq[i], pm.idx_qs[jid]
            if t.jtype[i] == "free":
                free_u.append(k)
                free_p.append(kp)
            elif t.jtype[i] == "continuous":
                cont_u.append(k)
                cos_p.append(kp)
            else:
                plain_u.append(k)
                plain_p.append(kp)
        arr = lambda x: np.array(x, dtype=int)  # noqa: E731
        self._qmap = (arr(plain_u), arr(plain_p), arr(cont_u), arr(cos_p), free_u, free_p)

    def q_to_pin(self, q, out=None):
        """User configuration -> Pinocchio's (continuous: cos, sin; free-flyer: normalised quaternion)."""
        if self.q_identity:
            return q
        plain_u, plain_p, cont_u, cos_p, free_u, free_p = self._qmap
        qp = np.empty(self.pin_model.nq) if out is None else out
        qp[plain_p] = q[plain_u]
        if cont_u.size:
            qc = q[cont_u]
            qp[cos_p] = np.cos(qc)
            qp[cos_p + 1] = np.sin(qc)
        for k, kp in zip(free_u, free_p):
            qp[kp:kp + 3] = q[k:k + 3]
            quat = q[k + 3:k + 7]
            qp[kp + 3:kp + 7] = quat / math.sqrt(quat.dot(quat))
        return qp

    def q_from_pin(self, qp):
        t, pm = self.tree, self.pin_model
        q = np.empty(t.nq)
        for i, jid in enumerate(self.pin_joint_id):
            k, kp = t.iq[i], pm.idx_qs[jid]
            jt = t.jtype[i]
            if jt == "free":
                q[k:k + 7] = qp[kp:kp + 7]
            elif jt == "continuous":
                q[k] = np.arctan2(qp[kp + 1], qp[kp])
            else:
                q[k] = qp[kp]
        return q

    # ---- description ----
    @property
    def name(self):
        return self.tree.name

    @property
    def nq(self):
        return self.tree.nq

    @property
    def nv(self):
        return self.tree.nv

    @property
    def floating_base(self):
        return self.tree.floating

    @property
    def joint_names(self):
        """Names of the actuated joints (the free-flyer excluded), in model order."""
        return [n for n, t in zip(self.tree.joint_names, self.tree.jtype) if t != "free"]

    @property
    def joint_types(self):
        return [t for t in self.tree.jtype if t != "free"]

    @property
    def v_names(self):
        """A name for each entry of v (for messages): joint names, 'root_joint[k]' for the base."""
        out = []
        for n, t in zip(self.tree.joint_names, self.tree.jtype):
            out += [f"{n}[{k}]" for k in range(6)] if t == "free" else [n]
        return out

    def _joint_array(self, attr):
        return np.array([x for x, t in zip(getattr(self.tree, attr), self.tree.jtype) if t != "free"])

    @property
    def lower_limits(self):
        return self._joint_array("lower")

    @property
    def upper_limits(self):
        return self._joint_array("upper")

    @property
    def velocity_limits(self):
        return self._joint_array("velocity")

    @property
    def effort_limits(self):
        return self._joint_array("effort")

    @property
    def frame_names(self):
        return list(self.tree.frames)

    @property
    def gravity(self):
        return self.tree.gravity.copy()

    @gravity.setter
    def gravity(self, g):
        g = np.asarray(g, dtype=float)
        if g.shape != (3,) or not np.all(np.isfinite(g)):
            raise ValueError(f"gravity must be 3 finite numbers, got {g}")
        self.tree.gravity = g.copy()
        self.pin_model.gravity.linear = g

    def check_frame(self, name):
        if name not in self.tree.frames:
            raise ValueError(f"unknown frame {name!r}; frames are {self.frame_names}")
        if name not in self.frame_ids:
            raise ValueError(f"frame {name!r} is not in Pinocchio's model")
        return name

    def neutral(self):
        """Zero joints (clamped into limits); identity base pose."""
        q = np.zeros(self.nq)
        t = self.tree
        for i, jt in enumerate(t.jtype):
            if jt == "free":
                q[t.iq[i] + 6] = 1.0
            else:
                q[t.iq[i]] = np.clip(0.0, t.lower[i], t.upper[i])
        return q

    def random_configuration(self, rng, margin=0.0):
        """Uniform within joint limits (shrunk by `margin` rad or m); [-pi, pi] where unbounded;
        a random base pose for a floating base."""
        t = self.tree
        q = np.zeros(self.nq)
        for i, jt in enumerate(t.jtype):
            k = t.iq[i]
            if jt == "free":
                q[k:k + 3] = rng.uniform(-1, 1, 3)
                quat = rng.normal(size=4)
                q[k + 3:k + 7] = quat / np.linalg.norm(quat)
            else:
                lo = t.lower[i] if np.isfinite(t.lower[i]) else -np.pi
                hi = t.upper[i] if np.isfinite(t.upper[i]) else np.pi
                q[k] = rng.uniform(lo + margin, hi - margin) if hi - lo > 2 * margin else 0.5 * (lo + hi)
        return q

    # ---- payload ----
    @property
    def armature(self):
        """Rotor (armature) inertia per velocity coordinate [kg m^2 | kg], zeros unless set."""
        a = self.tree.armature_v
        return np.zeros(self.nv) if a is None else a.copy()

    def set_armature(self, armature):
        """The rotor inertia behind each joint's gear (a scalar or one value per velocity coordinate,
        model order; e.g. identified by dynamics.identification): added to M's diagonal by both
        backends and every algorithm (RNEA + Ia qdd, CRBA, ABA, kinetic energy), Pinocchio's
        model.armature the same.  Zeros remove it.  ValueError on a negative or non-finite value."""
        a = np.asarray(armature, dtype=float)
        a = np.full(self.nv, float(a)) if a.ndim == 0 else a.reshape(-1)
        if a.shape != (self.nv,) or not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"armature: expected a non-negative scalar or {self.nv} non-negative values, "
                             f"got {np.asarray(armature).tolist()}")
        self.tree.armature_v = a.copy() if np.any(a > 0) else None
        pa = np.zeros(self.pin_model.nv)
        pa[self.v_to_pin] = a
        self.pin_model.armature = pa

    def attach_payload(self, frame, mass, com=(0.0, 0.0, 0.0), inertia=None, name="payload"):
        """Rigidly attach a body (mass, centre of mass and rotational inertia about it, both in the
        frame's axes) to `frame`; every algorithm then includes it.  Replaces a payload of that name."""
        self.check_frame(frame)
        com = np.asarray(com, dtype=float)
        Ic = np.zeros((3, 3)) if inertia is None else np.asarray(inertia, dtype=float)
        if Ic.shape == (6,):
            ixx, ixy, ixz, iyy, iyz, izz = Ic
            Ic = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
        if com.shape != (3,) or Ic.shape != (3, 3) or not np.all(np.isfinite(com)):
            raise ValueError("payload: com must be 3 finite numbers and inertia 3x3 (or 6 numbers)")
        check_inertia(float(mass), Ic, f"payload {name!r}")
        if self.tree.frames[frame].body < 0:
            raise ValueError(f"payload: frame {frame!r} is fixed to the world; it would carry no load")
        self.payloads[name] = (frame, float(mass), com, Ic)
        self._apply_payloads()

    def detach_payload(self, name="payload"):
        if name not in self.payloads:
            raise ValueError(f"no payload named {name!r}; attached: {sorted(self.payloads)}")
        del self.payloads[name]
        self._apply_payloads()

    def _apply_payloads(self):
        t, pm = self.tree, self.pin_model
        t.I = [I.copy() for I in self._I0]
        for j in range(pm.njoints):
            pm.inertias[j] = copy.deepcopy(self._pin_I0[j])
        for frame, m, c, Ic in self.payloads.values():
            fr = t.frames[frame]
            t.add_inertia(fr.body, m, c, Ic, fr.R, fr.p)
            pf = pm.frames[self.frame_ids[frame]]
            jid = pf.parentJoint if hasattr(pf, "parentJoint") else pf.parent
            pm.inertias[jid] = pm.inertias[jid] + pf.placement.act(pin.Inertia(m, c, Ic))
