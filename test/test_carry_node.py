"""carry_node (nodes/carry_node.py) against sim_node with two arms (the shipped two-Panda cell), over DDS:
real child processes, a probe node here.  The oracles are MuJoCo's box pose (the cell sim's
/cell/box_pose) and joint states; every wait is for an event (a phase, a box pose, arms at rest) with a
generous bound, never a timed assertion.

- The node approaches, grasps and lifts the box by 5 cm, carries it 0.2 m along +y and back (its
  defaults: lift 0.05 m, travel [0, 0.2, 0]), the sim with MuJoCo's no-slip friction (no_slip 10, as
  cell.launch.py controller:=carry sets it; without it the soft contacts let the box creep down the
  grasp, about 1 mm/s).  MuJoCo judges: the box's height over the whole travel within 3 mm of the
  lift (it does not slip), its farthest y within 5 mm of 0.2 m and back within 5 mm of the start.
  The sim runs at real_time_factor 0.5 (a shared 2-core host: the node steps on the sim's clock).
  Both children run under SCHED_FIFO 40 (processes.RT_TEST), as the other closed loops of the suite
  do and as a 1 kHz torque loop is meant to run: on a suite run beside a CPU hog the carry node once
  went 0.103 s without a command mid-lift, the sim's command timeout braked both arms, and the box
  was still at the lifted height 2 cm off along -y 60 s later, never carried (a stall of 0.3 or 1 s
  there, made by SIGSTOP on an unloaded host, leaves it lifted 12 mm instead of 50 for the rest of the
  carry: the carry does not recover the grip a brake cost it).
- Killed then, the box still in the air (SIGKILL: no goodbye): the cell sim's per-arm command timeout
  brakes both arms, and both come to rest.
"""
import os
import signal
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from robot_dynamics.nodes.processes import RT_TEST, NodeProcesses  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.slow]


class Watch:
    def __init__(self):
        self.node = rclpy.create_node("carry_watch")
        self.phases, self.box, self.v = [], [], {}
        latched = QoSProfile(depth=5, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                             reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(String, "/carry_node/phase", lambda m: self.phases.append(m.data), latched)
        self.node.create_subscription(PoseStamped, "/cell/box_pose", self._box, 10)
        for ns in ("left", "right"):
            self.node.create_subscription(JointState, f"/{ns}/joint_states",
                                          lambda m, ns=ns: self.v.__setitem__(ns, np.array(m.velocity)), 10)

    def _box(self, m):
        p = m.pose.position
        self.box.append((p.x, p.y, p.z))          # (1 kHz for about a minute: kept whole)

    def wait(self, pred, timeout, procs):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.05)
            procs.check_alive()
            if pred():
                return True
        return False


def test_carry_node_lifts_and_carries_then_killed_both_arms_rest(ros, tmp_path):
    procs = NodeProcesses(log_dir=tmp_path)
    w = Watch()
    try:
        procs.start("robot_dynamics.nodes.sim_node", name="mujoco_sim",
                    params={"arms": ["left", "right"], "integrator": "implicitfast", "real_time_factor": 0.5,
                            "no_slip": 10}, realtime=RT_TEST)
        carry = procs.start("robot_dynamics.nodes.carry_node", name="carry_node", params={"use_sim_time": True},
                            realtime=RT_TEST)
        logs = lambda: "".join(procs.log(p) for p in procs.procs)  # noqa: E731
        assert w.wait(lambda: w.box, 60.0, procs), "no box pose\n" + logs()
        z0 = w.box[-1][2]
        assert w.wait(lambda: "carry" in w.phases, 120.0, procs), f"phases {w.phases}\n" + logs()
        assert w.wait(lambda: w.box and w.box[-1][2] > z0 + 0.04, 60.0, procs), \
            f"not lifted: box {w.box[-1]}\n" + logs()
        assert w.wait(lambda: w.box[-1][1] > 0.19, 60.0, procs), f"not carried: box {w.box[-1]}\n" + logs()
        assert w.wait(lambda: w.box[-1][1] < 0.005, 60.0, procs), f"not back: box {w.box[-1]}\n" + logs()
        assert w.box[-1][2] > z0 + 0.04, f"set down before it was judged: {w.box[-1]}"
        box = np.array(w.box)
        travel = box[(box[:, 1] > 0.01) & (box[:, 2] > z0 + 0.04)]
        y_max = float(box[:, 1].max())
        assert abs(y_max - 0.2) < 0.005, f"farthest y {y_max:.4f} m"
        assert np.max(np.abs(travel[:, 2] - (z0 + 0.05))) < 0.003, \
            f"box height over the travel {travel[:, 2].min():.4f} .. {travel[:, 2].max():.4f} m (lifted to {z0 + 0.05:.3f})"
        assert "hold" not in w.phases
        os.killpg(carry.pid, signal.SIGKILL)             # the controller dies mid-carry
        carry.wait(timeout=10.0)
        procs.procs = [p for p in procs.procs if p is not carry]
        assert w.wait(lambda: all(ns in w.v and np.max(np.abs(w.v[ns])) < 0.01 for ns in ("left", "right")),
                      30.0, procs), f"arms not at rest: {w.v}\n" + logs()
    finally:
        w.node.destroy_node()
        procs.stop_all()
