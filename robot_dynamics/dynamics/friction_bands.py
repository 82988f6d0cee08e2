"""The shape of each joint's dry friction near rest: the velocity scale vs of fc tanh(v / vs) that
dynamics.identification's model uses per joint (issue 43), and the short slow excitation it is
identified from.  No ROS.

    slow_excitation   every joint out and back from the held pose at three low peak speeds (toward
                      slow_direction, as far as slow_reach, for slow_duration)
    fit_bands_slow    vs per joint from that excitation's data, the rest of the model from the main
                      estimate (identification.solve)
    fit_bands         vs per joint from the main excitation's own rows (the run's `slow_speed` 0)
    velocity_noise    the white noise on sampled joint velocities (the run keeps vs above 4 x it)

Both fits search vs on a log grid (the model is nonlinear in vs alone) with the tanh column
low-passed as identification.dataset() filters the others.
"""
import numpy as np

from .identification import dataset, derivatives, lowpass

BAND_MAX = 0.5            # [rad/s] the widest band searched, and a joint's vs where its rows cannot tell
MIN_ROWS = 20             # a joint's rows (away from the record's gaps) below which its vs is not fitted
MIN_TRIPLES = 10          # velocity_noise: the distinct samples' triples below which it is not told


def fit_bands(model, t, q, tau, inertial=False, est=None, derivative_cutoff=50.0, cutoff=10.0, step=5, trim=0.5,
              valid=None, band_min=0.002, band_max=BAND_MAX, n_grid=40):
    """The velocity scale vs of each joint's dry friction fc tanh(v / vs) from the same data (issue 43):
    the shape of the friction near zero speed, which the fixed FRICTION_BAND only assumed.  The model
    is nonlinear in vs alone: per joint, for each vs on a log grid over [band_min, band_max], the
    joint's four terms (Ia, fv, fc, off) by least squares on its rows, the tanh column built at that vs
    and low-passed as dataset() does the others (parallel filtering: the filter, linear, keeps
    tau = W theta true row by row wherever it holds sample by sample); the vs of the smallest residual,
    refined by a parabola through its neighbours in log vs.  Every row is used, the reversals too
    (they carry the shape; dataset()'s v_min mask would leave out exactly them), except those near a gap
    (valid).  inertial=True: the inertial part of `est` (an Identification with the inertials) is
    taken from the target first.  band_min: the floor (a band narrower than the velocity noise makes
    the compensation chatter; a wider one is safe: the compensation stays below the model).  Returns
    (vs per joint, NaN where fewer than MIN_ROWS rows are left, {joint: (grid, residual RMS)})."""
    W, y, keep, v, sl = _band_rows(model, t, q, tau, inertial, derivative_cutoff, cutoff, step, trim, valid)
    n = model.nv
    p0 = W.shape[2] - 4 * n                    # the joint block's first column
    if inertial:
        if est is None:
            raise ValueError("fit_bands: inertial=True needs the estimate of the inertials (est)")
        y = y - W[:, :, :p0] @ est.theta()[:p0]

    def joint(j, rows, yj):
        fixed = W[rows][:, j, [p0 + j, p0 + n + j, p0 + 3 * n + j]]       # Ia q'', fv q', off

        def rms(col):
            A = np.column_stack([fixed, col])
            r = yj - A @ np.linalg.lstsq(A, yj, rcond=None)[0]
            return np.sqrt(np.mean(r ** 2))
        return rms
    return _fit_on_grid(model, t, y, keep, v, sl, cutoff, band_min, band_max, n_grid, joint)


def _fit_on_grid(model, t, y, keep, v, sl, cutoff, band_min, band_max, n_grid, joint):
    """The band fits' search: per joint with at least MIN_ROWS rows (NaN otherwise), the residual RMS
    joint(j, rows, y_j)(col) of each vs on a log grid over [band_min, band_max], col the joint's tanh(v
    / vs) column (filtered and sampled as dataset()'s rows), its minimum refined (_grid_minimum).
    Returns (vs per joint clipped to the grid, {joint: (grid, residual RMS)})."""
    grid = np.geomspace(band_min, band_max, n_grid)
    out, curves = np.empty(model.nv), {}
    for j in range(model.nv):
        rows = keep[:, j]
        if rows.sum() < MIN_ROWS:
            out[j] = np.nan
            continue
        rms = joint(j, rows, y[rows, j])
        res = np.empty(n_grid)
        for i, vs in enumerate(grid):
            res[i] = rms(lowpass(t, np.tanh(v[:, j] / vs), cutoff)[sl][rows])
        out[j] = _grid_minimum(grid, res)
        curves[model.joint_names[j]] = (grid, res)
    return np.clip(out, band_min, band_max), curves


def _band_rows(model, t, q, tau, inertial, derivative_cutoff, cutoff, step, trim, valid):
    """dataset() with every row kept but those near a gap, the joint speeds at every sample and the
    slice that takes dataset()'s rows from them: what the band fits build their tanh columns from."""
    W, y, keep = dataset(model, t, q, tau, inertial=inertial, derivative_cutoff=derivative_cutoff, cutoff=cutoff,
                         step=step, v_min=-1.0, trim=trim, valid=valid)
    _, v, _, _ = derivatives(t, q, cutoff=derivative_cutoff)
    k = int(round(trim / float(np.mean(np.diff(t)))))
    return W, y, keep, v, slice(k, len(t) - k, step)


def _grid_minimum(grid, res):
    """The argument of the smallest residual on a log grid, refined by the vertex of the parabola
    through it and its neighbours in log(grid)."""
    i = int(np.argmin(res))
    if not 0 < i < len(grid) - 1:
        return float(grid[i])
    y0, y1, y2 = res[i - 1:i + 2]
    den = y0 - 2 * y1 + y2
    shift = 0.5 * (y0 - y2) / den if den > 0 else 0.0
    x = np.log(grid)
    return float(np.exp(x[i] + shift * (x[1] - x[0])))


def velocity_noise(v, t=None):
    """The white noise on sampled joint velocities v (N, n), per joint: the spread of the combinations
    e = (h2 v0 - (h1 + h2) v1 + h1 v2) / |(h2, h1 + h2, h1)| of each three samples in a row, h1 and h2
    their intervals (zero on any straight line in time; white noise of std s gives s; at equal
    intervals the second difference over sqrt(6); an excitation's motion, its jerk times h^2, next to
    nothing at a control rate), the spread as 1.4826 x the median absolute deviation (a friction
    reversal's step in the acceleration, a few samples each, does not count).  A sample equal to the
    one before at every joint is a driver's repeat (the loop stepped again before a new state came)
    and is left out first: it would read as no noise.  t: the samples' times (None: equal intervals);
    the triples across a gap (an interval over 1.5 x the median) are left out (the motion's
    acceleration would read as noise).  NaN per joint where fewer than MIN_TRIPLES triples are left."""
    v = np.asarray(v, float)
    if v.ndim == 1:
        v = v[:, None]
    new = np.ones(len(v), bool)
    new[1:] = np.any(v[1:] != v[:-1], axis=1)
    v = v[new]
    if t is None:
        h1 = h2 = np.ones(max(len(v) - 2, 0))
    else:
        dt = np.diff(np.asarray(t, float)[new])
        h1, h2 = dt[:-1], dt[1:]
        if len(dt):
            h = float(np.median(dt))
            ok = (h1 > 0.0) & (h2 > 0.0) & (h1 <= 1.5 * h) & (h2 <= 1.5 * h)
            h1, h2 = np.where(ok, h1, np.nan), np.where(ok, h2, np.nan)
    a = np.column_stack([h2, -(h1 + h2), h1])
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    e = a[:, :1] * v[:-2] + a[:, 1:2] * v[1:-1] + a[:, 2:] * v[2:]
    e = e[np.isfinite(a[:, 0])]
    if len(e) < MIN_TRIPLES:
        return np.full(v.shape[1], np.nan)
    return 1.4826 * np.median(np.abs(e - np.median(e, axis=0)), axis=0)


SLOW_RATIOS = (1.0 / 16.0, 0.25, 1.0)     # the slow excitation's peak speeds, as fractions of the fastest's


def slow_direction(lower, upper, q_start):
    """Per joint +1 / -1, the side of q_start with more room to the limits, and that room [rad]: where
    slow_excitation goes."""
    up, down = np.asarray(upper, float) - q_start, q_start - np.asarray(lower, float)
    return np.where(up >= down, 1.0, -1.0), np.maximum(up, down)


def slow_reach(v_peak, period):
    """How far from its start the slow excitation takes a joint [rad]: 2 A of the fastest sweep."""
    return 2.0 * max(SLOW_RATIOS) * v_peak * period / (2.0 * np.pi)


def slow_duration(period, hold=0.5):
    """The slow excitation's length [s]: its sweeps and a hold at each end."""
    return 2.0 * hold + len(SLOW_RATIOS) * period


def slow_excitation(q_start, v_peak, period, direction, t, hold=0.5):
    """The short extra excitation for the dry friction's shape near rest: every joint at once goes
    out and back from q_start along `direction` (per joint, +1 / -1: toward its roomier side) in one
    period of q_start + d A (1 - cos w t) for each peak speed A w in v_peak * SLOW_RATIOS, slowest
    first, at rest `hold` s before and after (the filters' trimmed ends).  At rest at every joint
    between the sweeps; the farthest it goes is slow_reach (0.02 rad at 0.032 rad/s, 2 s).  Returns q,
    v, a (len(t), n) and the duration (slow_duration)."""
    t = np.atleast_1d(np.asarray(t, float))
    d = np.asarray(direction, float)
    w = 2.0 * np.pi / period
    q = np.tile(np.asarray(q_start, float), (len(t), 1))
    v, a = np.zeros_like(q), np.zeros_like(q)
    for k, r in enumerate(SLOW_RATIOS):
        u = t - hold - k * period
        on = (u >= 0.0) & (u < period)
        A = r * v_peak / w
        q[on] += np.outer(A * (1.0 - np.cos(w * u[on])), d)
        v[on] += np.outer(A * w * np.sin(w * u[on]), d)
        a[on] += np.outer(A * w * w * np.cos(w * u[on]), d)
    return q, v, a, slow_duration(period, hold)


def fit_bands_slow(model, t, q, tau, est, inertial=False, derivative_cutoff=50.0, cutoff=10.0, step=5, trim=0.5,
                   valid=None, band_min=0.002, band_max=BAND_MAX, n_grid=40, slide=None):
    """The velocity scale vs of each joint's dry friction from the slow excitation's data (t, q, tau:
    its window), the rest of the model from the main estimate `est`: what the joint needs but its dry
    friction (the inertials and Ia, fv, off of est) taken from the torque, the dry part's size fc from
    est too (set by the fast rows, where the tanh is 1 whatever vs), and per joint, for each vs on a log
    grid, the residual of fc tanh(v / vs) (low-passed as dataset() does) plus a constant (a static
    error of the model: gravity, offset) by least squares; the vs of the smallest, refined as
    fit_bands does.  Why not the fast excitation's rows (fit_bands): they cross zero speed within
    milliseconds, at poses all over the excitation, where the model's errors are as large as the
    shape's signal; here the arm crosses the speeds near rest slowly, at accelerations near zero, at
    the pose it works at (on franky-sim the fast rows gave the shoulder 0.0118 rad/s where its friction
    loss at the start pose rises within 0.001).
    A joint that did not slide both ways (fewer than MIN_ROWS rows faster than `slide`, per joint or
    one for all, at least band_min, out and back each) gets band_min, not a fit: its static friction
    held it against the law's pull while the reference went on (a joint law without friction compensation drives the
    excitation), and the rows where it stood carry torques anywhere within +-fc at v = 0, which no
    tanh explains; with the motion one way only the constant and fc tanh(v / vs) are the same column
    too.  The fit then lands anywhere: on a MuJoCo Panda whose shoulder (fc 1.44 N m, sharp) went out
    on the fastest sweep and stayed there, 0.068 rad/s, and the file as written left a pushed arm
    stuck 12 mm off (test_friction.py).  A friction that holds a joint at rest while the law's pull
    grows rises within the speeds the joint did reach: as sharp as the excitation resolves.
    Returns (vs per joint, NaN where fewer than MIN_ROWS rows are left, {joint: (grid, residual
    RMS)}, the joints given band_min for not sliding both ways (bool per joint))."""
    W, y, keep, v, sl = _band_rows(model, t, q, tau, inertial, derivative_cutoff, cutoff, step, trim, valid)
    n = model.nv
    theta = est.theta()
    p0 = W.shape[2] - 4 * n
    fc = theta[p0 + 2 * n:p0 + 3 * n].copy()
    theta[p0 + 2 * n:p0 + 3 * n] = 0.0                 # all but the dry friction
    y = y - W @ theta

    def joint(j, rows, yj):
        def rms(col):
            r = yj - fc[j] * col
            return np.sqrt(np.mean((r - r.mean()) ** 2))
        return rms
    vs, curves = _fit_on_grid(model, t, y, keep, v, sl, cutoff, band_min, band_max, n_grid, joint)
    u = v[sl]
    fast = band_min if slide is None else np.fmax(slide, band_min)
    out_rows = np.sum(keep & (u > fast), axis=0)
    back_rows = np.sum(keep & (u < -fast), axis=0)
    stuck = np.isfinite(vs) & ((out_rows < MIN_ROWS) | (back_rows < MIN_ROWS))
    return np.where(stuck, band_min, vs), curves, stuck
