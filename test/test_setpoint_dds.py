"""Issue 41 over DDS, on the shipped defaults: the sim node and the controller node as separate processes
with config/sim_panda.yaml and config/panda_joint_impedance.yaml as shipped (k 400 N m/rad on joints 1-4,
torque_rate_limit 1000 N m/s), a JointState set-point on ~/target_joint_state moving joint 1 by -0.6 rad
(before: 146 rad/s, still moving 4 s later).  The arm reaches the set-point, its joint speeds as the sim
publishes them stay within the URDF's velocity limits, and it comes to rest.  Waits on events (the
controller's accepted count, the arm at the target), no timed assertion."""
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from sensor_msgs.msg import JointState  # noqa: E402

from robot_dynamics.dynamics import robots  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.slow]
ARM = [f"panda_joint{i}" for i in range(1, 8)]
TIMEOUT = 120.0


def test_a_joint_set_point_step_on_the_shipped_panda_config_settles_within_the_velocity_limits(ros, tmp_path):
    from robot_dynamics.nodes.probe import Probe
    from robot_dynamics.nodes.processes import RT_TEST, NodeProcesses, start_sim_and_controller
    root = ET.parse(robots.robot_urdf_path("panda")).getroot()
    vmax = {j.get("name"): float(j.find("limit").get("velocity")) for j in root.iter("joint") if j.get("name") in ARM}
    vl = np.array([vmax[n] for n in ARM])
    procs = NodeProcesses(log_dir=tmp_path)
    probe = Probe(joints=ARM, name="setpoint_probe")
    probe.pub_target = probe.create_publisher(JointState, "/torque_controller/target_joint_state", 10)
    try:
        start_sim_and_controller(procs, "panda", "joint_impedance", realtime=RT_TEST)
        probe.start()
        ok = probe.wait_for(lambda: probe.n_js > 100 and probe.ctl_diag.get("lifecycle_state") == "active"
                            and probe.pub_target.get_subscription_count() > 0, TIMEOUT, check=procs.check_alive)
        assert ok, "\n".join(procs.log(p)[-2000:] for p in procs.procs)
        # at rest after the start ramp (an event: every joint slower than 1e-3 rad/s)
        assert probe.wait_for(lambda: probe.v is not None and np.abs(probe.v).max() < 1e-3, TIMEOUT,
                              check=procs.check_alive)
        with probe.lock:
            q0 = probe.q.copy()
        target = q0.copy()
        target[0] -= 0.6
        probe.clear_logs()
        probe.publish_confirmed("pub_target", JointState(name=ARM, position=target.tolist()), "target_joint_state")
        reached = probe.wait_for(lambda: np.abs(probe.q - target).max() < 5e-3 and np.abs(probe.v).max() < 1e-3,
                                 TIMEOUT, check=procs.check_alive)
        with probe.lock:
            log = list(probe.js_log)
        V = np.array([r[3] for r in log if r[3] is not None])
        peak = np.abs(V).max(axis=0) / vl
        print(f"\nshipped Panda joint impedance, joint 1 -0.6 rad over DDS: peak speed / URDF limit per joint "
              f"{np.round(peak, 2).tolist()}; {len(V)} joint states")
        assert reached, f"not at the set-point at rest: q {probe.q}, v {probe.v}"
        assert peak.max() <= 1.0
        assert int(probe.ctl_diag.get("safety.joint_speed_stops", 0)) == 0
    finally:
        probe.stop()
        procs.stop_all()
