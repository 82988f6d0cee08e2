"""Backend self-check: both backends on random states of the loaded model must agree.

Run on model load (the controller node refuses to start otherwise): it catches URDF-parsing
surprises, where Pinocchio and the in-repo reader understood the robot differently.
"""
import numpy as np

from .backends import PinocchioBackend, ReferenceBackend

DEFAULT_TOL = 1e-9


class SelfCheckError(ValueError):
    """The backends disagree; the message names the algorithm and the joint."""


class SelfCheckReport(dict):
    """{algorithm: largest scaled error}, plus `warnings`: the model's load warnings (non-physical
    inertials, inertia added to massless joints; `Model.warnings`), counted, not failed on."""
    warnings = ()


def _err(a, b):
    """Largest absolute difference, scaled by the magnitude of the result (max(1, |a|))."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = np.abs(a - b)
    scale = max(1.0, float(np.max(np.abs(a))) if a.size else 1.0)
    k = int(np.argmax(d)) if d.size else 0
    return float(d.max()) / scale if d.size else 0.0, k


def self_check(model, n_states=5, tol=DEFAULT_TOL, seed=0, frames=None, raise_on_failure=True):
    """Compare every algorithm of the two backends on `n_states` random states.

    Returns {algorithm: largest scaled error} (a SelfCheckReport: `.warnings` lists the model's load
    warnings, which do not fail the check).  Raises SelfCheckError (a ValueError) when one
    exceeds `tol`, naming the algorithm and the joint (or frame) where the disagreement is largest.
    Also refuses a mass matrix that is not positive definite (a body with no inertia beyond it).
    """
    P, R = PinocchioBackend(model), ReferenceBackend(model)
    rng = np.random.default_rng(seed)
    names = model.v_names
    nv = model.nv
    if frames is None:
        frames = [model.frame_names[-1]] + [f for f in (model.joint_names[-1:]) if f in model.frame_ids]
    report, where = SelfCheckReport(), {}
    report.warnings = list(getattr(model, "warnings", ()))

    def record(algo, a, b, label):
        e, k = _err(a, b)
        if e > report.get(algo, -1.0):
            report[algo] = e
            where[algo] = label(k)

    by_joint = lambda k: names[k % nv]  # noqa: E731 (index into a vector or a row-major matrix)
    for _ in range(n_states):
        q = model.random_configuration(rng)
        v, a, tau = rng.normal(size=nv), rng.normal(size=nv), rng.normal(size=nv)
        record("rnea", P.rnea(q, v, a), R.rnea(q, v, a), by_joint)
        record("gravity", P.gravity(q), R.gravity(q), by_joint)
        record("nonlinear_effects", P.nonlinear_effects(q, v), R.nonlinear_effects(q, v), by_joint)
        M = P.mass_matrix(q).copy()
        record("crba", M, R.mass_matrix(q), by_joint)
        record("coriolis", P.coriolis_matrix(q, v), R.coriolis_matrix(q, v), by_joint)
        try:
            np.linalg.cholesky(M)
        except np.linalg.LinAlgError:
            if raise_on_failure:
                hint = f"; load warnings: {'; '.join(report.warnings)}" if report.warnings else ""
                raise SelfCheckError("mass matrix is not positive definite: some joint moves no mass "
                                     f"(check the URDF inertials){hint}") from None
            report["aba"] = float("nan")           # ABA divides by a zero pivot: nothing to compare
        else:
            record("aba", P.aba(q, v, tau), R.aba(q, v, tau), by_joint)
        record("kinetic_energy", P.kinetic_energy(q, v), R.kinetic_energy(q, v), lambda k: "-")
        record("potential_energy", P.potential_energy(q), R.potential_energy(q), lambda k: "-")
        for f in frames:
            Rp, pp = P.frame_placement(q, f)
            Rr, pr = R.frame_placement(q, f)
            record("frame_placement", np.r_[Rp.ravel(), pp], np.r_[Rr.ravel(), pr], lambda k, f=f: f)
            for ref in ("local", "world", "local_world_aligned"):
                record("jacobian", P.frame_jacobian(q, f, ref), R.frame_jacobian(q, f, ref),
                       lambda k, f=f: f"{f}, column {names[k % nv]}")
                record("jacobian_dot", P.frame_jacobian_dot(q, v, f, ref),
                       R.frame_jacobian_dot(q, v, f, ref), lambda k, f=f: f"{f}, column {names[k % nv]}")
    if raise_on_failure:
        bad = {k: e for k, e in report.items() if e > tol}
        if bad:
            algo = max(bad, key=bad.get)
            raise SelfCheckError(
                f"backend self-check failed: {algo} differs by {bad[algo]:.3g} (tolerance {tol:g}) "
                f"at {where[algo]}; Pinocchio and the in-repo URDF reader read this model differently")
    return report
