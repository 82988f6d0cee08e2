"""The torque controller node's services (~/hold, ~/tare, the payload identification ones), its
parameter validation (every value checked by the control loop's rules; the live ones handed to the
ControlLoop whole), and /diagnostics.  A mixin of TorqueControllerNode: all run on the executor thread
and take the node's lock only to hand a change to the loop or to read its figures."""
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import InertiaStamped
from rcl_interfaces.msg import SetParametersResult

from ... import realtime
from ...control.params import SIX_KEYS
from ..common import REJECT_REASONS, SILENT_AFTER, check_value, silent_publisher_hint, trigger_handler
from .params import LOOP_PARAM_NAMES

DIAG_LEVELS = {0: DiagnosticStatus.OK, 1: DiagnosticStatus.WARN, 2: DiagnosticStatus.ERROR}


class ControllerServices:
    """Services, parameters and diagnostics of the controller node (see the module docstring)."""

    # ---------------------------------------------------------------- services
    def _trigger(self, name, action):
        """A std_srvs/Trigger handler: `action(c)` (c: the configured state or None) runs under the
        node's lock and returns (success, message); an exception is answered and counted as
        errors.<name>, never raised into the executor."""
        def counted(e):
            self.counts[f"errors.{name}"] += 1
        return trigger_handler(self._lock, lambda: action(self.c), counted)

    def _trigger_services(self):
        """(service name, Trigger handler) of ~/hold, ~/tare, ~/resume, the payload identification services and
        the dynamics identification ones (identify returns at once: the runs advance with the control
        steps)."""
        def hold(c):
            if c is None or not self.active:
                return False, "not active with a valid joint state"
            return c.loop.hold()

        def tare(c):
            if c is None:
                return False, "no wrench processing (configure with cartesian_impedance)"
            return c.loop.estimation.tare()

        def payload(what):
            def action(c):
                if c is None:
                    return False, "not configured"
                loop = c.loop
                if what == "identify":
                    if not self.active:
                        return False, "refused: the controller is not active"
                    return loop.runs.start_payload_id(time.monotonic())
                if what == "status":
                    return loop.runs.payload_status()
                if what == "cancel":
                    return loop.runs.cancel_payload_id()
                ok, message = loop.runs.attach_payload_estimate() if what == "attach" else loop.runs.detach_payload_estimate()
                if ok:
                    self._log.info(f"payload: {message}")
                return ok, message
            return self._trigger(f"payload_{what}", action)

        def dynamics(what):
            def action(c):
                if c is None:
                    return False, "not configured"
                if what == "identify" and not self.active:
                    return False, "refused: the controller is not active"
                return c.loop.runs.dynamics_request(what, time.monotonic())
            return self._trigger(f"dynamics_{what}", action)

        def resume(c):
            if c is None:
                return False, "not configured"
            return c.loop.resume()

        return [("~/tare", self._trigger("tare", tare)), ("~/hold", self._trigger("hold", hold)),
                ("~/resume", self._trigger("resume", resume)),
                ("~/identify_dynamics", dynamics("identify")), ("~/identify_dynamics_status", dynamics("status")),
                ("~/cancel_dynamics_identification", dynamics("cancel")),
                ("~/identify_payload", payload("identify")), ("~/identify_payload_status", payload("status")),
                ("~/cancel_payload_identification", payload("cancel")), ("~/attach_payload", payload("attach")),
                ("~/detach_payload", payload("detach"))]

    def _publish_payload(self, run):
        """~/payload_estimate (latched) of a successful run."""
        self._payload_published = run
        e = run.estimate
        msg = InertiaStamped()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = e.frame
        msg.inertia.m = float(e.mass)
        msg.inertia.com.x, msg.inertia.com.y, msg.inertia.com.z = (float(x) for x in e.com)
        if e.inertia is not None:
            I = e.inertia
            i = msg.inertia
            i.ixx, i.ixy, i.ixz, i.iyy, i.iyz, i.izz = (float(I[0, 0]), float(I[0, 1]), float(I[0, 2]),
                                                        float(I[1, 1]), float(I[1, 2]), float(I[2, 2]))
        self._payload_pub.publish(msg)

    # ---------------------------------------------------------------- parameters
    def _on_set_parameters(self, params):
        try:
            return self._set_parameters(params)
        except Exception as e:                         # noqa: BLE001 (nothing may escape a callback)
            self.counts["errors.parameters"] += 1
            return SetParametersResult(successful=False, reason=f"{type(e).__name__}: {e}")

    def _set_parameters(self, params):
        """Every value is checked here (ROS-side rules); while configured, the live ones of the control
        loop go to ControlLoop.set_params, which applies them all or none."""
        c = self.c
        n = c.n if c is not None else (len(self._p("joints") or []) or None)
        errors, loop_updates = [], {}
        for p in params:
            spec = self._specs.get(p.name)
            if spec is None:
                continue
            v = p.value
            if hasattr(v, "typecode") or isinstance(v, tuple):
                v = list(v)
            if p.name == "joints" and v is not None and len(set(v)) != len(v):
                errors.append(f"joints: duplicate names in {v}")
                continue
            err = check_value(spec, v, n if spec.law_key not in SIX_KEYS else 6)
            if err:
                errors.append(err)
                continue
            if c is not None and not spec.live and p.name != "sensor_frame" and \
                    v != self._p(p.name):
                # read at configure (JointTrajectoryController's read-only parameters): a change now would
                # be answered "successful" while the node goes on with the old value
                errors.append(f"{p.name} is read at configure and the node is configured "
                              f"({self.lifecycle_state}): deactivate, cleanup, set it, configure again")
                continue
            if c is not None and p.name in LOOP_PARAM_NAMES and (spec.live or p.name == "sensor_frame"):
                loop_updates[p.name] = v
        if errors:
            return SetParametersResult(successful=False, reason="; ".join(errors))
        if loop_updates:
            with self._lock:
                ok, reason = c.loop.set_params(loop_updates)
            if not ok:
                return SetParametersResult(successful=False, reason=reason)
            if any(k.startswith("safety.") for k in loop_updates):
                c.out.safety_markers(c.loop, c.model.frame_names[0])
        return SetParametersResult(successful=True)

    # ---------------------------------------------------------------- diagnostics
    _js_silent_since = None
    _js_silent_logged = -1e9

    def _silent_js(self, now, sub):
        """Active without a joint state: once publishers are in the graph and nothing came for
        SILENT_AFTER s, say the likely cause (every 30 s)."""
        pubs = sub.get_publisher_count()
        if not pubs:
            self._js_silent_since = None
            return
        if self._js_silent_since is None:
            self._js_silent_since = now
        elif now - self._js_silent_since >= SILENT_AFTER and now - self._js_silent_logged >= 30.0:
            self._js_silent_logged = now
            self._log.warn(silent_publisher_hint(sub.topic_name, pubs, now - self._js_silent_since))

    def _publish_diagnostics(self):
        now = time.monotonic()
        window = max(now - self._diag_last, 1e-9)
        self._diag_last = now
        # the node's name, with its namespace when it has one (a cell's arms: left/torque_controller)
        st = DiagnosticStatus(name=f"{self.get_fully_qualified_name().lstrip('/')}: torque controller",
                              hardware_id="")
        kv = [("lifecycle_state", self.lifecycle_state)]
        if self.get_parameter("use_sim_time").value:
            ns = self._clock_handle.get_now().nanoseconds
            kv.append(("sim_time", f"{ns * 1e-9:.3f}" if ns else "no /clock received yet"))
        c = self.c
        level, msg = DiagnosticStatus.OK, "ok"
        if c is None:
            level = DiagnosticStatus.ERROR if self.config_error else DiagnosticStatus.WARN
            msg = f"not configured: {self.config_error}" if self.config_error else "not configured"
        else:
            with self._lock:
                steps, lat_sum, lat_max = c.stats_steps, c.stats_lat_sum, c.stats_lat_max
                c.stats_steps, c.stats_lat_sum, c.stats_lat_max = 0, 0.0, 0.0
                st.hardware_id = c.model.name
                kv += [("controller", c.law_name), ("robot", c.model.name), ("model_source", c.source),
                       ("joints", ",".join(c.joints)), ("trigger", self._p("trigger")),
                       ("loop_rate_hz", f"{steps / window:.1f}"),
                       ("step_latency_mean_us", f"{1e6 * lat_sum / steps:.1f}" if steps else "nan"),
                       ("step_latency_max_us", f"{1e6 * lat_max:.1f}" if steps else "nan"),
                       ("model_warnings", str(len(c.model.warnings)))]
                kv += [(f"model_warning.{i}", w) for i, w in enumerate(c.model.warnings)]
                kv += [(f"control_path.{k}", str(v)) for k, v in c.path.stats().items()]
                kv.append(("control_path.cdr_fallbacks", str(c.cdr_fallbacks)))
                kv.append(("cdr_reference_fallbacks", str(self.cdr_reference_fallbacks)))
                lvl, msg, loop_kv = c.loop.diagnostics()
                level = DIAG_LEVELS[lvl]
                kv += loop_kv
                lost = self._partner_lost(c)          # a cell's partner arm lost (partners.py)
                if lost and level == DiagnosticStatus.OK:
                    level, msg = DiagnosticStatus.WARN, lost
                if not self.active:
                    level, msg = DiagnosticStatus.OK, "inactive"
                silent = self.active and not c.loop.cycle.have_state
            if silent:                                    # active, and no joint state ever came
                self._silent_js(now, c.js_sub)
            else:
                self._js_silent_since = None
        for r in REJECT_REASONS:
            kv.append((f"rejected.joint_states.{r}", str(self.counts[f"rejected.joint_states.{r}"])))
        total = sum(v for k, v in self.counts.items() if k.startswith("rejected.joint_states."))
        kv.append(("rejected.joint_states", str(total)))
        if self.rt_report is not None:
            kv += realtime.diagnostics_values(self.rt_report)
        for k, v in sorted(self.counts.items()):
            if not k.startswith("rejected.joint_states.") and k != "watchdog_trips":
                kv.append((k, str(v)))
        st.level, st.message = level, msg
        st.values = [KeyValue(key=k, value=v) for k, v in kv]
        arr = DiagnosticArray(status=[st])
        arr.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(arr)
