"""Start-up errors of the Franka bridge that say what to change (issue 42): `realtime: true` on a kernel
without real time, and a wrong `robot_ip`; and the gravity guard's message naming what it measured.

The oracle for the error texts is libfranka itself: the texts are taken live from franky (a refused
loopback address, a host name that does not resolve, franky-sim answering a RealtimeConfig.Enforce
connection on this kernel), not written down from the code under test.
"""
import pytest

franky = pytest.importorskip("franky")

from robot_dynamics.hardware import franka as fh  # noqa: E402
from robot_dynamics.hardware import franka_commands as fc  # noqa: E402

# libfranka's text when the thread cannot get SCHED_FIFO (robot.cpp / control_loop.cpp, RealtimeConfig
# kEnforce on a real-time kernel without the rights): not producible on this host (root, no RT kernel)
NO_RT_RIGHTS = "libfranka: unable to set realtime scheduling: Operation not permitted"


def _unused_loopback():
    from franka_harness import sim_address
    return sim_address()          # nothing listens there: each is a fresh 127.x.y.z of this run


def _libfranka_error(ip, realtime=False):
    rc = franky.RealtimeConfig.Enforce if realtime else franky.RealtimeConfig.Ignore
    with pytest.raises(Exception) as ei:
        franky.Robot(ip, realtime_config=rc)
    return ei.value


def test_refused_address_names_it_and_how_to_check():
    ip = _unused_loopback()
    e = _libfranka_error(ip)
    assert "FCI" in str(e)                      # libfranka's own "install FCI" text (the old message)
    retry, msg = fh.connect_error_hint(e, ip)
    assert retry                                # a robot still booting answers later
    assert f"robot_ip {ip}" in msg and "check robot_ip" in msg and f"ping {ip}" in msg
    assert "franky-sim" in msg                  # the address it printed
    assert str(e).removeprefix("libfranka: ") in msg      # libfranka's text kept


def test_unresolvable_host_is_not_retried():
    e = _libfranka_error("no-such-robot.invalid")
    retry, msg = fh.connect_error_hint(e, "no-such-robot.invalid")
    assert not retry and "'no-such-robot.invalid'" in msg and "robot_ip" in msg


@pytest.mark.parametrize("text", [NO_RT_RIGHTS, "libfranka: Running kernel does not have realtime capabilities."])
def test_realtime_errors_say_realtime_false(text):
    retry, msg = fh.connect_error_hint(RuntimeError(text), "172.16.0.2", realtime=True)
    assert not retry                             # the kernel / rights do not change by waiting
    assert "realtime:=false" in msg and "PREEMPT_RT" in msg and "rtprio" in msg
    assert text.removeprefix("libfranka: ") in msg


def test_realtime_kernel_agrees_with_libfranka():
    """Our early check says 'not real-time' exactly where libfranka refuses Enforce: on this host the
    refusal is checked live against franky-sim in test_bridge_start_up_errors_are_named."""
    rt, found = fh.realtime_kernel()
    import os
    assert rt == (os.path.exists("/sys/kernel/realtime") or "PREEMPT_RT" in os.uname().version)
    assert rt or "PREEMPT_RT" in found


def test_guard_reason_names_what_it_measured():
    dq = [0.1, 0.2, 31.0, 0.0, 0.0, 0.0, 0.0]
    vlim = [2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26]
    checked = fc.guard_reason(0.93, dq, True, "/torque_controller", vlim)
    assert "fraction 0.93" in checked and "joint 3 at 31.00 rad/s" in checked and "11.8 x" in checked
    assert "not double compensation" in checked
    assert "set <controller>.compensate_gravity" not in checked      # already false: not the cause
    unchecked = fc.guard_reason(0.93, dq, False, "")
    assert "compensate_gravity: false" in unchecked and "joint 3 at 31.00 rad/s" in unchecked


@pytest.mark.slow
@pytest.mark.franky_sim
def test_bridge_start_up_errors_are_named(ros, tmp_path):
    """Two bridges with a 600 s connect_timeout (the old bridge was silent until it ran out): one with
    realtime: true against franky-sim (libfranka refuses this kernel once the robot answers) reaches
    `error` naming realtime:=false, and warned before it connected; one at a loopback address nothing
    listens on is retried but reports at once the address and how to check it.  Both stay up."""
    from franka_harness import BridgeProbe, FrankySim, bridge_params, dump_logs
    from robot_dynamics.nodes.processes import NodeProcesses, config_path
    procs = NodeProcesses(log_dir=tmp_path)
    probes = {n: BridgeProbe(bridge_name=n, name=f"probe_{n}") for n in ("bridge_rt", "bridge_ip")}
    wrong_ip = _unused_loopback()
    with FrankySim(tmp_path) as sim:
        try:
            p_rt = procs.start("robot_dynamics.nodes.franka_bridge", name="bridge_rt",
                               params_files=[config_path("fr3_bridge.yaml")],
                               params=bridge_params(sim, realtime=True, connect_timeout=600.0))
            p_ip = procs.start("robot_dynamics.nodes.franka_bridge", name="bridge_ip",
                               params_files=[config_path("fr3_bridge.yaml")],
                               params={**bridge_params(sim, connect_timeout=600.0), "robot_ip": wrong_ip})
            for pr in probes.values():
                pr.start()
            rt, ip = probes["bridge_rt"], probes["bridge_ip"]
            ok = rt.wait_for(lambda: rt.diag.get("state") == "error", 90.0, check=procs.check_alive)
            assert ok, f"bridge_rt: {rt.diag}\n" + dump_logs(procs, sim)
            reason = rt.diag["reason"]
            if not fh.realtime_kernel()[0]:
                assert "realtime:=false" in reason and "realtime capabilities" in reason, reason
                assert "this kernel is not real-time" in procs.log(p_rt)       # the early warning
            ok = ip.wait_for(lambda: f"robot_ip {wrong_ip}" in ip.diag.get("reason", ""), 90.0,
                             check=procs.check_alive)
            assert ok, f"bridge_ip: {ip.diag}\n" + dump_logs(procs, sim)
            assert "check robot_ip" in ip.diag["reason"] and ip.diag["state"] == "idle", ip.diag
            assert ip.diag_level == 1                                          # WARN while retrying
            assert f"robot_ip {wrong_ip}" in procs.log(p_ip)                   # logged, not only published
            assert p_rt.poll() is None and p_ip.poll() is None                 # both still up
        finally:
            for pr in probes.values():
                pr.stop()
                pr.destroy_node()
            procs.stop_all()
