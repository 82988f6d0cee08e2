"""The Franka bridge's link to the controller node in topic mode (a mixin of nodes/franka_bridge.FrankaBridge):
the checks and hand-shakes over ROS services that decide when the controller's commands may reach the
robot (hardware/franka_loop.FrankaLoop applies them through its gate).

- `<controller>.compensate_gravity` is read from the controller node (GetParameters, every 0.5 s) and
  must be false: the Franka adds gravity itself.  Commands are applied only once it answered false, or
  after controller_check_timeout without an answer (warning; the dynamic gravity guard only).
- `~/recover` after a stop asks the controller's `~/hold` (again until it answers) and applies its
  commands only once they came down to the torque applied now (the controller then holds the arm
  where it is instead of driving it back to the target it had: issue 42).

Reads: the controller node's parameters and ~/hold answers, the commands (to see them settle).
Writes: the gate's permission and stops, the bridge's state and reason, `ctl_check`.  Runs on the
executor thread (timers, services) except `_hold_settled`, which the commands thread calls.
"""
import time

import numpy as np
from rcl_interfaces.srv import GetParameters
from std_srvs.srv import Trigger

from ..hardware.franka_commands import STOPPED, WAITING

CTL_CHECK_RETRY = 1.0        # s: a controller-parameter request unanswered this long is asked again


class ControllerLink:
    """Topic mode: the controller node's compensate_gravity check and ~/hold hand-shake (see the
    module docstring).  Needs self.robot (a FrankaLoop), self.p and the node's clients."""

    HOLD_TIMEOUT = 3.0       # s: the controller's ~/hold unanswered this long -> not resumed
    RESUME_TOLERANCE = 2.0   # N m: after the controller's ~/hold, its commands apply once this close to
                             # the torque applied (_hold_settled)
    RESUME_SETTLE = 3.0      # s: ... or the arm stays stopped
    HOLD_RETRY = 1.0         # s: ~/hold asked again after this long without an answer

    def _link_init(self):
        """The clients and the state of the check and the hand-shake (topic mode with controller_node)."""
        p = self.p
        self.ctl_check = "none" if (self.mode != "topic" or not p["controller_node"]) else "pending"
        self.ctl_check_since = time.monotonic()
        self.ctl_future = None
        self.ctl_sent = 0.0
        self.ctl_client = None
        if self.ctl_check == "pending":
            self.robot.gate.permitted = False
            self.ctl_client = self.create_client(GetParameters, p["controller_node"].rstrip("/") + "/get_parameters")
            self.create_timer(0.5, self._check_controller)
        # ~/recover first asks the controller to hold the arm where it is (its ~/hold), and applies its
        # commands only once it answered: a controller that kept the target it had when the bridge
        # stopped would otherwise drive the arm back toward it (issue 42: 55 rad/s)
        self.hold_client = None
        self.hold_wanted = False         # ~/recover asked for the controller's ~/hold, not answered yet
        self.hold_future = None
        self.hold_sent = 0.0
        self.hold_settle_until = None    # set once the controller holds: its commands still settling
        self.hold_worst = 0.0            # largest |command - applied| seen while they settle [N m]
        self.n_dropped_holding = 0
        if self.mode == "topic" and p["controller_node"]:
            self.hold_client = self.create_client(Trigger, p["controller_node"].rstrip("/") + "/hold")

    def _check_controller(self):
        """Topic mode: <controller>.compensate_gravity of the controller node must be false (the
        Franka adds gravity).  Asked every 0.5 s (a request unanswered for CTL_CHECK_RETRY is asked
        again); commands are applied only once it answered false (or after controller_check_timeout
        without an answer: warning, dynamic guard only)."""
        f = self.ctl_future
        if f is not None and not f.done():
            if time.monotonic() - self.ctl_sent < CTL_CHECK_RETRY:
                return
            # no answer: the request or its response was lost (rmw_fastrtps drops a response sent
            # before the client's reader is matched; the check then waited forever in a loaded run)
            self.ctl_client.remove_pending_request(f)
            self.ctl_future = f = None
        if f is not None:
            self.ctl_future = None
            try:
                vals = f.result().values
                law = vals[0].string_value
                names = ["gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance"]
                cg = vals[1 + names.index(law)].bool_value if law in names else False
            except Exception as e:        # noqa: BLE001  (a node without these parameters)
                law, cg = None, False
                self.get_logger().warning(f"cannot read {self.p['controller_node']}'s parameters: {e}",
                                          throttle_duration_sec=10.0)
            if cg:
                reason = (f"{self.p['controller_node']}: {law}.compensate_gravity is true, but the Franka "
                          "adds gravity itself (the arm would get it twice): set it false; commands refused")
                if self.robot.gate.state != STOPPED or self.robot.gate.reason != reason:
                    self.robot.n_guard += 1
                    self.get_logger().error(reason)
                self.robot.gate.permitted = False
                self.robot.gate.stop(reason, time.monotonic(), self.robot.q, self.robot.dq)
                self.ctl_check = "compensate_gravity true"
            else:
                if self.ctl_check != "ok":
                    self.get_logger().info(f"{self.p['controller_node']}: {law}.compensate_gravity false: OK")
                self.robot.gate.permitted = True          # a stopped gate still waits for ~/recover
                self.ctl_check = "ok"
        if self.ctl_client.service_is_ready():
            req = GetParameters.Request()
            req.names = ["controller"] + [f"{n}.compensate_gravity" for n in (
                "gravity_compensation", "computed_torque", "joint_impedance", "cartesian_impedance")]
            self.ctl_future = self.ctl_client.call_async(req)
            self.ctl_sent = time.monotonic()
        if self.ctl_check == "pending" and self.ctl_future is None and self.robot.gate.last_cmd_time is not None \
                and time.monotonic() - self.ctl_check_since > self.p["controller_check_timeout"]:
            self.get_logger().warning(f"no parameters from {self.p['controller_node']}: applying its commands "
                                      "without the compensate_gravity check (dynamic gravity guard only)")
            self.ctl_check = "unverified"
            self.robot.gate.permitted = True

    def _hold_note(self):
        return (f": resuming once {self.p['controller_node']}/hold answered (the controller then holds the arm "
                "where it is; the target it had is dropped) and its commands came down to the torque "
                "applied; until then the stop's damping" if self.hold_wanted else "")

    def _hold_settled(self, tau):
        """While the controller's commands settle after its ~/hold: True (resume, the gate blends them
        in) once a command is within RESUME_TOLERANCE of the torque applied now.  A law holding the arm
        where it rests commands about that (the Franka adds gravity; joint and Cartesian impedance,
        computed torque: zero error and speed), but its own torque-rate limit ramps its command down
        from the one it sent for the old target: those were blended in before and moved the arm
        (0.03 rad at 0.5 rad/s on franky-sim's aligned joints 1 and 3)."""
        d = float(np.max(np.abs(tau - self.robot.gate.applied)))
        if d >= self.RESUME_TOLERANCE:
            self.hold_worst = d
            return False
        if self.robot.gate.state == STOPPED:
            self.robot.gate.resume(time.monotonic())
        self.hold_settle_until = None
        self.robot.set_state(WAITING, f"resumed: {self.p['controller_node']} holds the arm where it is; "
                                      "its commands are blended in")
        return True

    def _ask_hold(self):
        """~/recover (topic mode): the controller's commands are not applied until it answered ~/hold
        (asked now and again until it does: a controller started later answers once active) and they
        came down to the torque applied (_hold_settled)."""
        self.hold_wanted = True
        self.hold_future = None
        self.hold_sent = 0.0
        self.robot.set_state(self.robot.state_name, f"resuming once {self.p['controller_node']}/hold answers")
        self._check_hold()

    def _check_hold(self):
        """Polled: ask the controller's ~/hold (again after HOLD_RETRY without an answer or after a
        refusal); on success its commands settle (_hold_settled), or, when they do not within
        RESUME_SETTLE, the arm stays stopped, saying why."""
        node = self.p["controller_node"]
        now = time.monotonic()
        until = self.hold_settle_until
        if until is not None and now > until:
            self.hold_settle_until = None
            why = (f"not resumed: {node}'s commands did not come within {self.RESUME_TOLERANCE} N m of the "
                   f"torque applied in {self.RESUME_SETTLE} s after its ~/hold (last: {self.hold_worst:.2f} "
                   "N m off)")
            self.robot.gate.stop(why, now, self.robot.q, self.robot.dq)
            self.robot.set_state(STOPPED, why + "; the arm stays stopped, ~/recover to try again")
            self.get_logger().error(self.robot.reason)
            return
        if not self.hold_wanted:
            return
        f = self.hold_future
        if f is None:
            if now - self.hold_sent < self.HOLD_RETRY:
                return
            if not self.hold_client.service_is_ready():
                self.robot.set_state(self.robot.state_name, f"resuming once {node}/hold answers (not available: "
                                     "is the controller running?); until then the stop's damping")
                return
            self.hold_future = self.hold_client.call_async(Trigger.Request())
            self.hold_sent = now
            return
        if not f.done():
            if now - self.hold_sent > self.HOLD_RETRY:      # lost, or a killed controller's stale entry
                self.hold_client.remove_pending_request(f)
                self.hold_future = None
            return
        self.hold_future = None
        try:
            res = f.result()
            ok, msg = bool(res.success), res.message
        except Exception as e:          # noqa: BLE001
            ok, msg = False, f"{type(e).__name__}: {e}"
        if ok:
            self.hold_wanted = False
            self.hold_worst = 0.0
            self.hold_settle_until = now + self.RESUME_SETTLE
            self.get_logger().info(f"{node}/hold: {msg}; its commands are applied once they are within "
                                   f"{self.RESUME_TOLERANCE} N m of the torque applied now")
        else:
            self.robot.set_state(self.robot.state_name, f"resuming once {node}/hold answers (it answered: "
                                 f"{msg}; asking again)")

