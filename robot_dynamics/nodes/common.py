"""Helpers shared by the rclpy nodes: parameter tables, executor and QoS choices, JointState -> numpy
name mapping, message conversions.  Everything here is plain Python / numpy plus rclpy classes; no
node state.

Conventions (see DESIGN.md): vectors handed to the control layer are in model order
(`model.joint_names`); vectors the user sees (commands, per-joint gains, the controller-state topic)
are in the order of the node's `joints` parameter.
"""
import math
import os
from array import array
from dataclasses import dataclass

import numpy as np
from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from ..control.params import Unset
from ..control.params import check_value as _check_value
from .processes import udp_loopback_env

# ------------------------------------------------------------------------------------------------
# executor and QoS choices (the controller and echo nodes offer the same ones)
# ------------------------------------------------------------------------------------------------
EXECUTORS = ("single", "multi", "events")
RELIABILITIES = ("reliable", "best_effort")


def make_executor(name, num_threads=None):
    """'single' -> SingleThreadedExecutor, 'multi' -> MultiThreadedExecutor, 'events' ->
    rclpy.experimental.EventsExecutor (measure it first: see bench/latency.py)."""
    from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
    if name == "single":
        return SingleThreadedExecutor()
    if name == "multi":
        return MultiThreadedExecutor(num_threads=num_threads)
    if name == "events":
        from rclpy.experimental import EventsExecutor
        return EventsExecutor()
    raise ValueError(f"executor: expected one of {EXECUTORS}, got {name!r}")


def trigger_handler(lock, action, on_error=None):
    """A std_srvs/Trigger handler: `action()` -> (success, message) runs under `lock`; an exception is
    answered (success false, its type and text), handed to `on_error`, never raised into the executor."""
    def handler(request, response):
        try:
            with lock:
                ok, msg = action()
        except Exception as e:                         # noqa: BLE001
            if on_error is not None:
                on_error(e)
            ok, msg = False, f"{type(e).__name__}: {e}"
        response.success, response.message = bool(ok), str(msg)
        return response
    return handler


SILENT_AFTER = 20.0      # s a matched publisher may stay silent before the node names the likely cause


def udp_only_env(env=None):
    """The environment changes ({name: value, None to unset}) that put a process on Fast DDS's UDP
    transport alone, given its environment `env` (default: this process's).  Under ROS_LOCALHOST_ONLY=1
    or ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST rmw_fastrtps (Jazzy) chooses the transports itself,
    shared memory included, and FASTDDS_BUILTIN_TRANSPORTS or a profile's transports are ignored (seen:
    the process still opened its fastrtps_port files): there, the SUBNET range and the package's
    loopback-only UDP profile, which keeps discovery on this host as the user asked."""
    env = os.environ if env is None else env
    if env.get("ROS_LOCALHOST_ONLY") == "1" or env.get("ROS_AUTOMATIC_DISCOVERY_RANGE") == "LOCALHOST":
        return udp_loopback_env()
    return {"FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}


def udp_only_advice(env=None):
    """`udp_only_env(env)` as a sentence a user can act on."""
    change = udp_only_env(env)
    parts = [f"{k} unset" if v is None else f"{k}={v}" for k, v in change.items()]
    why = (" (under ROS_LOCALHOST_ONLY or the LOCALHOST range rmw_fastrtps ignores FASTDDS_BUILTIN_TRANSPORTS)"
           if "FASTRTPS_DEFAULT_PROFILES_FILE" in change else "")
    return f"start this node with {', '.join(parts)}{why}, or restart the publisher"


def silent_publisher_hint(topic, publishers, seconds, env=None):
    """What a node says when `publishers` (> 0) of `topic` are in its graph and nothing has come for
    `seconds`: a publisher that sends nothing, or the one cause seen here (a process killed on this
    host, then restarted: Fast DDS over shared memory delivered nothing to the new process for
    minutes, eProsima/Fast-DDS#5053) and what works around it in this process's environment."""
    return (f"{publishers} publisher(s) of {topic} in the graph and nothing received for {seconds:.0f} s: the "
            "publisher sends nothing, or, after a process on this host was killed (kill -9, a crash), Fast "
            "DDS's shared-memory transport stays silent toward a restarted reader (eProsima/Fast-DDS#5053): "
            + udp_only_advice(env))


def make_qos(reliability="reliable", depth=10):
    """KEEP_LAST(depth) with the given reliability ('reliable' or 'best_effort'), volatile."""
    if reliability not in RELIABILITIES:
        raise ValueError(f"qos_reliability: expected one of {RELIABILITIES}, got {reliability!r}")
    depth = int(depth)
    if depth < 1:
        raise ValueError(f"qos_depth: must be >= 1, got {depth}")
    rel = ReliabilityPolicy.RELIABLE if reliability == "reliable" else ReliabilityPolicy.BEST_EFFORT
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=rel)


# ------------------------------------------------------------------------------------------------
# parameter tables
# ------------------------------------------------------------------------------------------------


@dataclass
class ParamSpec:
    """One declared parameter.  `default` is a value, or a Parameter.Type for "not set" (an array
    whose default comes from elsewhere: the URDF, the law).  `check` names the validation rule:
    'nonneg', 'positive', 'finite', 'choices', 'per_joint' (1 or len(joints) numbers >= 0),
    'per_joint_any' (1 or len(joints) finite numbers), 'vec3', 'vec2_nonneg', or None.
    `live`: changeable while configured (applied at once); otherwise read at configure only.
    """
    name: str
    default: object
    description: str
    check: str = None
    choices: tuple = ()
    live: bool = False
    read_only: bool = False
    law_key: str = None          # for law parameters: the key in the law's params dict
    startup: bool = False        # read once when the node is created

    @property
    def type_name(self):
        if isinstance(self.default, Parameter.Type):
            return {Parameter.Type.DOUBLE: "double", Parameter.Type.DOUBLE_ARRAY: "double[]",
                    Parameter.Type.STRING_ARRAY: "string[]", Parameter.Type.INTEGER_ARRAY: "int[]"}.get(self.default, str(self.default))
        if isinstance(self.default, bool):
            return "bool"
        if isinstance(self.default, int):
            return "int"
        if isinstance(self.default, float):
            return "double"
        if isinstance(self.default, str):
            return "string"
        if isinstance(self.default, (list, tuple)):
            return "double[]" if all(isinstance(x, float) for x in self.default) else "string[]"
        return type(self.default).__name__

    def default_text(self):
        if isinstance(self.default, Parameter.Type):
            return "(not set)"
        if isinstance(self.default, str):
            return repr(self.default)
        return str(list(self.default) if isinstance(self.default, tuple) else self.default)

    def descriptor(self):
        d = ParameterDescriptor(description=self.description, read_only=self.read_only)
        extra = []
        if self.choices:
            extra.append("one of " + ", ".join(self.choices))
        if self.check in ("per_joint", "per_joint_any"):
            extra.append("1 value (all joints) or one per joint in `joints` order")
        if self.startup:
            extra.append("read at start-up")
        elif not self.live and not self.read_only:
            extra.append("read at configure")
        if extra:
            d.additional_constraints = "; ".join(extra)
        if self.check in ("nonneg", "positive") and isinstance(self.default, float):
            d.floating_point_range = [FloatingPointRange(from_value=0.0, to_value=1e12, step=0.0)]
        return d


def declare_all(node, specs):
    for s in specs:
        node.declare_parameter(s.name, s.default, s.descriptor())


def param_value(node, name):
    """The parameter's value (arrays as lists), or None when it is declared but not set."""
    p = node._parameters.get(name) if hasattr(node, "_parameters") else None
    if p is None or p.type_ == Parameter.Type.NOT_SET:
        return None
    v = p.value
    if isinstance(v, (list, tuple)) or hasattr(v, "typecode"):
        return list(v)
    return v


def check_value(spec, value, n_joints=None):
    """Validate one parameter value against its spec; returns an error string or None.  The rules are
    the control loop's (robot_dynamics.control.params.check_value), so the node and an in-process
    front end validate alike."""
    return _check_value(spec, value, n_joints)


def ros_param_spec(spec):
    """A ROS-free control.params.Spec -> ParamSpec (an Unset default becomes the Parameter.Type)."""
    d = spec.default
    if isinstance(d, Unset):
        d = {"double": Parameter.Type.DOUBLE, "double[]": Parameter.Type.DOUBLE_ARRAY,
             "string[]": Parameter.Type.STRING_ARRAY}[d.type_name]
    return ParamSpec(spec.name, d, spec.description, spec.check, tuple(spec.choices), live=spec.live,
                     law_key=spec.law_key, startup=spec.startup)


def params_table_markdown(specs):
    """A Markdown table of the parameters, rendered as the manual renders them (robot_dynamics.doc_tables:
    the ROS type rclpy declares, the 1-or-6 task-axis gains told as such)."""
    from ..doc_tables import _from_param_spec
    rows = ["| parameter | type | default | read | description |", "|---|---|---|---|---|"]
    for s in specs:
        r = _from_param_spec(s)
        desc = r.description.replace("|", "\\|")
        rows.append(f"| `{r.name}` | {r.type} | `{r.default}` | {r.read} | {desc} |")
    return "\n".join(rows)


def parse_xacro_args(items):
    """['name:=value', ...] (as on the xacro command line) -> {name: value}; ValueError on another form."""
    out = {}
    for a in items or []:
        if not a:
            continue
        name, sep, value = str(a).partition(":=")
        if not sep or not name.strip():
            raise ValueError(f"xacro_args: expected 'name:=value', got {a!r}")
        out[name.strip()] = value
    return out


# ------------------------------------------------------------------------------------------------
# JointState -> numpy
# ------------------------------------------------------------------------------------------------
REJECT_REASONS = ("missing_joint", "duplicate_name", "wrong_length", "non_finite")


class JointStateMapper:
    """Maps sensor_msgs/JointState (any order, extra joints ignored) onto preallocated q, v arrays in
    a fixed order (`names`).  The index array is cached per name list: a message with the same names
    as the last one (the same list object or an equal list) costs one list comparison; the index
    array (and the dict behind it) is rebuilt only when the names change.

        ok = mapper.map(msg)          # fills mapper.q, mapper.v; on False, mapper.reason / .detail
    """

    def __init__(self, names, require_velocity=True):
        self.names = list(names)
        self.n = len(self.names)
        self.q = np.zeros(self.n)
        self.v = np.zeros(self.n)
        self.require_velocity = require_velocity
        self.effort = np.zeros(self.n)
        self.have_effort = False
        self._fast = None              # (q, v, effort) take indices into a JointStateCdr's values
        self._last_names = None        # a copy of the last message's name list
        self._idx = None
        self._map_error = None
        self.reason = ""
        self.detail = ""

    def _build(self, msg_names):
        self._last_names = list(msg_names)
        self._idx, self._map_error = None, None
        if len(set(msg_names)) != len(msg_names):
            seen, dup = set(), []
            for n in msg_names:
                if n in seen:
                    dup.append(n)
                seen.add(n)
            self._map_error = ("duplicate_name", f"duplicate joint name(s) {sorted(set(dup))}")
            return
        pos = {n: i for i, n in enumerate(msg_names)}
        missing = [n for n in self.names if n not in pos]
        if missing:
            self._map_error = ("missing_joint", f"joint(s) {missing} missing (message has {list(msg_names)})")
            return
        self._idx = np.array([pos[n] for n in self.names], dtype=np.intp)

    def _fail(self, reason, detail):
        self.reason, self.detail = reason, detail
        return False

    def map(self, msg):
        """A sensor_msgs/JointState message -> q, v.  True, or False with reason / detail."""
        names = msg.name
        if names != self._last_names:           # the same list object or an equal one: one cheap
            self._build(names)                  # comparison (identical items compare by identity)
        self._fast = None
        pos, vel, eff = msg.position, msg.velocity, msg.effort
        # ndarray.take / .dot: the methods, not the np.* wrappers (a microsecond less per message)
        ok = self._fill(len(names), _f64(pos), _f64(vel))
        self.have_effort = ok and len(eff) == len(names)
        if self.have_effort:
            _f64(eff).take(self._idx, out=self.effort)
        return ok

    def map_cdr(self, r):
        """The same from a parsed serialized message (nodes/cdr.JointStateCdr): its names are compared
        by bytes there and decoded only when they changed; while its layout stays the one last
        validated here (a driver's stream), q, v and the effort are taken straight out of its one
        value view.  Also fills `effort` (model order) and `have_effort` (a full effort field)."""
        fast = self._fast
        if fast is not None and not r.layout_changed and not r.names_changed:
            vals = r.values
            q, v = self.q, self.v
            vals.take(fast[0], out=q)
            if fast[1] is None:
                v.fill(0.0)
            else:
                vals.take(fast[1], out=v)
            if fast[2] is not None:
                vals.take(fast[2], out=self.effort)
            if not math.isfinite(q.dot(q) + v.dot(v)):
                return self._non_finite()
            return True
        self._fast = None
        if r.names_changed or r.names != self._last_names:
            self._build(r.names)
        ok = self._fill(len(r.names), r.position, r.velocity)
        eff = r.effort
        self.have_effort = ok and len(eff) == len(r.names)
        if self.have_effort:
            eff.take(self._idx, out=self.effort)
        if ok:                                # this layout is valid: the next ones take the fast way
            sp = r.spans
            self._fast = (self._idx + sp[0][0], None if sp[1] is None else self._idx + sp[1][0],
                          self._idx + sp[2][0] if self.have_effort else None)
        return ok

    def _fill(self, m, pos, vel):
        if self._map_error is not None:
            return self._fail(*self._map_error)
        if len(pos) != m:
            return self._fail("wrong_length", f"position has {len(pos)} values for {m} names")
        nv = len(vel)
        if nv != m and (nv != 0 or self.require_velocity):
            return self._fail("wrong_length", f"velocity has {nv} values for {m} names")
        idx, q, v = self._idx, self.q, self.v
        pos.take(idx, out=q)
        if nv:
            vel.take(idx, out=v)
        else:
            v.fill(0.0)
        if not math.isfinite(q.dot(q) + v.dot(v)):
            return self._non_finite()
        if self.reason:
            self.reason = self.detail = ""
        return True

    def _non_finite(self):
        q, v = self.q, self.v
        bad = [self.names[i] for i in np.flatnonzero(~(np.isfinite(q) & np.isfinite(v)))]
        return self._fail("non_finite", f"NaN or Inf for joint(s) {bad}")


def command_values(raw):
    """The values of a serialized std_msgs/Float64MultiArray (an effort command) as a float64 array:
    read in place (nodes/cdr.py), deserialised by rclpy for an encapsulation that reads not, empty for
    a truncated buffer (the caller rejects it as of the wrong length)."""
    from .cdr import read_float64_array
    try:
        u = read_float64_array(raw)
    except ValueError:
        return np.zeros(0)
    if u is None:
        from rclpy.serialization import deserialize_message
        from std_msgs.msg import Float64MultiArray
        u = np.asarray(deserialize_message(raw, Float64MultiArray).data, dtype=float)
    return u


def _f64(a):
    """A message's float64[] field as a float64 array (a view of an array('d'))."""
    return np.frombuffer(a, dtype=np.float64) if type(a) is array and a.typecode == "d" \
        else np.asarray(a, dtype=np.float64)


def map_joint_values(names, msg_names, values, what):
    """values (one per msg_names) -> array in `names` order; ValueError naming the problem."""
    msg_names = list(msg_names)
    if len(set(msg_names)) != len(msg_names):
        raise ValueError(f"{what}: duplicate joint names")
    if len(values) != len(msg_names):
        raise ValueError(f"{what}: {len(values)} values for {len(msg_names)} names")
    pos = {n: i for i, n in enumerate(msg_names)}
    missing = [n for n in names if n not in pos]
    if missing:
        raise ValueError(f"{what}: joint(s) {missing} missing")
    a = np.array([values[pos[n]] for n in names], dtype=float)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: values must be finite")
    return a


# ------------------------------------------------------------------------------------------------
# message conversions
# ------------------------------------------------------------------------------------------------
def duration_to_sec(d):
    return float(d.sec) + 1e-9 * float(d.nanosec)


def stamp_to_sec(s):
    return float(s.sec) + 1e-9 * float(s.nanosec)


def wrench_to_array(w, out=None):
    """geometry_msgs/Wrench -> [fx fy fz tx ty tz]."""
    a = np.empty(6) if out is None else out
    a[0], a[1], a[2] = w.force.x, w.force.y, w.force.z
    a[3], a[4], a[5] = w.torque.x, w.torque.y, w.torque.z
    return a


def quat_to_matrix(x, y, z, w):
    """Unit quaternion (x, y, z, w) -> rotation matrix.  Normalises; ValueError on zero / NaN."""
    n = math.sqrt(x * x + y * y + z * z + w * w)
    if not math.isfinite(n) or n < 1e-9:
        raise ValueError(f"quaternion ({x}, {y}, {z}, {w}) is zero or not finite")
    x, y, z, w = x / n, y / n, z / n, w / n
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def pose_to_rp(pose):
    """geometry_msgs/Pose -> (R 3x3, p 3); ValueError on a bad quaternion or a non-finite position."""
    p = np.array([pose.position.x, pose.position.y, pose.position.z], dtype=float)
    if not np.all(np.isfinite(p)):
        raise ValueError(f"position {p.tolist()} is not finite")
    o = pose.orientation
    return quat_to_matrix(o.x, o.y, o.z, o.w), p


def _trajectory_points(msg):
    """(times (N,), positions, velocities, accelerations: a sequence per point) of a
    trajectory_msgs/JointTrajectory, or of a TrajectoryData read from its bytes (nodes/cdr_trajectory.py)."""
    if hasattr(msg, "times"):
        return msg.times, msg.positions, msg.velocities, msg.accelerations
    pts = msg.points
    return (np.array([duration_to_sec(pt.time_from_start) for pt in pts], dtype=float),
            [pt.positions for pt in pts], [pt.velocities for pt in pts], [pt.accelerations for pt in pts])


def trajectory_arrays(names, msg):
    """trajectory_msgs/JointTrajectory (or its TrajectoryData) -> (times (N,), positions (N, n),
    velocities|None, accelerations|None) with columns in `names` order.  ValueError naming the problem."""
    times, pos, vel, acc = _trajectory_points(msg)
    if not len(times):
        raise ValueError("trajectory has no points")
    msg_names = list(msg.joint_names)
    if len(set(msg_names)) != len(msg_names):
        raise ValueError("trajectory: duplicate joint names")
    where = {n: i for i, n in enumerate(msg_names)}
    missing = [n for n in names if n not in where]
    if missing:
        raise ValueError(f"trajectory: joint(s) {missing} missing")
    idx = np.array([where[n] for n in names], dtype=np.intp)
    m, N = len(msg_names), len(times)
    has_v = all(len(x) == m for x in vel)
    has_a = all(len(x) == m for x in acc)
    for k in range(N):
        if len(pos[k]) != m:
            raise ValueError(f"trajectory point {k}: {len(pos[k])} positions for {m} joints")
        for seq, field_name, want in ((vel, "velocities", has_v), (acc, "accelerations", has_a)):
            got = len(seq[k])
            if not want and got not in (0, m):
                raise ValueError(f"trajectory point {k}: {got} {field_name} for {m} joints")
    # every point has m values now: one (N, m) array per field, columns picked by name
    P = np.array(pos, dtype=float).reshape(N, m)[:, idx]
    V = np.array(vel, dtype=float).reshape(N, m)[:, idx] if has_v else None
    A = np.array(acc, dtype=float).reshape(N, m)[:, idx] if has_a else None
    for arr, what in ((times, "time_from_start"), (P, "positions"), (V, "velocities"), (A, "accelerations")):
        if arr is not None and not np.all(np.isfinite(arr)):
            raise ValueError(f"trajectory: {what} must be finite")
    return times, P, V, A
