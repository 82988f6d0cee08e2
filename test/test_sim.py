"""The MuJoCo simulator against the dynamics layer: inverse dynamics, mass matrix, kinematics, F/T
sensor, payload, free-fall energy.  Run with `pytest -s` to see the measured figures."""
import numpy as np
import pytest

from robot_dynamics.dynamics import Model, PinocchioBackend
from robot_dynamics.sim import MujocoSim

ID_TOL = 1e-6          # |mj_inverse - pin.rnea|, N m (measured ~3e-14 on the Panda)
M_TOL = 1e-9           # |mj_fullM - pin.crba|, kg m^2 (measured ~3e-15)
KIN_TOL = 1e-12        # frame placement, m and rotation-matrix entries
FT_REL_TOL = 0.01      # F/T sensor vs expected wrench, relative to the expected wrench's norm
ENERGY_TOL = 1e-4       # free fall, 1 s, RK4 at 1 ms, limits off: |E(t) - E(0)| in J (measured 7e-6 of 93 J)
SENSOR = "panda_link8"  # the flange
TOOL = "panda_hand_tcp"
G = np.array([0.0, 0.0, -9.81])


@pytest.fixture()
def panda():
    model = Model.from_robot("panda")
    return model, PinocchioBackend(model)


def _states(model, rng, n):
    for _ in range(n):
        yield model.random_configuration(rng), rng.uniform(-2, 2, model.nv), rng.uniform(-5, 5, model.nv)


def test_inverse_dynamics_and_mass_matrix_match_pinocchio(panda):
    model, dyn = panda
    sim = MujocoSim(model)
    rng = np.random.default_rng(1)
    e_id = e_m = 0.0
    for q, v, a in _states(model, rng, 50):
        e_id = max(e_id, np.abs(sim.inverse_dynamics(q, v, a) - dyn.rnea(q, v, a)).max())
        e_m = max(e_m, np.abs(sim.mass_matrix(q) - dyn.mass_matrix(q)).max())
    print(f"\nMuJoCo vs Pinocchio, 50 random states: RNEA {e_id:.2e} N m, mass matrix {e_m:.2e}")
    assert e_id < ID_TOL and e_m < M_TOL


def test_joint_order_limits_and_kinematics(panda):
    model, dyn = panda
    sim = MujocoSim(model)
    jid = [sim.m.joint(name).id for name in model.joint_names]
    assert np.allclose(sim.m.jnt_range[jid], np.c_[model.lower_limits, model.upper_limits])
    rng = np.random.default_rng(2)
    q = model.random_configuration(rng)
    sim.reset(q)
    assert np.array_equal(sim.q, q) and np.all(sim.v == 0) and sim.t == 0.0
    for frame in ("panda_link3", "panda_joint7", "panda_link8", "panda_hand", TOOL):
        R, p = sim.frame_pose(frame)
        R0, p0 = dyn.frame_placement(q, frame)
        assert np.abs(R - R0).max() < KIN_TOL and np.abs(p - p0).max() < KIN_TOL, frame


def test_passive_terms_configurable(panda):
    model, _ = panda
    d = np.linspace(0.5, 3.5, 7)
    sim = MujocoSim(model, damping=d)
    sim.reset(model.neutral(), v=np.ones(7))
    assert np.allclose(sim.d.qfrc_passive[sim._dadr], -d)
    assert np.all(MujocoSim(model).m.dof_damping == 0) and np.all(MujocoSim(model).m.dof_frictionloss == 0)
    assert np.all(MujocoSim(model).m.dof_armature == 0)
    assert not np.any(MujocoSim(model, limits=False).m.jnt_limited)


def test_effort_limits_clamp_measured_effort(panda):
    model, _ = panda
    sim = MujocoSim(model)
    sim.reset(np.array([0, 0, 0, -1.5, 0, 1.5, 0.0]))
    tau = np.full(7, 200.0)
    sim.step(tau)
    assert np.allclose(sim.measured_effort, model.effort_limits)
    sim2 = MujocoSim(model, effort_limits=False)
    sim2.reset(sim2.q)
    sim2.step(tau)
    assert np.allclose(sim2.measured_effort, tau)


def _distal_gravity_wrench(dyn, q, tool_mass, tool_com):
    """Weight of everything distal to the flange (hand, fingers, tool) as the sensor reads it: the force
    the tool side exerts on the sensor, in the sensor frame, torque about the sensor origin.
    Built from the URDF's numbers and Pinocchio's kinematics, independently of MuJoCo."""
    Rs, ps = dyn.frame_placement(q, SENSOR)
    parts = [("panda_hand", 0.73, [-0.01, 0, 0.03]), ("panda_leftfinger", 0.015, [0, 0, 0]),
             ("panda_rightfinger", 0.015, [0, 0, 0]), (TOOL, tool_mass, tool_com)]
    f, n = np.zeros(3), np.zeros(3)
    for frame, m, c in parts:
        R, p = dyn.frame_placement(q, frame)
        c_w = p + R @ np.asarray(c, dtype=float)
        f += m * G
        n += np.cross(c_w - ps, m * G)
    return np.concatenate([Rs.T @ f, Rs.T @ n])


def _hold_static(sim, dyn, q, extra=None, steps=5):
    """Hold the arm still at q with the model's gravity torque (minus J^T w for an external wrench)."""
    sim.reset(q)
    for _ in range(steps):
        tau = dyn.gravity(sim.q).copy()
        if extra is not None:
            tau += extra
        sim.step(tau)


def test_ft_sensor_static_tool_reads_tool_weight(panda):
    model, dyn = panda
    tool = dict(frame=TOOL, mass=1.2, com=[0.01, -0.02, 0.05], inertia=[2e-3, 0, 0, 3e-3, 0, 1e-3])
    model.attach_payload(**tool)
    sim = MujocoSim(model, ft_sensor_frame=SENSOR, payload=tool)
    rng = np.random.default_rng(3)
    worst = 0.0
    for _ in range(5):
        q = model.random_configuration(rng, margin=0.3)
        _hold_static(sim, dyn, q)
        expected = _distal_gravity_wrench(dyn, sim.q, tool["mass"], tool["com"])
        err = np.linalg.norm(sim.ft_wrench() - expected) / np.linalg.norm(expected)
        worst = max(worst, err)
        assert np.dot(dyn.frame_placement(sim.q, SENSOR)[0] @ sim.ft_wrench()[:3], G) > 0  # reads weight
    print(f"\nF/T static tool: worst relative error vs tool weight {worst:.2e}")
    assert worst < FT_REL_TOL


def test_ft_sensor_reads_applied_wrench(panda):
    model, dyn = panda
    tool = dict(frame=TOOL, mass=0.8, com=[0.0, 0.0, 0.04])
    model.attach_payload(**tool)
    sim = MujocoSim(model, ft_sensor_frame=SENSOR, payload=tool)
    rng = np.random.default_rng(4)
    worst = 0.0
    for _ in range(5):
        q = model.random_configuration(rng, margin=0.3)
        w = np.concatenate([rng.uniform(-20, 20, 3), rng.uniform(-2, 2, 3)])
        sim.reset(q)
        sim.apply_wrench(TOOL, w)
        J = dyn.frame_jacobian(q, TOOL, "local_world_aligned")
        _hold_static(sim, dyn, q, extra=-J.T @ w)
        sim.apply_wrench(TOOL, w)
        assert np.abs(sim.v).max() < 1e-9             # the arm really is static
        weight = _distal_gravity_wrench(dyn, sim.q, tool["mass"], tool["com"])
        Rs, ps = dyn.frame_placement(sim.q, SENSOR)
        Rt, pt = dyn.frame_placement(sim.q, TOOL)
        expected = np.concatenate([Rs.T @ w[:3], Rs.T @ (w[3:] + np.cross(pt - ps, w[:3]))])
        err = np.linalg.norm(sim.ft_wrench() - weight - expected) / np.linalg.norm(expected)
        worst = max(worst, err)
    sim.clear_wrench()
    assert not np.any(sim.d.xfrc_applied)
    print(f"\nF/T with applied wrench: worst relative error (weight removed) {worst:.2e}")
    assert worst < FT_REL_TOL


def test_payload_matches_model(panda):
    model, dyn = panda
    p = dict(frame="panda_hand", mass=1.5, com=[0.02, 0.01, 0.08], inertia=[4e-3, 1e-4, 0, 5e-3, 2e-4, 2e-3])
    sim = MujocoSim(model)
    rng = np.random.default_rng(5)
    q, v, a = next(_states(model, rng, 1))
    sim.reset(q, v)
    sim.attach_payload(**p)
    assert np.array_equal(sim.q, q) and np.array_equal(sim.v, v)       # state kept across recompile
    model.attach_payload(**p)
    e = max(np.abs(sim.inverse_dynamics(q, v, a) - dyn.rnea(q, v, a)).max()
            for q, v, a in _states(model, rng, 10))
    print(f"\npayload on panda_hand: MuJoCo vs Pinocchio RNEA {e:.2e} N m")
    assert e < ID_TOL
    sim.detach_payload()
    model.detach_payload()
    assert np.abs(sim.inverse_dynamics(q, v, a) - dyn.rnea(q, v, a)).max() < ID_TOL


def test_free_fall_conserves_energy(panda):
    model, dyn = panda
    sim = MujocoSim(model, limits=False)       # a limit impact would (correctly) dissipate energy
    rng = np.random.default_rng(6)
    q0 = model.random_configuration(rng, margin=0.5)
    sim.reset(q0, rng.uniform(-0.5, 0.5, 7))

    def energy():
        return dyn.kinetic_energy(sim.q, sim.v) + dyn.potential_energy(sim.q)

    e0, drift, zero = energy(), 0.0, np.zeros(7)
    # MuJoCo's own potential also counts the root link (welded to the world): a constant offset
    offset = sim.energy()[1] - dyn.potential_energy(sim.q)
    for _ in range(100):
        sim.step(zero, n=10)
        drift = max(drift, abs(energy() - e0))
    moved = np.abs(sim.q - q0).max()
    ke, pe = sim.energy()                        # MuJoCo's own energies agree with the model's
    assert abs(ke - dyn.kinetic_energy(sim.q, sim.v)) < 1e-9
    assert abs(pe - offset - dyn.potential_energy(sim.q)) < 1e-9
    print(f"\nfree fall 1 s (moved {moved:.2f} rad): max |E - E0| = {drift:.2e} J (E0 = {e0:.2f} J)")
    assert moved > 0.1 and drift < ENERGY_TOL


def test_table_contact_supports_the_flange(panda):
    model, dyn = panda
    q = np.array([0.0, 0.3, 0.0, -2.2, 0.0, 2.5, 0.785])
    _, p = dyn.frame_placement(q, TOOL)
    sim = MujocoSim(model, table=p[2] - 0.011, ft_sensor_frame=SENSOR)   # 1 mm below the contact sphere
    sim.reset(q)
    push = np.array([0, 0, -20.0, 0, 0, 0])
    J = dyn.frame_jacobian(q, TOOL, "local_world_aligned")
    for _ in range(500):
        sim.step(dyn.gravity(sim.q) + J.T @ push)   # press down with 20 N
    assert sim.d.ncon >= 1
    _, p1 = dyn.frame_placement(sim.q, TOOL)
    assert p1[2] > p[2] - 0.01                      # stopped by the table (a few mm of penetration)


# ---- robots a user brings: non-physical inertials, massless joints, name clashes, locked joints ----
def _user_model(case):
    import warnings
    from pathlib import Path
    from robot_dynamics.dynamics import InertiaWarning
    from robot_dynamics.dynamics.robots import robots_dir
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InertiaWarning)
        if case == "puma560_dh":      # massless link 1 with rotor inertia, link 3 breaks the triangle inequality
            return Model.from_dh_yaml(Path(__file__).resolve().parents[1] / "config" / "puma560_dh.yaml")
        if case == "romeo_left_arm":  # massless finger joints (regularised), the rest of the body locked
            arm = ["LShoulderPitch", "LShoulderYaw", "LElbowRoll", "LElbowYaw", "LWristRoll", "LWristYaw",
                   "LWristPitch", "LHand", "LFinger21", "LFinger22", "LThumb1"]
            return Model.from_urdf_file(robots_dir() / "romeo_description/urdf/romeo.urdf", active_joints=arm)
        files = {"romeo_laas_small": "romeo_description/urdf/romeo_laas_small.urdf",   # not positive definite
                 "pr2": "pr2_description/urdf/pr2.urdf",                               # triangle inequality
                 "z1": "z1_description/urdf/z1.urdf"}                                  # link/joint name clash
        return Model.from_urdf_file(robots_dir() / files[case])


@pytest.mark.parametrize("case", ["puma560_dh", "romeo_left_arm", "romeo_laas_small", "pr2", "z1"])
def test_sim_runs_models_with_non_physical_or_massless_bodies(case):
    """Built from the same model, MuJoCo integrates the same rigid bodies: held by Pinocchio's g(q0) it
    stays at q0, and falling freely (limits off) it keeps the energy Pinocchio computes on its states."""
    model = _user_model(case)
    dyn = PinocchioBackend(model)
    sim = MujocoSim(model, limits=False, effort_limits=False)
    rng = np.random.default_rng(7)
    q0 = model.random_configuration(rng)
    sim.reset(q0)
    sim.step(dyn.gravity(q0).copy(), n=100)
    held = np.abs(sim.q - q0).max()
    sim.reset(q0)
    E0 = dyn.kinetic_energy(q0, np.zeros(model.nv)) + dyn.potential_energy(q0)
    sim.step(np.zeros(model.nv), n=200)
    drift = abs(dyn.kinetic_energy(sim.q, sim.v) + dyn.potential_energy(sim.q) - E0)
    print(f"\n{case}: held |q - q0| {held:.1e} rad after 0.1 s, free-fall energy drift {drift:.1e} J after 0.2 s")
    assert held < 1e-6 and drift < ENERGY_TOL


# ---- end stops (issue 42): the URDF position limits are hard limits, as on a real arm and in Gazebo ----
STOP_OVERSHOOT = 5e-3   # rad: a joint arriving at its URDF limit at its velocity limit, pushed on at its
#                         effort limit, never goes further past it than this (measured up to 2.6 mrad)
STOP_REST = 1e-3        # rad: ... and rests within this of the limit while pushed (measured <= 0.17 mrad)


def _urdf_joints(urdf):
    """{joint: (type, lower, upper)} read from the URDF text itself (the oracle, not the Model)."""
    import xml.etree.ElementTree as ET
    out = {}
    for j in ET.fromstring(urdf).findall("joint"):
        lim = j.find("limit")
        lo = float(lim.get("lower", "nan")) if lim is not None else float("nan")
        hi = float(lim.get("upper", "nan")) if lim is not None else float("nan")
        out[j.get("name")] = (j.get("type"), lo, hi)
    return out


def _drive_into_stop(sim, model, j, side, q0, v_arrive, T=0.3):
    """Start joint j 0.02 rad inside its `side` limit (+1 upper, -1 lower) moving towards it at v_arrive,
    every other joint at q0; a velocity servo (MuJoCo's own bias forces compensated, the push clipped
    at the effort limit) keeps driving it towards the stop at v_arrive, i.e. at its full effort once
    stopped; the other joints held by a PD.  Returns (peak overshoot, final overshoot) in rad."""
    types = _urdf_joints(model.urdf)
    _, lo, hi = types[model.joint_names[j]]
    lim = hi if side > 0 else lo
    q = np.array(q0, dtype=float)
    q[j] = lim - side * 0.02
    v = np.zeros(model.nv)
    v[j] = side * v_arrive
    sim.reset(q, v)
    emax = model.effort_limits[j]
    peak = -np.inf
    for _ in range(int(T / sim.dt)):
        tau = sim.inverse_dynamics(sim.q, sim.v, np.zeros(model.nv))
        hold = 400.0 * (q0 - sim.q) - 40.0 * sim.v
        hold[j] = np.clip(50.0 * (side * v_arrive - sim.v[j]) * emax, -emax, emax)
        sim.step(tau + hold)
        peak = max(peak, side * (sim.q[j] - lim))
    return peak, side * (sim.q[j] - lim)


@pytest.mark.parametrize("robot", ["panda", "ur5", "kinova"])
def test_joint_stops_at_its_urdf_limit(robot):
    """Every limited joint of every shipped robot, driven into each of its URDF limits at its velocity
    limit and pushed on at its effort limit, stops within STOP_OVERSHOOT of the URDF value and rests
    within STOP_REST of it; continuous joints have no stop (a joint driven from 6.2 rad passes 2 pi)."""
    from robot_dynamics.nodes.sim_node import HOME
    model = Model.from_robot(robot)
    sim = MujocoSim(model)
    urdf = _urdf_joints(model.urdf)
    q0 = np.asarray(HOME[robot], dtype=float)
    worst = (0.0, 0.0)
    for j, name in enumerate(model.joint_names):
        kind, lo, hi = urdf[name]
        vmax = model.velocity_limits[j]
        if kind == "continuous":
            q = q0.copy()
            q[j] = 6.2
            sim.reset(q, np.where(np.arange(model.nv) == j, vmax, 0.0))
            for _ in range(300):
                tau = sim.inverse_dynamics(sim.q, sim.v, np.zeros(model.nv))
                sim.step(tau)
            assert sim.q[j] > 6.2 + 0.25 * vmax, (robot, name, sim.q[j])
            continue
        assert kind in ("revolute", "prismatic") and lo < hi, (name, kind, lo, hi)
        for side in (+1, -1):
            peak, rest = _drive_into_stop(sim, model, j, side, q0, vmax)
            worst = (max(worst[0], peak), max(worst[1], abs(rest)))
            assert peak < STOP_OVERSHOOT, (robot, name, side, peak)
            assert abs(rest) < STOP_REST, (robot, name, side, rest)
    print(f"\n{robot}: end stops hit at the velocity limit: worst overshoot {worst[0] * 1e3:.2f} mrad, "
          f"worst rest offset {worst[1] * 1e3:.3f} mrad")
