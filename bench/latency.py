"""End-to-end latency, sustained rate, executor/QoS choice and per-cycle cost of the torque controller.

    .venv/bin/python bench/latency.py              # full run (60 s per rate and node; ~15 min)
    .venv/bin/python bench/latency.py --quick      # short durations, for iteration (~4 min)
    .venv/bin/python bench/latency.py --sections matrix --matrix-duration 20 --executors single,events

Sections (--sections, comma separated; default all):
  compute   per-cycle law.compute() + SafetyFilter.apply() in-process (no DDS), several robots
  latency   driver -> node -> driver over real DDS at 1 kHz: echo node (the floor) and the controller
            with each law; p50/p99/p99.9/max and the ratio to the echo floor, percentile by percentile
  sustained the same at 500 Hz and 1 kHz: fraction of cycles answered later than one period (or never),
            longest gap between replies (the 1 kHz rows are the latency runs)
  matrix    each executor the installed rclpy offers x QoS (reliable/10, reliable/1, best_effort/1, and
            best_effort/1 in > reliable/1 out as the controller has it), echo node; the controller
            (gravity_compensation) single vs --multi-threaded (and its QoS/executor parameters once it has them)
  profile   the controller node's joint-state callback called in-process (pyinstrument if installed,
            else cProfile), and py-spy on the running node process if py-spy is installed

How a run works.  Each node under test and the driver are separate processes
(`[sys.executable, ...]`, own process group, killed at the end), on a private ROS_DOMAIN_ID (random in
101..200) with localhost-only discovery.  The driver:
  1. sync: pings (one message in flight) until 30 in a row are answered within 100 ms (this waits
     for discovery and for the lifecycle node's autostart), then waits 1 s for stragglers while it
     measures the node's idle CPU;
  2. publishes sensor_msgs/JointState for the Panda (panda_joint1..7, a 0.5 Hz, 0.05 rad sine on
     joints 1-6 with matching velocities) on absolute wall-clock deadlines t0 + k * period (a late
     slot is sent at once; a slot more than one period late is skipped and counted), warm-up 1 s,
     then the recorded window;
  3. timestamps each send and each reply with time.perf_counter_ns in its own process (replies are
     taken by a thread that waits on the reply subscriptions itself, control_path.TakeAll: no
     executor, so the driver's own receive path takes little of the CPU the node under test needs).
Matching a reply to its message:
  * echo node: exact.  Joint 7's position carries the sequence number k as q7 = q7_0 + k * 1e-10 rad
    (at most 1e-4 rad over a run, harmless for a controller); the echo node returns the positions, and
    the driver looks the returned double up among the sent ones.  The header stamp also carries k.
  * controller: Float64MultiArray has no header, so the driver also subscribes the node's ~/state
    (published right after each command): its effort field is the command bit for bit, and its
    position/velocity (the law's reference/error) give back the input: joint laws q7 = reference -
    error (exact) -> k; cartesian_impedance p(q) = p_d - error -> compared with the forward kinematics
    of the candidate inputs.  Command -> state by content -> k: exact, and robust to losses on either
    stream ("state 100.00%" = share of commands matched).  All-zero commands are the controller's safe
    command (watchdog, start ramp) and are counted as "safe", not as answers.  --state-topic '' falls
    back to matching in order (FIFO), exact only without losses; "fifo ok" shows how often FIFO would
    have agreed with the exact matching.
Latency = receive time of the reply - send time, so it includes both DDS hops, the node's executor
and callback, and the driver's receive path.  No assertions: this script only measures and prints.
"""
import argparse
import json
import re
import math
import os
import platform
import subprocess
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

PANDA_JOINTS = [f"panda_joint{i}" for i in range(1, 8)]
Q0 = [0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398]
AMP, FREQ = 0.05, 0.5              # rad, Hz on joints 1-6
KEY_STEP = 1e-10                   # rad per sequence number on joint 7
LAWS = ("gravity_compensation", "computed_torque", "cartesian_impedance")
# (input reliability, input depth, output reliability, output depth) of the node under test; the driver
# mirrors them (its publisher = the node's input QoS; its subscription = the node's output reliability,
# depth 100 so the driver's own queue never drops)
QOS_SETS = (("reliable", 10, "reliable", 10), ("reliable", 1, "reliable", 1),
            ("best_effort", 1, "best_effort", 1), ("best_effort", 1, "reliable", 1))
# what controller_node.py hard-codes today (QOS_SENSOR for /joint_states, QOS_COMMAND for the command)
CONTROLLER_QOS = ("best_effort", 1, "reliable", 1)


def qos_label(q):
    return f"{q[0]}/{q[1]}" if (q[0], q[1]) == (q[2], q[3]) else f"{q[0]}/{q[1]}>{q[2]}/{q[3]}"


def parse_qos(text):
    """'reliable:10' or 'best_effort:1,reliable:1' (input, output)."""
    parts = [x.split(":") for x in text.split(",")]
    if len(parts) == 1:
        parts = parts * 2
    return (parts[0][0], int(parts[0][1]), parts[1][0], int(parts[1][1]))
CONTROLLER_MODULE = "robot_dynamics.nodes.controller"
ECHO_MODULE = "robot_dynamics.nodes.echo_node"
IN_TOPIC, OUT_TOPIC = "/joint_states", "/effort_controller/commands"


# ================================================================================================
# driver (runs in its own process: latency.py --role driver ...)
# ================================================================================================
def sent_keys(n):
    return Q0[6] + np.arange(n, dtype=np.float64) * KEY_STEP


def run_driver(a):
    import threading

    import rclpy
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from robot_dynamics.nodes.control_path import TakeAll, TakeSubscription
    from robot_dynamics.nodes.echo_node import make_qos

    meta = {"status": "ok"}
    P = int(round(1e9 / a.rate))
    W = int(round(a.rate * a.warmup))
    N = int(round(a.rate * a.duration))
    total = W + N
    cap = total + 100000
    recv_t = np.zeros(cap, np.int64)
    recv_key = np.full(cap, np.nan)
    recv_zero = np.zeros(cap, bool)
    recv_data = np.full((cap if a.state_topic else 1, 7), np.nan)
    cnt = [0]
    ev = threading.Event()

    rclpy.init()
    node = Node("latency_driver")
    q = parse_qos(a.qos)
    pub = node.create_publisher(JointState, IN_TOPIC, make_qos(q[0], q[1]))

    def on_reply(msg):
        t = time.perf_counter_ns()
        i = cnt[0]
        if i < cap:
            recv_t[i] = t
            d = msg.data
            recv_key[i] = d[-1] if len(d) else math.nan
            recv_zero[i] = not any(d)
            if a.state_topic and len(d) == 7:
                recv_data[i] = d
        cnt[0] = i + 1
        ev.set()

    # the replies (and ~/state) taken on a thread of their own (control_path.TakeAll), not through an
    # executor: at 1 kHz per topic an executor costs the driver most of a core, which on 2 cores it
    # takes from the node under test
    takes = [(TakeSubscription(node, Float64MultiArray, OUT_TOPIC, make_qos(q[2], 100)), on_reply)]

    # the controller's ~/state (one per control step, published right after the command, reliable):
    # position/velocity = the law's reference/error, from which the analysis recovers the input's seq
    s_pos = np.full((cap if a.state_topic else 1, 7), np.nan)
    s_vel = np.zeros((cap if a.state_topic else 1, 7))
    s_eff = np.full((cap if a.state_topic else 1, 7), np.nan)
    scnt = [0]
    sev = threading.Event()

    def on_state(msg):
        p, v = msg.position, msg.velocity
        if len(p) == 0:                  # safe command: no reference
            return
        i = scnt[0]
        if i < cap:
            s_pos[i, :min(7, len(p))] = p[:7]
            s_vel[i, :min(7, len(v))] = v[:7]
            e = msg.effort
            s_eff[i, :min(7, len(e))] = e[:7]
        scnt[0] = i + 1
        sev.set()

    if a.state_topic:
        takes.append((TakeSubscription(node, JointState, a.state_topic, make_qos("reliable", 100)), on_state))
    rx = TakeAll(node, takes, name="driver_rx").start()

    msg = JointState()
    msg.name = list(PANDA_JOINTS)
    w = 2 * math.pi * FREQ
    keys = sent_keys(total)

    def fill(k, t, key):
        s, c = math.sin(w * t), math.cos(w * t)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(k, 1_000_000_000) if k >= 0 else (0, 0)
        msg.position = [Q0[0] + AMP * s, Q0[1] + AMP * s, Q0[2] + AMP * s, Q0[3] + AMP * s,
                        Q0[4] + AMP * s, Q0[5] + AMP * s, key]
        msg.velocity = [AMP * w * c] * 6 + [0.0]
        msg.effort = []

    # ---- 1. sync: one message in flight until n_ping consecutive answers within 100 ms
    t_first = None
    t_start = time.monotonic()
    sync_cpu0 = rp.cpu_seconds(a.node_pid)
    consecutive, ping_lat, k = 0, [], 0
    while consecutive < a.n_ping and time.monotonic() - t_start < a.discovery_timeout:
        k += 1
        sev.clear()
        s0 = scnt[0]
        fill(-1, 0.0, Q0[6] - k * KEY_STEP)
        ev.clear()
        c0 = cnt[0]
        ts = time.perf_counter_ns()
        pub.publish(msg)
        got = ev.wait(0.1 if t_first is not None else 0.25)
        # an all-zero reply is the controller's safe command (watchdog / start ramp), not an answer
        if got and cnt[0] > c0 and not recv_zero[min(cnt[0], cap) - 1]:
            if t_first is None:
                t_first = time.monotonic() - t_start
                consecutive = 0
            else:
                consecutive += 1
                ping_lat.append((recv_t[min(cnt[0], cap) - 1] - ts) / 1e3)
            # streams aligned at the boundary: wait for this ping's ~/state too
            if a.state_topic and scnt[0] == s0 and not sev.wait(0.1):
                consecutive = 0
        else:
            consecutive = 0
    meta["first_reply_s"] = t_first
    meta["sync_node_cpu"] = 100 * (rp.cpu_seconds(a.node_pid) - sync_cpu0) / (time.monotonic() - t_start)
    meta["ping_us"] = ping_lat[-a.n_ping:]
    if t_first is None or consecutive < a.n_ping:
        meta["status"] = "no_delivery" if t_first is None else "unstable"
        meta["sync_replies"] = cnt[0]
    else:
        # ---- 2. rate phase on absolute deadlines, right after the last answered ping (nothing is
        # outstanding; a pause here would trip the controller's watchdog)
        n0, sn0 = cnt[0], scnt[0]
        send_t = np.zeros(total, np.int64)
        skipped = 0
        t0 = time.perf_counter_ns() + 2_000_000
        cpu_rec0 = cpu_drv0 = wall_rec0 = None
        for k in range(total):
            dl = t0 + k * P
            rem = dl - time.perf_counter_ns()
            if rem > 0:
                time.sleep(rem * 1e-9)
            elif -rem > P:
                skipped += (k >= W)
                continue
            fill(k, k / a.rate, float(keys[k]))
            if k >= W and wall_rec0 is None:
                cpu_rec0, cpu_drv0, wall_rec0 = rp.cpu_seconds(a.node_pid), time.process_time(), time.monotonic()
            ts = time.perf_counter_ns()
            pub.publish(msg)
            send_t[k] = ts
        wall = time.monotonic() - wall_rec0
        meta["node_cpu"] = 100 * (rp.cpu_seconds(a.node_pid) - cpu_rec0) / wall
        meta["driver_cpu"] = 100 * (time.process_time() - cpu_drv0) / wall
        time.sleep(1.0)                                    # drain
        n1, sn1 = min(cnt[0], cap), min(scnt[0], cap)
        cpu0, w0 = rp.cpu_seconds(a.node_pid), time.monotonic()
        time.sleep(1.0)                                    # node CPU with no input
        meta["node_idle_cpu"] = 100 * (rp.cpu_seconds(a.node_pid) - cpu0) / (time.monotonic() - w0)
        meta.update(skipped=int(skipped), W=W, N=N, P=P, rate=a.rate, n_recv=int(n1 - n0), overflow=int(cnt[0] > cap))
        np.savez(a.out + ".npz", send_t=send_t, recv_t=recv_t[n0:n1], recv_key=recv_key[n0:n1],
                 recv_zero=recv_zero[n0:n1], keys=keys,
                 s_pos=s_pos[sn0:sn1], s_vel=s_vel[sn0:sn1], s_eff=s_eff[sn0:sn1],
                 recv_data=recv_data[n0:n1] if a.state_topic else recv_data[:0])
    rx.destroy()
    node.destroy_node()
    rclpy.try_shutdown()
    Path(a.out + ".json").write_text(json.dumps(meta))
    return 0


# ================================================================================================
# analysis
# ================================================================================================
def decode_states(meta, data, law):
    """Sequence number of the input behind each ~/state message (-1: not recovered).
    Joint laws: position = reference, velocity = error = reference - q, so q7 = position - velocity
    (exact in floating point here) and seq = (q7 - q7_0) / KEY_STEP.  cartesian_impedance: position[:3]
    = p_d, velocity[:3] = p_d - p(q): p(q) is compared with the forward kinematics of the candidate
    inputs after the previous match (neighbours differ by ~1e-4 m, the match by ~1e-15 m)."""
    s_pos, s_vel, keys, send_t = data["s_pos"], data["s_vel"], data["keys"], data["send_t"]
    n, total = len(s_pos), len(keys)
    seq = np.full(n, -1, np.int64)
    if law != "cartesian_impedance":
        x = (s_pos[:, 6] - np.nan_to_num(s_vel[:, 6]) - Q0[6]) / KEY_STEP
        r = np.round(np.nan_to_num(x, nan=-1.0))
        ok = (np.abs(x - r) < 0.01) & (r >= 0) & (r < total)
        seq[ok] = r[ok].astype(np.int64)
        return seq
    import pinocchio as pin

    from robot_dynamics.dynamics import Model, PinocchioBackend
    model = Model.from_robot("panda")
    dyn = PinocchioBackend(model)
    fid = dyn.pm.getFrameId(model.frame_names[-1])
    rate = meta["rate"]
    w = 2 * math.pi * FREQ
    q = np.array(Q0)

    def fk(i):
        s_ = math.sin(w * i / rate)
        q[:6] = [Q0[j] + AMP * s_ for j in range(6)]
        q[6] = keys[i]
        pin.forwardKinematics(dyn.pm, dyn.data, q)
        return pin.updateFramePlacement(dyn.pm, dyn.data, fid).translation

    last = -1
    for j in range(n):
        p = s_pos[j, :3] - s_vel[j, :3]
        for i in range(last + 1, min(total, last + 400)):
            if send_t[i] > 0 and np.max(np.abs(fk(i) - p)) < 1e-9:
                seq[j] = last = i
                break
    return seq


def analyse(meta, data, exact, law=None):
    """Match replies to sends and compute the statistics of the recorded window."""
    send_t, recv_t, recv_key, keys = data["send_t"], data["recv_t"], data["recv_key"], data["keys"]
    zero = data["recv_zero"]
    r = {"safe": int(np.sum(zero))}
    recv_data = data["recv_data"] if "recv_data" in data else None
    if not exact:                        # all-zero = the controller's safe command, not an answer
        recv_t, recv_key = recv_t[~zero], recv_key[~zero]
        if recv_data is not None and len(recv_data) == len(zero):
            recv_data = recv_data[~zero]
    W, P = meta["W"], meta["P"]
    total = len(send_t)
    sent = np.flatnonzero(send_t > 0)

    def fifo():
        m = np.full(total, -1, np.int64)
        n = min(len(sent), len(recv_t))
        m[sent[:n]] = recv_t[:n]
        return m

    if exact:
        kmap = {float(x): i for i, x in enumerate(keys)}
        matched = np.full(total, -1, np.int64)
        unmatched = dup = 0
        for t, key in zip(recv_t.tolist(), recv_key.tolist()):
            i = kmap.get(key)
            if i is None:
                unmatched += 1
            elif matched[i] >= 0:
                dup += 1
            else:
                matched[i] = t
        f = fifo()
        rec = sent[sent >= W]
        r["fifo_ok"] = float(np.mean(f[rec] == matched[rec])) if len(rec) else math.nan
        r["unmatched"], r["dup"] = unmatched, dup
        r["matching"] = "exact"
    elif law and len(data["s_pos"]):
        # ~/state carries the command it went with (effort = the commanded torque, bit for bit) and
        # the input's seq (decoded from reference/error): command -> state by content -> seq
        fin = np.isfinite(data["s_pos"][:, 0])          # safe-command states carry no reference
        data = dict(data, s_pos=data["s_pos"][fin], s_vel=data["s_vel"][fin], s_eff=data["s_eff"][fin])
        sq = decode_states(meta, data, law)
        lookup = {}
        for row, q_ in zip(data["s_eff"], sq.tolist()):
            if q_ >= 0:
                lookup.setdefault(row.tobytes(), []).append(q_)
        matched = np.full(total, -1, np.int64)
        n_ok = 0
        for t, row in zip(recv_t.tolist(), recv_data):
            lst = lookup.get(row.tobytes())
            if lst:
                q_ = lst.pop(0)
                if matched[q_] < 0:
                    matched[q_] = t
                    n_ok += 1
        r["matching"] = "state"
        r["decoded"] = n_ok / len(recv_t) if len(recv_t) else math.nan
        r["stream_diff"] = int(len(recv_t) - len(sq))
        f = fifo()
        rec = sent[sent >= W]
        r["fifo_ok"] = float(np.mean(f[rec] == matched[rec])) if len(rec) else math.nan
    else:
        matched = fifo()
        r["matching"] = "fifo"
    rec = sent[sent >= W]
    got = matched[rec] >= 0
    lat = (matched[rec][got] - send_t[rec][got]) / 1e3          # us
    r["n_sent"], r["n_recv_total"] = int(len(rec)), int(meta["n_recv"])
    r["lost"] = int(np.sum(~got))
    if r["matching"] == "fifo" and len(recv_t) < len(sent):
        r["lost"] = int(len(sent) - len(recv_t))     # FIFO cannot tell which ones
    if len(lat):
        r["p50"], r["p99"], r["p999"] = (float(x) for x in np.percentile(lat, [50, 99, 99.9]))
        r["max"], r["mean"] = float(lat.max()), float(lat.mean())
    else:
        r.update(p50=math.nan, p99=math.nan, p999=math.nan, max=math.nan, mean=math.nan)
    r["late_frac"] = (float(np.sum(lat > P / 1e3)) + r["lost"]) / max(1, len(rec))
    # replies received while recording (first recorded send .. last send + 5 periods): longest gap.
    # Later replies are the controller's watchdog answering the end of the stream, not a stall.
    if len(rec):
        t_a, t_b = send_t[rec[0]], send_t[rec[-1]] + 5 * P
        rt = np.sort(recv_t[(recv_t >= t_a) & (recv_t <= t_b)])
        r["max_gap_ms"] = float(np.max(np.diff(rt)) / 1e6) if len(rt) > 1 else math.nan
        jit = (send_t[rec] - (send_t[sent[0]] + (rec - sent[0]) * P)) / 1e3
        r["send_jitter_p99"] = float(np.percentile(jit - jit.min(), 99))
    else:
        r["max_gap_ms"] = r["send_jitter_p99"] = math.nan
    return r


# ================================================================================================
# orchestration
# ================================================================================================
def node_cmd(kind, law, executor, qos, extra_params):
    if kind == "echo":
        cmd = [sys.executable, "-m", ECHO_MODULE, "--ros-args"]
        params = {"executor": executor, "qos_reliability": qos[0], "qos_depth": qos[1],
                  "output_qos_reliability": qos[2], "output_qos_depth": qos[3]}
        params.update(extra_params or {})
    else:
        cmd = [sys.executable, "-m", CONTROLLER_MODULE] + (["--multi-threaded"] if executor == "multi" else []) \
            + ["--ros-args"]
        params = {"controller": law, "robot": "panda", "joints": "[" + ",".join(PANDA_JOINTS) + "]"}
        params.update(extra_params)
    for k, v in params.items():
        cmd += ["-p", f"{k}:={v}"]
    return cmd


def controller_options():
    """Which of the optional parameters the controller node declares (read from its source)."""
    src = ROOT / "robot_dynamics" / "nodes" / "controller" / "params.py"
    if not src.exists():
        return None
    text = src.read_text()
    return {k for k in ("executor", "qos_reliability", "qos_depth", "output_qos_reliability", "output_qos_depth")
            if f'"{k}"' in text or f"'{k}'" in text}


def run_one(cfg, args, env, tmp, log, start_node=None, start_driver=None, stop=None, wrap=None, during=None):
    """cfg: dict(kind, law, rate, duration, executor, qos, extra).  Returns a result dict.
    Hooks for bench/load.py and bench/two_hosts.py: start_node / start_driver(cmd, env, log_path) ->
    Popen (default: rp.start; e.g. in a network namespace), stop(p) -> how it ended (default rp.stop),
    wrap(cmd, role) -> cmd (e.g. under the real-time option), during(node, driver) called once both
    run (e.g. a fault thread); its return value, if any, is stored under 'during'."""
    start_node, start_driver = start_node or rp.start, start_driver or rp.start
    stop = stop or rp.stop
    wrap = wrap or (lambda cmd, role: cmd)
    tag = f"{cfg['kind']}_{cfg.get('law') or ''}_{cfg['executor']}_{qos_label(cfg['qos']).replace('/', '')}_{cfg['rate']:g}"
    tag += cfg.get("tag_extra", "")
    res = dict(cfg, tag=tag, load1=os.getloadavg()[0])
    node = start_node(wrap(node_cmd(cfg["kind"], cfg.get("law"), cfg["executor"], cfg["qos"], cfg.get("extra", {})),
                           "node"), env, tmp / f"{tag}.node.log")
    out = str(tmp / tag)
    res["out"], res["node_log"] = out, str(node.log_path)
    drv = None
    disc = min(args.discovery_timeout, 10.0) if cfg["kind"] == "echo" else args.discovery_timeout
    try:
        drv = start_driver(wrap([sys.executable, str(Path(__file__).resolve()), "--role", "driver", "--out", out,
                        "--rate", str(cfg["rate"]), "--duration", str(cfg["duration"]),
                        "--warmup", str(args.warmup), "--node-pid", str(node.pid),
                        "--qos", f"{cfg['qos'][0]}:{cfg['qos'][1]},{cfg['qos'][2]}:{cfg['qos'][3]}",
                        "--discovery-timeout", str(disc)]
                       + ["--state-topic", args.state_topic if cfg["kind"] == "controller" else ""], "driver"),
                       env, tmp / f"{tag}.driver.log")
        if during is not None:
            res["during"] = during(node, drv)
        limit = args.discovery_timeout + args.warmup + cfg["duration"] + 30
        try:
            drv.wait(limit)
        except subprocess.TimeoutExpired:
            res["status"] = "driver timeout"
        node_alive = node.poll() is None
    finally:
        if drv is not None:
            stop(drv)
        res["stop"] = stop(node)
    if "status" in res:
        return res
    try:
        meta = json.loads(Path(out + ".json").read_text())
    except (OSError, ValueError):
        res["status"] = "driver failed"
        log(f"  driver log: {drv.log_path.read_text(errors='replace')[-1500:]}")
        return res
    res.update({k: meta.get(k) for k in ("status", "first_reply_s", "node_cpu", "driver_cpu", "node_idle_cpu",
                                         "skipped", "sync_node_cpu")})
    res["ping_p50"] = float(np.median(meta["ping_us"])) if meta.get("ping_us") else math.nan
    if not node_alive:
        res["status"] = "node died"
    if meta["status"] == "ok":
        d = np.load(out + ".npz")
        res.update(analyse(meta, d, exact=cfg["kind"] == "echo", law=cfg.get("law")))
    else:
        tail = node.log_path.read_text(errors="replace")[-800:]
        log(f"  {tag}: {meta['status']} (node log tail:)\n" + "\n".join("    " + x for x in tail.splitlines()))
    return res


# ---------------------------------------------------------------------------------------------- tables
def fmt(x, spec="{:.0f}"):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return spec.format(x)


def table(title, header, rows):
    w = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(header)]
    out = [f"\n{title}", "  ".join(str(h).rjust(w[i]) for i, h in enumerate(header)),
           "  ".join("-" * x for x in w)]
    for r in rows:
        out.append("  ".join(str(c).rjust(w[i]) for i, c in enumerate(r)))
    print("\n".join(out), flush=True)


def label(r):
    return "echo" if r["kind"] == "echo" else r["law"]


def lat_row(r):
    return [label(r), r.get("status", "?"), r.get("n_sent", "-"), r.get("lost", "-"), r.get("safe", "-"),
            fmt(r.get("p50")), fmt(r.get("p99")), fmt(r.get("p999")), fmt(r.get("max")),
            fmt(r.get("ping_p50")), fmt(r.get("node_cpu")), match_label(r),
            fmt(r.get("fifo_ok"), "{:.4f}") if r.get("matching") in ("exact", "state") else "-"]


def match_label(r):
    m = r.get("matching", "-")
    if m == "state":
        m += f" {100 * r['decoded']:.2f}%"
    return m


LAT_HDR = ["node", "status", "sent", "lost", "safe", "p50 us", "p99 us", "p99.9 us", "max us", "ping p50 us",
           "node CPU %", "match", "fifo ok"]


# ---------------------------------------------------------------------------------------------- compute
def section_compute(args):
    from robot_dynamics.control import SafetyFilter, State, make_law
    from robot_dynamics.dynamics import Model, PinocchioBackend
    robots = ["double_pendulum", "ur5", "panda", "talos_arm_torso", "talos_fixed"]
    n = 2000 if args.quick else 10000
    rows = []
    rng = np.random.default_rng(0)
    for name in robots:
        try:
            model = Model.from_robot(name)
        except Exception as e:  # noqa: BLE001
            rows.append([name, "-", f"load failed: {e}"[:60]])
            continue
        dyn = PinocchioBackend(model)
        nv = model.nv
        lo = np.where(np.isfinite(model.lower_limits), model.lower_limits, -1.0)
        hi = np.where(np.isfinite(model.upper_limits), model.upper_limits, 1.0)
        qs = lo + (hi - lo) * rng.uniform(0.3, 0.7, (64, nv))
        vs = rng.uniform(-0.5, 0.5, (64, nv))
        row = [name, nv]
        for law_name in LAWS:
            try:
                law = make_law(law_name, model, dyn, {})
                try:
                    sf = SafetyFilter(model)
                except ValueError:                 # URDF without effort limits (double_pendulum)
                    sf = SafetyFilter(model, {"effort_limits": 100.0})
                st = State(q=qs[0].copy(), v=vs[0].copy())
                law.reset(st)
                sf.reset()
                g = dyn.gravity(qs[0]).copy()
                ts = np.empty(n)
                for i in range(n + 200):
                    st.q, st.v = qs[i % 64], vs[i % 64]
                    t = time.perf_counter_ns()
                    tau = law.compute(st)
                    sf.apply(tau, st, 0.001, fallback=g)
                    if i >= 200:
                        ts[i - 200] = time.perf_counter_ns() - t
                row += [fmt(np.median(ts) / 1e3, "{:.1f}"), fmt(np.percentile(ts, 99) / 1e3, "{:.1f}")]
            except Exception as e:  # noqa: BLE001
                row += ["err", type(e).__name__ + ": " + str(e)[:40]]
        # the raw dynamics for reference
        t = time.perf_counter_ns()
        for i in range(n):
            dyn.gravity(qs[i % 64])
        row.append(fmt((time.perf_counter_ns() - t) / n / 1e3, "{:.1f}"))
        t = time.perf_counter_ns()
        for i in range(n):
            dyn.mass_matrix(qs[i % 64])
        row.append(fmt((time.perf_counter_ns() - t) / n / 1e3, "{:.1f}"))
        rows.append(row)
    hdr = ["robot", "nv"]
    for law_name in LAWS:
        short = {"gravity_compensation": "gc", "computed_torque": "ct", "cartesian_impedance": "ci"}[law_name]
        hdr += [f"{short} p50 us", f"{short} p99 us"]
    hdr += ["g(q) us", "M(q) us"]
    table(f"Per-cycle compute, in-process (law.compute + SafetyFilter.apply, Pinocchio backend, default "
          f"params, {n} cycles over 64 random states; gc = gravity_compensation, ct = computed_torque, "
          f"ci = cartesian_impedance; g(q), M(q) = PinocchioBackend.gravity / mass_matrix per call)", hdr, rows)


# ---------------------------------------------------------------------------------------------- profile
def section_profile(args, env, tmp, log):
    """In-process: build the controller node, call its /joint_states callback N times."""
    code = PROFILE_CHILD
    n = 3000 if args.quick else 20000
    for law in LAWS:
        p = rp.start([sys.executable, "-c", code, law, str(n)], env, tmp / f"profile_{law}.log")
        try:
            p.wait(180)
        except subprocess.TimeoutExpired:
            pass
        rp.stop(p)
        print(f"\nProfile of the controller node's joint-state callback, in-process ({law}, {n} calls):")
        print(p.log_path.read_text(errors="replace")[-6000:], flush=True)
    # py-spy on the running process (includes the executor and DDS receive path)
    pyspy = Path(sys.executable).parent / "py-spy"
    if not pyspy.exists():
        print("\n(py-spy not installed: skipped the out-of-process profile)")
        return
    law = "cartesian_impedance"
    cfg = dict(kind="controller", law=law, rate=1000, duration=10 if args.quick else 20, executor="single",
               qos=CONTROLLER_QOS, extra={})
    node = rp.start(node_cmd("controller", law, "single", CONTROLLER_QOS, {}), env, tmp / "pyspy.node.log")
    spy = None
    try:
        drv = rp.start([sys.executable, str(Path(__file__).resolve()), "--role", "driver", "--out",
                        str(tmp / "pyspy_drv"), "--rate", "1000", "--duration", str(cfg["duration"]),
                        "--qos", "best_effort:1,reliable:1", "--state-topic", args.state_topic,
                        "--warmup", "1", "--node-pid", str(node.pid), "--discovery-timeout",
                        str(args.discovery_timeout)], env, tmp / "pyspy.driver.log")
        # attach once the node answers (the driver's log is silent: wait for the node's 'active' line + sync)
        rp.wait_until(lambda: "active" in node.log_path.read_text(errors="replace"), 60, 0.2)
        time.sleep(3.0)
        spy_dur = max(3, int(cfg["duration"]) - 4)
        spy = rp.start([str(pyspy), "record", "--pid", str(node.pid), "-r", "1000", "-f", "raw", "-d", str(spy_dur),
                        "-o", str(tmp / "pyspy.txt")], env, tmp / "pyspy.log")
        try:
            spy.wait(spy_dur + 30)
        except subprocess.TimeoutExpired:
            pass
        try:
            drv.wait(args.discovery_timeout + cfg["duration"] + 30)
        except subprocess.TimeoutExpired:
            pass
        rp.stop(drv)
    finally:
        if spy is not None:
            rp.stop(spy)
        rp.stop(node)
    f = tmp / "pyspy.txt"
    if not f.exists():
        print("\npy-spy produced no output (ptrace not permitted?); log tail:\n"
              + (tmp / "pyspy.log").read_text(errors="replace")[-800:])
        return
    print_pyspy(f, law)


def print_pyspy(path, law):
    """Collapsed stacks -> self time and inclusive time per function, top 20."""
    self_t, incl, total = {}, {}, 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, cnt = line.rpartition(" ")
        try:
            c = int(cnt)
        except ValueError:
            continue
        total += c
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]     # per function, not per line
        for fr in set(frames):
            incl[fr] = incl.get(fr, 0) + c
        self_t[frames[-1]] = self_t.get(frames[-1], 0) + c
    rows = [[f"{100 * c / total:.1f}", f"{100 * incl[k] / total:.1f}", k[:110]]
            for k, c in sorted(self_t.items(), key=lambda kv: -kv[1])[:20]]
    table(f"py-spy on the running controller node ({law}, driven at 1 kHz, attached after start-up, "
          f"{total} samples of active (non-idle) stacks): top self time", ["self %", "incl %", "function (file)"], rows)
    rows = [[f"{100 * c / total:.1f}", k[:120]] for k, c in sorted(incl.items(), key=lambda kv: -kv[1])[:25]]
    table("py-spy: top inclusive time", ["incl %", "function"], rows)


PROFILE_CHILD = r'''
import sys, time, math
import numpy as np
import rclpy
from sensor_msgs.msg import JointState
law, n = sys.argv[1], int(sys.argv[2])
J = [f"panda_joint{i}" for i in range(1, 8)]
Q0 = [0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398]
rclpy.init(args=["x", "--ros-args", "-p", f"controller:={law}", "-p", "robot:=panda",
                 "-p", "joints:=[" + ",".join(J) + "]"])
from robot_dynamics.nodes.controller import TorqueControllerNode
node = TorqueControllerNode()
# spin until autostart has configured and activated it
t_end = time.monotonic() + 60
cbs = []
while time.monotonic() < t_end:
    rclpy.spin_once(node, timeout_sec=0.05)
    cbs = [s.callback for s in node.subscriptions if s.topic_name.endswith("joint_states")]
    if cbs and getattr(node, "lifecycle_state", "active") == "active":
        break
print("lifecycle state:", getattr(node, "lifecycle_state", "?"))
if not cbs:
    print("no /joint_states subscription found"); sys.exit(1)
cb = cbs[0]
msgs = []
for k in range(64):
    m = JointState(); m.name = list(J)
    s = math.sin(2 * math.pi * k / 64)
    m.position = [q + 0.05 * s for q in Q0]; m.velocity = [0.1 * s] * 7
    m.header.stamp.sec, m.header.stamp.nanosec = 0, k * 1000000
    msgs.append(m)
for i in range(500):
    cb(msgs[i % 64])
ts = np.empty(n)
for i in range(n):
    t = time.perf_counter_ns(); cb(msgs[i % 64]); ts[i] = time.perf_counter_ns() - t
print(f"callback (convert + law + safety filter + publish): p50 {np.median(ts)/1e3:.1f} us, "
      f"p99 {np.percentile(ts, 99)/1e3:.1f} us, mean {ts.mean()/1e3:.1f} us")
try:
    from pyinstrument import Profiler
    prof = Profiler(interval=0.0001)
    prof.start()
    for i in range(n):
        cb(msgs[i % 64])
    prof.stop()
    print(prof.output_text(unicode=False, color=False, show_all=False, short_mode=False)[:5000])
except ImportError:
    import cProfile, pstats, io
    pr = cProfile.Profile(); pr.enable()
    for i in range(n):
        cb(msgs[i % 64])
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15); print(s.getvalue())
node.destroy_node()
rclpy.try_shutdown()
'''


# ---------------------------------------------------------------------------------------------- main
def available_executors():
    out = ["single", "multi"]
    try:
        import importlib.util
        if importlib.util.find_spec("rclpy.experimental") is not None:
            out.append("events")
    except Exception:  # noqa: BLE001
        pass
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", default="bench", choices=["bench", "driver"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--node-pid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--rate", type=float, default=1000.0, help=argparse.SUPPRESS)
    ap.add_argument("--qos", default="reliable:10", help=argparse.SUPPRESS)
    ap.add_argument("--n-ping", type=int, default=30, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="short durations (iteration)")
    ap.add_argument("--duration", type=float, help="recorded seconds per latency/sustained run (default 60; "
                                                   "--quick 8)")
    ap.add_argument("--matrix-duration", type=float, help="recorded seconds per executor x QoS run "
                                                          "(default 15; --quick 5)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds at rate before recording")
    ap.add_argument("--discovery-timeout", type=float, default=30.0,
                    help="seconds to wait for the first reply (a node that delivers nothing is reported and killed)")
    ap.add_argument("--sections", default="compute,latency,sustained,matrix,profile")
    ap.add_argument("--laws", default=",".join(LAWS))
    ap.add_argument("--executors", default=None, help="for the matrix (default: all available)")
    ap.add_argument("--rates", default="500,1000", help="sustained-rate section rates (Hz)")
    ap.add_argument("--node-executor", default="single", help="echo node executor in latency/sustained runs")
    ap.add_argument("--controller-executor", default="",
                    help="controller executor in latency/sustained runs ('' = the node's own default; "
                         "the echo node keeps --node-executor, the floor)")
    ap.add_argument("--node-qos", default="controller",
                    help="echo node QoS in latency/sustained runs: 'controller' (what the controller node uses: "
                         "best_effort:1 in, reliable:1 out), or 'reliable:10', or 'best_effort:1,reliable:1'")
    ap.add_argument("--state-topic", default="/torque_controller/state",
                    help="controller runs: also subscribe this (the node's ~/state) to match replies exactly; "
                         "'' = match in order (FIFO)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder with logs and raw data")
    a = ap.parse_args(argv)
    if a.role == "driver":
        a.duration = a.duration if a.duration is not None else 10.0
        return run_driver(a)

    rp.install_handlers()
    dur = a.duration if a.duration is not None else (8.0 if a.quick else 60.0)
    mdur = a.matrix_duration if a.matrix_duration is not None else (5.0 if a.quick else 15.0)
    sections = set(a.sections.split(","))
    laws = [x for x in a.laws.split(",") if x]
    node_qos = CONTROLLER_QOS if a.node_qos == "controller" else parse_qos(a.node_qos)
    env = rp.bench_env()
    tmp = Path(tempfile.mkdtemp(prefix="rd_latency_"))

    def log(s):
        print(s, file=sys.stderr, flush=True)

    import importlib.metadata as md
    def ver(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return "?"
    load0 = os.getloadavg()
    print("robot_dynamics latency benchmark (bench/latency.py)")
    print(f"  date {time.strftime('%Y-%m-%d %H:%M:%S')}  host {platform.node()}  cpus {os.cpu_count()}  "
          f"load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    print(f"  python {platform.python_version()}  rclpy {ver('rclpy')}  rmw "
          f"{env.get('RMW_IMPLEMENTATION', 'default (rmw_fastrtps_cpp)')}  ROS_DOMAIN_ID {env['ROS_DOMAIN_ID']}  "
          f"discovery {env['ROS_AUTOMATIC_DISCOVERY_RANGE']}")
    print(f"  mode {'quick' if a.quick else 'full'}: latency/sustained {dur:g} s recorded per run, matrix "
          f"{mdur:g} s, warm-up {a.warmup:g} s; driver: a TakeAll receive thread, "
          f"absolute-deadline sleep loop; node executor {a.node_executor}, QoS (in>out) "
          f"{qos_label(node_qos)} (the driver mirrors the node's QoS)")
    print(f"  raw data and logs: {tmp}" + ("" if a.keep else " (deleted at the end; --keep to keep)"))
    copts = controller_options()
    if copts is None:
        print("  controller node: not found (robot_dynamics/nodes/controller/): controller rows skipped")
    else:
        print(f"  controller node options found: {sorted(copts) or 'none (executor/QoS fixed by the node)'}")

    def ctrl_qos(qos):
        return qos if copts and {"qos_reliability", "qos_depth"} <= copts else CONTROLLER_QOS

    def ctrl_extra(executor, qos):
        d = {}
        if copts and "executor" in copts:
            d["executor"] = executor
        if copts and "qos_reliability" in copts:
            d["qos_reliability"] = qos[0]
        if copts and "qos_depth" in copts:
            d["qos_depth"] = qos[1]
        if copts and "output_qos_reliability" in copts:
            d["output_qos_reliability"] = qos[2]
        if copts and "output_qos_depth" in copts:
            d["output_qos_depth"] = qos[3]
        return d

    results = []
    try:
        if "compute" in sections:
            try:
                section_compute(a)
            except ImportError as e:
                print(f"\n(compute section skipped: {e})")

        def node_runs(rate, duration):
            runs = [dict(kind="echo", law=None, rate=rate, duration=duration, executor=a.node_executor,
                         qos=node_qos)]
            if copts is not None:
                for law in laws:
                    extra = ctrl_extra(a.controller_executor or a.node_executor, node_qos)
                    if not a.controller_executor:
                        extra.pop("executor", None)          # the controller's own default
                    runs.append(dict(kind="controller", law=law, rate=rate, duration=duration,
                                     executor=a.controller_executor or "default", qos=ctrl_qos(node_qos),
                                     extra=extra))
            return runs

        lat = []
        if "latency" in sections or "sustained" in sections:
            for cfg in node_runs(1000, dur):
                log(f"run: {cfg['kind']} {cfg.get('law') or ''} 1000 Hz {dur:g} s")
                lat.append(run_one(cfg, a, env, tmp, log))
            results += lat
            ex_note = f"echo {a.node_executor}, controller {a.controller_executor or 'its default'}"
            table(f"End-to-end latency at 1 kHz ({dur:g} s recorded, executor {ex_note}, QoS in>out "
                  f"{qos_label(node_qos)}); latency = reply received - JointState sent, both in the driver process",
                  LAT_HDR, [lat_row(r) for r in lat])
            echo = next((r for r in lat if r["kind"] == "echo"), None)
            if echo and "p50" in echo:
                rows = []
                for r in lat:
                    if r["kind"] == "echo" or "p50" not in r:
                        continue
                    rows.append([label(r)] + [fmt(r[k] / echo[k], "{:.2f}") if echo[k] else "-"
                                              for k in ("p50", "p99", "p999", "max")]
                                + [fmt(r[k] - echo[k], "{:+.0f}") for k in ("p50", "p99")])
                table("Controller latency / echo-node latency (same run, same percentile)",
                      ["controller", "p50 x", "p99 x", "p99.9 x", "max x", "p50 +us", "p99 +us"], rows)

        if "sustained" in sections:
            sus = []
            for rate in [float(x) for x in a.rates.split(",")]:
                if rate == 1000 and lat:
                    sus += lat
                    continue
                for cfg in node_runs(rate, dur):
                    log(f"run: {cfg['kind']} {cfg.get('law') or ''} {rate:g} Hz {dur:g} s")
                    sus.append(run_one(cfg, a, env, tmp, log))
            results += [r for r in sus if r not in results]
            rows = [[label(r), f"{r['rate']:g}", r.get("status", "?"), r.get("n_sent", "-"), r.get("lost", "-"),
                     fmt(100 * r["late_frac"], "{:.3f}") if "late_frac" in r else "-",
                     fmt(r.get("max_gap_ms"), "{:.2f}"), fmt(1e3 / r["rate"], "{:.1f}"),
                     fmt(r.get("p999")), fmt(r.get("send_jitter_p99")), r.get("skipped", "-"),
                     fmt(r.get("node_cpu")), fmt(r.get("driver_cpu")), fmt(r.get("load1"), "{:.2f}")]
                    for r in sorted(sus, key=lambda r: (r["rate"], r["kind"] != "echo", r.get("law") or ""))]
            table(f"Sustained rate ({dur:g} s per run): late = answered later than one period or never",
                  ["node", "Hz", "status", "sent", "lost", "late %", "max gap ms", "period ms", "p99.9 us",
                   "send jitter p99 us", "skipped", "node CPU %", "driver CPU %", "load1"], rows)

        if "matrix" in sections:
            execs = a.executors.split(",") if a.executors else available_executors()
            mx = []
            kinds = [("echo", None)]
            if copts is not None:
                kinds.append(("controller", "gravity_compensation"))
            for kind, law in kinds:
                for ex in execs:
                    if kind == "controller" and ex == "events" and "executor" not in copts:
                        continue                 # the controller offers single (default) and --multi-threaded
                    for qos in (QOS_SETS if kind == "echo" or "qos_reliability" in copts else [CONTROLLER_QOS]):
                        cfg = dict(kind=kind, law=law, rate=1000, duration=mdur, executor=ex, qos=qos,
                                   extra=ctrl_extra(ex, qos) if kind == "controller" else {})
                        log(f"run: matrix {kind} {law or ''} {ex} {qos}")
                        mx.append(run_one(cfg, a, env, tmp, log))
            results += mx
            rows = [[label(r), r["executor"], qos_label(r["qos"]), r.get("status", "?"),
                     fmt(r.get("first_reply_s"), "{:.1f}"), r.get("n_sent", "-"), r.get("lost", "-"),
                     fmt(r.get("p50")), fmt(r.get("p99")), fmt(r.get("p999")), fmt(r.get("max")),
                     fmt(100 * r["late_frac"], "{:.3f}") if "late_frac" in r else "-",
                     fmt(r.get("max_gap_ms"), "{:.2f}"), fmt(r.get("node_cpu")),
                     fmt(r.get("node_idle_cpu")) if r.get("status") == "ok" else fmt(r.get("sync_node_cpu")),
                     r.get("stop", "-")] for r in mx]
            table(f"Executor x QoS at 1 kHz ({mdur:g} s recorded per run; 'first' = s to the first reply; "
                  "idle CPU = node CPU in the 1 s after the run with no input (no_delivery: during the wait for a reply); 'stopped by' = the signal that ended "
                  "the node: SIGINT first, SIGTERM after 3 s, SIGKILL after 2 s more)",
                  ["node", "executor", "qos in>out", "status", "first s", "sent", "lost", "p50 us", "p99 us",
                   "p99.9 us", "max us", "late %", "max gap ms", "node CPU %", "idle CPU %", "stopped by"], rows)

        if "profile" in sections:
            if copts is None:
                print("\n(profile skipped: no controller node yet)")
            else:
                section_profile(a, env, tmp, log)
    finally:
        rp.kill_all()
        load1 = os.getloadavg()
        print(f"\nload average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
        (tmp / "results.json").write_text(json.dumps(results, default=str, indent=1))
        if not a.keep:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
