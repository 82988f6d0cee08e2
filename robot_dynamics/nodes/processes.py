"""Start nodes of this package as child processes (each in its own process group) and end them all.

Used by the demo and by the tests that talk to nodes over DDS; `ros2 launch` does the same in a ROS
install (see launch/).  The ROS wheels re-exec Python once at start-up, so a child is started as
`[sys.executable, '-m', module, '--ros-args', ...]` in a new session and is stopped by signalling its
whole process group (SIGINT, then SIGTERM, then SIGKILL).

    with NodeProcesses(log_dir="out/logs") as procs:
        procs.start("robot_dynamics.nodes.sim_node", name="mujoco_sim",
                    params_files=["config/sim_panda.yaml"], params={"real_time_factor": 1.0})
        ...
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PACKAGE_ROOT = Path(__file__).resolve().parents[2]     # the folder that holds robot_dynamics/


def share_dir():
    """Where launch/ and config/ are: the source tree if we run from it, else the installed share."""
    if (PACKAGE_ROOT / "config").is_dir():
        return PACKAGE_ROOT
    p = Path(sys.prefix) / "share" / "robot_dynamics"
    return p if p.is_dir() else PACKAGE_ROOT


def config_path(name):
    return share_dir() / "config" / name


def dynamics_params_file(path):
    """The launch files' `dynamics:=` argument: a parameters file loaded over the law's config, as the
    identification writes it (`dynamics_id.output`: armature and every law's friction_*).  [] when
    empty, else [its absolute path]; a RuntimeError naming it when it cannot be read or is not a ROS 2
    parameters file (the launch stops before any node starts)."""
    if not path:
        return []
    path = os.path.abspath(os.path.expanduser(path))
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise RuntimeError(f"dynamics:={path}: {e}") from None
    if not isinstance(doc, dict) or not doc or not all(
            isinstance(v, dict) and isinstance(v.get("ros__parameters"), dict) for v in doc.values()):
        raise RuntimeError(f"dynamics:={path}: not a ROS 2 parameters file (<node>: ros__parameters: ...); "
                           f"expected what ~/identify_dynamics writes to dynamics_id.output")
    return [path]


UDP_LOOPBACK_PROFILE = "fastdds_udp_loopback.xml"     # config/: UDP on 127.0.0.1, no shared memory


def udp_loopback_env():
    """The environment changes ({name: value, None to unset}) that put a process on Fast DDS's UDP
    transport over the loopback alone: the package's profile, and the SUBNET discovery range without
    ROS_LOCALHOST_ONLY (under either localhost setting rmw_fastrtps (Jazzy) chooses the transports
    itself, shared memory included, and ignores the profile's; the profile keeps discovery on the host)."""
    return {"ROS_LOCALHOST_ONLY": None, "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET",
            "FASTRTPS_DEFAULT_PROFILES_FILE": str(config_path(UDP_LOOPBACK_PROFILE))}


def apply_env_changes(env, changes):
    """Apply {name: value, None to unset} to the mapping `env` (a dict or os.environ) in place."""
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def params_file(node_name, params, directory=None):
    """Write `params` (a flat or nested dict) as a ros__parameters YAML for `node_name`; return path."""
    fd, path = tempfile.mkstemp(prefix=f"{node_name}_", suffix=".yaml", dir=directory)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump({"/**": {"ros__parameters": params}}, f)
    return path


class NodeProcesses:
    """A set of child node processes, all ended by `stop_all()` (or on leaving the `with`)."""

    def __init__(self, log_dir=None, env=None):
        self.procs = []
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="rd_nodes_"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ if env is None else env)
        pp = self.env.get("PYTHONPATH", "")
        self.env["PYTHONPATH"] = str(PACKAGE_ROOT) + (os.pathsep + pp if pp else "")
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.env.setdefault("RCUTILS_LOGGING_BUFFERED_STREAM", "0")

    def start(self, module, name=None, params=None, params_files=(), remaps=None, args=(), realtime=None):
        """Start `python -m module --ros-args ...`; returns the Popen (its log file is `.log_path`).
        realtime: None, or {"policy": "fifo", "priority": 40[, "cpus": "1"]}: the child runs through
        `python -m robot_dynamics.realtime` (every thread of it under that policy, on those CPUs).  Where the OS
        refuses (no CAP_SYS_NICE / RLIMIT_RTPRIO), it logs "[realtime] ... refused" and runs with
        the normal policy (the fallback): `realtime_applied(p)` tells which happened."""
        rt = []
        if realtime:
            rt = ["-m", "robot_dynamics.realtime", "--policy", str(realtime.get("policy", "fifo")),
                  "--priority", str(int(realtime.get("priority", 40)))]
            if realtime.get("cpus"):
                rt += ["--cpus", str(realtime["cpus"])]
        cmd = [sys.executable, *rt, "-m", module, *args, "--ros-args"]
        if name:
            cmd += ["-r", f"__node:={name}"]
        for src, dst in (remaps or {}).items():
            cmd += ["-r", f"{src}:={dst}"]
        for pf in params_files:
            cmd += ["--params-file", str(pf)]
        if params:
            cmd += ["--params-file", params_file(name or module.rsplit(".", 1)[-1], params, self.log_dir)]
        tag = name or module.rsplit(".", 1)[-1]
        k = sum(1 for q in self.procs if q.tag == tag)
        log_path = self.log_dir / (f"{tag}.log" if k == 0 else f"{tag}.{k + 1}.log")   # a restart: its own log
        log = open(log_path, "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                             cwd=str(PACKAGE_ROOT), start_new_session=True)
        p.log_path, p.log_file, p.tag = log_path, log, tag
        self.procs.append(p)
        return p

    def check_alive(self):
        """Raise RuntimeError with the tail of its log if a child has exited."""
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"node {p.tag} exited with code {p.returncode}:\n{self.log(p)[-3000:]}")

    def realtime_applied(self, p, timeout=10.0):
        """True once the child's log shows the real-time report with the policy applied, False if it
        shows a refusal (or nothing within `timeout`)."""
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            text = self.log(p)
            for line in text.splitlines():
                if line.startswith("[realtime] {"):              # realtime.main's report (a dict)
                    return "'sched': 'ok " in line
            time.sleep(0.05)
        return False

    @staticmethod
    def log(p):
        try:
            if not p.log_file.closed:
                p.log_file.flush()
            return Path(p.log_path).read_text(errors="replace")
        except (OSError, ValueError):
            return ""

    def stop_all(self, timeout=5.0):
        """SIGINT to every process group, then SIGTERM, then SIGKILL for those still running."""
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            live = [p for p in self.procs if p.poll() is None]
            if not live:
                break
            for p in live:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            t_end = time.monotonic() + wait
            for p in live:
                try:
                    p.wait(max(0.05, t_end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for p in self.procs:
            try:
                p.log_file.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_all()


# overrides for runs of the sim + controller pair on a shared, possibly loaded machine (tests, demo)
SIM_OVERRIDES = {"publish_rate": 500.0}
CONTROLLER_OVERRIDES = {"robot_description_timeout": 0.0, "watchdog_timeout": 0.5}


# the real-time option of the system tests' children: SCHED_FIFO 40 (below ros2_control's 50).  On
# 2 shared cores with CPU hogs a DDS loop without it was delayed tens of ms and the computed-torque
# loop (kp 400, kd 40) diverged (RMS 1.26 rad); with it: RMS 0.0016 rad (measured 2026-11-30)
RT_TEST = {"policy": "fifo", "priority": 40}


def start_sim_and_controller(procs, robot="panda", controller="gravity_compensation",
                             sim_params=None, controller_params=None, realtime=None):
    """Start the sim node (config/sim_<robot>.yaml) and the controller node
    (config/<robot>_<controller>.yaml) as children of `procs`, named mujoco_sim and
    torque_controller, with SIM_OVERRIDES / CONTROLLER_OVERRIDES and the given extra parameters;
    `realtime` as in NodeProcesses.start (both children)."""
    sim = procs.start("robot_dynamics.nodes.sim_node", name="mujoco_sim",
                      params_files=[config_path(f"sim_{robot}.yaml")],
                      params={**SIM_OVERRIDES, **(sim_params or {})}, realtime=realtime)
    ctl = procs.start("robot_dynamics.nodes.controller", name="torque_controller",
                      params_files=[config_path(f"{robot}_{controller}.yaml")],
                      params={**CONTROLLER_OVERRIDES, **(controller_params or {})}, realtime=realtime)
    return sim, ctl
