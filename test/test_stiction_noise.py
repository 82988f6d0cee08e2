"""The stiction term with a noisy F/T sensor (control/laws/friction.py): the sensor's noise mapped to the
joints passes through a dead zone NOISE_DEADZONE x that noise, estimated on the control path, so that
at rest the term does not turn the noise into torque.  Oracles: the noise the test draws (its standard
deviation per axis) mapped through the matrix the test sets, the term's formula written here, and the
plant (MuJoCo's joint speeds at rest).  No ROS."""
import numpy as np
import pytest

from robot_dynamics.control import make_law
from robot_dynamics.control.laws.friction import NOISE_DEADZONE
from robot_dynamics.dynamics import Model, make_backend

N = 7
SIGMA = np.array([0.05, 0.08, 0.03, 0.004, 0.01, 0.006])        # the sensor's noise per axis [N, N m]


@pytest.fixture(scope="module")
def model():
    return Model.from_robot("panda")


def friction(model, **over):
    law = make_law("joint_impedance", model, make_backend(model, "pinocchio"), {
        "friction_compensation": True, "friction_coulomb": [1.0] * N, "friction_velocity_scale": [0.01] * N,
        "friction_stiction": 0.05, "friction_stiction_sensed": 1.0, "friction_stiction_torque": 0.05, **over})
    return law.friction


def feed(fr, J, R, seconds, rate, signal, rng, step=1e-3):
    """Loop steps of `step` s; the sensor samples at `rate` Hz (held in between: one stamp); the reading
    the law gets is the sample's noise plus signal(t) (its slow part, which moves every step)."""
    noise, stamp = rng.normal(0.0, SIGMA), 0.0
    seen = []
    for k in range(int(round(seconds / step))):
        t = k * step
        if t - stamp >= 1.0 / rate - 1e-12:
            noise, stamp = rng.normal(0.0, SIGMA), t
        fr.sensed_deadzone(signal(t) + noise, J, R, t, stamp)
        if k % 100 == 0 and t >= seconds / 2:
            seen.append(fr.deadzone.copy())
    return np.mean(seen, axis=0)           # over the second half: the estimate's own scatter averaged


@pytest.mark.parametrize("rate", [1000.0, 100.0], ids=["1kHz", "100Hz_held"])
def test_the_dead_zone_is_the_noise_each_joint_gets(model, rate):
    """Gaussian noise of known deviation per axis (SIGMA) on a reading that also moves slowly (a 1 N/s
    ramp and a 0.5 Hz swing, moving at every loop step), with an impact's 30 N step every 2 s; a sensor
    at the loop's rate, and one at 100 Hz whose samples the loop holds for ten steps: the dead zone
    (averaged over the second half) is NOISE_DEADZONE sqrt((B o B) SIGMA^2) per joint within 10 %, B
    the map the test sets."""
    from scipy.spatial.transform import Rotation
    rng = np.random.default_rng(3)
    J = rng.normal(0.0, 0.4, (6, N))                 # the frame's Jacobian (world-aligned axes)
    R = Rotation.random(random_state=4).as_matrix()   # the reading's axes to the world's
    X = np.zeros((6, 6))
    X[:3, :3] = X[3:, 3:] = R
    B = J.T @ X                                       # the reading to the joints' torques
    fr = friction(model)

    def signal(t):
        step = 30.0 * (int(t / 2.0) % 2)
        return np.array([1.0 * t + step, 0.5 * np.sin(np.pi * t), 1.0, 0.02 * t, 0.0, 0.02 * np.cos(np.pi * t)])
    dz = feed(fr, J, R, 20.0, rate, signal, rng)
    expected = NOISE_DEADZONE * np.sqrt((B * B) @ SIGMA ** 2)
    np.testing.assert_allclose(dz, expected, rtol=0.10)
    assert fr.noisy == bool(expected.max() > 0.05)


def test_without_noise_the_term_is_the_one_without_a_dead_zone(model):
    """A noise-free, steady reading (an ideal sensor on an arm at rest, a simulator's): the dead zone
    stays exactly 0 and the compensation at rest is fc k tanh(p / p0) along the pull, as without a dead
    zone; with one, a pull within it gives nothing and one beyond it fc k tanh((|p| - d) / p0) along p."""
    rng = np.random.default_rng(5)
    J = rng.normal(0.0, 0.4, (6, N))
    fr = friction(model)
    reading = np.array([3.0, -1.0, 2.0, 0.1, 0.0, -0.2])
    for k in range(1000):
        fr.sensed_deadzone(reading, J, np.eye(3), 1e-3 * k, 1e-3 * k)
    assert np.all(fr.deadzone == 0.0) and not fr.noisy
    fr.sensed = True
    fr.pull[:] = rng.normal(0.0, 0.1, N)
    c = fr.add(np.zeros(N), np.zeros(N))
    np.testing.assert_allclose(c, 1.0 * np.tanh(fr.pull / 0.05), atol=1e-12)
    d = 0.08
    fr.deadzone[:] = d
    fr.pull[:] = [0.0, 0.05, -0.079, 0.09, -0.2, 0.5, -0.081]
    c = fr.add(np.zeros(N), np.zeros(N))
    np.testing.assert_allclose(c, np.tanh(np.sign(fr.pull) * np.maximum(np.abs(fr.pull) - d, 0.0) / 0.05),
                               atol=1e-12)
    assert np.all(c[:3] == 0.0) and np.all(c[3:] != 0.0)


@pytest.mark.slow                                   # an identification and a closed-loop MuJoCo run each
@pytest.mark.parametrize("solref", ["sharp", "soft"])
def test_a_noisy_sensor_leaves_the_released_arm_at_rest(model, solref):
    """The rig's Panda (test/friction_rig.py), the file as written (its stiction deadband p0 0.05 N m),
    Cartesian k 450 N/m, the push measured by an F/T sensor whose reading carries white noise of 0.08 N
    and 0.028 N m (about 0.03-0.05 N m at the joints, near p0: without the dead zone the term flips with
    it and the released arm dithers, 2.8e-3 rad/s at rest on the sharp plant, 8.5e-3 on the soft; with
    it 2.7e-5 and 8.6e-5): the first push within 5 % of k (+2.8 %, +2.6 %), back within 1 mm 2 s after
    the release, and no joint faster than 1e-3 rad/s over the last 0.5 s of 3 s more at rest."""
    pytest.importorskip("mujoco")
    from friction_rig import K_PUSH, SHARP, SOFT, file_loop, identify, law_friction, push
    sr = {"sharp": SHARP, "soft": SOFT}[solref]
    run = identify(model, sr)
    assert run.ok, run.message
    noise = (np.random.default_rng(7), 0.08, 0.028)
    r = push(model, law_friction(run.params), solref=sr, sensor=True, noise=noise, rest=3.0,
             loop_over=file_loop(run.params))
    assert abs(r["k_single"] / K_PUSH - 1) < 0.05, r
    assert r["back"] < 1e-3 and r["creep_each"][-1] < 1e-3, r


def test_the_loop_says_when_the_noise_widens_the_dead_zone(model):
    """The control loop logs (info) that the sensor's noise sets the stiction term's dead zone, naming
    the joint, once the dead zone is wider than friction_stiction_torque; not with a noise-free sensor."""
    pytest.importorskip("mujoco")
    from friction_rig import PLANT, Plant, cartesian_loop, drive
    fr = {"friction_compensation": True, "friction_coulomb": list(PLANT["friction"]),
          "friction_viscous": list(PLANT["damping"]), "friction_velocity_scale": [0.01] * N,
          "friction_stiction": 0.05, "friction_stiction_torque": 0.05}
    logs = {}
    for sigma in (0.0, 0.1):
        plant = Plant(model)
        loop = cartesian_loop(model, fr)
        lines = logs[sigma] = []
        loop.report.sink = lambda level, text, lines=lines: lines.append((level, text))
        loop.activate(0.0)
        drive(loop, plant, 0.0, 0.5, sensor=True, noise=(np.random.default_rng(1), sigma, sigma / 10))
    said = [text for level, text in logs[0.1] if "stiction term acts on pulls beyond" in text]
    assert said and all(level == "info" for level, text in logs[0.1] if text in said), logs[0.1]
    assert "panda_joint" in said[0]
    assert not [text for _, text in logs[0.0] if "stiction" in text], logs[0.0]
