"""DH and modified-DH (Khalil-Kleinfinger / Craig) tables -> URDF, so that both backends read them.

Table (YAML or dict):

    name: my_arm
    convention: modified        # or "standard"
    base_link: base             # optional
    joints:                     # one entry per joint, base to tip
      - name: joint1
        type: revolute          # or prismatic
        a: 0.0                  # link length  [m]
        alpha: 0.0              # link twist   [rad]
        d: 0.333                # link offset  [m] (prismatic: offset at q = 0)
        theta: 0.0              # joint angle offset [rad] (revolute: offset at q = 0)
        link: link1             # name of the link frame (default "<name>_link")
        mass: 4.97
        com: [0.0, 0.0, 0.0]                # in the link's DH frame [m]
        inertia: [ixx, ixy, ixz, iyy, iyz, izz]  # about the centre of mass, DH frame axes [kg m^2]
        limits: {lower: -2.9, upper: 2.9, velocity: 2.1, effort: 87}
    tool: {name: flange, xyz: [0, 0, 0.107], rpy: [0, 0, 0]}   # optional, in the last DH frame

Modified DH (Craig; Khalil-Kleinfinger's alpha, d, theta, r): frame i in frame i-1 is
    T = Rx(alpha_i) Tx(a_i) Rz(theta_i) Tz(d_i), the joint acting on theta_i (or d_i);
the URDF joint origin is Rx(alpha) Tx(a) Rz(theta0) Tz(d0) and the link frame is DH frame i.

Standard DH: T = Rz(theta_i) Tz(d_i) Tx(a_i) Rx(alpha_i), the joint acting about z_{i-1}.  The URDF
link of joint i is then the frame z_{i-1} turned by q_i; DH frame i sits at
Rz(theta0) Tz(d0) Tx(a) Rx(alpha) in it, which is the next joint's origin and where the link's
inertial and the `<link>` frame (a fixed child) are placed.
"""
import numpy as np

from .reference import spatial
from .urdf import inertia_problems


def _rot(axis, ang):
    return spatial.rotation_about(np.eye(3)[axis], ang)


def _T(R=np.eye(3), p=np.zeros(3)):
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = R, p
    return T


def _origin_xml(T):
    xyz = " ".join(repr(float(x)) for x in T[:3, 3])
    rpy = " ".join(repr(float(x)) for x in spatial.matrix_to_rpy(T[:3, :3]))
    return f'<origin xyz="{xyz}" rpy="{rpy}"/>'


def _num(entry, key, default, where):
    val = entry.get(key, default)
    try:
        val = float(val)
    except (TypeError, ValueError):
        raise ValueError(f"DH table: {where}: {key}={val!r} is not a number") from None
    if not np.isfinite(val):
        raise ValueError(f"DH table: {where}: {key} must be finite")
    return val


def _inertial_xml(T_link_dh, entry, where):
    m = _num(entry, "mass", 0.0, where)
    com = np.asarray(entry.get("com", [0, 0, 0]), dtype=float)
    iv = np.asarray(entry.get("inertia", [0] * 6), dtype=float)
    if com.shape != (3,) or iv.shape != (6,):
        raise ValueError(f"DH table: {where}: com needs 3 numbers and inertia 6 (ixx ixy ixz iyy iyz izz)")
    Ic = np.array([[iv[0], iv[1], iv[2]], [iv[1], iv[3], iv[4]], [iv[2], iv[4], iv[5]]])
    try:
        inertia_problems(m, Ic)   # non-finite numbers raise; physical problems are the Model's warnings
    except ValueError as e:
        raise ValueError(f"DH table: {where}: {e}") from None
    T = T_link_dh @ _T(p=com)
    iv = [float(x) for x in iv]          # repr of a numpy scalar is "np.float64(...)" (numpy >= 2)
    return (f'<inertial>{_origin_xml(T)}<mass value="{m!r}"/>'
            f'<inertia ixx="{iv[0]!r}" ixy="{iv[1]!r}" ixz="{iv[2]!r}" iyy="{iv[3]!r}" '
            f'iyz="{iv[4]!r}" izz="{iv[5]!r}"/></inertial>')


def dh_to_urdf(table):
    """URDF string of a DH / modified-DH table (see the module docstring)."""
    if not isinstance(table, dict) or not isinstance(table.get("joints"), list) or not table["joints"]:
        raise ValueError("DH table: needs a non-empty 'joints' list")
    conv = table.get("convention", "modified")
    if conv not in ("modified", "standard"):
        raise ValueError(f"DH table: convention must be 'modified' or 'standard', got {conv!r}")
    base = table.get("base_link", "base_link")
    out = [f'<robot name="{table.get("name", "dh_robot")}">', f'<link name="{base}"/>']
    parent, T_prev = base, np.eye(4)   # standard DH: constant part of the previous joint
    for k, e in enumerate(table["joints"]):
        name = e.get("name") or f"joint{k + 1}"
        where = f"joint {name!r}"
        jt = e.get("type", "revolute")
        if jt not in ("revolute", "prismatic", "continuous"):
            raise ValueError(f"DH table: {where}: type must be revolute, prismatic or continuous")
        a, alpha = _num(e, "a", 0.0, where), _num(e, "alpha", 0.0, where)
        d, theta = _num(e, "d", 0.0, where), _num(e, "theta", 0.0, where)
        link = e.get("link") or f"{name}_link"
        lim = e.get("limits", {}) or {}
        lim_xml = "" if jt == "continuous" else (
            f'<limit lower="{_num(lim, "lower", -np.pi, where)!r}" upper="{_num(lim, "upper", np.pi, where)!r}" '
            f'velocity="{_num(lim, "velocity", 1e3, where)!r}" effort="{_num(lim, "effort", 1e3, where)!r}"/>')
        T_const = _T(_rot(2, theta)) @ _T(p=[0, 0, d])   # Rz(theta0) Tz(d0)
        if conv == "modified":
            origin = _T(_rot(0, alpha)) @ _T(p=[a, 0, 0]) @ T_const
            motion_link, T_link_dh = link, np.eye(4)
        else:
            origin = T_prev
            T_prev = T_const @ _T(p=[a, 0, 0]) @ _T(_rot(0, alpha))
            motion_link, T_link_dh = f"{name}_motion", T_prev
        out.append(f'<joint name="{name}" type="{jt}"><parent link="{parent}"/><child link="{motion_link}"/>'
                   f'{_origin_xml(origin)}<axis xyz="0 0 1"/>{lim_xml}</joint>')
        out.append(f'<link name="{motion_link}">{_inertial_xml(T_link_dh, e, where)}</link>')
        if conv == "standard":
            out.append(f'<joint name="{name}_dh" type="fixed"><parent link="{motion_link}"/>'
                       f'<child link="{link}"/>{_origin_xml(T_link_dh)}</joint><link name="{link}"/>')
        parent = motion_link
    tool = table.get("tool")
    if tool:
        T_tool = (np.eye(4) if conv == "modified" else T_prev) @ _T(
            spatial.rpy_to_matrix(np.asarray(tool.get("rpy", [0, 0, 0]), float)),
            np.asarray(tool.get("xyz", [0, 0, 0]), float))
        tname = tool.get("name", "tool")
        out.append(f'<joint name="{tname}_joint" type="fixed"><parent link="{parent}"/>'
                   f'<child link="{tname}"/>{_origin_xml(T_tool)}</joint><link name="{tname}"/>')
    out.append("</robot>")
    return "\n".join(out)
