"""Closed kinematic chains: a URDF of the spanning tree (each loop cut open at one joint) plus the
closing joints, described in YAML, as bilateral constraints of the reference layer.

URDF cannot express a loop, so the user cuts each loop at one joint, writes the URDF of the tree that
remains, and lists the cut joints:

    loop_closures:
      - name: rocker_to_ground
        frame1: rocker                # a frame of the URDF (a link, or a joint's frame)
        frame2: ground                # another one, on another body (may be fixed to the world)
        placement1: {xyz: [0.3, 0, 0], rpy: [0, 0, 0]}    # the joint frame in frame1 (default: identity)
        placement2: {xyz: [0.4, 0, 0], rpy: [0, 0, 0]}    # the same joint frame in frame2
        type: revolute                # revolute | spherical | fixed
        axis: [0, 1, 0]               # revolute only: the hinge axis in the joint frame
    actuated: [crank_joint]           # optional: the motorised joints; the others are passive (tau = 0).
                                      # Absent: every joint but a free-flyer is actuated (the open tree's)

A closing joint is a `FrameConstraint` between C1 = frame1 * placement1 and C2 = frame2 * placement2
(see reference/constrained.py for the rows, drift terms and signs):
    spherical -> "point", 3 rows: the joint centres coincide;
    fixed     -> "6d", 6 rows: the frames are welded;
    revolute  -> "revolute", 5 rows: the centres coincide (3) and the relative angular velocity normal
                 to the axis vanishes (2); the axis is given in C1's axes, the same in C2's when closed.
The rows are the full spatial joint: a planar mechanism repeats in its out-of-plane rows (a planar
four-bar closed by a revolute has 5 rows of rank 2) what the plane already holds, so the chain's
dynamics solve with redundant="min_norm": the dependent rows are removed by the rank-revealing
factorisation of J M^-1 J^T (the multipliers are the least-norm ones: zero on rows that carry nothing,
such as a planar loop's out-of-plane ones), and rows that cannot all hold (a loop that does not close
out of its plane, under Baumgarte terms) raise ValueError.

Each closure's multiplier is the internal wrench of the cut joint: [f] (spherical) or [f; n] (fixed,
revolute; n normal to the axis for a revolute), world axes, applied on frame1's body at the joint
centre by frame2's body (which receives -[f; n]).

    chain = ClosedChain.from_yaml(model, "four_bar_loops.yaml")      # or YAML text, or a dict
    q = chain.solve_configuration(q0, fixed=["crank_joint"])   # close the loop, the crank held
    v = chain.project_velocity(q, v0)                          # onto J v = 0
    a, wrenches = chain.forward_dynamics(q, v, u, baumgarte=(2500.0, 100.0))   # u: actuated joints
    q, v = chain.step(q, v, u, dt, baumgarte)                  # semi-implicit Euler (project=True:
                                                               # post-stabilised onto the closed loops)
"""
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .reference import spatial
from .reference.constrained import (FrameConstraint, check_state, constrained_dynamics, constraint_error,
                                    constraint_jacobian)
from .reference.data import RefData
from .reference.energy import kinetic_energy, potential_energy
from .reference.impulse import impulse_dynamics

TYPES = {"revolute": "revolute", "spherical": "point", "fixed": "6d"}
CLOSURE_KEYS = {"name", "frame1", "frame2", "placement1", "placement2", "type", "axis"}
TOP_KEYS = {"loop_closures", "actuated"}


def rk4(f, q, v, dt):
    """One classical Runge-Kutta step of q' = v, v' = f(q, v): (q, v) after dt."""
    k1q, k1v = v, f(q, v)
    k2q, k2v = v + 0.5 * dt * k1v, f(q + 0.5 * dt * k1q, v + 0.5 * dt * k1v)
    k3q, k3v = v + 0.5 * dt * k2v, f(q + 0.5 * dt * k2q, v + 0.5 * dt * k2v)
    k4q, k4v = v + dt * k3v, f(q + dt * k3q, v + dt * k3v)
    return q + dt / 6.0 * (k1q + 2 * k2q + 2 * k3q + k4q), v + dt / 6.0 * (k1v + 2 * k2v + 2 * k3v + k4v)


@dataclass(frozen=True)
class LoopClosure:
    """A closing joint between C1 = frame1 * (R1, p1) and C2 = frame2 * (R2, p2)."""
    name: str
    frame1: str
    frame2: str
    type: str
    R1: np.ndarray
    p1: np.ndarray
    R2: np.ndarray
    p2: np.ndarray
    axis: np.ndarray = None

    @property
    def kind(self):
        return TYPES[self.type]

    @property
    def dim(self):
        return {"point": 3, "6d": 6, "revolute": 5}[self.kind]

    def constraint(self):
        return FrameConstraint(self.frame1, self.kind, frame2=self.frame2, placement1=(self.R1, self.p1),
                               placement2=(self.R2, self.p2), axis=self.axis, name=self.name)


def _vector(x, n, what):
    try:
        a = np.array(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected {n} numbers, got {x!r}") from None
    if a.shape != (n,):
        raise ValueError(f"{what}: expected {n} numbers, got {x!r}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: not finite (NaN or inf): {x!r}")
    return a


def _placement(spec, what):
    if spec is None:
        return np.eye(3), np.zeros(3)
    if not isinstance(spec, dict) or set(spec) - {"xyz", "rpy"}:
        raise ValueError(f"{what}: expected {{xyz: [x, y, z], rpy: [r, p, y]}}, got {spec!r}")
    xyz = _vector(spec.get("xyz", [0.0, 0.0, 0.0]), 3, f"{what} xyz")
    rpy = _vector(spec.get("rpy", [0.0, 0.0, 0.0]), 3, f"{what} rpy")
    return spatial.rpy_to_matrix(rpy), xyz


def parse_closure(tree, spec, index=0):
    """One entry of `loop_closures` -> LoopClosure (ValueError naming the entry and the problem)."""
    if not isinstance(spec, dict):
        raise ValueError(f"loop_closures[{index}]: expected a mapping, got {spec!r}")
    name = spec.get("name", f"loop_closures[{index}]")
    what = f"loop closure {name!r}"
    if not isinstance(name, str) or not name:
        raise ValueError(f"loop_closures[{index}]: name must be a non-empty string, got {name!r}")
    unknown = set(spec) - CLOSURE_KEYS
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {sorted(unknown)}; use {sorted(CLOSURE_KEYS)}")
    for key in ("frame1", "frame2", "type"):
        if key not in spec:
            raise ValueError(f"{what}: {key} is missing")
    f1, f2, typ = spec["frame1"], spec["frame2"], spec["type"]
    for key, f in (("frame1", f1), ("frame2", f2)):
        if f not in tree.frames:
            raise ValueError(f"{what}: {key} {f!r} is not a frame of the URDF; frames are {sorted(tree.frames)}")
    if tree.frames[f1].body == tree.frames[f2].body:
        raise ValueError(f"{what}: frame1 {f1!r} and frame2 {f2!r} are on the same rigid body "
                         f"({'the world' if tree.frames[f1].body < 0 else tree.body_names[tree.frames[f1].body]}); "
                         "a closing joint joins two bodies")
    if typ not in TYPES:
        raise ValueError(f"{what}: type {typ!r} is not one of {sorted(TYPES)} "
                         "(revolute: 5 rows, spherical: 3, fixed: 6)")
    R1, p1 = _placement(spec.get("placement1"), f"{what} placement1")
    R2, p2 = _placement(spec.get("placement2"), f"{what} placement2")
    axis = None
    if typ == "revolute":
        if "axis" not in spec:
            raise ValueError(f"{what}: a revolute closing joint needs an axis")
        axis = _vector(spec["axis"], 3, f"{what} axis")
        if np.linalg.norm(axis) < 1e-9:
            raise ValueError(f"{what}: the axis is zero")
        axis = axis / np.linalg.norm(axis)
    elif "axis" in spec:
        raise ValueError(f"{what}: an axis is only for a revolute closing joint, not {typ!r}")
    return LoopClosure(name, f1, f2, typ, R1, p1, R2, p2, axis)


def _load(spec):
    if isinstance(spec, dict):
        return spec
    import yaml
    text = spec
    if isinstance(spec, Path) or (isinstance(spec, str) and "\n" not in spec and spec.endswith((".yaml", ".yml"))):
        p = Path(spec)
        if not p.is_file():
            raise ValueError(f"loop closures: file not found: {spec}")
        text = p.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"loop closures: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"loop closures: expected a mapping with 'loop_closures', got {type(data).__name__}")
    return data


class ClosedChain:
    """A Model (the spanning tree) with loop closures and actuated joints; holds its own RefData.
    Joint torques tau = S^T u, u the actuated joints' torques (model order), S the selection."""

    def __init__(self, model, closures, actuated=None):
        self.model, self.tree = model, model.tree
        self.closures = tuple(closures)
        if not self.closures:
            raise ValueError("a closed chain needs at least one loop closure")
        names = [c.name for c in self.closures]
        if len(set(names)) != len(names):
            raise ValueError(f"loop closures: duplicate names {sorted({n for n in names if names.count(n) > 1})}")
        self.constraints = [c.constraint() for c in self.closures]
        t = self.tree
        if actuated is None:
            actuated = [n for n, jt in zip(t.joint_names, t.jtype) if jt != "free"]
        if isinstance(actuated, str) or not all(isinstance(j, str) for j in actuated):
            raise ValueError(f"actuated: expected a list of joint names, got {actuated!r}")
        unknown = [j for j in actuated if j not in t.joint_names]
        if unknown:
            raise ValueError(f"actuated: unknown joint(s) {unknown}; joints are {t.joint_names}")
        if len(set(actuated)) != len(actuated):
            raise ValueError(f"actuated: a joint is listed twice: {actuated}")
        if any(t.jtype[t.joint_names.index(j)] == "free" for j in actuated):
            raise ValueError("actuated: a free-flyer cannot be actuated here")
        idx = sorted(t.iv[t.joint_names.index(j)] for j in actuated)     # model order
        self.actuated = [n for i, n in enumerate(t.joint_names) if t.iv[i] in idx and t.jtype[i] != "free"]
        self.passive = [n for n in t.joint_names if n not in self.actuated]
        self.S = np.zeros((len(idx), t.nv))
        self.S[np.arange(len(idx)), idx] = 1.0
        self.data = RefData(t)

    @classmethod
    def from_yaml(cls, model, spec):
        """spec: YAML text, a .yaml path, or the loaded mapping (see the module docstring)."""
        data = _load(spec)
        unknown = set(data) - TOP_KEYS
        if unknown:
            raise ValueError(f"loop closures: unknown key(s) {sorted(unknown)}; use {sorted(TOP_KEYS)}")
        lst = data.get("loop_closures")
        if not isinstance(lst, list) or not lst:
            raise ValueError("loop closures: 'loop_closures' must be a non-empty list")
        return cls(model, [parse_closure(model.tree, s, k) for k, s in enumerate(lst)], data.get("actuated"))

    @property
    def nu(self):
        return self.S.shape[0]

    def torque(self, u):
        """tau = S^T u: the actuated joints' torques in, zeros on the passive joints."""
        u = np.atleast_1d(np.asarray(u, dtype=float))
        if u.shape != (self.nu,) or not np.all(np.isfinite(u)):
            raise ValueError(f"u: expected {self.nu} finite torques for {self.actuated}, got {u}")
        return self.S.T @ u

    def forward_dynamics(self, q, v, u, baumgarte=(0.0, 0.0)):
        """(a, {closure name: wrench}) under actuated torques u; redundant rows removed (min_norm)."""
        a, w = constrained_dynamics(self.tree, self.data, q, v, self.torque(u), self.constraints,
                                    baumgarte, redundant="min_norm")
        return a, {c.name: x for c, x in zip(self.closures, w)}

    def step(self, q, v, u, dt, baumgarte=(0.0, 0.0), project=False):
        """Semi-implicit (symplectic) Euler: v+ = v + dt a(q, v), q+ = q + dt v+ (no free-flyer).
        project=True: then post-stabilisation, q+ moved to the nearest closed configuration (Gauss-Newton,
        least-norm steps) and v+ to J v = 0 (project_velocity: dissipates the kinetic energy of the
        removed velocity error)."""
        if self.tree.nq != self.tree.nv:
            raise ValueError("step: trees with a free-flyer are not supported (q + dt v)")
        if not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"step: dt must be a positive number, got {dt}")
        a, _ = self.forward_dynamics(q, v, u, baumgarte)
        v = v + dt * a
        q = q + dt * v
        if project:
            q = self.solve_configuration(q)
            v = self.project_velocity(q, v)
        return q, v

    def closure_error(self, q):
        """{closure name: Baumgarte error} (p1 - p2, then the rotation / the two tilts)."""
        q, _ = check_state(self.tree, q, np.zeros(self.tree.nv), None, "closure_error")
        e = constraint_error(self.tree, self.data, q, self.constraints)
        out, k = {}, 0
        for c in self.closures:
            out[c.name] = e[k:k + c.dim]
            k += c.dim
        return out

    def position_error(self, q):
        """Largest distance |p1 - p2| between the joint centres over the closures (m)."""
        return max(float(np.linalg.norm(e[:3])) for e in self.closure_error(q).values())

    def closure_velocity(self, q, v):
        """J v stacked over the closures (zero on the constraint manifold)."""
        q, v = check_state(self.tree, q, v, None, "closure_velocity")
        return constraint_jacobian(self.tree, self.data, q, v, self.constraints)[2]

    def solve_configuration(self, q0, fixed=(), tol=1e-12, max_iter=50):
        """Close the loops from q0 by Gauss-Newton on the closure error, the joints in `fixed` held
        (e.g. the crank of a four-bar: the mechanism's independent coordinate); least-norm steps,
        each at most 0.5 rad.  ValueError if the loops do not close (|e| > tol after max_iter)."""
        t = self.tree
        if t.nq != t.nv:
            raise ValueError("solve_configuration: trees with a free-flyer are not supported")
        q, _ = check_state(t, q0, np.zeros(t.nv), None, "solve_configuration")
        bad = [j for j in fixed if j not in t.joint_names]
        if bad:
            raise ValueError(f"solve_configuration: unknown joint(s) {bad}")
        free = [t.iv[i] for i, n in enumerate(t.joint_names) if n not in fixed]
        q = q.copy()
        for _ in range(max_iter):
            e = np.concatenate(list(self.closure_error(q).values()))
            if np.max(np.abs(e)) < tol:
                return q
            J, _, _ = constraint_jacobian(t, self.data, q, np.zeros(t.nv), self.constraints)   # de/dq
            dq = -np.linalg.lstsq(J[:, free], e, rcond=1e-10)[0]
            n = np.max(np.abs(dq))
            q[free] += dq * min(1.0, 0.5 / n) if n > 0 else 0.0
        e = np.concatenate(list(self.closure_error(q).values()))
        if np.max(np.abs(e)) < max(tol, 1e-9):
            return q
        raise ValueError(f"solve_configuration: the loops do not close from this start (largest error "
                         f"{np.max(np.abs(e)):.3g} after {max_iter} iterations, joints {list(fixed)} held): "
                         "check the link lengths, the placements, or start elsewhere")

    def project_velocity(self, q, v):
        """v - M^-1 J^T G^+ J v: the nearest velocity (kinetic-energy metric) with J v = 0 (a perfectly
        plastic impulse on the closures)."""
        return impulse_dynamics(self.tree, self.data, q, v, [], 0.0, bilateral=self.constraints)[0]

    def energy(self, q, v):
        """Kinetic + potential energy (J): constant along the unforced, undamped motion."""
        return kinetic_energy(self.tree, self.data, q, v) + potential_energy(self.tree, self.data, q)
