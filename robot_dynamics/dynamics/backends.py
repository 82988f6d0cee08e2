"""One interface, two implementations: Pinocchio (production) and the in-repo reference.

    dyn = PinocchioBackend(model)        # holds the preallocated Data; build once, reuse every cycle
    tau = dyn.rnea(q, v, a)

Vectors are in the user's form (see Model).  Inputs are checked here, at the public entry point:
length and finiteness, with a ValueError naming the joint.  Returned arrays may be views into the
backend's Data (the reference backend's are), valid until the next call: copy one if you keep it.
"""
import math

import numpy as np
import pinocchio as pin

from . import reference as ref

REFERENCES = ("local", "world", "local_world_aligned")
_PIN_REF = {"local": pin.ReferenceFrame.LOCAL, "world": pin.ReferenceFrame.WORLD,
            "local_world_aligned": pin.ReferenceFrame.LOCAL_WORLD_ALIGNED}


class Backend:
    """Common entry-point checks.  Subclasses implement the algorithms."""
    name = "base"

    def __init__(self, model):
        self.model = model
        self._nq, self._nv = model.nq, model.nv

    def _vec(self, x, n, what):
        if type(x) is not np.ndarray or x.dtype != np.float64:
            try:
                x = np.asarray(x, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"{what}: not a numeric vector") from None
        if x.shape != (n,):
            raise ValueError(f"{what}: expected {n} values, got shape {x.shape}")
        if not math.isfinite(x @ x):          # one dot product: NaN or Inf anywhere (or overflow)
            bad = np.flatnonzero(~np.isfinite(x))
            if bad.size:
                names = self.model.v_names if n == self._nv else None
                where = names[bad[0]] if names and bad[0] < len(names) else f"index {bad[0]}"
                raise ValueError(f"{what}: {x[bad[0]]} at {where} (values must be finite)")
        return x

    def _q(self, q):
        return self._vec(q, self._nq, "q")

    def _v(self, v, what="v"):
        return self._vec(v, self._nv, what)

    def _ref(self, reference):
        if reference not in REFERENCES:
            raise ValueError(f"unknown reference {reference!r}; use one of {REFERENCES}")
        return reference

    def _fext(self, fext):
        if fext is None:
            return None
        f = np.asarray(fext, dtype=float)
        nb = self.model.tree.nb
        if f.shape != (nb, 6) or not np.all(np.isfinite(f)):
            raise ValueError(f"fext: expected a finite ({nb}, 6) array, one wrench per body")
        return f

    # Derived quantities shared by both backends
    def frame_pose(self, q, frame):
        """4x4 homogeneous transform of `frame` in the world."""
        R, p = self.frame_placement(q, frame)
        T = np.eye(4)
        T[:3, :3], T[:3, 3] = R, p
        return T


class PinocchioBackend(Backend):
    """Thin layer over `pin`: converts q where Pinocchio parametrises differently, nothing else.

    Fast path (fixed base, no continuous joint, Pinocchio's joint order: every arm we ship): the
    arrays go to `pin` untouched and a single dot product checks the result is finite; only when
    Pinocchio refuses the input or the result is not finite are the inputs examined one by one, to
    raise a ValueError that names the bad entry.  This keeps the checked call within a few hundred
    nanoseconds of the raw one.
    """
    name = "pinocchio"

    def __init__(self, model):
        super().__init__(model)
        self.pm = model.pin_model
        self.data = self.pm.createData()
        self._qbuf = np.zeros(self.pm.nq)
        self._perm = None if model.v_identity else model.v_to_pin
        self._direct = model.q_identity and self._perm is None
        nv = self._nv
        il = np.tril_indices(nv, -1)
        self._lower_flat = il[0] * nv + il[1]      # M[i, j], i > j
        self._upper_flat = il[1] * nv + il[0]      # M[j, i]

    def _pq(self, q):
        return self.model.q_to_pin(self._q(q), self._qbuf)

    def _pv(self, v, what="v"):
        v = self._v(v, what)
        if self._perm is None:
            return v
        out = np.empty(self._nv)
        out[self._perm] = v
        return out

    def _out(self, x, algo):
        if not math.isfinite(x.ravel().dot(x.ravel())):
            raise ValueError(f"{algo}: the result is not finite (inputs too large?)")
        return x if self._perm is None else (x[self._perm] if x.ndim == 1 else x[np.ix_(self._perm, self._perm)])

    def _symmetric(self, M):
        Mf = M.reshape(-1)
        Mf.put(self._lower_flat, Mf.take(self._upper_flat))   # Pinocchio fills the upper triangle only
        return M

    def _pfext(self, fext):
        f = self._fext(fext)
        out = pin.StdVec_Force()
        out.extend([pin.Force.Zero() for _ in range(self.pm.njoints)])
        for i, jid in enumerate(self.model.pin_joint_id):
            out[jid] = pin.Force(f[i, :3], f[i, 3:])
        return out

    def _fid(self, frame):
        try:
            return self.model.frame_ids[frame]
        except KeyError:
            self.model.check_frame(frame)
            raise

    def rnea(self, q, v, a, fext=None):
        if self._direct and fext is None:
            try:
                tau = pin.rnea(self.pm, self.data, q, v, a)
                if math.isfinite(tau.dot(tau)):
                    return tau
            except Exception:  # noqa: BLE001  (diagnosed below with a clear message)
                pass
        qp, vp, ap = self._pq(q), self._pv(v), self._pv(a, "a")
        if fext is None:
            return self._out(pin.rnea(self.pm, self.data, qp, vp, ap), "rnea")
        return self._out(pin.rnea(self.pm, self.data, qp, vp, ap, self._pfext(fext)), "rnea")

    def gravity(self, q):
        if self._direct:
            try:
                g = pin.computeGeneralizedGravity(self.pm, self.data, q)
                if math.isfinite(g.dot(g)):
                    return g
            except Exception:  # noqa: BLE001
                pass
        return self._out(pin.computeGeneralizedGravity(self.pm, self.data, self._pq(q)), "gravity")

    def nonlinear_effects(self, q, v):
        if self._direct:
            try:
                h = pin.nonLinearEffects(self.pm, self.data, q, v)
                if math.isfinite(h.dot(h)):
                    return h
            except Exception:  # noqa: BLE001
                pass
        return self._out(pin.nonLinearEffects(self.pm, self.data, self._pq(q), self._pv(v)),
                         "nonlinear_effects")

    def mass_matrix(self, q):
        """M(q), both triangles filled."""
        if self._direct:
            try:
                M = pin.crba(self.pm, self.data, q)
                # M never depends on the root joints' q (a NaN there gives a finite M): check q too
                if math.isfinite(M.trace()) and math.isfinite(q.dot(q)):
                    return self._symmetric(M)
            except Exception:  # noqa: BLE001
                pass
        return self._out(self._symmetric(pin.crba(self.pm, self.data, self._pq(q))), "mass_matrix")

    def coriolis_matrix(self, q, v):
        if self._direct and self._finite(q, self._nq):
            try:
                C = pin.computeCoriolisMatrix(self.pm, self.data, q, v)
                if math.isfinite(C.trace()) and math.isfinite(v.dot(v)):
                    return C
            except Exception:  # noqa: BLE001
                pass
        return self._out(pin.computeCoriolisMatrix(self.pm, self.data, self._pq(q), self._pv(v)),
                         "coriolis_matrix")

    def aba(self, q, v, tau, fext=None):
        if self._direct and fext is None:
            try:
                a = pin.aba(self.pm, self.data, q, v, tau)
                if math.isfinite(a.dot(a)):
                    return a
            except Exception:  # noqa: BLE001
                pass
        qp, vp, tp = self._pq(q), self._pv(v), self._pv(tau, "tau")
        if fext is None:
            return self._out(pin.aba(self.pm, self.data, qp, vp, tp), "aba")
        return self._out(pin.aba(self.pm, self.data, qp, vp, tp, self._pfext(fext)), "aba")

    # Kinematics and energies.  Fast path: q (and v) checked with one dot product each, the frame id and
    # reference looked up in dicts; anything unusual takes the checked path, which explains itself.
    @staticmethod
    def _finite(x, n):
        try:
            return x.shape == (n,) and math.isfinite(x.dot(x))
        except (AttributeError, TypeError, ValueError):
            return False

    def _fast(self, q, v=None):
        return self._direct and self._finite(q, self._nq) and (v is None or self._finite(v, self._nv))

    def forward_kinematics(self, q, v=None, a=None):
        qp = self._pq(q)
        if v is None:
            pin.forwardKinematics(self.pm, self.data, qp)
        elif a is None:
            pin.forwardKinematics(self.pm, self.data, qp, self._pv(v))
        else:
            pin.forwardKinematics(self.pm, self.data, qp, self._pv(v), self._pv(a, "a"))

    def frame_placement(self, q, frame):
        """(R, p) of the frame in the world."""
        fid = self.model.frame_ids.get(frame)
        if fid is None:
            fid = self._fid(frame)
        pin.forwardKinematics(self.pm, self.data, q if self._fast(q) else self._pq(q))
        M = pin.updateFramePlacement(self.pm, self.data, fid)
        return M.rotation, M.translation

    def frame_velocity(self, q, v, frame, reference="local"):
        fid, rf = self.model.frame_ids.get(frame), _PIN_REF.get(reference)
        if fid is None or rf is None:
            fid, rf = self._fid(frame), _PIN_REF[self._ref(reference)]
        if self._fast(q, v):
            pin.forwardKinematics(self.pm, self.data, q, v)
        else:
            pin.forwardKinematics(self.pm, self.data, self._pq(q), self._pv(v))
        pin.updateFramePlacement(self.pm, self.data, fid)
        return pin.getFrameVelocity(self.pm, self.data, fid, rf).vector

    def frame_jacobian(self, q, frame, reference="local"):
        fid, rf = self.model.frame_ids.get(frame), _PIN_REF.get(reference)
        if fid is None or rf is None:
            fid, rf = self._fid(frame), _PIN_REF[self._ref(reference)]
        if self._fast(q):
            J = pin.computeFrameJacobian(self.pm, self.data, q, fid, rf)
            return J if J.ndim == 2 else J.reshape(6, 1)      # Pinocchio flattens a 6x1 result
        J = pin.computeFrameJacobian(self.pm, self.data, self._pq(q), fid, rf).reshape(6, -1)
        return J if self._perm is None else J[:, self._perm]

    def frame_jacobian_dot(self, q, v, frame, reference="local"):
        fid, rf = self.model.frame_ids.get(frame), _PIN_REF.get(reference)
        if fid is None or rf is None:
            fid, rf = self._fid(frame), _PIN_REF[self._ref(reference)]
        if self._fast(q, v):
            pin.computeJointJacobiansTimeVariation(self.pm, self.data, q, v)
        else:
            pin.computeJointJacobiansTimeVariation(self.pm, self.data, self._pq(q), self._pv(v))
        pin.updateFramePlacement(self.pm, self.data, fid)
        dJ = pin.getFrameJacobianTimeVariation(self.pm, self.data, fid, rf).reshape(6, -1)
        return dJ if self._perm is None else dJ[:, self._perm]

    def kinetic_energy(self, q, v):
        if self._fast(q, v):
            return pin.computeKineticEnergy(self.pm, self.data, q, v)
        return float(pin.computeKineticEnergy(self.pm, self.data, self._pq(q), self._pv(v)))

    def potential_energy(self, q):
        if self._fast(q):
            return pin.computePotentialEnergy(self.pm, self.data, q)
        return float(pin.computePotentialEnergy(self.pm, self.data, self._pq(q)))


class ReferenceBackend(Backend):
    """The in-repo algorithms (robot_dynamics.dynamics.reference), same interface."""
    name = "reference"

    def __init__(self, model):
        super().__init__(model)
        self.tree = model.tree
        self.data = ref.RefData(model.tree)

    def _frame(self, frame):
        if frame not in self.tree.frames:
            self.model.check_frame(frame)
        return frame

    def rnea(self, q, v, a, fext=None):
        return ref.rnea(self.tree, self.data, self._q(q), self._v(v), self._v(a, "a"), self._fext(fext))

    def gravity(self, q):
        return ref.gravity(self.tree, self.data, self._q(q))

    def nonlinear_effects(self, q, v):
        return ref.nonlinear_effects(self.tree, self.data, self._q(q), self._v(v))

    def mass_matrix(self, q):
        return ref.crba(self.tree, self.data, self._q(q))

    def coriolis_matrix(self, q, v):
        return ref.coriolis_matrix(self.tree, self.data, self._q(q), self._v(v))

    def aba(self, q, v, tau, fext=None):
        return ref.aba(self.tree, self.data, self._q(q), self._v(v), self._v(tau, "tau"), self._fext(fext))

    def forward_kinematics(self, q, v=None, a=None):
        ref.forward_kinematics(self.tree, self.data, self._q(q),
                               None if v is None else self._v(v), None if a is None else self._v(a, "a"))

    def frame_placement(self, q, frame):
        ref.forward_kinematics(self.tree, self.data, self._q(q))
        return ref.frame_placement(self.tree, self.data, self._frame(frame))

    def frame_velocity(self, q, v, frame, reference="local"):
        ref.forward_kinematics(self.tree, self.data, self._q(q), self._v(v))
        return ref.frame_velocity(self.tree, self.data, self._frame(frame), self._ref(reference))

    def frame_jacobian(self, q, frame, reference="local"):
        ref.forward_kinematics(self.tree, self.data, self._q(q))
        return ref.frame_jacobian(self.tree, self.data, self._frame(frame), self._ref(reference))

    def frame_jacobian_dot(self, q, v, frame, reference="local"):
        ref.forward_kinematics(self.tree, self.data, self._q(q), self._v(v))
        return ref.frame_jacobian_dot(self.tree, self.data, self._frame(frame), self._ref(reference))

    def kinetic_energy(self, q, v):
        return float(ref.kinetic_energy(self.tree, self.data, self._q(q), self._v(v)))

    def potential_energy(self, q):
        return float(ref.potential_energy(self.tree, self.data, self._q(q)))


BACKENDS = {"pinocchio": PinocchioBackend, "reference": ReferenceBackend}


def make_backend(model, name="pinocchio"):
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; use one of {sorted(BACKENDS)}")
    return BACKENDS[name](model)
