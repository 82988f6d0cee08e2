"""Cartesian goals for the joint laws (joint impedance, computed torque): a pose or a Cartesian trajectory
of one frame turned into a JointTrajectory by the inverse kinematic model (dynamics/ik.py).  No ROS.

    conv = IKReference(model, frame, min_singular_value=0.02)
    jt = conv.pose(q_start, R, p)           # one point: the law approaches it by its rest-to-rest quintic
                                            # within the velocity limits (JointTrajectory.start)
    jt = conv.trajectory(q_start, ctraj)    # a CartesianTrajectory: every point solved in turn from the
                                            # solution of the one before, at the point's time

q_start seeds the IK (the law's reference, so the nearest branch is chosen).  ValueError, with the
reason, and nothing produced when a goal is out of reach (the closest pose and its distance), when a
solution is at a singular configuration (its smallest singular value below min_singular_value: the
arm would lose a direction of motion there, and joint speeds blow up near it), or when two successive
points of a trajectory need a joint faster than its velocity limit (a singularity passed between them,
or the IK changed branch), or when the joint spline through the solved points needs a joint faster
than its velocity limit or harder than `max_acceleration` (the law's approach bound, 5 rad/s^2 by
default) anywhere between them.  The joint trajectory carries the Cartesian trajectory's stamp; its points
are positions only (a C2 spline through them, JointTrajectory's rule): the Cartesian path is followed
at the points, between them the joint spline's.
"""
import numpy as np

from ..dynamics.ik import PositionIK
from .trajectory import JointTrajectory


class IKReference:
    def __init__(self, model, frame, min_singular_value=0.02, max_acceleration=5.0):
        self.model = model
        self.frame = frame
        self.min_sv = float(min_singular_value)
        self.a_max = float(max_acceleration)
        self.ik = PositionIK(model, frame)                    # restarts when the seed does not converge
        self.ik_path = PositionIK(model, frame, restarts=0)   # along a path: from the previous point only
        self.vmax = np.asarray(model.velocity_limits, dtype=float)
        self.lower = np.asarray(model.lower_limits, dtype=float)
        self.upper = np.asarray(model.upper_limits, dtype=float)

    def _solve(self, ik, q, R, p, what):
        r = ik.solve(q, p, R)
        if r.status != "converged":
            raise ValueError(f"{what}: {r.status.replace('_', ' ')} for {self.frame!r} (closest: "
                             f"{1000 * r.position_error:.1f} mm, {r.rotation_error:.3f} rad away); not followed")
        if r.s_min < self.min_sv:
            raise ValueError(f"{what}: the solution is at a singular configuration of {self.frame!r} (smallest "
                             f"singular value {r.s_min:.4f} < {self.min_sv}); not followed")
        return r.q

    def pose(self, q_start, R, p):
        q = self._solve(self.ik, q_start, R, p, "the pose")
        return JointTrajectory([0.0], q[None, :], lower=self.lower, upper=self.upper)

    def trajectory(self, q_start, ctraj):
        times = np.asarray(ctraj.times, dtype=float)
        Q = np.empty((len(times), self.model.nv))
        q = np.asarray(q_start, dtype=float)
        for k, (R, p) in enumerate(zip(ctraj.rotations, ctraj.positions)):
            q_new = self._solve(self.ik if k == 0 else self.ik_path, q, R, p, f"point {k} (t = {times[k]:.3f} s)")
            if k:
                dt = times[k] - times[k - 1]
                speed = np.abs(q_new - q) / dt
                j = int(np.argmax(speed / np.where(self.vmax > 0, self.vmax, np.inf)))
                if self.vmax[j] > 0 and speed[j] > self.vmax[j]:
                    raise ValueError(f"point {k} (t = {times[k]:.3f} s): joint {self.model.joint_names[j]!r} "
                                     f"would move at {speed[j]:.2f} rad/s from the point before (limit "
                                     f"{self.vmax[j]:.2f}): the path passes a singularity or the IK changed "
                                     "branch; not followed")
            Q[k] = q = q_new
        jt = JointTrajectory(times, Q, lower=self.lower, upper=self.upper)
        # the joint spline through the solved points, between them too: within the velocity limits and
        # the law's acceleration bound (its approach's), else refused (not time-scaled: the user's
        # times are kept or the trajectory is not taken)
        v_pk, a_pk, t_v, t_a = jt.peak_rates()
        lim = np.where(self.vmax > 0, self.vmax, np.inf)
        j = int(np.argmax(v_pk / lim))
        if v_pk[j] > lim[j] * (1.0 + 1e-9):
            raise ValueError(f"the joint trajectory through the IK's points needs joint {self.model.joint_names[j]!r} "
                             f"at {v_pk[j]:.2f} rad/s at t = {t_v[j]:.3f} s (limit {lim[j]:.2f}): slow the "
                             "Cartesian trajectory down; not followed")
        j = int(np.argmax(a_pk))
        if a_pk[j] > self.a_max * (1.0 + 1e-9):
            raise ValueError(f"the joint trajectory through the IK's points needs joint {self.model.joint_names[j]!r} "
                             f"at {a_pk[j]:.2f} rad/s^2 at t = {t_a[j]:.3f} s (the law's bound {self.a_max:g} rad/s^2, "
                             "its approach_acceleration): slow the Cartesian trajectory down; not followed")
        jt.stamp = ctraj.stamp
        return jt
