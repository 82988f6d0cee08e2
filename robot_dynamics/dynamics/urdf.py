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


def check_inertia(m, Ic, what):
    """A physical rigid body: m >= 0, Ic symmetric positive semi-definite, principal moments obeying
    the triangle inequality (I1 + I2 >= I3).  Raises ValueError naming `what`."""
    if not np.isfinite(m) or m < 0:
        raise ValueError(f"{what}: mass must be a finite number >= 0, got {m}")
    if not np.all(np.isfinite(Ic)):
        raise ValueError(f"{what}: inertia has a non-finite entry")
    if not np.allclose(Ic, Ic.T, atol=1e-12):
        raise ValueError(f"{what}: inertia tensor is not symmetric")
    ev = np.linalg.eigvalsh(Ic)
    tol = 1e-9 * max(1.0, float(np.max(np.abs(ev))))
    if ev[0] < -tol:
        raise ValueError(f"{what}: inertia tensor is not positive definite (eigenvalues {ev})")
    if ev[0] + ev[1] < ev[2] - tol:
        raise ValueError(f"{what}: principal moments {ev} violate the triangle inequality I1 + I2 >= I3")
    if m == 0 and ev[2] > tol:
        raise ValueError(f"{what}: zero mass with a non-zero rotational inertia")


def _link_inertia(link):
    """Spatial inertia of a link in its own frame (zero if it has no <inertial>)."""
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
    check_inertia(m, Ic, f"URDF link {name!r}")
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


def parse_urdf(urdf, floating_base=False):
    """Build a KinematicTree from a URDF string.  Children are visited in the order of their joint
    names, depth first, which is also Pinocchio's order (urdfdom keeps joints in a sorted map)."""
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
        tree.frames.setdefault(link_name, Frame(link_name, body, R, p, "link"))
        if body >= 0:
            I_link = _link_inertia(links[link_name])
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
