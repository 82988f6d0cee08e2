"""The hold bound (issue 42's open finding): a command is held on the arm until the next one, and a
starved host holds it for many periods.  A joint of natural frequency w, critically damped, held for T
is unstable once w T > 1; the UR5e's wrist 3 (k 50 N m/rad on 0.017 kg m^2: w 54 rad/s) gets there at
an 18 ms stall, and in a fresh-clone CI run with a CPU hog the sweep's ur5e joint_impedance, only holding
its start pose, reached 4.86x the URDF velocity limit.  The loop now measures the longest recent hold
T (between the stamps of the states stepped on, else the control clock; forgotten with HOLD_DECAY) and slows the law's feedback to
w <= GAIN_OMEGA_DT / T, the repulsion and the stops' damping likewise; after a trip the law is ramped in
from a damped hold that follows the state, not from the frozen torque last sent.

Oracles: the bound's arithmetic from its definition (the decay rule, 0.5 / T); the law's stiffness per
joint measured by finite differences of its torque against the mass matrix of Pinocchio's CRBA on the
URDF (k_j <= w^2 M_jj, the damping ratio kept); and the plant (MuJoCo, stalled_loop.py): the joint
speeds of the arm under every shipped robot x law, held and given a step target, on a host that
answers about 40 % of the states (761 of 1900 in the CI run), against the URDF velocity limits.

Watched fail: the plant test with the old loop (stalled_loop.run with hold_bound=False,
damped_ramp=False) fails 17 of its 21 cases: held, ur5e joint_impedance at 52x its velocity limit,
computed_torque 51x, panda joint_impedance 57x, gravity compensation 3x (ur5e), 27x (panda) and 189x
(kinova), kinova cartesian 24x; with targets up to 2910x (kinova joint_impedance).  The damped ramp alone
(hold_bound=False) fails 14 (every joint law diverges: ur5e joint_impedance 52x); the hold bound alone
(damped_ramp=False) fails 5 (gravity compensation on all three robots and the kinova's Cartesian law:
the ramps after the trips).
"""
import numpy as np
import pinocchio as pin
import pytest

from stalled_loop import run
from robot_dynamics.control import ControlLoop, State, make_law
from robot_dynamics.dynamics import Model, PinocchioBackend, robots

pytestmark = pytest.mark.slow

Q = np.array([0.1, -0.6, 0.2, -2.2, 0.1, 1.7, 0.6])
ARM = [f"panda_joint{i}" for i in range(1, 8)]
LAWS = ("gravity_compensation", "joint_impedance", "computed_torque", "cartesian_impedance")
ROBOTS = ("ur5e", "panda", "kinova")
P_STALL, MEAN_MS = 0.05, 30.0      # ~40 % of the states answered (stalled_loop.py)


def pin_panda():
    m = pin.buildModelFromUrdf(str(robots.robot_urdf_path("panda")))
    lock = [m.getJointId(n) for n in m.names[1:] if n not in ARM]
    m = pin.buildReducedModel(m, lock, pin.neutral(m))
    return m, m.createData()


def pin_mass(q):
    m, d = pin_panda()
    M = pin.crba(m, d, q)
    return np.triu(M) + np.triu(M, 1).T


def test_the_bound_follows_the_longest_recent_hold():
    loop = ControlLoop.from_params(Model.from_robot("panda"), {"controller": "joint_impedance"},
                                   log=lambda lv, tx: None)
    loop.update_state(Q, np.zeros(7), 0.0)
    loop.activate(0.0)
    t = 0.0
    for _ in range(100):                                  # 1 kHz: nothing bound
        t += 0.001
        loop.update_state(Q, np.zeros(7), t)
        loop.step(t, t)
        assert loop.law.omega_cap == np.inf and loop.supervisor.damping_rate_cap == np.inf
    t += 0.040                                            # a 40 ms stall
    loop.update_state(Q, np.zeros(7), t)
    loop.step(t, t)
    assert loop.law.omega_cap == pytest.approx(0.5 / 0.040, rel=1e-9)
    assert loop.supervisor.damping_rate_cap == pytest.approx(2 * 0.5 / 0.040, rel=1e-9)
    h = 0.040
    for _ in range(500):                                  # forgotten at dt / HOLD_DECAY (1 s) per step
        t += 0.001
        h -= h * 0.001 / 1.0
        loop.update_state(Q, np.zeros(7), t)
        loop.step(t, t)
    assert loop.law.omega_cap == pytest.approx(0.5 / h, rel=1e-6)
    assert loop.law.capped > 0                            # the Panda's wrists are faster than 0.5 / 24 ms
    ok, why = loop.set_params({"hold_bound": False})
    assert ok, why
    t += 0.001
    loop.update_state(Q, np.zeros(7), t)
    loop.step(t, t)
    assert loop.law.omega_cap == np.inf


def test_only_commands_with_feedback_count_as_held():
    """The safe command (no state yet, or a stale one: the node republishes it every 50 ms) has no
    feedback in it: the time it was held is not measured, so a driver that paused leaves the law its
    gains when the states come back; a stall of the law's own steps (the watchdog trips on it) is."""
    loop = ControlLoop.from_params(Model.from_robot("panda"), {"controller": "joint_impedance"},
                                   log=lambda lv, tx: None)
    loop.activate(0.0)
    t = 0.0
    for _ in range(10):                                   # waiting for a state: safe steps 50 ms apart
        t += 0.05
        _, safe = loop.step(t, t)
        assert safe
    for _ in range(5):                                    # states at 1 kHz: the law, its gains
        t += 0.001
        loop.update_state(Q, np.zeros(7), t)
        _, safe = loop.step(t, t)
        assert not safe and loop.law.omega_cap == np.inf
    t += 0.3                                              # the law's steps stall 0.3 s: a trip ...
    loop.update_state(Q, np.zeros(7), t)
    _, safe = loop.step(t, t)
    assert safe and loop.counts["watchdog_trips"] == 1
    t += 0.001                                            # ... measured (at most MAX_DT, 0.1 s)
    loop.update_state(Q, np.zeros(7), t)
    _, safe = loop.step(t, t)
    assert not safe and loop.law.omega_cap == pytest.approx(0.5 / 0.1, rel=1e-9)


def test_the_hold_is_measured_on_the_states_stamps():
    """The plant stamps its states with its own time; the node's ROS clock (sim time from /clock) may
    advance in jumps when its executor is starved.  The hold is the time between the stamps of the
    states stepped on: a clock that jumps 50 ms between states stamped 1 ms apart binds nothing; states
    stamped 40 ms apart under a clock that moved 1 ms bind at 0.5 / 40 ms."""
    loop = ControlLoop.from_params(Model.from_robot("panda"), {"controller": "joint_impedance"},
                                   log=lambda lv, tx: None)
    loop.activate(0.0)
    now = stamp = t = 0.0
    for i in range(200):
        now += 0.001
        stamp += 0.001
        t += 0.05 if i % 20 == 19 else 0.0                # the ROS clock: still, then a 50 ms jump
        loop.update_state(Q, np.zeros(7), now, stamp=stamp)
        _, safe = loop.step(now, t)
        assert not safe and loop.law.omega_cap == np.inf
    now += 0.001
    t += 0.001
    stamp += 0.040                                        # the plant's states 40 ms apart
    loop.update_state(Q, np.zeros(7), now, stamp=stamp)
    loop.step(now, t)
    assert loop.law.omega_cap == pytest.approx(0.5 / 0.040, rel=1e-9)


@pytest.mark.parametrize("law", ["joint_impedance", "computed_torque"])
def test_a_capped_joint_law_has_the_bound_as_its_natural_frequency(law):
    """Finite differences of the law's torque in q and v (gravity taken out with Pinocchio's RNEA):
    each joint's stiffness k_j / M_jj <= w^2 (equal where capped), its damping ratio d_j / (2 sqrt(k_j
    M_jj)) kept, with M from Pinocchio's CRBA on the URDF."""
    model = Model.from_robot("panda")
    k = [600.0, 600.0, 600.0, 600.0, 250.0, 150.0, 50.0]
    params = {"k_gains": k, "d_gains": [60.0, 60.0, 60.0, 60.0, 25.0, 15.0, 5.0]} if law == "joint_impedance" \
        else {"kp": [400.0] * 7, "kd": [40.0] * 7}
    ctl = make_law(law, model, PinocchioBackend(model), params)
    ctl.reset(State(Q.copy(), np.zeros(7), 0.0))
    M = pin_mass(Q)
    m = np.diagonal(M)
    w = 8.0
    eps = 1e-6

    pm, pd = pin_panda()

    def fb(q, v):                                         # the law's torque less g(q) (Pinocchio's RNEA)
        return ctl.compute(State(q, v, 0.0)) - pin.rnea(pm, pd, q, np.zeros(7), np.zeros(7))

    def diff(cap):
        ctl.omega_cap = cap
        t0 = fb(Q.copy(), np.zeros(7))
        K = np.array([(fb(Q - eps * e, np.zeros(7)) - t0) / eps for e in np.eye(7)]).T
        D = np.array([-(fb(Q.copy(), eps * e) - t0) / eps for e in np.eye(7)]).T
        return K, D, ctl.capped

    K0, D0, c0 = diff(np.inf)
    K1, D1, c1 = diff(w)
    assert c0 == 0
    if law == "joint_impedance":                          # tau = K e - D v + g: diagonal
        k0, d0, k1, d1 = np.diagonal(K0), np.diagonal(D0), np.diagonal(K1), np.diagonal(D1)
        np.testing.assert_allclose(k0, k, rtol=1e-4)
        over = np.array(k) > w * w * m
        assert c1 == over.sum() > 0
        np.testing.assert_allclose(k1, np.where(over, w * w * m, k), rtol=1e-4)
        assert np.all(d1 <= 2 * w * m * (1 + 1e-4) + 1e-9) and np.all(d1 <= d0 * (1 + 1e-6))
    else:                                                 # tau = M (kp e - kd v) + h: M^-1 K = diag(kp)
        Minv = np.linalg.inv(M)
        kp0, kd0 = np.diagonal(Minv @ K0), np.diagonal(Minv @ D0)
        kp1, kd1 = np.diagonal(Minv @ K1), np.diagonal(Minv @ D1)
        np.testing.assert_allclose(kp0, 400.0, rtol=1e-3)
        np.testing.assert_allclose(kp1, w * w, rtol=1e-3)
        np.testing.assert_allclose(kd1 / (2 * np.sqrt(kp1)), kd0 / (2 * np.sqrt(kp0)), rtol=1e-3)
        assert c1 == 7


CASES = [(r, law, False) for r in ROBOTS for law in LAWS] + \
        [(r, law, True) for r in ROBOTS for law in LAWS if law != "gravity_compensation"]


@pytest.mark.parametrize("robot, law, target", CASES)
def test_a_starved_loop_keeps_the_arm_within_its_velocity_limits(robot, law, target):
    """The shipped config on a host answering ~40 % of the states (stalls of 1 + Exp(30 ms) after 5 %
    of the steps: watchdog trips included), the arm tapped as its brakes open: held, every joint stays
    below its URDF velocity limit; given a step target (0.1 rad per joint / 3 cm), below 1.5x it (the
    approach's quintic aims at 0.8x; late commands overshoot it)."""
    r = run(robot, law, seed=0, p_stall=P_STALL, mean_ms=MEAN_MS, target=target)
    assert 0.3 < r["answered"] < 0.5 and r["trips"] >= 1, r          # the host it claims to be
    bound = 1.5 if target else 1.0
    assert r["speed"] < bound, f"{robot} {law}: {r['joint']} at {r['speed']:.2f} x its velocity limit ({r})"
