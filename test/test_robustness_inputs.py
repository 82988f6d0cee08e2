"""Robustness, bad input: hypothesis-fuzzed messages, references, parameters and URDFs against the pure
layers (common.py conversions, laws, SafetyFilter, Model/URDF loading) and against the running
controller node over DDS (in-process node + executor thread, see robustness_harness.Rig).

Invariants (checked on every case): no exception escapes (pure layers: only ValueError, with a
message; node: no errors.* count, it still answers get_state / get_parameters and commands a valid
state afterwards); every command sent is finite, within the effort limits and the rate limit
(robustness_harness.NodeMonitor + the DDS-side recorder); each rejection is counted in the node's
counters and /diagnostics and logged once per episode (read from /rosout)."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustness_harness import ARM, Q0, Rig, case, wait_for
from robot_dynamics.control import (LAWS, JointTrajectory, SafetyFilter, State, make_law)
from robot_dynamics.dynamics import Model, PinocchioBackend, robots
from robot_dynamics.nodes.common import (REJECT_REASONS, JointStateMapper, check_value,
                                         map_joint_values, pose_to_rp, trajectory_arrays)

PANDA_URDF = robots.robot_urdf_path("panda").read_text()
MODEL = Model.from_robot("panda")
NAMES = list(MODEL.joint_names)
N = len(NAMES)

# Not derandomized: each run draws new examples (a fixed seed would check the same 150 every run and
# never find anything new); hypothesis prints the failing example and its @reproduce_failure blob.
# CI time stays bounded by max_examples.
PURE = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NODE = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])

# ------------------------------------------------------------------------------------------------
# strategies
# ------------------------------------------------------------------------------------------------
BAD_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 1e12, 0.0, -0.0, 5e-324])
FLOATS = st.one_of(st.floats(-4.0, 4.0), BAD_FLOATS, st.floats(allow_nan=True, allow_infinity=True))
NAME_POOL = ARM + ["panda_finger_joint1", "unknown_joint", "", "panda_joint1 ", "PANDA_JOINT2"]


@st.composite
def joint_state_parts(draw):
    """(names, positions, velocities, effort): names a shuffled subset/superset of ARM with possible
    duplicates and unknown names; arrays of agreeing or disagreeing lengths with bad values."""
    kind = draw(st.sampled_from(["valid", "names", "lengths", "values", "empty", "any"]))
    names = list(ARM)
    if kind in ("names", "any"):
        names = draw(st.lists(st.sampled_from(NAME_POOL), min_size=0, max_size=12))
    else:
        names = draw(st.permutations(ARM))
        names = names + draw(st.lists(st.sampled_from(NAME_POOL[7:]), max_size=2, unique=True))
    m = len(names)
    if kind == "empty":
        names, m = [], 0
    good = st.floats(-2.5, 2.5)
    vals = FLOATS if kind in ("values", "any") else good
    lp = m if kind not in ("lengths", "any") else draw(st.integers(0, m + 2))
    lv = m if kind not in ("lengths", "any") else draw(st.sampled_from([0, m, max(m - 1, 0), m + 1]))
    pos = draw(st.lists(vals, min_size=lp, max_size=lp))
    vel = draw(st.lists(vals, min_size=lv, max_size=lv))
    eff = draw(st.lists(FLOATS, max_size=m + 1))
    return names, pos, vel, eff


def oracle(names, pos, vel, require_velocity=True):
    """The reason a JointState must be rejected (a REJECT_REASONS entry), or '' if valid."""
    if len(set(names)) != len(names):
        return "duplicate_name"
    if any(j not in names for j in ARM):
        return "missing_joint"
    m = len(names)
    if len(pos) != m or (len(vel) != m and (len(vel) != 0 or require_velocity)):
        return "wrong_length"
    idx = [names.index(j) for j in ARM]
    vals = [pos[i] for i in idx] + ([vel[i] for i in idx] if vel else [])
    if not all(math.isfinite(x) for x in vals):
        return "non_finite"
    if not math.isfinite(float(np.dot(vals, vals))):    # huge but finite: q.q + v.v overflows
        return "non_finite"
    return ""


def js_msg(names, pos, vel, eff=(), stamp=None):
    from sensor_msgs.msg import JointState
    m = JointState(name=list(names), position=[float(x) for x in pos], velocity=[float(x) for x in vel],
                   effort=[float(x) for x in eff])
    if stamp is not None:
        m.header.stamp.sec, m.header.stamp.nanosec = stamp
    return m


STAMPS = st.one_of(st.none(), st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(0, 999_999_999)))


# ------------------------------------------------------------------------------------------------
# pure layers
# ------------------------------------------------------------------------------------------------
@PURE
@given(joint_state_parts())
def test_joint_state_mapper_fuzz(parts):
    with case("joint_state"):
        names, pos, vel, eff = parts
        mapper = JointStateMapper(ARM, require_velocity=True)
        msg = js_msg(names, pos, vel, eff)
        for _ in range(2):                                   # twice: the cached index path too
            ok = mapper.map(msg)
            want = oracle(names, pos, vel)
            if want:
                assert not ok and mapper.reason == want and mapper.detail, (want, mapper.reason)
                assert mapper.reason in REJECT_REASONS
            else:
                assert ok, mapper.detail
                assert np.all(np.isfinite(mapper.q)) and np.all(np.isfinite(mapper.v))
                np.testing.assert_array_equal(mapper.q, [pos[names.index(j)] for j in ARM])


def map_oracle(names, values):
    """The values in ARM order by name (a dict), or None where map_joint_values must raise."""
    if len(set(names)) != len(names) or len(values) != len(names):
        return None
    d = dict(zip(names, values))
    if any(j not in d for j in ARM):
        return None
    out = [d[j] for j in ARM]
    return out if all(map(math.isfinite, out)) else None


@st.composite
def named_values(draw):
    """(names, values): half of the cases valid (a permutation of ARM plus extra joints, finite
    values for the arm, anything for the extras), the rest anything."""
    if draw(st.booleans()):
        names = list(draw(st.permutations(ARM))) + draw(st.lists(st.sampled_from(NAME_POOL[7:]), max_size=3,
                                                                 unique=True))
        vals = [draw(st.floats(-4.0, 4.0)) if n in ARM else draw(FLOATS) for n in names]
        return names, vals
    return draw(st.lists(st.sampled_from(NAME_POOL), max_size=10)), draw(st.lists(FLOATS, max_size=10))


@PURE
@given(named_values())
def test_map_joint_values_fuzz(nv):
    """Valid inputs map by name (oracle: a dict); invalid ones raise ValueError with a message."""
    names, values = nv
    with case("reference"):
        want = map_oracle(names, values)
        if want is None:
            with pytest.raises(ValueError, match=r"\w"):
                map_joint_values(ARM, names, values, "target")
            return
        a = map_joint_values(ARM, names, values, "target")
        np.testing.assert_array_equal(a, want)


def test_map_joint_values_valid_cases_are_drawn():
    """The strategy does produce valid cases (else the fuzz test above proves nothing about them)."""
    from hypothesis import find
    found = find(named_values(), lambda nv: map_oracle(*nv) is not None and nv[0] != ARM)
    assert map_oracle(*found) is not None


@PURE
@given(st.tuples(FLOATS, FLOATS, FLOATS, FLOATS), st.tuples(FLOATS, FLOATS, FLOATS))
def test_pose_quaternion_fuzz(quat, pos):
    from geometry_msgs.msg import Pose
    with case("reference"):
        p = Pose()
        p.position.x, p.position.y, p.position.z = pos
        p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w = quat
        try:
            R, t = pose_to_rp(p)
        except ValueError as e:
            assert str(e)
            assert not (all(map(math.isfinite, pos)) and 1e-9 < math.sqrt(sum(x * x for x in quat)) < math.inf) \
                or not math.isfinite(math.sqrt(sum(x * x for x in quat)))
            return
        assert np.all(np.isfinite(R)) and np.all(np.isfinite(t))
        np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-9)
        assert abs(np.linalg.det(R) - 1) < 1e-9


@st.composite
def trajectory_msgs(draw):
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory as JT, JointTrajectoryPoint
    # half the cases well formed (a permutation of the model's joints plus extra ones, 1-5 points of
    # the right lengths, finite values; velocities on all points or none), so that valid messages
    # are checked for their mapping every run, not only found by luck
    valid = draw(st.booleans())
    if valid:
        names = list(draw(st.permutations(NAMES))) + draw(st.lists(st.sampled_from(NAME_POOL[7:]), max_size=2,
                                                                   unique=True))
    else:
        names = draw(st.one_of(st.permutations(NAMES), st.lists(st.sampled_from(NAME_POOL), max_size=9)))
    m = len(names)
    pts = []
    with_v = draw(st.booleans())
    for _ in range(draw(st.integers(1, 5) if valid else st.integers(0, 5))):
        sec = draw(st.one_of(st.integers(0, 5), st.integers(-5, -1), st.just(2**31 - 1)))
        lp = m if valid else draw(st.sampled_from([m, m, m, max(m - 1, 0), m + 1]))
        vals = st.floats(-3.0, 3.0) if valid else st.one_of(st.floats(-3.0, 3.0), BAD_FLOATS)
        pos = draw(st.lists(vals, min_size=lp, max_size=lp))
        lv = (m if with_v else 0) if valid else draw(st.sampled_from([0, m, m + 1]))
        vel = draw(st.lists(st.floats(-1, 1), min_size=lv, max_size=lv))
        pts.append(JointTrajectoryPoint(positions=pos, velocities=vel,
                                        time_from_start=Duration(sec=sec, nanosec=draw(st.integers(0, 999_999_999)))))
    return JT(joint_names=list(names), points=pts)


def trajectory_oracle(msg):
    """(positions, velocities|None) per point, columns in NAMES order by name (dicts), or None where
    trajectory_arrays must raise."""
    names = list(msg.joint_names)
    m = len(names)
    if not msg.points or len(set(names)) != m or any(j not in names for j in NAMES):
        return None
    if any(len(pt.positions) != m for pt in msg.points):
        return None
    has_v = all(len(pt.velocities) == m for pt in msg.points)
    if not has_v and any(len(pt.velocities) not in (0, m) for pt in msg.points):
        return None
    P = [[dict(zip(names, pt.positions))[j] for j in NAMES] for pt in msg.points]
    V = [[dict(zip(names, pt.velocities))[j] for j in NAMES] for pt in msg.points] if has_v else None
    if not all(math.isfinite(x) for row in P + (V or []) for x in row):
        return None
    return P, V


@PURE
@given(trajectory_msgs())
def test_trajectory_fuzz(msg):
    """trajectory_arrays: valid messages convert with every column by name (oracle: dicts), invalid
    ones raise ValueError; then JointTrajectory either rejects the result (ValueError) or gives
    increasing times and finite positions within the limits."""
    with case("reference"):
        want = trajectory_oracle(msg)
        if want is None:
            with pytest.raises(ValueError, match=r"\w"):
                trajectory_arrays(NAMES, msg)
            return
        times, P, V, A = trajectory_arrays(NAMES, msg)
        np.testing.assert_array_equal(P, want[0])
        if want[1] is None:
            assert V is None
        else:
            np.testing.assert_array_equal(V, want[1])
        np.testing.assert_array_equal(times, [pt.time_from_start.sec + 1e-9 * pt.time_from_start.nanosec
                                              for pt in msg.points])
        try:
            traj = JointTrajectory(times, P, V, A, lower=MODEL.lower_limits, upper=MODEL.upper_limits)
        except ValueError as e:
            assert str(e)
            return
        assert np.all(np.diff(traj.times) > 0) and np.all(traj.times >= 0)
        assert np.all(np.isfinite(traj.positions))
        assert np.all(traj.positions >= MODEL.lower_limits - 1e-9) and np.all(traj.positions <= MODEL.upper_limits + 1e-9)


def test_trajectory_valid_cases_are_drawn():
    """The strategy produces valid multi-point trajectories in a non-model order."""
    from hypothesis import find
    msg = find(trajectory_msgs(), lambda m: trajectory_oracle(m) is not None and len(m.points) > 1
               and list(m.joint_names) != NAMES)
    assert trajectory_oracle(msg) is not None


PARAM_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10), FLOATS, st.text(max_size=5),
    st.lists(FLOATS, max_size=9), st.lists(st.text(max_size=3), max_size=3), st.lists(st.booleans(), max_size=7))


@PURE
@given(st.data())
def test_check_value_fuzz(data):
    from robot_dynamics.nodes.controller.params import all_param_specs
    specs = all_param_specs()
    with case("parameters"):
        spec = data.draw(st.sampled_from(specs))
        value = data.draw(PARAM_VALUES)
        err = check_value(spec, value, 7)
        assert err is None or (isinstance(err, str) and err)
        if spec.check in ("nonneg", "positive", "finite") and isinstance(value, float) and not math.isfinite(value):
            assert err


STATE_VEC = st.lists(st.one_of(st.floats(-3, 3), BAD_FLOATS), min_size=N, max_size=N)


@settings(PURE, max_examples=60)
@given(st.sampled_from(LAWS), STATE_VEC, STATE_VEC, st.lists(st.tuples(st.floats(-3, 3), st.floats(1e-4, 0.05)),
                                                             min_size=1, max_size=4))
def test_laws_and_safety_filter_fuzz(law_name, q, v, extra):
    """Any state into any law, then the SafetyFilter: the law never raises (NaN torque allowed), the
    filter output is finite, within the limits and the rate limit."""
    with case("laws"):
        law = make_law(law_name, MODEL, PinocchioBackend(MODEL))
        sf = SafetyFilter(MODEL, {"rate_limit": 300.0, "ramp_time": 0.01})
        law.reset(State(Q0.copy(), np.zeros(N)))
        prev = np.zeros(N)
        for (dq, dt), (qq, vv) in zip(extra + extra, [(q, v), (Q0 + extra[0][0] * 0.1, np.zeros(N))] * 4):
            s = State(np.array(qq, dtype=float), np.array(vv, dtype=float), 0.0)
            tau = law.compute(s)
            assert np.shape(tau) == (N,)
            out = sf.apply(tau, s, dt, fallback=None)
            assert out.shape == (N,) and np.all(np.isfinite(out))
            assert np.all(np.abs(out) <= sf.limit + 1e-12)
            assert np.all(np.abs(out - prev) <= sf.rate * dt + 1e-9)
            prev = out


@PURE
@given(st.lists(st.tuples(st.one_of(st.lists(FLOATS, min_size=N, max_size=N), st.lists(FLOATS, max_size=9)),
                          st.one_of(st.floats(-1, 1), BAD_FLOATS),
                          st.sampled_from(["none", "bad", "good", "hold", "reset"])), min_size=1, max_size=12))
def test_safety_filter_sequence_fuzz(steps):
    """Garbage torques, dts, fallbacks, hold()/reset(start=...) with garbage: every output finite,
    within the limits, within rate * dt of the previous output (or of what hold/reset set)."""
    with case("safety_filter"):
        sf = SafetyFilter(MODEL, {"rate_limit": 500.0, "ramp_time": 0.2})
        prev = np.zeros(N)
        for tau, dt, fb in steps:
            if fb == "hold":
                sf.hold(tau)
                if len(tau) == N and all(map(math.isfinite, tau)):
                    prev = np.clip(tau, -sf.limit, sf.limit)
                continue
            if fb == "reset":
                sf.reset(start=tau)
                prev = np.clip(tau, -sf.limit, sf.limit) if len(tau) == N and all(map(math.isfinite, tau)) \
                    else np.zeros(N)
                continue
            fallback = {"none": None, "bad": [math.nan] * N, "good": list(0.5 * sf.limit)}[fb]
            out = sf.apply(tau, State(Q0, np.zeros(N)), dt, fallback=fallback)
            assert np.all(np.isfinite(out)) and np.all(np.abs(out) <= sf.limit + 1e-12)
            d = dt if (math.isfinite(dt) and dt > 0) else 0.0
            assert np.all(np.abs(out - prev) <= sf.rate * d + 1e-9)
            prev = out


@PURE
@given(st.dictionaries(st.sampled_from(["effort_limits", "effort_scale", "rate_limit", "ramp_time",
                                        "position_margin", "velocity_damping", "bogus"]),
                       st.one_of(FLOATS, st.lists(FLOATS, max_size=8), st.text(max_size=3), st.none()),
                       min_size=1, max_size=3))
def test_safety_params_fuzz(params):
    """Bad safety parameters: ValueError and the old parameters kept; the output stays in the limits."""
    with case("parameters"):
        sf = SafetyFilter(MODEL)
        old = sf.params
        try:
            sf.set_params(params)
        except ValueError as e:
            assert str(e) and sf.params == old
        out = sf.apply(np.full(N, 1e6), State(Q0, np.zeros(N)), 0.01)
        assert np.all(np.isfinite(out)) and np.all(np.abs(out) <= sf.limit + 1e-12)


def params_of(law):
    """A law's parameters as plain lists (comparable with ==): what set_params must leave as it was."""
    return {k: (np.asarray(v).tolist() if v is not None else None) for k, v in law.params.items()}


@settings(PURE, max_examples=40)
@given(st.sampled_from(LAWS), st.sampled_from(["kp", "kd", "k_gains", "d_gains", "damping_ratio", "omega",
                                               "nullspace_stiffness", "task.k_pos_x", "frame", "unknown"]),
       st.one_of(FLOATS, st.lists(FLOATS, max_size=9), st.text(max_size=4), st.none(), st.booleans()))
def test_law_params_fuzz(law_name, key, value):
    with case("parameters"):
        law = make_law(law_name, MODEL, PinocchioBackend(MODEL))
        old = params_of(law)
        try:
            law.set_params({key: value})
        except ValueError as e:
            assert str(e)
            assert params_of(law) == old
        law.reset(State(Q0.copy(), np.zeros(N)))
        tau = law.compute(State(Q0 + 0.01, np.full(N, 0.1)))
        assert np.shape(tau) == (N,)
        assert np.all(np.isfinite(tau)), f"accepted {key}={value!r}: the law's torque {tau}"


# the gain-like keys of each law (LAW_KEYS kinds: nonnegative numbers) and values at and past the
# float range's edges: 1e155 squared overflows, 5e-324 is the smallest subnormal
GAIN_KEYS = {
    "computed_torque": ["kp", "kd", "omega", "zeta"],
    "joint_impedance": ["k_gains", "d_gains", "damping_ratio"],
    "cartesian_impedance": [f"task.{g}_{k}_{a}" for g in "kd" for k in ("pos", "rot") for a in "xyz"]
    + ["task.damping_ratio", "nullspace_stiffness", "nullspace_damping", "nullspace_damping_ratio",
       "damped_pinv_lambda"],
}


@pytest.mark.parametrize("law_name", sorted(GAIN_KEYS))
def test_extreme_gains_are_refused_or_give_finite_torques(law_name):
    """Every gain at 1e155 .. 1e308 (past where a square overflows): ValueError naming the key and the old
    parameters kept (omega = 1e155 raised OverflowError out of set_params; a task stiffness of 1e155
    gave NaN torques); at the bound, 1e12, accepted with finite torques.  A subnormal stiffness
    (5e-324, 1e-308: NaN torques from the one-eigensolve damping design's K^-1/2 scaling) is accepted
    and acts as the zero it nearly is: the torque equals the one with that gain at 0 (to 1e-9 relative)."""
    from robot_dynamics.control.laws.base import GAIN_MAX
    state = State(Q0 + 0.01, np.full(N, 0.1))
    for key in GAIN_KEYS[law_name]:
        for big in (1e155, 1e200, 1e308, [1e308] * N):
            law = make_law(law_name, MODEL, PinocchioBackend(MODEL))
            old = params_of(law)
            with pytest.raises(ValueError, match=key.split(".")[-1]):
                law.set_params({key: big})
            assert params_of(law) == old
        law = make_law(law_name, MODEL, PinocchioBackend(MODEL))
        if key == "omega":
            law.set_params({key: GAIN_MAX ** 0.5})          # kp = omega^2 at the bound
        elif key != "zeta":                              # 2 zeta omega would pass the bound
            law.set_params({key: GAIN_MAX})
        law.reset(State(Q0.copy(), np.zeros(N)))
        assert np.all(np.isfinite(law.compute(state))), f"{law_name} {key} at the bound"
        for tiny in (5e-324, 1e-308):
            torques = []
            for value in (tiny, 0.0):
                law = make_law(law_name, MODEL, PinocchioBackend(MODEL))
                law.set_params({key: value})
                law.reset(State(Q0.copy(), np.zeros(N)))
                torques.append(law.compute(state))
            assert np.all(np.isfinite(torques[0])), f"{law_name} {key}={tiny}: {torques[0]}"
            np.testing.assert_allclose(torques[0], torques[1], rtol=1e-9, atol=1e-9,
                                       err_msg=f"{law_name} {key}={tiny} vs 0")


# ---- URDFs ----
def chain_urdf(links, joints):
    """A 3-link chain; links: list of inertial XML snippets; joints: list of (type, limit_xml)."""
    out = ['<robot name="fuzz"><link name="base"/>']
    for i, (inert, (jt, lim)) in enumerate(zip(links, joints)):
        out.append(f'<link name="l{i}">{inert}</link>')
        out.append(f'<joint name="j{i}" type="{jt}"><parent link="{"base" if i == 0 else f"l{i-1}"}"/>'
                   f'<child link="l{i}"/><origin xyz="0 0 0.3" rpy="0 0 0"/><axis xyz="0 1 0"/>{lim}</joint>')
    out.append("</robot>")
    return "".join(out)


def inertial(m, ixx, iyy, izz, ixy="0"):
    return (f'<inertial><origin xyz="0 0 0.1"/><mass value="{m}"/>'
            f'<inertia ixx="{ixx}" ixy="{ixy}" ixz="0" iyy="{iyy}" iyz="0" izz="{izz}"/></inertial>')


INERTIALS = st.sampled_from([
    inertial(1, 0.01, 0.01, 0.01),                    # good
    "",                                               # missing inertial (massless)
    inertial(0, 0, 0, 0),                             # zero mass
    inertial(0, 0.01, 0.01, 0.01),                    # zero mass, non-zero inertia
    inertial(-1, 0.01, 0.01, 0.01),                   # negative mass
    inertial(1, -0.01, 0.01, 0.01),                   # not positive definite
    inertial(1, 0.01, 0.01, 0.05),                    # triangle inequality violated
    inertial(1, 0.01, 0.01, 0.01, ixy="0.5"),         # indefinite off-diagonal
    inertial("nan", 0.01, 0.01, 0.01),
    inertial(1, "abc", 0.01, 0.01),
    inertial(1e300, 1e300, 1e300, 1e300),
])
LIMIT = '<limit lower="-2" upper="2" effort="50" velocity="2"/>'
JOINTS = st.sampled_from([("revolute", LIMIT), ("continuous", ""), ("prismatic", LIMIT), ("fixed", ""),
                          ("revolute", ""), ("floating", ""), ("planar", LIMIT), ("bogus", LIMIT),
                          ("revolute", '<limit lower="2" upper="-2" effort="1" velocity="1"/>'),
                          ("revolute", '<limit lower="-2" upper="2" effort="nan" velocity="1"/>')])


@settings(PURE, max_examples=80)
@given(st.lists(INERTIALS, min_size=3, max_size=3), st.lists(JOINTS, min_size=3, max_size=3))
def test_urdf_fuzz(links, joints):
    """Model loading either works (and the self-check then passes or fails with ValueError) or raises
    ValueError with a message; never another exception type."""
    from robot_dynamics.dynamics import self_check
    with case("urdf"):
        urdf = chain_urdf(links, joints)
        try:
            model = Model.from_urdf_string(urdf)
        except ValueError as e:
            assert str(e)
            return
        try:
            self_check(model)
        except ValueError as e:
            assert str(e)


@settings(PURE, max_examples=30)
@given(st.sampled_from(["", "<robot", "<robot name='x'/>", "<notrobot/>", "garbage \x00", PANDA_URDF[:500],
                        PANDA_URDF.replace("panda_joint3", "renamed_joint"),
                        PANDA_URDF.replace('type="revolute"', 'type="floating"', 1)]),
       st.sampled_from([None, ARM, ARM[:3], ["nope"]]))
def test_robot_description_fuzz(text, active):
    with case("urdf"):
        try:
            Model.from_urdf_string(text, **({} if active is None else {"active_joints": active}))
        except ValueError as e:
            assert str(e)


# ------------------------------------------------------------------------------------------------
# the running node, over DDS
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jrig():
    """joint_impedance, joint-state triggered, safe command zero."""
    r = Rig()
    try:
        r.controller(controller="joint_impedance", watchdog_timeout=2.0, torque_rate_limit=200.0,
                     ramp_time=0.05, **{"joint_impedance.k_gains": [30.0]})
        r.valid_command()
        yield r
    finally:
        r.close()


def errors(node):
    return {k: v for k, v in node.counts.items() if k.startswith("errors.")}



@pytest.mark.slow
@NODE
@given(joint_state_parts(), STAMPS)
def test_joint_state_fuzz_over_dds(jrig, parts, stamp):
    """Each fuzzed JointState: the node answers with one command (the safe one if rejected, counted and
    logged once for the episode), then controls again for a valid state."""
    names, pos, vel, eff = parts
    with case("joint_state"):
        node = jrig.node
        want = oracle(names, pos, vel)
        key = f"rejected.joint_states.{want}"
        n_rej, n_log = node.counts[key], jrig.log_count("joint state rejected")
        recs = jrig.send(js_msg(names, pos, vel, eff, stamp))
        if want:
            assert recs[0]["safe"], "a rejected joint state must give the safe command"
            assert node.counts[key] > n_rej
            wait_for(lambda: jrig.log_count("joint state rejected") >= n_log + 1, what="the rejection log line")
        jrig.valid_command()
        assert jrig.log_count("joint state rejected") == n_log + (1 if want else 0), "one log line per episode"
        assert not errors(node), errors(node)
        jrig.assert_invariants()


@pytest.mark.slow
def test_joint_state_burst_and_liveness(jrig):
    """Thousands of messages at once (bad, valid, huge, old and future stamps, shuffled names): the
    node survives, logs each episode once, counts them, and still answers services."""
    node = jrig.node
    rng = np.random.default_rng(0)
    with case("joint_state_burst"):
        n_log = jrig.log_count("joint state rejected")
        k0 = jrig.monitor.n()
        bad = js_msg(ARM, [math.nan] * 7, [0.0] * 7)
        n_rej = node.counts["rejected.joint_states.non_finite"]
        for _ in range(2000):                                        # one episode of 2000 identical rejections
            jrig.js_pub.publish(bad)
        wait_for(lambda: node.counts["rejected.joint_states.non_finite"] > n_rej, what="rejections counted")
        jrig.valid_command()
        wait_for(lambda: jrig.log_count("joint state rejected") >= n_log + 1, what="rejection log line")
        jrig.valid_command()
        assert jrig.log_count("joint state rejected") == n_log + 1, "2000 identical rejections: one log line"
        for i in range(3000):                                        # mixed burst
            k = i % 5
            q = Q0 + 0.05 * rng.standard_normal(7)
            names = list(ARM)
            rng.shuffle(names)
            qn = [q[ARM.index(j)] for j in names]
            if k == 0:
                m = js_msg(names, qn, [0.0] * 7, stamp=(0, 0))
            elif k == 1:
                m = js_msg(names, qn, [0.0] * 7, stamp=(2**31 - 1, 0))           # far future
            elif k == 2:
                m = js_msg(names, [1e300] * 7, [1e300] * 7)                        # huge (q.q overflows)
            elif k == 3:
                m = js_msg(names + ["extra"], qn + [math.nan], [0.0] * 8, stamp=(1, 0))   # old stamp, extra joint
            else:
                m = js_msg(names[:6], qn[:6], [0.0] * 6)                           # missing joint
            jrig.js_pub.publish(m)
        jrig.valid_command()
        assert jrig.monitor.n() > k0
        assert jrig.lifecycle_state() == "active"
        pc = jrig.param_client()
        assert jrig.get_params(pc, ["controller"]) == ["joint_impedance"]
        assert not errors(node), errors(node)
        wait_for(lambda: int(jrig.diagnostics().get("rejected.joint_states", 0)) >=
                 sum(v for k, v in node.counts.items() if k.startswith("rejected.joint_states.")) > 0,
                 what="rejections in /diagnostics", every=jrig.valid_command)
        jrig.assert_invariants()


@pytest.mark.slow
@NODE
@given(trajectory_msgs(), st.integers(0, 2))
def test_references_over_dds(jrig, msg, which):
    """Fuzzed trajectories and joint targets: rejected ones are counted, none raises, the node
    controls afterwards (joint_impedance)."""
    from sensor_msgs.msg import JointState
    node = jrig.node
    with case("reference"):
        if which < 2:
            topic, m = f"/{node.get_name()}/joint_trajectory", msg
            from trajectory_msgs.msg import JointTrajectory as JT
            typ = JT
        else:
            pt = msg.points[0] if msg.points else None
            m = JointState(name=list(msg.joint_names), position=list(pt.positions) if pt else [])
            topic, typ = f"/{node.get_name()}/target_joint_state", JointState
        jrig.pub(typ, topic).publish(m)
        for _ in range(3):
            jrig.valid_command()
        assert not errors(node), errors(node)
        jrig.assert_invariants()
        # back to holding Q0 so the next case starts from rest
        from std_srvs.srv import Trigger
        jrig.call(Trigger, f"/{node.get_name()}/hold", Trigger.Request())


BAD_PARAMS = [
    ("joint_impedance.k_gains", [-1.0]), ("joint_impedance.k_gains", [math.nan]),
    ("joint_impedance.k_gains", [1.0, 2.0]), ("joint_impedance.k_gains", "stiff"),
    ("joint_impedance.k_gains", [1, 2, 3, 4, 5, 6, 7, 8]), ("joint_impedance.damping_ratio", -0.5),
    ("joint_impedance.damping_ratio", math.nan), ("joint_impedance.damping_ratio", math.inf),
    ("joint_impedance.damping_ratio", "high"), ("torque_rate_limit", -5.0), ("torque_rate_limit", 0.0),
    ("torque_rate_limit", math.nan), ("effort_limits", [1.0, 2.0]), ("effort_limits", [-1.0]),
    ("effort_limits", [math.inf]), ("effort_scale", 2.0), ("effort_scale", True), ("watchdog_timeout", -1.0),
    ("safe_command", "explode"), ("controller", "nope"), ("joints", ["a", "a"]), ("tool_com", [1.0]),
    ("wrench_deadband", [-1.0, 0.0]), ("joint_impedance.q_nullspace", [math.nan]),
]


@pytest.mark.slow
@settings(NODE, max_examples=len(BAD_PARAMS))
@given(st.sampled_from(BAD_PARAMS))
def test_bad_parameters_over_dds(jrig, item):
    from rclpy.parameter import Parameter
    name, value = item
    with case("parameters"):
        pc = jrig.param_client()
        old = jrig.get_params(pc, [name])                 # [] for a parameter that is not set
        res = jrig.set_params(pc, [Parameter(name, value=value)])
        assert not res[0].successful and res[0].reason
        assert jrig.get_params(pc, [name]) == old
        jrig.valid_command()
        assert not errors(jrig.node), errors(jrig.node)
        jrig.assert_invariants()


@pytest.mark.slow
def test_new_robot_description_bad_then_good(jrig):
    """A robot_description that does not parse, or lacks the configured joints: reconfigure fails
    cleanly (unconfigured, reason in the diagnostics), the node still answers; the good one works."""
    from lifecycle_msgs.msg import Transition
    from rclpy.parameter import Parameter
    node = jrig.node
    pc = jrig.param_client()
    for bad in ("<robot name='broken'", PANDA_URDF.replace("panda_joint4", "other_joint4"),
                "<robot name='empty'><link name='a'/></robot>"):
        with case("parameters"):
            # read at configure: refused while configured, taken once cleaned up
            assert not jrig.set_params(pc, [Parameter("robot_description", value=bad)])[0].successful
            assert jrig.change_state(Transition.TRANSITION_DEACTIVATE)
            assert jrig.change_state(Transition.TRANSITION_CLEANUP)
            assert jrig.set_params(pc, [Parameter("robot_description", value=bad)])[0].successful
            assert not jrig.change_state(Transition.TRANSITION_CONFIGURE)
            assert jrig.lifecycle_state() == "unconfigured"
            assert node.config_error
            wait_for(lambda: "not configured" in str(jrig.diag.get(node.get_name(), "")) or
                     jrig.diagnostics().get("lifecycle_state") == "unconfigured", what="diagnostics unconfigured")
            assert jrig.set_params(pc, [Parameter("robot_description", value=PANDA_URDF)])[0].successful
            assert jrig.change_state(Transition.TRANSITION_CONFIGURE)
            assert jrig.change_state(Transition.TRANSITION_ACTIVATE)
            jrig.alive()
            jrig.assert_invariants()


# ---- wrench (cartesian impedance with force control on z) ----
@pytest.fixture(scope="module")
def crig():
    r = Rig()
    try:
        r.controller(controller="cartesian_impedance", watchdog_timeout=2.0, torque_rate_limit=200.0,
                     ramp_time=0.05, **{"cartesian_impedance.force_axes": [False, False, True, False, False, False]})
        r.valid_command()
        yield r
    finally:
        r.close()


WRENCH_VALS = st.one_of(st.floats(-50, 50), BAD_FLOATS)


@pytest.mark.slow
@NODE
@given(st.lists(WRENCH_VALS, min_size=6, max_size=6),
       st.sampled_from(["panda_link8", "panda_hand", "", "no_such_frame", "world", "panda_link0"]))
def test_wrench_fuzz_over_dds(crig, w, frame):
    from geometry_msgs.msg import WrenchStamped
    node = crig.node
    with case("wrench"):
        crig.wpub = crig.pub(WrenchStamped, crig.wrench_topic)
        m = WrenchStamped()
        m.header.frame_id = frame
        m.wrench.force.x, m.wrench.force.y, m.wrench.force.z = w[:3]
        m.wrench.torque.x, m.wrench.torque.y, m.wrench.torque.z = w[3:]
        n_rej = node.counts["rejected.wrench"]
        for _ in range(3):
            crig.wpub.publish(m)
            crig.valid_command()
        if not all(map(math.isfinite, w)):
            wait_for(lambda: node.counts["rejected.wrench"] > n_rej, what="the wrench rejection counted",
                     every=lambda: (crig.wpub.publish(m), crig.valid_command()))
        assert not errors(node), errors(node)
        crig.assert_invariants()


@pytest.mark.slow
@NODE
@given(st.tuples(FLOATS, FLOATS, FLOATS, FLOATS), st.tuples(st.floats(-1, 1), st.floats(-1, 1), FLOATS),
       st.sampled_from(["", "world", "panda_link0", "tool0"]))
def test_target_pose_fuzz_over_dds(crig, quat, pos, frame):
    from geometry_msgs.msg import PoseStamped
    from std_srvs.srv import Trigger
    node = crig.node
    with case("reference"):
        crig.ppub = crig.pub(PoseStamped, f"/{node.get_name()}/target_pose")
        m = PoseStamped()
        m.header.frame_id = frame
        m.pose.position.x, m.pose.position.y, m.pose.position.z = pos
        m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z, m.pose.orientation.w = quat
        crig.ppub.publish(m)
        for _ in range(3):
            crig.valid_command()
        assert not errors(node), errors(node)
        crig.assert_invariants()
        crig.call(Trigger, f"/{node.get_name()}/hold", Trigger.Request())
