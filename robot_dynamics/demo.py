"""The main job: a simulated torque-controlled arm on ROS 2, end to end.

    robot_dynamics_demo                                  # Panda, Cartesian impedance (about 30 s)
    robot_dynamics_demo --controller computed_torque     # or joint_impedance, gravity_compensation
    robot_dynamics_demo --summary [--robot ur5]          # the dynamics summary + backend self-check

Starts the MuJoCo sim node (standing in for Gazebo + ros2_control: /joint_states, effort commands on
/effort_controller/commands, F/T wrench) and the torque controller node as two processes over DDS,
as `ros2 launch robot_dynamics sim.launch.py` would, then drives a scripted scenario from a probe node
in this process, from the topics only:

  1. hold      the controller holds the start pose                    (drift)
  2. follow    joint laws: a JointTrajectory on ~/joint_trajectory     (tracking error)
               Cartesian impedance (issue 12), each path starting and ending at the start pose:
     stream    the 40 mm circle, 4 s per turn, streamed as poses only on ~/target_pose at 100 Hz
               (no velocity: the impedance lags)
     circle    the same circle from one MultiDOFJointTrajectory on ~/cartesian_trajectory (points every
               50 ms with velocities and accelerations: feed-forward)
     fast      the circle at 2 s per turn (trajectory)
     line      a straight line 100 mm out and back along y turning the hand 0.3 rad about z on the
               way, with a 1 s rest at each end (trajectory)
  3. push      a 15 N push on the tool (the sim's ~/apply_wrench), then released   (deflection, F/dx)

The sim publishes joint states at 1 kHz and the controller (trigger: joint_state) commands at the same
rate.  With --rt auto (default) the two node processes run under SCHED_FIFO when the OS allows it
(measured: on a loaded 2-core machine an un-prioritised DDS loop degrades badly).
It prints a summary (tracking errors per path: RMS and max position error, max orientation error;
deflection; loop timing: joint-state period, command rate, joint-state -> command latency seen by a
third node, the controller's own step latency from /diagnostics, the sim's real-time factor) and writes
out/demo_<controller>.png.
"""
import argparse
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from .dynamics import Model, PinocchioBackend, self_check
from .dynamics.robots import ROBOTS


# ------------------------------------------------------------------------------------------------
# --summary: the dynamics summary
# ------------------------------------------------------------------------------------------------
def summary(model, out=sys.stdout):
    dyn = PinocchioBackend(model)
    q = model.neutral()
    report = self_check(model)
    w = out.write
    w(f"robot {model.name!r} from {model.source}\n")
    w(f"  nq={model.nq} nv={model.nv} floating_base={model.floating_base} frames={len(model.frame_names)}\n")
    w(f"  {'joint':<24}{'type':<12}{'lower':>9}{'upper':>9}{'vel':>8}{'effort':>8}{'g(q0) N m':>12}\n")
    g = dyn.gravity(q)
    off = 6 if model.floating_base else 0
    for k, (n, t) in enumerate(zip(model.joint_names, model.joint_types)):
        w(f"  {n:<24}{t:<12}{model.lower_limits[k]:>9.3f}{model.upper_limits[k]:>9.3f}"
          f"{model.velocity_limits[k]:>8.2f}{model.effort_limits[k]:>8.1f}{g[off + k]:>12.4f}\n")
    M = dyn.mass_matrix(q)
    ev = np.linalg.eigvalsh(M)
    w(f"  mass matrix at q0: eigenvalues in [{ev[0]:.4g}, {ev[-1]:.4g}]\n")
    w("  backend self-check (largest scaled |pinocchio - reference|):\n")
    for k, e in report.items():
        w(f"    {k:<20}{e:.2e}\n")
    return report


# ------------------------------------------------------------------------------------------------
# the simulated demo
# ------------------------------------------------------------------------------------------------
HOLD_TIME = 2.0            # s
CIRCLE_RADIUS = 0.04       # m
CIRCLE_PERIOD = 4.0        # s per turn on average (quintic start and stop)
CIRCLE_TURNS = 2
FAST_PERIOD = 2.0          # s per turn, the faster circle
STREAM_RATE = 100.0        # Hz, pose targets
TRAJ_STEP = 0.05           # s between the points of a MultiDOFJointTrajectory
LINE_LENGTH = 0.10         # m along world y, out and back
LINE_ROTATION = 0.3        # rad about world z on the way out (back on the way back)
LINE_MOVE = 1.5            # s per leg
LINE_REST = 1.0            # s at each end
RATE = 1000.0              # Hz: joint states (sim) and commands (controller, joint-state triggered)
RT_PRIORITY = 40           # SCHED_FIFO priority of the node processes with --rt (ros2_control uses 50)
PROBE_RT_PRIORITY = 30     # the probe (this process) below them: it records and streams, it must not starve
JOINT_AMPLITUDE = 0.25     # rad, joint trajectory excursion
JOINT_SEGMENT = 1.5        # s per trajectory point
PUSH_N = 15.0              # N along world y
PUSH_TIME = 2.0            # s pushed, then as long released
START_TIMEOUT = 60.0       # s


PATHS = {"stream": f"circle {CIRCLE_PERIOD:.0f} s/turn, poses streamed at {STREAM_RATE:.0f} Hz (no feed-forward)",
         "circle": f"circle {CIRCLE_PERIOD:.0f} s/turn, MultiDOFJointTrajectory (feed-forward)",
         "fast": f"circle {FAST_PERIOD:.0f} s/turn, MultiDOFJointTrajectory",
         "line": f"line {LINE_LENGTH * 1e3:.0f} mm + {LINE_ROTATION} rad, rests, trajectory"}


def _pctl(x, p):
    return float(np.percentile(x, p)) if len(x) else float("nan")


def circle_point(t, p0, period, turns, r=CIRCLE_RADIUS):
    """The circle in the y-z plane through p0 (start and end at p0, quintic time scaling over `turns`
    turns of `period` s on average): position, velocity, acceleration (analytic)."""
    T = period * turns
    u = min(max(t / T, 0.0), 1.0)
    S = 2 * math.pi * turns
    s = S * u ** 3 * (10 - 15 * u + 6 * u * u)
    sd = S * 30 * u * u * (1 - u) ** 2 / T
    sdd = S * 60 * u * (1 - u) * (1 - 2 * u) / T ** 2
    c, si = math.cos(s), math.sin(s)
    return (p0 + r * np.array([0.0, si, 1.0 - c]), r * np.array([0.0, c, si]) * sd,
            r * np.array([0.0, -si * sd * sd + c * sdd, c * sd * sd + si * sdd]))


def circle_points(R0, p0, period, turns, step=TRAJ_STEP):
    """(times, positions, rotations, twists, accels) of the circle sampled every `step` s."""
    T = period * turns
    ts = np.linspace(0.0, T, int(round(T / step)) + 1)
    pts = [circle_point(t, p0, period, turns) for t in ts]
    z = np.zeros(3)
    return (ts, [x[0] for x in pts], [R0] * len(ts), [np.r_[x[1], z] for x in pts],
            [np.r_[x[2], z] for x in pts])


def line_points(R0, p0):
    """Out LINE_LENGTH along y turning LINE_ROTATION about z, rest, back, rest: every point at rest
    (zero velocity and acceleration: quintic rest-to-rest legs)."""
    import pinocchio as pin
    R1 = pin.exp3(np.array([0.0, 0.0, LINE_ROTATION])) @ R0
    p1 = p0 + np.array([0.0, LINE_LENGTH, 0.0])
    ts = np.cumsum([0.0, LINE_MOVE, LINE_REST, LINE_MOVE, LINE_REST])
    P, Rs = [p0, p1, p1, p0, p0], [R0, R1, R1, R0, R0]
    return ts, P, Rs, [np.zeros(6)] * 5, [np.zeros(6)] * 5


def fifo_threads(pids, priority, policy=None):
    """SCHED_FIFO at `priority` (or `policy`, e.g. os.SCHED_OTHER with priority 0) for every thread of
    the processes `pids` (threads started later inherit it).  Returns the number of threads set, 0 when
    the OS refuses."""
    policy = os.SCHED_FIFO if policy is None else policy
    n = 0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setscheduler(tid, policy, os.sched_param(priority))
                n += 1
            except (OSError, AttributeError):
                return 0
    return n


class Demo:
    def __init__(self, robot, controller, out_dir, log_dir, rt="auto", rate=RATE):
        import yaml
        from .description import robot_name
        from .nodes.processes import config_path
        self.robot, self.controller = robot, controller
        self.out_dir, self.log_dir = Path(out_dir), Path(log_dir)
        self.model = Model.from_robot(robot_name(robot))
        self.dyn = PinocchioBackend(self.model)
        with open(config_path(f"sim_{robot}.yaml")) as f:
            self.sim_cfg = yaml.safe_load(f)["/**"]["ros__parameters"]
        with open(config_path(f"{robot}_cartesian_impedance.yaml")) as f:
            ci = yaml.safe_load(f)["/**"]["ros__parameters"]["cartesian_impedance"]
        with open(config_path(f"{robot}_{controller}.yaml")) as f:
            self.ctl_cfg = yaml.safe_load(f)["/**"]["ros__parameters"]
        self.tcp = ci["frame"]
        self.k_pos = float(ci["task"]["k_pos_y"])
        self.q0 = np.array(self.sim_cfg["initial_positions"])
        self.phases = []            # (name, t_start, t_end) in probe monotonic time
        self.targets = []           # (t, p_desired) streamed Cartesian targets
        self.diag = {}
        self.rt, self.rate = rt, float(rate)
        self.rt_threads = 0

    # ---- kinematics from measured joint positions ----
    def fk(self, q):
        import pinocchio as pin
        pm = self.model.pin_model
        data = self._data = getattr(self, "_data", None) or pm.createData()
        pin.framesForwardKinematics(pm, data, self.model.q_to_pin(q))
        M = data.oMf[pm.getFrameId(self.tcp)]
        return M.rotation.copy(), M.translation.copy()

    def _on_diag(self, msg):
        for st in msg.status:
            if "torque controller" in st.name:
                self.diag = {kv.key: kv.value for kv in st.values}

    # ---- scenario ----
    def run(self):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from .nodes.probe import Probe
        from .nodes.processes import NodeProcesses, start_sim_and_controller
        t_wall0 = time.monotonic()
        rclpy.init()
        procs = NodeProcesses(log_dir=self.log_dir)
        probe = Probe(joints=self.model.joint_names, name="demo_probe")
        probe.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        try:
            print(f"[demo] starting sim_node ({self.robot}) and controller_node ({self.controller}); "
                  f"logs in {self.log_dir}", flush=True)
            ctl_params = {}
            if self.controller == "cartesian_impedance":
                # max_pos_error: the push below is measured as a stiffness (F / dx), within the clip of
                # the pose error (the shipped clip, e.g. the Panda's 0.05 m x 300 N/m = 15 N, would
                # let the 15 N push through: the arm yields until the push ends)
                ctl_params = {"cartesian_impedance": {"velocity_product_compensation": True,
                                                      "max_pos_error": 0.1}}
            rt_children = None if self.rt == "off" else {"policy": "fifo", "priority": RT_PRIORITY}
            sim, ctl = start_sim_and_controller(procs, self.robot, self.controller, realtime=rt_children,
                                     # /clock is not used here (no node runs on sim time): 1 kHz less traffic
                                     sim_params={"publish_rate": self.rate, "publish_clock": False},
                                     controller_params=ctl_params)
            probe.start()
            ok = probe.wait_for(lambda: probe.n_state > 10 and probe.effort is not None
                                and np.any(probe.effort != 0.0), START_TIMEOUT, check=procs.check_alive)
            if not ok:
                raise RuntimeError("sim + controller did not start:\n" +
                                   "\n".join(procs.log(p)[-2000:] for p in procs.procs))
            self.t_ready = time.monotonic() - t_wall0
            if self.rt != "off":
                applied = procs.realtime_applied(sim) and procs.realtime_applied(ctl)
                if self.rt == "on" and not applied:
                    raise RuntimeError("--rt on: SCHED_FIFO refused (needs CAP_SYS_NICE or an RLIMIT_RTPRIO)")
                if applied:
                    self.rt_threads = fifo_threads([os.getpid()], PROBE_RT_PRIORITY)
            rt = (f"nodes under SCHED_FIFO {RT_PRIORITY}, probe {PROBE_RT_PRIORITY}" if self.rt_threads
                  else "no real-time priority")
            print(f"[demo] running after {self.t_ready:.1f} s ({self.rate:.0f} Hz, {rt}); scenario: hold, "
                  f"follow, push", flush=True)
            probe.clear_logs()
            self.t0 = time.monotonic()
            self._phase("hold", lambda: time.sleep(HOLD_TIME))
            q_start, _ = probe.snapshot()
            R0, p0 = self.fk(q_start)
            if self.controller == "cartesian_impedance":
                self._phase("stream", lambda: self._circle(probe, R0, p0))
                pub = self._multidof_publisher(probe)
                if not probe.wait_for(lambda: pub.get_subscription_count() > 0, 2.0):
                    print("[demo] the controller does not subscribe to ~/cartesian_trajectory: the "
                          "trajectory paths are skipped", flush=True)
                    pub = None
                if pub is not None:
                    self._phase("circle", lambda: self._trajectory(pub, circle_points(R0, p0, CIRCLE_PERIOD,
                                                                                      CIRCLE_TURNS)))
                    self._phase("fast", lambda: self._trajectory(pub, circle_points(R0, p0, FAST_PERIOD,
                                                                                    CIRCLE_TURNS)))
                    self._phase("line", lambda: self._trajectory(pub, line_points(R0, p0)))
            elif self.controller in ("computed_torque", "joint_impedance"):
                self._phase("follow", lambda: self._joint_trajectory(probe, q_start))
            # push at the pose reached (Cartesian: back at the circle's start point)
            self._phase("push", lambda: (probe.push(self.tcp, [0, PUSH_N, 0, 0, 0, 0]), time.sleep(PUSH_TIME)))
            self._phase("release", lambda: (probe.push(self.tcp, [0.0] * 6), time.sleep(PUSH_TIME)))
            procs.check_alive()
            with probe.lock:
                self.js_log = list(probe.js_log)
                self.cmd_log = list(probe.cmd_log)
                self.state_log = list(probe.state_log)
        finally:
            if self.rt_threads:                      # the analysis and the plot run unprivileged
                fifo_threads([os.getpid()], 0, os.SCHED_OTHER)
            probe.stop()
            probe.destroy_node()
            procs.stop_all()
            rclpy.try_shutdown()
        self.sim_stats = self._sim_stats(procs)
        self.t_total = time.monotonic() - t_wall0

    def _phase(self, name, fn):
        t = time.monotonic()
        fn()
        self.phases.append((name, t, time.monotonic()))

    def _circle(self, probe, R0, p0):
        """Stream pose targets on a circle in the y-z plane through p0 (start and end at p0)."""
        import pinocchio as pin
        quat = pin.Quaternion(R0).coeffs()
        T = CIRCLE_PERIOD * CIRCLE_TURNS
        t0 = time.monotonic()
        k = 0
        while True:
            t = time.monotonic() - t0
            if t > T + 0.5:
                break
            u = min(t, T) / T           # quintic time scaling: zero velocity and acceleration at both ends
            s = 2 * math.pi * CIRCLE_TURNS * u ** 3 * (10 - 15 * u + 6 * u * u)
            p = p0 + CIRCLE_RADIUS * np.array([0.0, math.sin(s), 1.0 - math.cos(s)])
            probe.publish_pose(p, quat)
            self.targets.append((time.monotonic(), p))
            k += 1
            time.sleep(max(0.0, t0 + k / STREAM_RATE - time.monotonic()))

    def _multidof_publisher(self, probe):
        from trajectory_msgs.msg import MultiDOFJointTrajectory
        return probe.create_publisher(MultiDOFJointTrajectory, "/torque_controller/cartesian_trajectory", 10)

    def _trajectory(self, pub, points, settle=0.5):
        """Publish one MultiDOFJointTrajectory (times from receipt) and wait for its end + settle."""
        from geometry_msgs.msg import Transform, Twist
        from trajectory_msgs.msg import MultiDOFJointTrajectory, MultiDOFJointTrajectoryPoint
        import pinocchio as pin
        ts, P, Rs, tw, ac = points
        msg = MultiDOFJointTrajectory()
        msg.joint_names = [self.tcp]
        for t, p, R, w, a in zip(ts, P, Rs, tw, ac):
            pt = MultiDOFJointTrajectoryPoint()
            tf = Transform()
            tf.translation.x, tf.translation.y, tf.translation.z = (float(x) for x in p)
            q = pin.Quaternion(np.asarray(R)).coeffs()          # x y z w
            tf.rotation.x, tf.rotation.y, tf.rotation.z, tf.rotation.w = (float(x) for x in q)
            pt.transforms = [tf]
            for arr, out in ((w, pt.velocities), (a, pt.accelerations)):
                m = Twist()
                m.linear.x, m.linear.y, m.linear.z, m.angular.x, m.angular.y, m.angular.z = (float(x) for x in arr)
                out.append(m)
            pt.time_from_start.sec = int(t)
            pt.time_from_start.nanosec = int(round((t - int(t)) * 1e9))
            msg.points.append(pt)
        pub.publish(msg)
        time.sleep(float(ts[-1]) + settle)

    def _joint_trajectory(self, probe, q_start):
        """Out and back: +A, -A, start, one point per JOINT_SEGMENT s (the controller interpolates)."""
        lo, hi = self.model.lower_limits + 0.05, self.model.upper_limits - 0.05
        pts = [np.clip(q_start + s * JOINT_AMPLITUDE, lo, hi) for s in (1.0, -1.0, 0.0)]
        times = [JOINT_SEGMENT * (i + 1) for i in range(len(pts))]
        probe.publish_trajectory(times, pts)
        time.sleep(times[-1] + 0.5)

    def _sim_stats(self, procs):
        text = procs.log(procs.procs[0]) if procs.procs else ""
        m = re.search(r"stopped: (\{.*?\}) sim time ([0-9.]+) s", text)
        if not m:
            return {}
        import ast
        d = ast.literal_eval(m.group(1))
        d["sim_time"] = float(m.group(2))
        return d

    # ---- analysis ----
    def analyse(self):
        js = self.js_log
        t = np.array([r[0] for r in js]) - self.t0
        q = np.array([r[2] for r in js])
        p = np.array([self.fk(qi)[1] for qi in q])
        self.t, self.p, self.q = t, p, q
        res = {}
        ph = {n: (a - self.t0, b - self.t0) for n, a, b in self.phases}
        self.ph = ph
        hold = (t >= ph["hold"][0]) & (t <= ph["hold"][1])
        res["hold_drift_mm"] = 1e3 * float(np.max(np.linalg.norm(p[hold] - p[hold][0], axis=1))) if hold.any() else float("nan")
        res["hold_drift_rad"] = float(np.max(np.abs(q[hold] - q[hold][0]))) if hold.any() else float("nan")
        # tracking: the controller's reported error (~/state velocity field) during "follow"
        st_t = np.array([r[0] for r in self.state_log]) - self.t0
        st_err = [r[2] for r in self.state_log]
        self.st_t = st_t
        if self.controller == "cartesian_impedance":
            res["paths"] = {}
            for name in PATHS:
                if name not in ph:
                    continue
                a, b = ph[name]
                sel = [i for i, ti in enumerate(st_t) if a <= ti <= b and st_err[i].size >= 6]
                if not sel:
                    continue
                e = np.array([np.linalg.norm(st_err[i][:3]) for i in sel])
                er = np.array([np.linalg.norm(st_err[i][3:6]) for i in sel])
                res["paths"][name] = {"rms_mm": 1e3 * float(np.sqrt(np.mean(e ** 2))), "max_mm": 1e3 * float(e.max()),
                                      "rot_rms_mrad": 1e3 * float(np.sqrt(np.mean(er ** 2))),
                                      "rot_max_mrad": 1e3 * float(er.max()), "n": len(sel)}
            if "stream" in res["paths"]:
                res["track_rms_mm"] = res["paths"]["stream"]["rms_mm"]
                res["track_max_mm"] = res["paths"]["stream"]["max_mm"]
            if self.targets:
                # against the streamed target (what the user asked for), measured by FK
                tt = np.array([x[0] for x in self.targets]) - self.t0
                pt = np.array([x[1] for x in self.targets])
                inside = (t >= tt[0]) & (t <= tt[-1])
                pd = np.stack([np.interp(t[inside], tt, pt[:, k]) for k in range(3)], axis=1)
                dev = np.linalg.norm(p[inside] - pd, axis=1)
                res["target_rms_mm"], res["target_max_mm"] = 1e3 * float(np.sqrt(np.mean(dev ** 2))), 1e3 * float(dev.max())
                self.pd_t, self.pd = t[inside], pd
        elif "follow" in ph:
            a, b = ph["follow"]
            sel = [i for i, ti in enumerate(st_t) if a <= ti <= b]
            if sel:
                e = np.array([np.max(np.abs(st_err[i])) for i in sel])
                res["track_rms_rad"] = float(np.sqrt(np.mean(e ** 2)))
                res["track_max_rad"] = float(e.max())
        # push: steady deflection along y over the last half second of the push
        a, b = ph["push"]
        before = t < a
        last = (t >= b - 0.5) & (t <= b)
        if before.any() and last.any():
            p_before = p[before][-1]
            dy = float(np.mean(p[last][:, 1]) - p_before[1])
            res["push_deflection_mm"] = 1e3 * dy
            res["push_stiffness_N_per_m"] = PUSH_N / dy if abs(dy) > 1e-6 else float("inf")
            a2, b2 = ph["release"]
            fin = (t >= b2 - 0.5) & (t <= b2)
            res["release_return_mm"] = 1e3 * float(np.linalg.norm(np.mean(p[fin], axis=0) - p_before)) if fin.any() else float("nan")
        # loop timing
        rx = np.array([r[0] for r in js])
        dt = np.diff(rx) * 1e3
        res["js_rate_hz"] = (len(rx) - 1) / (rx[-1] - rx[0]) if len(rx) > 1 else float("nan")
        res["js_period_p50_ms"], res["js_period_p99_ms"] = _pctl(dt, 50), _pctl(dt, 99)
        c = self.cmd_log
        crx = np.array([r[0] for r in c])
        res["cmd_rate_hz"] = (len(crx) - 1) / (crx[-1] - crx[0]) if len(crx) > 1 else float("nan")
        lat = np.array([(r[0] - r[1]) * 1e3 for r in c if r[1] is not None])
        self.lat = lat
        res["js_to_cmd_p50_ms"], res["js_to_cmd_p99_ms"] = _pctl(lat, 50), _pctl(lat, 99)
        self.res = res
        return res

    def print_summary(self, out=sys.stdout):
        r, w = self.res, out.write
        w(f"\n=== robot_dynamics demo: {self.robot}, {self.controller} (sim node + controller node over DDS) ===\n")
        w(f"  start-up (processes, model, self-check, brakes released): {self.t_ready:.1f} s; total {self.t_total:.1f} s\n")
        w(f"  hold      drift {r['hold_drift_mm']:.3f} mm at {self.tcp}, {r['hold_drift_rad']:.2e} rad max joint\n")
        if r.get("paths"):
            w(f"  follow    controller error |p_d - p| and rotation error |log(R_d R^T)| over each path:\n")
            w(f"            {'path':<62}{'RMS mm':>8}{'max mm':>8}{'rot RMS mrad':>14}{'rot max mrad':>14}\n")
            for name, x in r["paths"].items():
                w(f"            {PATHS[name]:<62}{x['rms_mm']:>8.3f}{x['max_mm']:>8.3f}{x['rot_rms_mrad']:>14.3f}"
                  f"{x['rot_max_mrad']:>14.3f}\n")
            if "target_rms_mm" in r:
                w(f"            streamed poses vs the arm by FK: rms {r['target_rms_mm']:.2f} mm, max "
                  f"{r['target_max_mm']:.2f} mm (a PoseStamped carries no velocity: D xdot resists the motion, "
                  f"error ~D v / K)\n")
        if "track_rms_rad" in r:
            w(f"  follow    joint trajectory +-{JOINT_AMPLITUDE} rad: tracking error (|q_ref - q|, worst joint) "
              f"rms {r['track_rms_rad']:.2e} rad, max {r['track_max_rad']:.2e} rad\n")
        if "push_deflection_mm" in r:
            kinfo = f" (configured k_pos {self.k_pos:.0f} N/m)" if self.controller == "cartesian_impedance" else ""
            w(f"  push      {PUSH_N:.0f} N along y: deflection {r['push_deflection_mm']:.1f} mm -> "
              f"{r['push_stiffness_N_per_m']:.0f} N/m{kinfo}; after release {r['release_return_mm']:.2f} mm from "
              f"where it was\n")
        w(f"  timing    /joint_states {r['js_rate_hz']:.0f} Hz (period p50 {r['js_period_p50_ms']:.2f} ms, "
          f"p99 {r['js_period_p99_ms']:.2f} ms); commands {r['cmd_rate_hz']:.0f} Hz\n")
        w(f"            joint state -> command, seen by a third node: p50 {r['js_to_cmd_p50_ms']:.2f} ms, "
          f"p99 {r['js_to_cmd_p99_ms']:.2f} ms\n")
        d = self.diag
        if d:
            w(f"            controller (/diagnostics): loop {d.get('loop_rate_hz', '?')} Hz, step latency mean "
              f"{d.get('step_latency_mean_us', '?')} us, max {d.get('step_latency_max_us', '?')} us, watchdog "
              f"trips {d.get('watchdog_trips', '?')}\n")
        s = self.sim_stats
        if s:
            w(f"            sim: {s['steps']} steps of {self.sim_cfg['dt'] * 1e3:.0f} ms in {s['cycles']} cycles, "
              f"{s['slips']} slips (backlog dropped), sim time {s['sim_time']:.1f} s\n")

    def plot(self):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        self.out_dir.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(4, 1, figsize=(10, 12), constrained_layout=True)
        colors = {"hold": "#dddddd", "follow": "#d8ecff", "stream": "#f5d8ff", "circle": "#d8ecff",
                  "fast": "#d8fff0", "line": "#fff5cc", "push": "#ffe0cc", "release": "#e6f5d0"}

        def shade(a):
            for n, (t0, t1) in self.ph.items():
                a.axvspan(t0, t1, color=colors.get(n, "#eeeeee"), alpha=0.6, lw=0)
                a.text(0.5 * (t0 + t1), 1.0, n, transform=a.get_xaxis_transform(), ha="center", va="bottom",
                       fontsize=8)

        a = ax[0]
        shade(a)
        for k, lab in enumerate("xyz"):
            a.plot(self.t, 1e3 * (self.p[:, k] - self.p[0, k]), label=f"{lab} measured")
        if getattr(self, "pd", None) is not None:
            for k, lab in enumerate("xyz"):
                a.plot(self.pd_t, 1e3 * (self.pd[:, k] - self.p[0, k]), "--", lw=1, label=f"{lab} target")
        a.set_ylabel(f"{self.tcp} - start [mm]")
        a.legend(ncol=6, fontsize=8, loc="lower left")
        a.set_title(f"{self.robot}, {self.controller}: sim node + controller node over DDS")

        a = ax[1]
        shade(a)
        err = [r[2] for r in self.state_log]
        if self.controller == "cartesian_impedance":
            e = np.array([1e3 * np.linalg.norm(x[:3]) if x.size >= 3 else np.nan for x in err])
            er = np.array([1e3 * np.linalg.norm(x[3:6]) if x.size >= 6 else np.nan for x in err])
            a.semilogy(self.st_t, np.maximum(e, 1e-4), lw=1, label="|p_d - p| [mm]")
            a.semilogy(self.st_t, np.maximum(er, 1e-4), lw=1, label="|log(R_d R^T)| [mrad]")
            a.axhline(1.0, color="k", ls=":", lw=1)
            a.set_ylabel("controller error (log)")
            a.legend(fontsize=8, loc="upper right")
            for name, x in self.res.get("paths", {}).items():
                t0, t1 = self.ph[name]
                a.text(0.5 * (t0 + t1), 0.02, f"{x['rms_mm']:.2f} mm rms", transform=a.get_xaxis_transform(),
                       ha="center", fontsize=7)
        else:
            e = np.array([np.max(np.abs(x)) * 1e3 if x.size else np.nan for x in err])
            a.set_ylabel("max |q_d - q| [mrad]")
            a.plot(self.st_t, e, lw=1)

        a = ax[2]
        shade(a)
        tc = np.array([r[0] for r in self.cmd_log]) - self.t0
        cmd = np.array([r[2] for r in self.cmd_log])
        for k, n in enumerate(self.model.joint_names):
            a.plot(tc, cmd[:, k], lw=1, label=n)
        a.set_ylabel("commanded effort [N m]")
        a.set_xlabel("time [s]")
        a.legend(ncol=4, fontsize=7)

        latency_histogram(ax[3], self.lat)
        path = self.out_dir / f"demo_{self.controller}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


LATENCY_CLIP_MS = 10.0


def latency_histogram(a, lat_ms, clip_ms=LATENCY_CLIP_MS):
    """The latency histogram on the axes `a`: the axis runs 0..clip_ms whatever the tail (a loaded
    run's p99 of 100 ms would squash the histogram into a line at zero); samples beyond it are counted
    in the last bin; the p50 and p99 are drawn where they fall on the axis and their values are in
    the legend (with "off the axis" beyond it).  NaN samples (no command seen) are left out."""
    lat = np.asarray(lat_ms, dtype=float)
    lat = lat[np.isfinite(lat)]
    if lat.size:
        a.hist(np.clip(lat, 0.0, clip_ms), bins=100, range=(0.0, clip_ms), color="#4477aa")
        for q, color in ((50, "k"), (99, "r")):
            v = float(np.percentile(lat, q))
            off = v > clip_ms
            a.axvline(min(v, clip_ms), color=color, ls=":" if off else "--", lw=1,
                      label=f"p{q} {v:.2f} ms" + (" (off the axis)" if off else ""))
        a.legend()
    a.set_xlim(0.0, clip_ms)
    a.set_xlabel(f"joint state -> command, seen by a third node [ms] (clipped at {clip_ms:g}: "
                 "the last bin holds the slower ones)")
    a.set_ylabel("count")


def run_demo(robot="panda", controller="cartesian_impedance", out_dir="out", plot=True, rt="auto", rate=RATE):
    log_dir = Path(out_dir) / "logs"
    demo = Demo(robot, controller, out_dir, log_dir, rt=rt, rate=rate)
    demo.run()
    demo.analyse()
    demo.print_summary()
    if plot:
        path = demo.plot()
        print(f"  plot      {path}")
    return demo


def main(argv=None):
    from .description import CONTROLLERS, LAUNCH_ROBOTS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--summary", action="store_true", help="print the dynamics summary and self-check only")
    ap.add_argument("--robot", default=None,
                    help=f"--summary: one of {sorted(ROBOTS)}; demo: one of {sorted(LAUNCH_ROBOTS)} (default panda)")
    ap.add_argument("--urdf", help="--summary: a URDF file instead of --robot")
    ap.add_argument("--controller", default="cartesian_impedance", choices=CONTROLLERS)
    ap.add_argument("--out", default=os.environ.get("ROBOT_DYNAMICS_OUT", "out"),
                    help="folder for the plot and the node logs (default out/)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--rt", choices=("auto", "on", "off"), default="auto",
                    help="SCHED_FIFO for the sim and controller processes: auto (when permitted), on (required), off")
    ap.add_argument("--rate", type=float, default=RATE, help=f"joint-state and command rate [Hz] (default {RATE:.0f})")
    args = ap.parse_args(argv)
    if args.summary:
        model = Model.from_urdf_file(args.urdf) if args.urdf else Model.from_robot(args.robot or "panda")
        summary(model)
        return 0
    robot = args.robot or "panda"
    if robot not in LAUNCH_ROBOTS:
        ap.error(f"--robot for the demo: one of {sorted(LAUNCH_ROBOTS)}")
    run_demo(robot, args.controller, args.out, plot=not args.no_plot, rt=args.rt, rate=args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
