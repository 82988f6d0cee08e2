"""A controller that dies leaves no torque on the arm (issue 42): sim_node and controller_node as two
processes with the shipped configs (config/sim_panda.yaml, config/panda_cartesian_impedance.yaml), a
Cartesian target sent, the controller SIGKILLed mid-motion.  The sim's command watchdog (command_timeout
0.1 s in the shipped sim config) brakes the arm to rest and holds it there.

Judged on the plant only, from /joint_states: every joint speed below AT_REST from REST_WITHIN of
simulated time after the kill on (sim time: the sim's stamps, so that a loaded machine that slows the
sim does not count against it; the kill instant is taken as the stamp of the newest state the probe
had then, which is no later than the true one), and every joint within its URDF limits (read from the
URDF text) up to the sim's end-stop overshoot.  Watched fail with `command_timeout: 0.0` (the old
default): the last command stays on and the arm runs into its limits.
"""
import os
import signal
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from robot_dynamics.nodes.probe import Probe  # noqa: E402
from robot_dynamics.nodes.processes import RT_TEST, NodeProcesses, start_sim_and_controller  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.slow]

START_TIMEOUT = 60.0     # s: both children up, the controller configured and commanding
MOVING = 0.2             # rad/s: the arm is "mid-motion" when a joint is at least this fast
REST_WITHIN = 1.0        # s of sim time after the kill: the arm at rest from then on (issue 42)
AT_REST = 1e-3           # rad/s: every joint speed below this (the brakes hold it: exactly 0)
OBSERVE = 2.0            # s of sim time after the kill looked at
LIMIT_SLACK = 5e-3       # rad past a URDF limit allowed (test_sim.py's STOP_OVERSHOOT)
CART_STEP = np.array([0.0, 0.25, -0.1])   # m: the target, from the TCP's start position
TCP = "panda_hand_tcp"


def urdf_limits(urdf, joints):
    lim = {}
    for j in ET.fromstring(urdf).findall("joint"):
        e = j.find("limit")
        if j.get("type") in ("revolute", "prismatic") and e is not None:
            lim[j.get("name")] = (float(e.get("lower")), float(e.get("upper")))
    lo = np.array([lim.get(n, (-np.inf, np.inf))[0] for n in joints])
    hi = np.array([lim.get(n, (-np.inf, np.inf))[1] for n in joints])
    return lo, hi


def test_sigkilled_controller_leaves_the_arm_at_rest_within_limits(ros, model, tmp_path):
    import pinocchio as pin
    procs = NodeProcesses(log_dir=tmp_path)
    probe = Probe(joints=model.joint_names, name="death_probe")
    try:
        sim, ctl = start_sim_and_controller(procs, "panda", "cartesian_impedance", realtime=RT_TEST)
        probe.start()
        assert probe.wait_for(lambda: probe.n_cmd > 50 and probe.q is not None, START_TIMEOUT,
                              check=procs.check_alive), "\n".join(procs.log(p)[-2000:] for p in procs.procs)
        time.sleep(0.3)                          # the controller's start ramp, the sim's brakes open
        q, _ = probe.snapshot()
        pm = model.pin_model
        data = pm.createData()
        pin.framesForwardKinematics(pm, data, model.q_to_pin(q))
        M = data.oMf[pm.getFrameId(TCP)]
        probe.publish_pose(M.translation + CART_STEP, [float(x) for x in pin.Quaternion(M.rotation).coeffs()])
        assert probe.wait_for(lambda: np.max(np.abs(probe.v)) > MOVING, 20.0, poll=0.001,
                              check=procs.check_alive), "the arm never moved towards the target"
        os.killpg(ctl.pid, signal.SIGKILL)       # mid-motion
        with probe.lock:
            s_kill = probe.js_stamp
            v_kill = probe.v.copy()
        ctl.wait(10.0)
        assert probe.wait_for(lambda: probe.js_stamp > s_kill + OBSERVE, 60.0), "the sim stopped publishing"
        with probe.lock:
            log = [(s, q, v) for _, s, q, v, _ in probe.js_log if s >= s_kill]
        sim_log = procs.log(sim)
    finally:
        probe.stop()
        probe.destroy_node()
        procs.stop_all()
    lo, hi = urdf_limits(model.urdf, model.joint_names)
    speed = np.array([np.max(np.abs(v)) for _, _, v in log])
    stamps = np.array([s for s, _, _ in log])
    moving = stamps[speed >= AT_REST]
    t_rest = (moving.max() - s_kill) if moving.size else 0.0
    past = max(float(np.max(np.maximum(q - hi, lo - q))) for _, q, _ in log)
    print(f"\nspeed at the kill {np.max(np.abs(v_kill)):.3f} rad/s; at rest {t_rest:.3f} s (sim time) after it; "
          f"peak speed after it {speed.max():.3f} rad/s; deepest past a limit {past * 1e3:.2f} mrad "
          f"(negative: inside)")
    if os.environ.get("DEATH_DEBUG"):
        for (st, q, v), sp in zip(log, speed):
            print(f"{st - s_kill:7.3f} {sp:8.3f} {np.round(v, 2)} {np.round(q, 3)}")
    assert t_rest < REST_WITHIN, f"still moving {t_rest:.3f} s after the kill (peak {speed.max():.3f} rad/s)"
    assert past < LIMIT_SLACK, f"{past:.4f} rad past a URDF limit"
    assert "braking the arm to rest" in sim_log, sim_log[-2000:]


def test_sim_timeout_stop_holds_reports_and_releases_to_a_live_controller(ros, model, tmp_path):
    """The sim node alone, commands from this test: a gravity command with a push on joint 1, then
    silence.  The sim brakes the arm to rest and holds it (every joint speed exactly 0 on
    /joint_states, the position constant), says so (WARN in its log, /diagnostics WARN 'command
    timeout'); commands again (the gravity torque of the held pose, Pinocchio's) open the brakes once
    they have settled (its log) and /diagnostics is OK again."""
    from diagnostic_msgs.msg import DiagnosticArray
    from robot_dynamics.dynamics import PinocchioBackend
    from robot_dynamics.nodes.processes import SIM_OVERRIDES, config_path
    dyn = PinocchioBackend(model)
    procs = NodeProcesses(log_dir=tmp_path)
    probe = Probe(joints=model.joint_names, name="timeout_probe")
    diag = {}
    probe.create_subscription(DiagnosticArray, "/diagnostics", lambda m: diag.update(
        {s.name: (s.level, s.message) for s in m.status if s.name.startswith("mujoco_sim")}), 10)

    def sim_diag():
        return next(iter(diag.values()), (None, ""))

    def publish_for(tau_fn, seconds):
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            procs.check_alive()
            q, _ = probe.snapshot()
            probe.publish_command(tau_fn(q))
            time.sleep(0.01)
    try:
        sim = procs.start("robot_dynamics.nodes.sim_node", name="mujoco_sim",
                          params_files=[config_path("sim_panda.yaml")], params=dict(SIM_OVERRIDES))
        probe.start()
        assert probe.wait_for(lambda: probe.q is not None, START_TIMEOUT, check=procs.check_alive)
        q0, _ = probe.snapshot()
        g0 = np.array(dyn.gravity(q0))
        publish_for(lambda q: g0, 0.5)                           # brakes open (settled command)
        push = np.zeros(model.nv)
        push[0] = 5.0
        publish_for(lambda q: np.array(dyn.gravity(q)) + push, 0.3)
        assert probe.wait_for(lambda: abs(probe.v[0]) > 0.05, 5.0), "the push did not move the arm"
        # silence: the controller is gone
        assert probe.wait_for(lambda: "braking the arm to rest" in procs.log(sim), 10.0), procs.log(sim)[-2000:]
        assert probe.wait_for(lambda: np.all(probe.v == 0.0), 10.0), "not held at rest"
        q_hold, _ = probe.snapshot()
        time.sleep(0.5)
        with probe.lock:
            tail = [(q, v) for _, _, q, v, _ in probe.js_log[-100:]]
        assert all(np.all(v == 0.0) and np.array_equal(q, q_hold) for q, v in tail), "the hold moved"
        assert probe.wait_for(lambda: sim_diag()[0] == b"\x01" and "command timeout" in sim_diag()[1], 10.0), \
            sim_diag()
        # a live controller again: the gravity torque of the held pose, until the brakes open
        g_hold = np.array(dyn.gravity(q_hold))
        publish_for(lambda q: g_hold, 0.5)
        assert probe.wait_for(lambda: "brakes released after the command-timeout stop" in procs.log(sim), 10.0)
        t_end = time.monotonic() + 10.0
        while time.monotonic() < t_end and sim_diag()[0] != b"\x00":
            publish_for(lambda q: g_hold, 0.2)
        assert sim_diag()[0] == b"\x00", sim_diag()
    finally:
        probe.stop()
        probe.destroy_node()
        procs.stop_all()
