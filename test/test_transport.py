"""The transport advice the nodes give for a publisher that stays silent (Fast DDS shared memory and a
process restarted in a killed one's place, eProsima/Fast-DDS#5053) works in the environment it is given
for: a process started with the advised changes opens no Fast DDS shared-memory port, where the same
process without them does (the oracle: the port files, /dev/shm/fastrtps_port<N>, among the process's
open files, as Fast DDS itself opens them)."""
import os
import subprocess
import sys

import pytest

from robot_dynamics.nodes.common import udp_only_advice, udp_only_env
from robot_dynamics.nodes.processes import apply_env_changes

CHILD = """
import os, rclpy
from std_msgs.msg import String
rclpy.init()
node = rclpy.create_node("transport_probe")
node.create_publisher(String, "transport_probe", 10)
fds = "/proc/%d/fd" % os.getpid()
def target(f):
    try:
        return os.path.basename(os.readlink(os.path.join(fds, f)))
    except OSError:            # closed meanwhile (the listing's own descriptor)
        return ""
ports = sorted({t for t in map(target, os.listdir(fds)) if t.startswith("fastrtps_port")})
print("PORTS", " ".join(ports) or "-", flush=True)
node.destroy_node()
rclpy.shutdown()
"""

STARTS = {   # what a user may run with (besides the suite's own profile, taken out here)
    "localhost_only": {"ROS_LOCALHOST_ONLY": "1"},
    "range_localhost": {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"},
    "default": {},
}


def shm_ports(env):
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("PORTS ")]
    assert r.returncode == 0 and line, r.stdout + r.stderr
    return [p for p in line[0].split()[1:] if p != "-"]


def user_env(start):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROS_LOCALHOST_ONLY", "ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTRTPS_DEFAULT_PROFILES_FILE",
                        "FASTDDS_BUILTIN_TRANSPORTS")}
    env.update(STARTS[start])
    return env


@pytest.mark.system
@pytest.mark.parametrize("start", sorted(STARTS))
def test_the_advised_environment_opens_no_shared_memory_port(start):
    env = user_env(start)
    before = shm_ports(env)
    assert before, f"{start}: Fast DDS opened no shared-memory port even before the advice"
    change = udp_only_env(env)
    advice = udp_only_advice(env)
    assert all(k in advice for k in change), (change, advice)
    apply_env_changes(env, change)
    assert shm_ports(env) == [], f"{start}: still on shared memory after: {advice}"


def test_the_session_domain_is_one_no_fast_dds_port_belongs_to(tmp_path):
    """conftest._free_domain: every domain but one taken, by a shared-memory port file, a UDP socket in
    the kernel's own table (a real socket bound here, for the format) or a line of a table like it."""
    import socket
    from conftest import _free_domain
    shm = tmp_path / "shm"
    shm.mkdir()
    real = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for d in range(100, 0, -1):                      # a free port of some domain for the real socket
        try:
            if d != 37:
                real.bind(("127.0.0.1", 7400 + 250 * d + 249))
                break
        except OSError:
            continue
    try:
        real_domain = (real.getsockname()[1] - 7400) // 250
        assert 1 <= real_domain <= 100 and real_domain != 37, real.getsockname()
        rows = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"]
        for d in range(1, 101):
            if d in (37, real_domain):
                continue
            if d % 2:
                (shm / f"fastrtps_port{7400 + 250 * d + 10}").touch()
            else:
                rows.append(f"  {d}: 0100007F:{7400 + 250 * d + 11:04X} 00000000:0000 07 00000000:00000000 00:00000000 "
                            "00000000     0        0 1 2 0000000000000000 0")
        table = tmp_path / "udp"
        table.write_text("\n".join(rows) + "\n")
        with open("/proc/net/udp") as f:
            assert f":{real.getsockname()[1]:04X} " in f.read()
        assert {_free_domain(str(shm), (str(table), "/proc/net/udp")) for _ in range(20)} == {37}
        # without the kernel's table, the real socket's domain is free too
        assert {_free_domain(str(shm), (str(table),)) for _ in range(40)} == {37, real_domain}
    finally:
        real.close()
