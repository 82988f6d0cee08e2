"""The Franka bridge's robot side, without ROS: the protocol's 1 kHz loop over one `FrankaArm`
(franky / libfranka), from connect to the torque applied in every robot cycle.

`FrankaLoop` owns the arm, the model built at connect and, in `in_process` mode, the ControlLoop
(control/loop.py) it steps inside the robot's control callback; in `topic` mode the CommandGate and
GravityGuard (hardware/franka_commands.py) that decide what of an external controller's commands is
applied.  A front end (the ROS adapter nodes/franka_bridge.py, or a test, or a script) gives it its
parameters as plain values and a `sink` with these methods, called as noted:

    sink.log(level, text)                  level 'info' / 'warn' / 'error'; any thread
    sink.publish_state(q, dq, tau_J, t)    every robot cycle (libfranka's thread), and from
                                           `publish_idle_state` while no torque motion runs
    sink.publish_description(urdf)         once, at connect (the model's URDF)
    sink.loop_state(tau, info, safe)       in_process, every cycle, under the loop's lock: the loop's
                                           command (robot order), its info and whether it was safe
    sink.loop_command(tau)                 in_process, every cycle, after it: the command (robot order)
    sink.loop_built(loop)                  in_process, once the ControlLoop exists (declare its
                                           parameters, references, services); start-up thread
    sink.freeze_gc()                       once start-up built everything (rt_gc_mode)

Reads: the robot state every cycle (q, dq, tau_J, time); the commands handed to `command()`
(topic mode).  Writes: the torque set in each cycle (applied by the robot in the next one), the
state name and reason, counters (cycles, lost cycles, errors, guard trips, latency records).
Guarantees: the robot is sent torques WITHOUT gravity (the Franka adds g(q): the loop is built with
compensate_gravity and a gravity safe command forced off); every (re)start of the torque motion is
from zero torque, the loop ramping from zero and holding where the arm is (a reference handed over
meanwhile is dropped); a model that fails the cross-check against the robot's own is refused (no
torque control, the reason in `reason`); an exception in the callback never reaches libfranka (the
arm's callback_error, reported by `poll()`).  Times: robot time (the state's `time`) in the
callback and for the loop; `time.monotonic()` for the gate and the supervision.
"""
import threading
import time

import numpy as np

from ..dynamics import Model, PinocchioBackend
from . import franka as fh
from .franka_commands import ERROR, IDLE, REFUSED, RUNNING, STOPPED, WAITING, CommandGate, GravityGuard, guard_reason

N = fh.N
MODES = ("topic", "in_process")


def loop_overrides(given, joints, warn):
    """The in-process ControlLoop's parameters from those given (the controller's file): gravity
    compensation and a gravity safe command forced off (the Franka adds g(q)), the robot's joints and
    rate.  `warn(text)` says what was overridden.  Returns a new dict of plain values."""
    over = dict(given)
    for name in [n for n in over if n.endswith(".compensate_gravity")]:
        if over.get(name):
            warn(f"{name}: true ignored: the Franka adds gravity itself (in_process forces it false)")
    from ..control.params import loop_param_specs
    for name in [sp.name for sp in loop_param_specs() if sp.name.endswith(".compensate_gravity")]:
        over[name] = False
    if over.get("safe_command") == "gravity":
        warn("safe_command: gravity ignored: the Franka adds gravity (zero used)")
    over["safe_command"] = "zero"
    over["joints"] = list(joints)
    over["update_rate"] = 1000.0                      # the robot's rate
    for k in list(over):
        if hasattr(over[k], "tolist"):
            over[k] = over[k].tolist()
        elif isinstance(over[k], (list, tuple)) or type(over[k]).__name__ == "array":
            over[k] = list(over[k])
    return over


class FrankaLoop:
    """See the module docstring.  `p`: the bridge parameters (nodes/franka_bridge.PARAMETERS) as a
    dict; `loop_params`: the in-process loop's parameters given (ignored in topic mode)."""

    def __init__(self, p, sink, loop_params=None, arm=None):
        self.p, self.sink = p, sink
        if p["mode"] not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {p['mode']!r}")
        self.mode = p["mode"]
        self.joints = list(p["joints"])
        if len(self.joints) != N:
            raise ValueError(f"joints: 7 names expected, got {self.joints}")
        self.loop_params = dict(loop_params or {})
        self.lock = threading.Lock()
        self.state_name, self.reason = IDLE, "connecting"
        self.last_error = ""
        self.n_errors = 0
        self.n_guard = 0
        self.n_commands = 0
        self.check = None
        self.model = self.backend = self.urdf = None
        self.index = None
        self._vlim = None                # the model's joint velocity limits, robot order
        self.q = self.dq = self.tau_J = None
        self.t_robot = None
        self.t_state_pub = None          # robot time of the last published state
        self.pending = None              # robot time of the state a just-set command answers
        self.latency = []                # (robot time of the state, robot time of the applying cycle)
        self.n_superseded = 0
        self.loop = None                 # in-process ControlLoop
        self.loop_lock = threading.Lock()
        self._qm, self._vm, self._em = np.zeros(N), np.zeros(N), np.zeros(N)
        self.guard = GravityGuard()
        self.gate = CommandGate(p["command_timeout"], p["ramp_time"], p["stop_damping"])
        self.gravity_checked_false = False   # topic mode: the controller reported compensate_gravity false
        self.arm = arm or fh.FrankaArm(p["robot_ip"], realtime=p["realtime"], signal_timeout=p["signal_timeout"],
                                       max_delta_tau=p["max_delta_tau"], on_cycle=self._on_cycle)

    def set_state(self, state, reason=""):
        with self.lock:
            self.state_name, self.reason = state, reason

    def _fail(self, state, reason):
        self.set_state(state, reason)
        self.sink.log("error", reason)

    # ---- start-up (its own thread) ----
    def connect_and_start(self, keep_trying=lambda: True):
        """Connect (retried until connect_timeout while the error says a retry may help and
        `keep_trying()`), set the payload, load and cross-check the model, build the in-process loop,
        and start torque control (autostart) or wait for `start_motion`.  A failure leaves the state
        `error` or `refused` with what to change."""
        p = self.p
        if p["realtime"]:
            rt, found = fh.realtime_kernel()
            if not rt:      # libfranka refuses such a kernel once the robot answers: say so now
                self.sink.log("warn", f"realtime: true, but this kernel is not real-time ({found}): "
                                      f"libfranka will refuse the connection; {fh.REALTIME_HINT}")
        t_end = time.monotonic() + p["connect_timeout"]
        warned = False
        while True:
            try:
                self.arm.connect()
                break
            except Exception as e:
                retry, hint = fh.connect_error_hint(e, p["robot_ip"], p["realtime"])
                if not retry or time.monotonic() > t_end or not keep_trying():
                    self._fail(ERROR, f"cannot connect: {hint}")
                    return
                if not warned:      # the robot may still be booting: retried, but the user sees why
                    warned = True
                    self.set_state(IDLE, f"connecting, retried until connect_timeout "
                                         f"({p['connect_timeout']} s): {hint}")
                    self.sink.log("warn", self.reason)
                time.sleep(0.5)
        try:        # always: 0 kg clears a load set before (the robot keeps it across connections)
            m, c, inertia = fh.payload(p["load_mass"], p["load_com"], p["load_inertia"])
            self.arm.robot.set_load(m, c.tolist(), inertia.tolist())
            # the model is built from the state's m_total: wait for a state that has the payload (one
            # read right after setLoad may still be the one before: a URDF without it was published)
            t_end = time.monotonic() + 2.0
            while abs(float(self.arm.state.m_load) - m) > 1e-4:     # float32 on the wire
                if time.monotonic() > t_end:
                    raise RuntimeError(f"the robot state reports m_load {float(self.arm.state.m_load)} kg "
                                       f"2 s after setLoad({m} kg)")
                time.sleep(0.005)
        except Exception as e:
            self._fail(REFUSED, f"payload: {type(e).__name__}: {e}")
            return
        if m > 0.0:
            self.sink.log("info", f"payload: {m} kg, centre of mass {c.tolist()} m in the flange frame")
        try:
            self.load_model()
        except Exception as e:
            self._fail(REFUSED, f"model: {type(e).__name__}: {e}")
            return
        self.sink.log("info", self.check.message())
        if not self.check.ok:
            self._fail(REFUSED, self.check.message())
            return
        if self.mode == "in_process":
            try:
                self.build_loop()
            except Exception as e:
                self._fail(REFUSED, f"control loop: {type(e).__name__}: {e}")
                return
        self.sink.freeze_gc()
        if p["autostart"]:
            self.start_motion()
        else:
            self.set_state(IDLE, "connected; call ~/recover to start torque control")

    def load_model(self):
        """The model (robot_description, urdf_path, else the robot's own URDF with its end effector),
        its joint index, the cross-check against robot.model; the URDF goes to the sink."""
        p = self.p
        state = self.arm.state
        if p["robot_description"]:
            urdf = p["robot_description"]
        elif p["urdf_path"]:
            with open(p["urdf_path"]) as f:
                urdf = f.read()
        else:
            ee = tcp = None
            if p["add_end_effector"]:
                ee = fh.end_effector(state)
                tcp = fh.affine_matrix(state.F_T_EE)
            urdf, _ = fh.prepare_urdf(self.arm.robot.model_urdf, self.joints, ee=ee, tcp=tcp,
                                      prefix=self.joints[0].rsplit("joint", 1)[0])
        model = Model.from_urdf_string(urdf)
        missing = [j for j in self.joints if j not in model.joint_names]
        if missing or model.nv != N:
            raise ValueError(f"the model's joints {model.joint_names} are not the 7 `joints` {self.joints}")
        self.model, self.urdf = model, urdf
        self.backend = PinocchioBackend(model)
        self.index = np.array([model.joint_names.index(j) for j in self.joints])
        self._vlim = np.asarray(model.velocity_limits, float)[self.index]
        tol = fh.CrossCheckTolerance(p["cross_check_gravity_tol"], p["cross_check_mass_tol"],
                                     p["cross_check_coriolis_tol"])
        self.check = fh.cross_check(self.backend, self.arm.robot.model, np.asarray(state.q),
                                    fh.end_effector(state), self.index, tol, n=p["cross_check_configs"],
                                    spread=p["cross_check_spread"])
        if p["publish_robot_description"]:
            self.sink.publish_description(urdf)

    def build_loop(self):
        """in_process: the ROS-free ControlLoop from the loop parameters given (loop_overrides)."""
        from ..control.loop import ControlLoop
        over = loop_overrides(self.loop_params, self.joints, lambda text: self.sink.log("warn", text))
        self.loop = ControlLoop.from_params(self.model, over, log=self.sink.log)
        self.loop_params = over
        self.sink.loop_built(self.loop)
        self.sink.log("info", f"in_process: {over.get('controller', 'gravity_compensation')} in the robot's "
                              "control callback")

    # ---- torque motion ----
    def _loop_activate(self):
        """(Re)start: the torque motion starts from zero torque, so the loop ramps from zero."""
        with self.loop_lock:
            self.loop.deactivate()
            self.loop.safety.reset(start=np.zeros(N))
            self.loop.activate()
            # the law holds where the arm is (activate): a reference or pose target handed over before
            # (while stopped, or the one the arm was following) is not followed afterwards
            self.loop.references.pending = None
            self.loop.references.pose_target = None

    def start_motion(self):
        """(Re)start torque control from zero torque (the gate waits for commands in topic mode)."""
        self.gate.restart()
        self.guard.reset()
        if self.loop is not None:
            self._loop_activate()
        self.arm.start()
        self.set_state(RUNNING if self.mode == "in_process" else WAITING,
                       "torque control on" if self.mode == "in_process" else "waiting for commands")

    # ---- the robot's control callback (libfranka's thread) ----
    def _on_cycle(self, state, t):
        q = np.asarray(state.q)
        dq = np.asarray(state.dq)
        tau_J = np.asarray(state.tau_J)
        if self.pending is not None:
            if self.p["record_latency"]:
                self.latency.append((self.pending, t))
            self.pending = None
        tau = None
        if self.loop is not None:
            tau = self._loop_cycle(q, dq, tau_J, t)
        self._state(q, dq, tau_J, t)
        if self.loop is not None:
            if tau is not None:
                self.pending = t
            return tau
        out = self.gate.on_cycle(dq, time.monotonic(), q)
        if out is None and self.gate.last_cmd_time is not None \
                and time.monotonic() - self.gate.last_cmd_time > 0.02:
            out = self.gate.applied      # keep franky's watchdog fed between late commands
        return out

    def _loop_cycle(self, q, dq, tau_J, t):
        """The law, safety filter and supervisor on this cycle's state (robot time t; the measured
        joint torques tau_J as the state's effort, which the identification runs take); the torque is
        applied in the next robot cycle."""
        loop = self.loop
        qm, vm, em = self._qm, self._vm, self._em
        qm[self.index] = q
        vm[self.index] = dq
        em[self.index] = tau_J
        with self.loop_lock:
            loop.update_state(qm, vm, t, effort=em)
            tau_m, safe = loop.step(t)
            tau = tau_m[self.index]
            self.sink.loop_state(tau, loop.info, safe)
        self.sink.loop_command(tau)
        return tau

    def _state(self, q, dq, tau_J, t):
        self.q, self.dq, self.tau_J, self.t_robot = q, dq, tau_J, t
        self.t_state_pub = t
        self.sink.publish_state(q, dq, tau_J, t)

    def publish_idle_state(self):
        """Without a torque motion (refused, idle, after an error) the state is still read from the
        robot and handed to the sink (the caller's timer)."""
        arm = self.arm
        if arm.robot is None or arm.motion is not None or self.state_name == RUNNING:
            return
        try:
            st = arm.robot.state
        except Exception:              # noqa: BLE001  (connection lost: reported by ~/recover)
            return
        self._state(np.asarray(st.q), np.asarray(st.dq), np.asarray(st.tau_J), st.time.to_sec())

    # ---- topic mode: the controller's commands ----
    def command(self, tau, now):
        """A controller's command (7 torques, robot order, without gravity): the gravity guard, then
        the gate; what the gate passes is set on the motion.  Returns None when applied or held back
        by the gate, else why it was refused ('invalid' or the guard's stop reason)."""
        if tau.shape != (N,) or not np.all(np.isfinite(tau)):
            self.gate.n_rejected += 1
            return "invalid"
        if self.p["gravity_guard"] and self.q is not None and self.gate.state == RUNNING:
            qm = np.empty(N)
            qm[self.index] = self.q
            g = self.backend.gravity(qm)[self.index]
            if self.guard.check(tau, g, self.dq, now):
                self.n_guard += 1
                reason = guard_reason(self.guard.ratio, self.dq, self.gravity_checked_false,
                                      self.p["controller_node"], self._vlim)
                self.gate.stop(reason, now, self.q, self.dq)
                self.guard.reset()
                return reason
        out = self.gate.on_command(tau, now)
        if out is not None:
            self.arm.set_torque(out)
            if self.pending is not None:
                self.n_superseded += 1
            self.pending = self.t_state_pub
        return None

    # ---- supervision (the caller's timer) ----
    def poll(self):
        """The robot's errors (the motion ended: state error) and, in topic mode, the gate's state
        (stopped / running) into the state name.  Returns (level, text) to log, or None."""
        if self.arm.robot is None or self.arm.motion is None:
            return None
        err = self.arm.poll()
        if self.arm.callback_error:
            # an exception in the control callback: no torque was set in that cycle, so a run of them
            # ends the motion by franky's signal timeout; the exception is the cause to report
            cb = "control callback: " + self.arm.callback_error
            self.arm.callback_error = None
            err = cb if err is None else f"{err} (after {cb})"
        if err is not None:
            self.n_errors += 1
            self.last_error = err
            self.set_state(ERROR, f"robot error: {err}; call ~/recover")
            return "error", self.reason
        if self.mode == "topic":
            g = self.gate
            if g.state == STOPPED and self.state_name != STOPPED:
                self.set_state(STOPPED, g.reason + "; call ~/recover to resume")
                return "error", self.reason
            if g.state == RUNNING and self.state_name != RUNNING:
                self.set_state(RUNNING, "applying commands")
                return "info", (f"applying the commands of {self.p['command_topic']} "
                                f"({self.n_commands} received so far)")
        return None

    def diagnostics_values(self):
        """{key: value} of the robot side now (state, counters, stop pose, cross-check figures)."""
        d = {"state": self.state_name, "reason": self.reason, "mode": self.mode, "robot_ip": self.p["robot_ip"],
             "cycles": self.arm.n_cycles, "lost_cycles": self.arm.n_lost, "commands": self.n_commands,
             "rejected_commands": self.gate.n_rejected, "watchdog_trips": self.gate.n_watchdog,
             "gravity_guard_trips": self.n_guard}
        return d

    def stop_values(self):
        """Where the arm was and how fast it went when the last stop came (robot order; '' before any)."""
        return {"stop_q": _floats(self.gate.stop_q), "stop_dq": _floats(self.gate.stop_dq)}

    def check_values(self):
        c = self.check
        if c is None:
            return {}
        return {"cross_check_gravity": c.gravity, "cross_check_mass": c.mass, "cross_check_coriolis": c.coriolis,
                "cross_check_ok": c.ok}

    def close(self):
        self.arm.close()


def _floats(x):
    return "" if x is None else " ".join(f"{v:.5f}" for v in x)
