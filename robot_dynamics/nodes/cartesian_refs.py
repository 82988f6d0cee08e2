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


def cartesian_trajectory_from_msg(msg, index=0):
    """`index`: which of each point's transforms (and velocities, accelerations) is the frame's (its
    position in msg.joint_names)."""
    if not msg.points:
        raise ValueError("cartesian_trajectory has no points")
    times, P, Q, V, A = [], [], [], [], []
    for k, pt in enumerate(msg.points):
        if len(pt.transforms) <= index:
            raise ValueError(f"cartesian_trajectory point {k}: no transform" if not pt.transforms else
                             f"cartesian_trajectory point {k}: {len(pt.transforms)} transform(s), the "
                             f"frame's is number {index + 1}")
        tf = pt.transforms[index]
        times.append(duration_to_sec(pt.time_from_start))
        P.append([tf.translation.x, tf.translation.y, tf.translation.z])
        Q.append([tf.rotation.x, tf.rotation.y, tf.rotation.z, tf.rotation.w])
        if len(pt.velocities) > index:
            V.append(_six(pt.velocities[index]))
        if len(pt.accelerations) > index:
            A.append(_six(pt.accelerations[index]))
    N = len(msg.points)
    V = V if len(V) == N else None
    A = A if (V is not None and len(A) == N) else None
    return CartesianTrajectory.from_quaternions(times, P, Q, V, A)


def twist_from_msg(msg):
    tw = np.array(_six(msg.twist), dtype=float)
    if not np.all(np.isfinite(tw)):
        raise ValueError("target_twist: values must be finite")
    return tw
