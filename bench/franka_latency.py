"""Franka bridge latency against franky-sim: from the robot state's time to the robot cycle in which
the torque computed from it is applied, in topic mode (bridge -> DDS -> controller_node -> DDS ->
bridge) and in in-process mode (the law runs in the robot's control callback); lost and late cycles.

    .venv/bin/python bench/franka_latency.py                     # both modes, 10 s of robot time each
    .venv/bin/python bench/franka_latency.py --modes topic --duration 20 --law joint_impedance

How: franky-sim (`franky-sim -s mujoco`, own loopback address) and, in topic mode, the controller node
run as child processes (own process groups, ended at exit); the bridge runs in this process with
record_latency on, so its per-command records are read directly.  Robot time is the state's `time`
(1 ms resolution, the simulator's clock).
- latency [cycles]: for each applied torque, (robot time of the first control-callback cycle after
  set_torque) - (robot time of the state it answers).  In-process: exact (the state of the callback
  that computed it).  Topic mode: the newest state the bridge had published when the command arrived
  (a lower bound when the controller answers an older one; `answered` = commands / states shows how
  many states got a command of their own).  1 = applied in the next robot cycle, the best possible
  with libfranka (the callback runs after the current cycle's command was sent).
- lost cycles: robot cycles missing between two control callbacks (time gaps > 1 ms), per 10 s of
  robot time; late: applied torques with latency > 1 cycle, per 10 s.
- callback cost [us]: the bridge's per-cycle work in the robot's control callback (state conversion,
  /joint_states, in_process: the loop's step and ~/commands), wall time (p50, p99) and the callback
  thread's CPU time (mean), timed around the arm's on_cycle (the same hook before and after issue 40's
  split of the bridge).
- sim rate: robot cycles per wall second (franky-sim paces itself at 1 kHz and falls behind when
  the host is loaded).
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


RT = {"bridge": 45, "sim": 42, "controller": 40}    # --rt: SCHED_FIFO priorities (as the tests use)


def start_sim(log_dir, address, rt=False):
    from robot_dynamics.realtime import fifo_preexec
    log = open(Path(log_dir) / f"franky_sim_{address}.log", "w")
    p = subprocess.Popen([str(Path(sys.executable).parent / "franky-sim"), "-s", "mujoco", "--hostname", address],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                         preexec_fn=fifo_preexec(RT["sim"]) if rt else None)
    t_end = time.monotonic() + 60
    while time.monotonic() < t_end:
        if "Connect to the server" in Path(log.name).read_text(errors="replace"):
            return p
        if p.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError("franky-sim did not start: " + Path(log.name).read_text()[-1000:])


def end(p):
    for sig, wait in ((signal.SIGINT, 5.0), (signal.SIGKILL, 2.0)):
        if p.poll() is not None:
            return
        try:
            os.killpg(p.pid, sig)
            p.wait(wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass


def run_mode(mode, law, duration, address, log_dir, rt=False):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from robot_dynamics.nodes.franka_bridge import FrankaBridge
    from robot_dynamics.nodes.processes import NodeProcesses, config_path

    procs = NodeProcesses(log_dir=log_dir)
    sim = start_sim(log_dir, address, rt)
    bridge = ex = th = None
    try:
        over = [Parameter("robot_ip", value=address), Parameter("realtime", value=False),
                Parameter("mode", value=mode), Parameter("record_latency", value=True),
                Parameter("publish_clock", value=True), Parameter("connect_timeout", value=30.0),
                # a latency run, not a watchdog test: a loaded host has DDS gaps over 0.1 s
                Parameter("command_timeout", value=2.0),
                # franky-sim shares the host: its stalls read as a silent bridge to franky's
                # wall-clock signal watchdog (0.05 s by default); see test/franka_harness.py
                Parameter("signal_timeout", value=1.0)]
        if rt:
            over += [Parameter("rt_sched_policy", value="fifo"), Parameter("rt_sched_priority", value=RT["bridge"])]
        import yaml
        law_params = {}
        if mode == "in_process":
            doc = yaml.safe_load(open(config_path(f"fr3_{law}.yaml")))
            law_params = doc["/**"]["ros__parameters"]
        from robot_dynamics.control.laws.base import flatten_params
        flat = flatten_params(law_params) if law_params else {}
        over += [Parameter(k, value=v) for k, v in flat.items() if k not in ("joints",)]
        bridge = FrankaBridge(parameter_overrides=over)
        cost = []                                 # (wall, thread CPU) of each control callback [s]
        inner = bridge.arm.on_cycle

        def timed(state, t, inner=inner, pc=time.perf_counter, tt=time.thread_time):
            w0, c0 = pc(), tt()
            out = inner(state, t)
            cost.append((pc() - w0, tt() - c0))
            return out
        bridge.arm.on_cycle = timed
        ex = SingleThreadedExecutor()
        ex.add_node(bridge)
        th = threading.Thread(target=ex.spin, daemon=True)
        th.start()
        if mode == "topic":
            procs.start("robot_dynamics.nodes.controller", name="torque_controller",
                        params_files=[config_path(f"fr3_{law}.yaml")], params={"use_sim_time": True},
                        realtime={"policy": "fifo", "priority": RT["controller"]} if rt else None)
        t_end = time.monotonic() + 120
        while bridge.state_name != "running" and time.monotonic() < t_end:
            time.sleep(0.05)
        if bridge.state_name != "running":
            raise RuntimeError(f"bridge not running: {bridge.state_name}: {bridge.reason}\n"
                               + "\n".join(procs.log(p)[-1500:] for p in procs.procs))
        while bridge.robot.t_robot is None:
            time.sleep(0.01)
        t0 = bridge.robot.t_robot + 1.0                 # skip the start ramp
        while bridge.robot.t_robot < t0:
            time.sleep(0.01)
        bridge.robot.latency.clear()
        cost.clear()
        lost0, cyc0, cmd0 = bridge.robot.arm.n_lost, bridge.robot.arm.n_cycles, bridge.robot.n_commands
        w0 = time.monotonic()
        while bridge.robot.t_robot < t0 + duration:
            time.sleep(0.05)
        wall = time.monotonic() - w0
        lat = np.array([(b - a) for a, b in list(bridge.robot.latency)]) * 1000.0
        cycles = bridge.robot.arm.n_cycles - cyc0
        lost = bridge.robot.arm.n_lost - lost0
        commands = (bridge.robot.n_commands - cmd0) if mode == "topic" else len(lat)
        cost = np.array(list(cost)) * 1e6
        return {"mode": mode, "law": law, "n": len(lat), "lat": lat, "cost": cost, "cycles": cycles, "lost": lost,
                "wall": wall, "robot_s": duration, "answered": commands / max(1, cycles),
                "superseded": bridge.robot.n_superseded}
    finally:
        if ex is not None:
            ex.shutdown(timeout_sec=1.0)
        if bridge is not None:
            bridge.destroy_node()
        procs.stop_all()
        end(sim)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="topic,in_process")
    ap.add_argument("--law", default="joint_impedance")
    ap.add_argument("--duration", type=float, default=10.0, help="robot seconds per mode")
    ap.add_argument("--rt", action="store_true", help="bridge (this process), franky-sim and controller under "
                                                      "SCHED_FIFO 45 / 42 / 40 (where the OS permits)")
    a = ap.parse_args()
    import rclpy
    rclpy.init()
    log_dir = tempfile.mkdtemp(prefix="franka_latency_")
    rows = []
    try:
        for k, mode in enumerate(a.modes.split(",")):
            address = f"127.{int(os.environ['ROS_DOMAIN_ID']) % 250}.{200 + k}.{os.getpid() % 250}"
            try:
                rows.append(run_mode(mode, a.law, a.duration, address, log_dir, a.rt))
            except Exception as e:          # noqa: BLE001  (report and go on with the other mode)
                print(f"{mode}: {type(e).__name__}: {e}")
    finally:
        rclpy.try_shutdown()
    print(f"\nFranka bridge vs franky-sim, law {a.law}, {a.duration:g} s of robot time per mode, "
          f"{'SCHED_FIFO' if a.rt else 'normal scheduling'} (logs {log_dir})")
    print("| mode | applied | p50 [cycles] | p99 | p99.9 | max | late (>1 cycle) /10 s | lost cycles /10 s "
          "| answered | sim rate [Hz] | callback p50 [us] | p99 | CPU mean |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        lat = r["lat"]
        if len(lat) == 0:
            print(f"| {r['mode']} | 0 | - | - | - | - | - | {r['lost']} | - | {r['cycles'] / r['wall']:.0f} "
                  f"| {_cost(r['cost'])} |")
            continue
        per10 = 10.0 / r["robot_s"]
        p = np.percentile(lat, [50, 99, 99.9])
        print(f"| {r['mode']} | {r['n']} | {p[0]:.0f} | {p[1]:.0f} | {p[2]:.0f} | {lat.max():.0f} | "
              f"{np.sum(lat > 1.5) * per10:.0f} | {r['lost'] * per10:.0f} | {100 * r['answered']:.1f} % | "
              f"{r['cycles'] / r['wall']:.0f} | {_cost(r['cost'])} |")


def _cost(c):
    if len(c) == 0:
        return "- | - | -"
    p = np.percentile(c[:, 0], [50, 99])
    return f"{p[0]:.0f} | {p[1]:.0f} | {c[:, 1].mean():.0f}"


if __name__ == "__main__":
    main()
    # end at once, as the nodes do (nodes/runner.py): interpreter finalisation with franky's and DDS's
    # threads alive can hang, and with --rt this process's threads are SCHED_FIFO 45
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
