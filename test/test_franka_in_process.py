"""The Franka bridge in in-process mode against franky-sim: the bridge runs the ControlLoop (law +
safety filter + supervisor) in the robot's control callback, from the same controller parameter
files as the controller node (config/fr3_<law>.yaml), and takes references on its own topics.

Oracles as in test_franka_topic.py: our Pinocchio model of the published URDF, the parameters the
test set, the reference it sent.
"""
import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("franky")

from franka_harness import (fr3_model, gravity_of, js_arrays, rig, sim_joint_friction,  # noqa: E402
                            wait_robot_time)

pytestmark = [pytest.mark.slow, pytest.mark.franky_sim]

HOLD_TIME = 5.0
HOLD_TOL = 5e-3           # rad
K_J = np.array([400.0, 400.0, 400.0, 400.0, 100.0, 50.0, 15.0])    # fr3_joint_impedance.yaml
STEP_JOINT, STEP = 3, 0.04
K_TOL = 0.1               # relative
CART_TOL = 3e-3           # m
TRAJ_STEP = np.array([0.2, -0.15, 0.2, 0.2, 0.2, -0.2, 0.2])
TRAJ_T = 2.0
# final error 1.5 s after the end: joint impedance against franky-sim's joint friction (frictionloss
# 0.25..1.14 N m, read from its model) stops the arm anywhere within friction / K of the set-point
# (joint 7: 0.248 / 15 = 0.017 rad); 20 % and 1 mrad on top
TRAJ_FINAL_TOL = 1.2 * sim_joint_friction() / K_J + 1e-3
OVERSHOOT_TOL = 0.02      # rad beyond the goal, any joint


def test_hold_in_process(ros, tmp_path):
    with rig(tmp_path, "gravity_compensation", mode="in_process") as (procs, probe, sim):
        q0, _ = probe.snapshot()
        probe.clear_logs()
        wait_robot_time(probe, HOLD_TIME, check=procs.check_alive)
        _, q, _, eff = js_arrays(probe.js_log)
        assert float(np.max(np.abs(q - q0))) < HOLD_TOL
        model, dyn = fr3_model(probe.urdf)
        # compensate_gravity forced false: the robot's measured torque is its own g(q), not 2 g(q)
        assert np.max(np.abs(eff[-1] - gravity_of(dyn, model, q[-1], probe.joints))) < 0.5
        assert probe.diag.get("state") == "running"
        # the real-time option the harness asked for (franka_harness.BRIDGE_RT) and the bridge's gc
        # default, as the bridge reports them: applied, or refused with the OS's reason
        assert probe.diag.get("rt.gc", "").startswith("ok freeze"), probe.diag
        sched = probe.diag.get("rt.sched", "")
        assert sched.startswith("ok fifo 45") or sched.startswith("refused: sched_setscheduler"), probe.diag


def test_joint_impedance_stiffness_in_process(ros, tmp_path):
    with rig(tmp_path, "joint_impedance", mode="in_process") as (procs, probe, sim):
        model, dyn = fr3_model(probe.urdf)
        q0, _ = probe.snapshot()
        q_d = q0.copy()
        q_d[STEP_JOINT] += STEP
        probe.clear_logs()
        probe.publish_target(q_d)                      # a step of the set-point
        wait_robot_time(probe, 3.0, check=procs.check_alive)
        _, q, v, eff = js_arrays(probe.js_log)
        tau = eff - np.array([gravity_of(dyn, model, qk, probe.joints) for qk in q])
        j = STEP_JOINT
        e = q_d[j] - q[:, j]
        # and where the torque is not rate-limited (the safety filter's 1000 N m/s and franky's
        # max_delta_tau of 1 N m per cycle): less than 0.5 N m change from the previous robot state
        dtau = np.abs(np.diff(tau[:, j], prepend=tau[0, j]))
        # nearly at rest the impedance law's torque is K e - D v with v small (MuJoCo's joint friction
        # lets the arm creep at ~1e-3 rad/s instead of sticking): the torque the robot measured minus
        # the g(q) it added, plus an estimate of the damping term (d = 2 sqrt(k m_jj), m_jj from our
        # model: a few % of the torque here), over the deflection from the set-point the test sent
        idx = [model.joint_names.index(n) for n in probe.joints]
        qm = np.empty(7)
        qm[idx] = q[-1]
        m_jj = dyn.mass_matrix(qm)[idx[j], idx[j]]
        d_j = 2.0 * np.sqrt(K_J[j] * m_jj)
        rest = (np.max(np.abs(v), axis=1) < 2e-3) & (np.abs(e) > 2e-4)
        rest[: len(rest) // 3] = False                    # after the step response
        assert rest.sum() > 20, f"too few samples nearly at rest off the set-point ({rest.sum()}), e = {e[-1]:.2e}"
        k_meas = float(np.median((tau[rest, j] + d_j * v[rest, j]) / e[rest]))
        assert abs(k_meas / K_J[j] - 1.0) < K_TOL, f"measured K {k_meas:.1f} vs {K_J[j]}"
        assert abs(q[-1, j] - q_d[j]) < 0.01


def test_cartesian_impedance_hold_in_process(ros, tmp_path):
    with rig(tmp_path, "cartesian_impedance", mode="in_process") as (procs, probe, sim):
        model, dyn = fr3_model(probe.urdf)
        idx = [model.joint_names.index(j) for j in probe.joints]

        def tcp(q):
            qm = np.empty(7)
            qm[idx] = q
            return dyn.frame_placement(qm, "fr3_tcp")[1].copy()
        q0, _ = probe.snapshot()
        p0 = tcp(q0)
        probe.clear_logs()
        wait_robot_time(probe, HOLD_TIME, check=procs.check_alive)
        _, q, _, _ = js_arrays(probe.js_log)
        worst = max(float(np.linalg.norm(tcp(qk) - p0)) for qk in q[::5])
        assert worst < CART_TOL, f"TCP drifted {worst * 1e3:.2f} mm"


def test_trajectory_in_process(ros, tmp_path):
    with rig(tmp_path, "joint_impedance", mode="in_process") as (procs, probe, sim):
        q0, _ = probe.snapshot()
        n = 21
        ts = np.linspace(0.0, TRAJ_T, n)[1:]
        s = ts / TRAJ_T
        blend = 10 * s**3 - 15 * s**4 + 6 * s**5
        probe.clear_logs()
        probe.publish_trajectory(list(ts), [q0 + b * TRAJ_STEP for b in blend], confirm=True)
        wait_robot_time(probe, TRAJ_T + 1.5, check=procs.check_alive)
        _, q, _, _ = js_arrays(probe.js_log)
        goal = q0 + TRAJ_STEP
        assert np.all(np.abs(q[-1] - goal) < TRAJ_FINAL_TOL), q[-1] - goal
        beyond = np.max((q - goal) * np.sign(TRAJ_STEP))
        assert beyond < OVERSHOOT_TOL
        assert probe.diag.get("state") == "running" and probe.diag.get("robot_errors") == "0"
