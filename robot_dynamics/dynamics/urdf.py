"""An in-repo URDF reader for the reference backend (independent of Pinocchio's urdfdom parser, so
that the backend self-check catches parsing surprises), and URDF edits shared by both backends.

Conventions, as in Pinocchio: fixed joints are merged into their parent body (inertias added, a frame
kept for every link and joint); `continuous` joints are revolute without limits; `floating` and
`planar` joints inside the tree are rejected; a `<mimic>` joint is read as an independent joint (lock
it or list the active joints if the hardware couples it); a link without `<inertial>` is massless.
"""
import xml.etree.ElementTree as ET

import numpy as np

from .reference import spatial
from .tree import Frame, KinematicTree

MOVABLE = ("revolute", "continuous", "prismatic")


def _floats(text, n, what):
    try:
        vals = [float(x) for x in text.split()]
    except (AttributeError, ValueError):
        raise ValueError(f"URDF: {what}: expected {n} numbers, got {text!r}") from None
    if len(vals) != n or not all(np.isfinite(vals)):
        raise ValueError(f"URDF: {what}: expected {n} finite numbers, got {text!r}")
    return np.array(vals)


def _origin(elem, what):
    o = elem.find("origin") if elem is not None else None
    if o is None:
        return np.eye(3), np.zeros(3)
    xyz = _floats(o.get("xyz", "0 0 0"), 3, f"{what} origin xyz")
    rpy = _floats(o.get("rpy", "0 0 0"), 3, f"{what} origin rpy")
    return spatial.rpy_to_matrix(rpy), xyz


def _attr(elem, key, default, what):
    if elem is None or elem.get(key) is None:
        return default
    try:
        val = float(elem.get(key))
    except ValueError:
        raise ValueError(f"URDF: {what}: {key}={elem.get(key)!r} is not a number") from None
    if np.isnan(val):
        raise ValueError(f"URDF: {what}: {key} is NaN")
    return val


class InertiaWarning(UserWarning):
    """A URDF inertial that is not physically consistent (loaded anyway unless strict)."""


def inertia_problems(m, Ic):
    """Physical-consistency problems of a rigid body (mass m, rotational inertia Ic about its centre of
    mass): m >= 0, Ic positive semi-definite, principal moments obeying the triangle inequality
    I1 + I2 >= I3, no rotational inertia without mass.  Returns a list of messages (empty: physical).
    Non-finite numbers are not a physics question: they raise ValueError."""
    if not np.isfinite(m):
        raise ValueError(f"mass must be a finite number, got {m}")
    if not np.all(np.isfinite(Ic)):
        raise ValueError("inertia has a non-finite entry")
    if not np.allclose(Ic, Ic.T, atol=1e-12):
        raise ValueError("inertia tensor is not symmetric")
    out = []
    if m < 0:
        out.append(f"negative mass {m:g} kg (mass must be a finite number >= 0)")
    ev = np.linalg.eigvalsh(Ic)
    tol = 1e-9 * max(1.0, float(np.max(np.abs(ev))))
    if ev[0] < -tol:
        out.append(f"inertia tensor is not positive definite (eigenvalues {ev})")
    elif ev[0] + ev[1] < ev[2] - tol:
        out.append(f"principal moments {ev} violate the triangle inequality I1 + I2 >= I3 "
                   f"({ev[0] + ev[1]:.6g} < {ev[2]:.6g})")
    if m == 0 and ev[2] > tol:
        out.append(f"zero mass with a non-zero rotational inertia (principal moments {ev})")
    return out


def check_inertia(m, Ic, what):
    """Strict form of `inertia_problems`: raises ValueError naming `what` for the first problem."""
    try:
        problems = inertia_problems(m, Ic)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    if problems:
        raise ValueError(f"{what}: {problems[0]}")


def _link_inertia(link, issues=None):
    """Spatial inertia of a link in its own frame (zero if it has no <inertial>).  Physical-consistency
    problems raise ValueError, or are appended to `issues` (a list) as "URDF link 'x': problem"."""
    name = link.get("name")
    inert = link.find("inertial")
    if inert is None:
        return np.zeros((6, 6))
    R, p = _origin(inert, f"link {name!r} inertial")
    m = _attr(inert.find("mass"), "value", 0.0, f"link {name!r} mass")
    ie = inert.find("inertia")
    keys = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    v = {k: _attr(ie, k, 0.0, f"link {name!r} inertia") for k in keys}
    Ic = np.array([[v["ixx"], v["ixy"], v["ixz"]], [v["ixy"], v["iyy"], v["iyz"]],
                   [v["ixz"], v["iyz"], v["izz"]]])
    if issues is None:
        check_inertia(m, Ic, f"URDF link {name!r}")
    else:
        try:
            problems = inertia_problems(m, Ic)
        except ValueError as e:
            raise ValueError(f"URDF link {name!r}: {e}") from None
        issues += [f"URDF link {name!r}: {p}" for p in problems]
    Ic = R @ Ic @ R.T  # inertial frame axes -> link axes
    return spatial.inertia(m, p, Ic)


def parse_xml(urdf):
    """Parse a URDF string into an ElementTree root, with a clear ValueError when it is not one."""
    if not isinstance(urdf, str) or not urdf.strip():
        raise ValueError("URDF: empty robot description")
    try:
        root = ET.fromstring(urdf)
    except ET.ParseError as e:
        raise ValueError(f"URDF: malformed XML: {e}") from None
    if root.tag != "robot":
        raise ValueError(f"URDF: root element is <{root.tag}>, expected <robot>")
    return root


def parse_urdf(urdf, floating_base=False, issues=None):
    """Build a KinematicTree from a URDF string.  Children are visited in the order of their joint
    names, depth first, which is also Pinocchio's order (urdfdom keeps joints in a sorted map).
    issues: None (a non-physical inertial raises ValueError) or a list that collects them.
    A name used by both a link and a joint denotes the link's frame (the joint's frame is its child
    link's frame, under that link's name)."""
    root = parse_xml(urdf)
    links = {}
    for link in root.findall("link"):
        name = link.get("name")
        if not name:
            raise ValueError("URDF: a <link> has no name")
        if name in links:
            raise ValueError(f"URDF: duplicate link {name!r}")
        links[name] = link
    if not links:
        raise ValueError("URDF: no <link> elements")
    joints, children, parent_of = {}, {}, {}
    for j in root.findall("joint"):
        name, jt = j.get("name"), j.get("type")
        if not name:
            raise ValueError("URDF: a <joint> has no name")
        if name in joints:
            raise ValueError(f"URDF: duplicate joint {name!r}")
        if jt not in MOVABLE + ("fixed",):
            raise ValueError(f"URDF: joint {name!r} has unsupported type {jt!r} "
                             "(supported: revolute, continuous, prismatic, fixed)")
        pe, ce = j.find("parent"), j.find("child")
        if pe is None or ce is None:
            raise ValueError(f"URDF: joint {name!r} needs <parent> and <child>")
        p, c = pe.get("link"), ce.get("link")
        for ln in (p, c):
            if ln not in links:
                raise ValueError(f"URDF: joint {name!r} refers to unknown link {ln!r}")
        if c in parent_of:
            raise ValueError(f"URDF: link {c!r} has two parent joints")
        joints[name] = j
        parent_of[c] = name
        children.setdefault(p, []).append(name)
    roots = [ln for ln in links if ln not in parent_of]
    if len(roots) != 1:
        raise ValueError(f"URDF: expected exactly one root link, found {roots}")

    tree = KinematicTree(name=root.get("name", "robot"), root_link=roots[0])
    reached = set()

    def visit(link_name, body, R, p):
        """Attach link `link_name`, whose frame has pose (R, p) in body `body`, then its children."""
        reached.add(link_name)
        tree.frames[link_name] = Frame(link_name, body, R, p, "link")   # a link wins over a joint
        if body >= 0:
            I_link = _link_inertia(links[link_name], issues)
            tree.I[body] = tree.I[body] + spatial.transform_inertia(I_link, R, p)
        for jname in sorted(children.get(link_name, [])):
            j = joints[jname]
            Rj, pj = _origin(j, f"joint {jname!r}")
            Rc, pc = R @ Rj, p + R @ pj
            child = j.find("child").get("link")
            jt = j.get("type")
            if jt == "fixed":
                tree.frames.setdefault(jname, Frame(jname, body, Rc, pc, "joint"))
                visit(child, body, Rc, pc)
                continue
            axis = _floats(j.find("axis").get("xyz"), 3, f"joint {jname!r} axis") \
                if j.find("axis") is not None else np.array([1.0, 0.0, 0.0])
            n = np.linalg.norm(axis)
            if n < 1e-12:
                raise ValueError(f"URDF: joint {jname!r} has a zero axis")
            lim, dyn = j.find("limit"), j.find("dynamics")
            what = f"joint {jname!r} limit"
            if jt in ("revolute", "prismatic") and lim is None:
                raise ValueError(f"URDF: {jt} joint {jname!r} needs a <limit>")
            lower = -np.inf if jt == "continuous" else _attr(lim, "lower", 0.0, what)
            upper = np.inf if jt == "continuous" else _attr(lim, "upper", 0.0, what)
            if lower > upper:
                raise ValueError(f"URDF: joint {jname!r} has lower limit {lower} > upper {upper}")
            b = tree.add_body(body, jt, axis / n, jname, child, Rc, pc, np.zeros((6, 6)),
                              lower, upper, _attr(lim, "velocity", np.inf, what),
                              _attr(lim, "effort", np.inf, what),
                              _attr(dyn, "damping", 0.0, f"joint {jname!r} dynamics"),
                              _attr(dyn, "friction", 0.0, f"joint {jname!r} dynamics"))
            tree.frames.setdefault(jname, Frame(jname, b, np.eye(3), np.zeros(3), "joint"))
            visit(child, b, np.eye(3), np.zeros(3))

    if floating_base:
        tree.add_body(-1, "free", np.zeros(3), "root_joint", roots[0], np.eye(3), np.zeros(3),
                      np.zeros((6, 6)))
        tree.frames["root_joint"] = Frame("root_joint", 0, np.eye(3), np.zeros(3), "joint")
        visit(roots[0], 0, np.eye(3), np.zeros(3))
    else:
        visit(roots[0], -1, np.eye(3), np.zeros(3))
    if len(reached) != len(links):
        raise ValueError(f"URDF: links not connected to the root: {sorted(set(links) - reached)}")
    return tree


def lock_joints(urdf, active=None, locked=None):
    """Return a URDF string in which movable joints are turned into fixed ones.

    active: names of the joints to keep movable (None: all); every other movable joint is locked.
    locked: {joint: position} for locked joints (default 0, clamped into the joint's limits).
    The locked joint's motion at that position is folded into its <origin>, so every parser sees the
    same rigid body.  Unknown names raise ValueError.
    """
    root = parse_xml(urdf)
    locked = dict(locked or {})
    movable = {j.get("name"): j for j in root.findall("joint") if j.get("type") in MOVABLE}
    names = set(movable)
    for n in list(active or []) + list(locked):
        if n not in names:
            raise ValueError(f"unknown joint {n!r}; movable joints are {sorted(names)}")
    to_lock = set(locked) | (names - set(active) if active is not None else set())
    for name in sorted(to_lock):
        j = movable[name]
        lim = j.find("limit")
        lo = _attr(lim, "lower", -np.inf, name) if j.get("type") != "continuous" else -np.inf
        hi = _attr(lim, "upper", np.inf, name) if j.get("type") != "continuous" else np.inf
        x = float(np.clip(locked.get(name, 0.0), lo, hi))
        R, p = _origin(j, f"joint {name!r}")
        ax = j.find("axis")
        axis = _floats(ax.get("xyz"), 3, "axis") if ax is not None else np.array([1.0, 0.0, 0.0])
        axis = axis / np.linalg.norm(axis)
        if j.get("type") == "prismatic":
            p = p + R @ (axis * x)
        else:
            R = R @ spatial.rotation_about(axis, x)
        for tag in ("origin", "axis", "limit", "mimic", "dynamics", "safety_controller", "calibration"):
            for e in j.findall(tag):
                j.remove(e)
        o = ET.SubElement(j, "origin")
        o.set("xyz", " ".join(repr(float(v)) for v in p))
        o.set("rpy", " ".join(repr(float(v)) for v in spatial.matrix_to_rpy(R)))
        j.set("type", "fixed")
    # a mimic tag that points at a locked joint makes no sense any more
    for j in root.findall("joint"):
        for mim in j.findall("mimic"):
            if mim.get("joint") in to_lock:
                j.remove(mim)
    return ET.tostring(root, encoding="unicode")


def massless_joints(tree, tol=1e-12):
    """Joints that move no inertia at all: the child link and everything it carries has no mass and no
    rotational inertia (romeo.urdf's finger joints: links without <inertial>).  Each one is a zero row
    and column of the mass matrix, so ABA divides by zero.  A massless link that carries a massive one
    is not listed (the joint moves that one)."""
    empty = [bool(np.all(np.abs(I) <= tol)) for I in tree.I]
    out = []
    for i, jt in enumerate(tree.jtype):
        if jt != "free" and all(empty[b] for b in tree.subtree(i)):
            out.append(i)
    return out


def add_joint_inertia(urdf, additions):
    """URDF text with, for each (link, joint type, eps) in `additions`, the smallest inertia that the
    joint moving `link` can see, written into the link's <inertial> (created if absent) where every
    URDF reader sees it:
      revolute / continuous: eps [kg m^2] added to ixx, iyy and izz (an isotropic rotor of zero mass:
        the same about every axis and every point, so neither the centre of mass nor gravity changes);
      prismatic: eps [kg] of mass at the inertial origin, when the link has none (a link that has mass
        moves some, and is not listed by `massless_joints`).
    An XML comment beside it says why."""
    root = parse_xml(urdf)
    links = {lk.get("name"): lk for lk in root.findall("link")}
    for link_name, jtype, eps in additions:
        lk = links[link_name]
        inert = lk.find("inertial")
        if inert is None:
            inert = ET.SubElement(lk, "inertial")
            ET.SubElement(inert, "origin", xyz="0 0 0", rpy="0 0 0")
        mass = inert.find("mass")
        if mass is None:
            mass = ET.SubElement(inert, "mass", value="0")
        ie = inert.find("inertia")
        if ie is None:
            ie = ET.SubElement(inert, "inertia")
        for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
            ie.set(k, ie.get(k, "0"))
        if jtype == "prismatic":
            what = f"{eps!r} kg of mass"
            mass.set("value", repr(float(mass.get("value", "0") or 0.0) + eps))
        else:
            what = f"{eps!r} kg m^2 of isotropic rotational inertia"
            for k in ("ixx", "iyy", "izz"):
                ie.set(k, repr(float(ie.get(k)) + eps))
        lk.insert(0, ET.Comment(f" robot_dynamics: {what} added: the joint moving this link moved no "
                                f"inertia (a zero pivot of the mass matrix) "))
    return ET.tostring(root, encoding="unicode")


def expand_xacro(path, args=None):
    """URDF text of a xacro file (`xacro` package from the index): `args` {name: value} are its
    <xacro:arg> values (as `xacro file.urdf.xacro name:=value`); relative includes resolve from the
    file's folder.  `$(find pkg)` needs that ROS package installed; any xacro error is a ValueError."""
    import xacro
    from pathlib import Path
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"xacro file not found: {path}")
    mappings = {str(k): (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (args or {}).items()}
    try:
        doc = xacro.process_file(str(p), mappings=mappings)
        return doc.toxml()
    except Exception as e:                        # noqa: BLE001 (XacroException, XML and OS errors)
        raise ValueError(f"xacro {p.name}: {e}") from None
