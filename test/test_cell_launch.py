"""`ros2 launch robot_dynamics cell.launch.py arms:=2` under the real launch tools (as test_ros2_tools.py
starts its launch files): both namespaced controllers come up active, and both arms are held by them,
judged from the sim's own topics: after 2000 joint states of each arm (controllers active), the last
1000 are within 5 mrad of the start pose, the efforts the sim applied are Pinocchio's gravity torque
of the Panda URDF there (within 0.5 N m), and the sim reports each arm's brakes open on /diagnostics
(so the arms are held by their controllers, not by the start-up brakes).  Then a clean exit."""
import time

import numpy as np
import pytest

from test_ros2_tools import Launch, assert_clean_exit  # noqa: E402  (skips the module without the tools)

rclpy = pytest.importorskip("rclpy")

pytestmark = [pytest.mark.system, pytest.mark.slow]

HOME = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
STATES = 2000               # joint states of each arm looked at, once both controllers are active ...
LAST = 1000                 # ... the last this many judged
HOLD_TOL = 5e-3             # rad
EFFORT_TOL = 0.5            # N m from Pinocchio's g(q)
WAIT = 120.0                # s: event waits on a loaded 2-core machine


def test_cell_launch_two_arms_active_and_held(ros, model, tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray
    from robot_dynamics.dynamics import PinocchioBackend
    from robot_dynamics.nodes.probe import Probe
    launch = Launch(["robot_dynamics", "cell.launch.py", "arms:=2"], tmp_path / "launch.log")
    probes, diag_node = {}, None
    try:
        for ns in ("left", "right"):
            launch.wait_for(rf"\[{ns}\.torque_controller\]: active: joint_impedance", WAIT)
        launch.wait_for(r"\[mujoco_sim\]: simulating a cell of 2 arms \(left, right\)", WAIT)
        probes = {ns: Probe(joints=model.joint_names, name=f"cell_probe_{ns}",
                            joint_states_topic=f"/{ns}/joint_states",
                            command_topic=f"/{ns}/effort_controller/commands",
                            controller_ns=f"/{ns}/torque_controller").start() for ns in ("left", "right")}
        brakes = {}
        diag_node = rclpy.create_node("cell_diag_probe")

        def on_diag(msg):
            for st in msg.status:
                for ns in ("left", "right"):
                    if st.name.endswith(f": {ns}"):
                        brakes[ns] = {kv.key: kv.value for kv in st.values}.get("brakes")
        diag_node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
        for ns, p in probes.items():
            assert p.wait_for(lambda p=p: len(p.js_log) >= STATES, WAIT), \
                f"{ns}: {len(p.js_log)} joint states of {STATES}:\n{launch.out()[-3000:]}"
        t_end = time.monotonic() + WAIT
        while time.monotonic() < t_end and not (brakes.get("left") == "off" and brakes.get("right") == "off"):
            rclpy.spin_once(diag_node, timeout_sec=0.2)
        assert brakes == {"left": "off", "right": "off"}, f"brakes on /diagnostics: {brakes}"
        g = PinocchioBackend(model)
        for ns, p in probes.items():
            with p.lock:
                log = list(p.js_log)[STATES - LAST:STATES]
            q = np.array([e[2] for e in log])
            eff = np.array([e[4] for e in log])
            err = float(np.max(np.abs(q - HOME)))
            assert err < HOLD_TOL, f"{ns}: joint error {err:.4f} rad over the last {LAST} states"
            geff = float(max(np.max(np.abs(e - g.gravity(qq))) for qq, e in zip(q[::50], eff[::50])))
            assert geff < EFFORT_TOL, f"{ns}: applied effort {geff:.3f} N m from g(q)"
    except BaseException:
        launch.kill()
        raise
    finally:
        for p in probes.values():
            p.stop()
            p.destroy_node()
        if diag_node is not None:
            diag_node.destroy_node()
    rc = launch.stop("sigint")
    assert_clean_exit(launch, rc, ["sim_node", "controller_node"])
