"""Two "hosts" on one machine: two network namespaces joined by a veth pair, DDS over that link, and
faults injected on it (nftables loss, link down/up, tc tbf bandwidth cap).  Used by
test/test_two_hosts.py and bench/two_hosts.py.

    with TwoHosts() as net:                          # skip/raise NetnsUnavailable with the reason
        p = net.start("b", [sys.executable, "-m", "robot_dynamics.nodes.sim_node", ...], log_path)
        net.loss("a", 10)                            # drop 10 % of the packets leaving namespace a
        net.clear_faults()
        net.partition(0.2)                           # link down 200 ms, then up

Addresses: 10.231.0.1/24 (namespace a, veth end `rdA<tag>`) and 10.231.0.2/24 (namespace b), nothing
else; multicast is enabled on both veth ends and 224.0.0.0/4 routed there (DDS discovery).  The
processes get ROS_LOCALHOST_ONLY=0, ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET and
FASTDDS_BUILTIN_TRANSPORTS=UDPv4: without the last one Fast DDS would see the same host on both sides
and pass the data through shared memory (/dev/shm is not namespaced), so nothing would cross the veth.

Faults (per direction = on the egress of one namespace's veth end):
  loss(ns, pct)          nftables `numgen random mod 100 < pct drop` (random, independent per packet)
  burst(ns, n, every)    nftables `numgen inc mod every < n drop`: n consecutive packets of every `every`
  partition(seconds)     `ip link set ... down`, sleep, `up` (both directions)
  rate_cap(ns, rate)     tc tbf on that veth end (e.g. '2mbit')
  delay(ns, ms, jitter)  tc netem, only where the kernel has it (`netem_available()`); this machine's
                         kernel has no sch_netem, so delay and jitter are not injected here

Everything (processes, namespaces, veth, nftables tables) is torn down on exit, on failure too, and at
interpreter exit (atexit) if the context manager was never left.
"""
import atexit
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

ADDR = {"a": "10.231.0.1", "b": "10.231.0.2"}
NFT_TABLE = "rd_fault"


class NetnsUnavailable(RuntimeError):
    """Namespaces or the fault tools cannot be used here (the message says why)."""


def _run(cmd, check=True, timeout=10):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def why_unavailable():
    """None when two namespaces can be made here, else the reason (for a pytest skip)."""
    if os.geteuid() != 0:
        return "needs root (ip netns add / veth / nftables)"
    if shutil.which("ip") is None:
        return "iproute2 `ip` not installed"
    name = f"rdprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def nft_available():
    return shutil.which("nft") is not None


def netem_available():
    """True when the kernel has the netem qdisc (delay / jitter); tried on a throw-away dummy link."""
    name = f"rdnm{os.getpid() % 100000}"
    if subprocess.run(["ip", "link", "add", name, "type", "dummy"], capture_output=True).returncode != 0:
        return False
    try:
        return subprocess.run(["tc", "qdisc", "add", "dev", name, "root", "netem", "delay", "1ms"],
                              capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True)


_OPEN = []


def _atexit_teardown():
    for net in list(_OPEN):
        net.close()


atexit.register(_atexit_teardown)


class TwoHosts:
    def __init__(self, tag=None):
        tag = tag or f"{os.getpid() % 100000}"
        self.ns = {"a": f"rd13a_{tag}", "b": f"rd13b_{tag}"}
        self.dev = {"a": f"rdA{tag}"[:15], "b": f"rdB{tag}"[:15]}
        self.procs = []
        self.faults = []           # what is active now (for the bench tables)
        self._up = False

    # ---------------------------------------------------------------- set-up / tear-down
    def __enter__(self):
        why = why_unavailable()
        if why:
            raise NetnsUnavailable(why)
        _OPEN.append(self)
        try:
            self._setup()
        except Exception:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _setup(self):
        a, b = self.ns["a"], self.ns["b"]
        for n in (a, b):
            _run(["ip", "netns", "add", n])
        self._up = True
        _run(["ip", "link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"]])
        for s in ("a", "b"):
            n, d = self.ns[s], self.dev[s]
            _run(["ip", "link", "set", d, "netns", n])
            ex = ["ip", "netns", "exec", n]
            _run(ex + ["ip", "addr", "add", f"{ADDR[s]}/24", "dev", d])
            _run(ex + ["ip", "link", "set", d, "multicast", "on", "up"])
            _run(ex + ["ip", "link", "set", "lo", "up"])
            _run(ex + ["ip", "route", "add", "224.0.0.0/4", "dev", d])
        # the link works: a UDP datagram from a to b (no ping on these machines)
        if not self.udp_probe():
            raise NetnsUnavailable("veth link between the namespaces does not pass a UDP datagram")

    def udp_probe(self, timeout=15.0):
        """True when a UDP datagram sent from namespace a reaches namespace b (a sender loop in a, a
        receiver in b; generous timeout: python start-up on a loaded machine)."""
        import sys
        py = shutil.which("python3") or sys.executable
        rx = subprocess.Popen(["ip", "netns", "exec", self.ns["b"], py, "-c",
                               "import socket; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); "
                               f"s.bind(('{ADDR['b']}',47999)); s.settimeout({timeout}); print('ready',flush=True); "
                               "print(s.recv(64).decode())"], stdout=subprocess.PIPE, text=True)
        tx = None
        try:
            rx.stdout.readline()
            tx = subprocess.Popen(["ip", "netns", "exec", self.ns["a"], py, "-c",
                                   "import socket, time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                                   f"for _ in range({int(timeout * 20)}):\n"
                                   f"    s.sendto(b'probe', ('{ADDR['b']}',47999)); time.sleep(0.05)"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out, _ = rx.communicate(timeout=timeout + 5)
            return "probe" in out
        except subprocess.TimeoutExpired:
            return False
        finally:
            for p in (rx, tx):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()

    def close(self):
        """Kill every process started here (process group), remove the nftables tables, the veth and the
        namespaces.  Idempotent."""
        for p in list(self.procs):
            self.stop(p, timeout=1.0)
        if self._up:
            for s in ("a", "b"):
                # any process left in the namespace (a child that escaped its group) is killed too
                r = _run(["ip", "netns", "pids", self.ns[s]], check=False)
                for pid in r.stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
            for s in ("a", "b"):
                _run(["ip", "netns", "del", self.ns[s]], check=False)     # removes the veth pair too
            self._up = False
        if self in _OPEN:
            _OPEN.remove(self)

    def exists(self):
        """(namespaces still listed, veth ends still present in the root namespace)."""
        listed = _run(["ip", "netns", "list"], check=False).stdout
        ns_left = [n for n in self.ns.values() if n in listed]
        links = _run(["ip", "-o", "link"], check=False).stdout
        return ns_left, [d for d in self.dev.values() if f" {d}@" in links or f" {d}:" in links]

    # ---------------------------------------------------------------- processes
    def env(self, base=None, domain_id=None):
        env = dict(os.environ if base is None else base)
        env.update(ROS_LOCALHOST_ONLY="0", ROS_AUTOMATIC_DISCOVERY_RANGE="SUBNET",
                   FASTDDS_BUILTIN_TRANSPORTS="UDPv4", PYTHONUNBUFFERED="1", RCUTILS_LOGGING_BUFFERED_STREAM="0")
        env.pop("ROS_STATIC_PEERS", None)
        env.pop("FASTRTPS_DEFAULT_PROFILES_FILE", None)     # the suite's profile: loopback alone
        if domain_id is not None:
            env["ROS_DOMAIN_ID"] = str(domain_id)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def start(self, side, cmd, log_path, env=None, cwd=None):
        """Start `cmd` in namespace `side` ('a' or 'b') in its own session; output to log_path."""
        log = open(log_path, "w")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns[side]] + list(cmd), stdout=log,
                             stderr=subprocess.STDOUT, env=env or self.env(), cwd=cwd, start_new_session=True)
        p.log_path, p.log_file, p.side = Path(log_path), log, side
        self.procs.append(p)
        return p

    def stop(self, p, timeout=5.0):
        """SIGINT to the group, then SIGTERM, then SIGKILL.  Returns (how it ended, seconds to end)."""
        t0 = time.monotonic()
        ended = "exited"
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            if p.poll() is not None:
                break
            ended = sig.name
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.log_file.close()
        except OSError:
            pass
        if p in self.procs:
            self.procs.remove(p)
        return ended, time.monotonic() - t0

    # ---------------------------------------------------------------- faults
    def _nft(self, side, script):
        r = subprocess.run(["ip", "netns", "exec", self.ns[side], "nft", "-f", "-"], input=script,
                           capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            raise RuntimeError(f"nft in {self.ns[side]}: {r.stderr.strip()}")

    def _nft_rule(self, side, rule, label):
        if not nft_available():
            raise NetnsUnavailable("nftables `nft` not installed (Debian: apt-get install -y nftables)")
        d = self.dev[side]
        self._nft(side, f"table inet {NFT_TABLE} {{\n chain out {{ type filter hook output priority 0; "
                        f"policy accept;\n  oifname \"{d}\" {rule}\n }}\n}}\n")
        self.faults.append(label)

    def loss(self, side, pct):
        """Drop pct % of the packets leaving namespace `side`, at random."""
        rule = "drop" if pct >= 100 else f"numgen random mod 100 < {int(pct)} drop"
        self._nft_rule(side, rule, f"loss {pct}% {side}->")

    def burst(self, side, n, every):
        """Drop n consecutive packets of every `every` leaving namespace `side`."""
        self._nft_rule(side, f"numgen inc mod {int(every)} < {int(n)} drop", f"burst {n}/{every} {side}->")

    def rate_cap(self, side, rate, burst="16kb", latency="50ms"):
        _run(["ip", "netns", "exec", self.ns[side], "tc", "qdisc", "replace", "dev", self.dev[side], "root", "tbf",
              "rate", rate, "burst", burst, "latency", latency])
        self.faults.append(f"tbf {rate} {side}->")

    def delay(self, side, ms, jitter_ms=0):
        if not netem_available():
            raise NetnsUnavailable("tc netem is not available in this kernel (no sch_netem): delay and "
                                   "jitter cannot be injected here")
        _run(["ip", "netns", "exec", self.ns[side], "tc", "qdisc", "replace", "dev", self.dev[side], "root", "netem",
              "delay", f"{ms}ms", f"{jitter_ms}ms"])
        self.faults.append(f"delay {ms}+-{jitter_ms} ms {side}->")

    def partition(self, seconds):
        """Link down (both directions) for `seconds`, then up.  Returns (t_down, t_up) in
        time.monotonic() (CLOCK_MONOTONIC is not namespaced: comparable with the processes' clocks):
        t_down is read once the link is down, t_up before it is brought up, so the link was down over
        all of [t_down, t_up] (and a little longer: the commands take a few ms)."""
        ex = ["ip", "netns", "exec", self.ns["a"], "ip", "link", "set", self.dev["a"]]
        _run(ex + ["down"])
        t_down = time.monotonic()
        time.sleep(seconds)
        t_up = time.monotonic()
        _run(ex + ["up"])
        return t_down, t_up

    def clear_faults(self):
        for s in ("a", "b"):
            ex = ["ip", "netns", "exec", self.ns[s]]
            _run(ex + ["nft", "delete", "table", "inet", NFT_TABLE], check=False) if nft_available() else None
            _run(ex + ["tc", "qdisc", "del", "dev", self.dev[s], "root"], check=False)
            _run(ex + ["ip", "link", "set", self.dev[s], "up"], check=False)
        self.faults = []

    def counters(self, side):
        """(tx_packets, tx_dropped) of a veth end (nftables drops are not counted there)."""
        base = f"/sys/class/net/{self.dev[side]}/statistics/"
        r = _run(["ip", "netns", "exec", self.ns[side], "cat", base + "tx_packets", base + "tx_dropped"], check=False)
        v = r.stdout.split()
        return tuple(int(x) for x in v) if len(v) == 2 else (None, None)


# ------------------------------------------------------------------------------------------------
# recorder: a ROS process that records arrival times (time.monotonic_ns) and contents of the
# commands, the joint states and the controller's ~/state (with its header stamp, the controller's
# clock when it published, and the wall-clock arrival time), then writes an .npz on SIGINT.
# While it runs, OUT.count holds "commands, non-zero among the last 200, joint states" (updated every 0.25 s).
#   python test/netns.py record OUT.npz [--state-topic /torque_controller/state]
# ------------------------------------------------------------------------------------------------
def progress(out):
    """(commands, non-zero among the last 200, joint states) a recorder has seen so far."""
    try:
        v = tuple(int(x) for x in Path(out + ".count").read_text().split())
    except (OSError, ValueError):
        return (0, 0, 0)
    return v if len(v) == 3 else (0, 0, 0)


def _record(out, state_topic, command_topic="/effort_controller/commands", js_topic="/joint_states"):
    import sys
    import threading

    import numpy as np
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    # the recorder is the measuring instrument: at SCHED_FIFO 60 where permitted (above the nodes), so
    # that its arrival times are not its own scheduling delay on a loaded machine
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from robot_dynamics import realtime
    rt = realtime.apply(realtime.Settings(sched_policy="fifo", sched_priority=60),
                        log=lambda t: print(f"[recorder] {t}", flush=True))
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    node = rclpy.create_node("netns_recorder")
    cmd_t, cmd, js_t, js_q, st_t, st_safe = [], [], [], [], [], []
    rel = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    be = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT)

    def on_cmd(m):
        cmd_t.append(time.monotonic_ns())
        cmd.append(list(m.data))

    def on_js(m):
        js_t.append(time.monotonic_ns())
        js_q.append(list(m.position))

    st_wall, st_stamp, st_eff = [], [], []

    def on_state(m):
        st_t.append(time.monotonic_ns())
        st_wall.append(time.time_ns())
        st_stamp.append(m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec)
        st_eff.append(list(m.effort))
        p = m.position                            # the safe command carries no reference (NaN or empty)
        st_safe.append(len(p) == 0 or any(x != x for x in p))

    node.create_subscription(Float64MultiArray, command_topic, on_cmd, rel)
    node.create_subscription(JointState, js_topic, on_js, be)
    if state_topic:
        node.create_subscription(JointState, state_topic, on_state, rel)
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    progress, t_write = Path(out + ".count"), 0.0
    while not stop.is_set():
        ex.spin_once(timeout_sec=0.05)
        if time.monotonic() - t_write > 0.25:     # "commands  non-zero commands  joint states"
            t_write = time.monotonic()
            nz = sum(1 for c in cmd[-200:] if any(c))
            tmp = progress.with_suffix(".tmp")
            tmp.write_text(f"{len(cmd)} {nz} {len(js_t)}")
            tmp.replace(progress)                 # atomic: a reader never sees half a line
    n = max((len(c) for c in cmd), default=0)
    C = np.full((len(cmd), n), np.nan)
    for i, c in enumerate(cmd):
        C[i, :len(c)] = c
    nq = max((len(q) for q in js_q), default=0)
    Q = np.full((len(js_q), nq), np.nan)
    for i, q in enumerate(js_q):
        Q[i, :len(q)] = q
    np.savez(out, cmd_t=np.array(cmd_t, np.int64), cmd=C, js_t=np.array(js_t, np.int64), js_q=Q,
             st_t=np.array(st_t, np.int64), st_safe=np.array(st_safe, bool), rt=str(rt),
             st_wall=np.array(st_wall, np.int64), st_stamp=np.array(st_stamp, np.int64),
             st_eff=np.array([e for e in st_eff if len(e) == n] or np.zeros((0, n))),
             st_eff_ok=np.array([len(e) == n for e in st_eff], bool),
             wall_minus_mono_ns=time.time_ns() - time.monotonic_ns())
    ex.shutdown(timeout_sec=1.0)
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    import sys
    if len(sys.argv) >= 3 and sys.argv[1] == "record":
        st = sys.argv[sys.argv.index("--state-topic") + 1] if "--state-topic" in sys.argv else ""
        _record(sys.argv[2], st)
    else:
        print(__doc__)
