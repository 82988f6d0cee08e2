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

from franka_harness import (FRANKY_SIM_ID, FRICTION_KEYS, PHANTOM_LOAD, URDF_TRUSTED_ID, FtSensor,  # noqa: E402
                            check_held_stiffness, fr3_model, gravity_of, identified_params, identify_dynamics,
                            js_arrays, push_stiffness, rest_speed, rig, sim_joint_attribute, sim_joint_friction,
                            wait_robot_time)

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.franky_sim]

HOLD_TIME = 5.0
HOLD_TOL = 5e-3           # rad
K_J = np.array([400.0, 400.0, 400.0, 400.0, 100.0, 50.0, 15.0])    # fr3_joint_impedance.yaml
K_TOL = 0.03              # relative (test_franka_topic.py)
CART_TOL = 3e-3           # m
TRAJ_STEP = np.array([0.2, -0.15, 0.2, 0.2, 0.2, -0.2, 0.2])
TRAJ_T = 2.0
# final error 1.5 s after the end: joint impedance against franky-sim's joint friction (frictionloss
# 0.25..1.14 N m, read from its model) stops the arm anywhere within friction / K of the set-point
# (joint 7: 0.248 / 15 = 0.017 rad); 20 % and 1 mrad on top
TRAJ_FINAL_TOL = 1.2 * sim_joint_friction() / K_J + 1e-3
OVERSHOOT_TOL = 0.02      # rad beyond the goal, any joint
# relative, every joint, of the identified rotor inertia, viscous and dry friction against franky-sim's
# fr3.xml, with the URDF's inertials trusted (franka_harness.URDF_TRUSTED_ID, 4 s periods) or identified
# too (the shipped config), franka_harness.FRANKY_SIM_ID (hold_pairing start: franky-sim's MuJoCo integrates
# with implicitfast).  Measured: URDF trusted, Ia +31 %, fv -27 % / +18 %, fc +12 % at worst (franky-sim's
# MuJoCo inertials are not the URDF's: the gap lands in Ia and fv); all base parameters, Ia 0.7 %, fv 3.3 %,
# fc 0.4 % (4 s periods: 0.8, 4.6, 0.6 %; Ia of joints 1-2 regrouped with the links, written as the group
# less the URDF's inertials: 0.1956, 0.1937 for 0.195).
# Paired mid, fv came out 16 % (true) and 39 % (false) high
# computed torque on franky-sim, the 2 s motion (fr3_computed_torque.yaml): with the identified armature
# and friction measured RMS 0.0013 rad, final error <= 0.001 rad; with the URDF alone 0.159 rad and
# 0.195 rad (the wrist does not move)
CT_RMS_TOL = 0.015        # rad
# the push with the URDF's inertials trusted (bench/franka_push.py, 2 repeats the same to 3 digits): with
# the identified model k 310 N/m from 9 N, 304 N/m from 9 -> 18 N, 2.7 mm from the start 2 s after the
# release; with the URDF alone 521, 346 and 7.4 mm (the inertial gap the URDF-trusted run leaves slows
# the release: identified with all base parameters, 1.6 mm, the shipped gains' own pace, doc/identification.md)
K_POS = 300.0             # N/m, fr3_cartesian_impedance.yaml task.k_pos_x
PUSH_TOL = {"slope": 0.10, "single": 0.20, "back": 5.5e-3}     # relative, relative, m
SENSED_PUSH_TOL = 0.05    # relative: the first push and the slope with the push measured (issue 43's 5 %)
# issue 43's figures, as the issue set them: the file of the identification as the shipped
# fr3_joint_impedance.yaml runs it (all base parameters, 5 s periods) as written, no sensor, Cartesian k 450
# N/m along x (bench/franka_push.py --k-x 450, the shipped k_rot 10 and 0.05 m clip: 18 N is 40 mm there):
# the first push within ISSUE_SINGLE_TOL (measured 457-459 N/m, +1.8 %; the velocity scales from the fast
# excitation's rows, before the slow one: 561, +25 %), the slope within SLOPE_TOL (451, +0.2 %; 518, +15 %),
# BACK_TOL 2 s after the release (0.23-0.29 mm; 1.24 mm; the URDF alone 5.6 mm), CREEP_TOL the largest joint
# speed 6-7 s after it (CREEP_REST), within the issue's 1e-3 with room: 3.4e-5 rad/s (the plant's own creep
# under the pull left); the stiction term on joints whose friction rises over more than 0.006 rad/s as well
# (its share put to 1 on every joint): joint 5 creeping, 5.6e-4 and falling slowly.  Not 4-5 s: there a
# joint freed by the term can still be on its way back (6.4e-5 here; with 4 s periods joint 6's tail, over
# about 0.4 s and up to 1 s later under load, gave 3.4e-4 to 1.1e-3; rest_speed prints the speed over the
# rest) while the term on every joint is at 1.5e-3.
ISSUE_K_X = 450.0
ISSUE_SINGLE_TOL = 0.05
SLOPE_TOL = 0.03
BACK_TOL = 1e-3
CREEP_TOL = 2e-4
CREEP_REST = 4.0          # s after push_stiffness's 2 s after the release
CT_FINAL_TOL = 0.008      # rad, every joint
DYN_ID_TOL = {False: {"Ia": 0.5, "fv": 0.5, "fc": 0.25}, True: {"Ia": 0.1, "fv": 0.1, "fc": 0.05}}


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
    """The law in the robot's callback holds the arm against a payload the robot is told of but the
    arm does not carry (franka_harness.check_held_stiffness)."""
    with rig(tmp_path, "joint_impedance", mode="in_process", **PHANTOM_LOAD) as (procs, probe, sim):
        check_held_stiffness(probe, procs, K_J, K_TOL)


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


def test_safety_envelope_stop_in_process(ros, tmp_path):
    """The envelope on the Franka path (the loop in the robot's callback): a plane set live 5 cm above
    the tcp (no repulsion: safety.stiffness 0, so the tcp stays outside) stops the arm after
    safety.stop_time, and the bridge's own /diagnostics status goes ERROR saying so (it stayed OK
    with only loop_level changed); ~/resume is refused while the tcp is outside, accepted once the
    plane is moved below it, and the status is OK again; the arm held meanwhile."""
    from std_srvs.srv import Trigger
    with rig(tmp_path, "gravity_compensation", mode="in_process",
             **{"safety.frames": ["fr3_tcp"], "safety.frame_radii": [0.0], "safety.stiffness": 0.0,
                "safety.stop_time": 0.2}) as (procs, probe, sim):
        model, dyn = fr3_model(probe.urdf)
        idx = [model.joint_names.index(j) for j in probe.joints]
        q0, _ = probe.snapshot()
        qm = np.empty(7)
        qm[idx] = q0
        z = float(dyn.frame_placement(qm, "fr3_tcp")[1][2])
        assert probe.wait_for(lambda: probe.diag_level == 0, 10.0), (probe.diag_level, probe.diag_message)
        r = probe.set_bridge_param("safety.planes", [0.0, 0.0, 1.0, z + 0.05])     # z >= z_tcp + 5 cm
        assert r.successful, r.reason
        ok = probe.wait_for(lambda: probe.diag_level == 2 and "safety envelope stop" in probe.diag_message, 20.0,
                            check=procs.check_alive)
        assert ok, (probe.diag_level, probe.diag_message)
        assert probe.diag["loop.envelope.state"] in ("stopping", "stopped"), probe.diag
        res = probe._call(Trigger, "resume", Trigger.Request(), 10.0, "~/resume")
        assert res is not None and not res.success and "outside" in res.message, res
        r = probe.set_bridge_param("safety.planes", [0.0, 0.0, 1.0, z - 0.5])
        assert r.successful, r.reason
        res = probe._call(Trigger, "resume", Trigger.Request(), 10.0, "~/resume")
        assert res is not None and res.success, res
        assert probe.wait_for(lambda: probe.diag_level == 0 and probe.diag.get("loop.envelope.state") in ("ok", "acting"),
                              20.0), (probe.diag_level, probe.diag_message)
        q1, _ = probe.snapshot()
        assert np.max(np.abs(q1 - q0)) < 0.02, q1 - q0                   # held through the stop
        print(f"\nenvelope stop in process: status {probe.diag_message!r} after the resume")


def _min_jerk(probe, procs, q_from, step):
    """A 2 s minimum-jerk trajectory q_from -> q_from + step on the bridge's ~/joint_trajectory, followed
    for TRAJ_T + 1.5 s of robot time.  Returns the joint positions received meanwhile and the RMS over
    the motion of the largest joint tracking error the bridge's ~/state reports."""
    n = 21
    ts = np.linspace(0.0, TRAJ_T, n)[1:]
    s = ts / TRAJ_T
    blend = 10 * s**3 - 15 * s**4 + 6 * s**5
    probe.clear_logs()
    probe.publish_trajectory(list(ts), [q_from + b * step for b in blend], confirm=True)
    wait_robot_time(probe, TRAJ_T + 1.5, check=procs.check_alive)
    _, q, _, _ = js_arrays(probe.js_log)
    with probe.lock:
        err = np.array([np.max(np.abs(r[2])) for r in probe.state_log])
    return q, float(np.sqrt(np.mean(err**2)))


def test_trajectory_in_process(ros, tmp_path):
    with rig(tmp_path, "joint_impedance", mode="in_process") as (procs, probe, sim):
        q0, _ = probe.snapshot()
        q, _ = _min_jerk(probe, procs, q0, TRAJ_STEP)
        goal = q0 + TRAJ_STEP
        assert np.all(np.abs(q[-1] - goal) < TRAJ_FINAL_TOL), q[-1] - goal
        beyond = np.max((q - goal) * np.sign(TRAJ_STEP))
        assert beyond < OVERSHOOT_TOL
        assert probe.diag.get("state") == "running" and probe.diag.get("robot_errors") == "0"


@pytest.mark.parametrize("inertial", [False, True], ids=["urdf_inertials", "shipped_config"])
def test_dynamics_identification_in_process(ros, tmp_path, inertial):
    """Issue 21 on the robot's own protocol: ~/identify_dynamics of the bridge runs the excitation in
    the robot's control callback, torques from the robot's tau_J, and finds the joint friction and
    rotor inertia franky-sim's MuJoCo arm has and the URDF has not (the oracle: franky-sim's
    assets/fr3.xml).  franky-sim reports as tau_J the torque it applied over the period before the
    state (torque_timing held_before) and steps MuJoCo by semi-implicit Euler (hold_pairing start).
    With the shipped config's dynamics_id (no override: it identifies all base parameters, since the
    Franka's URDF inertials are not the arm's; issue 21's 10 %), a rotor inertia the status reports as
    regrouped (nan: joints 1-2, whose rotor turns about a fixed axis with the link's own inertia) is
    written as the group less the URDF's inertials in it, and compared like the rest; the file is then
    used for the Cartesian push (issue 43's figures, no sensor).  With the URDF's inertials, the
    result is used: the friction compensated live in joint impedance (tracking), a bridge started with
    the armature and friction for computed torque (tracking) and for Cartesian impedance (pushed)."""
    import yaml
    out = tmp_path / "fr3_dynamics.yaml"
    over = {} if inertial else URDF_TRUSTED_ID           # True: as config/fr3_joint_impedance.yaml ships it
    with rig(tmp_path, "joint_impedance", mode="in_process",
             **FRANKY_SIM_ID, **{"dynamics_id.output": str(out)}, **over) as (procs, probe, sim):

        ok, msg = identify_dynamics(probe, procs)
        assert ok, msg
        p = yaml.safe_load(open(out))["/**"]["ros__parameters"]
        ia, fv, fc = (np.array(p[k]) for k in ("armature", "joint_impedance.friction_viscous",
                                                "joint_impedance.friction_coulomb"))
        truth = {"Ia": sim_joint_attribute("armature"), "fv": sim_joint_attribute("damping"),
                 "fc": sim_joint_attribute("frictionloss")}
        print(f"\nfranky-sim: Ia {np.round(ia, 4)} (truth {truth['Ia']}), fv {np.round(fv, 4)} "
              f"(truth {truth['fv']}), fc {np.round(fc, 4)} (truth {truth['fc']}); {msg}")
        if inertial:         # the rotor inertias regrouped with their links, as the status says: written as
            # the group less the URDF's inertials in it, compared with the rest
            regrouped = [x == "nan" for x in msg.split("Ia [", 1)[1].split("]", 1)[0].split()]
            assert 0 < sum(regrouped) <= 2 and all(f"{probe.joints[j]}.Ia: regrouped" in msg
                                                    for j in range(7) if regrouped[j]), msg
        for name, got in (("Ia", ia), ("fv", fv), ("fc", fc)):
            err = np.abs(got / truth[name] - 1.0)
            assert np.all(err < DYN_ID_TOL[inertial][name]), f"{name}: {got} vs {truth[name]}"
        if not inertial:
            _track_with_identified_friction(probe, procs, p)
    if inertial:             # the file used, franky-sim started afresh
        _push_all_base(tmp_path, p)
        return
    # computed torque, which the unmodelled rotor inertia and friction leave unable to drive the wrist
    # (test_franka_topic.py), on a bridge started with the identified armature in its model and the
    # identified friction compensated: the same motion, tracked
    (tmp_path / "ct").mkdir()
    ct = identified_params(p, "computed_torque")
    with rig(tmp_path / "ct", "computed_torque", mode="in_process", **ct) as (procs, probe, sim):
        q0, _ = probe.snapshot()
        q, rms_ct = _min_jerk(probe, procs, q0, TRAJ_STEP)
        final_ct = np.abs(q[-1] - (q0 + TRAJ_STEP))
        print(f"computed torque, identified model: tracking RMS {rms_ct:.4f} rad, final error "
              f"{np.round(final_ct, 4)} rad")
        assert rms_ct < CT_RMS_TOL, rms_ct
        assert np.all(final_ct < CT_FINAL_TOL), final_ct
        assert probe.diag.get("state") == "running" and probe.diag.get("robot_errors") == "0"
    # Cartesian impedance with the identified armature and friction, the parameters file as written
    # (issue 43: the identified velocity scale, the band margin, stiction), the TCP pushed along x with
    # 9 N, then 18 N, then released (test/franky_sim_push.py; bench/franka_push.py has the table)
    (tmp_path / "push").mkdir()
    # (max_pos_error 0.1 m: the shipped 0.05 m clips the spring at 15 N, below the 18 N push; the
    # stiffness is measured within the clip)
    ci = {**identified_params(p, "cartesian_impedance"), "cartesian_impedance.max_pos_error": 0.1}
    with rig(tmp_path / "push", "cartesian_impedance", mode="in_process", push=True, **ci) as (procs, probe, sim):
        d9, d18, back = push_stiffness(probe, procs, sim)
        k9, k_slope = 9.0 / d9[0], 9.0 / (d18[0] - d9[0])
        print(f"Cartesian impedance, identified model: k {k9:.1f} N/m from 9 N, {k_slope:.1f} N/m from "
              f"9 -> 18 N (configured {K_POS}); {np.linalg.norm(back) * 1e3:.2f} mm from the start after release")
        assert abs(k_slope / K_POS - 1.0) < PUSH_TOL["slope"], k_slope
        assert abs(k9 / K_POS - 1.0) < PUSH_TOL["single"], k9
        assert np.linalg.norm(back) < PUSH_TOL["back"], back
    # the same with the push measured by an F/T sensor on the bridge's wrench_topic (FtSensor: the
    # force franky-sim holds, in the TCP's axes): the stiction then pulls along the law's pull plus
    # J^T of the measured wrench, toward where law and hand balance (friction_stiction_sensed, default
    # 1), and the first push is the configured stiffness (measured 308 N/m; slope 304)
    (tmp_path / "sensed").mkdir()
    with rig(tmp_path / "sensed", "cartesian_impedance", mode="in_process", push=True, **ci) as (procs, probe, sim):
        ft = FtSensor(probe, sim)
        try:
            d9, d18, back = push_stiffness(probe, procs, sim)
        finally:
            ft.close()
        k9, k_slope = 9.0 / d9[0], 9.0 / (d18[0] - d9[0])
        print(f"the push measured on wrench_topic: k {k9:.1f} N/m from 9 N, {k_slope:.1f} N/m from 9 -> 18 N; "
              f"{np.linalg.norm(back) * 1e3:.2f} mm from the start after release")
        assert abs(k9 / K_POS - 1.0) < SENSED_PUSH_TOL, k9
        assert abs(k_slope / K_POS - 1.0) < SENSED_PUSH_TOL, k_slope


def _track_with_identified_friction(probe, procs, p):
    """The identified friction compensated live in joint impedance (as `ros2 param set` would): the
    same motion out and back, without and with it."""
    q0, _ = probe.snapshot()
    q, rms_off = _min_jerk(probe, procs, q0, TRAJ_STEP)
    final_off = np.abs(q[-1] - (q0 + TRAJ_STEP))
    for k in FRICTION_KEYS:
        r = probe.set_bridge_param(f"joint_impedance.{k}", p[f"joint_impedance.{k}"])
        assert r.successful, (k, r.reason)
    q1, _ = probe.snapshot()
    q, rms_on = _min_jerk(probe, procs, q1, -TRAJ_STEP)
    final_on = np.abs(q[-1] - (q1 - TRAJ_STEP))
    print(f"tracking RMS {rms_off:.4f} -> {rms_on:.4f} rad; final error {np.round(final_off, 4)} -> "
          f"{np.round(final_on, 4)} rad")
    # measured 0.0145 -> 0.0043 rad (3 runs, the same): the law no longer pulls against the friction
    assert rms_on < 0.6 * rms_off, (rms_off, rms_on)
    assert np.all(final_on < TRAJ_FINAL_TOL), final_on
    assert probe.diag.get("state") == "running" and probe.diag.get("robot_errors") == "0"


def _push_all_base(tmp_path, p):
    """Issue 43's figures on franky-sim as the issue set them: the file of the identification with all
    base parameters, as written (the rotor inertias of joints 1-2 regrouped with their links written as
    the group less the URDF's inertials in it; the velocity scales from the slow excitation), no
    sensor, k 450 N/m along x: the first push and the slope the configured stiffness, the arm back
    where the law holds it 2 s after the release and at rest there."""
    (tmp_path / "push").mkdir()
    ci = {**identified_params(p, "cartesian_impedance"), "cartesian_impedance.task.k_pos_x": ISSUE_K_X}
    with rig(tmp_path / "push", "cartesian_impedance", mode="in_process", push=True, **ci) as (procs, probe, sim):
        d9, d18, back = push_stiffness(probe, procs, sim)
        creep = rest_speed(probe, procs, rest=CREEP_REST)
        k9, k_slope = 9.0 / d9[0], 9.0 / (d18[0] - d9[0])
        print(f"all base parameters, no sensor: k {k9:.1f} N/m from 9 N, {k_slope:.1f} N/m from 9 -> 18 N "
              f"(configured {ISSUE_K_X}); {np.linalg.norm(back) * 1e3:.2f} mm from the start 2 s after release; "
              f"at rest |dq| <= {creep:.1e} rad/s")
        assert abs(k9 / ISSUE_K_X - 1.0) < ISSUE_SINGLE_TOL, k9
        assert abs(k_slope / ISSUE_K_X - 1.0) < SLOPE_TOL, k_slope
        assert np.linalg.norm(back) < BACK_TOL, back
        assert creep < CREEP_TOL, creep


def test_follow_joint_trajectory_in_process(ros, tmp_path):
    """Issue 44's leftover on the Franka path: the bridge (in_process, joint impedance) offers the
    controller node's ~/follow_joint_trajectory.  A goal naming joints the arm does not have
    (panda_joint*) is aborted with control_msgs' INVALID_JOINTS and the arm does not move; a 2 s
    minimum-jerk goal stamped 1 s ahead on the bridge's /clock is accepted, the arm starts moving at
    that stamp (the joint states' own stamps: the goal's header.stamp taken on the robot's time), and
    the goal SUCCEEDED with the arm (franky-sim's joint states, as the bridge publishes them) at its
    last point within the goal tolerance the goal gave (TRAJ_FINAL_TOL: joint impedance against
    franky-sim's friction)."""
    pytest.importorskip("control_msgs")
    from action_msgs.msg import GoalStatus
    from control_msgs.action import FollowJointTrajectory
    from test_follow_joint_trajectory import Client
    with rig(tmp_path, "joint_impedance", mode="in_process") as (procs, probe, sim):
        client = Client(action="/franka_bridge/follow_joint_trajectory")
        try:
            q0, _ = probe.snapshot()
            bad = client.goal_msg([j.replace("fr3_", "panda_") for j in probe.joints], [1.0], [q0 + 0.1])
            status, res = client.run(bad)
            assert status == GoalStatus.STATUS_ABORTED, (status, res)
            assert res.error_code == FollowJointTrajectory.Result.INVALID_JOINTS, res
            assert "panda_joint1" in res.error_string, res.error_string
            wait_robot_time(probe, 0.5, check=procs.check_alive)
            q1, _ = probe.snapshot()
            assert np.max(np.abs(q1 - q0)) < HOLD_TOL, q1 - q0
            n = 21
            ts = np.linspace(0.0, TRAJ_T, n)[1:]
            s = ts / TRAJ_T
            P = [q0 + (10 * x**3 - 15 * x**4 + 6 * x**5) * TRAJ_STEP for x in s]
            with probe.lock:
                stamp = probe.clock + 1.0             # the bridge's /clock: start-up wall time + robot time
            probe.clear_logs()
            goal = client.goal_msg(probe.joints, list(ts), P, goal_time=1.5, stamp=stamp,
                                   goal_tol=dict(zip(probe.joints, TRAJ_FINAL_TOL)))
            status, res = client.run(goal)
            with probe.lock:
                moved = [r[1] for r in probe.js_log if np.max(np.abs(r[2] - q0)) > 1e-3]
            # min-jerk: 1 mrad of the largest step (0.2 rad) is reached 0.16 s after the start
            assert moved and stamp < moved[0] < stamp + 0.4, (stamp, moved[:1])
            assert status == GoalStatus.STATUS_SUCCEEDED, (status, res.error_code, res.error_string)
            assert res.error_code == FollowJointTrajectory.Result.SUCCESSFUL, res
            q, _ = probe.snapshot()
            err = q - P[-1]
            print(f"\nFollowJointTrajectory on the bridge: final error {np.round(err, 4)} rad, "
                  f"tolerance {np.round(TRAJ_FINAL_TOL, 4)}, {len(client.feedback)} feedback messages")
            assert np.all(np.abs(err) < TRAJ_FINAL_TOL), err
            assert client.feedback, "no feedback during the goal"
            assert probe.diag.get("state") == "running" and probe.diag.get("robot_errors") == "0"
        finally:
            client.stop()
