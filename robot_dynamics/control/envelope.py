"""Cartesian safety envelope: workspace, speed and force limits on the robot's frames, for every law,
and a controlled stop when a violation persists.  No ROS.

    env = SafetyEnvelope(model, EnvelopeParams(...) or dict)   # ValueError naming the bad value
    tau = env.apply(tau, q, v, dt, gravity_in_tau=True)   # the law's command -> the filter's target
    tau = env.enforce(safety_filter.apply(tau, ...))   # the command sent, back within the envelope
    env.state        # "off" | "ok" | "acting" | "stopping" | "stopped"
    ok, why = env.resume()                             # leave a stop (refused while still violated)

Each listed frame f (origin p_f, velocity v_f, LOCAL_WORLD_ALIGNED Jacobian J_f = [J_v; J_w]) carries a
sphere of radius r_f that must stay on the allowed side of every plane c, n_c . p >= d_c (base frame;
a box is its six planes, inside).  Its clearance s = n . p - d - r is > 0 inside.

Per step, with the motion torque tau_m = tau - g(q) (what the command does beyond holding the arm's
weight; tau itself when the driver adds gravity, gravity_in_tau=False), apply() builds the target the
safety filter is handed:
1. rows: every plane a frame is within `margin` of, and every frame above 0.9 x its speed limit (or
   about to be: its speed extrapolated PREDICT steps at the last step's change; a hard-accelerating
   law crosses the band between two steps), is a unit direction u_k (the plane's normal n; -v/|v| for
   a speed) with the row a_k = u_k^T J_v (or J_w), its acceleration a_k M^-1 tau_m (+ u . J' v -
   a_k M^-1 C(q, v) v for a speed row: the frame's whole acceleration, not only the command's share);
2. no push outward: the command may give the frame only a fraction 1 - beta_k of the outward
   acceleration the law asks for, >= (1 - beta_k) min(a_k(law), 0), beta_k = 1 at and beyond the
   limit, falling linearly to 0 across the margin (or from 1.0 to 0.9 x the speed limit): the command
   stays continuous; a speed row also gains no more speed in one step than is left to the limit,
   >= -(v_max - |v|)/dt.  The smallest correction (M^-1 metric) is tau_m + A^T mu, mu >= 0 from the
   LCP G mu + b >= 0, mu^T (G mu + b) = 0, G = A M^-1 A^T (closed form for one row, its active sets
   enumerated up to lcp.LCP_ENUMERATE rows, quadprog beyond: control/lcp.py);
3. repulsion and damping: along each such normal F_n = k (margin - s) + c ramp max(-n . v_f, 0) (a
   spring from the margin's edge; the approach is damped, leaving is free; ramp goes 0 -> 1 over the
   first DAMPING_RAMP of the margin so the command does not jump where a frame enters it), and above
   a speed limit F = -d (|v| - v_max) v/|v|; tau_m += J^T F;
4. the speed rows again, on the whole command (the repulsion can fling a frame): the fraction rule of
   2. on what 3. left, at least the row's own damping above the limit, the plane rows held at what
   2.-3. left them (the braking does not push a frame out);
5. beyond the effort limits: the law's share scaled back first, the envelope's correction kept;
6. the force limit, last: the wrench the command exerts at force_frame, F = (J J^T + l^2 I)^-1 J tau_m,
   clipped per axis and in norm (force and torque), tau_m <- tau_m - J^T (F - F_clipped).
Then enforce() takes the safety filter's output (rate-limited from the last command sent, clamped)
and puts it back within this step's rows: along each, at least the acceleration the envelope requires
(2.'s share of the law plus 3.'s repulsion and damping, 4.'s bound; never more than the target itself
gives, so a command already at the target is left alone), the smallest correction A^T mu, then the
force limit again.  Who wins when they conflict:
- the envelope over the torque-rate limit: its correction of the command sent is not rate-limited
  (the rate limit bounds every other change: the law's, the stop's, the start ramp's); the correction
  changes only as fast as the envelope's own terms (continuous: the fraction rule, the spring from the
  margin's edge, the ramped damping), and a step where it exceeds the rate is counted (rate_exceeded);
- the force limit over the workspace and speed rows: the command never exerts more than max_force /
  max_force_axis / max_torque at force_frame, even to hold or bring a frame back; a push larger than
  the force limit can answer moves the frame out (a violation, then the stop), it is not pushed back
  harder.  The force limit is about what the arm does to what it touches (a person pushing it out of a
  box must not be pushed back harder than that); the stop answers a frame held out;
- the effort limits over everything (the law's share is scaled back first).
7. stop: violations (a frame outside a plane, or faster than 1.05 x its limit) adding up to stop_time
   become a controlled stop.  The time counts while violated and leaks away at STOP_LEAK x dt while
   not, so an arm that keeps crossing a plane in short stretches is stopped too: outside a fraction f
   of the time with f > STOP_LEAK / (1 + STOP_LEAK) = 20 %, it is stopped after about
   stop_time / (f - (1 - f) STOP_LEAK) (an unbroken violation: after stop_time, as before).  The
   law's command is replaced by g(q) - D v (damping to rest) plus the repulsion of 3., then, once
   every joint is below rest_velocity, a hold K (q_rest - q) - D v + g(q) at the rest position
   (re-taken while a frame is still outside, so the hold never fights the repulsion), K at most
   STOP_HOLD_RATE^2 M_ii per joint (a hold's natural frequency within 40 rad/s: stop_stiffness 1000
   on the Panda's wrist diverged).  Only resume() leaves it (the loop then restarts the law without
   a jump).

Cost on the Panda with 3 frames and 6 planes: one forward kinematics and the clearances when nothing
is near a limit; Jacobians, M and the small LCP only when something is (bench/envelope.py).  Per active
step the factorizations are made once (M = U^T U, the LU of J J^T + l^2 I) and reused by every solve;
the LCP of up to lcp.LCP_ENUMERATE rows is solved exactly by enumerating its active sets (G positive
definite: one solution), quadprog beyond.
"""
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pinocchio as pin
from scipy.linalg.lapack import dgetrf, dgetrs, dpotrf, dpotrs

from .laws.base import check_scalar
from .lcp import solve_lcp
from .stages.safety import merged_params

STATES = ("off", "ok", "acting", "stopping", "stopped")
SPEED_BAND = 0.9          # the speed rows start at this fraction of the limit
SPEED_STOP = 1.05         # above this fraction of the limit for stop_time: a stop
PREDICT = 2.0             # steps ahead the speed is extrapolated to decide whether the speed rows act
STOP_DAMPING_STEP = 0.5  # the stop's joint damping at most this x M_ii / dt (discrete-time stable)
STOP_LEAK = 0.25         # the violation time shrinks at this x dt while nothing is violated (see 7.)
STOP_HOLD_RATE = 40.0    # rad/s: the stop's hold stiffness at most this^2 x M_ii per joint
APPROACH_SPEED = 0.02     # m/s: enforce() requires a plane's repulsion in full from this approach speed
DAMPING_RAMP = 0.25       # the approach damping ramps in over this fraction of the margin (continuous)
FORCE_REG = 1e-8 * np.eye(6)   # l^2 I of the force limit's damped pseudo-inverse


@dataclass
class EnvelopeParams:
    frames: list = field(default_factory=list)      # frames kept inside the workspace / under the speed
    radii: list = field(default_factory=list)       # m, 1 or one per frame (the sphere around the origin)
    planes: list = field(default_factory=list)      # 4 per plane: nx ny nz d, allowed n . p >= d (base)
    boxes: list = field(default_factory=list)       # 6 per box: xmin ymin zmin xmax ymax zmax (inside)
    margin: float = 0.05                            # m: where the repulsion starts
    stiffness: float = 1000.0                       # N/m of the repulsion
    damping: float = 100.0                          # N s/m on the approach inside the margin
    max_linear_speed: float = 0.0                   # m/s per frame; 0: no limit
    max_angular_speed: float = 0.0                  # rad/s per frame; 0: no limit
    speed_damping: float = 100.0                    # N s/m on the excess speed
    angular_speed_damping: float = 5.0              # N m s/rad on the excess angular speed
    force_frame: str = ""                           # where the force limit applies; "": the last frame
    max_force: float = 0.0                          # N, norm of the commanded force; 0: no limit
    max_force_axis: list = field(default_factory=lambda: [0.0, 0.0, 0.0])   # N per base axis; 0: none
    max_torque: float = 0.0                         # N m, norm of the commanded moment; 0: no limit
    stop_time: float = 0.5                          # s a violation may last before a stop; 0: no stop
    stop_damping: float = 10.0                      # N m s/rad of the stop
    stop_stiffness: float = 100.0                   # N m/rad of the hold after it
    rest_velocity: float = 0.02                     # rad/s: at rest below this (every joint)


def _floats(name, x, group=None):
    try:
        if isinstance(x, (str, bytes)) or any(isinstance(e, (bool, str, bytes)) for e in x):
            raise TypeError
        a = np.asarray(list(x), dtype=float).ravel()
    except (TypeError, ValueError):
        raise ValueError(f"safety.{name}: expected a list of numbers, got {x!r}") from None
    if not np.all(np.isfinite(a)):
        raise ValueError(f"safety.{name}: values must be finite, got {a.tolist()}")
    if group and a.size % group:
        raise ValueError(f"safety.{name}: expected {group} numbers per entry, got {a.size} numbers")
    return a


class SafetyEnvelope:
    def __init__(self, model, params=None):
        self.model = model
        self.nv = model.nv
        self.pm = model.pin_model
        self.pd = self.pm.createData()
        self._direct = model.q_identity and model.v_identity
        self._perm = None if model.v_identity else model.v_to_pin
        self._p = None
        self._post = None                  # this step's rows and requirement, for enforce()
        self._force = None                 # this step's (J, LU of J J^T + l^2 I) at force_frame
        self._a0 = np.zeros(self.nv)
        self.counts = {}
        self.set_params(params if params is not None else EnvelopeParams())
        self.state = "off" if not self.enabled else "ok"
        self.reasons = []
        self.violation_time = 0.0
        self._violated = False
        self.stop_reason = ""
        self.q_rest = None
        self.min_clearance = math.inf
        self.speed_ratio = 0.0
        self.last_violation = ""

    # ---- parameters ----
    @property
    def params(self):
        d = asdict(self._p)
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in d.items()}

    def set_params(self, params):
        """An EnvelopeParams or a dict of its fields (a dict updates the current values); validated as a
        whole: ValueError and the old parameters kept on any bad value."""
        new = merged_params(EnvelopeParams, self._p, params, "safety envelope")
        frames = new["frames"]
        if isinstance(frames, str) or not all(isinstance(f, str) for f in frames):
            raise ValueError(f"safety.frames: expected a list of frame names, got {frames!r}")
        frames = [f for f in frames if f]
        for f in frames:
            if f not in self.model.frame_ids:
                raise ValueError(f"safety.frames: unknown frame {f!r} (the model's frames include "
                                 f"{sorted(self.model.frame_names)[:12]} ...)")
        radii = _floats("frame_radii", new["radii"])
        if radii.size not in (0, 1, len(frames)):
            raise ValueError(f"safety.frame_radii: expected 1 or {len(frames)} values (one per frame), "
                             f"got {radii.size}")
        if np.any(radii < 0):
            raise ValueError("safety.frame_radii: must be >= 0")
        radii = np.broadcast_to(radii if radii.size else np.zeros(1), (len(frames),)).copy()
        planes = _floats("planes", new["planes"], 4).reshape(-1, 4)
        norms = np.linalg.norm(planes[:, :3], axis=1)
        if np.any(norms < 1e-9):
            raise ValueError(f"safety.planes: plane {int(np.flatnonzero(norms < 1e-9)[0])} has a zero normal")
        boxes = _floats("boxes", new["boxes"], 6).reshape(-1, 6)
        for i, b in enumerate(boxes):
            if np.any(b[:3] >= b[3:]):
                raise ValueError(f"safety.boxes: box {i} has min {b[:3].tolist()} not below max {b[3:].tolist()}")
        N, d = [planes[:, :3] / norms[:, None]], [planes[:, 3] / norms]
        for b in boxes:                                   # inside: x >= xmin, -x >= -xmax, ...
            N.append(np.vstack([np.eye(3), -np.eye(3)]))
            d.append(np.concatenate([b[:3], -b[3:]]))
        for k in ("margin", "stiffness", "damping", "max_linear_speed", "max_angular_speed", "speed_damping",
                  "angular_speed_damping", "max_force", "max_torque", "stop_time", "stop_damping",
                  "stop_stiffness"):
            new[k] = check_scalar(f"safety.{k}", new[k])
        new["rest_velocity"] = check_scalar("safety.rest_velocity", new["rest_velocity"], 0.0, lo_open=True)
        fa = _floats("max_force_axis", new["max_force_axis"])
        if fa.size != 3 or np.any(fa < 0):
            raise ValueError(f"safety.max_force_axis: expected 3 values >= 0, got {fa.tolist()}")
        ff = new["force_frame"] or ""
        if not isinstance(ff, str) or (ff and ff not in self.model.frame_ids):
            raise ValueError(f"safety.force_frame: unknown frame {ff!r}")
        if (planes.size or boxes.size or new["max_linear_speed"] or new["max_angular_speed"]) and not frames:
            raise ValueError("safety.frames: planes, boxes or speed limits are set but no frame to apply them to")
        # accepted: build
        new.update(frames=frames, radii=radii.tolist(), planes=planes.ravel().tolist(),
                   boxes=boxes.ravel().tolist(), max_force_axis=fa.tolist(), force_frame=ff)
        self._p = EnvelopeParams(**new)
        self.frames = frames
        self.fids = [self.model.frame_ids[f] for f in frames]
        self.r = radii
        self.N = np.vstack(N) if N else np.zeros((0, 3))
        self.d = np.concatenate(d) if d else np.zeros(0)
        self._static = (self.N, self.d)                    # (set_extra_planes appends to these)
        nf, nc = len(frames), self.N.shape[0]
        self._NT = np.ascontiguousarray(self.N.T)
        self._DR = self.d[None, :] + radii[:, None]        # d + r per frame and plane
        self._P, self._V, self._S = np.zeros((nf, 3)), np.zeros((nf, 6)), np.zeros((nf, nc))
        self._lin, self._ang = [0.0] * nf, [0.0] * nf
        self._lin_prev, self._ang_prev = [0.0] * nf, [0.0] * nf
        self.min_clearance = math.inf
        self.force_fid = self.model.frame_ids[ff] if ff else len(self.pm.frames) - 1
        self.force_name = ff or self.pm.frames[self.force_fid].name
        self._force_on = new["max_force"] > 0 or new["max_torque"] > 0 or bool(np.any(fa > 0))
        self._ws_on = bool(self.N.shape[0] and frames)
        self._speed_on = bool(frames) and (new["max_linear_speed"] > 0 or new["max_angular_speed"] > 0)
        self.enabled = self._ws_on or self._speed_on or self._force_on
        if getattr(self, "state", None) == "off" and self.enabled:
            self.state = "ok"
        elif not self.enabled and hasattr(self, "state"):
            self.state, self.violation_time, self._violated = "off", 0.0, False   # (a stop ends with it)

    @property
    def speed_rows(self):
        """The speed limits are on (a frame listed and a speed limit > 0)."""
        return self._speed_on

    @property
    def stopping(self):
        """The controlled stop is on (stopping or stopped, until resume())."""
        return self.state in ("stopping", "stopped")

    def set_extra_planes(self, N, d, frame):
        """Planes that move (control/arm_distance.py: another arm's frames), each for ONE of the
        envelope's frames: n_k . p_frame[k] >= d_k + r, handled as the static planes' rows.  Replaces
        the previous extra planes; empty arrays remove them."""
        N0, d0 = self._static
        N, d, frame = np.reshape(N, (-1, 3)), np.ravel(d), np.ravel(frame).astype(int)
        self.N, self.d = np.vstack([N0, N]), np.concatenate([d0, d])
        self._NT = np.ascontiguousarray(self.N.T)
        self._DR = self.d[None, :] + self.r[:, None]
        self._DR[:, N0.shape[0]:] = -np.inf                 # (not this frame's plane: s = +inf, never near)
        self._DR[frame, N0.shape[0] + np.arange(len(d))] = d + self.r[frame]
        self._S = np.zeros((len(self.fids), self.N.shape[0]))
        self._ws_on = bool(self.N.shape[0] and self.fids)
        self.enabled = self._ws_on or self._speed_on or self._force_on
        if self.state == "off" and self.enabled:
            self.state = "ok"

    def reference_speed_ratio(self, q, v):
        """The largest speed / limit of the listed frames if the arm moved at q with joint velocity v
        (a reference's: the time scaling of a trajectory); 0 without speed limits."""
        if not self._speed_on:
            return 0.0
        p = self._p
        pin.computeJointJacobians(self.pm, self.pd, self._pq(q))
        r = 0.0
        for fid in self.fids:
            t = self._jacobian(fid) @ v
            if p.max_linear_speed > 0:
                r = max(r, math.sqrt(t[0] * t[0] + t[1] * t[1] + t[2] * t[2]) / p.max_linear_speed)
            if p.max_angular_speed > 0:
                r = max(r, math.sqrt(t[3] * t[3] + t[4] * t[4] + t[5] * t[5]) / p.max_angular_speed)
        return r

    def shapes(self, plane_size=2.0):
        """The limits as drawable shapes (base frame), for markers: ("plane", point, normal, size) with
        the point of the plane nearest to the base origin, and ("box", center, extent)."""
        out = []
        for nx, ny, nz, d in np.asarray(self._p.planes, float).reshape(-1, 4):
            n = np.array([nx, ny, nz])
            k = np.linalg.norm(n)
            out.append(("plane", n * (d / k) / k, n / k, plane_size))
        for b in np.asarray(self._p.boxes, float).reshape(-1, 6):
            out.append(("box", 0.5 * (b[:3] + b[3:]), b[3:] - b[:3]))
        return out

    # ---- helpers ----
    def _flag(self, reason):
        self.reasons.append(reason)
        self.counts[reason] = self.counts.get(reason, 0) + 1

    def _pq(self, q):
        return q if self._direct else self.model.q_to_pin(q)

    def _pv(self, v):
        if self._perm is None:
            return v
        out = np.empty(self.nv)
        out[self._perm] = v
        return out

    def _jacobian(self, fid):
        J = pin.getFrameJacobian(self.pm, self.pd, fid, pin.LOCAL_WORLD_ALIGNED).reshape(6, -1)
        return J if self._perm is None else J[:, self._perm]

    # ---- the step ----
    def apply(self, tau, q, v, dt, gravity_in_tau=True, limit=None):
        """The law's command -> the command within the envelope (a new array; tau itself when the
        envelope is off or has nothing to do).  q, v in model order and finite (the loop checks them);
        dt: the time since the last step (a violation's duration); gravity_in_tau: tau contains g(q)
        (the law compensates gravity), else the driver adds it; limit: the effort limits the command
        will be clamped to (the safety filter's): a corrected command beyond them is scaled back
        along its motion part, so that the clamp does not undo the correction.  A non-finite tau is
        passed through (the safety filter answers it) unless a stop replaces it."""
        self._post = None
        self._force = None                  # the force limit's factors: made at this step's first use
        if not self.enabled:
            return tau
        if self.reasons:
            self.reasons = []
        p, pm, pd = self._p, self.pm, self.pd
        qp, vp = self._pq(q), self._pv(v)
        pin.forwardKinematics(pm, pd, qp, vp, self._a0)         # a = 0: the frames' drift J' v
        P, V, S, lin, ang = self._P, self._V, self._S, self._lin, self._ang
        LWA = pin.LOCAL_WORLD_ALIGNED
        for i, fid in enumerate(self.fids):
            P[i] = pin.updateFramePlacement(pm, pd, fid).translation
            if self._speed_on:
                V[i] = pin.getFrameVelocity(pm, pd, fid, LWA).vector
                w = V[i]
                lin[i] = math.sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2])
                ang[i] = math.sqrt(w[3] * w[3] + w[4] * w[4] + w[5] * w[5])
        if self._ws_on:
            np.matmul(P, self._NT, out=S)
            S -= self._DR                                   # s = n . p - d - r, frames x planes
            self.min_clearance = smin = float(S.min())
        else:
            smin = math.inf
        ratio = pred = 0.0
        lp, ap = self._lin_prev, self._ang_prev
        if self._speed_on:
            # the speed a step or two ahead at the last step's change: a law accelerating a frame hard
            # crosses the band between two steps, so the rows must start before it is reached
            if p.max_linear_speed > 0:
                ratio = max(lin) / p.max_linear_speed
                pred = max(s + PREDICT * max(s - s0, 0.0) for s, s0 in zip(lin, lp)) / p.max_linear_speed
            if p.max_angular_speed > 0:
                ratio = max(ratio, max(ang) / p.max_angular_speed)
                pred = max(pred, max(s + PREDICT * max(s - s0, 0.0) for s, s0 in zip(ang, ap))
                           / p.max_angular_speed)
            self._lin_prev, self._ang_prev = lin[:], ang[:]
        self.speed_ratio = ratio
        if smin < 0.0 or ratio > SPEED_STOP or self._violated:
            self._track_violation(S, dt)
        stop = self.state in ("stopping", "stopped")
        if not (stop or smin < p.margin or pred > SPEED_BAND or self._force_on):
            if self.state == "acting":
                self.state = "ok"
            return tau
        if not stop and not math.isfinite(float(np.dot(tau, tau))):
            return tau
        near = S < p.margin
        # the slow path: Jacobians (of the frames concerned), g, M
        pin.computeJointJacobians(pm, pd, qp)
        g = pin.computeGeneralizedGravity(pm, pd, qp)
        g = g.copy() if self._perm is None else g[self._perm]
        M = self._mass(qp) if stop else None            # (the rows' M too: one crba a step)
        if stop:
            tau_m = self._stop_torque(q, v, M, dt)
        else:
            tau_m = tau - g if gravity_in_tau else tau.copy()
            if self._force_on:                          # the law's own push bounded first (and 6.)
                tau_m = self._force_limit(tau_m)
        Js = {}
        rows, lb_frac, mags, drift, floor, approach = [], [], [], [], [], []
        h = dt if 0.0 < dt <= 0.1 else 1e-3                # the step to come lasts about as long
        margin = p.margin
        for i, j in zip(*np.nonzero(near)):                 # planes: 2.-3. of the module docstring
            J = Js.get(i)
            if J is None:
                J = Js[i] = self._jacobian(self.fids[i])
                if not self._speed_on:                  # the velocity: only now needed
                    V[i] = pin.getFrameVelocity(pm, pd, self.fids[i], LWA).vector
            n, s = self.N[j], float(S[i, j])
            rows.append(n @ J[:3])
            lb_frac.append(0.0 if s <= 0.0 or margin <= 0.0 else s / margin)       # 1 - beta
            vn = float(n @ V[i, :3])
            ramp = 1.0 if margin <= 0.0 else min(1.0, (margin - s) / (DAMPING_RAMP * margin))
            mags.append(p.stiffness * (margin - s) + (p.damping * ramp * -vn if vn < 0.0 else 0.0))
            floor.append(-math.inf)
            approach.append(min(1.0, max(-vn, 0.0) / APPROACH_SPEED))
        if rows:
            self._flag("workspace")
        n_planes = len(rows)
        for i in range(len(self.fids) if self._speed_on else 0):
            for k, (sp, sp0, vmax, dmp) in enumerate((
                    (lin[i], lp[i], p.max_linear_speed, p.speed_damping),
                    (ang[i], ap[i], p.max_angular_speed, p.angular_speed_damping))):
                if vmax <= 0 or sp + PREDICT * max(sp - sp0, 0.0) <= SPEED_BAND * vmax or sp < 1e-9:
                    continue
                J = Js.get(i)
                if J is None:
                    J = Js[i] = self._jacobian(self.fids[i])
                u = V[i, 3 * k:3 * k + 3] / -sp                                # against the motion
                rows.append(u @ J[3 * k:3 * k + 3])
                acc = pin.getFrameClassicalAcceleration(pm, pd, self.fids[i], LWA)
                drift.append(float(u @ (acc.linear if k == 0 else acc.angular)))     # u . J' v
                lb_frac.append(1.0 - min(1.0, max(0.0, (sp - SPEED_BAND * vmax) / ((1.0 - SPEED_BAND) * vmax))))
                mags.append(dmp * (sp - vmax) if sp > vmax else 0.0)
                floor.append(-max(vmax - sp, 0.0) / h)       # no more speed gained in a step than is left
                self._flag("speed")
        gc = g if gravity_in_tau else 0.0
        law_m = tau_m
        post = self._post = {"gc": gc, "g": g, "rows": None}
        if rows:
            A = np.array(rows)
            rows_ = self._rows(A, drift, self._mass(qp) if M is None else M, qp, vp, g)
            if rows_ is not None:
                G, W, off = rows_
                # (no_rule, for enforce(): + 0 where the fraction is below 1, + -inf (no fraction rule) at 1)
                no_rule = [0.0 if f < 1.0 else -math.inf for f in lb_frac]
                frac, mags, floor, no_rule = np.array([lb_frac, mags, floor, no_rule])
                dmag = G.diagonal() * mags              # a speed row's own damping, as an acceleration
                # 2. the law's push outward, a fraction 1 - beta of it let through
                a0 = self._acc(W, tau_m, off)
                lb1 = np.maximum(frac * np.minimum(a0, 0.0), floor)
                mu = self._lcp(G, a0 - lb1)
                # 3. the repulsion and the speed damping, J^T F
                mu = mags if mu is None else mu + mags
                tau_m = tau_m + A.T @ mu
                a1 = a0 + G @ mu
                # 4. the whole command (the repulsion too) under the speed rows: a frame above 0.9 x its
                # limit gains speed from the command only by the fraction 1 - beta; the plane rows keep
                # the acceleration outward at what 2.-3. left (no more pushed out by the braking)
                # (above the limit: at least the deceleration the row's damping alone gives, whatever
                # the other rows' forces do to this frame)
                lb2 = np.maximum(np.maximum(frac * np.minimum(a1, 0.0), floor), dmag)
                lb2[:n_planes] = np.minimum(a1[:n_planes], 0.0)
                mu2 = self._lcp(G, a1 - lb2)
                if mu2 is not None:
                    tau_m = tau_m + A.T @ mu2
                    a1 = a1 + G @ mu2
                # for enforce(), each row's fixed lower bound: a plane row, the repulsion's acceleration
                # it requires of the command sent (w: the approach weight, 0 for the speed rows); a speed
                # row, its floor for the step and its damping: max(floor, dmag)
                w = np.array(approach + [0.0] * (len(mags) - n_planes))
                low = np.maximum(floor, dmag)
                low[:n_planes] = G[:n_planes] @ (w * mags)
                post["rows"] = (A, G, W, off, frac, no_rule, low)
        if limit is not None:                           # the law's share scaled back first
            tau_m = self._within(tau_m - law_m, law_m + gc, limit, base=law_m)
        if self._force_on:                              # 5. the force limit: last, it wins
            tau_m = self._force_limit(tau_m)
        if not stop:
            self.state = "acting" if rows or self.reasons else "ok"
        out = tau_m + gc
        if post["rows"] is not None:                     # what the target itself achieves along the rows
            # (from out - gc, the motion part enforce() sees when handed the target: a command already at
            # the target is left alone, not corrected by the rounding of (tau_m + gc) - gc)
            post["rows"] += (self._acc(W, out - gc, off),)
        return out

    def enforce(self, tau, limit=None):
        """The command as it will be sent (the safety filter's output: rate-limited, clamped) -> within
        this step's envelope again: a new array, or tau itself when nothing had to change.

        The safety filter's torque-rate limit moves the command from the last one sent toward apply()'s
        target one rate step at a time; left alone it undoes the envelope's correction (a frame driven
        through a plane while the command catches up).  So, after the filter: along every row apply()
        used (a plane within its margin, a frame above 0.9 x its speed limit), the command sent must give
        the frame at least the acceleration the envelope requires (the law's push outward only by the
        fraction 1 - beta, plus the repulsion's and the damping's acceleration; never more than the
        target itself gives), the smallest correction A^T mu in the M^-1 metric, scaled back only as
        far as the effort limits need; then the force limit.  The envelope wins over the rate limit:
        this correction is not rate-limited (it changes only as fast as the envelope's own terms: the
        repulsion is a spring from the margin's edge, its damping ramps in over the first quarter of the
        margin); the force limit wins over both.  Call it after apply() in the same step."""
        post = self._post
        if post is None:
            return tau
        self._post = None
        gc, rows = post["gc"], post["rows"]
        tau_m = tau - gc
        changed = False
        if rows is not None:
            A, G, W, off, frac, no_rule, low, a_target = rows
            a = self._acc(W, tau_m, off)
            # each row bounds the command sent by its own acceleration, not the law's (a law that
            # changes at once, a resume, a new reference, would make the bound jump): the fraction rule
            # on it where the fraction is below 1 (a plane: no push outward at and beyond it; a speed
            # row: no gain above the limit), and the row's fixed bound `low`: a speed row's floor for
            # the step and its damping above the limit; a plane row's repulsion while the frame
            # approaches (weighted by its approach speed, full from APPROACH_SPEED: a frame at rest,
            # as at a resume, gets it through the rate limit).  (+ no_rule: -inf drops the fraction rule
            # where the fraction is 1, + 0 keeps it elsewhere)
            req = np.maximum(frac * np.minimum(a, 0.0) + no_rule, low)
            mu = self._lcp(G, a - np.minimum(req, a_target))
            if mu is not None:
                corr = A.T @ mu
                if limit is not None:
                    corr = self._within(corr, tau, limit)
                tau_m = tau_m + corr
                changed = True
        if self._force_on:
            t = self._force_limit(tau_m)
            changed = changed or t is not tau_m
            tau_m = t
        if not changed:
            return tau
        out = tau_m + gc
        if limit is not None:                           # (np.clip's arithmetic, without its overhead)
            np.minimum(np.maximum(out, -limit, out=out), limit, out=out)
        self._flag("enforced")
        return out

    def _within(self, tau_m, gc, limit, base=None):
        """alpha tau_m with the largest alpha in [0, 1] that keeps |alpha tau_m + gc| <= limit per joint
        (the correction's direction kept; gc within the limits, else unchanged).  With base (the law's
        motion share, gc = base + g): base is scaled back first, the envelope's correction tau_m kept,
        beta base + tau_m with the largest beta in [0, 1] within the limits; only if none is, the
        correction too (beta = 0).  Returns the whole motion part."""
        cmd = tau_m + gc
        if (np.abs(cmd) <= limit).all():
            return tau_m if base is None else tau_m + base
        self._flag("effort_scaled")
        if base is not None:
            g0 = gc - base                               # gravity (or 0)
            fixed = tau_m + g0                           # with beta = 0
            lo_b, hi_b = 0.0, 1.0
            with np.errstate(divide="ignore", invalid="ignore"):
                u = (limit - fixed) / base               # beta base + fixed <= limit
                l = (-limit - fixed) / base              # >= -limit
            pos, neg = base > 0, base < 0
            if np.any(pos):
                hi_b = min(hi_b, float(np.min(u[pos])))
                lo_b = max(lo_b, float(np.max(l[pos])))
            if np.any(neg):
                hi_b = min(hi_b, float(np.min(l[neg])))
                lo_b = max(lo_b, float(np.max(u[neg])))
            zero = ~(pos | neg)
            if hi_b >= lo_b and np.all(np.abs(fixed[zero]) <= limit[zero] + 1e-12):
                return tau_m + hi_b * base
            return self._within(tau_m, g0, limit)
        # a joint whose share of the correction is rounding-size (below 1e-9 of its largest) does not
        # decide alpha: at its limit already, it would drop the whole correction (alpha 0) for 1e-30 N m;
        # the clamp after takes that share
        small = np.abs(tau_m) <= 1e-9 * float(np.abs(tau_m).max())
        with np.errstate(divide="ignore", invalid="ignore"):
            hi = np.where(tau_m > 0, (limit - gc) / tau_m, np.where(tau_m < 0, (-limit - gc) / tau_m, np.inf))
        hi[small] = np.inf
        alpha = float(np.clip(np.min(hi), 0.0, 1.0))
        return alpha * tau_m

    def _mass(self, qp):
        """M(q), model order."""
        M = pin.crba(self.pm, self.pd, qp)
        return M if self._perm is None else M[np.ix_(self._perm, self._perm)]

    def _rows(self, A, drift, M, qp, vp, g):
        """(G = A M^-1 A^T regularized, W = A M^-1, off) for the rows A (the speed rows last, drift their
        u . J' v): off the rows' accelerations that do not come from the command (a speed row:
        u . J' v - a M^-1 C(q, v) v; a plane: 0; None without speed rows), so that a command tau_m gives
        the rows W tau_m + off (_acc); None if M is not positive definite."""
        U, info = dpotrf(M, lower=0, clean=0)           # M = U^T U (upper triangle read)
        if info != 0:
            return None
        k, n_speed = A.shape[0], len(drift)
        if n_speed:                                     # the speed rows: the frame's whole acceleration
            B = np.empty((self.nv, k + 1))
            B[:, :k] = A.T
            c = pin.nonLinearEffects(self.pm, self.pd, qp, vp)
            B[:, k] = (c if self._perm is None else c[self._perm]) - g          # C(q, v) v
        else:
            B = A.T
        Y = dpotrs(U, B, lower=0)[0]                     # M^-1 [A^T, C v]
        X = A @ Y                                        # A M^-1 [A^T, C v]
        G = X[:, :k]
        reg = 1e-10 * max(G.trace(), 1e-300)
        G = 0.5 * (G + G.T)                             # + reg I: positive definite, as a regularization
        G.flat[::k + 1] += reg
        off = None
        if n_speed:
            Cv = X[k - n_speed:, k].tolist()            # a M^-1 C v of the speed rows
            off = np.array([0.0] * (k - n_speed) + [dr - x for dr, x in zip(drift, Cv)])
        return G, Y[:, :k].T, off                       # (W = A M^-1 = (M^-1 A^T)^T: once for every _acc)

    @staticmethod
    def _acc(W, tau_m, off):
        """The rows' accelerations under the command tau_m: A M^-1 tau_m + off."""
        a = W @ tau_m
        return a if off is None else a + off

    _lcp = staticmethod(solve_lcp)      # (a method: a test's reference envelope replaces it)

    def _force_limit(self, tau_m):
        p = self._p
        if self._force is None:
            # this step's Jacobian (computeJointJacobians of apply()) and LU factors of J J^T + l^2 I,
            # for every force limit of the step (apply's two, enforce's): the arithmetic of
            # np.linalg.solve (LAPACK dgesv = dgetrf, then dgetrs), the factorization made once
            J = self._jacobian(self.force_fid)
            lu, piv, _ = dgetrf(J @ J.T + FORCE_REG)
            self._force = (J, lu, piv)
        J, lu, piv = self._force
        F = dgetrs(lu, piv, J @ tau_m)[0].tolist()     # F = J^+T tau_m (the wrench it exerts)
        Fc = F[:]
        fa = p.max_force_axis
        for k in range(3):
            if fa[k] > 0:
                Fc[k] = min(max(Fc[k], -fa[k]), fa[k])
        for i, lim in ((0, p.max_force), (3, p.max_torque)):
            x, y, z = Fc[i:i + 3]
            nrm = math.sqrt(x * x + y * y + z * z)       # (the same sum as np.linalg.norm's)
            if lim > 0 and nrm > lim:
                s = lim / nrm
                Fc[i:i + 3] = x * s, y * s, z * s
        if Fc != F:
            self._flag("force")
            tau_m = tau_m - J.T @ np.array([f - fc for f, fc in zip(F, Fc)])
        return tau_m

    def _track_violation(self, S, dt):
        """How long the current violation has lasted; a stop when it reaches stop_time."""
        p = self._p
        self._violated = self.min_clearance < 0.0 or self.speed_ratio > SPEED_STOP
        if not self._violated:
            if dt > 0 and math.isfinite(dt):               # cumulative: leaks away while inside
                self.violation_time = max(self.violation_time - STOP_LEAK * dt, 0.0)
            return
        if self.min_clearance < 0.0:
            i, j = np.unravel_index(int(np.argmin(S)), S.shape)
            self.last_violation = (f"{self.frames[i]} {-self.min_clearance * 1000:.1f} mm outside plane {j} "
                                   f"(n {np.round(self.N[j], 3).tolist()}, d {self.d[j]:.3f})")
        else:
            self.last_violation = f"a frame at {self.speed_ratio:.2f} x its speed limit"
        self.violation_time += dt if dt > 0 and math.isfinite(dt) else 0.0
        if p.stop_time > 0 and self.violation_time >= p.stop_time and self.state not in ("stopping", "stopped"):
            self.state = "stopping"
            self.counts["stops"] = self.counts.get("stops", 0) + 1
            self.stop_reason = f"{self.last_violation} for {self.violation_time:.3f} s"

    def _stop_torque(self, q, v, M, dt):
        """The stop's torque beyond gravity.  Its joint damping is bounded per joint by STOP_DAMPING_STEP
        M_ii / dt: a damping D with D dt / M_ii > 2 is unstable in discrete time (the Panda's last joint,
        M_77 ~ 0.005 kg m^2, at 1 kHz: D > 10 N m s/rad), a period-2 oscillation the rate limit then
        sustains instead of a rest."""
        p = self._p
        h = dt if 0.0 < dt <= 0.1 else 1e-3
        d = np.minimum(p.stop_damping, STOP_DAMPING_STEP * M.diagonal() / h)
        if self.state == "stopping" and max(map(abs, v.tolist())) < p.rest_velocity:
            self.state = "stopped"
            self.q_rest = np.array(q, dtype=float)
        if self.state == "stopped":
            if self.min_clearance < 0.0 or self.q_rest is None:
                self.q_rest = np.array(q, dtype=float)       # outside: the repulsion brings it in first
            k = np.minimum(p.stop_stiffness, STOP_HOLD_RATE * STOP_HOLD_RATE * M.diagonal())
            return k * (self.q_rest - q) - d * v
        return -d * v

    def stop(self, reason):
        """Start the controlled stop now (the loop's joint speed stop, when the envelope is on: its
        repulsion goes on during the stop); nothing when already stopping or stopped."""
        if self.enabled and self.state not in ("stopping", "stopped"):
            self.state = "stopping"
            self.counts["stops"] = self.counts.get("stops", 0) + 1
            self.stop_reason = reason

    def resume(self):
        """Leave a stop: refused while a frame is outside or too fast."""
        if self.state not in ("stopping", "stopped"):
            return False, f"not stopped (envelope {self.state})"
        if self._violated:
            return False, f"still violated: {self.last_violation}"
        self.state = "ok"
        self.violation_time = 0.0
        self.q_rest = None
        return True, "resumed"
