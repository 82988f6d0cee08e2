"""Message conversions for Cartesian references (issue 12), shared by the nodes that run a ControlLoop.

    traj = cartesian_trajectory_from_msg(msg)     # trajectory_msgs/MultiDOFJointTrajectory -> CartesianTrajectory
    tw = twist_from_msg(msg)                      # geometry_msgs/TwistStamped -> [v; w] (6,)

A MultiDOFJointTrajectory for the controlled frame: joint_names empty (the controlled frame) or naming
it; that transform of each point is the frame's pose in the base frame; its velocity / acceleration
(geometry_msgs/Twist: linear, angular, base axes) is used when every point has one (accelerations
only together with velocities).  time_from_start counts from header.stamp (zero: from receipt; the
node sets the stamp, the law starts from the pose, twist and acceleration it is following).
ValueError naming the problem.
"""
import numpy as np

from ..control.cartesian_trajectory import CartesianTrajectory
from .common import duration_to_sec


def _six(m):
    return [m.linear.x, m.linear.y, m.linear.z, m.angular.x, m.angular.y, m.angular.z]


def _points(msg):
    """(times (N,), transforms, velocities, accelerations: per point a (k, 7) / (k, 6) array) of a
    MultiDOFJointTrajectory, or of a TrajectoryData read from its bytes (nodes/cdr_trajectory.py)."""
    if hasattr(msg, "times"):
        return msg.times, msg.transforms, msg.velocities, msg.accelerations
    pts = msg.points
    times = np.array([duration_to_sec(pt.time_from_start) for pt in pts], dtype=float)
    tfs = [np.array([[t.translation.x, t.translation.y, t.translation.z,
                      t.rotation.x, t.rotation.y, t.rotation.z, t.rotation.w] for t in pt.transforms],
                    dtype=float).reshape(-1, 7) for pt in pts]
    vel = [np.array([_six(m) for m in pt.velocities], dtype=float).reshape(-1, 6) for pt in pts]
    acc = [np.array([_six(m) for m in pt.accelerations], dtype=float).reshape(-1, 6) for pt in pts]
    return times, tfs, vel, acc


def cartesian_trajectory_from_msg(msg, index=0):
    """`msg`: a MultiDOFJointTrajectory or its TrajectoryData.  `index`: which of each point's
    transforms (and velocities, accelerations) is the frame's (its position in msg.joint_names)."""
    times, tfs, vel, acc = _points(msg)
    N = len(times)
    if not N:
        raise ValueError("cartesian_trajectory has no points")
    for k, tf in enumerate(tfs):
        if len(tf) <= index:
            raise ValueError(f"cartesian_trajectory point {k}: no transform" if not len(tf) else
                             f"cartesian_trajectory point {k}: {len(tf)} transform(s), the "
                             f"frame's is number {index + 1}")
    T = np.array([tf[index] for tf in tfs]).reshape(N, 7)
    V = np.array([v[index] for v in vel]).reshape(N, 6) if all(len(v) > index for v in vel) else None
    A = (np.array([a[index] for a in acc]).reshape(N, 6)
         if V is not None and all(len(a) > index for a in acc) else None)
    return CartesianTrajectory.from_quaternions(times, T[:, :3], T[:, 3:], V, A)


def twist_from_msg(msg):
    tw = np.array(_six(msg.twist), dtype=float)
    if not np.all(np.isfinite(tw)):
        raise ValueError("target_twist: values must be finite")
    return tw
