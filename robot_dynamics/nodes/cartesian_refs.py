"""Message conversions for Cartesian references (issue 12), shared by the nodes that run a ControlLoop.

    traj = cartesian_trajectory_from_msg(msg)     # trajectory_msgs/MultiDOFJointTrajectory -> CartesianTrajectory
    tw = twist_from_msg(msg)                      # geometry_msgs/TwistStamped -> [v; w] (6,)

A MultiDOFJointTrajectory for the controlled frame: the first transform of each point is the frame's
pose in the base frame; its first velocity / acceleration (geometry_msgs/Twist: linear, angular, base
axes) is used when every point has one (accelerations only together with velocities); time_from_start
counts from receipt (the controller starts it at its next step, from the pose and twist it is
following).  ValueError naming the problem.
"""
import numpy as np

from ..control.cartesian_trajectory import CartesianTrajectory
from .common import duration_to_sec


def _six(m):
    return [m.linear.x, m.linear.y, m.linear.z, m.angular.x, m.angular.y, m.angular.z]


def cartesian_trajectory_from_msg(msg):
    if not msg.points:
        raise ValueError("cartesian_trajectory has no points")
    times, P, Q, V, A = [], [], [], [], []
    for k, pt in enumerate(msg.points):
        if not pt.transforms:
            raise ValueError(f"cartesian_trajectory point {k}: no transform")
        tf = pt.transforms[0]
        times.append(duration_to_sec(pt.time_from_start))
        P.append([tf.translation.x, tf.translation.y, tf.translation.z])
        Q.append([tf.rotation.x, tf.rotation.y, tf.rotation.z, tf.rotation.w])
        if pt.velocities:
            V.append(_six(pt.velocities[0]))
        if pt.accelerations:
            A.append(_six(pt.accelerations[0]))
    N = len(msg.points)
    V = V if len(V) == N else None
    A = A if (V is not None and len(A) == N) else None
    return CartesianTrajectory.from_quaternions(times, P, Q, V, A)


def twist_from_msg(msg):
    tw = np.array(_six(msg.twist), dtype=float)
    if not np.all(np.isfinite(tw)):
        raise ValueError("target_twist: values must be finite")
    return tw
