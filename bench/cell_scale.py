"""How many 1 kHz arms one host carries: the cell sim node (sim_node with `arms`) + one controller node
per arm, N = 1, 2, 3, 4, every arm's joint states at 1 kHz.

    .venv/bin/python bench/cell_scale.py                          # N = 1..4, 10 s each, 1 round
    .venv/bin/python bench/cell_scale.py --arms 1,2 --duration 20 --rounds 2 --law gravity_compensation

Processes as a user runs them (launch/cell.launch.py's arrangement, without launch): the sim with
`arms` (no table or box: the arms alone; integrator implicitfast as config/cell_panda_sim.yaml),
and per arm a controller_node named torque_controller in the arm's namespace with
config/panda_<law>.yaml + config/cell_panda_controller.yaml (relative topics), joint_impedance
holding the start pose by default.  Every node runs with the default (non real-time) scheduling.

What is measured, over a window after every controller is active and a warm-up:
  answered   share of the joint states the sim published for an arm that got a command from that
             arm's controller before the sim's next state (timed in the sim: its `stats_file`)
  latency    command receipt in the sim - publish time of that arm's newest state before it (p50, p99)
             (the round trip: DDS to the controller, its step, DDS back, the sim's wake-up)
  CPU / arm  (sim CPU + all controllers' CPU) / N, from /proc over the window, in % of one core; the sim
             and the mean controller separately too
  max |q-q0| max over the window and arms of max_j |q_j - q_j(start)| (holding: the gravity model is
             exact and the reference still, so a late or lost command repeats the same one: only an
             arm that falls or is knocked shows here)
  track err  with --track A: joint 1 of every arm follows a 0.5 Hz (1 - cos) wave of amplitude A
             (a JointTrajectory to each controller, wall-clock stamped); error = q1 at each state
             published - the reference at the wall time of that publish (RMS and max over arms)
  sim Hz     joint states per second per arm (1000 when the sim keeps up)
The host's load (1-minute average) is printed before each run: other work on the 2 cores counts.
No assertions: it measures and prints.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import _ros_proc as rp  # noqa: E402
import latency as lt  # noqa: E402


def arm_names(n):
    return ["left", "right"] if n == 2 else [f"arm{i + 1}" for i in range(n)]


class _Procs:
    """The cell's processes: in the root namespace (NodeProcesses), or with `net` (test/netns.py
    TwoHosts) the sim in namespace a and the controllers in namespace b."""

    def __init__(self, env, log_dir, net=None):
        from robot_dynamics.nodes.processes import NodeProcesses
        self.net, self.log_dir = net, Path(log_dir)
        self.np = None if net else NodeProcesses(log_dir=log_dir, env=env)
        self.env = env
        self.procs = []

    def start(self, side, module, name, params=None, params_files=(), remaps=None):
        if self.net is None:
            p = self.np.start(module, name=name, params=params, params_files=params_files, remaps=remaps)
        else:
            from robot_dynamics.nodes.processes import params_file
            cmd = [sys.executable, "-m", module, "--ros-args", "-r", f"__node:={name}"]
            for k, v in (remaps or {}).items():
                cmd += ["-r", f"{k}:={v}"]
            for f in params_files:
                cmd += ["--params-file", str(f)]
            if params:
                cmd += ["--params-file", params_file(name, params, self.log_dir)]
            p = self.net.start(side, cmd, self.log_dir / f"{name}_{len(self.procs)}.log", env=self.env)
        self.procs.append(p)
        return p

    @staticmethod
    def log(p):
        try:
            p.log_file.flush()
        except (OSError, ValueError):
            pass
        return Path(p.log_path).read_text(errors="replace")

    def stop_all(self):
        if self.net is None:
            self.np.stop_all()
        else:
            for p in list(self.procs):
                self.net.stop(p)


TRACK_F = 0.5          # Hz of the --track reference: joint 1 at q0 + A (1 - cos(2 pi f t)) / 2


def send_tracks(names, amplitude, seconds, env):
    """One JointTrajectory to each arm's controller (~/joint_trajectory): joint 1 of the Panda's ready
    pose moving by amplitude (1 - cos(2 pi f t)) / 2, points every 10 ms with their velocities, from
    a stamp 1 s ahead of the publish (wall clock, the controllers' clock).  Returns (stamp, reference(t) -> q1)."""
    os.environ.update({k: env[k] for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE") if k in env})
    import rclpy
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
    from robot_dynamics.nodes.sim_node import HOME
    if not rclpy.ok():
        rclpy.init()
    node = rclpy.create_node("cell_scale_tracks")
    q0 = np.array(HOME["panda"])
    w = 2 * np.pi * TRACK_F
    msg = JointTrajectory()
    msg.joint_names = [f"panda_joint{i}" for i in range(1, 8)]
    for t in np.arange(0.0, seconds, 0.01):
        pt = JointTrajectoryPoint()
        q = q0.copy()
        q[0] += amplitude * (1 - np.cos(w * t)) / 2
        v = np.zeros(7)
        v[0] = amplitude * w * np.sin(w * t) / 2
        pt.positions, pt.velocities = q.tolist(), v.tolist()
        pt.time_from_start.sec, pt.time_from_start.nanosec = int(t), int(round((t - int(t)) * 1e9))
        msg.points.append(pt)
    pubs = [node.create_publisher(JointTrajectory, f"/{ns}/torque_controller/joint_trajectory", 10) for ns in names]
    rp.wait_until(lambda: all(p.get_subscription_count() > 0 for p in pubs), 20.0)
    # stamped once the controllers are matched (discovery took > 1 s for a first cell: a trajectory
    # arriving after its stamp started late, a 0.1 s lag)
    stamp = time.time() + 1.0
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp * 1e9), 1_000_000_000)
    for p in pubs:
        p.publish(msg)
    time.sleep(0.3)                      # (delivered: reliable; the node then goes)
    node.destroy_node()
    ref = lambda t: q0[0] + amplitude * (1 - np.cos(w * np.clip(t - stamp, 0.0, None))) / 2   # noqa: E731
    return stamp, ref


def run_cell(n, law, duration, warmup, env, log_dir, net=None, track=0.0):
    """One cell of n arms (with `net`: the sim on host a, the controllers on host b); returns a dict of
    the figures (or status)."""
    names = arm_names(n)
    stats = Path(log_dir) / f"cell{n}_{time.monotonic_ns()}.npz"
    cfg = ROOT / "config"
    procs = _Procs(env, log_dir, net)
    try:
        sim = procs.start("a", "robot_dynamics.nodes.sim_node", "mujoco_sim",
                          params={"arms": names, "box": False, "table": False, "integrator": "implicitfast",
                                  "publish_rate": 1000.0, "stats_file": str(stats)})
        ctls = [procs.start("b", "robot_dynamics.nodes.controller", "torque_controller",
                            remaps={"__ns": f"/{ns}"},
                            params_files=[cfg / f"panda_{law}.yaml", cfg / "cell_panda_controller.yaml"])
                for ns in names]
        ok = rp.wait_until(lambda: all(f"active: {law}" in procs.log(c) for c in ctls)
                           and "simulating a cell" in procs.log(sim), 120.0)
        if not ok or any(p.poll() is not None for p in procs.procs):
            return {"status": "did not start", "log": "".join(procs.log(p)[-1500:] for p in procs.procs)}
        ref = None
        if track:
            stamp, ref = send_tracks(names, track, warmup + duration + 3.0, env)
            time.sleep(max(0.0, stamp - time.time()))
        time.sleep(warmup)
        load = os.getloadavg()[0]
        c0 = [rp.cpu_seconds(p.pid) for p in [sim, *ctls]]
        t0 = time.monotonic()
        time.sleep(duration)
        t1 = time.monotonic()
        c1 = [rp.cpu_seconds(p.pid) for p in [sim, *ctls]]
    finally:
        procs.stop_all()                # SIGINT: the sim writes its stats_file on the way out
    if not stats.is_file():
        return {"status": "no stats file"}
    d = np.load(stats)
    cpu = [(b - a) / (t1 - t0) * 100 for a, b in zip(c0, c1)]
    answered, lat, err, hz, trk = [], [], [], [], []
    for ns in names:
        pub_t, ans = d[f"{ns}.pub_t"], d[f"{ns}.answered"]
        w = (pub_t >= t0) & (pub_t < t1)
        answered.append(float(ans[w].mean()) if w.any() else 0.0)
        hz.append(w.sum() / (t1 - t0))
        err.append(float(d[f"{ns}.err"][w].max()) if w.any() else float("nan"))
        if ref is not None and w.any():
            trk.append(d[f"{ns}.q"][w, 0] - ref(d[f"{ns}.wall"][w]))
            e = trk[-1]
            # (per arm, and the lag that best explains the error: a shifted start shows as a lag)
            lags = np.arange(-0.2, 0.2, 0.001)
            best = lags[np.argmin([np.sqrt(np.mean((d[f"{ns}.q"][w, 0] - ref(d[f"{ns}.wall"][w] - L)) ** 2))
                                   for L in lags])]
            print(f"    {ns}: track err RMS {1e3 * np.sqrt(np.mean(e ** 2)):.2f} mrad, best-fit lag {1e3 * best:.0f} ms",
                  flush=True)
        cw = (d[f"{ns}.cmd_t"] >= t0) & (d[f"{ns}.cmd_t"] < t1)
        lat.append(d[f"{ns}.lat"][cw])
    stats.unlink()
    all_lat = np.concatenate(lat) * 1e3 if lat else np.zeros(0)
    return {"status": "ok", "load": load, "answered_min": min(answered), "answered_mean": float(np.mean(answered)),
            "p50": float(np.percentile(all_lat, 50)) if all_lat.size else float("nan"),
            "p99": float(np.percentile(all_lat, 99)) if all_lat.size else float("nan"),
            "cpu_arm": sum(cpu) / n, "cpu_sim": cpu[0], "cpu_ctl": float(np.mean(cpu[1:])),
            "err": max(err), "hz": min(hz),
            "trk_rms": float(np.sqrt(np.mean(np.concatenate(trk) ** 2))) if trk else float("nan"),
            "trk_max": float(np.max(np.abs(np.concatenate(trk)))) if trk else float("nan")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arms", default="1,2,3,4")
    ap.add_argument("--law", default="joint_impedance")
    ap.add_argument("--duration", type=float, default=10.0, help="recorded seconds per cell")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=1, help="the N's interleaved, round by round")
    ap.add_argument("--track", type=float, default=0.0,
                    help="rad: every arm's joint 1 follows q0 + A (1 - cos(2 pi 0.5 Hz t)) / 2 (a "
                         "JointTrajectory to each controller; one host only); 0: the arms hold")
    ap.add_argument("--hosts", default="one", choices=("one", "two", "both"),
                    help="two: the sim on one host and the controllers on another (network namespaces "
                         "joined by a veth pair, test/netns.py; needs root), both: the two tables")
    a = ap.parse_args(argv)
    ns_list = [int(x) for x in a.arms.split(",") if x]
    rp.install_handlers()
    env = rp.bench_env()
    log_dir = tempfile.mkdtemp(prefix="cell_scale_")
    print("robot_dynamics cell scale (bench/cell_scale.py)")
    print(f"  date {time.strftime('%Y-%m-%d %H:%M:%S')}  cpus {os.cpu_count()}  load {os.getloadavg()[0]:.2f}; "
          f"law {a.law}, {a.duration:g} s per cell, {a.rounds} round(s); logs {log_dir}")
    for hosts in (["one", "two"] if a.hosts == "both" else [a.hosts]):
        if hosts == "one":
            table(a, ns_list, env, log_dir, None, "this host")
        else:
            sys.path.insert(0, str(ROOT / "test"))
            import netns
            with netns.TwoHosts() as net:
                table(a, ns_list, net.env(domain_id=env["ROS_DOMAIN_ID"]), log_dir, net,
                      "two hosts: sim in netns a, controllers in netns b, over a veth pair")
    return 0


def table(a, ns_list, env, log_dir, net, where):
    res = {n: [] for n in ns_list}
    for r in range(a.rounds):
        for n in ns_list:
            out = run_cell(n, a.law, a.duration, a.warmup, env, log_dir, net, 0.0 if net else a.track)
            if out["status"] != "ok":
                print(f"  N={n} round {r + 1}: {out['status']}\n{out.get('log', '')}", flush=True)
            else:
                print(f"  N={n} round {r + 1}: load {out['load']:.2f}, answered min {100 * out['answered_min']:.1f} %, "
                      f"p50 {out['p50']:.2f} ms, p99 {out['p99']:.2f} ms, CPU/arm {out['cpu_arm']:.0f} %", flush=True)
            res[n].append(out)
    rows = []
    for n in ns_list:
        ok = [o for o in res[n] if o["status"] == "ok"]
        if not ok:
            rows.append([n, "failed"] + ["-"] * 11)
            continue
        med = lambda k: statistics.median(o[k] for o in ok)   # noqa: E731
        rows.append([n, f"{med('load'):.1f}", f"{100 * med('answered_min'):.1f}", f"{100 * med('answered_mean'):.1f}",
                     f"{med('p50'):.2f}", f"{med('p99'):.2f}", f"{med('cpu_arm'):.0f}", f"{med('cpu_sim'):.0f}",
                     f"{med('cpu_ctl'):.0f}", f"{1e3 * med('err'):.2f}", f"{med('hz'):.0f}",
                     f"{1e3 * med('trk_rms'):.2f}", f"{1e3 * med('trk_max'):.2f}"])
    lt.table(f"Cell of N Pandas, {where} (sim node + N controller nodes, {a.law}), medians over rounds",
             ["N", "load", "answered % (worst arm)", "answered % (mean)", "latency p50 ms", "latency p99 ms",
              "CPU/arm %", "sim CPU %", "controller CPU %", "max |q - q0| mrad", "states/s/arm",
              "track err RMS mrad", "track err max mrad"], rows)


if __name__ == "__main__":
    sys.exit(main())
