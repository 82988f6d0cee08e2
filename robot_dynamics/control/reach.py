"""A cheap bound on where a frame can be: the Cartesian laws refuse a target beyond it (issue 42), as
the joint laws refuse a pose their inverse kinematics cannot reach.  No ROS.

    origin, length = reach_bound(model, frame)
    far = np.linalg.norm(p - origin) > length + REACH_MARGIN

`origin` is the origin of the first movable joint on the chain from the root to `frame` (its axis
origin: it does not move with the arm; fixed base).  `length` is the sum, over every joint after it on
that chain, of the length of its URDF <origin> offset, plus the fixed offsets down to the frame, plus
the stroke (the larger of |lower|, |upper|) of every prismatic joint on the chain: by the triangle
inequality no configuration puts the frame farther from `origin` than that, so a target beyond it is
out of reach whatever the joint limits (the bound is loose: for the Panda's hand TCP it is 1.090 m from
the shoulder, the farthest of 20000 random configurations 0.947 m; UR5 tool0 1.240 / 0.950 m; Kinova
end effector 1.104 / 1.103 m).  A prismatic first joint moves its own origin: its stroke is
counted.  The lengths are read from the URDF text itself.
"""
import xml.etree.ElementTree as ET

import numpy as np

REACH_MARGIN = 0.05     # m added to the bound before a target is refused: a target just past the arm's
#                         stretch (a tool longer than the URDF's, a calibration offset) is still
#                         approached, with its pose error clipped (max_pos_error)


def reach_bound(model, frame):
    """(origin (3,) in the base frame, length [m]) of `frame`: see the module docstring."""
    root = ET.fromstring(model.urdf)
    joints = {j.get("name"): j for j in root.findall("joint")}
    by_child = {j.find("child").get("link"): j for j in joints.values()}
    links = {link.get("name") for link in root.findall("link")}
    if frame in joints:
        link = joints[frame].find("child").get("link")
    elif frame in links:
        link = frame
    else:
        raise ValueError(f"reach: frame {frame!r} is neither a link nor a joint of the URDF")
    chain = []                                   # root -> frame
    while link in by_child:
        j = by_child[link]
        chain.append(j)
        link = j.find("parent").get("link")
    chain.reverse()
    movable = set(model.joint_names)
    first = next((i for i, j in enumerate(chain) if j.get("name") in movable), None)
    if first is None:
        raise ValueError(f"reach: no movable joint between the root and {frame!r}")

    def offset(j):
        o = j.find("origin")
        xyz = [float(x) for x in (o.get("xyz", "0 0 0") if o is not None else "0 0 0").split()]
        return float(np.linalg.norm(xyz))

    def stroke(j):
        lim = j.find("limit")
        if j.get("type") != "prismatic" or lim is None:
            return 0.0
        return max(abs(float(lim.get("lower", 0.0))), abs(float(lim.get("upper", 0.0))))

    length = sum(offset(j) for j in chain[first + 1:]) + sum(stroke(j) for j in chain[first:])
    j1 = chain[first].get("name")
    from ..dynamics import make_backend
    _, origin = make_backend(model, "pinocchio").frame_placement(model.neutral(), j1)
    return np.array(origin, dtype=float), float(length)
