"""Controller and robot on two "hosts": two network namespaces joined by a veth pair (test/netns.py),
the MuJoCo sim node in namespace b (the robot), the controller (gravity compensation, Panda) in
namespace a, DDS over the link.  One run goes through every fault in turn on the same pair of nodes:

    baseline | loss 1 % a->b | loss 1 % b->a | loss 10 % a->b | loss 10 % b->a | bursts 10/100 a->b |
    bursts 10/100 b->a | tbf 1 Mbit/s a->b | tbf 1 Mbit/s b->a | clear | partition 200 ms | recovery

(a->b carries the commands, b->a the joint states).  A recorder in each namespace (SCHED_FIFO 60 where
permitted) logs arrival times (CLOCK_MONOTONIC, shared by the namespaces) and contents of the
commands; the one in a also logs the joint states the controller gets and its ~/state (a safe command
carries no reference: NaN).  The nodes run under the real-time option (FIFO 50 where permitted).

Invariants, with limits taken from the parameters this test sets (not read from the node):
  * every command received on either side is finite, has 7 entries and |tau_i| <= effort_scale *
    effort_limits_i;
  * the commands as published never change faster than torque_rate_limit: |tau(t2) - tau(t1)| <=
    R (t2 - t1 + ALLOW_STAMP) for every pair, on the controller's publish times (~/state: its stamp, and
    its effort = the command bit for bit; the stamps are checked against the recorder's arrival
    times: never later than the arrival, never decreasing), so no jump at start-up, in any fault, on
    the watchdog or on resume.  The recorder's own arrival times are not used for this: on a loaded
    machine its receive backlog compressed 1 kHz commands to 3 kHz for 90 ms;
  * partition: the first safe command is published within watchdog_timeout (+ the node's check period,
    watchdog_timeout / 2, + ALLOW) after the last joint state the controller's host received, nothing
    but safe commands from then on (once a state delivered late inside the controller has had that
    bound to arrive) until the link is up, and control resumes (non-safe commands) afterwards;
  * every process ends on SIGINT (no SIGTERM/SIGKILL needed), no process is left in the namespaces,
    and the namespaces and the veth are gone afterwards.
Delay and jitter need tc netem, which this kernel does not have: that case runs only where it exists.
No timed assertions: the bounds are the invariants above; figures are in bench/two_hosts.py.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import netns  # noqa: E402

ROOT = HERE.parent
JOINTS = [f"panda_joint{i}" for i in range(1, 8)]
EFFORT_LIMITS = [87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0]     # Panda datasheet
EFFORT_SCALE = 0.5
RATE = 100.0                  # torque_rate_limit [N m/s]
WATCHDOG = 0.05               # watchdog_timeout [s]
ALLOW = 0.05                  # scheduling allowance [s] of the watchdog bound (the node's timer on a loaded box)
ALLOW_STAMP = 0.01            # [s] between the node's clock read (the stamp) and its rate limiter's dt
PHASE = 1.5                   # seconds per fault phase
PARTITION = 0.2

# the nodes run under the real-time option (SCHED_FIFO 50 where permitted, as on a real cell; refused:
# reported in their log, and they run as before), the recorders at FIFO 60: the scheduling allowance
# then covers a loaded CI machine
RT = [sys.executable, "-m", "robot_dynamics.realtime", "--policy", "fifo", "--priority", "50", "-m"]
CONTROLLER = "robot_dynamics.nodes.controller"

WHY = netns.why_unavailable()
pytestmark = [pytest.mark.system,
              pytest.mark.skipif(WHY is not None, reason=f"network namespaces cannot be made here: {WHY}")]


def _params():
    p = {"controller": "gravity_compensation", "robot": "panda", "joints": "[" + ",".join(JOINTS) + "]",
         "watchdog_timeout": WATCHDOG, "effort_limits": "[" + ",".join(map(str, EFFORT_LIMITS)) + "]",
         "effort_scale": EFFORT_SCALE, "torque_rate_limit": RATE, "ramp_time": 0.5}
    out = []
    for k, v in p.items():
        out += ["-p", f"{k}:={v}"]
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Start the nodes in the two namespaces, go through the faults, stop everything; the recorded data
    (logs and recordings stay in pytest's temporary folder, which pytest prunes)."""
    domain = int(os.environ.get("ROS_DOMAIN_ID", "17"))
    tmp = tmp_path_factory.mktemp("two_hosts")
    res = {"phases": [], "skipped": [], "stopped": {}, "tmp": tmp}
    py = sys.executable
    with netns.TwoHosts() as net:
        res["net"] = net
        env = net.env(domain_id=domain)
        rec_a = net.start("a", [py, str(HERE / "netns.py"), "record", str(tmp / "rec_a.npz"), "--state-topic",
                                "/torque_controller/state"], tmp / "rec_a.log", env)
        rec_b = net.start("b", [py, str(HERE / "netns.py"), "record", str(tmp / "rec_b.npz")], tmp / "rec_b.log", env)
        sim = net.start("b", RT + ["robot_dynamics.nodes.sim_node", "--ros-args", "-p", "robot:=panda",
                                   "-p", "joints:=[" + ",".join(JOINTS) + "]"], tmp / "sim.log", env, cwd=str(ROOT))
        ctl = net.start("a", RT + [CONTROLLER, "--ros-args"] + _params(), tmp / "controller.log", env, cwd=str(ROOT))
        procs = {"recorder_a": rec_a, "recorder_b": rec_b, "sim": sim, "controller": ctl}
        # wait until both recorders get non-zero commands (discovery over the veth and in the
        # controller's namespace, autostart, start ramp)
        def ready():
            return all(netns.progress(str(tmp / f"rec_{s}.npz"))[1] >= 150 for s in ("a", "b"))

        t_end = time.monotonic() + 120
        while time.monotonic() < t_end:
            if ready() or any(p.poll() is not None for p in procs.values()):
                break
            time.sleep(0.2)
        dead = [n for n, p in procs.items() if p.poll() is not None]
        if not ready() or dead:
            logs = "\n".join(f"--- {n}\n" + p.log_path.read_text(errors="replace")[-1500:] for n, p in procs.items())
            pytest.fail(f"no control over the veth link within 120 s (dead: {dead}); "
                        f"recorder b progress {netns.progress(str(tmp / 'rec_b.npz'))}\n{logs}")
        time.sleep(1.0)                  # the ramp_time start ramp is over

        def phase(label, setup):
            try:
                setup()
            except netns.NetnsUnavailable as e:
                res["skipped"].append((label, str(e)))
                return
            t0 = time.monotonic()
            time.sleep(PHASE)
            res["phases"].append((label, t0, time.monotonic()))
            net.clear_faults()

        phase("baseline", lambda: None)
        for pct in (1, 10):
            for side in ("a", "b"):
                phase(f"loss {pct}% {side}->", lambda s=side, x=pct: net.loss(s, x))
        for side in ("a", "b"):
            phase(f"bursts 10/100 {side}->", lambda s=side: net.burst(s, 10, 100))
        for side in ("a", "b"):
            phase(f"tbf 1mbit {side}->", lambda s=side: net.rate_cap(s, "1mbit"))
        phase("delay 2 ms +- 1 ms a->", lambda: net.delay("a", 2, 1))
        time.sleep(1.0)
        res["partition"] = net.partition(PARTITION)
        time.sleep(3.0)                  # recovery: the start ramp after the watchdog (ramp_time 0.5 s)
        res["t_end"] = time.monotonic()
        for name in ("controller", "sim", "recorder_a", "recorder_b"):
            res["stopped"][name] = net.stop(procs[name])
        res["left_in_ns"] = {s: netns._run(["ip", "netns", "pids", net.ns[s]], check=False).stdout.split()
                             for s in ("a", "b")}
        res["logs"] = {n: p.log_path.read_text(errors="replace") for n, p in procs.items()}
    res["after_close"] = net.exists()
    for side in ("a", "b"):
        f = tmp / f"rec_{side}.npz"
        assert f.exists(), f"recorder {side} wrote nothing:\n" + res["logs"][f"recorder_{side}"][-2000:]
        d = np.load(f)
        res[side] = {k: d[k] for k in d.files}
    return res


def _limits():
    return EFFORT_SCALE * np.asarray(EFFORT_LIMITS)


def test_every_command_finite_and_within_effort_limits(run):
    lim = _limits()
    for side in ("a", "b"):
        C = run[side]["cmd"]
        assert len(C) > 1000, f"recorder {side}: only {len(C)} commands"
        assert C.shape[1] == 7, C.shape
        assert np.all(np.isfinite(C)), f"{side}: non-finite command"
        over = np.abs(C) > lim + 1e-9
        assert not over.any(), f"{side}: {int(over.sum())} entries beyond effort_scale*effort_limits, " \
                               f"max |tau| {np.abs(C).max(axis=0)}"


def _max_rate_excess(t, C, rate):
    """max over pairs i < j, joints k of |C[j,k] - C[i,k]| - rate (t_j - t_i), in O(n) per joint."""
    worst = -np.inf
    for k in range(C.shape[1]):
        for sgn in (1.0, -1.0):
            u = sgn * C[:, k] - rate * t
            run_min = np.minimum.accumulate(u)
            worst = max(worst, float(np.max(u[1:] - run_min[:-1])))
    return worst


def _states(run):
    """The controller's ~/state as recorded in namespace a: (stamp [s, wall clock], arrival [s, wall
    clock], effort rows, safe flags), for the messages that carry a full effort vector."""
    a = run["a"]
    ok = a["st_eff_ok"]
    return a["st_stamp"][ok] / 1e9, a["st_wall"][ok] / 1e9, a["st_eff"], a["st_safe"][ok]


def test_published_commands_respect_the_torque_rate_limit_through_all_faults(run):
    """On the controller's own publish times (~/state's stamp; its effort is the command bit for bit):
    the recorder's arrival times carry its own receive delay, which on a loaded machine reached
    150 ms (a backlog received at 3 kHz), far above what a rate check can allow."""
    stamp, arrival, E, _ = _states(run)
    assert len(E) > 1000, f"only {len(E)} ~/state messages recorded"
    # the stamps are publish times: never decreasing, never later than the arrival (1 ms clock slack)
    assert np.all(np.diff(stamp) >= 0), "~/state stamps go backwards"
    assert np.all(stamp <= arrival + 1e-3), f"~/state stamped {np.max(stamp - arrival):.4f} s after it arrived"
    excess = _max_rate_excess(stamp, E, RATE)
    assert excess <= RATE * ALLOW_STAMP, \
        f"a command changed by {excess + RATE * ALLOW_STAMP:.3f} N m more than torque_rate_limit x (dt + " \
        f"{ALLOW_STAMP} s) allows ({RATE * ALLOW_STAMP:.2f} N m): a torque jump"
    # the commands the robot's side got are among those (the state describes the command stream)
    sent = {row.tobytes() for row in E}
    got = run["b"]["cmd"]
    frac = np.mean([row.tobytes() in sent for row in got])
    assert frac > 0.5, f"only {100 * frac:.1f} % of the commands received in b match a ~/state effort"
    # the stream covers every phase (the controller kept publishing through the faults)
    t = run["a"]["cmd_t"] / 1e9
    for label, t0, t1 in run["phases"]:
        assert np.any((t >= t0) & (t < t1)), f"no command published during {label}"


def test_partition_watchdog_gives_the_safe_command_and_control_resumes(run):
    a = run["a"]
    t_down, t_up = run["partition"]                 # monotonic; the link is down over [t_down, t_up]
    off = a["wall_minus_mono_ns"] / 1e9             # monotonic -> wall clock
    js_t = a["js_t"] / 1e9
    # the gap in the joint states the controller's host received, around the partition
    gaps = np.diff(js_t)
    over = (js_t[1:] > t_down) & (js_t[:-1] < t_up)
    assert np.any(over), "no joint state gap around the partition"
    k = int(np.argmax(np.where(over, gaps, -1.0)))
    t_last, t_back = js_t[k], js_t[k + 1]
    assert t_back - t_last >= PARTITION / 2, \
        f"joint states kept arriving while the link was down (longest gap {1e3 * (t_back - t_last):.0f} ms): " \
        "DDS not over the veth?"
    stamp, _, E, safe = _states(run)
    after = stamp > t_last + off
    assert np.any(safe & after & (stamp < t_up + off)), "no safe command while the joint states were cut off"
    t_safe = stamp[safe & after][0]
    bound = WATCHDOG + WATCHDOG / 2 + ALLOW
    assert t_safe - (t_last + off) <= bound, \
        f"first safe command {1e3 * (t_safe - t_last - off):.1f} ms after the last joint state (bound {1e3 * bound:.0f} ms)"
    # from the first safe command until the link is up, nothing but safe commands -- once every joint
    # state sent before the link went down has had the watchdog bound to reach the controller: the
    # watchdog judges arrival (the controller's clock), so a state its DDS stack delivered late (taken
    # after the trip: seen once in a CI run, on a loaded machine) rightly resumes control for a step
    # before the next trip.  Which states came late cannot be told from here (the recorder's host got
    # them on time), hence the window after the last one the recorder got.
    late = max(t_last, t_down) + off + bound
    cut = (stamp >= max(t_safe, late)) & (stamp < t_up + off)
    bad = stamp[cut & ~safe]
    assert bad.size == 0, \
        f"a non-safe command while the joint states were cut off: {bad.size} at " \
        f"{np.round(1e3 * (bad[:5] - t_last - off), 1)} ms after the last joint state (link down " \
        f"{1e3 * (t_down - t_last):.1f} ms, up {1e3 * (t_up - t_last):.1f} ms after it)"
    early = stamp[(stamp >= t_safe) & (stamp < late) & ~safe]
    if early.size:
        print(f"partition: {early.size} control step(s) on a joint state delivered late, "
              f"{np.round(1e3 * (early[:5] - t_last - off), 1)} ms after the last one this host got")
    # control resumes once the link is back, and the robot side gets commands again
    assert np.any(~safe & (stamp > t_up + off)), "control did not resume after the partition"
    tb = run["b"]["cmd_t"] / 1e9
    assert np.any(tb > t_up), "no command reached the robot after the partition"


def test_loss_and_burst_faults_ran(run):
    """The nftables phases ran (or the reason they could not: CI installs nftables)."""
    labels = [p[0] for p in run["phases"]]
    missing = [s for s in run["skipped"] if not s[0].startswith("delay")]
    if missing:
        pytest.skip(f"fault phases not run: {missing}")
    assert sum(lb.startswith("loss") for lb in labels) == 4 and sum(lb.startswith("bursts") for lb in labels) == 2


def test_delay_and_jitter_where_netem_exists(run):
    skipped = [s for s in run["skipped"] if s[0].startswith("delay")]
    if skipped:
        pytest.skip(skipped[0][1])
    assert any(p[0].startswith("delay") for p in run["phases"])


def test_no_process_hangs_or_leaks(run):
    for name, (ended, secs) in run["stopped"].items():
        assert ended in ("exited", "SIGINT"), f"{name} needed {ended} to stop:\n{run['logs'][name][-1500:]}"
    assert run["left_in_ns"] == {"a": [], "b": []}, f"processes left in the namespaces: {run['left_in_ns']}"
    assert run["after_close"] == ([], []), f"namespaces / veth left behind: {run['after_close']}"


# ------------------------------------------------------------------------------------------------
# Lockstep ping-pong over a lossy link, the controller against the echo in the same run (issue 45).
# The driver (bench/pingpong.py's driver role) in namespace a sends one joint state, waits for its
# answer, gives up after GIVE_UP and sends the next; 10 % of a's packets are dropped.  The node in b
# (the echo, then the controller with gravity compensation), both with the controller's default input
# QoS (best_effort, depth 1).  The controller's watchdog_timeout equals the give-up: every state
# dropped on the wire trips its watchdog (the safe command), and the next state, fresh, must be
# answered (the law restarts after the trip), as the echo answers it.  What this catches: the next
# state answered with the safe command instead whenever the control thread's watchdog wake-up had
# not run yet when that state was taken (the step saw two steps more than watchdog_timeout apart):
# two states lost for one dropped, on a loaded host often.  Judged against the echo in the same run,
# on counts, never on a time.
PP_STATES = 1000
PP_LOSS = 10                   # % of namespace a's packets dropped
GIVE_UP = 0.1                  # s: the driver's give-up = the controller's watchdog_timeout (its default)


@pytest.fixture(scope="module")
def pingpong(tmp_path_factory):
    if not netns.nft_available():
        pytest.skip("nftables `nft` not installed (Debian: apt-get install -y nftables)")
    sys.path.insert(0, str(ROOT / "bench"))
    import json

    import pingpong as pp
    domain = int(os.environ.get("ROS_DOMAIN_ID", "17"))
    tmp = tmp_path_factory.mktemp("pingpong")
    res = {}
    for kind in ("echo", "controller"):
        out = tmp / f"{kind}.json"
        with netns.TwoHosts() as net:
            env = net.env(domain_id=domain)
            node = net.start("b", pp.node_cmd(kind, ("best_effort", 1), GIVE_UP), tmp / f"{kind}.node.log", env,
                             cwd=str(ROOT))
            net.loss("a", PP_LOSS)
            drv = net.start("a", [sys.executable, str(ROOT / "bench" / "pingpong.py"), "--role", "driver", "--out",
                                  str(out), "--kind", kind, "--rel", "best_effort", "--depth", "1", "--states",
                                  str(PP_STATES), "--timeout", str(GIVE_UP), "--discovery-timeout", "90"],
                            tmp / f"{kind}.driver.log", env, cwd=str(ROOT))
            try:                         # the driver ends by itself (discovery, warm-up, the states);
                drv.wait(90 + PP_STATES * (GIVE_UP + 0.05) + 120)     # a hang guard, not a measure
            except subprocess.TimeoutExpired:
                pass
            stopped = {"driver": net.stop(drv), "node": net.stop(node)}
        logs = {n: (tmp / f"{kind}.{n}.log").read_text(errors="replace")[-2000:] for n in ("node", "driver")}
        assert out.exists(), f"{kind}: the driver wrote nothing\n{logs}"
        r = json.loads(out.read_text())
        assert r["status"] == "ok", f"{kind}: no answers over the link ({r['status']})\n{logs}"
        r["stopped"], r["logs"] = stopped, logs
        res[kind] = r
    return res


def _after_given_up(r):
    """(states given up right after a given-up state, states right after a given-up state)."""
    lost = set(r["lost_idx"])
    nxt = [k + 1 in lost for k in lost if k + 1 < PP_STATES]
    return sum(nxt), len(nxt)


def test_lockstep_loss_the_controller_answers_the_state_after_a_drop_as_the_echo_does(pingpong):
    e, c = pingpong["echo"], pingpong["controller"]
    (e2, e1), (c2, c1) = _after_given_up(e), _after_given_up(c)
    summary = (f"given up: controller {c['lost']}, echo {e['lost']} of {PP_STATES}; right after a given-up "
               f"state: controller {c2} of {c1}, echo {e2} of {e1}")
    print(summary)
    assert e["lost"] > 0 and c["lost"] > 0, f"no state was given up: is the loss on the link? {summary}"
    # a drop on the wire (or a late answer) is independent of the one before it, for the echo; the
    # controller may lose the state after a drop only as often, not once per drop
    assert c2 / max(c1, 1) <= e2 / max(e1, 1) + 0.15, \
        f"the controller gave up the state after a given-up one far more often than the echo: {summary}"
    assert c["lost"] <= 1.25 * e["lost"] + 20, f"the controller lost far more states than the echo: {summary}"
    for kind in ("echo", "controller"):
        for name, (ended, _) in pingpong[kind]["stopped"].items():
            assert ended in ("exited", "SIGINT"), f"{kind} {name} needed {ended}:\n{pingpong[kind]['logs'][name]}"
