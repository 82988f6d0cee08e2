"""A MuJoCo world for the cooperative carry: two Pandas facing each other across y, a free box between
their hands held by friction only (a flat pad on each grasp frame), one physics step for both.

    world = CarryWorld.panda_pair()              # arms, box, initial configuration in grasp
    world.step([tau1, tau2])
    (q1, v1), (q2, v2) = world.arm_state(0), world.arm_state(1)
    R, p = world.box_pose(); w1, w2 = world.pad_wrenches()      # the pads' contact wrenches on the box

Built on MujocoSim (the same URDF text as the controllers' models, exact inertials): the two arms are
one URDF (control.cooperative.pair_urdf: links prefixed a1_ / a2_, bases at their poses), then the box
(a free body, its own mass and inertia) and the pads (boxes of 6 x 1 x 6 cm on the side of each hand,
their outer face the grasp frame's xz plane, facing its +y: the fingers' closing direction) are added to the MuJoCo model.  Contacts exist only between the pads and the box
(the arms carry no geometry).  Integrator "implicitfast" (contacts); pads and box solref (4 ms, 1),
friction 1.  The internal force is read from MuJoCo's contact forces (`pad_wrenches`).
"""
import math

import mujoco
import numpy as np

from ..control.cooperative import CarryArm, CarryObject, pair_urdf
from ..dynamics.model import Model
from .mujoco_sim import MujocoSim

PAD_HALF = (0.03, 0.005, 0.03)


def _yaw(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class CarryWorld:
    def __init__(self, arms, obj, box_size, box_pose, q0, dt=0.001, friction=1.0,
                 integrator="implicitfast", pad_solref=(0.004, 1.0), noslip_iterations=10, impratio=10.0,
                 sim_kw=None):
        self.arms, self.obj = arms, obj
        self.box_size = np.asarray(box_size, float)
        self.model = Model.from_urdf_string(pair_urdf(arms))
        # sim_kw: MujocoSim's own options for both arms (damping, friction, armature: unmodelled joint
        # losses), joint order a1_* then a2_*
        self.sim = sim = MujocoSim(self.model, dt=dt, integrator=integrator, **(sim_kw or {}))
        spec = sim.spec
        spec.option.noslip_iterations = int(noslip_iterations)
        spec.option.impratio = float(impratio)
        spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
        R0, p0 = box_pose
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, np.asarray(R0, float).flatten())
        box = spec.worldbody.add_body(name="carry_box", pos=list(p0), quat=list(quat))
        box.add_freejoint(name="carry_box_free")
        box.explicitinertial = True
        box.mass = float(obj.mass)
        box.ipos = [0.0, 0.0, 0.0]
        box.inertia = list(np.diag(obj.inertia))
        box.add_geom(name="carry_box_geom", type=mujoco.mjtGeom.mjGEOM_BOX, size=list(0.5 * self.box_size),
                     friction=[friction, 0.005, 0.0001], solref=list(pad_solref), mass=0.0)
        for k, arm in enumerate(arms):
            link = sim._link(f"a{k + 1}_{arm.hand_frame}")
            spec.body(link).add_geom(name=f"pad{k + 1}", type=mujoco.mjtGeom.mjGEOM_BOX, size=list(PAD_HALF),
                                     pos=[0.0, -PAD_HALF[1], 0.0], friction=[friction, 0.005, 0.0001],
                                     solref=list(pad_solref), mass=0.0)
        sim._recompile()
        m = sim.m
        self.box_body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "carry_box")
        self.box_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "carry_box_geom")
        self.pad_geoms = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"pad{k + 1}") for k in range(2)]
        jadr = m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, "carry_box_free")]
        self._box_qadr = jadr
        self.n = [a.n for a in arms]
        self.reset(q0, box_pose)

    # ---- construction of the shipped example ----
    @classmethod
    def panda_pair(cls, distance=1.2, box_size=(0.15, 0.3, 0.15), box_mass=1.5, box_height=0.35,
                   **kw):
        """Two Pandas on the y axis, bases at y = -/+ distance/2 facing each other (yaw +/- 90 deg), the
        box centred at (0, 0, box_height), its 0.3 m edge along y between the hands, the hands pointing
        down beside it, their y axes along +y / -y, pads touching the box's faces."""
        p_o = np.array([0.0, 0.0, box_height])
        half = 0.5 * box_size[1]
        arms, q0 = [], []
        for k, (y, yaw) in enumerate(((-0.5 * distance, 0.5 * math.pi), (0.5 * distance, -0.5 * math.pi))):
            m = Model.from_robot("panda")
            Rb = _yaw(yaw)
            # grasp frame: the hand points down (z), its y axis (the fingers' closing direction) toward
            # the box (+y for arm 1): the pad on the hand's side presses on the box's y face
            y_ax = np.array([0.0, 1.0 if k == 0 else -1.0, 0.0])
            z_ax = np.array([0.0, 0.0, -1.0])
            R_h = np.column_stack([np.cross(y_ax, z_ax), y_ax, z_ax])
            p_h = p_o - half * y_ax
            # X = T_h^-1 T_o (T_o: identity rotation)
            grasp = (R_h.T, R_h.T @ (p_o - p_h))
            arm = CarryArm(m, base=(Rb, np.array([0.0, y, 0.0])), grasp=grasp, name=f"arm{k + 1}")
            q0.append(cls._ik(arm, R_h, p_h))
            arms.append(arm)
        obj = CarryObject.box(box_mass, box_size)
        return cls(arms, obj, box_size, (np.eye(3), p_o), q0, **kw)

    @staticmethod
    def _ik(arm, R_w, p_w):
        from ..dynamics.ik import PositionIK
        Rl, pl = arm.R_b.T @ R_w, arm.R_b.T @ (p_w - arm.p_b)
        q_start = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785])
        res = PositionIK(arm.model, arm.hand_frame).solve(q_start, pl, Rl)
        if not res.success:
            raise RuntimeError(f"CarryWorld: no IK for {arm.name}'s grasp ({res.status})")
        return res.q

    # ---- state ----
    def reset(self, q0, box_pose):
        self.sim.reset(np.concatenate(q0))
        R0, p0 = box_pose
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, np.asarray(R0, float).flatten())
        d = self.sim.d
        d.qpos[self._box_qadr:self._box_qadr + 3] = p0
        d.qpos[self._box_qadr + 3:self._box_qadr + 7] = quat
        mujoco.mj_forward(self.sim.m, d)

    @property
    def t(self):
        return self.sim.t

    def arm_state(self, i):
        n0 = sum(self.n[:i])
        q, v = self.sim.q, self.sim.v
        return q[n0:n0 + self.n[i]], v[n0:n0 + self.n[i]]

    def step(self, taus, n=1):
        self.sim.step(np.concatenate(taus), n)

    def box_pose(self):
        d = self.sim.d
        return d.xmat[self.box_body].reshape(3, 3).copy(), d.xpos[self.box_body].copy()

    def hand_pose(self, i):
        return self.sim.frame_pose(f"a{i + 1}_{self.arms[i].hand_frame}")

    def pad_wrenches(self):
        """[w_1, w_2]: the contact force of pad i on the box (world axes, N) and its moment about the
        box's centre, summed over that pad's contacts (MuJoCo's constraint forces, mj_contactForce)."""
        m, d = self.sim.m, self.sim.d
        out = [np.zeros(6), np.zeros(6)]
        c6 = np.zeros(6)
        pb = d.xpos[self.box_body]
        for k in range(d.ncon):
            con = d.contact[k]
            gs = (con.geom1, con.geom2)
            if self.box_geom not in gs:
                continue
            other = gs[1] if gs[0] == self.box_geom else gs[0]
            if other not in self.pad_geoms:
                continue
            mujoco.mj_contactForce(m, d, k, c6)
            frame = con.frame.reshape(3, 3)              # rows: normal, tangents (world axes)
            f = frame.T @ c6[:3]                         # the force geom1 applies on geom2 ... sign below
            if con.geom2 != self.box_geom:               # MuJoCo: the force on geom2 from geom1 is +f
                f = -f
            i = self.pad_geoms.index(other)
            out[i][:3] += f
            out[i][3:] += np.cross(con.pos - pb, f)
        return out
