"""Timing of the controller node over DDS: start ramp, per-command rate limit, watchdog and the safe
ramp, measured on the arrival times of the commands this test records (its own subscription), with
bounds derived from the parameters it sets plus a stated scheduling allowance.  Expected torques come
from the reference (in-repo) dynamics and the parameters, mapped by name through a `joints` order that
differs from the model's; never from the node.

The bounds are not speed requirements: each has a lower side that holds whatever the load (nothing
can happen before the parameter allows it) and an upper side with SCHED_ALLOWANCE for a loaded
2-core machine.  A watchdog 20x too slow or a rate limit 10x too fast fails them by far."""
import threading
import time

import numpy as np
import pytest

from robustness_harness import ARM, Q0, Rig, wait_for
from robot_dynamics.dynamics import Model, make_backend

pytestmark = pytest.mark.slow

JOINTS = ["panda_joint4", "panda_joint1", "panda_joint7", "panda_joint2", "panda_joint6", "panda_joint3",
          "panda_joint5"]
WATCHDOG = 0.2            # s
RATE = 1000.0             # N m/s
UPDATE_RATE = 1000.0      # Hz: the rate limit allows RATE / UPDATE_RATE per command
RAMP = 0.5                # s
STATE_PERIOD = 0.005      # s between the joint states this test publishes
SCHED_ALLOWANCE = 0.25    # s: late timers / deliveries on a loaded 2-core machine (upper bounds only)
TOL = 1e-9                # N m


@pytest.fixture(scope="module")
def rig():
    r = Rig()
    arrivals = []
    lock = threading.Lock()

    def on_cmd(msg):
        t = time.monotonic()
        with lock:
            arrivals.append((t, np.array(msg.data)))
    from std_msgs.msg import Float64MultiArray
    r.h.create_subscription(Float64MultiArray, r.cmd_topic, on_cmd, 10000)
    r.arrivals, r.arr_lock = arrivals, lock
    try:
        r.controller(controller="gravity_compensation", joints=JOINTS, watchdog_timeout=WATCHDOG,
                     torque_rate_limit=RATE, update_rate=UPDATE_RATE, ramp_time=RAMP, safe_command="zero",
                     trigger="joint_state")
        yield r
    finally:
        r.close()


def since(r, t0):
    with r.arr_lock:
        return [(t, c) for t, c in r.arrivals if t >= t0]


def test_start_ramp_rate_limit_watchdog_and_safe_ramp(rig):
    model = Model.from_robot("panda")
    g = make_backend(model, "reference").gravity(Q0[[ARM.index(j) for j in model.joint_names]])
    g_cmd = np.array([g[list(model.joint_names).index(j)] for j in JOINTS])    # command order = JOINTS
    per_cmd = RATE / UPDATE_RATE
    # wait for the node to be sending (the safe command, zero, before any state)
    wait_for(lambda: len(since(rig, 0.0)) > 0, what="first command")
    # ---- start ramp: states at Q0 every STATE_PERIOD ----
    msg = rig.js(ARM, Q0)
    t_start = time.monotonic()
    t_reached = None
    while time.monotonic() - t_start < RAMP + 1.0 + SCHED_ALLOWANCE:
        t_pub = time.monotonic()                     # before the publish: the node receives it later
        rig.js_pub.publish(msg)
        time.sleep(STATE_PERIOD)
        if t_reached is None:
            got = [t for t, c in since(rig, t_start) if np.max(np.abs(c - g_cmd)) < 1e-6]
            if got:
                t_reached = got[0]
        elif time.monotonic() - t_reached > 0.3:
            break
    t_last = time.monotonic()
    ramp = since(rig, t_start)
    assert t_reached is not None, f"never reached g(q) (last {ramp[-1][1] if ramp else None}, want {g_cmd})"
    t_first = ramp[0][0]
    # the ramp takes ramp_time of the node's clock (the sum of its step dt): not sooner, not much later.
    # Not sooner: each command is the fraction f of g(q) the ramp has reached (c = f g, from the zero safe
    # command); the receipt time over f, fitted over the middle of the ramp, has a slope of the ramp's
    # duration.  (Judged from the first command's receipt alone, one late receipt of the pytest process
    # on a loaded host made a ramp look 14 ms short: 0.486 s.)  One state period of granularity.
    gg = float(g_cmd.dot(g_cmd))
    mid = [(t, float(c.dot(g_cmd)) / gg) for t, c in ramp if 0.1 < float(c.dot(g_cmd)) / gg < 0.9]
    assert len(mid) > 20, f"{len(mid)} commands in the middle of the ramp"
    duration = float(np.polyfit([f for _, f in mid], [t for t, _ in mid], 1)[0])
    assert duration >= RAMP - 2 * STATE_PERIOD, (duration, RAMP)
    assert t_reached - t_first <= RAMP + SCHED_ALLOWANCE, (t_reached - t_first, RAMP)
    # ---- watchdog: no more states ----
    wait_for(lambda: any(t > t_last + WATCHDOG + 0.5 for t, _ in since(rig, t_last)) or
             time.monotonic() > t_last + WATCHDOG + 3.0, what="commands after the states stopped",
             timeout=10.0)
    time.sleep(np.max(np.abs(g_cmd)) / RATE + SCHED_ALLOWANCE)
    after = since(rig, t_last)
    # the commands after the last state: at most one answer to it (filtered, = g), then the safe ramp
    safe = [(t, c) for t, c in after if t > t_last + 0.5 * WATCHDOG]
    early = [(t, c) for t, c in after if t <= t_last + 0.5 * WATCHDOG]
    assert len(early) <= 2, f"{len(early)} commands within {0.5 * WATCHDOG} s after the last state"
    assert safe, "no safe command after the states stopped"
    # from the last state's publish: the node cannot have received it sooner, so a trip before
    # WATCHDOG after it is too early whatever the load (t_last, taken after the loop's sleep, is later)
    delay = safe[0][0] - t_pub
    timer = min(0.05, 0.5 * WATCHDOG)               # the node's safe-command repeat period
    print(f"watchdog: first safe command {delay * 1e3:.1f} ms after the last state "
          f"(timeout {WATCHDOG * 1e3:.0f} ms); start ramp {1e3 * (t_reached - t_first):.1f} ms, fitted "
          f"{1e3 * duration:.1f} ms (ramp_time "
          f"{RAMP * 1e3:.0f} ms)")
    assert delay >= WATCHDOG, f"tripped after {delay:.3f} s < watchdog_timeout {WATCHDOG}"
    assert delay <= WATCHDOG + timer + SCHED_ALLOWANCE, f"tripped after {delay:.3f} s"
    # safe ramp toward zero: reaches it, never faster than RATE (duration >= max|g| / RATE, less one
    # command's worth), each command within RATE / UPDATE_RATE of the one before
    zero_at = [t for t, c in safe if np.max(np.abs(c)) < TOL]
    assert zero_at, f"the safe command never reached zero (last {safe[-1][1]})"
    assert zero_at[0] - safe[0][0] >= (np.max(np.abs(g_cmd)) - per_cmd) / RATE - 1e-3, \
        (zero_at[0] - safe[0][0], np.max(np.abs(g_cmd)) / RATE)
    # ---- the per-command rate limit over every command recorded ----
    with rig.arr_lock:
        cmds = [c for _, c in rig.arrivals]
    jumps = np.array([np.max(np.abs(b - a)) for a, b in zip(cmds, cmds[1:])])
    assert jumps.max() <= per_cmd + TOL, f"a command moved {jumps.max():.4f} N m > {per_cmd} N m"
