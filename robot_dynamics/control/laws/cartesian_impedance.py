"""Cartesian impedance control of one frame, with a dynamically consistent nullspace posture task:

    e     = [p_d - p; log3(R_d R^T)]                 pose error, world-aligned axes (not Euler angles)
    xdot  = J v                                      J: frame Jacobian, local_world_aligned
    F     = Lambda xddot_d + K e + D (xdot_d - xdot) + F_d     K, D (world-aligned axes)
            [- Lambda Jdot v]                        with velocity_product_compensation
    tau   = J^T F + g(q) + N^T tau0  [+ C(q, v) v  with velocity_product_compensation]  [+ friction]
    tau0  = K_ns (q_ns - q) - D_ns v                 posture torque
    N^T   = I - J^T Lambda J M^-1                    so that J M^-1 N^T tau0 = 0 (no task acceleration)
    Lambda = (J M^-1 J^T + lambda^2 I)^-1            task-space inertia, regularised near singularities

M^-1 is never formed: M = U^T U (LAPACK dpotrf on the 7x7), X = M^-1 J^T by dpotrs, then
J M^-1 J^T = J X, and J M^-1 tau0 = X^T tau0.  Lambda is applied through the Cholesky factor of the
6x6 (its diagonal, for the damping, from the inverse of the triangular factor).  lambda = damped_pinv_lambda bounds Lambda (and the
derived damping) near singularities; lambda = 0 gives the exact projector.

Damping.  Task: with none of task.d_* given, the full 6x6 matrix

    D = 2 zeta Lambda^1/2 (Lambda^-1/2 K Lambda^-1/2)^1/2 Lambda^1/2         zeta = task.damping_ratio

which gives every mode of the task-space error dynamics Lambda e'' + D e' + K e = 0 (the frame's
dynamics seen through Lambda, nullspace and velocity-product terms aside) the damping ratio zeta:
"critical" (zeta = 1) means each generalised eigenmode K phi = w^2 Lambda phi is damped with 2 w.
K here is the nominal stiffness of all six axes (on force axes too, so that they keep their damping).
Computed as 2 zeta K^1/2 (K^1/2 A K^1/2)^-1/2 K^1/2 from A = Lambda^-1 itself (damping.MeanDamping: one 6x6
eigensolve, no inverse, D applied to the velocity error without being formed); with a zero stiffness
(or one below damping.MEAN_DAMPING_SPREAD of the largest) or a given axis, from the Cholesky factor of A
(damping.critical_damping).
Axes whose task.d_* is given use that value, decoupled (their rows and columns of D replaced by it).
All given: D = diag(task.d_*).  Nullspace: nullspace_damping when given (diagonal), else
D_ns = 2 zeta_ns M^1/2 (M^-1/2 K_ns M^-1/2)^1/2 M^1/2 with zeta_ns = nullspace_damping_ratio: critical
for the posture task M e'' + D_ns e' + K_ns e = 0 in joint space (one 7x7 eigensolve of
K_ns^-1/2 M K_ns^-1/2); the projection N^T then removes what
would move the task, so in the nullspace it is critical only approximately.  The posture error
q_ns - q of continuous joints is the shortest angle.

Force axes: force_axes (6 bools, world-aligned [x y z rx ry rz]) switch those axes from stiffness to
explicit force control of the wrench the robot exerts, F_d (from the reference), using the measured
wrench (State.wrench, the environment on the robot, so the robot exerts -State.wrench):
    F_i = F_d,i + force_kp (F_d,i - F_i,meas) + force_ki int(F_d,i - F_i,meas) dt - (D xdot)_i
Anti-windup: the stored integral itself is clamped so that |force_ki_i int_i| <= force_integral_limit
(a contact after a long free-space phase acts at once, no wind-down); it is cleared on reset, when the
reference wrench or the force axes change, and on axes whose force_ki is 0.  No wrench in the state:
open loop F_d.  max_pos_error / max_rot_error clip the norm of the pose error over the stiffness axes
only (the error along a force axis neither counts nor is clipped: its stiffness is off).

References (feed-forward).  A CartesianReference carries x_d = (R_d, p_d) and optionally xdot_d (twist)
and xddot_d (accel), world-aligned [linear; angular].  The acceleration enters as Lambda xddot_d (zero on
force axes); the velocity through the damping of the velocity error.  With velocity_product_compensation
the law also adds C(q, v) v - J^T Lambda Jdot v (Jdot v: the frame's classical acceleration at zero joint
acceleration), so that with lambda = 0 the task error obeys Lambda e'' + D e' + K e = 0 exactly (rotation
error to first order) whatever the path: tracking a moving reference needs no error to drive it.
- A CartesianTrajectory (control/cartesian_trajectory.py, from a MultiDOFJointTrajectory) is started at
  the first compute after it is set, from the current desired pose and twist (so the commanded force does
  not step), with the approach bounded by approach_linear_velocity / _angular_velocity /
  _linear_acceleration / _angular_acceleration, and sampled every compute at state.t (R_d, p_d, twist,
  accel); after its end the last pose is held.
- A streamed reference (a pose at some rate, e.g. ~/target_pose + ~/target_twist) is held between
  messages as a first-order hold: at law time t the desired pose is the reference moved along its twist
  (and accel) for tau = t - t_arrival (t_arrival: the first compute that saw it), p_d + v tau + a tau^2/2,
  Exp((w tau + alpha tau^2/2)) R_d, for tau <= reference_extrapolation seconds; beyond that (a stream
  that stopped) the pose at the horizon is held with zero twist and accel.  0: zero-order hold.
- estimate_target_velocity: a streamed pose without a twist gets one from the previous streamed pose,
  (difference) / (difference of arrival times), when they arrived less than reference_extrapolation
  apart (first-order hold of a pose-only stream).
- target_jump_pos / target_jump_rot (m, rad; 0: off): a streamed pose farther than that from the
  current desired pose is not stepped to: the law approaches it along a bounded trajectory (the
  approach bounds above), replanned from the current desired pose and twist if more far targets arrive.

Pinocchio fast path (see base): crba, generalized gravity, joint Jacobians and the frame placement
are called directly on backend.pm / backend.data.
"""
import math

import numpy as np
import pinocchio as pin
from scipy.linalg.lapack import dpotrf, dpotrs, dtrtri

from ..cartesian_trajectory import CartesianTrajectory
from .base import (GAIN_MAX, CartesianReference, ControlLaw, check_bool, check_gain, check_gains, check_scalar,
                   check_vector, shortest_error)
from .damping import critical_damping, mean_damping
from ...dynamics.reference import spatial

_AX = ("x", "y", "z")
_LWA = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED


def _task_keys():
    keys = {}
    for kind, default in (("pos", 200.0), ("rot", 20.0)):
        for a in _AX:
            keys[f"task.k_{kind}_{a}"] = default
            keys[f"task.d_{kind}_{a}"] = None
    keys["task.damping_ratio"] = 1.0
    return keys


class CartesianImpedance(ControlLaw):
    name = "cartesian_impedance"
    DEFAULTS = dict(_task_keys(), **{
        "frame": None,                    # default: the last frame of the model (usually the tool tip)
        "nullspace_stiffness": 10.0,      # N m/rad, one number or nv
        "nullspace_damping": None,        # N m s/rad; default 2 zeta_ns M # K_ns (critical matrix)
        "nullspace_damping_ratio": 1.0,   # zeta_ns of the derived nullspace damping
        "q_nullspace": None,              # posture; default the q at reset
        "damped_pinv_lambda": 0.01,
        "force_axes": [False] * 6,
        "force_kp": 0.0,
        "force_ki": 0.0,
        "force_integral_limit": 20.0,     # bound on the integral term [N | N m]
        "max_pos_error": 0.0,             # clip |p_d - p| to this [m]; 0: no clipping
        "max_rot_error": 0.0,             # clip the rotation error angle [rad]; 0: no clipping
        "velocity_product_compensation": False,   # add C v - J^T Lambda Jdot v
        "reference_extrapolation": 0.1,   # s: first-order hold horizon of a streamed reference; 0: off
        "estimate_target_velocity": False,  # pose-only stream: twist from consecutive poses
        "target_jump_pos": 0.0,           # m: approach (not step to) a pose farther than this; 0: off
        "target_jump_rot": 0.0,           # rad: the same for the rotation
        "approach_linear_velocity": 0.25,     # m/s    approach bounds (trajectory start, jumps)
        "approach_angular_velocity": 1.0,     # rad/s
        "approach_linear_acceleration": 1.0,  # m/s^2
        "approach_angular_acceleration": 4.0,  # rad/s^2
    })

    stiffness_keys = tuple(f"task.k_{k}_{a}" for k in ("pos", "rot") for a in "xyz")
    damping_ratio_key = ("task.damping_ratio", None)

    def gain_problem(self, M, jacobian, w2, how):
        """k_pos <= w2 x the smallest translational task-space inertia, k_rot the rotational one."""
        J = np.asarray(jacobian(self.frame))
        Minv_Jt = np.linalg.solve(M, J.T)
        for rows, what, unit in ((slice(0, 3), "pos", "N/m"), (slice(3, 6), "rot", "N m/rad")):
            A = J[rows] @ Minv_Jt[:, rows]                 # the inverse task-space inertia block
            lam = 1.0 / max(float(np.linalg.eigvalsh(A).max()), 1e-300)
            k = float(np.max(self.K[rows]))
            if k > w2 * lam:
                return (f"cartesian_impedance.task.k_{what}_*: {k:g} {unit} is above its bound {w2 * lam:.4g} "
                        f"= the smallest task-space inertia {lam:.4g} x {how} at the current pose: refused")
        return ""

    def __init__(self, model, backend, params=None):
        n = model.nv
        self.clipped = False                    # the last compute clipped the pose error
        self._J = np.zeros((6, n))
        self._e = np.zeros(6)
        self._F = np.zeros(6)
        self._xd = np.zeros(6)
        self._tau0 = np.zeros(n)
        self._zero_v = np.zeros(n)
        self._integral = np.zeros(6)
        self._t_last = None
        self.R_d, self.p_d = None, None
        self.twist_d = np.zeros(6)
        self.accel_d = np.zeros(6)
        self.wrench_d = np.zeros(6)
        self.trajectory = None
        self._stream = None                   # (R, p, twist, accel) of the streamed reference
        self._stream_t = None                 # its arrival (law time), None until the first compute
        self._stream_prev = None              # (t, R, p) of the previous streamed pose
        self._stream_estimated = False
        self.q_ns = None
        super().__init__(model, backend, params)
        self.info.reference = np.zeros(7)
        self.info.error = np.zeros(6)

    # ---- parameters ----
    def _preprocess_merged(self, p, new):
        for k in ("nullspace_damping", "q_nullspace") + tuple(k for k in p if k.startswith("task.d_")):
            if isinstance(p.get(k), (list, tuple, np.ndarray)) and len(p[k]) == 0:
                p[k] = None

    def _validate(self, p):
        n = self.nv
        frame = p["frame"]
        if frame is None or frame == "":
            frame = self.model.frame_names[-1]
        if not isinstance(frame, str):
            raise ValueError(f"frame: expected a frame name, got {frame!r}")
        try:
            self.model.check_frame(frame)
        except ValueError as e:
            raise ValueError(f"frame: {e}") from None
        p["frame"] = frame
        for kind in ("pos", "rot"):
            for a in _AX:
                p[f"task.k_{kind}_{a}"] = check_gain(f"task.k_{kind}_{a}", p[f"task.k_{kind}_{a}"])
                p[f"task.d_{kind}_{a}"] = check_gain(f"task.d_{kind}_{a}", p[f"task.d_{kind}_{a}"],
                                                     allow_none=True)
        p["task.damping_ratio"] = check_gain("task.damping_ratio", p["task.damping_ratio"])
        p["nullspace_stiffness"] = check_gains("nullspace_stiffness", p["nullspace_stiffness"], n)
        p["nullspace_damping"] = check_gains("nullspace_damping", p["nullspace_damping"], n, allow_none=True)
        p["nullspace_damping_ratio"] = check_gain("nullspace_damping_ratio", p["nullspace_damping_ratio"])
        p["q_nullspace"] = check_vector("q_nullspace", p["q_nullspace"], n, lo=-GAIN_MAX, allow_none=True,
                                        hi=GAIN_MAX)
        p["damped_pinv_lambda"] = check_gain("damped_pinv_lambda", p["damped_pinv_lambda"])
        fa = p["force_axes"]
        if isinstance(fa, (str, bytes)) or not hasattr(fa, "__len__") or len(fa) != 6:
            raise ValueError(f"force_axes: expected 6 booleans, got {fa!r}")
        p["force_axes"] = [check_bool(f"force_axes[{i}]", x) for i, x in enumerate(fa)]
        p["force_kp"] = check_vector("force_kp", p["force_kp"], 6)
        p["force_ki"] = check_vector("force_ki", p["force_ki"], 6)
        p["force_integral_limit"] = check_scalar("force_integral_limit", p["force_integral_limit"])
        p["max_pos_error"] = check_scalar("max_pos_error", p["max_pos_error"])
        p["max_rot_error"] = check_scalar("max_rot_error", p["max_rot_error"])
        for k in ("velocity_product_compensation", "estimate_target_velocity"):
            p[k] = check_bool(k, p[k])
        for k in ("reference_extrapolation", "target_jump_pos", "target_jump_rot"):
            p[k] = check_scalar(k, p[k])
        for k in ("approach_linear_velocity", "approach_angular_velocity", "approach_linear_acceleration",
                  "approach_angular_acceleration"):
            p[k] = check_scalar(k, p[k], 0.0, lo_open=True)

    def _apply(self, p):
        frame_changed = getattr(self, "frame", None) not in (None, p["frame"])
        self.frame = p["frame"]
        self.fid = self.model.frame_ids[self.frame]
        self.K = np.array([p[f"task.k_{k}_{a}"] for k in ("pos", "rot") for a in _AX])
        d = [p[f"task.d_{k}_{a}"] for k in ("pos", "rot") for a in _AX]
        self.d_given = np.array([x is not None for x in d])
        self.D_fixed = np.array([0.0 if x is None else x for x in d])
        self._all_d_given = bool(np.all(self.d_given))
        self._two_zeta = 2.0 * p["task.damping_ratio"]
        self._dgiven_idx = np.flatnonzero(self.d_given)
        self.K_ns = p["nullspace_stiffness"].copy()
        self.D_ns = None if p["nullspace_damping"] is None else p["nullspace_damping"].copy()
        self._two_zeta_ns = 2.0 * p["nullspace_damping_ratio"]
        # the damping designs from one eigensolve each (damping.MeanDamping) where every stiffness is > 0
        # (and within MEAN_DAMPING_SPREAD of the largest: damping.mean_damping)
        self._mean = mean_damping(self.K, self._two_zeta)
        self._mean_ns = mean_damping(self.K_ns, self._two_zeta_ns)
        if p["q_nullspace"] is not None:
            self.q_ns = p["q_nullspace"].copy()
        self.lam2 = p["damped_pinv_lambda"] * p["damped_pinv_lambda"]
        S = np.array(p["force_axes"], dtype=bool)
        if getattr(self, "S", None) is not None and not np.array_equal(S, self.S):
            self._integral[:] = 0.0           # other force axes: the old integral means nothing
        self.S = S
        self._any_force = bool(self.S.any())
        self._stiff = ~S                      # the axes whose error is clipped
        self.force_kp, self.force_ki = p["force_kp"].copy(), p["force_ki"].copy()
        self._integral[self.force_ki == 0.0] = 0.0
        if frame_changed:
            self.R_d = None                   # re-taken from the current pose at the next compute

    # ---- reference ----
    def reset(self, state):
        """Hold the current pose; posture = current q (unless q_nullspace is set); clear the force
        integral."""
        q = np.array(state.q, dtype=float)
        if q.shape != (self.model.nq,) or not np.all(np.isfinite(q)):
            raise ValueError(f"{self.name}.reset: q must be {self.model.nq} finite values")
        R, p = self.dyn.frame_placement(q, self.frame)
        self.R_d, self.p_d = np.array(R), np.array(p)
        self._quat_d = spatial.matrix_to_quat(self.R_d)
        self.twist_d[:] = 0.0
        self.accel_d[:] = 0.0
        self.wrench_d[:] = 0.0
        self.trajectory = None
        self._stream = self._stream_t = self._stream_prev = None
        self.q_ns = q.copy() if self._params["q_nullspace"] is None else self._params["q_nullspace"].copy()
        self._integral[:] = 0.0
        self._t_last = None
        self.info.status = "holding"

    def set_reference(self, ref):
        """A CartesianReference (streamed: held with a first-order hold, see the module doc) or a
        CartesianTrajectory (started at the next compute).  ValueError on a bad one (nothing changes)."""
        if isinstance(ref, CartesianTrajectory):
            self.trajectory = ref
            self._stream = self._stream_t = self._stream_prev = None
            self.info.status = "trajectory"
            return
        if not isinstance(ref, CartesianReference):
            raise ValueError(f"{self.name} takes a CartesianReference or CartesianTrajectory, "
                             f"not {type(ref).__name__}")
        R = np.array(ref.R, dtype=float)
        p = np.array(ref.p, dtype=float).reshape(-1)
        if R.shape != (3, 3) or p.shape != (3,) or not (np.all(np.isfinite(R)) and np.all(np.isfinite(p))):
            raise ValueError("reference: R must be a finite 3x3 and p 3 finite numbers")
        if np.abs(R.T @ R - np.eye(3)).max() > 1e-6 or np.linalg.det(R) < 0:
            raise ValueError("reference: R is not a rotation matrix (R^T R != I or det < 0)")
        tw = np.zeros(6) if ref.twist is None else np.array(ref.twist, dtype=float).reshape(-1)
        wr = np.zeros(6) if ref.wrench is None else np.array(ref.wrench, dtype=float).reshape(-1)
        ac = np.zeros(6) if ref.accel is None else np.array(ref.accel, dtype=float).reshape(-1)
        if tw.shape != (6,) or wr.shape != (6,) or ac.shape != (6,) or \
                not (np.all(np.isfinite(tw)) and np.all(np.isfinite(wr)) and np.all(np.isfinite(ac))):
            raise ValueError("reference: twist, accel and wrench must be 6 finite numbers")
        if not np.array_equal(wr, self.wrench_d):
            self._integral[:] = 0.0           # a new force reference: start its integral afresh
        self.wrench_d[:] = wr
        self._stream_estimated = ref.twist is None and self._params["estimate_target_velocity"]
        if self._jump(R, p):                  # approach, do not step
            # from the current desired pose and twist (the running approach's, when replanned)
            self.trajectory = CartesianTrajectory([0.0], [p], [R])
            self._stream = self._stream_t = self._stream_prev = None
            self.info.status = "approaching target"
            return
        self.trajectory = None
        self._stream = (R, p, tw, ac)
        self._stream_t = None
        self.R_d, self.p_d, self.twist_d[:], self.accel_d[:] = R, p, tw, ac
        self._quat_d = spatial.matrix_to_quat(R)
        self.info.status = "reference"

    def set_wrench_reference(self, wrench):
        """Change only the feed-forward wrench F_d [f; n] (robot on environment, world axes): the pose,
        stream or trajectory being followed goes on.  ValueError on a bad one."""
        wr = np.array(wrench, dtype=float).reshape(-1)
        if wr.shape != (6,) or not np.all(np.isfinite(wr)):
            raise ValueError("reference: wrench must be 6 finite numbers")
        if not np.array_equal(wr, self.wrench_d):
            self._integral[:] = 0.0           # a new force reference: start its integral afresh
        self.wrench_d[:] = wr

    # set by the caller (ControlLoop, set-point shaping): () -> (jump_pos, jump_rot, v_lin, v_ang) or None:
    # the pose steps the torque-rate limit passes without saturating, and the approach speeds that keep
    # it unsaturated (see ControlLoop._cartesian_cap)
    shaping = None

    def _jump(self, R, p):
        """The new pose is farther than target_jump_pos / _rot from the current desired pose (or than the
        step set-point shaping allows, when it is on)."""
        jp, jr = self._params["target_jump_pos"], self._params["target_jump_rot"]
        cap = self.shaping() if self.shaping is not None else None
        if cap is not None:
            jp = cap[0] if jp <= 0.0 else min(jp, cap[0])
            jr = cap[1] if jr <= 0.0 else min(jr, cap[1])
        if (jp <= 0.0 and jr <= 0.0) or self.R_d is None:
            return False
        far_p = jp > 0.0 and float(np.linalg.norm(p - self.p_d)) > jp
        far_r = jr > 0.0 and float(np.linalg.norm(pin.log3(R @ self.R_d.T))) > jr
        return far_p or far_r

    def approach_bounds(self):
        p = self._params
        v = (p["approach_linear_velocity"], p["approach_angular_velocity"])
        cap = self.shaping() if self.shaping is not None else None
        if cap is not None:
            v = (min(v[0], cap[2]), min(v[1], cap[3]))
        return {"max_velocity": v,
                "max_acceleration": (p["approach_linear_acceleration"], p["approach_angular_acceleration"])}

    def _desired(self, t):
        """Update R_d, p_d, twist_d, accel_d for law time t (trajectory or streamed reference)."""
        tr = self.trajectory
        if tr is not None:
            if not tr.started:               # from the pose, twist and acceleration being followed
                tr.start(t, self.R_d, self.p_d, self.twist_d, accel0=self.accel_d, **self.approach_bounds())
            self.R_d, self.p_d, tw, ac = tr.sample(t)
            self.twist_d[:], self.accel_d[:] = tw, ac
            self._quat_d = pin.Quaternion(self.R_d).coeffs()      # x y z w (for info.reference)
            if tr.done(t):
                self.info.status = "trajectory done"
            return
        s = self._stream
        if s is None:
            return
        if self._stream_t is None:            # first compute with this reference: its arrival
            self._stream_t = t
            prev, horizon = self._stream_prev, self._params["reference_extrapolation"]
            self._stream_prev = (t, s[0], s[1])
            if self._stream_estimated and prev is not None and 0.0 < t - prev[0] <= horizon:
                dt = t - prev[0]
                tw = np.concatenate([(s[1] - prev[2]) / dt, pin.log3(s[0] @ prev[1].T) / dt])
                self._stream = s = (s[0], s[1], tw, s[3])
        R, p, tw, ac = s
        horizon = self._params["reference_extrapolation"]
        tau = min(max(t - self._stream_t, 0.0), horizon)
        if horizon <= 0.0 or (not tw.any() and not ac.any()):
            self.R_d, self.p_d = R, p
            self.twist_d[:], self.accel_d[:] = tw, ac
            return
        h = 0.5 * tau * tau
        self.p_d = p + tw[:3] * tau + ac[:3] * h
        self.R_d = pin.exp3(tw[3:] * tau + ac[3:] * h) @ R
        if tw[3:].any() or ac[3:].any():
            self._quat_d = pin.Quaternion(self.R_d).coeffs()
        if t - self._stream_t > horizon:      # the stream stopped: hold the pose at the horizon
            self.twist_d[:] = 0.0
            self.accel_d[:] = 0.0
        else:
            self.twist_d[:] = tw + ac * tau
            self.accel_d[:] = ac

    # ---- the law ----
    def _kinematics(self, q, v, vpc):
        """M (upper triangle valid), h, J (local_world_aligned), R, p of the frame, and Jdot v (with
        velocity_product_compensation, else None).  h = g(q) (None without gravity compensation),
        + C(q, v) v with velocity_product_compensation.  Pinocchio fast path: one forward pass at
        (q, v, 0) gives the placements for the Jacobians and the frame's classical acceleration Jdot v;
        nonLinearEffects gives C v + g in one call."""
        if self.fast:
            pm, d = self.pm, self.pdata
            jdv = None
            if vpc:
                pin.forwardKinematics(pm, d, q, v, self._zero_v)
                jdv = pin.getFrameClassicalAcceleration(pm, d, self.fid, _LWA).vector.copy()
                pin.computeJointJacobians(pm, d)          # from the placements just computed
            else:
                pin.computeJointJacobians(pm, d, q)
            oMf = pin.updateFramePlacement(pm, d, self.fid)
            J = pin.getFrameJacobian(pm, d, self.fid, _LWA)
            M = pin.crba(pm, d, q)
            if vpc:
                h = pin.nonLinearEffects(pm, d, q, v).copy()          # C v + g
                if not self.gravity_enabled:
                    h -= pin.computeGeneralizedGravity(pm, d, q)
            else:
                h = pin.computeGeneralizedGravity(pm, d, q) if self.gravity_enabled else None
            return M, h, J, oMf.rotation, oMf.translation, jdv
        M = self.dyn.mass_matrix(q)
        J = np.array(self.dyn.frame_jacobian(q, self.frame, "local_world_aligned"))
        R, p = self.dyn.frame_placement(q, self.frame)
        h = self.dyn.gravity(q).copy() if self.gravity_enabled else None
        jdv = None
        if vpc:
            jdv = self._jdot_v(q, v, J)
            cv = np.array(self.dyn.rnea(q, v, self._zero_v)) - np.array(self.dyn.gravity(q))
            h = cv if h is None else h + cv
        return M, h, J, R, p, jdv

    def compute(self, state):
        q, v = self._state_ok(state)
        tau = self._tau
        if q is None:
            return tau.copy()
        if self.R_d is None:
            self.reset(state)
        if self.trajectory is not None or self._stream is not None:
            self._desired(state.t)
        vpc = self._params["velocity_product_compensation"]
        M, h, J, R, p, jdv = self._kinematics(q, v, vpc)
        cM, info = dpotrf(M, lower=0, clean=1)            # M = U^T U (upper triangle read)
        if info != 0:
            tau.fill(np.nan)
            self.info.status = "mass matrix not positive definite"
            return tau.copy()

        # pose error (world-aligned) and task velocity
        e = self._e
        np.subtract(self.p_d, p, out=e[:3])
        e[3:] = pin.log3(self.R_d @ R.T)
        mp, mr = self._params["max_pos_error"], self._params["max_rot_error"]
        self.clipped = False
        if mp > 0.0 or mr > 0.0:
            self._clip_error(e, mp, mr)
        xd = np.dot(J, v, out=self._xd)

        # task-space inertia: A = J M^-1 J^T + lambda^2 I = Lambda^-1
        X, _ = dpotrs(cM, J.T, lower=0)                  # M^-1 J^T  (nv x 6)
        A = J @ X
        A.flat[::7] += self.lam2
        cA, info = dpotrf(A, lower=0, clean=1)
        if info != 0:                                   # singular with lambda = 0: regularise
            A.flat[::7] += 1e-9 * max(np.trace(A), 1.0)
            cA, info = dpotrf(A, lower=0, clean=1)
        # the hold bound (omega_cap): the task's fastest mode, sqrt of the largest eigenvalue of
        # K^1/2 A K^1/2 (at most its trace), and each posture joint's sqrt(K_ns,i / M_ii), slowed to the
        # cap by scaling that part's stiffness by s^2 and its damping by s (the damping ratio kept)
        s_task = s_ns = 1.0
        self.capped = 0
        cap = self.omega_cap
        if cap < np.inf:
            c2 = cap * cap
            if float(self.K @ np.diagonal(A)) > c2:
                sk = np.sqrt(self.K)
                w2 = float(np.linalg.eigvalsh(A * np.outer(sk, sk))[-1])
                if w2 > c2:
                    s_task = cap / np.sqrt(w2)
                    self.capped += 6
            w2 = float(np.max(self.K_ns / np.diagonal(M)))
            if w2 > c2:
                s_ns = cap / np.sqrt(w2)
                self.capped += 1
            # given damping (task.d_*, nullspace_damping): its rate d / inertia at most 2 cap, the task
            # axis' inertia taken as 1 / A_ii (A = Lambda^-1: the rate d A_ii bounds d / Lambda_ii)
            if gi_d := self._dgiven_idx.size:
                rate = self.D_fixed * np.diagonal(A)
                if float(rate.max()) * s_task > 2.0 * cap:
                    s_task = min(s_task, 2.0 * cap / float(rate.max()))
                    self.capped += gi_d
            if self.D_ns is not None:
                rate = float(np.max(self.D_ns / np.diagonal(M)))
                if rate * s_ns > 2.0 * cap:
                    s_ns = 2.0 * cap / rate
                    self.capped += 1
        # task wrench F = K e + D (xdot_d - xdot) + F_d
        F = self._F
        np.subtract(self.twist_d, xd, out=F)
        if self.track_damping_power:
            ev = F.copy()
        gi = self._dgiven_idx
        if not self._all_d_given and not gi.size and self._mean is not None:
            if not self._mean.factor(A, inverse=True):  # D = 2 zeta Lambda # K from A = Lambda^-1
                tau.fill(np.nan)
                self.info.status = "task inertia not positive definite"
                return tau.copy()
            self._mean.apply(F.copy(), out=F)
        elif not self._all_d_given:
            Ui, _ = dtrtri(cA, lower=0)                 # Lambda = A^-1 = U^-1 U^-T: L = U^-1
            D = critical_damping(cA, Ui.T, self.K, self._two_zeta)
            if gi.size:                                 # given axes: decoupled, their own value
                D[gi, :] = 0.0
                D[:, gi] = 0.0
                D[gi, gi] = self.D_fixed[gi]
            F[:] = D @ F
        else:
            F *= self.D_fixed
        if s_task != 1.0:
            F *= s_task
        if self.track_damping_power:                    # (x'_d - x')^T D (x'_d - x') >= 0, task axes
            self.damping_power = float(ev @ F)
        if self._any_force:
            self._s2 = s_task * s_task
            self._force_axes(state, R, F)
        else:
            F += (self.K * (s_task * s_task)) * e if s_task != 1.0 else self.K * e
            F += self.wrench_d
        a_ff = self.accel_d
        if vpc or a_ff.any():                           # F += Lambda (xddot_d - Jdot v)
            a = np.where(self.S, 0.0, a_ff) if self._any_force else a_ff.copy()
            if vpc:
                a -= jdv
            F += dpotrs(cA, a, lower=0)[0]
        np.dot(J.T, F, out=tau)

        # dynamically consistent nullspace: tau += tau0 - J^T Lambda (J M^-1 tau0)
        t0 = self._tau0
        shortest_error(self.q_ns, q, self.continuous, out=t0)
        t0 *= self.K_ns
        if s_ns != 1.0:
            t0 *= s_ns * s_ns
        if self.D_ns is None and self._mean_ns is not None and self._mean_ns.factor(M, inverse=False):
            t0 -= s_ns * self._mean_ns.apply(v)         # 2 zeta_ns (M # K_ns) v
        elif self.D_ns is None:
            Mi, _ = dtrtri(cM, lower=0)                 # M = U^T U: L = U^T, L^-1 = U^-T
            t0 -= s_ns * (critical_damping(Mi.T, cM, self.K_ns, self._two_zeta_ns) @ v)
        else:
            t0 -= s_ns * (self.D_ns * v)
        y, _ = dpotrs(cA, X.T @ t0, lower=0)           # Lambda J M^-1 tau0
        tau += t0
        tau -= J.T @ y
        if h is not None:                               # g(q) [+ C(q, v) v]
            tau += h
        fr = self.friction
        if fr.active and fr.stiction_sensed > 0.0 and state.wrench is not None and state.wrench_source == "sensor" \
                and self._tau_ext is None:
            w = self._world_wrench(state, R)            # the stiction term's pull: the law's and the
            if w is not None:                           # environment's J^T w, which a sensor measures
                self._pull_ext = J.T @ w
                # the wrench's noise reaches the pull through J^T w and, on force axes, the force
                # law's kp w too (world-aligned axes)
                gain = np.where(self.S, 1.0 + self.force_kp, 1.0) if self._any_force else None
                fr.sensed_deadzone(J, None if state.wrench_frame == "world" else R, state.wrench_cov, gain)
        self._add_friction(tau, v)
        self._pull_ext = None

        # report
        self.info.reference[:3] = self.p_d
        self.info.reference[3:] = self._quat_d
        self.info.error[:] = e
        return tau.copy()

    def _jdot_v(self, q, v, J):
        """Jdot v of the frame (local_world_aligned) through the backend, by central differences of J
        (the fast path reads it from Pinocchio's forward pass: _kinematics)."""
        h = 1e-6
        Jp = np.array(self.dyn.frame_jacobian(q + h * v, self.frame, "local_world_aligned"))
        Jm = np.array(self.dyn.frame_jacobian(q - h * v, self.frame, "local_world_aligned"))
        return (Jp - Jm) @ v / (2.0 * h)

    def _clip_error(self, e, mp, mr):
        """Scale the position (rotation) error of the stiffness axes to norm <= mp (mr); 0: off."""
        st = self._stiff
        for lo, lim in ((0, mp), (3, mr)):
            if lim > 0.0:
                m = st[lo:lo + 3]
                seg = e[lo:lo + 3]
                n_e = math.sqrt(float(np.dot(seg[m], seg[m])))
                if n_e > lim:
                    seg[m] *= lim / n_e
                    self.clipped = True         # (the loop's diagnostics: the safety layer acts)

    def _world_wrench(self, state, R, status=False):
        """The measured wrench (State.wrench) in world-aligned axes, about the frame's origin; None
        (with info.status when `status`) when there is none or it cannot be used."""
        w = state.wrench
        why = None
        if w is None:
            why = "no measured wrench"
        else:
            w = np.asarray(w, dtype=float)
            if w.shape != (6,) or not np.all(np.isfinite(w)):
                why = "bad measured wrench"
            elif state.wrench_frame in ("", self.frame):
                return np.concatenate([R @ w[:3], R @ w[3:]])
            elif state.wrench_frame == "world":
                return w
            else:
                why = f"wrench in {state.wrench_frame!r}, expected {self.frame!r} or 'world'"
        if status:
            self.info.status = f"force axes: {why} (open loop)" if why.startswith(("no", "bad")) else \
                f"force axes: {why}"
        return None

    def _force_axes(self, state, R, F):
        """F (holding D (xdot_d - xdot)) += K e + F_d on stiffness axes, force PI on force axes."""
        S, e = self.S, self._e
        Fd = self.wrench_d
        F += np.where(S, 0.0, self.K * e * self._s2) + Fd     # (_s2: the hold bound's s^2, see compute)
        dt = 0.0 if self._t_last is None else min(max(state.t - self._t_last, 0.0), 0.1)
        self._t_last = state.t
        w_lwa = self._world_wrench(state, R, status=True)
        if w_lwa is None:
            return
        ef = Fd + w_lwa                                  # F_d - (robot on environment = -w)
        self._integral += np.where(S, ef * dt, 0.0)
        lim = self._params["force_integral_limit"]
        ki = self.force_ki
        # anti-windup: clamp the stored integral, |ki int| <= lim (int = 0 where ki = 0)
        bound = np.divide(lim, ki, out=np.zeros(6), where=ki > 0.0)
        np.clip(self._integral, -bound, bound, out=self._integral)
        it = ki * self._integral
        F += np.where(S, self.force_kp * ef + it, 0.0)
