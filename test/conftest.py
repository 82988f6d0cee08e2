"""Shared fixtures.  Every test session gets its own ROS_DOMAIN_ID (set before rclpy is imported) so
parallel or leftover processes never cross-talk."""
import os
import random
import re


def _free_domain(shm="/dev/shm", udp=("/proc/net/udp", "/proc/net/udp6"), rng=random.SystemRandom()):
    """A ROS_DOMAIN_ID in 1..100 that no Fast DDS port on this host belongs to, when there is one.
    Domain d's ports are 7400 + 250 d .. + 249 (the RTPS port mapping): a UDP socket bound to one
    (a participant running now, of another session: this one runs on UDP, see below) or a shared-memory
    port file (fastrtps_port<N>: a participant on shared memory, or one a killed process left, which
    Fast DDS does not remove).  Neither is anything to share a domain with."""
    ports = set()
    try:
        for name in os.listdir(shm):
            m = re.fullmatch(r"fastrtps_port(\d+)", name)
            if m:
                ports.add(int(m.group(1)))
    except OSError:
        pass
    for table in udp:
        try:
            with open(table) as f:
                next(f)
                ports.update(int(line.split()[1].rsplit(":", 1)[1], 16) for line in f)
        except (OSError, StopIteration, IndexError, ValueError):
            pass
    used = {(p - 7400) // 250 for p in ports if p >= 7400}
    free = [d for d in range(1, 101) if d not in used]
    return rng.choice(free or list(range(1, 101)))


if "ROBOT_DYNAMICS_TEST_DOMAIN" not in os.environ:
    os.environ["ROBOT_DYNAMICS_TEST_DOMAIN"] = str(_free_domain())
    os.environ["ROS_DOMAIN_ID"] = os.environ["ROBOT_DYNAMICS_TEST_DOMAIN"]
if re.fullmatch(r"gw\d+", os.environ.get("PYTEST_XDIST_WORKER", "")):
    # a pytest-xdist worker (-n N) inherits the run's domain: worker k takes the run's domain + k, so no
    # two workers of this run share one (their nodes are named apart too, but discovery is not)
    _k = int(os.environ["PYTEST_XDIST_WORKER"][2:])
    os.environ["ROS_DOMAIN_ID"] = str((int(os.environ["ROBOT_DYNAMICS_TEST_DOMAIN"]) - 1 + _k) % 100 + 1)
# Fast DDS on UDP over the loopback interface alone (config/fastdds_udp_loopback.xml), in this process
# and every process a test starts (they inherit it): nothing on the network, and no shared memory.  A
# suite kills and restarts hundreds of nodes on one domain; over shared memory a new process takes a
# killed one's participant id and ports and a live publisher's data can stay away from it for minutes
# (eProsima/Fast-DDS#5053): in loaded fresh-clone runs a controller started late in the run never got
# /robot_description, a probe no joint states, each in a test that passes alone.  ROS_LOCALHOST_ONLY=1
# or ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST would make rmw_fastrtps choose the transports and put shared
# memory back (FASTDDS_BUILTIN_TRANSPORTS and the profile are then ignored: seen on this rmw), hence
# SUBNET, which the loopback-only profile keeps on this host.  What the tests judge is the nodes, not
# the transport: ROBOT_DYNAMICS_TEST_SHM=1 runs the suite on the default transports, localhost only.
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: see robot_dynamics/__init__.py

from robot_dynamics.nodes.processes import apply_env_changes, udp_loopback_env  # noqa: E402 (ROS-free)

if os.environ.get("ROBOT_DYNAMICS_TEST_SHM") == "1":
    os.environ.setdefault("ROS_LOCALHOST_ONLY", "1")
else:
    apply_env_changes(os.environ, udp_loopback_env())

import pytest  # noqa: E402

# the robustness suite's end-of-session summary (cases per category, failures)
from robustness_harness import hand_over_counts, pytest_terminal_summary  # noqa: E402,F401

try:                                   # pytest-xdist's hooks exist only with the plugin installed
    import xdist  # noqa: F401
    from robustness_harness import pytest_testnodedown  # noqa: E402,F401
except ImportError:
    pass

_EXIT = {}


def pytest_collection_modifyitems(config, items):
    """A test against franky-sim starts the simulator (a process): it is a `system` test, marked or not
    (test_franka_recover.py and one test of test_franka_startup.py were not, and ran in the inner loop)."""
    for item in items:
        if item.get_closest_marker("franky_sim") is not None and item.get_closest_marker("system") is None:
            item.add_marker(pytest.mark.system)


def pytest_sessionfinish(session, exitstatus):
    _EXIT["status"] = int(exitstatus)
    hand_over_counts(session)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the process here, once pytest has reported everything, without the C++ exit handlers: a
    DDS participant a failed test left behind is destroyed by Fast DDS's participant factory at exit,
    and that destructor can deadlock (seen: a loaded fresh-clone run printed its summary, then hung in
    DomainParticipantFactory::~DomainParticipantFactory -> TimedEvent::~TimedEvent, waiting on an event
    thread that was gone).  The exit status is pytest's."""
    if "status" in _EXIT:
        import sys
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT["status"])


@pytest.fixture(scope="module")
def model():
    """A fresh 7-DoF Panda (fingers locked) per test module: tests may attach payloads to it."""
    from robot_dynamics.dynamics import Model
    return Model.from_robot("panda")


@pytest.fixture(scope="module")
def pinb(model):
    from robot_dynamics.dynamics import PinocchioBackend
    return PinocchioBackend(model)


@pytest.fixture(scope="module")
def refb(model):
    from robot_dynamics.dynamics import ReferenceBackend
    return ReferenceBackend(model)


@pytest.fixture(scope="module")
def ros():
    """rclpy initialised for the module (on this run's ROS_DOMAIN_ID)."""
    import rclpy
    rclpy.init()
    yield
    rclpy.try_shutdown()
