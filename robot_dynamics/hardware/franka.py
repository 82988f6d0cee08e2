"""A Franka arm (Panda or FR3) through franky (libfranka's protocol), without ROS.

The protocol's 1 kHz loop built on these parts is hardware/franka_loop.py, the topic mode's command gate
hardware/franka_commands.py, the ROS front end nodes/franka_bridge.py; everything here is plain
Python / numpy / franky:

- `prepare_urdf`: the URDF the robot reports, with the seven joints renamed to the names the user's
  stack expects (fr3_joint1.., panda_joint1..) and the end effector the robot knows about (mass,
  centre of mass and inertia from the robot state, set in Desk) added as a fixed link on the flange,
  plus its TCP frame: a model built from it is the arm the robot's own model describes.
- `cross_check`: our Pinocchio model against the robot's (`robot.model`: gravity, mass matrix,
  Coriolis) on the current and nearby configurations; a wrong URDF or a forgotten payload fails it.
- `FrankaArm`: connect, start / stop the torque motion (franky's `SimpleTorqueMotion`), the per-cycle
  callback in libfranka's control thread, error polling and recovery.

Times are robot time (the state's `time`, 1 ms resolution) inside the control callback and
`time.monotonic()` elsewhere; vectors are in the robot's joint order (joint1..joint7).
Reads: the robot's URDF, state and model (franky).  Writes: the torque motion (`FrankaArm`), a URDF.
Guarantees: nothing raised in the control callback reaches libfranka's thread (kept in
`callback_error`, reported by `poll()`); every motion starts from zero torque.
"""
import math
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import numpy as np

N = 7
FR3_JOINTS = tuple(f"fr3_joint{i}" for i in range(1, 8))
PANDA_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))
GRAVITY_EARTH = (0.0, 0.0, -9.81)      # franky-sim leaves the state's O_ddP_O at zero: pass it


# ------------------------------------------------------------------------------------------------
# URDF
# ------------------------------------------------------------------------------------------------
def _movable(root):
    return [j for j in root.findall("joint") if j.get("type") in ("revolute", "continuous", "prismatic")]


def flange_link(urdf_root):
    """The flange: a link named ...link8, else the child of the last movable joint."""
    for link in urdf_root.findall("link"):
        if link.get("name", "").endswith("link8"):
            return link.get("name")
    mov = _movable(urdf_root)
    if not mov:
        raise ValueError("URDF has no movable joint")
    return mov[-1].find("child").get("link")


def _fmt(v):
    return " ".join(f"{float(x):.9g}" for x in v)


def _rpy(R):
    """Roll, pitch, yaw of a rotation matrix (URDF convention R = Rz(y) Ry(p) Rx(r))."""
    p = math.asin(max(-1.0, min(1.0, -R[2, 0])))
    if abs(math.cos(p)) > 1e-9:
        r, y = math.atan2(R[2, 1], R[2, 2]), math.atan2(R[1, 0], R[0, 0])
    else:
        r, y = math.atan2(-R[1, 2], R[1, 1]), 0.0
    return r, p, y


def prepare_urdf(urdf, joints=None, ee=None, tcp=None, prefix=""):
    """The robot's URDF for our stack.  `joints`: 7 names for the movable joints in URDF order
    (None: keep).  `ee`: (mass, com[3], inertia 3x3 about the com) of the end effector in flange axes,
    added as link `<prefix>ee` fixed to the flange (None or mass 0: nothing added).  `tcp`: 4x4
    flange -> TCP transform, added as link `<prefix>tcp`.  Returns (urdf text, flange link name)."""
    root = ET.fromstring(urdf)
    mov = _movable(root)
    if joints is not None:
        joints = list(joints)
        if len(joints) != len(mov):
            raise ValueError(f"joints: {len(joints)} names for {len(mov)} movable joints in the URDF "
                             f"({[j.get('name') for j in mov]})")
        rename = {j.get("name"): new for j, new in zip(mov, joints)}
        for el in root.iter():
            if el.tag == "joint" and el.get("name") in rename:
                el.set("name", rename[el.get("name")])
            if el.tag == "mimic" and el.get("joint") in rename:
                el.set("joint", rename[el.get("joint")])
    flange = flange_link(root)
    existing = {link.get("name") for link in root.findall("link")}

    def add_fixed(name, xyz=(0, 0, 0), rpy=(0, 0, 0), inertial=None):
        if name in existing:
            raise ValueError(f"URDF already has a link {name!r}")
        link = ET.SubElement(root, "link", name=name)
        if inertial is not None:
            m, c, Ic = inertial
            it = ET.SubElement(link, "inertial")
            ET.SubElement(it, "origin", xyz=_fmt(c), rpy="0 0 0")
            ET.SubElement(it, "mass", value=f"{float(m):.9g}")
            ET.SubElement(it, "inertia", ixx=f"{Ic[0, 0]:.9g}", ixy=f"{Ic[0, 1]:.9g}", ixz=f"{Ic[0, 2]:.9g}",
                          iyy=f"{Ic[1, 1]:.9g}", iyz=f"{Ic[1, 2]:.9g}", izz=f"{Ic[2, 2]:.9g}")
        j = ET.SubElement(root, "joint", name=f"{name}_joint", type="fixed")
        ET.SubElement(j, "origin", xyz=_fmt(xyz), rpy=_fmt(rpy))
        ET.SubElement(j, "parent", link=flange)
        ET.SubElement(j, "child", link=name)

    if ee is not None and ee[0] > 0.0:
        add_fixed(f"{prefix}ee", inertial=(ee[0], np.asarray(ee[1], float), np.asarray(ee[2], float)))
    if tcp is not None:
        T = np.asarray(tcp, float)
        add_fixed(f"{prefix}tcp", xyz=T[:3, 3], rpy=_rpy(T[:3, :3]))
    return ET.tostring(root, encoding="unicode"), flange


def payload(mass, com, inertia):
    """The payload libfranka's setLoad takes, checked: (mass [kg], F_x_Cload [m] (3), I_load [kg m^2]
    about the centre of mass, 9 values column-major) from a mass, a centre of mass in the flange frame
    and 9 inertia values or 3 principal moments.  ValueError with the reason for anything libfranka
    would take but no body has (negative or non-finite mass, an inertia not symmetric positive
    semi-definite)."""
    m = float(mass)
    c = np.asarray(com, float).reshape(-1)
    i = np.asarray(inertia, float).reshape(-1)
    if not math.isfinite(m) or m < 0.0:
        raise ValueError(f"load_mass must be a finite mass >= 0 kg, got {mass!r}")
    if c.shape != (3,) or not np.all(np.isfinite(c)):
        raise ValueError(f"load_com must be 3 finite numbers [m] (flange frame), got {list(com)!r}")
    if i.shape == (3,):
        i = np.diag(i).reshape(-1)
    if i.shape != (9,) or not np.all(np.isfinite(i)):
        raise ValueError(f"load_inertia must be 9 finite numbers (column-major) or 3 principal moments "
                         f"[kg m^2], got {list(inertia)!r}")
    I = i.reshape(3, 3, order="F")
    if not np.allclose(I, I.T, atol=1e-12) or np.min(np.linalg.eigvalsh(0.5 * (I + I.T))) < -1e-12:
        raise ValueError(f"load_inertia is not symmetric positive semi-definite: {I.tolist()}")
    return m, c, i


def scale_link_mass(urdf, link, factor):
    """A copy of the URDF with one link's mass (and inertia) scaled: a deliberately wrong model."""
    root = ET.fromstring(urdf)
    for el in root.findall("link"):
        if el.get("name") == link:
            inertial = el.find("inertial")
            m = inertial.find("mass")
            m.set("value", repr(float(m.get("value")) * factor))
            ine = inertial.find("inertia")
            for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
                ine.set(k, repr(float(ine.get(k)) * factor))
            return ET.tostring(root, encoding="unicode")
    raise ValueError(f"no link {link!r} in the URDF")


# ------------------------------------------------------------------------------------------------
# robot state helpers
# ------------------------------------------------------------------------------------------------
def affine_matrix(a):
    """franky.Affine (or a 16-list, column-major, or a 4x4) -> 4x4 numpy."""
    if hasattr(a, "matrix"):
        return np.asarray(a.matrix, float)
    a = np.asarray(a, float)
    return a.reshape(4, 4, order="F") if a.size == 16 else a


def end_effector(state):
    """(mass, com, inertia about com) of the end effector + load the robot state reports."""
    return float(state.m_total), np.asarray(state.F_x_Ctotal, float), np.asarray(state.I_total, float).reshape(3, 3)


# ------------------------------------------------------------------------------------------------
# model cross-check
# ------------------------------------------------------------------------------------------------
@dataclass
class CrossCheckTolerance:
    gravity: float = 0.3        # [N m] max |g_ours - g_robot|: a 300 g load 10 cm off the axis
    mass: float = 0.03          # [kg m^2] max |M_ours - M_robot| element
    coriolis: float = 0.1       # [N m] max |C_ours v - c_robot| at the test speed


@dataclass
class CrossCheckResult:
    gravity: float = math.nan
    mass: float = math.nan
    coriolis: float = math.nan
    n_configs: int = 0
    worst_q: np.ndarray = None
    tolerance: CrossCheckTolerance = field(default_factory=CrossCheckTolerance)

    @property
    def ok(self):
        t = self.tolerance
        return bool(self.gravity <= t.gravity and self.mass <= t.mass and self.coriolis <= t.coriolis)

    def message(self):
        t = self.tolerance
        return (f"model cross-check vs robot.model on {self.n_configs} configurations: "
                f"gravity {self.gravity:.3g} N m (tol {t.gravity}), mass matrix {self.mass:.3g} kg m^2 "
                f"(tol {t.mass}), Coriolis {self.coriolis:.3g} N m (tol {t.coriolis}): "
                + ("OK" if self.ok else "REFUSED (wrong URDF or payload?)"))


def nearby_configurations(q0, lower, upper, n=6, spread=0.3, seed=0):
    """q0 and n configurations within +-spread rad of it (fixed seed), clipped into the limits."""
    rng = np.random.default_rng(seed)
    qs = [np.asarray(q0, float)]
    for _ in range(n):
        qs.append(np.clip(q0 + rng.uniform(-spread, spread, len(q0)), lower + 0.05, upper - 0.05))
    return qs


def cross_check(backend, robot_model, q0, ee, index=None, tol=None, n=6, spread=0.3, speed=0.5):
    """Compare `backend` (our model, a dynamics backend on a 7-joint Model) with franky's
    `robot_model` at q0 and `n` nearby configurations.  `ee` = end_effector(state) (the load the robot
    adds to its model); `index[i]` = our model's index of robot joint i (None: same order).
    Returns a CrossCheckResult (max abs differences)."""
    m_total, F_x, I_total = ee
    model = backend.model
    idx = np.arange(N) if index is None else np.asarray(index)
    lo = np.asarray(model.lower_limits)[idx]
    hi = np.asarray(model.upper_limits)[idx]
    res = CrossCheckResult(gravity=0.0, mass=0.0, coriolis=0.0, tolerance=tol or CrossCheckTolerance())
    rng = np.random.default_rng(1)
    worst = -1.0
    for q in nearby_configurations(np.asarray(q0, float), lo, hi, n, spread):
        v = speed * rng.choice([-1.0, 1.0], N)
        qm = np.empty(N)
        qm[idx] = q
        vm = np.empty(N)
        vm[idx] = v
        g_ours = backend.gravity(qm)[idx]
        M_ours = backend.mass_matrix(qm)[np.ix_(idx, idx)]
        c_ours = (backend.coriolis_matrix(qm, vm) @ vm)[idx]
        g_rob = np.asarray(robot_model.gravity(q, m_total, F_x, GRAVITY_EARTH))
        M_rob = np.asarray(robot_model.mass(q, I_total, m_total, F_x))
        c_rob = np.asarray(robot_model.coriolis(q, v, I_total, m_total, F_x))
        eg = float(np.max(np.abs(g_ours - g_rob)))
        res.gravity = max(res.gravity, eg)
        res.mass = max(res.mass, float(np.max(np.abs(M_ours - M_rob))))
        res.coriolis = max(res.coriolis, float(np.max(np.abs(c_ours - c_rob))))
        if eg > worst:
            worst, res.worst_q = eg, q
        res.n_configs += 1
    return res


# ------------------------------------------------------------------------------------------------
# start-up errors that say what to change
# ------------------------------------------------------------------------------------------------
def realtime_kernel():
    """(True, '') when this kernel is real-time as libfranka tests it (/sys/kernel/realtime is 1, a
    PREEMPT_RT kernel), else (False, what was found).  libfranka's RealtimeConfig.Enforce refuses a
    connection on such a kernel ("Running kernel does not have realtime capabilities"), after the
    network connection has been made."""
    import platform
    try:
        with open("/sys/kernel/realtime") as f:
            if f.read().strip() == "1":
                return True, ""
    except OSError:
        pass
    version = platform.uname().version
    if "PREEMPT_RT" in version:
        return True, ""
    return False, f"no /sys/kernel/realtime, kernel version {version!r} without PREEMPT_RT"


REALTIME_HINT = ("this host cannot run libfranka's real-time control loop; on franky-sim or a test "
                 "bench start with realtime:=false (parameter realtime: false); on a real robot use a "
                 "PREEMPT_RT kernel and give the user real-time rights (rtprio 99 in "
                 "/etc/security/limits.conf, or run as root)")


def connect_error_hint(error, ip, realtime=True):
    """What a libfranka connection error means for the user, and what to change: (retry, message).
    `error`: the exception (or its text) from franky.Robot(ip) or from starting a motion;
    `retry`: False when trying again cannot help (the kernel or the rights, a host name that does not
    resolve).  The message names the address and how to check it; libfranka's own text is kept at its end."""
    text = str(error)
    low = text.lower()
    own = f"(libfranka: {text.removeprefix('libfranka: ')})"
    if "realtime" in low or "real-time" in low:
        how = "realtime: true (the default)" if realtime else "realtime"
        return False, f"{how}: {REALTIME_HINT} {own}"
    if "host not found" in low or "name or service not known" in low:
        return False, (f"robot_ip {ip!r} is not an address nor a host name that resolves: set robot_ip to "
                       f"the robot's FCI address (e.g. 172.16.0.2), or franky-sim's (the one it printed) {own}")
    if "refused" in low:
        return True, (f"nothing accepts libfranka's connection at robot_ip {ip} (TCP port 1337 refused): "
                      f"check robot_ip (the robot's FCI address, the one Desk is reached at; franky-sim: the "
                      f"address it printed, 'Connect to the server using ...'), that the robot is on with FCI "
                      f"activated in Desk, and `ping {ip}` {own}")
    if "timeout" in low or "interrupted" in low or "unreachable" in low or "no route" in low:
        return True, (f"no answer from robot_ip {ip}: check robot_ip, the cable and this host's address on "
                      f"the robot's network (`ping {ip}`; the robot's FCI network is usually 172.16.0.0/24) {own}")
    if "version" in low and "mismatch" in low:
        return False, (f"the robot at {ip} runs a system version this libfranka does not speak: match the "
                       f"franky / libfranka version to the robot's system version {own}")
    return True, f"cannot connect to robot_ip {ip}: {text}"


# ------------------------------------------------------------------------------------------------
# the arm
# ------------------------------------------------------------------------------------------------
class FrankaArm:
    """A franky Robot with one SimpleTorqueMotion at a time.

    `on_cycle(state, t)` is called in libfranka's control thread every robot cycle (t = robot time
    [s]); it returns a torque to set (applied in the next cycle) or None.  set_torque is also safe to
    call from other threads (`set_torque`).  franky's own watchdog (`signal_timeout`) ends the
    motion when no torque is set for that long: the bridge's control callback sets one every cycle
    while it has no fresh command, so that only fires when the bridge's process itself stalls.
    """

    def __init__(self, ip, realtime=False, signal_timeout=0.05, max_delta_tau=1.0, on_cycle=None):
        import franky
        self.franky = franky
        self.ip = ip
        self.realtime = realtime
        self.signal_timeout = signal_timeout
        self.max_delta_tau = max_delta_tau
        self.on_cycle = on_cycle
        self.robot = None
        self.motion = None
        self.n_cycles = 0
        self.n_lost = 0               # robot cycles missing between two callbacks (time gaps)
        self.last_t = None
        self.callback_error = None

    def connect(self):
        rc = self.franky.RealtimeConfig.Enforce if self.realtime else self.franky.RealtimeConfig.Ignore
        self.robot = self.franky.Robot(self.ip, realtime_config=rc)
        return self.robot

    @property
    def state(self):
        return self.robot.state

    def start(self):
        """Start a torque motion from zero torque (asynchronous)."""
        m = self.franky.SimpleTorqueMotion(np.zeros(N), signal_timeout=self.signal_timeout,
                                           max_delta_tau=self.max_delta_tau)
        # the callback sets the torque on its own motion, never through self.motion: poll() or stop()
        # on another thread may have dropped that reference while libfranka still runs the motion
        # (seen in a loaded suite run: 'NoneType' object has no attribute 'set_torque' in every cycle,
        # then franky's signal timeout ended the motion)
        m.register_callback(lambda state, dt, rel, abs_time, signal, m=m: self._cb(m, state, dt, rel, abs_time, signal))
        self.motion = m
        self.last_t = None
        self.robot.move(m, asynchronous=True)

    def _cb(self, motion, state, dt, rel, abs_time, signal):
        try:
            t = state.time.to_sec()
            if self.last_t is not None and t - self.last_t > 0.0015:
                self.n_lost += int(round((t - self.last_t) / 0.001)) - 1
            self.last_t = t
            self.n_cycles += 1
            if self.on_cycle is not None:
                tau = self.on_cycle(state, t)
                if tau is not None:
                    motion.set_torque(tau)
        except Exception as e:          # never into libfranka's thread; reported by poll()
            if self.callback_error is None:
                self.callback_error = f"{type(e).__name__}: {e}"

    def set_torque(self, tau):
        m = self.motion
        if m is not None:
            m.set_torque(np.asarray(tau, float))

    def poll(self):
        """None while the motion runs (or none was started); the error text once it has ended with
        an exception (reflex, signal timeout, network) or ended at all."""
        if self.robot is None:
            return "not connected"
        try:
            self.robot.poll_motion()           # raises the motion's exception (its return value is
            running = self.robot.is_in_control  # not "still running" with franky 2.0: use this)
        except Exception as e:
            self.motion = None
            errs = ""
            try:
                le = self.robot.state.last_motion_errors
                errs = f" [last_motion_errors: {le}]" if le else ""
            except Exception:
                pass
            return f"{type(e).__name__}: {e}{errs}"
        if not running and self.motion is not None:
            self.motion = None
            return "torque motion ended"
        return None

    def recover(self):
        """Automatic error recovery of the robot (an explicit service calls this), reconnecting if
        the connection was lost.  Returns True when the robot reports no error."""
        try:
            if self.robot.has_errors:
                self.robot.recover_from_errors()
            return not self.robot.has_errors
        except Exception:
            self.robot = None
            time.sleep(0.1)
            self.connect()
            return not self.robot.has_errors

    def stop(self, timeout=2.0):
        """End the motion (the robot then holds its position) and wait for it."""
        if self.robot is None:
            return
        try:
            self.robot.stop()
        except Exception:
            pass
        try:
            self.robot.join_motion(timeout)
        except Exception:
            pass
        self.motion = None

    def close(self):
        self.stop()
        self.robot = None
