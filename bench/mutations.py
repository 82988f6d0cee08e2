"""Mutation check: put one deliberate bug into a copy of the tree, run the tests that claim to catch it,
and print whether they did.  A test suite that lets a listed bug through has a hole.

    .venv/bin/python bench/mutations.py           # every mutation in MUTATIONS (./run.sh bench mutations)
    .venv/bin/python bench/mutations.py -k rate   # only those whose id contains "rate"
    .venv/bin/python bench/mutations.py --list    # the list, nothing run

Each mutation is (id, what the bug is, file, the exact text to replace, its replacement, the tests that
must catch it).  The text must occur exactly once in the file (checked first: a stale entry is an error,
not a silent pass).  Each runs in its own copy of the tracked files (git ls-files), with the shared venv
and its own ROS_DOMAIN_ID; a mutation is "caught" when pytest exits non-zero with at least one failure.
Not part of CI (it runs the slow tests once per mutation); its table goes in the notes.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class M:
    def __init__(self, id, what, path, old, new, tests):
        self.id, self.what, self.path, self.old, self.new, self.tests = id, what, path, old, new, tests


# ------------------------------------------------------------------------------------------------
# the deliberate bugs
# ------------------------------------------------------------------------------------------------
LO = "test/test_loop_oracles.py::"
RI = "test/test_robustness_inputs.py::"
NT = "test/test_node_timing.py"          # the same bugs at node level over DDS
MUTATIONS = [
    # ---- the rows of issue 15 (each let through by the suite before) ----
    M("perjoint_not_reordered", "per-joint parameters (gains, limits) not reordered from `joints` to model order",
      "robot_dynamics/control/loop_params.py", "        out[self.perm] = a\n", "        out[:] = a\n",
      [LO + "test_gains_and_effort_limits_given_in_joints_order_apply_by_name"]),
    M("effort_scale_ignored", "effort_scale ignored by the safety filter",
      "robot_dynamics/control/stages/safety.py", "        self.limit = el * scale\n", "        self.limit = el * 1.0\n",
      [LO + "test_effort_scale_scales_the_urdf_limits"]),
    M("rate_limit_x10", "the loop uses torque_rate_limit x 10",
      "robot_dynamics/control/loop_params.py",
      "            return None if not v else self.to_model_order(v)\n        return v\n",
      "            return None if not v else self.to_model_order(v)\n"
      "        return 10 * v if key == 'torque_rate_limit' else v\n",
      [LO + "test_rate_limit_per_command_is_the_parameter_over_the_update_rate", NT]),
    M("watchdog_x20", "watchdog timeout x 20",
      "robot_dynamics/control/stages/supervisor.py",
      "        timeout = self._p[\"watchdog_timeout\"]\n        age = now - self.last_ok\n",
      "        timeout = 20 * self._p[\"watchdog_timeout\"]\n        age = now - self.last_ok\n",
      [LO + "test_watchdog_trips_after_the_timeout_not_before", NT]),
    M("sim_stops_on_bad_command", "the sim node's physics thread stops on the first bad command",
      "robot_dynamics/nodes/sim_node.py", "            self._bad += 1\n",
      "            self._bad += 1\n            self._stop.set()\n",
      ["test/test_sim_node.py::test_bad_commands_are_rejected_and_last_good_held"]),
    M("map_joint_values_raises", "map_joint_values always raises ValueError",
      "robot_dynamics/nodes/common.py", "    a = np.array([values[pos[n]] for n in names], dtype=float)\n",
      "    raise ValueError(f\"{what}: mutant\")\n",
      [RI + "test_map_joint_values_fuzz"]),
    M("trajectory_arrays_raises", "trajectory_arrays always raises ValueError",
      "robot_dynamics/nodes/common.py", "    m, N = len(msg_names), len(times)\n",
      "    raise ValueError(\"trajectory: mutant\")\n",
      [RI + "test_trajectory_fuzz"]),
    M("trajectory_columns_swapped", "trajectory columns of the first two joints swapped",
      "robot_dynamics/nodes/common.py", "    m, N = len(msg_names), len(times)\n",
      "    idx[[0, 1]] = idx[[1, 0]]\n    m, N = len(msg_names), len(times)\n",
      [RI + "test_trajectory_fuzz"]),
    M("tare_ignores_reading", "~/tare takes a zero bias instead of the current reading",
      "robot_dynamics/control/stages/estimation.py", "        self.wrench_proc.tare(self.wrench_raw, self.c.q)\n",
      "        self.wrench_proc.tare(np.zeros(6), self.c.q)\n",
      [LO + "test_tare_uses_the_current_reading"]),
    # ---- classic ones (caught before issue 15 too: kept so that stays true) ----
    M("rnea_coriolis_sign", "reference RNEA: sign of the Coriolis term c_i = v_i x S_i qd_i",
      "robot_dynamics/dynamics/reference/rnea.py", "        c = (ops.CS @ V) * v[ops.dof_of_row]",
      "        c = -(ops.CS @ V) * v[ops.dof_of_row]",
      ["test/test_dynamics_crosscheck.py"]),
    M("gravity_dropped", "gravity compensation commands zero instead of g(q)",
      "robot_dynamics/control/laws/gravity.py", "            tau[:] = self._g(q)\n", "            tau.fill(0.0)\n",
      ["test/test_control_laws.py"]),
    M("rate_clamp_removed", "the safety filter's rate clamp removed",
      "robot_dynamics/control/stages/safety.py", "        if _any(np.abs(delta, out=self._absd) > step):\n",
      "        if False:\n",
      [LO + "test_rate_limit_per_command_is_the_parameter_over_the_update_rate", "test/test_safety_filter.py"]),
    M("joint_names_swapped", "JointStateMapper: the first two joints swapped",
      "robot_dynamics/nodes/common.py",
      "        self._idx = np.array([pos[n] for n in self.names], dtype=np.intp)\n",
      "        self._idx = np.array([pos[n] for n in self.names], dtype=np.intp)\n"
      "        self._idx[[0, 1]] = self._idx[[1, 0]]\n",
      [RI + "test_joint_state_mapper_fuzz"]),
    # ---- issue 45: behaviour no test pinned (the whole suite passed with each) ----
    M("burst_steps_on_oldest", "the control path marks the oldest state of a queued burst as the one to step on",
      "robot_dynamics/nodes/control_path.py", "self.on_message(m, now, i == last)",
      "self.on_message(m, now, i == 0)",
      ["test/test_control_path.py::test_the_node_steps_on_the_newest_state_of_a_queued_burst"]),
    M("ik_stamp_dropped", "a Cartesian trajectory's stamp dropped by the IK conversion (joint laws start on receipt)",
      "robot_dynamics/control/ik_reference.py", "        jt.stamp = ctraj.stamp\n", "",
      ["test/test_ik_goals.py::test_a_stamped_cartesian_trajectory_starts_at_its_stamp",
       "test/test_trajectory_timing.py::test_cartesian_trajectory_for_a_joint_law_starts_at_its_stamp"]),
    M("node_cartesian_stamp_dropped", "the node drops ~/cartesian_trajectory's header.stamp for a joint law",
      "robot_dynamics/nodes/controller/inputs.py",
      "            return tr if c.cartesian else c.loop.references.cartesian_goal(tr)",
      "            return tr if c.cartesian else c.loop.references.cartesian_goal(setattr(tr, 'stamp', None) or tr)",
      ["test/test_trajectory_timing.py::test_cartesian_trajectory_for_a_joint_law_starts_at_its_stamp"]),
    M("hold_bound_off", "the loop's hold bound never binds (the gains whatever the hold)",
      "robot_dynamics/control/loop.py", "    HOLD_FREE = 1.5 ", "    HOLD_FREE = 1e9 ",
      ["test/test_hold_bound.py"]),
    M("ramp_from_frozen_torque", "the ramp after a trip starts from the torque last sent (no damped hold)",
      "robot_dynamics/control/loop.py", "        if self._damped_ramp:\n            self.damped_ramp()\n", "",
      ["test/test_hold_bound.py"]),
    M("law_exception_holds_torque", "a step whose law raises ramps from a dt of 0 (the last torque held)",
      "robot_dynamics/control/loop.py", "                cyc.last_pub = last_pub\n", "",
      ["test/test_control_loop.py::test_an_exception_in_the_law_ramps_to_the_safe_command_while_the_states_stay_fresh",
       "test/test_controller_node.py::test_timer_trigger_and_no_exception_escapes"]),
    M("stiction_blind_to_sensed_wrench", "the stiction term's pull leaves out the measured J^T w (it resists a hand)",
      "robot_dynamics/control/laws/base.py", "                fr.pull += ext\n", "                pass\n",
      ["test/test_friction.py::test_a_sensed_push_meets_the_stiction_as_the_law_would_without_friction"]),
    M("stiction_takes_estimated_wrench", "the stiction term takes the observer's wrench (it holds the friction too)",
      "robot_dynamics/control/laws/cartesian_impedance.py", ' and state.wrench_source == "sensor":', ":",
      ["test/test_friction.py::test_stiction_stays_within_the_identified_friction_and_only_a_sensed_wrench_enters_it"]),
    M("franka_bridge_drops_wrench", "the in-process Franka bridge does not subscribe to wrench_topic",
      "robot_dynamics/nodes/franka_in_process.py", '        if loop.law_name == "cartesian_impedance":\n',
      "        if False:\n",
      ["test/test_franka_in_process.py::test_dynamics_identification_in_process[urdf_inertials]"]),
    M("trajectory_velocity_unchecked", "a joint trajectory's velocities are not checked against the limits",
      "robot_dynamics/control/stages/references.py",
      "isinstance(ref, JointReference) else \\\n                    self.trajectory_velocity_check(ref)",
      'isinstance(ref, JointReference) else ""',
      ["test/test_streamed_reference.py::test_a_trajectory_past_the_velocity_limits_is_refused"]),
    M("trajectory_spline_unchecked", "only the velocities a trajectory's points give are checked, not its spline",
      "robot_dynamics/control/stages/references.py",
      "v_pk > lim * (1.0 + TRAJ_SPLINE_TOLERANCE)", "v_pk > np.inf",
      ["test/test_streamed_reference.py::test_a_trajectory_past_the_velocity_limits_is_refused"]),
]


def tracked_copy(dst):
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if not src.is_file():
            continue
        out = dst / f
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)
    # files not yet committed but present (work in progress) are copied too
    extra = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for f in filter(None, extra):
        src = ROOT / f
        if src.is_file():
            out = dst / f
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)


def check_entry(m):
    text = (ROOT / m.path).read_text()
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutation {m.id}: the text to replace occurs {n} times in {m.path} (must be 1); "
                         f"update the entry")


def run_one(m, domain, timeout):
    with tempfile.TemporaryDirectory(prefix=f"mut_{m.id}_") as d:
        d = Path(d)
        tracked_copy(d)
        f = d / m.path
        f.write_text(f.read_text().replace(m.old, m.new, 1))
        env = dict(os.environ, ROBOT_DYNAMICS_TEST_DOMAIN=str(domain), ROS_DOMAIN_ID=str(domain),
                   PYTHONPATH=str(d), PYTHONDONTWRITEBYTECODE="1")
        t0 = time.monotonic()
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                *m.tests], cwd=d, env=env, capture_output=True, text=True, timeout=timeout)
            out, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired:
            out, rc = "timeout", -1
        dt = time.monotonic() - t0
        last = [ln for ln in out.splitlines() if ln.strip()][-1:] or [""]
        caught = rc == 1 and ("failed" in last[0] or "error" in last[0])
        return caught, rc, dt, last[0][:90]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", default="", help="only mutations whose id contains this")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=float, default=900.0, help="per mutation [s]")
    ap.add_argument("--domain", type=int, default=90, help="first ROS_DOMAIN_ID used")
    a = ap.parse_args()
    muts = [m for m in MUTATIONS if a.k in m.id]
    for m in muts:
        check_entry(m)
    if a.list:
        for m in muts:
            print(f"{m.id:32s} {m.what}  [{', '.join(m.tests)}]")
        return 0
    rows = []
    for i, m in enumerate(muts):
        caught, rc, dt, last = run_one(m, a.domain + i % 10, a.timeout)
        rows.append((m, caught, rc, dt, last))
        print(f"{m.id}: {'caught' if caught else 'MISSED'} ({dt:.0f} s) {last}", flush=True)
    print()
    print("| mutation | bug | tests | result | s |")
    print("|---|---|---|---|--:|")
    for m, caught, rc, dt, last in rows:
        print(f"| {m.id} | {m.what} | {', '.join(Path(t.split('::')[0]).name for t in m.tests)} | "
              f"{'caught' if caught else '**MISSED**'} | {dt:.0f} |")
    missed = sum(not r[1] for r in rows)
    print(f"\n{len(rows) - missed} of {len(rows)} caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
