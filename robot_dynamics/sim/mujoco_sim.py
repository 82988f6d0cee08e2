"""MuJoCo simulator built from the same URDF text as the controller's Model (`model.urdf`).

    sim = MujocoSim(model, dt=0.001)
    sim.reset(q)
    sim.step(tau)                     # effort commands in model order, held for one dt (zero-order hold)
    q, v, t = sim.q, sim.v, sim.t

How the URDF is read (MuJoCo's own URDF importer, on an edited copy of the text):
- `<visual>` and `<collision>` are removed (meshes are not needed: dynamics only), and the compiler is
  told `discardvisual`, `inertiafromgeom="false"`, `balanceinertia="false"` and `fusestatic="false"`.
  Every `<inertial>` is compiled as a placeholder, then the URDF's exact mass, centre of mass and
  inertia are written into the compiled model (`mj_setConst` after): MuJoCo's compiler refuses the
  non-physical inertials both backends accept (massless moving bodies, triangle inequality, tensors
  not positive definite), so this is the only way the simulator integrates the same rigid bodies as
  the Model (see Model.__init__).  Every URDF link stays a MuJoCo body of the same
  name, so every model frame (link, or joint = its child link's frame) is a body origin, and an F/T
  sensor placed on a link measures exactly what is distal to it.
- `<dynamics damping friction>` is dropped (MuJoCo would turn it into passive damping and friction
  loss); joint damping and friction are set here from the `damping` / `friction` arguments (zero by
  default), and the rotor inertia from `armature` (zero by default).  `<mimic>` is dropped (MuJoCo
  would add an equality constraint; the Model reads a mimic joint as an independent joint).  Limits are kept as data (`jnt_range`); their
  constraints are active unless `limits=False`.  URDF effort limits clamp the applied joint effort
  unless `effort_limits=False`.
- End stops: the URDF position limits of every revolute / prismatic joint are hard limits (MuJoCo
  `limited` + `range`), as a real arm's mechanical stops and gz_ros2_control's joint limits are;
  continuous joints stay unlimited.  MuJoCo's default limit is soft (solref 20 ms, solimp 0.9-0.95: a
  Panda joint driven at its effort limit went 0.2-0.6 rad past its URDF value); here the limit is as
  stiff as MuJoCo integrates stably, solref (2 dt, 1) (critically damped, the time constant MuJoCo's
  own safety floor allows) and solimp (0.99, 0.999, 1 mm): a joint hitting its stop at its velocity
  limit goes less than 5 mrad past it (0.7 ms of travel), and pushed into it at its effort limit rests
  within 1 mrad of the URDF value (test_sim.py's end-stop test).
- Fixed base only.  The root link is a body welded to the world: its mass enters no joint-space
  quantity (MuJoCo's potential energy counts it, a constant offset from the model's).
- Gravity is the model's.  Joint order is mapped by name to `model.joint_names`.
- Optional: a 6-axis F/T sensor (`ft_sensor_frame`), payload bodies (`attach_payload`, recompiled with
  the state kept), a rigid table with a contact sphere on the tool (`table`).

Integration: RK4 by default (`integrator="RK4"`).  With no constraint active the dynamics are smooth and
RK4 at 1 ms is far more accurate than MuJoCo's default semi-implicit Euler: an unactuated Panda falling
for 1 s from its home pose (limits off, joint speeds up to ~10 rad/s) keeps its energy within 1.4e-5 J
with RK4, against 3.5 J with "euler" or "implicitfast" (measured).  Joint damping of a few N m s/rad is
well inside RK4's stability region at 1 ms.  "implicitfast" is available for stiff damping or
contact-heavy runs.
The command and any external wrench are held constant over the step (zero-order hold, like a 1 kHz
torque interface).

Spatial vectors are [linear; angular] (the project convention), world axes unless stated.
"""
import xml.etree.ElementTree as ET

import mujoco
import numpy as np

_INTEGRATORS = {"RK4": mujoco.mjtIntegrator.mjINT_RK4, "euler": mujoco.mjtIntegrator.mjINT_EULER,
                "implicit": mujoco.mjtIntegrator.mjINT_IMPLICIT,
                "implicitfast": mujoco.mjtIntegrator.mjINT_IMPLICITFAST}


# Joint end stops (module docstring): limit constraint time constant in physics steps (MuJoCo's floor:
# a smaller one is raised to 2 dt) and impedance (0.99 at the surface, 0.999 1 mm inside).
LIMIT_TIMECONST_STEPS = 2.0
LIMIT_SOLIMP = (0.99, 0.999, 0.001, 0.5, 2.0)


def _per_joint(x, n, what):
    a = np.full(n, x, dtype=float) if np.ndim(x) == 0 else np.asarray(x, dtype=float)
    if a.shape != (n,) or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{what}: expected a non-negative scalar or {n} non-negative values, got {x}")
    return a


def _inertia3(inertia):
    Ic = np.zeros((3, 3)) if inertia is None else np.asarray(inertia, dtype=float)
    if Ic.shape == (6,):
        ixx, ixy, ixz, iyy, iyz, izz = Ic
        Ic = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    if Ic.shape != (3, 3):
        raise ValueError("payload: inertia must be 3x3 or 6 numbers (ixx ixy ixz iyy iyz izz)")
    return Ic


def link_inertials(urdf):
    """{link: (mass, centre of mass, rotational inertia about it)} with both vectors in the link frame,
    read from the URDF text exactly as written (links without <inertial> are massless)."""
    from ..dynamics.reference import spatial
    out = {}
    for link in ET.fromstring(urdf).findall("link"):
        inert = link.find("inertial")
        m, c, Ic = 0.0, np.zeros(3), np.zeros((3, 3))
        if inert is not None:
            o, me, ie = inert.find("origin"), inert.find("mass"), inert.find("inertia")
            num = lambda e, k: float(e.get(k, 0.0) or 0.0) if e is not None else 0.0  # noqa: E731
            m = num(me, "value")
            R = np.eye(3)
            if o is not None:
                c = np.array([float(x) for x in o.get("xyz", "0 0 0").split()])
                R = spatial.rpy_to_matrix(np.array([float(x) for x in o.get("rpy", "0 0 0").split()]))
            v = {k: num(ie, k) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
            Ic = R @ np.array([[v["ixx"], v["ixy"], v["ixz"]], [v["ixy"], v["iyy"], v["iyz"]],
                               [v["ixz"], v["iyz"], v["izz"]]]) @ R.T
        out[link.get("name")] = (m, c, Ic)
    return out


def _principal(Ic):
    """(quaternion w x y z, principal moments) of a symmetric 3x3 inertia, as MuJoCo stores a body's."""
    w, V = np.linalg.eigh(Ic)
    if np.linalg.det(V) < 0:
        V[:, 0] = -V[:, 0]
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, V.flatten())
    return quat, w


def mujoco_urdf(urdf):
    """The URDF text as fed to MuJoCo: geometry, <dynamics>, <mimic> removed, compiler options set,
    every <inertial> replaced by a placeholder that MuJoCo's compiler accepts (the exact ones are
    written into the compiled model afterwards: see MujocoSim).
    Returns (text, {frame name: link name}) where joint frames map to their child link."""
    root = ET.fromstring(urdf)
    for link in root.findall("link"):
        for tag in ("visual", "collision", "inertial"):
            for e in link.findall(tag):
                link.remove(e)
        # off the link frame, so that MuJoCo compiles no body as "simple" / "same frame" (flags that
        # the exact inertial would contradict)
        inert = ET.SubElement(link, "inertial")
        ET.SubElement(inert, "origin", xyz="0.1 0.2 0.3", rpy="0.1 0.2 0.3")
        ET.SubElement(inert, "mass", value="1")
        ET.SubElement(inert, "inertia", ixx="1", iyy="1.5", izz="2", ixy="0", ixz="0", iyz="0")
    frame_link = {link.get("name"): link.get("name") for link in root.findall("link")}
    for j in root.findall("joint"):
        for tag in ("dynamics", "mimic", "safety_controller", "calibration"):
            for e in j.findall(tag):
                j.remove(e)
        frame_link[j.get("name")] = j.find("child").get("link")
        lim = j.find("limit")
        if lim is not None and lim.get("lower") is not None and lim.get("lower") == lim.get("upper"):
            del lim.attrib["lower"], lim.attrib["upper"]   # a zero-width range: no limit (MuJoCo would
            #                                                say so in MUJOCO_LOG.TXT, then ignore it)
    for e in root.findall("mujoco"):
        root.remove(e)
    mj = ET.SubElement(root, "mujoco")
    ET.SubElement(mj, "compiler", fusestatic="false", discardvisual="true", balanceinertia="false",
                  inertiafromgeom="false", angle="radian", strippath="true")
    return ET.tostring(root, encoding="unicode"), frame_link


def configure_joints(spec, joint_names, dt, damping, friction, armature, limits=True,
                     effort_limits=True, prefix=""):
    """Set up the joints `prefix + name` of a spec compiled from `mujoco_urdf` text as MujocoSim
    simulates them (module docstring): damping / friction loss / armature per joint (arrays in
    `joint_names` order), no spring, end stops (hard, or none with limits=False), effort clamp, and
    one motor actuator per joint named `prefix + "motor:" + name` (gear 1, control unlimited)."""
    for i, name in enumerate(joint_names):
        j = spec.joint(prefix + name)
        if j is None:
            raise ValueError(f"MujocoSim: joint {name!r} not in MuJoCo's model of the URDF")
        j.damping = [damping[i], 0.0, 0.0]     # linear coefficient (the others: polynomial terms)
        j.frictionloss = friction[i]
        j.armature = armature[i]           # rotor inertia behind the gear [kg m^2]
        j.stiffness = [0.0, 0.0, 0.0]
        if not limits:
            j.limited = mujoco.mjtLimited.mjLIMITED_FALSE
        else:                              # a hard end stop (module docstring)
            j.solref_limit = [LIMIT_TIMECONST_STEPS * dt, 1.0]
            j.solimp_limit = list(LIMIT_SOLIMP)
        if not effort_limits:
            j.actfrclimited = mujoco.mjtLimited.mjLIMITED_FALSE
        a = spec.add_actuator(name=f"{prefix}motor:{name}", target=prefix + name,
                              trntype=mujoco.mjtTrn.mjTRN_JOINT)
        a.set_to_motor()
        a.gear[0] = 1.0
        a.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE


def write_inertials(m, inertials, prefix=""):
    """Write {link: (mass, com, inertia)} (link_inertials) into the compiled model's bodies
    `prefix + link`, as given (see MujocoSim._exact_inertials); links without a body are skipped.
    The caller runs mj_setConst after."""
    for link, (mass, com, Ic) in inertials.items():
        b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, prefix + link)
        if b < 0:
            continue
        quat, w = _principal(Ic)
        m.body_mass[b] = mass
        m.body_ipos[b] = com
        m.body_iquat[b] = quat
        m.body_inertia[b] = w


class MujocoSim:
    """Fixed-base arm simulated by MuJoCo from `model.urdf`; all vectors in `model.joint_names` order.

    dt: step [s].  damping [N m s/rad], friction [N m] (MuJoCo friction loss), armature [kg m^2] (rotor
      inertia, added to M's diagonal): scalar or one per joint.
    ft_sensor_frame: frame (link or joint name) carrying a 6-axis F/T sensor, read with `ft_wrench()`.
    table: False, True (top surface at z = 0.1 m) or the top height [m]; adds a rigid box and a 1 cm
      contact sphere at `contact_frame` (default 'panda_hand_tcp' if it exists, else the last link).
    payload: None or dict(frame=, mass=, com=, inertia=) (or a tuple in that order) attached at start.
    limits: the URDF position limits as hard end stops (their ranges are always kept as data).
    effort_limits: clamp the applied effort at the URDF effort limits.
    """

    def __init__(self, model, dt=0.001, damping=0.0, friction=0.0, ft_sensor_frame=None, table=False,
                 payload=None, limits=True, effort_limits=True, integrator="RK4", contact_frame=None,
                 armature=0.0):
        if model.floating_base:
            raise ValueError("MujocoSim: fixed-base models only")
        if integrator not in _INTEGRATORS:
            raise ValueError(f"integrator must be one of {sorted(_INTEGRATORS)}")
        self.model = model
        self.joint_names = list(model.joint_names)
        n = self.n = len(self.joint_names)
        self.dt = float(dt)
        text, self._frame_link = mujoco_urdf(model.urdf)
        spec = self.spec = mujoco.MjSpec.from_string(text)
        spec.option.timestep = self.dt
        spec.option.integrator = _INTEGRATORS[integrator]
        spec.option.gravity = np.asarray(model.gravity, dtype=float)
        damping = _per_joint(damping, n, "damping")
        friction = _per_joint(friction, n, "friction")
        armature = _per_joint(armature, n, "armature")
        configure_joints(spec, self.joint_names, self.dt, damping, friction, armature, limits,
                         effort_limits)
        self.ft_sensor_frame = ft_sensor_frame
        if ft_sensor_frame is not None:
            body = spec.body(self._link(ft_sensor_frame))
            body.add_site(name="ft_site", pos=[0, 0, 0], quat=[1, 0, 0, 0])
            spec.add_sensor(name="ft_force", type=mujoco.mjtSensor.mjSENS_FORCE,
                            objtype=mujoco.mjtObj.mjOBJ_SITE, objname="ft_site")
            spec.add_sensor(name="ft_torque", type=mujoco.mjtSensor.mjSENS_TORQUE,
                            objtype=mujoco.mjtObj.mjOBJ_SITE, objname="ft_site")
        if table is not False and table is not None:
            top = 0.1 if table is True else float(table)
            if contact_frame is None:
                contact_frame = "panda_hand_tcp" if "panda_hand_tcp" in self._frame_link else \
                    list(self._frame_link)[-1]
            spec.body(self._link(contact_frame)).add_geom(
                name="contact_sphere", type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[0.01, 0, 0],
                mass=0.0, contype=1, conaffinity=1, solref=[0.004, 1.0])
            spec.worldbody.add_geom(name="table", type=mujoco.mjtGeom.mjGEOM_BOX,
                                    size=[1.0, 1.0, 0.05], pos=[0, 0, top - 0.05],
                                    contype=1, conaffinity=1, solref=[0.004, 1.0])
        self.table = table
        self.payloads = {}
        self._inertials = link_inertials(model.urdf)
        self.m = spec.compile()
        self._exact_inertials()
        self.d = mujoco.MjData(self.m)
        self._index()
        self._wrench = {}
        self._dinv = mujoco.MjData(self.m)
        if payload is not None:
            if isinstance(payload, dict):
                self.attach_payload(**payload)
            else:
                self.attach_payload(*payload)
        self.reset(np.clip(np.zeros(n), model.lower_limits, model.upper_limits))

    # ---- indexing ----
    def _link(self, frame):
        if frame not in self._frame_link:
            raise ValueError(f"unknown frame {frame!r}; frames are {sorted(self._frame_link)}")
        return self._frame_link[frame]

    def _index(self):
        m = self.m
        jid = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, nm) for nm in self.joint_names]
        self._qadr = np.array([m.jnt_qposadr[j] for j in jid])
        self._dadr = np.array([m.jnt_dofadr[j] for j in jid])
        self._act = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, f"motor:{nm}")
                              for nm in self.joint_names])
        if self.ft_sensor_frame is not None:
            sf = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, "ft_force")
            st = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, "ft_torque")
            self._ft_adr = (m.sensor_adr[sf], m.sensor_adr[st])

    def body_id(self, frame):
        return mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_BODY, self._link(frame))

    # ---- state ----
    def reset(self, q, v=None):
        q = np.asarray(q, dtype=float)
        v = np.zeros(self.n) if v is None else np.asarray(v, dtype=float)
        if q.shape != (self.n,) or v.shape != (self.n,):
            raise ValueError(f"reset: q and v must have {self.n} values")
        mujoco.mj_resetData(self.m, self.d)
        self.d.qpos[self._qadr] = q
        self.d.qvel[self._dadr] = v
        mujoco.mj_forward(self.m, self.d)

    @property
    def q(self):
        return self.d.qpos[self._qadr].copy()

    @property
    def v(self):
        return self.d.qvel[self._dadr].copy()

    @property
    def t(self):
        return float(self.d.time)

    @property
    def measured_effort(self):
        """Joint effort the motors applied during the last step (after effort-limit clamping)."""
        return self.d.qfrc_actuator[self._dadr].copy()

    def braking_torque(self, time_constant):
        """The effort that brings the arm to rest as a driver's stop does: tau = bias(q, v) - M(q) v / T
        (MuJoCo's own gravity and Coriolis terms compensated, every joint speed decaying as exp(-t / T)
        with the motion decoupled by M).  Passive: with it, dKE/dt = -v' M v / T <= 0 (before the
        effort limits clip it).  Model order."""
        m, d = self.m, self.d
        mv = np.zeros(m.nv)
        mujoco.mj_mulM(m, d, mv, d.qvel)
        return (d.qfrc_bias - mv / float(time_constant))[self._dadr]

    def step(self, tau, n=1):
        """Apply `tau` (model order, N m | N) for `n` steps of dt."""
        tau = np.asarray(tau, dtype=float)
        if tau.shape != (self.n,) or not np.all(np.isfinite(tau)):
            raise ValueError(f"step: tau must be {self.n} finite values, got {tau}")
        self.d.ctrl[self._act] = tau
        for _ in range(int(n)):
            self._apply_wrenches()
            mujoco.mj_step(self.m, self.d)
        mujoco.mj_forward(self.m, self.d)   # derived quantities (sensors, xpos, efforts) at the new state

    def track(self, backend, Qr, Vr, Ar, kp=400.0, kd=40.0):
        """Follow a sampled joint trajectory (one row per step of dt, from the present state) with
        computed torque on `backend`'s model: tau = RNEA(q, v, a_r + kp (q_r - q) + kd (v_r - v)).
        Returns (t, q, tau) with the effort applied during each step paired with the state at the
        middle of that step ((q_k + q_k+1) / 2, t_k + dt / 2): the effort is held over the step, so
        that is the instant it acts at (paired with q_k instead, the data carry a half-step lag that
        an identification reads as viscous friction and rotor inertia, 10-15 % of them on the Panda's
        shoulder)."""
        N = len(Qr)
        q_log, tau_log = np.empty((N + 1, self.n)), np.empty((N, self.n))
        t0 = self.t
        for k in range(N):
            q, v = self.q, self.v
            q_log[k] = q
            self.step(backend.rnea(q, v, Ar[k] + kp * (Qr[k] - q) + kd * (Vr[k] - v)))
            tau_log[k] = self.measured_effort
        q_log[N] = self.q
        return t0 + (np.arange(N) + 0.5) * self.dt, 0.5 * (q_log[:-1] + q_log[1:]), tau_log

    # ---- external wrenches ----
    def apply_wrench(self, frame, wrench):
        """Hold an external wrench [f; n] (N, N m; world axes, torque about the frame origin) applied
        to the body carrying `frame` until `clear_wrench`.  Replaces a wrench on the same frame."""
        w = np.asarray(wrench, dtype=float)
        if w.shape != (6,) or not np.all(np.isfinite(w)):
            raise ValueError("apply_wrench: wrench must be 6 finite numbers [f; n]")
        self._wrench[frame] = (self.body_id(frame), w.copy())
        self._apply_wrenches()
        mujoco.mj_forward(self.m, self.d)

    def clear_wrench(self, frame=None):
        if frame is None:
            self._wrench.clear()
        else:
            self._wrench.pop(frame, None)
        self._apply_wrenches()
        mujoco.mj_forward(self.m, self.d)

    def _apply_wrenches(self):
        """MuJoCo applies xfrc_applied at the body's centre of mass: move the torque there."""
        d = self.d
        d.xfrc_applied[:] = 0.0
        for b, w in self._wrench.values():
            f, n = w[:3], w[3:]
            r = d.xpos[b] - d.xipos[b]         # frame origin relative to the COM
            d.xfrc_applied[b, :3] += f
            d.xfrc_applied[b, 3:] += n + np.cross(r, f)

    # ---- F/T sensor ----
    def ft_wrench(self):
        """Wrench [f; n] measured by the F/T sensor at `ft_sensor_frame`, in the sensor frame, torque
        about the sensor origin.  Convention (as a flange F/T sensor reports it, and as
        force_torque_sensor_broadcaster republishes it): the wrench the distal side (tool, payload,
        and whatever the environment does to them) exerts on the sensor.  A static tool of mass m
        reads f = m g (pointing down in the world); an external wrench w applied to a massless tool
        reads +w (moved to the sensor origin).  MuJoCo's force/torque sensors report the opposite
        (the parent acting on the child body), hence the sign change."""
        if self.ft_sensor_frame is None:
            raise ValueError("ft_wrench: the simulator was built without ft_sensor_frame")
        a, b = self._ft_adr
        return -np.concatenate([self.d.sensordata[a:a + 3], self.d.sensordata[b:b + 3]])

    def frame_pose(self, frame):
        """(R, p) of a frame in the world, from MuJoCo's kinematics."""
        b = self.body_id(frame)
        return self.d.xmat[b].reshape(3, 3).copy(), self.d.xpos[b].copy()

    # ---- payload ----
    def attach_payload(self, frame, mass, com=(0.0, 0.0, 0.0), inertia=None, name="payload"):
        """Rigid payload on `frame`: mass [kg], centre of mass and rotational inertia about it in the
        frame's axes (3x3 or ixx ixy ixz iyy iyz izz), as Model.attach_payload.  Replaces a payload of
        the same name; the state (q, v, t) is kept."""
        com = np.asarray(com, dtype=float)
        Ic = _inertia3(inertia)
        if not (mass >= 0) or com.shape != (3,):
            raise ValueError("payload: mass must be >= 0 and com 3 numbers")
        link = self._link(frame)
        bname = f"payload:{name}"
        old = self.spec.body(bname)
        if old is not None:
            self.spec.delete(old)
        body = self.spec.body(link).add_body(name=bname, pos=[0, 0, 0], quat=[1, 0, 0, 0])
        body.explicitinertial = True
        body.mass = float(mass)
        body.ipos = com
        w, V = np.linalg.eigh(Ic)                  # principal axes (MuJoCo's fullinertia rejects
        if np.linalg.det(V) < 0:                   # a point mass)
            V[:, 0] = -V[:, 0]
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, V.flatten())
        body.iquat = quat
        body.inertia = np.maximum(w, 0.0)
        self.payloads[name] = (frame, float(mass), com, Ic)
        self._recompile()

    def detach_payload(self, name="payload"):
        if name not in self.payloads:
            raise ValueError(f"no payload named {name!r}")
        self.spec.delete(self.spec.body(f"payload:{name}"))
        del self.payloads[name]
        self._recompile()

    def _exact_inertials(self):
        """Write the URDF's mass, centre of mass and inertia of every link into the compiled model, as
        given (MuJoCo's compiler would refuse a massless moving body, principal moments violating the
        triangle inequality or a non positive-definite tensor, all of which both backends accept),
        then recompute the constants that depend on them."""
        m = self.m
        write_inertials(m, self._inertials)
        mujoco.mj_setConst(m, mujoco.MjData(m))

    def _recompile(self):
        self.m, self.d = self.spec.recompile(self.m, self.d)
        self._exact_inertials()
        self._dinv = mujoco.MjData(self.m)
        self._index()
        self._wrench = {f: (self.body_id(f), w) for f, (_, w) in self._wrench.items()}
        self._apply_wrenches()
        mujoco.mj_forward(self.m, self.d)

    # ---- validation helpers (separate MjData, passive and constraint terms off) ----
    def _off(self):
        m = self.m
        saved = m.opt.disableflags
        off = mujoco.mjtDisableBit
        m.opt.disableflags = saved | off.mjDSBL_SPRING | off.mjDSBL_DAMPER | off.mjDSBL_CONSTRAINT
        return saved

    def _load(self, q, v=None):
        dd = self._dinv
        mujoco.mj_resetData(self.m, dd)
        dd.qpos[self._qadr] = np.asarray(q, dtype=float)
        if v is not None:
            dd.qvel[self._dadr] = np.asarray(v, dtype=float)
        return dd

    def inverse_dynamics(self, q, v, a):
        """mj_inverse: tau = M(q) a + bias(q, v), passive forces and constraints off (model order)."""
        saved = self._off()
        try:
            dd = self._load(q, v)
            dd.qacc[self._dadr] = np.asarray(a, dtype=float)
            mujoco.mj_inverse(self.m, dd)
            return dd.qfrc_inverse[self._dadr].copy()
        finally:
            self.m.opt.disableflags = saved

    def mass_matrix(self, q):
        """Joint-space inertia matrix from mj_fullM (model order)."""
        dd = self._load(q)
        mujoco.mj_fwdPosition(self.m, dd)
        M = np.zeros((self.m.nv, self.m.nv))
        mujoco.mj_fullM(self.m, dd, M)
        return M[np.ix_(self._dadr, self._dadr)]

    def energy(self):
        """(kinetic, potential) [J] from MuJoCo (enables mjENBL_ENERGY on first use); the potential is
        -sum m g.c, as the model's."""
        self.m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
        mujoco.mj_forward(self.m, self.d)
        return float(self.d.energy[1]), float(self.d.energy[0])
