"""Arm-to-arm distance rows: frames of this arm kept apart from another arm's frames, the other arm's
frame positions taken from its joint states.  No ROS.

    rows = ArmDistanceRows(model, other_model, T_other=(R, p), other_frames=[...], other_radii=[...],
                           reach=0.3)
    rows.update(envelope, q_other)      # before each envelope.apply: the planes for this step

The envelope (control/envelope.py) keeps each of its frames f (sphere radius r_f) on the allowed side
of planes; here, for every pair (own frame f, other frame o, sphere r_o) closer than `reach` (gap
between the spheres), the plane through the point at r_o from the other frame's origin, facing f:
    n = (p_f - p_o) / |p_f - p_o|,   d = n . p_o + r_o,   allowed  n . p_f >= d + r_f,
whose clearance s = n . p_f - d - r_f = |p_f - p_o| - r_o - r_f is the gap between the two spheres.
The plane is the envelope's (its rows: no push toward the other arm within the margin, a spring and
damping away from it, a stop if held inside), so the distance rows inherit its guarantees; the
other arm is taken as still over the step (its state is up to a period old: keep the margin larger
than the distance the arms close in one step at their speed limits).  Both arms running these rows
against each other each keep their half.

Positions: the other arm's frames by Pinocchio forward kinematics of its model at q_other, moved into
this arm's base frame by T_other (the other base's pose in this arm's base frame: R, p); this arm's
frames from the envelope's own last forward kinematics (the previous step's q: one period old).
"""
import numpy as np
import pinocchio as pin


class ArmDistanceRows:
    def __init__(self, model, other_model, T_other, other_frames, other_radii, reach=0.3):
        self.model, self.other = model, other_model
        R, p = T_other
        self.R, self.p = np.asarray(R, dtype=float), np.asarray(p, dtype=float)
        if self.R.shape != (3, 3) or self.p.shape != (3,):
            raise ValueError("T_other: (R 3x3, p 3)")
        self.ofids = [other_model.frame_ids[other_model.check_frame(f)] for f in other_frames]
        r = np.broadcast_to(np.asarray(other_radii, dtype=float), (len(self.ofids),)).copy()
        if np.any(~np.isfinite(r)) or np.any(r < 0) or not reach > 0:
            raise ValueError("other_radii must be >= 0, reach > 0")
        self.r_o, self.reach = r, float(reach)
        self._pm = other_model.pin_model
        self._pd = self._pm.createData()
        self.P_other = np.zeros((len(self.ofids), 3))
        self.min_gap = np.inf

    def other_positions(self, q_other):
        """The other arm's frame origins in this arm's base frame."""
        pin.framesForwardKinematics(self._pm, self._pd, self.other.q_to_pin(np.asarray(q_other, float)))
        for k, fid in enumerate(self.ofids):
            self.P_other[k] = self.R @ self._pd.oMf[fid].translation + self.p
        return self.P_other

    def planes(self, P_own, r_own, q_other):
        """(N, d, frame index) of the planes for the own frames at P_own (radii r_own)."""
        Po = self.other_positions(q_other)
        diff = P_own[:, None, :] - Po[None, :, :]                   # own x other x 3
        dist = np.linalg.norm(diff, axis=2)
        gap = dist - r_own[:, None] - self.r_o[None, :]
        self.min_gap = float(gap.min()) if gap.size else np.inf
        i, o = np.nonzero(gap < self.reach)
        n = diff[i, o] / np.maximum(dist[i, o], 1e-9)[:, None]
        d = np.einsum("kj,kj->k", n, Po[o]) + self.r_o[o]
        return n, d, i

    def update(self, env, q_other, q_own=None):
        """Hand the envelope this step's planes.  Own frame positions: FK at q_own when given, else
        the envelope's last (its previous apply's)."""
        if q_own is not None:
            pm, pd = env.pm, env.pd
            pin.framesForwardKinematics(pm, pd, env._pq(np.asarray(q_own, float)))
            P = np.array([pd.oMf[f].translation for f in env.fids])
        else:
            P = env._P
        N, d, frame = self.planes(P, env.r, q_other)
        env.set_extra_planes(N, d, frame)
        return len(d)
