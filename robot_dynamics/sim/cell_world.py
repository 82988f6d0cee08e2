"""Several arms in one MuJoCo world (a cell), with an optional table and a free box on it.  No ROS.

    from robot_dynamics.sim.cell_world import CellWorld, ArmSpec, BoxSpec, TableSpec, two_panda_cell
    world = two_panda_cell()                      # the shipped example (below)
    world = CellWorld([ArmSpec("left", model_l, pos=(-0.55, 0, 0)),
                       ArmSpec("right", model_r, pos=(0.55, 0, 0), rpy=(0, 0, pi))],
                      table=TableSpec(), box=BoxSpec(), dt=0.001)
    world.reset({"left": q_l, "right": q_r})      # arms not named keep their initial pose
    world.set_command("left", tau_l)              # model joint order, held (zero-order hold) ...
    world.step(n=1)                               # ... over ONE physics step for all arms and the box
    arm = world.arm("left")                       # CellArm: q, v, measured_effort, frame_pose(frame)
    p, quat_xyzw = world.box_pose()               # world frame; box_velocity() -> [v; w] world axes

API (stable; carry47 builds on it):
- `ArmSpec(namespace, model, pos=(0,0,0), rpy=(0,0,0), initial_positions=None, damping=0, friction=0,
  armature=0, limits=True, effort_limits=True, collision_radius=0.06)`: `model` a fixed-base
  robot_dynamics Model (its `urdf` is what is simulated, its `joint_names` the order of every vector
  of that arm).  The base (root link) is welded to the world at `pos` / `rpy` (roll-pitch-yaw, URDF
  convention: R = Rz(yaw) Ry(pitch) Rx(roll)).  Gravity in the arm's base frame is
  `world.arm(ns).base_gravity` (= R' g): set it as that arm's Model gravity and the Model's RNEA is
  the arm's dynamics in the cell (test/test_cell_world.py checks it against Pinocchio).
- `CellWorld(arms, table=None, box=None, dt=0.001, integrator="RK4", gravity=(0, 0, -9.81))`.
- Names in the compiled model: every body / joint / actuator of arm `ns` is `"<ns>/<URDF name>"`
  (actuators `"<ns>/motor:<joint>"`), the box body and geom `"box"`, the table geom `"table"`.
- Index maps (numpy int arrays, model joint order) for direct use on `world.m` / `world.d`:
  `arm.qadr` (qpos), `arm.dadr` (qvel, qacc, qfrc_*), `arm.act` (ctrl); the box's free joint
  `world.box_qadr` (7: position, quaternion w x y z) and `world.box_dadr` (6: linear velocity in world
  axes, angular velocity in the box's own axes, as MuJoCo orders a free joint's dofs).
- `world.contacts()`: active contacts as (owner1, owner2, body1, body2, normal force [N]) where an
  owner is an arm's namespace, "box" or "table".

How each arm is built: exactly as MujocoSim builds one (sim/mujoco_sim.py: `mujoco_urdf` text, exact
URDF inertials written after compiling, `configure_joints` for damping / end stops / effort clamp /
motors), attached to the world under its namespace prefix at its base frame.  The URDF's collision
meshes are dropped there (dynamics only), so for contacts each arm gets coarse capsules: one on every
link from its origin to each child joint's origin longer than 5 cm (for the Panda: link0-1, link2-3,
link3-4, link4-5, link6-7, link7-8 and hand-tcp), radius `collision_radius`.  These geoms have no mass
(the inertials are the URDF's).  Contacts: arm-arm, arm-box, arm-table, box-table; never between the
links of one arm (a contype / conaffinity bit per arm), so an arm moves in the cell exactly as alone
until it touches something.  Static bodies (the welded root links, the table) never collide with each
other (MuJoCo skips static pairs).

The shipped example (`two_panda_cell`): two Pandas facing each other across a table, bases at
x = -0.55 m ("left", facing +x) and x = +0.55 m ("right", yaw pi, facing -x), a table 0.5 m x 0.8 m
with its top at z = 0.1 m between them, a 0.3 m cube of 1 kg on it at the origin (centre z = 0.25 m).
Both arms start at the Panda's ready pose: their TCPs at x = -+0.243 m, z = 0.487 m, above and
outside the box (faces at x = -+0.15 m, top at z = 0.4 m).

Integration: RK4 by default, as MujocoSim; contacts are stiff (solref 4 ms, critically damped);
"implicitfast" costs a quarter of RK4 per step where that matters (scale runs).
"""
from dataclasses import dataclass, field
import math
import xml.etree.ElementTree as ET

import mujoco
import numpy as np

from .mujoco_sim import (_INTEGRATORS, _per_joint, configure_joints, link_inertials, mujoco_urdf,
                         write_inertials)

PANDA_READY = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785)
CONTACT_SOLREF = (0.004, 1.0)            # contact time constant [s], damping ratio
MIN_CAPSULE = 0.05                       # [m] shorter link segments get no capsule
_BOX_BIT = 1 << 30
_TABLE_BIT = 1 << 29


def rpy_matrix(rpy):
    """URDF roll-pitch-yaw: R = Rz(y) Ry(p) Rx(r)."""
    r, p, y = (float(x) for x in rpy)
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _quat_wxyz(R):
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, np.asarray(R, dtype=float).flatten())
    return q


@dataclass
class ArmSpec:
    namespace: str
    model: object
    pos: tuple = (0.0, 0.0, 0.0)
    rpy: tuple = (0.0, 0.0, 0.0)
    initial_positions: object = None     # model order; None: clamp(0) into the limits
    damping: object = 0.0
    friction: object = 0.0
    armature: object = 0.0
    limits: bool = True
    effort_limits: bool = True
    collision_radius: float = 0.06       # [m] capsules on the links; 0: the arm has no contact geometry


@dataclass
class TableSpec:
    size: tuple = (0.5, 0.8)             # [m] x, y extent of the top
    top: float = 0.1                     # [m] height of the top surface
    pos: tuple = (0.0, 0.0)              # [m] centre of the top in x, y
    thickness: float = 0.05


@dataclass
class BoxSpec:
    size: tuple = (0.3, 0.3, 0.3)        # [m] edge lengths
    mass: float = 1.0                    # [kg] (uniform density: inertia of a solid box)
    pos: object = None                   # [m] centre; None: on the table top at its centre
    rpy: tuple = (0.0, 0.0, 0.0)
    friction: tuple = (1.0, 0.005, 0.0001)   # MuJoCo sliding, torsional, rolling
    condim: int = 4                      # 4: sliding + torsional friction (a two-hand grasp)
    extra: dict = field(default_factory=dict)


class CellArm:
    """One arm of a CellWorld: views on the shared MjData (model joint order)."""

    def __init__(self, world, spec, prefix):
        self.world, self.spec, self.prefix = world, spec, prefix
        self.namespace = spec.namespace
        self.model = spec.model
        self.joint_names = list(spec.model.joint_names)
        self.n = len(self.joint_names)
        self.R_base = rpy_matrix(spec.rpy)
        self.p_base = np.asarray(spec.pos, dtype=float)
        self.base_gravity = self.R_base.T @ np.asarray(world.gravity, dtype=float)
        m = spec.model
        self.q0 = (np.clip(np.zeros(self.n), m.lower_limits, m.upper_limits)
                   if spec.initial_positions is None else np.asarray(spec.initial_positions, float))
        if self.q0.shape != (self.n,):
            raise ValueError(f"arm {self.namespace!r}: initial_positions must have {self.n} values")
        self.effort_max = np.where(np.isfinite(m.effort_limits) & (m.effort_limits > 0),
                                   m.effort_limits, np.inf)

    def _index(self, m):
        jid = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, self.prefix + nm) for nm in self.joint_names]
        self.qadr = np.array([m.jnt_qposadr[j] for j in jid])
        self.dadr = np.array([m.jnt_dofadr[j] for j in jid])
        self.act = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, f"{self.prefix}motor:{nm}")
                             for nm in self.joint_names])
        self.body_ids = {b for b in range(m.nbody)
                         if mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b).startswith(self.prefix)}

    @property
    def q(self):
        return self.world.d.qpos[self.qadr].copy()

    @property
    def v(self):
        return self.world.d.qvel[self.dadr].copy()

    @property
    def measured_effort(self):
        """Joint effort the motors applied during the last step (after effort-limit clamping)."""
        return self.world.d.qfrc_actuator[self.dadr].copy()

    @property
    def constraint_effort(self):
        """Joint effort of the constraints (contacts, end stops) during the last step."""
        return self.world.d.qfrc_constraint[self.dadr].copy()

    def body_id(self, frame):
        link = self.world._frame_link[self.namespace].get(frame)
        if link is None:
            raise ValueError(f"arm {self.namespace!r}: unknown frame {frame!r}")
        return mujoco.mj_name2id(self.world.m, mujoco.mjtObj.mjOBJ_BODY, self.prefix + link)

    def frame_pose(self, frame, world_axes=True):
        """(R, p) of a frame (link or joint name of this arm's URDF) in the world, or in the arm's
        base frame with world_axes=False, from MuJoCo's kinematics."""
        b = self.body_id(frame)
        R, p = self.world.d.xmat[b].reshape(3, 3).copy(), self.world.d.xpos[b].copy()
        if world_axes:
            return R, p
        return self.R_base.T @ R, self.R_base.T @ (p - self.p_base)

    def braking_torque(self, time_constant):
        """As MujocoSim.braking_torque, for this arm: bias(q, v) - (M v)_arm / T (model order)."""
        m, d = self.world.m, self.world.d
        mv = np.zeros(m.nv)
        mujoco.mj_mulM(m, d, mv, d.qvel)
        return (d.qfrc_bias - mv / float(time_constant))[self.dadr]


class CellWorld:
    """Several fixed-base arms, an optional table and box, one MuJoCo model (module docstring)."""

    def __init__(self, arms, table=None, box=None, dt=0.001, integrator="RK4", gravity=(0.0, 0.0, -9.81)):
        if not arms:
            raise ValueError("CellWorld: at least one arm")
        if integrator not in _INTEGRATORS:
            raise ValueError(f"integrator must be one of {sorted(_INTEGRATORS)}")
        if len(arms) > 28:
            raise ValueError("CellWorld: at most 28 arms (one contact bit each)")
        names = [a.namespace.strip("/") for a in arms]
        if any(not n or "/" in n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"CellWorld: arm namespaces must be distinct single names, got {names}")
        self.dt = float(dt)
        self.gravity = np.asarray(gravity, dtype=float)
        spec = self.spec = mujoco.MjSpec()
        c = spec.compiler
        c.fusestatic, c.discardvisual, c.balanceinertia = False, True, False
        c.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
        spec.option.timestep = self.dt
        spec.option.integrator = _INTEGRATORS[integrator]
        spec.option.gravity = self.gravity
        self.arms, self._frame_link, self._inertials, self._children = {}, {}, {}, []
        all_arms = sum(1 << i for i in range(len(arms)))
        for i, a in enumerate(arms):
            if a.model.floating_base:
                raise ValueError(f"arm {a.namespace!r}: fixed-base models only")
            ns = names[i]
            a.namespace = ns
            prefix = ns + "/"
            arm = CellArm(self, a, prefix)
            text, frame_link = mujoco_urdf(a.model.urdf)
            child = mujoco.MjSpec.from_string(text)
            bit = 1 << i
            self._capsules(child, a.model.urdf, a.collision_radius, contype=bit,
                           conaffinity=(all_arms & ~bit) | _BOX_BIT | _TABLE_BIT)
            frame = spec.worldbody.add_frame(pos=list(arm.p_base), quat=list(_quat_wxyz(arm.R_base)))
            spec.attach(child, prefix=prefix, frame=frame)
            self._children.append(child)
            n = arm.n
            configure_joints(spec, arm.joint_names, self.dt, _per_joint(a.damping, n, "damping"),
                             _per_joint(a.friction, n, "friction"), _per_joint(a.armature, n, "armature"),
                             a.limits, a.effort_limits, prefix=prefix)
            self.arms[ns] = arm
            self._frame_link[ns] = frame_link
            self._inertials[ns] = link_inertials(a.model.urdf)
        self.table, self.box = table, box
        if table is not None:
            sx, sy = table.size
            spec.worldbody.add_geom(name="table", type=mujoco.mjtGeom.mjGEOM_BOX,
                                    size=[sx / 2, sy / 2, table.thickness / 2],
                                    pos=[table.pos[0], table.pos[1], table.top - table.thickness / 2],
                                    contype=_TABLE_BIT, conaffinity=all_arms | _BOX_BIT,
                                    solref=list(CONTACT_SOLREF))
        if box is not None:
            size = np.asarray(box.size, dtype=float)
            pos = box.pos
            if pos is None:
                top = table.top if table is not None else 0.0
                xy = table.pos if table is not None else (0.0, 0.0)
                pos = (xy[0], xy[1], top + size[2] / 2)
            body = spec.worldbody.add_body(name="box", pos=list(map(float, pos)),
                                           quat=list(_quat_wxyz(rpy_matrix(box.rpy))))
            body.add_freejoint(name="box")
            body.explicitinertial = True
            body.mass = float(box.mass)
            body.ipos = [0.0, 0.0, 0.0]
            body.iquat = [1.0, 0.0, 0.0, 0.0]
            sx, sy, sz = size
            body.inertia = [box.mass / 12 * (sy ** 2 + sz ** 2), box.mass / 12 * (sx ** 2 + sz ** 2),
                            box.mass / 12 * (sx ** 2 + sy ** 2)]
            body.add_geom(name="box", type=mujoco.mjtGeom.mjGEOM_BOX, size=list(size / 2), mass=0.0,
                          contype=_BOX_BIT, conaffinity=all_arms | _TABLE_BIT, condim=int(box.condim),
                          friction=list(box.friction), solref=list(CONTACT_SOLREF), **box.extra)
        self.m = spec.compile()
        for ns, arm in self.arms.items():
            write_inertials(self.m, self._inertials[ns], prefix=arm.prefix)
        mujoco.mj_setConst(self.m, mujoco.MjData(self.m))
        self.d = mujoco.MjData(self.m)
        for arm in self.arms.values():
            arm._index(self.m)
        if box is not None:
            j = mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_JOINT, "box")
            self.box_qadr = self.m.jnt_qposadr[j] + np.arange(7)
            self.box_dadr = self.m.jnt_dofadr[j] + np.arange(6)
            self.box_body = mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_BODY, "box")
        self._box0 = None if box is None else self.m.qpos0[self.box_qadr].copy()
        self.reset()

    # ---- construction helpers ----
    @staticmethod
    def _capsules(child, urdf, radius, contype, conaffinity):
        """Coarse collision geometry on the child spec (before attaching): a capsule on every link
        from its origin to each child joint's origin longer than MIN_CAPSULE."""
        if not radius or radius <= 0:
            return
        for j in ET.fromstring(urdf).findall("joint"):
            o = j.find("origin")
            xyz = np.array([float(x) for x in o.get("xyz", "0 0 0").split()]) if o is not None else np.zeros(3)
            if np.linalg.norm(xyz) < MIN_CAPSULE:
                continue
            body = child.body(j.find("parent").get("link"))
            if body is None:
                continue
            body.add_geom(type=mujoco.mjtGeom.mjGEOM_CAPSULE, fromto=[0, 0, 0, *xyz], size=[radius, 0, 0],
                          mass=0.0, contype=contype, conaffinity=conaffinity, solref=list(CONTACT_SOLREF))

    # ---- access ----
    def arm(self, namespace):
        ns = namespace.strip("/")
        if ns not in self.arms:
            raise ValueError(f"no arm {namespace!r}; arms are {list(self.arms)}")
        return self.arms[ns]

    @property
    def t(self):
        return float(self.d.time)

    # ---- state ----
    def reset(self, q=None, box_pose=None):
        """All arms at rest at q[ns] (model order; arms not in `q` at their initial_positions), the
        box (if any) at rest at box_pose = (p, quat x y z w) or its initial pose; time zero."""
        q = q or {}
        unknown = set(q) - set(self.arms)
        if unknown:
            raise ValueError(f"reset: no arm {sorted(unknown)}")
        mujoco.mj_resetData(self.m, self.d)
        for ns, arm in self.arms.items():
            qa = np.asarray(q.get(ns, arm.q0), dtype=float)
            if qa.shape != (arm.n,):
                raise ValueError(f"reset: arm {ns!r} needs {arm.n} positions")
            self.d.qpos[arm.qadr] = qa
        if self.box is not None:
            if box_pose is None:
                self.d.qpos[self.box_qadr] = self._box0
            else:
                p, qx = box_pose
                self.d.qpos[self.box_qadr] = [*p, qx[3], qx[0], qx[1], qx[2]]
        self.d.ctrl[:] = 0.0
        mujoco.mj_forward(self.m, self.d)

    def set_command(self, namespace, tau):
        """Effort command of one arm (model order), held over the following steps."""
        arm = self.arm(namespace)
        tau = np.asarray(tau, dtype=float)
        if tau.shape != (arm.n,) or not np.all(np.isfinite(tau)):
            raise ValueError(f"set_command: arm {namespace!r} needs {arm.n} finite values, got {tau}")
        self.d.ctrl[arm.act] = tau

    def step(self, n=1, commands=None):
        """`commands` {ns: tau} (optional, as set_command), then n physics steps of all arms and the box;
        derived quantities (xpos, efforts, contacts) are at the new state."""
        for ns, tau in (commands or {}).items():
            self.set_command(ns, tau)
        for _ in range(int(n)):
            mujoco.mj_step(self.m, self.d)
        mujoco.mj_forward(self.m, self.d)

    # ---- box ----
    def box_pose(self):
        """(position [m], quaternion x y z w) of the box in the world."""
        if self.box is None:
            raise ValueError("CellWorld: no box")
        qp = self.d.qpos[self.box_qadr]
        return qp[:3].copy(), np.array([qp[4], qp[5], qp[6], qp[3]])

    def box_velocity(self):
        """[linear; angular] velocity of the box's centre, both in world axes [m/s, rad/s]."""
        if self.box is None:
            raise ValueError("CellWorld: no box")
        qv = self.d.qvel[self.box_dadr]
        R = self.d.xmat[self.box_body].reshape(3, 3)
        return np.concatenate([qv[:3], R @ qv[3:]])

    # ---- contacts ----
    def owner(self, body):
        """The namespace of the arm a body belongs to, "box", "table"/"world" or None."""
        if self.box is not None and body == self.box_body:
            return "box"
        if body == 0:
            return "table" if self.table is not None else "world"
        for ns, arm in self.arms.items():
            if body in arm.body_ids:
                return ns
        return None

    def contacts(self):
        """[(owner1, owner2, body name 1, body name 2, normal force [N])] of the active contacts."""
        m, d = self.m, self.d
        out, f = [], np.zeros(6)
        for i in range(d.ncon):
            c = d.contact[i]
            b1, b2 = m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2]
            mujoco.mj_contactForce(m, d, i, f)
            out.append((self.owner(b1), self.owner(b2), mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b1),
                        mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b2), float(f[0])))
        return out


def two_panda_cell(dt=0.001, integrator="RK4", box=True, table=True, separation=1.1, **arm_kw):
    """The shipped example: two Pandas (fingers locked) facing each other across a table with a
    0.3 m, 1 kg box on it (module docstring).  arm_kw: ArmSpec options for both arms."""
    from ..dynamics import Model
    half = separation / 2
    arms = [ArmSpec("left", Model.from_robot("panda"), pos=(-half, 0.0, 0.0), rpy=(0.0, 0.0, 0.0),
                    initial_positions=PANDA_READY, **arm_kw),
            ArmSpec("right", Model.from_robot("panda"), pos=(half, 0.0, 0.0), rpy=(0.0, 0.0, math.pi),
                    initial_positions=PANDA_READY, **arm_kw)]
    return CellWorld(arms, table=TableSpec() if table else None, box=BoxSpec() if box else None,
                     dt=dt, integrator=integrator)
