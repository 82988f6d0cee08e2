"""System tests: the MuJoCo sim node and the torque controller node as two separate processes talking
over DDS (/joint_states, /effort_controller/commands, /ft_sensor/wrench), driven and measured from
the topics only by a probe node in this process:

- gravity compensation holds the Panda where it starts (and the efforts it applies are g(q0));
- computed torque follows a JointTrajectory published on ~/joint_trajectory;
- Cartesian impedance moves the TCP to a PoseStamped on ~/target_pose and yields to a push (a wrench
  on the sim's ~/apply_wrench) by about F / K, then comes back when released.

Each test starts and ends its own pair of processes (process groups, SIGINT then SIGKILL).  The sim
publishes at 500 Hz here (processes.SIM_OVERRIDES): the machines running the suite have two cores.

Both children run under SCHED_FIFO 40 (processes.RT_TEST, through robot_dynamics.realtime).  Cause of
the CI-only computed-torque error (found 2026-11-30): CPU contention.  With 3 CPU hogs the DDS loop
(sim -> controller -> sim) was delayed by tens of ms, beyond the delay margin of kp 400 / kd 40: RMS
1.26 rad, final 3 rad; the same run under SCHED_FIFO: RMS 0.0016 rad, max 0.012 rad; idle ~1e-4.
Where the OS refuses the policy (no CAP_SYS_NICE / RLIMIT_RTPRIO) the children run normally (the
fallback; the test prints which) and the bounds below assume a machine that is not overloaded.

Tracking is judged on the plant: the sim's /joint_states against the reference this test computes
from the trajectory it sent (a rest-to-rest single point: the minimum-jerk quintic, see
control/trajectory.py), never from the controller's own ~/state.
"""
import os
import time

import numpy as np
import pytest
import yaml

rclpy = pytest.importorskip("rclpy")

from robot_dynamics.dynamics import PinocchioBackend  # noqa: E402
from robot_dynamics.dynamics.reference import spatial  # noqa: E402
from robot_dynamics.nodes.probe import Probe  # noqa: E402
from robot_dynamics.nodes.processes import (RT_TEST, NodeProcesses, config_path,  # noqa: E402
                                            start_sim_and_controller)
from robot_dynamics.nodes.sim_node import HOME  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.slow]

START_TIMEOUT = 60.0          # s: both children up, controller configured (self-check) and commanding
START_SETTLE_TOL = 0.1        # N m: applied effort vs g(q) once the controller's start ramp is over
BRAKE_WINDOW = 0.2            # s: more than the sim's brake_settle_time (0.05 s) before a test moves
HOLD_TIME = 2.0               # s of gravity-compensated hold
HOLD_TOL = 5e-3               # rad: largest joint drift while holding
EFFORT_TOL = 0.05             # N m: applied effort vs g(q0) while holding
TRAJ_DURATION = 2.0           # s: each segment of the joint trajectory
TRAJ_STEP = np.array([0.3, -0.2, 0.3, 0.3, 0.3, -0.3, 0.3])    # rad, goal - start
CT_LATENCY = 0.02             # s: allowance for the time between the test's publish / receipt and the
                              #   controller's receipt / the sim's step: q(t) is compared with the
                              #   reference anywhere in [t - CT_LATENCY, t] (a scheduling allowance)
CT_LEAD = 1.0                 # s of sim time from the newest state to the trajectory's header stamp: it
                              #   starts then on the controller's clock (sim time), whatever its delivery
                              #   took (stamped "start on receipt", a loaded run saw it start > 0.3 s of
                              #   sim time after the publish; 0.10-0.15 s measured before)
CT_TRACK_RMS_TOL = 0.03       # rad: RMS over the motion of the largest joint error |q - q_ref(t)| on the
                              #   plant, q at the sim's stamp.  Measured (children and probe under
                              #   SCHED_FIFO): 6e-5 on a quiet machine, 0.0039 with 3 CPU hogs on top of
                              #   the other load, 0.018 in one CI run (by receipt time; a stall of
                              #   ~0.25 s somewhere in the loop); margin 1.7x over that
CT_TRACK_MAX_TOL = 0.15       # rad: its peak (measured 1.6e-4 quiet, 0.027 with 3 hogs, 0.072 in CI)
CT_FINAL_TOL = 5e-3           # rad: |q - q_goal| 1 s after the trajectory ends
CART_STEP = np.array([0.05, 0.0, -0.05])   # m: target - start of the TCP
CART_TOL = 5e-3               # m: |p - p_target| once settled
CART_ROT_TOL = 0.02           # rad: orientation kept while moving
CART_SETTLE = 15.0            # s: longest wait for the TCP to settle (a bound, not a speed requirement:
                              #    on a loaded machine the DDS loop slows and the motion takes longer)
PUSH = np.array([0.0, 15.0, 0.0, 0.0, 0.0, 0.0])   # N: push on the TCP, world axes
PUSH_SETTLE = 10.0            # s: longest wait for the push / release to settle
YIELD_RANGE = (0.6, 1.4)      # measured deflection / (F / k_pos): impedance, not rigid, not limp
Q0 = np.array(HOME["panda"])
TCP = "panda_hand_tcp"




@pytest.fixture
def system(ros, model, tmp_path, request):
    """Start sim + controller (`request.param` = controller name); yield (procs, probe)."""
    procs = NodeProcesses(log_dir=tmp_path)
    probe = Probe(joints=model.joint_names, name="system_probe")
    # the probe (this process) stays at normal priority: putting every thread of the pytest process
    # under SCHED_FIFO took in the DDS shared-memory listener threads the whole suite had accumulated,
    # some of them spinning, and froze the 2-core machine (load average 125) in a fresh-clone run;
    # tracking is judged by the sim's stamps, so the probe's own delivery delays do not count
    try:
        # the controller on the sim's clock (use_sim_time, as a Gazebo user runs it and as the Franka tests
        # run against franky-sim): an overloaded sim drops its backlog and falls behind the wall clock, and
        # a reference timed on the wall clock then runs ahead of the plant (loaded run 3 of ea5879d, a CPU
        # hog beside the suite: computed torque 0.033 rad RMS by the sim's stamps, 6e-5 quiet)
        # (Cartesian: max_pos_error 0.1 m, the shipped 0.05 m clips the spring at 15 N = the push below,
        # whose yield is measured within the clip)
        extra = {"cartesian_impedance.max_pos_error": 0.1} if request.param == "cartesian_impedance" else {}
        sim, ctl = start_sim_and_controller(procs, "panda", request.param, realtime=RT_TEST,
                                            controller_params={"use_sim_time": True, **extra})
        probe.start()
        dyn = PinocchioBackend(model)

        def settled():
            # the controller's start ramp is over (the applied effort is the gravity torque of the
            # measured pose) and the sim's brakes have had their settle window to open
            return (probe.n_state > 10 and probe.effort is not None and probe.q is not None
                    and np.max(np.abs(probe.effort - dyn.gravity(probe.q))) < START_SETTLE_TOL)

        ready = probe.wait_for(settled, START_TIMEOUT, check=procs.check_alive)
        assert ready, "sim + controller not running:\n" + "\n".join(procs.log(p)[-2000:] for p in procs.procs)
        print(f"SCHED_FIFO applied: sim {procs.realtime_applied(sim)}, controller {procs.realtime_applied(ctl)}")
        time.sleep(BRAKE_WINDOW)
        yield procs, probe
    finally:
        probe.stop()
        probe.destroy_node()
        procs.stop_all()


def fk(model, q):
    """TCP (R, p) from the measured joint positions (Pinocchio on the same model)."""
    import pinocchio as pin
    pm = model.pin_model
    data = pm.createData()
    pin.framesForwardKinematics(pm, data, model.q_to_pin(q))
    M = data.oMf[pm.getFrameId(TCP)]
    return M.rotation.copy(), M.translation.copy()


def quat_xyzw(R):
    import pinocchio as pin
    c = pin.Quaternion(R).coeffs()          # x, y, z, w
    return [float(x) for x in c]


@pytest.mark.parametrize("system", ["gravity_compensation"], indirect=True)
def test_gravity_compensation_holds_the_panda(system, model):
    procs, probe = system
    q_start, _ = probe.snapshot()
    worst = 0.0
    t_end = time.monotonic() + HOLD_TIME
    while time.monotonic() < t_end:
        procs.check_alive()
        q, _ = probe.snapshot()
        worst = max(worst, float(np.max(np.abs(q - Q0))))
        time.sleep(0.02)
    assert worst < HOLD_TOL, f"drifted {worst:.4f} rad"
    with probe.lock:
        effort = probe.effort.copy()
    g0 = PinocchioBackend(model).gravity(Q0)
    assert np.max(np.abs(effort - g0)) < EFFORT_TOL, (effort, g0)


def min_jerk(q0, q1, T, s):
    """Rest-to-rest quintic from q0 to q1 in T at times s (array): positions (len(s), n)."""
    tau = np.clip(np.asarray(s, dtype=float) / T, 0.0, 1.0)[:, None]
    return q0 + (q1 - q0) * (10 * tau ** 3 - 15 * tau ** 4 + 6 * tau ** 5)


def plant_tracking_errors(js_log, t0, q0, q_goal, T, t_end, latency, dt=1e-3, clock="stamp"):
    """For each /joint_states sample at time t in [t0, t_end]: the smallest max-joint error between the
    plant's q and the reference at any time of [t - latency, t] (t - t0 into the trajectory).  `clock`
    "stamp": t is the sample's stamp, the sim's time, which is the controller's clock here
    (use_sim_time): the law times the trajectory by it, so a sim that falls behind the wall clock
    (overloaded: it drops its backlog) slows the reference with the plant (a loaded run: 0.14 rad RMS
    and 0.02 rad left at the end against a wall-clock reference, as if the controller lagged; a sim at
    real_time_factor 0.5 gives the same picture).
    "receipt": t is the probe's receipt time (wall clock; holds the delivery delays, printed only)."""
    offs = np.arange(0.0, latency + dt / 2, dt)
    out = []
    for t_rx, stamp, q, _, _ in js_log:
        t = stamp if clock == "stamp" else t_rx
        if not (t0 <= t <= t_end):
            continue
        ref = min_jerk(q0, q_goal, T, t - t0 - offs)
        out.append(float(np.min(np.max(np.abs(ref - q), axis=1))))
    return np.array(out)


@pytest.mark.parametrize("system", ["computed_torque"], indirect=True)
def test_computed_torque_follows_joint_trajectory(system, model):
    procs, probe = system
    q_start, _ = probe.snapshot()
    q_goal = Q0 + TRAJ_STEP
    probe.clear_logs()
    # stamped CT_LEAD ahead on the controller's clock (the sim's: its states' stamps), its first point
    # the state held at time 0, both points at rest (velocities and accelerations 0): held until s_start,
    # then the rest-to-rest quintic (minimum jerk) to q_goal, as a JointTrajectoryController user writes
    # it (a point at time 0 = the start; a first point later in time is approached from receipt, as JTC
    # does); confirmed on the controller's /diagnostics (accepted.joint_trajectory), a copy sent again if
    # lost being the same trajectory
    with probe.lock:
        s_start = probe.js_stamp + CT_LEAD
    rest = np.zeros((2, len(q_start)))
    t_pub = probe.publish_trajectory([0.0, TRAJ_DURATION], [q_start, q_goal], rest, confirm=True, stamp=s_start,
                                     accelerations=rest)
    with probe.lock:
        s_pub = max((stamp for t_rx, stamp, *_ in probe.js_log if t_rx <= t_pub), default=probe.js_log[0][1])
    # the plant must start moving (the trajectory was accepted); then 1 s of sim time past its end
    assert probe.wait_for(lambda: np.max(np.abs(probe.q - q_start)) > 0.01, 5.0 + CT_LEAD, check=procs.check_alive)
    s_stop = s_start + TRAJ_DURATION + 1.0
    assert probe.wait_for(lambda: probe.js_stamp >= s_stop, 120.0, check=procs.check_alive), \
        "the sim's clock did not reach 1 s past the trajectory's end"
    with probe.lock:
        log = list(probe.js_log)
        q_end = probe.q.copy()
    # the reference: from the state held when the trajectory arrives (q_start: it was holding), from
    # s_start on the sim's clock; a trajectory delivered after its stamp would have its due part skipped
    errors = plant_tracking_errors(log, s_start, q_start, q_goal, TRAJ_DURATION, s_stop, CT_LATENCY)
    assert errors.size > 100, "too few joint-state messages"
    rms = float(np.sqrt(np.mean(errors ** 2)))
    rx = [t_rx for t_rx, stamp, *_ in log if s_start <= stamp <= s_stop]
    e_rx = plant_tracking_errors(log, rx[0], q_start, q_goal, TRAJ_DURATION, rx[-1], CT_LATENCY, clock="receipt")
    print(f"computed torque over DDS (plant vs the sent trajectory, stamped {CT_LEAD:.1f} s ahead; accepted "
          f"{s_start - s_pub:.3f} s of sim time before its start): tracking error rms {rms:.5f} rad, max "
          f"{errors.max():.5f} rad (by receipt time: rms {np.sqrt(np.mean(e_rx ** 2)):.5f}, max {e_rx.max():.5f}), "
          f"final {np.max(np.abs(q_end - q_goal)):.2e} rad")
    # a failure says where the error grew and what the nodes logged (a quiet fresh-clone run once saw
    # the arm run to its limits here, 1.63 rad RMS, with nothing else to go on)
    big = np.flatnonzero(errors > 0.05)
    why = ((f"; the error passed 0.05 rad at sample {big[0]} of {errors.size}" if big.size else "") +
           f"; the accepted copy was published {s_start - s_pub:.3f} s of sim time before its stamp\n" +
           "\n".join(procs.log(p)[-3000:] for p in procs.procs))
    assert rms < CT_TRACK_RMS_TOL, f"tracking error rms {rms:.4f} rad" + why
    assert errors.max() < CT_TRACK_MAX_TOL, f"tracking error peak {errors.max():.4f} rad" + why
    assert np.max(np.abs(q_end - q_goal)) < CT_FINAL_TOL, f"{q_end - q_goal}" + why


@pytest.mark.parametrize("system", ["cartesian_impedance"], indirect=True)
def test_cartesian_impedance_reaches_pose_and_yields_to_push(system, model):
    with open(config_path("panda_cartesian_impedance.yaml")) as f:
        cfg = yaml.safe_load(f)["/**"]["ros__parameters"]
    k_y = cfg["cartesian_impedance"]["task"]["k_pos_y"]
    procs, probe = system
    q, _ = probe.snapshot()
    R0, p0 = fk(model, q)
    target = p0 + CART_STEP
    probe.publish_pose(target, quat_xyzw(R0))

    def tcp():
        q = probe.q.copy()            # called under probe.lock by wait_for
        return fk(model, q)

    # settled = at the target and at rest: the orientation is judged at rest, where the rotational
    # stiffness holds R0 (during the 70 mm step the critically damped task, D from the matrix formula,
    # turned the TCP by up to 0.024-0.029 rad in fresh-clone runs before it came back)
    probe.wait_for(lambda: np.linalg.norm(tcp()[1] - target) < CART_TOL and np.max(np.abs(probe.v)) < 1e-3,
                   CART_SETTLE, check=procs.check_alive)
    procs.check_alive()
    q, _ = probe.snapshot()
    R, p = fk(model, q)
    assert np.linalg.norm(p - target) < CART_TOL, p - target
    assert np.linalg.norm(spatial.log3(R @ R0.T)) < CART_ROT_TOL
    # push: the TCP yields along the push by about F / k (wait until it has come to rest)
    expected = PUSH[1] / k_y
    probe.push(TCP, PUSH)
    probe.wait_for(lambda: YIELD_RANGE[0] * expected < tcp()[1][1] - target[1] < YIELD_RANGE[1] * expected
                   and np.max(np.abs(probe.v)) < 1e-3, PUSH_SETTLE, check=procs.check_alive)
    procs.check_alive()
    q, _ = probe.snapshot()
    _, p_pushed = fk(model, q)
    d = p_pushed - target
    assert YIELD_RANGE[0] * expected < d[1] < YIELD_RANGE[1] * expected, (d, expected)
    # the F/T sensor at the flange sees the push
    with probe.lock:
        w = probe.wrench.copy()
    assert np.linalg.norm(w[:3]) > 0.5 * np.linalg.norm(PUSH[:3])
    # release: back to the target
    probe.push(TCP, np.zeros(6))
    probe.wait_for(lambda: np.linalg.norm(tcp()[1] - target) < CART_TOL, PUSH_SETTLE,
                   check=procs.check_alive)
    q, _ = probe.snapshot()
    _, p_back = fk(model, q)
    assert np.linalg.norm(p_back - target) < CART_TOL, p_back - target
