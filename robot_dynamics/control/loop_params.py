"""The loop's parameter table: validated at construction and on every live change (all-or-nothing), and
routed by prefix to the stage that owns it.  The specs themselves (names, defaults, checks, docs) are in
control/params.py (`loop_param_specs()`), the one source the controller node declares and documents.

Who owns what (the loop applies a live change to its owner only):
    <law>.*                                the law (law.set_params; other laws' keys validated only)
    effort_limits, effort_scale, torque_rate_limit, ramp_time, position_margin, position_stiffness,
    velocity_damping                       the safety filter (SAFETY_KEYS)
    safety.* but tank_capacity, time_scaling, joint_speed_stop
                                           the envelope (ENVELOPE_KEYS)
    safety.tank_capacity                   the shaping stage's energy tank
    safety.time_scaling, setpoint_shaping, ik.*   the references stage
    safety.joint_speed_stop, safety.stop_damping, watchdog_timeout, safe_command   the supervisor / output
    observer.*, sensor_frame, tool_*, wrench_*, effort_link_side   the estimation stage
    payload_id.*, dynamics_id.*            the runs
    controller, joints, backend, update_rate, log_throttle_period, armature, hold_bound   the loop itself
"""
import numpy as np

from .params import ENVELOPE_KEYS, SAFETY_KEYS, SIX_KEYS, Unset, check_value, loop_param_specs


def check(spec, v, n):
    """'' or why `v` is not a valid value of `spec` (n joints)."""
    if v is not None and spec.check is None:
        d = spec.default
        if isinstance(d, bool) and not isinstance(v, (bool, np.bool_)):
            return f"{spec.name}: expected true or false, got {v!r}"
        if isinstance(d, str) and not isinstance(v, str):
            return f"{spec.name}: expected a string, got {v!r}"
        if spec.name == "joints" and (isinstance(v, str) or not all(isinstance(x, str) for x in v)):
            return f"joints: expected a list of joint names, got {v!r}"
    return check_value(spec, v, 6 if spec.law_key in SIX_KEYS else n)


def envelope_value(key, v):
    if v is None:                                  # not set
        return "" if key == "safety.force_frame" else []
    return v


class LoopParams:
    """The table (`p`, name -> value, shared by the stages, read per step without a copy) and the
    conversions between the node's view (per-joint values in `joints` order) and the model's."""

    def __init__(self, params, nv_model):
        self.specs = {s.name: s for s in loop_param_specs()}
        params = dict(params or {})
        joints = list(params.get("joints") or [])
        if len(set(joints)) != len(joints):
            raise ValueError(f"joints: duplicate names in {joints}")
        p = {}
        for name, s in self.specs.items():
            v = params.get(name)
            if v is None:
                v = None if isinstance(s.default, Unset) else s.default
            if hasattr(v, "tolist"):
                v = v.tolist()
            err = check(s, v, len(joints) or nv_model)
            if err:
                raise ValueError(err)
            p[name] = v
        self.p = p
        self.joints = joints
        self.perm = None                           # cmd[k] = tau_model[perm[k]], set by bind()

    def bind(self, perm):
        self.perm = perm
        self.n = len(perm)

    def to_model_order(self, a):
        """A per-joint array in `joints` order -> model order (1 value: broadcast)."""
        a = np.asarray(a, dtype=float)
        if a.size == 1:
            return np.full(self.n, float(a[0]))
        out = np.empty(self.n)
        out[self.perm] = a
        return out

    def law_value(self, spec, v):
        if spec.check in ("per_joint", "per_joint_any"):
            a = np.asarray(v, dtype=float)
            if a.size == 1:
                return float(a[0])
            if spec.law_key in SIX_KEYS:
                return a.tolist()
            if a.size != self.n:
                return a.tolist()                      # the law names the wrong length
            return self.to_model_order(a).tolist()
        if isinstance(v, str) and spec.law_key == "frame":
            return v or None
        return v

    def law_params(self, law_name):
        return {s.law_key: self.law_value(s, self.p[name]) for name, s in self.specs.items()
                if s.law_key and name.startswith(law_name + ".") and self.p[name] is not None}

    def safety_value(self, key, v):
        if key == "effort_limits":
            return None if not v else self.to_model_order(v)
        return v

    def safety_params(self, period, fields):
        d = {SAFETY_KEYS[k]: self.safety_value(k, self.p[k]) for k in SAFETY_KEYS}
        if "command_period" in fields:
            d["command_period"] = period
        return d

    def envelope_params(self):
        return {ENVELOPE_KEYS[k]: envelope_value(k, self.p[k]) for k in ENVELOPE_KEYS}

    def sort(self, params, law_name):
        """Live changes {name: value} -> (errors, law, safety, envelope, plain) updates, each validated;
        keys of other laws validated only, keys that are not loop parameters ignored, parameters read at
        configure only rejected."""
        errors, law_updates, safety_updates, envelope_updates, plain = [], {}, {}, {}, {}
        for name, v in params.items():
            s = self.specs.get(name)
            if s is None:
                continue
            if hasattr(v, "tolist"):
                v = v.tolist()
            if s.law_key and not name.startswith(law_name + "."):
                err = check(s, v, self.n)         # another law: checked, used at reconfigure
                if err:
                    errors.append(err)
                continue
            if not s.live and name != "sensor_frame":
                if v != self.p.get(name):
                    errors.append(f"{name}: read at configure only (reconfigure to change it)")
                continue
            if v is None and name in ENVELOPE_KEYS:
                v = envelope_value(name, v)
            if v is None and name != "effort_limits":         # effort_limits unset: the URDF's
                errors.append(f"{name}: cannot be unset while configured")
                continue
            err = check(s, v, self.n)
            if err:
                errors.append(err)
                continue
            if s.law_key:
                law_updates[s.law_key] = self.law_value(s, v)
            elif name in SAFETY_KEYS:
                safety_updates[SAFETY_KEYS[name]] = self.safety_value(name, v)
            elif name in ENVELOPE_KEYS:
                envelope_updates[ENVELOPE_KEYS[name]] = v
            plain[name] = v
        return errors, law_updates, safety_updates, envelope_updates, plain
