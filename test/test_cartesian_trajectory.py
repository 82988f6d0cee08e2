"""Issue 12: Cartesian references with feed-forward, SE(3) interpolation, bounded approach, joint-space
feed-forward.  Oracles: finite differences of the sampled path, the analytic slerp and quintic figures,
numpy's task-space inertia from the in-repo ReferenceBackend, an independent plant (pin.aba integrated by
RK4 on its own Data), and the MuJoCo simulator.  Figures print with pytest -s.

Bounds (named below) against measured values (2026-11-30, Panda, 1 kHz, zero-order hold):
circle r = 40 mm, 2 s per turn (quintic time scaling, rest to rest)
    aba plant, pose only                       RMS 28.2 mm, max 46.4 mm (the impedance lag of the issue)
    aba plant, twist + accel, no C v/Jdot v    RMS 1.3 mm
    aba plant, twist + accel + C v/Jdot v      RMS 0.031 mm, max 0.059 mm
    aba plant, MultiDOF-style trajectory       RMS 0.031 mm  (41 points with twists and accels)
    MuJoCo, trajectory                         RMS 0.031 mm
    MuJoCo, 100 Hz stream pose + twist + accel, first-order hold RMS 0.27 mm; zero-order hold 0.63 mm
"""
import math
import time

import numpy as np
import pinocchio as pin
import pytest

from robot_dynamics.control import CartesianReference, JointTrajectory, State, make_law
from robot_dynamics.control.cartesian_trajectory import CartesianTrajectory
from robot_dynamics.sim import MujocoSim

FRAME = "panda_hand_tcp"
Q0 = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
DT = 1e-3
RADIUS, PERIOD = 0.04, 2.0
FF_RMS_TOL = 0.1e-3          # m: feed-forward tracking, aba plant and MuJoCo (measured 0.031 mm)
POSE_ONLY_MIN = 10e-3        # m: pose-only RMS is at least this (measured 28 mm): the test sees the lag
STREAM_RMS_TOL = 0.5e-3      # m: 100 Hz pose + twist + accel stream, first-order hold (measured 0.27 mm)
FD_TOL = 1e-6                # twist / accel vs central differences of the sampled path (h = 1e-5 s)


def circle(t, p0, r=RADIUS, T=PERIOD):
    """One turn in the y-z plane through p0, quintic time scaling: (p, v, a) analytic."""
    u = min(max(t / T, 0.0), 1.0)
    s = 2 * math.pi * u ** 3 * (10 - 15 * u + 6 * u * u)
    sd = 2 * math.pi * 30 * u * u * (1 - u) ** 2 / T
    sdd = 2 * math.pi * 60 * u * (1 - u) * (1 - 2 * u) / T ** 2
    c, si = math.cos(s), math.sin(s)
    p = p0 + r * np.array([0.0, si, 1.0 - c])
    v = r * np.array([0.0, c, si]) * sd
    a = r * np.array([0.0, -si * sd * sd + c * sdd, c * sd * sd + si * sdd])
    return p, v, a


def circle_trajectory(R0, p0, step=0.05):
    ts = np.arange(0.0, PERIOD + 1e-9, step)
    pts = [circle(t, p0) for t in ts]
    z = np.zeros(3)
    return CartesianTrajectory(ts, [x[0] for x in pts], [R0] * len(ts),
                               [np.r_[x[1], z] for x in pts], [np.r_[x[2], z] for x in pts])


class AbaPlant:
    """The independent plant: pin.aba on its own Data, RK4, torque held over the step."""

    def __init__(self, model, q):
        self.pm = model.pin_model
        self.d = self.pm.createData()
        self.q, self.v, self.t = np.array(q, dtype=float), np.zeros(model.nv), 0.0

    def _f(self, q, v, tau):
        return pin.aba(self.pm, self.d, q, v, tau)

    def step(self, tau, h=DT):
        q, v = self.q, self.v
        k1q, k1v = v, self._f(q, v, tau)
        k2q, k2v = v + h / 2 * k1v, self._f(q + h / 2 * k1q, v + h / 2 * k1v, tau)
        k3q, k3v = v + h / 2 * k2v, self._f(q + h / 2 * k2q, v + h / 2 * k2v, tau)
        k4q, k4v = v + h * k3v, self._f(q + h * k3q, v + h * k3v, tau)
        self.q = q + h / 6 * (k1q + 2 * k2q + 2 * k3q + k4q)
        self.v = v + h / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
        self.t += h


_FK = {}


def fk(refb, q):
    """Pose of FRAME by Pinocchio on a Data of its own (the law's Data is not read)."""
    pm = refb.model.pin_model
    if id(pm) not in _FK:
        _FK[id(pm)] = (pm.createData(), pm.getFrameId(FRAME))
    d, fid = _FK[id(pm)]
    pin.framesForwardKinematics(pm, d, q)
    M = d.oMf[fid]
    return M.rotation.copy(), M.translation.copy()


def cart_law(model, pinb, **extra):
    p = {"frame": FRAME}
    p.update(extra)
    return make_law("cartesian_impedance", model, pinb, p)


# ---------------------------------------------------------------- SE(3) interpolation
def _random_points(rng, n=5):
    Rs = [pin.exp3(rng.normal(size=3) * 0.8) for _ in range(n)]
    return [0.5, 1.0, 1.6, 2.0, 3.0][:n], rng.normal(size=(n, 3)) * 0.1, Rs


@pytest.mark.parametrize("kind", ["poses", "twists", "accels"])
def test_se3_trajectory_hits_points_and_is_self_consistent(kind):
    """Every kind: the sampled pose equals each point at its time (1e-9), and twist / accel are the
    central differences of the sampled pose / twist (FD_TOL); given twists (accels) are met at the
    inner knots (1e-8)."""
    rng = np.random.default_rng(4)
    ts, P, Rs = _random_points(rng)
    tw, ac = rng.normal(size=(5, 6)) * 0.2, rng.normal(size=(5, 6)) * 0.5
    kw = {"poses": {}, "twists": {"twists": tw}, "accels": {"twists": tw, "accels": ac}}[kind]
    tr = CartesianTrajectory(ts, P, Rs, **kw)
    tr.start(0.0, np.eye(3), np.zeros(3), None, max_velocity=(0.3, 1.0), max_acceleration=(1.0, 3.0))
    off = tr.start_time + tr.delay
    for k, tk in enumerate(ts):
        R, p, w, a = tr.sample(tk + off - 1e-12 * (k == len(ts) - 1))
        np.testing.assert_allclose(R, Rs[k], atol=1e-9)
        np.testing.assert_allclose(p, P[k], atol=1e-9)
        if kind != "poses" and k < len(ts) - 1:
            np.testing.assert_allclose(w, tw[k], atol=1e-8)
        if kind == "accels" and 0 < k < len(ts) - 1:
            np.testing.assert_allclose(a, ac[k], atol=1e-7)
    h, worst = 1e-5, 0.0
    for t in np.linspace(0.01, tr.end_time - 0.01, 60):
        R0, p0, w0, _ = tr.sample(t - h)
        R1, p1, w1, _ = tr.sample(t + h)
        _, _, w, a = tr.sample(t)
        w_fd = np.concatenate([(p1 - p0) / (2 * h), pin.log3(R1 @ R0.T) / (2 * h)])
        worst = max(worst, np.abs(w_fd - w).max(), np.abs((w1 - w0) / (2 * h) - a).max())
    print(f"\n{kind}: |twist, accel - central differences| max {worst:.2e}")
    assert worst < FD_TOL


def test_se3_two_points_follow_the_geodesic():
    """Rest to rest between two poses in T: the orientation is R0 Exp(s log(R0^T R1)) (slerp) with s the
    position's fraction of the way (the same minimum-jerk scaling, s = 10u^3 - 15u^4 + 6u^5), 1e-9."""
    R0, R1 = pin.exp3(np.array([0.1, -0.4, 0.3])), pin.exp3(np.array([1.2, 0.5, -0.9]))
    p0, p1 = np.zeros(3), np.array([0.3, -0.1, 0.2])
    tr = CartesianTrajectory([0.0, 2.0], [p0, p1], [R0, R1])
    L = pin.log3(R0.T @ R1)
    for u in np.linspace(0, 1, 11):
        R, p, _, _ = tr.sample(2.0 * u)
        s = 10 * u ** 3 - 15 * u ** 4 + 6 * u ** 5
        np.testing.assert_allclose(p, p0 + s * (p1 - p0), atol=1e-12)
        np.testing.assert_allclose(R, R0 @ pin.exp3(s * L), atol=1e-9)


def test_target_jump_is_approached_within_bounds():
    """A single point at t = 0, 0.3 m (diagonal) and 1.2 rad away: the approach's peak speeds and accelerations
    reach the bounds but do not pass them (rest-to-rest quintic: 15/8 d / T, 10/sqrt(3) d / T^2), it
    ends at the target at rest."""
    Rt, pt = pin.exp3(1.2 * np.array([2.0, -1.0, 2.0]) / 3.0), np.array([0.2, -0.2, 0.1])
    vmax, wmax, amax, almax = 0.25, 1.0, 1.0, 4.0
    tr = CartesianTrajectory([0.0], [pt], [Rt]).start(1.0, np.eye(3), np.zeros(3), None,
                                                        (vmax, wmax), (amax, almax))
    T = tr.duration
    T_expect = max(15 / 8 * 0.3 / vmax, math.sqrt(10 / math.sqrt(3) * 0.3 / amax),
                   15 / 8 * 1.2 / wmax, math.sqrt(10 / math.sqrt(3) * 1.2 / almax))
    assert T == pytest.approx(T_expect, rel=1e-12)
    S = [tr.sample(t) for t in np.linspace(1.0, 1.0 + T, 2001)]
    v = max(np.linalg.norm(s[2][:3]) for s in S)
    w = max(np.linalg.norm(s[2][3:]) for s in S)
    a = max(np.linalg.norm(s[3][:3]) for s in S)
    al = max(np.linalg.norm(s[3][3:]) for s in S)
    print(f"\napproach in {T:.3f} s: peak |v| {v:.4f} m/s (<= {vmax}), |w| {w:.4f} rad/s (<= {wmax}), "
          f"|a| {a:.4f} (<= {amax}), |alpha| {al:.4f} (<= {almax})")
    assert v <= vmax * (1 + 1e-9) and w <= wmax * (1 + 1e-9) and a <= amax * (1 + 1e-6) and al <= almax * (1 + 1e-6)
    assert max(v / vmax, w / wmax, a / amax, al / almax) > 0.99           # the binding bound is reached
    R, p, tw, ac = tr.sample(1.0 + T)
    np.testing.assert_allclose(R, Rt, atol=1e-12)
    np.testing.assert_allclose(p, pt, atol=1e-12)
    assert not tw.any() and not ac.any()


def test_bad_trajectories_raise():
    R = np.eye(3)
    with pytest.raises(ValueError, match="rotation"):
        CartesianTrajectory([0.0], [[0, 0, 0]], [2 * R])
    with pytest.raises(ValueError, match="increasing"):
        CartesianTrajectory([0.0, 0.0], [[0, 0, 0]] * 2, [R] * 2)
    with pytest.raises(ValueError, match="finite"):
        CartesianTrajectory([0.0], [[0, np.nan, 0]], [R])
    with pytest.raises(ValueError, match="twists"):
        CartesianTrajectory([0.0], [[0, 0, 0]], [R], twists=[[0.0] * 5])
    with pytest.raises(ValueError, match="quaternion"):
        CartesianTrajectory.from_quaternions([0.0], [[0, 0, 0]], [[0, 0, 0, 0]])


# ---------------------------------------------------------------- the law's feed-forward terms
def test_feedforward_terms_are_lambda_a_and_velocity_products(model, pinb, refb):
    """tau(accel a) - tau(no accel) = J^T Lambda a with Lambda = (J M^-1 J^T)^-1 (numpy, reference
    backend); velocity_product_compensation adds C v - J^T Lambda Jdot v (C v = rnea(q, v, 0) - g,
    Jdot v by central differences of J).  Relative 1e-6."""
    rng = np.random.default_rng(7)
    q = model.random_configuration(rng, margin=0.3)
    v = rng.normal(size=7)
    s = State(q, v, 0.0)
    M = refb.mass_matrix(q)
    J = refb.frame_jacobian(q, FRAME, "local_world_aligned")
    Lam = np.linalg.inv(J @ np.linalg.solve(M, J.T))
    R, p = fk(refb, q)
    a = rng.normal(size=6)
    base = dict(damped_pinv_lambda=0.0)
    law = cart_law(model, pinb, **base)
    law.reset(s)
    law.set_reference(CartesianReference(R, p))
    t0 = law.compute(s)
    law.set_reference(CartesianReference(R, p, accel=a))
    t1 = law.compute(s)
    np.testing.assert_allclose(t1 - t0, J.T @ Lam @ a, rtol=1e-6, atol=1e-6)
    law2 = cart_law(model, pinb, velocity_product_compensation=True, **base)
    law2.reset(s)
    law2.set_reference(CartesianReference(R, p))
    h = 1e-6
    Jd_v = (refb.frame_jacobian(q + h * v, FRAME, "local_world_aligned")
            - refb.frame_jacobian(q - h * v, FRAME, "local_world_aligned")) @ v / (2 * h)
    Cv = np.array(refb.rnea(q, v, np.zeros(7))) - np.array(refb.gravity(q))   # (views into Data)
    np.testing.assert_allclose(law2.compute(s) - t0, Cv - J.T @ Lam @ Jd_v, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- closed loop
def _track(model, pinb, refb, plant, mode, law_params=None, stream_rate=None, T=PERIOD + 0.3):
    """Run the circle against `plant` (AbaPlant or MujocoSim) at 1 kHz; RMS / max of |p_ref - p| and the
    largest rotation error from the start orientation."""
    law = cart_law(model, pinb, **(law_params or {}))
    law.reset(State(plant.q, plant.v, 0.0))
    R0, p0 = fk(refb, plant.q)
    z = np.zeros(3)
    if mode == "trajectory":
        law.set_reference(circle_trajectory(R0, p0))
    every = 1 if stream_rate is None else int(round(1.0 / (stream_rate * DT)))
    e, rot = [], 0.0
    for k in range(int(round(T / DT))):
        t = k * DT
        pr, vr, ar = circle(t, p0)
        if mode != "trajectory" and k % every == 0:
            ref = {"pose": CartesianReference(R0, pr),
                   "twist": CartesianReference(R0, pr, twist=np.r_[vr, z]),
                   "feedforward": CartesianReference(R0, pr, twist=np.r_[vr, z], accel=np.r_[ar, z])}[mode]
            law.set_reference(ref)
        tau = law.compute(State(plant.q, plant.v, t))
        R, p = fk(refb, plant.q)
        e.append(np.linalg.norm(pr - p))
        rot = max(rot, float(np.linalg.norm(pin.log3(R0 @ R.T))))
        plant.step(tau)
    e = np.array(e)
    return float(np.sqrt(np.mean(e ** 2))), float(e.max()), rot


@pytest.mark.slow
def test_circle_feedforward_against_aba_plant(model, pinb, refb):
    """The 40 mm circle at 2 s per turn against pin.aba: pose only lags by tens of mm (POSE_ONLY_MIN);
    twist + accel references (every tick, analytic) and the interpolated trajectory (41 points) with the
    velocity-product terms track within FF_RMS_TOL.  Without the Jdot v / C v terms the error is larger
    (shows those terms matter at this speed)."""
    vpc = {"velocity_product_compensation": True}
    r_pose = _track(model, pinb, refb, AbaPlant(model, Q0), "pose")
    r_ff = _track(model, pinb, refb, AbaPlant(model, Q0), "feedforward", vpc)
    r_tr = _track(model, pinb, refb, AbaPlant(model, Q0), "trajectory", vpc)
    r_nov = _track(model, pinb, refb, AbaPlant(model, Q0), "feedforward")
    for name, r in (("pose only", r_pose), ("twist+accel+vpc", r_ff), ("trajectory+vpc", r_tr),
                    ("twist+accel, no vpc", r_nov)):
        print(f"\naba plant, {name:<22} RMS {1e3 * r[0]:8.3f} mm  max {1e3 * r[1]:8.3f} mm  rot {r[2]:.1e} rad",
              end="")
    assert r_pose[0] > POSE_ONLY_MIN
    assert r_ff[0] < FF_RMS_TOL and r_tr[0] < FF_RMS_TOL
    assert r_nov[0] > r_ff[0]


@pytest.mark.slow
def test_circle_in_mujoco_trajectory_and_stream(model, pinb, refb):
    """MuJoCo (built from the URDF, RK4, 1 ms): the trajectory within FF_RMS_TOL; a 100 Hz stream of pose
    + twist + accel with the first-order hold within STREAM_RMS_TOL, and better than the same stream
    held (zero-order, reference_extrapolation 0)."""
    vpc = {"velocity_product_compensation": True}

    def sim():
        s = MujocoSim(model, dt=DT)
        s.reset(Q0)
        return s
    r_tr = _track(model, pinb, refb, sim(), "trajectory", vpc)
    r_st = _track(model, pinb, refb, sim(), "feedforward", vpc, stream_rate=100.0)
    r_zoh = _track(model, pinb, refb, sim(), "feedforward", dict(vpc, reference_extrapolation=0.0),
                   stream_rate=100.0)
    for name, r in (("trajectory", r_tr), ("stream 100 Hz, 1st-order hold", r_st),
                    ("stream 100 Hz, zero-order hold", r_zoh)):
        print(f"\nMuJoCo, {name:<32} RMS {1e3 * r[0]:7.3f} mm  max {1e3 * r[1]:7.3f} mm  rot {r[2]:.1e} rad",
              end="")
    assert r_tr[0] < FF_RMS_TOL
    assert r_st[0] < STREAM_RMS_TOL and r_st[0] < r_zoh[0]


def test_law_jump_is_approached_not_stepped(model, pinb, refb):
    """target_jump_pos = 1 cm: a target 10 cm away moves the desired pose at <= approach_linear_velocity
    (measured from info.reference each 1 ms tick against the parameter) and the task force of the
    first tick is that of a reference a fraction of a millimetre away (< 1 N, where a step gives K d =
    30 N); the approach ends on the target.  Without the threshold the first tick's force is K d."""
    s = State(Q0, np.zeros(7), 0.0)
    R, p = fk(refb, Q0)
    J = refb.frame_jacobian(Q0, FRAME, "local_world_aligned")
    K, d = 300.0, 0.1
    gains = {f"task.k_pos_{a}": K for a in "xyz"}

    def force(tau):
        return np.linalg.solve(J @ J.T, J @ (tau - refb.gravity(Q0)))

    step = cart_law(model, pinb, nullspace_stiffness=0.0, **gains)
    step.reset(s)
    step.set_reference(CartesianReference(R, p + [0, d, 0]))
    assert force(step.compute(s))[1] == pytest.approx(K * d, rel=1e-6)
    law = cart_law(model, pinb, nullspace_stiffness=0.0, target_jump_pos=0.01, **gains)
    law.reset(s)
    law.set_reference(CartesianReference(R, p + [0, d, 0]))
    f0 = np.linalg.norm(force(law.compute(s)))
    prev, vmax = law.info.reference[:3].copy(), 0.0
    for k in range(1, 2000):
        law.compute(State(Q0, np.zeros(7), k * DT))
        cur = law.info.reference[:3].copy()
        vmax = max(vmax, np.linalg.norm(cur - prev) / DT)
        prev = cur
    print(f"\njump of {d * 1e3:.0f} mm: first-tick force {f0:.3f} N (step: {K * d:.0f} N), peak reference "
          f"speed {vmax:.4f} m/s (bound 0.25)")
    assert f0 < 1.0
    assert vmax <= 0.25 * (1 + 1e-6)
    np.testing.assert_allclose(prev, p + [0, d, 0], atol=1e-12)
    assert law.info.status == "trajectory done"


def test_stream_extrapolation_holds_after_horizon(model, pinb, refb):
    """A streamed pose with twist v: at law time tau after its arrival the desired position is p + v tau
    (tau <= reference_extrapolation = 0.1 s), and after the horizon it stays at p + v 0.1 with zero
    twist (a stream that stopped does not run away)."""
    law = cart_law(model, pinb)
    s = State(Q0, np.zeros(7), 5.0)
    law.reset(s)
    R, p = fk(refb, Q0)
    v = np.array([0.1, -0.05, 0.02])
    law.set_reference(CartesianReference(R, p, twist=np.r_[v, 0, 0, 0]))
    for tau, expect in ((0.0, p), (0.05, p + 0.05 * v), (0.1, p + 0.1 * v), (0.5, p + 0.1 * v)):
        law.compute(State(Q0, np.zeros(7), 5.0 + tau))
        np.testing.assert_allclose(law.info.reference[:3], expect, atol=1e-12)
    assert not law.twist_d.any()


# ---------------------------------------------------------------- joint space
@pytest.mark.slow
def test_joint_laws_use_trajectory_velocity_and_acceleration(model, pinb):
    """A JointTrajectory with velocities and accelerations (quintic), against the aba plant: computed
    torque tracks to 1e-4 rad RMS (the model is exact: only the 1 ms hold remains; measured 2e-5;
    without a_d it would lag by about a / omega^2 ~ 1e-3); joint impedance
    with inertia and Coriolis feed-forward tracks at least 10x better than without (so v_d and a_d
    are used)."""
    ts = np.array([0.5, 1.0, 1.5])
    amp = np.array([0.3, -0.3, 0.3, 0.3, -0.3, 0.3, 0.3])
    P = np.array([Q0 + amp * math.sin(2 * t) for t in ts])
    V = np.array([amp * 2 * math.cos(2 * t) for t in ts])
    A = np.array([-amp * 4 * math.sin(2 * t) for t in ts])
    V[-1] = A[-1] = 0.0                                   # end at rest (the hold after the end)
    out = {}
    for name, params in (("computed_torque", {"omega": 30.0}),
                         ("joint_impedance", {"k_gains": 200.0}),
                         ("joint_impedance_ff", {"k_gains": 200.0, "inertia_feedforward": True,
                                                 "coriolis_feedforward": True})):
        law = make_law(name.replace("_ff", ""), model, pinb, params)
        plant = AbaPlant(model, Q0)
        law.reset(State(plant.q, plant.v, 0.0))
        tr = JointTrajectory(ts, P, V, A)
        law.set_reference(tr)
        e = []
        for k in range(1800):
            tau = law.compute(State(plant.q, plant.v, k * DT))
            q_d, _, _ = tr.sample(k * DT)
            e.append(np.abs(q_d - plant.q).max())
            plant.step(tau)
        out[name] = float(np.sqrt(np.mean(np.square(e))))
    print("\n" + ", ".join(f"{k} RMS {v:.2e} rad" for k, v in out.items()))
    assert out["computed_torque"] < 1e-4
    assert out["joint_impedance_ff"] < 0.1 * out["joint_impedance"]


def test_wrench_reference_keeps_the_trajectory(model, pinb, refb):
    """set_wrench_reference during a trajectory: the desired pose goes on along the trajectory (same as
    without the wrench, 1e-12) and the torque changes by J^T F_d (oracle J from the reference backend)."""
    R0, p0 = fk(refb, Q0)
    Fd = np.array([0.0, 0.0, 5.0, 0.0, 0.3, 0.0])
    laws = [cart_law(model, pinb) for _ in range(2)]
    for law in laws:
        law.reset(State(Q0, np.zeros(7), 0.0))
        law.set_reference(circle_trajectory(R0, p0))
        law.compute(State(Q0, np.zeros(7), 0.0))
    laws[1].set_wrench_reference(Fd)
    s = State(Q0, np.zeros(7), 0.7)
    t0, t1 = laws[0].compute(s), laws[1].compute(s)
    np.testing.assert_allclose(laws[1].info.reference, laws[0].info.reference, atol=1e-12)
    assert np.linalg.norm(laws[1].info.reference[:3] - p0) > 0.01            # it did move along the circle
    J = refb.frame_jacobian(Q0, FRAME, "local_world_aligned")
    np.testing.assert_allclose(t1 - t0, J.T @ Fd, atol=1e-9)


def test_multidof_message_conversion():
    """MultiDOFJointTrajectory -> CartesianTrajectory: the points (pose from the transform's quaternion,
    twist and accel from the first velocity / acceleration) are met at their times; a point without a
    transform and a zero quaternion are refused with a clear error."""
    from geometry_msgs.msg import Transform, Twist
    from trajectory_msgs.msg import MultiDOFJointTrajectory, MultiDOFJointTrajectoryPoint
    from robot_dynamics.nodes.cartesian_refs import cartesian_trajectory_from_msg
    rng = np.random.default_rng(3)
    ts = [0.0, 0.4, 1.0]
    Rs = [pin.exp3(rng.normal(size=3) * 0.5) for _ in ts]
    P = rng.normal(size=(3, 3)) * 0.1
    W = rng.normal(size=(3, 6)) * 0.1
    W[-1] = 0.0
    msg = MultiDOFJointTrajectory()
    for t, R, p, w in zip(ts, Rs, P, W):
        pt = MultiDOFJointTrajectoryPoint()
        tf = Transform()
        tf.translation.x, tf.translation.y, tf.translation.z = (float(x) for x in p)
        qx, qy, qz, qw = pin.Quaternion(R).coeffs()
        tf.rotation.x, tf.rotation.y, tf.rotation.z, tf.rotation.w = float(qx), float(qy), float(qz), float(qw)
        pt.transforms = [tf]
        tw = Twist()
        tw.linear.x, tw.linear.y, tw.linear.z, tw.angular.x, tw.angular.y, tw.angular.z = (float(x) for x in w)
        pt.velocities = [tw]
        pt.accelerations = [Twist()]
        pt.time_from_start.sec, pt.time_from_start.nanosec = int(t), int(round((t - int(t)) * 1e9))
        msg.points.append(pt)
    tr = cartesian_trajectory_from_msg(msg)
    assert tr.kind == "quintic"
    for t, R, p, w in zip(ts, Rs, P, W):
        R_s, p_s, w_s, a_s = tr.sample(t)
        np.testing.assert_allclose(R_s, R, atol=1e-9)
        np.testing.assert_allclose(p_s, p, atol=1e-12)
        np.testing.assert_allclose(w_s, w, atol=1e-9)
    msg.points[1].transforms = []
    with pytest.raises(ValueError, match="point 1: no transform"):
        cartesian_trajectory_from_msg(msg)
    msg.points[1].transforms = [Transform()]
    msg.points[1].transforms[0].rotation.w = 0.0
    with pytest.raises(ValueError, match="quaternion"):
        cartesian_trajectory_from_msg(msg)


# ---------------------------------------------------------------- the ControlLoop (what the nodes run)
@pytest.mark.slow
def test_control_loop_follows_a_cartesian_trajectory_in_mujoco(model, pinb, refb):
    """ControlLoop (law + safety filter + supervisor) with MuJoCo at 1 kHz: the circle given as a
    CartesianTrajectory is followed within FF_RMS_TOL of the analytic circle (by FK, from the step the
    trajectory started); a target wrench set half-way changes only F_d: the desired pose stays on the
    analytic circle (1e-8), the trajectory is not dropped; a pose-only reference after it is taken."""
    from robot_dynamics.control import ControlLoop
    loop = ControlLoop.from_params(model, {
        "controller": "cartesian_impedance", "cartesian_impedance.frame": FRAME, "ramp_time": 0.0,
        "torque_rate_limit": 1e6,              # g(q) from the first step: no sag at the start
        "cartesian_impedance.velocity_product_compensation": True})
    sim = MujocoSim(model, dt=DT)
    sim.reset(Q0)
    loop.activate(0.0)
    R0, p0 = fk(refb, Q0)                   # the pose the law holds from its first state
    e, ref_dev = [], 0.0
    k_start = 20
    for k in range(int(round((PERIOD + 0.3) / DT)) + k_start):
        now = k * DT
        if k == k_start:                     # applied at this step: the trajectory starts at k_start DT
            ok, why = loop.set_reference(circle_trajectory(R0, p0))
            assert ok, why
        if k == k_start + 1000:
            ok, why = loop.references.set_target_wrench([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
            assert ok, why
        loop.update_state(sim.q, sim.v, now)
        tau, safe = loop.step(now)
        assert not safe
        if k >= k_start:
            pr = circle(now - k_start * DT, p0)[0]
            if k < k_start + 1000:
                e.append(np.linalg.norm(pr - fk(refb, sim.q)[1]))
            ref_dev = max(ref_dev, float(np.linalg.norm(loop.info.reference[:3] - pr)))
        sim.step(tau)
    rms = float(np.sqrt(np.mean(np.square(e))))
    print(f"\nControlLoop + MuJoCo, circle trajectory: RMS {rms * 1e3:.3f} mm (first 1 s), desired pose vs "
          f"the analytic circle {ref_dev:.1e} m")
    assert rms < FF_RMS_TOL
    assert ref_dev < 1e-8
    R, p = fk(refb, sim.q)
    ok, _ = loop.set_reference(CartesianReference(R0, p0 + [0.0, 0.0, 0.01]))
    assert ok
    t_end = k_start * DT + PERIOD + 0.3
    loop.update_state(sim.q, sim.v, t_end)
    loop.step(t_end)
    np.testing.assert_allclose(loop.info.reference[:3], p0 + [0.0, 0.0, 0.01], atol=1e-12)


def test_pose_only_stream_velocity_estimate(model, pinb, refb):
    """estimate_target_velocity: poses streamed every 10 ms along a line at v (no twist): from the second
    pose on the law's twist_d is v (1e-9) and between poses the desired position moves on as p_k + v tau
    (first-order hold, 1e-9); without the option twist_d stays zero and the position is held."""
    R, p = fk(refb, Q0)
    v = np.array([0.05, -0.02, 0.03])
    for est in (True, False):
        law = cart_law(model, pinb, estimate_target_velocity=est)
        law.reset(State(Q0, np.zeros(7), 0.0))
        for k in range(30):                               # 1 kHz law, 100 Hz stream
            t = k * DT
            if k % 10 == 0:
                law.set_reference(CartesianReference(R, p + v * t))
            law.compute(State(Q0, np.zeros(7), t))
            if k >= 10:
                expect = p + v * t if est else p + v * (k // 10) * 0.01
                np.testing.assert_allclose(law.info.reference[:3], expect, atol=1e-9)
                np.testing.assert_allclose(law.twist_d[:3], v if est else 0.0, atol=1e-9)


# ---------------------------------------------------------------- over DDS: sim node + controller node
DDS_RMS_TOL = 8e-3           # m: RMS controller error on the 2 s circle from ~/cartesian_trajectory over
                             #   DDS.  A scheduling allowance: measured 1.4 mm (demo, loaded 2-core
                             #   machine, 550 Hz loop), 0.024 mm in-process; pose only lags 25-28 mm


@pytest.mark.system
@pytest.mark.slow
def test_cartesian_inputs_over_dds(ros, model, tmp_path):
    """sim_node + controller_node (cartesian_impedance, children under SCHED_FIFO where permitted).
    1. A MultiDOFJointTrajectory circle (2 s per turn) on ~/cartesian_trajectory: every reference the
       controller reports on ~/state lies on the circle (radius 40 mm in the y-z plane through the start,
       1e-6 m: the interpolation, independent of timing) and covers it (y beyond -28 and +28 mm in the
       samples the probe received); the RMS of
       the reported error over the motion is below DDS_RMS_TOL.
    2. ~/target_twist then ~/target_pose: the reference moves on along the twist for
       reference_extrapolation (0.1 s) and stops at pose + 0.1 v (1e-6 m)."""
    from geometry_msgs.msg import TwistStamped
    from trajectory_msgs.msg import MultiDOFJointTrajectory
    from robot_dynamics.demo import Demo, circle_points
    from robot_dynamics.nodes.probe import Probe
    from robot_dynamics.nodes.processes import RT_TEST, NodeProcesses, start_sim_and_controller
    procs = NodeProcesses(log_dir=tmp_path)
    probe = Probe(joints=model.joint_names, name="cart_probe")
    pub_traj = probe.create_publisher(MultiDOFJointTrajectory, "/torque_controller/cartesian_trajectory", 10)
    pub_twist = probe.create_publisher(TwistStamped, "/torque_controller/target_twist", 10)
    try:
        start_sim_and_controller(procs, "panda", "cartesian_impedance", realtime=RT_TEST,
                                 sim_params={"publish_clock": False},
                                 controller_params={"cartesian_impedance": {"velocity_product_compensation": True}})
        probe.start()
        ok = probe.wait_for(lambda: probe.n_state > 50 and pub_traj.get_subscription_count() > 0
                            and pub_twist.get_subscription_count() > 0, 60.0, check=procs.check_alive)
        assert ok, "\n".join(procs.log(p)[-2000:] for p in procs.procs)
        time.sleep(1.0)                                   # the start ramp is over
        with probe.lock:
            ref0 = probe.ctl_ref.copy()
        R0 = quat_matrix(ref0[3:7])
        p0 = ref0[:3]
        probe.clear_logs()
        demo = Demo.__new__(Demo)                         # the demo's message builder, without its nodes
        demo.tcp = FRAME
        demo._trajectory(pub_traj, circle_points(R0, p0, PERIOD, 1), settle=0.5)
        procs.check_alive()
        with probe.lock:
            log = list(probe.state_log)
        refs = np.array([r[1][:3] for r in log])
        errs = np.array([np.linalg.norm(r[2][:3]) for r in log])
        c = p0 + [0.0, 0.0, RADIUS]
        radial = np.abs(np.linalg.norm(refs[:, 1:] - c[1:], axis=1) - RADIUS)
        moving = np.linalg.norm(refs - p0, axis=1) > 1e-4
        rms = float(np.sqrt(np.mean(errs[moving] ** 2)))
        print(f"\nover DDS: {len(log)} ~/state samples, {moving.sum()} during the motion; reference off the "
              f"circle {radial.max():.1e} m; error RMS {rms * 1e3:.3f} mm, max {errs[moving].max() * 1e3:.3f} mm")
        assert moving.sum() > 20
        assert radial.max() < 1e-6 and np.abs(refs[:, 0] - p0[0]).max() < 1e-6
        assert refs[:, 1].min() < p0[1] - 0.7 * RADIUS and refs[:, 1].max() > p0[1] + 0.7 * RADIUS
        assert rms < DDS_RMS_TOL
        # 2. twist + pose: first-order hold for 0.1 s, then held
        v = np.array([0.0, 0.02, -0.01])
        tw = TwistStamped()
        tw.twist.linear.x, tw.twist.linear.y, tw.twist.linear.z = (float(x) for x in v)
        # DDS orders messages per topic only: on a loaded host the twist can reach the controller after
        # the pose or more than 0.1 s before it (seen in CI), and the pose is then held without it.
        # That case (the reference exactly at the pose) is sent again, with a new pose, up to 4 times
        for attempt in range(4):
            target = p0 + [0.0, 0.0, 0.005 * (attempt + 1)]
            pub_twist.publish(tw)
            time.sleep(0.05)
            probe.publish_pose(target, pin.Quaternion(R0).coeffs())
            time.sleep(1.0)
            with probe.lock:
                ref = probe.ctl_ref.copy()
            if attempt < 3 and np.allclose(ref[:3], target, rtol=0.0, atol=1e-9):
                print(f"twist and pose not paired on attempt {attempt + 1} (delivery order): sent again")
                continue
            break
        np.testing.assert_allclose(ref[:3], target + 0.1 * v, atol=1e-6)
    finally:
        probe.stop()
        probe.destroy_node()
        procs.stop_all()


def quat_matrix(q):
    """x y z w -> 3x3 (pinocchio, independent of the package's converters)."""
    x, y, z, w = (float(a) for a in q)
    return pin.Quaternion(w, x, y, z).normalized().toRotationMatrix()
