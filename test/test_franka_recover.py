"""~/recover after a stop holds the arm where it is (issue 42): the Franka bridge in topic mode against
franky-sim, with the controller node over DDS.

The scenario is the issue's, made cheap and deterministic: the bridge stops (its watchdog: the
controller is paused past command_timeout), the controller, running again, takes a new set-point while
the bridge still holds the arm stopped, then ~/recover.  Before the fix the bridge blended the
controller's commands back in and the arm went to that set-point (as after the gravity guard's stop in
the issue, where it ran away toward the old target); now the bridge first asks the controller's ~/hold.
The oracle: franky-sim's joint positions on /joint_states against those at the call.
"""
import os
import signal

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("franky")

from franka_harness import dump_logs, js_arrays, rig, wait_robot_time  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.franky_sim]

STEP = 0.25          # rad on joint 1 (vertical axis: no gravity torque), sent while the bridge is stopped
HOLD_TOL = 0.02      # rad: most any joint may move in the 3 s after ~/recover (holding: friction-limited
                     # creep, 1e-3 rad; following the set-point: STEP)


def test_recover_after_stop_holds_where_the_arm_is(ros, tmp_path):
    with rig(tmp_path, "joint_impedance", command_timeout=0.3) as (procs, probe, sim):
        ctl = procs.procs[1]
        os.killpg(ctl.pid, signal.SIGSTOP)           # the controller stalls: the bridge's watchdog stops
        try:
            ok = probe.wait_for(lambda: probe.diag.get("state") == "stopped", 60.0, check=procs.check_alive)
        finally:
            os.killpg(ctl.pid, signal.SIGCONT)
        assert ok, f"the bridge did not stop: {probe.diag}\n" + dump_logs(procs, sim)
        q0, _ = probe.snapshot()
        target = q0.copy()
        target[0] += STEP
        probe.publish_target(target)                 # confirmed by the controller's accepted count
        wait_robot_time(probe, 0.5, check=procs.check_alive)
        assert probe.diag.get("state") == "stopped", probe.diag      # never resumed by itself
        q_call, _ = probe.snapshot()
        res = probe.recover()
        assert res.success, res.message
        ok = probe.wait_for(lambda: probe.diag.get("state") == "running", 60.0, check=procs.check_alive)
        assert ok, f"not running after ~/recover: {probe.diag}\n" + dump_logs(procs, sim)
        probe.clear_logs()
        wait_robot_time(probe, 3.0, check=procs.check_alive)
        t, q, v, _ = js_arrays(probe.js_log)
        i = int(np.argmax(np.max(np.abs(v), axis=1)))
        print(f"fastest {t[i] - t[0]:.3f} s after the first state (of {len(t)} over {t[-1] - t[0]:.2f} s)")
        travel = np.max(np.abs(q - q_call), axis=0)
        print(f"after ~/recover: largest travel per joint {np.round(travel, 4)} rad, largest speed "
              f"{np.round(np.max(np.abs(v), axis=0), 3)} rad/s; the bridge: {probe.diag.get('reason')}")
        assert np.max(travel) < HOLD_TOL, (f"the arm moved {np.round(travel, 3)} rad after ~/recover (toward "
                                           f"the set-point sent while stopped: {STEP} rad on joint 1)")
        assert probe.diag.get("state") == "running", probe.diag
        assert "/hold" in res.message, res.message
        assert "holds the arm where it is" in probe.diag.get("reason", "") or \
            probe.diag.get("reason") == "applying commands", probe.diag



def test_gravity_guard_stop_names_its_cause_and_recover_holds(ros, tmp_path):
    """The issue's case: the controller's compensate_gravity is false (the bridge read it), its law
    pushes the arm along g(q) (a set-point step of 3 g(q)/K, shaping off: K e = 3 g), the gravity guard
    stops the arm.  Its message names what it measured and does not blame compensate_gravity (the
    old one told the user to set it false); ~/recover then holds where the arm is instead of resuming
    the step (the guard would trip again, or the arm go 0.1-0.2 rad on to the set-point)."""
    from franka_harness import fr3_model, gravity_of
    with rig(tmp_path, "joint_impedance", controller_over={"setpoint_shaping": False}) as (procs, probe, sim):
        assert probe.diag.get("controller_check") == "ok", probe.diag
        model, dyn = fr3_model(probe.urdf)
        q0, _ = probe.snapshot()
        g = gravity_of(dyn, model, q0, probe.joints)                  # our model of the published URDF
        K = np.array([400.0, 400.0, 400.0, 400.0, 100.0, 50.0, 15.0])  # config/fr3_joint_impedance.yaml
        probe.publish_target(q0 + 3.0 * g / K)
        ok = probe.wait_for(lambda: probe.diag.get("state") == "stopped", 60.0, check=procs.check_alive)
        assert ok, f"the guard did not stop the arm: {probe.diag}\n" + dump_logs(procs, sim)
        reason = probe.diag["reason"]
        print(f"guard: {reason}")
        assert "gravity guard" in reason and "fraction" in reason and "rad/s" in reason, reason
        assert "not double compensation" in reason and "set <controller>.compensate_gravity" not in reason, reason
        trips = int(probe.diag["gravity_guard_trips"])
        wait_robot_time(probe, 1.0, check=procs.check_alive)          # at rest on the stop's damping
        q_call, _ = probe.snapshot()
        assert probe.recover().success
        ok = probe.wait_for(lambda: probe.diag.get("state") == "running", 60.0, check=procs.check_alive)
        assert ok, f"not running after ~/recover: {probe.diag}\n" + dump_logs(procs, sim)
        probe.clear_logs()
        wait_robot_time(probe, 3.0, check=procs.check_alive)
        _, q, _, _ = js_arrays(probe.js_log)
        travel = np.max(np.abs(q - q_call), axis=0)
        print(f"after ~/recover: largest travel per joint {np.round(travel, 4)} rad")
        assert np.max(travel) < HOLD_TOL, f"the arm moved {np.round(travel, 3)} rad after ~/recover"
        assert probe.diag.get("state") == "running" and int(probe.diag["gravity_guard_trips"]) == trips, probe.diag

def test_in_process_restart_drops_a_reference_handed_over_while_down():
    """In process (ROS-free part: hardware/franka_loop's _loop_activate on the shipped Panda Franka joint
    impedance loop): a set-point handed to the loop while torque control was down (a robot error) is
    not followed after the restart; the law holds where the arm is, so at rest its torque is zero.
    Franky-sim has no cheap robot error to run this end to end (a paused simulator ends nothing)."""
    import threading
    from types import SimpleNamespace
    from test_setpoint_shaping import make
    from robot_dynamics.control import JointReference
    from robot_dynamics.hardware.franka_loop import FrankaLoop
    loop, p, _ = make("panda", "franka_joint_impedance", compensate_gravity=False)
    fake = SimpleNamespace(loop=loop, loop_lock=threading.Lock())
    q0 = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
    loop.activate()
    t = 0.0
    for _ in range(1500):                          # running, at rest where it holds
        loop.update_state(q0, np.zeros(7), t)
        loop.step(t)
        t += 1e-3
    # the robot error: the motion ends, the callback (and the loop's steps) stop; the bridge's
    # subscriptions still hand references to the loop, which takes them for its next step
    target = q0.copy()
    target[0] += STEP
    ok, why = loop.set_reference(JointReference(target, None), "target_joint_state")
    assert ok, why
    FrankaLoop._loop_activate(fake)              # ~/recover: restart from zero torque
    taus = []
    for _ in range(1500):                          # the arm still at q0 (a stiff plant: the question is
        loop.update_state(q0, np.zeros(7), t)      # where the law pulls, not where the arm goes)
        taus.append(loop.step(t)[0].copy())
        t += 1e-3
    worst = float(np.max(np.abs(taus)))
    assert worst < 1e-6, f"the restarted loop pulls toward the old set-point: {worst:.3f} N m"
