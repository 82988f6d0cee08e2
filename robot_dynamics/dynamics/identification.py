"""Identification of an arm's own dynamics from motion data: the inertial parameters the URDF gives,
and what it does not give, joint friction and rotor inertia.  No ROS.  After Khalil & Gautier: the
inverse dynamic model is linear in the parameters,

    tau = M(q) q'' + C(q, q') q' + g(q) + Ia q'' + fv q' + fc s(q') + off = W(q, q', q'') theta,

    theta = [pi (10 per body, `regressor.inertial_parameters` order) | Ia | fv | fc | off]  (per joint)

with s(v) = tanh(v / band) a smooth sign (Coulomb friction; `band` [rad/s] the velocity below which
it fades: FRICTION_BAND, or per joint as dynamics.friction_bands identifies it), Ia the rotor
(armature) inertia seen at the joint, fv viscous, fc Coulomb
friction and off a constant torque offset (sensor bias, cable).  Either all of theta is estimated
(`inertial=True`), or the inertial parameters are taken from the model and only the joint terms are
fitted to tau - RNEA_model (`inertial=False`: each joint's four terms from its own torque, what a user
with a trusted URDF wants).

Not every column of W is independent: a joint near the base sees only combinations of its links'
parameters, and the first joint's rotor inertia adds to its link's Izz.  The base (identifiable)
parameters come from QR with column pivoting of W stacked over random states (`base_parameters`):
W P = Q [R11 R12], rank r from |R_ii| > tol |R_00|, the pivoted columns b = P[:r] independent and the
others d = P[r:] regrouped into them,

    W_d = W_b K,  K = R11^-1 R12,   beta = theta_b + K theta_d   (W theta = W_b beta for every theta),

`BaseSet.regrouping()` writes each beta as the sum it stands for.  The estimate is weighted least
squares (`solve`): ordinary least squares first, then each joint's rows weighted by 1 / sigma_j, the
RMS of that joint's residual (joints see torques of very different size), solved again; the
covariance is (W^T S^-1 W)^-1 with the weights (s^2 ~ 1 after them), its square roots the standard
deviations, and the relative ones 100 sigma / |beta| %.  A parameter with a relative standard
deviation over `poorly_identified` (default 30 %) is reported as poorly identified.

Physical consistency (`consistency`): from the base estimate the full parameter vector closest to
the prior (the model's own) is reconstructed (`Identification.theta`: the least-norm change that
reproduces beta), and each body is checked: mass > 0, the rotational
inertia about its centre of mass positive definite and its principal moments satisfying the triangle
inequalities; friction fv, fc >= 0 and Ia >= 0.  A violation is reported with the body; the estimate is
not altered (no projection): the torque prediction is what the base parameters guarantee, and a user
applying the per-body values must look at the report.

Data: `derivatives` gives q' and q'' from sampled q by zero-phase filtering (a Butterworth low-pass run
forward and backward, scipy's filtfilt, then central differences): a causal filter delays the motion
against the torque and biases the inertial terms; the torque is filtered by the same filter so both
sides of the model see the same bandwidth (Gautier's parallel filtering).  `fourier_excitation` builds
the periodic trajectory (Swevers et al.) that excites the parameters.
"""
from dataclasses import dataclass, field

import numpy as np

from .reference.batched import BatchData, rnea_batched
from .reference.regressor import inertial_parameters, regressor_batched

FRICTION_BAND = 0.01          # [rad/s] tanh band of the Coulomb term
JOINT_TERMS = ("Ia", "fv", "fc", "off")
BODY_TERMS = ("m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz")


def parameter_names(model, inertial=True):
    names = []
    if inertial:
        names = [f"{b}.{t}" for b in model.tree.body_names for t in BODY_TERMS]
    return names + [f"{j}.{t}" for t in JOINT_TERMS for j in model.joint_names]


def prior_parameters(model, inertial=True, Ia=0.0, fv=0.0, fc=0.0, off=0.0):
    """theta of the model (its inertials) with the joint terms given (scalars or per joint)."""
    n = model.nv
    extra = np.concatenate([np.broadcast_to(np.asarray(x, float), (n,)) for x in (Ia, fv, fc, off)])
    return np.concatenate([inertial_parameters(model.tree), extra]) if inertial else extra


def regressor(model, Q, V, A, inertial=True, band=FRICTION_BAND, bd=None):
    """W (N, nv, p): tau = W theta for every row of Q, V, A (model order), theta as in the module doc
    (without the inertial block when inertial=False: then the target is tau - RNEA_model)."""
    Q, V, A = (np.atleast_2d(np.asarray(x, float)) for x in (Q, V, A))
    N, n = Q.shape
    if model.nv != n or model.tree.nb != n:
        raise ValueError("identification: fixed-base chains of 1-DoF joints only")
    cols = []
    if inertial:
        cols.append(regressor_batched(model.tree, bd or BatchData(model.tree), Q, V, A))
    eye = np.eye(n)
    for x in (A, V, np.tanh(V / band), np.ones_like(V)):        # Ia q'', fv q', fc s(q'), off
        cols.append(x[:, :, None] * eye[None, :, :])
    return np.concatenate(cols, axis=2)


@dataclass
class BaseSet:
    """The identifiable combinations of theta: beta = theta[base] + K theta[dependent]."""
    base: np.ndarray
    dependent: np.ndarray
    K: np.ndarray
    names: list
    tol: float

    @property
    def r(self):
        return len(self.base)

    def beta(self, theta):
        theta = np.asarray(theta, float)
        return theta[self.base] + self.K @ theta[self.dependent]

    def regrouping(self, min_coef=1e-9):
        """Each base parameter as the sum it stands for: 'name + 0.31 other - ...'."""
        out = []
        for k, b in enumerate(self.base):
            terms = [self.names[b]]
            for c, d in zip(self.K[k], self.dependent):
                if abs(c) > min_coef:
                    terms.append(f"{c:+.4g} {self.names[d]}")
            out.append(" ".join(terms))
        return out


def base_parameters(model, inertial=True, n_samples=200, tol=1e-8, seed=0, band=FRICTION_BAND, names=None):
    """The base set from W over random states (positions within the limits, velocities and
    accelerations of a few rad/s and rad/s^2): QR with column pivoting (module doc)."""
    from scipy.linalg import qr
    rng = np.random.default_rng(seed)
    lo, hi = model.lower_limits, model.upper_limits
    lo = np.where(np.isfinite(lo), lo, -np.pi)
    hi = np.where(np.isfinite(hi), hi, np.pi)
    n = model.nv
    Q = rng.uniform(lo, hi, (n_samples, n))
    V = rng.uniform(-2.0, 2.0, (n_samples, n))
    A = rng.uniform(-5.0, 5.0, (n_samples, n))
    W = regressor(model, Q, V, A, inertial=inertial, band=band).reshape(n_samples * n, -1)
    _, R, P = qr(W, mode="economic", pivoting=True)
    d = np.abs(np.diag(R))
    r = int(np.sum(d > tol * d[0]))
    K = np.linalg.solve(R[:r, :r], R[:r, r:])
    K[np.abs(K) < 1e-10] = 0.0
    return BaseSet(P[:r].copy(), P[r:].copy(), K, names or parameter_names(model, inertial), tol)


@dataclass
class Identification:
    """The estimate: base parameters, their standard deviations, the residuals."""
    base: BaseSet
    beta: np.ndarray
    std: np.ndarray
    sigma: np.ndarray                      # per joint RMS residual [N m] (the WLS weights)
    cond: float                            # condition number of the weighted base regressor
    rows: int
    poorly_identified: float = 30.0        # [%] relative standard deviation above which it is reported
    theta_prior: np.ndarray = None
    notes: list = field(default_factory=list)

    @property
    def rel_std(self):
        return 100.0 * self.std / np.maximum(np.abs(self.beta), 1e-300)

    def predict(self, W):
        """tau (N, nv) from the full regressor W (N, nv, p)."""
        return W[:, :, self.base.base] @ self.beta

    def theta(self):
        """The full parameter vector closest to the prior (least-norm change, in the parameters' own
        units) that reproduces beta: theta_prior + G^T (G G^T)^-1 (beta - G theta_prior), G = [I K]
        in the base / dependent columns."""
        b = self.base
        p = len(b.names)
        th0 = np.array(self.theta_prior if self.theta_prior is not None else np.zeros(p), float)
        G = np.zeros((b.r, p))
        G[:, b.base] = np.eye(b.r)
        G[:, b.dependent] = b.K
        return th0 + G.T @ np.linalg.solve(G @ G.T, self.beta - G @ th0)

    def value(self, name):
        """A parameter that is a base parameter on its own (no regrouping): (estimate, std);
        KeyError otherwise."""
        i = self.base.names.index(name)
        k = np.flatnonzero(self.base.base == i)
        if not len(k) or np.any(np.abs(self.base.K[k[0]]) > 1e-9):
            raise KeyError(f"{name} is not identifiable alone (regrouped or not excited)")
        return float(self.beta[k[0]]), float(self.std[k[0]])

    def given_prior(self, name):
        """A parameter regrouped only with inertials (the first joints' Ia with their links' inertia
        about the same axis): its value with every other member of its group at the prior's (the
        URDF's inertials): (beta_k - sum of c_m theta_prior_m, m != name) / c_name, and its standard
        deviation.  That is the value a model with the prior's inertials needs to reproduce the
        estimated group, which is what a law built on the URDF uses.  KeyError where the parameter is
        in more than one group, in a group with another joint term, or there is no prior."""
        b = self.base
        i = b.names.index(name)
        if self.theta_prior is None:
            raise KeyError(f"{name}: no prior to take the rest of its group from")
        th = np.asarray(self.theta_prior, float)
        hit = np.flatnonzero(b.base == i)
        if len(hit):
            k, c = int(hit[0]), 1.0
        else:
            col = int(np.flatnonzero(b.dependent == i)[0])
            rows = np.flatnonzero(np.abs(b.K[:, col]) > 1e-9)
            if len(rows) != 1:
                raise KeyError(f"{name} is in {len(rows)} groups")
            k, c = int(rows[0]), float(b.K[rows[0], col])
        members = [(int(b.base[k]), 1.0)] + [(int(d), float(x)) for d, x in zip(b.dependent, b.K[k]) if abs(x) > 1e-9]
        joint = tuple(f".{t}" for t in JOINT_TERMS)
        if any(m != i and b.names[m].endswith(joint) for m, _ in members):
            raise KeyError(f"{name} is regrouped with another joint term")
        rest = sum(x * th[m] for m, x in members if m != i)
        return (float(self.beta[k]) - rest) / c, float(self.std[k]) / abs(c)

    def joint_terms(self, model):
        """{term: (values per joint, std per joint)} for Ia, fv, fc, off; NaN where regrouped."""
        out = {}
        for t in JOINT_TERMS:
            vals, sds = [], []
            for j in model.joint_names:
                try:
                    v, s = self.value(f"{j}.{t}")
                except KeyError:
                    v, s = np.nan, np.nan
                vals.append(v)
                sds.append(s)
            out[t] = (np.array(vals), np.array(sds))
        return out


def solve(W, tau, base, theta_prior=None, weighted=True, mask=None, max_cond=1e6):
    """WLS of tau (N, nv) on the base columns of W (N, nv, p) -> Identification (module doc).
    mask (N, nv) bool: the equations to use (e.g. not those of a joint in its stick zone, where
    friction is not the smooth-sign model).  Refused (ValueError, with the reason): non-finite values
    (not dropped silently), fewer equations than parameters, and a motion that does not excite the
    base parameters (condition number of the regressor with unit-norm columns above max_cond: the
    parameters nearest the null space are named)."""
    W = np.asarray(W, float)
    tau = np.asarray(tau, float)
    if not (np.all(np.isfinite(W)) and np.all(np.isfinite(tau))):
        raise ValueError("identification data has NaN or inf (states or torques): refused")
    N, n, _ = W.shape
    m = np.ones(N * n, bool) if mask is None else np.asarray(mask, bool).reshape(N * n)
    joint = np.tile(np.arange(n), N)[m]
    A, y = W[:, :, base.base].reshape(N * n, -1)[m], tau.reshape(N * n)[m]
    rows, r = A.shape
    if rows <= r:
        raise ValueError(f"{rows} equations for {r} base parameters: more data needed")
    counts = np.bincount(joint, minlength=n)
    An = A / np.maximum(np.linalg.norm(A, axis=0), 1e-300)
    _, sv, Vt = np.linalg.svd(An, full_matrices=False)
    if not sv[-1] > sv[0] / max_cond:
        weak = [base.names[base.base[k]] for k in np.argsort(-np.abs(Vt[-1]))[:4]]
        raise ValueError(f"the motion does not excite the parameters (condition number "
                         f"{sv[0] / max(sv[-1], 1e-300):.3g} > {max_cond:g}); least excited: {', '.join(weak)}")

    def fit(w):
        beta = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)[0]
        res = y - A @ beta
        ss = np.bincount(joint, weights=res ** 2, minlength=n)
        sigma = np.sqrt(ss / np.maximum(counts, 1) * rows / (rows - r))
        return beta, np.maximum(sigma, 1e-9 * max(float(np.max(sigma)), 1e-300))

    beta, sigma = fit(np.ones(rows))
    if weighted:
        beta, sigma = fit(1.0 / sigma[joint])
        w = 1.0 / sigma[joint]
    else:
        w = np.full(rows, 1.0 / float(np.sqrt(np.sum((y - A @ beta) ** 2) / (rows - r))))
    Aw = A * w[:, None]
    sv = np.linalg.svd(Aw, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else np.inf
    cov = np.linalg.pinv(Aw.T @ Aw)
    ident = Identification(base, beta, np.sqrt(np.maximum(np.diag(cov), 0.0)), sigma, cond, rows,
                           theta_prior=theta_prior)
    poor = [base.names[base.base[k]] for k in np.flatnonzero(ident.rel_std > ident.poorly_identified)]
    if poor:
        ident.notes.append(f"{len(poor)} base parameter(s) with relative std > {ident.poorly_identified:g} %: "
                           + ", ".join(poor[:8]) + (" ..." if len(poor) > 8 else ""))
    return ident


def consistency(model, theta, inertial=True):
    """Physical-consistency report of a full theta (list of strings; empty: consistent)."""
    from .reference.regressor import _unsym
    out = []
    n = model.nv
    if inertial:
        for b, name in enumerate(model.tree.body_names):
            p = theta[10 * b: 10 * b + 10]
            m = p[0]
            if not m > 0.0:
                out.append(f"{name}: mass {m:.4g} kg <= 0")
                continue
            c = p[1:4] / m
            Io = _unsym(p[4:])
            Ic = Io - m * (np.dot(c, c) * np.eye(3) - np.outer(c, c))    # parallel axis, to the com
            ev = np.linalg.eigvalsh(Ic)
            if ev[0] <= 0.0:
                out.append(f"{name}: inertia about the centre of mass not positive definite "
                           f"(principal moments {np.round(ev, 6).tolist()})")
            elif ev[0] + ev[1] < ev[2] * (1.0 - 1e-9):
                out.append(f"{name}: principal moments {np.round(ev, 6).tolist()} violate I1 + I2 >= I3")
    joint = theta[-4 * n:]
    for k, t in enumerate(JOINT_TERMS[:3]):
        for j, x in zip(model.joint_names, joint[k * n:(k + 1) * n]):
            if x < 0.0:
                out.append(f"{j}: {t} = {x:.4g} < 0")
    return out


def controller_params(est, model, joints=None, laws=("gravity_compensation", "computed_torque",
                                                   "joint_impedance", "cartesian_impedance"),
                      band=FRICTION_BAND, scale=1.0, stiction=None):
    """The controller parameters that apply an identification (a flat dict, `joints` order): the
    friction model of every law in `laws` (`<law>.friction_compensation` true, `_viscous`,
    `_coulomb`, `_offset`, `_scale`, `_smoothing` = FRICTION_BAND and `_velocity_scale` = band, per
    joint in model order when it was identified (friction_bands), a scalar written as `_smoothing` alone
    as before, `_stiction` when given) and `armature`.  A rotor inertia regrouped with its links'
    inertials alone (the first joints' Ia with their link's inertia about the same axis, when the
    inertials were identified too) is written as the group's estimate less the URDF's inertials in it
    (Identification.given_prior: what a law on the URDF needs), said in `notes`.  A joint term the data
    did not identify otherwise, or found negative, is written as 0 and listed in `notes` (returned
    second)."""
    joints = list(joints or model.joint_names)
    idx = [model.joint_names.index(j) for j in joints]
    terms = est.joint_terms(model)
    notes, vals = [], {}
    for t in JOINT_TERMS:
        v = np.array(terms[t][0], float)[idx]
        for i, j in enumerate(joints):
            if not np.isfinite(v[i]) and t == "Ia":     # regrouped with its links: given the URDF's rest
                try:
                    v[i] = est.given_prior(f"{j}.Ia")[0]
                    notes.append(f"{j}.Ia: regrouped with its links' inertials; {v[i]:.4g} written, the group's "
                                 f"estimate less the URDF's inertials in it")
                except (KeyError, ValueError):
                    pass
        for j, x in zip(joints, v):
            if not np.isfinite(x):
                notes.append(f"{j}.{t}: not identified alone (regrouped): 0 written")
            elif x < 0.0 and t != "off":
                notes.append(f"{j}.{t}: estimate {x:.4g} < 0: 0 written")
        v = np.where(np.isfinite(v), v, 0.0)
        vals[t] = v if t == "off" else np.maximum(v, 0.0)
    out = {"armature": vals["Ia"].tolist()}
    per_joint = np.ndim(band) > 0
    for law in laws:
        out.update({f"{law}.friction_compensation": True, f"{law}.friction_viscous": vals["fv"].tolist(),
                    f"{law}.friction_coulomb": vals["fc"].tolist(), f"{law}.friction_offset": vals["off"].tolist(),
                    f"{law}.friction_smoothing": float(FRICTION_BAND if per_joint else band),
                    f"{law}.friction_scale": float(scale)})
        if stiction is not None:
            out[f"{law}.friction_stiction"] = float(stiction)
        if per_joint:
            out[f"{law}.friction_velocity_scale"] = [float(x) for x in np.asarray(band, float)[idx]]
    return out, notes


def write_params_yaml(path, params, node="/**", comment=""):
    """A ROS 2 parameters file (`--params-file` / a launch file's parameters) with `params` under
    `node`: what the controller node loads to compensate what was identified."""
    import yaml
    text = "".join(f"# {line}\n" for line in comment.splitlines()) if comment else ""
    text += yaml.safe_dump({node: {"ros__parameters": params}}, sort_keys=False, default_flow_style=None)
    with open(path, "w") as f:
        f.write(text)
    return path


def derivatives(t, q, tau=None, cutoff=None, order=4):
    """(q, q', q'', tau) filtered: Butterworth low-pass at `cutoff` [Hz] (default: 1/10 of the
    sampling rate), zero phase (filtfilt), on q and on tau alike; q' and q'' by central differences
    of the filtered q.  t must be uniformly sampled (ValueError otherwise)."""
    from scipy.signal import butter, filtfilt
    t = np.asarray(t, float)
    q = np.asarray(q, float)
    dt = np.diff(t)
    if len(t) < 30 or np.any(dt <= 0) or np.ptp(dt) > 1e-3 * np.mean(dt) + 1e-12:
        raise ValueError("derivatives: uniformly sampled data (>= 30 samples) expected")
    h = float(np.mean(dt))
    fs = 1.0 / h
    cutoff = fs / 10.0 if cutoff is None else float(cutoff)
    if not 0.0 < cutoff < fs / 2.0:
        raise ValueError(f"derivatives: cutoff must be within (0, {fs / 2.0}) Hz, got {cutoff}")
    b, a = butter(order, cutoff / (fs / 2.0))
    qf = filtfilt(b, a, q, axis=0)
    v = np.gradient(qf, h, axis=0)
    acc = np.gradient(v, h, axis=0)
    tf = None if tau is None else filtfilt(b, a, np.asarray(tau, float), axis=0)
    return qf, v, acc, tf


def lowpass(t, x, cutoff, order=4):
    """x (N, ...) low-passed along time, zero phase (Butterworth, filtfilt): the parallel filter
    applied alike to the torques and to the regressor's columns before decimation (module doc)."""
    from scipy.signal import butter, filtfilt
    fs = 1.0 / float(np.mean(np.diff(t)))
    if not 0.0 < cutoff < fs / 2.0:
        raise ValueError(f"lowpass: cutoff must be within (0, {fs / 2.0}) Hz, got {cutoff}")
    b, a = butter(order, cutoff / (fs / 2.0))
    return filtfilt(b, a, np.asarray(x, float), axis=0)


def dataset(model, t, q, tau, inertial=True, derivative_cutoff=50.0, cutoff=10.0, step=5, v_min=0.03,
            trim=0.5, band=FRICTION_BAND, valid=None):
    """(W, y, mask) for `solve` from uniformly sampled t, q, tau (model order): q' and q'' by
    `derivatives` (low-pass at derivative_cutoff), the regressor at every sample, then W and the
    torque alike low-passed at `cutoff` (parallel filtering) and decimated by `step`, `trim` seconds
    dropped at both ends (the filters' transients).  inertial=False: y = tau - RNEA_model.  mask: a
    joint's rows are left out wherever its speed fell below v_min within the parallel filter's reach
    (1 / (2 cutoff) either side): there Coulomb friction sticks, which the smooth sign does not model,
    and the filter would spread that into the neighbouring rows.  valid (len(t) bool): the samples
    that were measured (False: filled in across a gap in the record, e.g. states a loaded controller
    did not see); every row within the two filters' reach of a filled-in sample (1 / (2 cutoff) +
    1 / derivative_cutoff either side) is left out: the differentiated q across a gap is not the
    arm's motion (tens of ms of missing states every few hundred ms put fv 78 % and Ia 11 % off)."""
    from scipy.ndimage import minimum_filter1d
    qf, v, a, _ = derivatives(t, q, cutoff=derivative_cutoff)
    W = regressor(model, qf, v, a, inertial=inertial, band=band)
    y = np.asarray(tau, float)
    if not inertial:
        y = y - model_torques(model, qf, v, a)
    h = float(np.mean(np.diff(t)))
    Wf, yf = lowpass(t, W, cutoff), lowpass(t, y, cutoff)
    vmin = minimum_filter1d(np.abs(v), size=max(1, int(round(1.0 / (cutoff * h)))), axis=0)
    keep = vmin > v_min
    if valid is not None:
        valid = np.asarray(valid, bool)
        if valid.shape != (len(t),):
            raise ValueError(f"dataset: valid must have one entry per sample ({len(t)}), got {valid.shape}")
        reach = 1.0 / (cutoff * h) + 2.0 / (derivative_cutoff * h)
        near_gap = minimum_filter1d(valid.astype(np.uint8), size=max(1, int(round(reach))) | 1) == 0
        keep &= ~near_gap[:, None]
    k = int(round(trim / h))
    if len(t) <= 2 * k + step:
        raise ValueError(f"dataset: {len(t)} samples, fewer than the {2 * k} trimmed at the ends")
    sl = slice(k, len(t) - k, step)
    return Wf[sl], yf[sl], keep[sl]


def fourier_trajectory(coef_a, coef_b, q0, omega, t):
    """Swevers' finite Fourier series per joint: q_j(t) = q0_j + sum_l a_jl/(l w) sin(l w t)
    - b_jl/(l w) cos(l w t) (and its derivatives).  coef (n, L).  -> q, v, a (len(t), n)."""
    L = coef_a.shape[1]
    lw = omega * np.arange(1, L + 1)
    s, c = np.sin(np.outer(t, lw)), np.cos(np.outer(t, lw))     # (T, L)
    q = q0 + s @ (coef_a / lw).T - c @ (coef_b / lw).T
    v = c @ coef_a.T + s @ coef_b.T
    a = -s @ (coef_a * lw).T + c @ (coef_b * lw).T
    return q, v, a


def fourier_excitation(model, q_start, period=5.0, harmonics=4, candidates=60, seed=0, v_max=None,
                       a_max=None, margin=0.1, inertial=True, n_eval=150):
    """Coefficients (a, b, q0, omega) of a periodic excitation through q_start at t = 0 at rest
    (sum_l a_jl = 0, sum_l l b_jl = 0), within the position limits (less `margin` rad), |q'| <= v_max
    and |q''| <= a_max (defaults: half the model's velocity limits, 3 rad/s^2), chosen among random
    candidates for the smallest condition number of the base regressor (columns scaled to unit norm)
    along it.  Returns (coef_a, coef_b, q0, omega, cond)."""
    rng = np.random.default_rng(seed)
    n = model.nv
    omega = 2.0 * np.pi / period
    lo, hi = model.lower_limits + margin, model.upper_limits - margin
    vl = np.where(np.isfinite(model.velocity_limits), model.velocity_limits, 2.0)
    v_max = 0.5 * vl if v_max is None else np.broadcast_to(np.asarray(v_max, float), (n,))
    a_max = np.full(n, 3.0) if a_max is None else np.broadcast_to(np.asarray(a_max, float), (n,))
    room = np.minimum(hi - q_start, q_start - lo)
    if np.any(room <= 0):
        raise ValueError("fourier_excitation: q_start is within `margin` of a position limit")
    base = base_parameters(model, inertial=inertial)
    t = np.linspace(0.0, period, 20 * n_eval, endpoint=False)    # the limits on a fine grid
    ev = slice(None, None, 20)                                     # the condition number on n_eval
    best = None
    L = harmonics
    ls = np.arange(1, L + 1)
    for _ in range(candidates):
        ca = rng.normal(size=(n, L)) / ls
        cb = rng.normal(size=(n, L)) / ls
        ca[:, 0] -= ca.sum(axis=1)                  # v(0) = sum a = 0
        cb[:, 0] -= (cb * ls).sum(axis=1)           # a(0) = w sum l b = 0
        q, v, a = fourier_trajectory(ca, cb, q_start, omega, t)
        q = q - q[0]                                # the excursion from q(0): linear in the coefficients
        s = np.minimum.reduce([v_max / np.maximum(np.max(np.abs(v), axis=0), 1e-12),
                               a_max / np.maximum(np.max(np.abs(a), axis=0), 1e-12),
                               room / np.maximum(np.max(np.abs(q), axis=0), 1e-12)])    # per joint
        ca, cb = ca * s[:, None], cb * s[:, None]
        q0 = q_start + (cb / (ls * omega)).sum(axis=1)        # q(0) = q_start
        q, v, a = fourier_trajectory(ca, cb, q0, omega, t)
        Wb = regressor(model, q[ev], v[ev], a[ev], inertial=inertial)[:, :, base.base].reshape(n_eval * n, -1)
        Wb = Wb / np.maximum(np.linalg.norm(Wb, axis=0), 1e-300)
        sv = np.linalg.svd(Wb, compute_uv=False)
        cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else np.inf
        if best is None or cond < best[4]:
            best = (ca, cb, q0, omega, cond)
    if best is None:
        raise ValueError("fourier_excitation: no candidate within the limits (start farther from them)")
    return best


def model_torques(model, Q, V, A):
    """RNEA of the model (N, nv): what the URDF alone predicts."""
    return rnea_batched(model.tree, BatchData(model.tree), Q, V, A)
