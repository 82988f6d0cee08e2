"""The serialized messages of the per-message path (nodes/cdr.py) against rclpy's own serialization
(the oracle: rclpy.serialization, i.e. the middleware's type support): every JointState hypothesis
draws (names of any length and characters, a frame_id, fields empty or of other lengths than the
names, any doubles) reads back exactly; the writers' bytes deserialize to the messages they stand for;
a buffer cut short is refused, never read past its end."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

rclpy = pytest.importorskip("rclpy")

from geometry_msgs.msg import WrenchStamped  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from rosgraph_msgs.msg import Clock  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray, MultiArrayDimension  # noqa: E402

from robot_dynamics.nodes.cdr import (ClockWriter, Float64ArrayCdr, JointStateCdr, JointStateWriter,  # noqa: E402
                                      WrenchStampedWriter, read_float64_array, read_wrench_stamped)
from robot_dynamics.nodes.common import JointStateMapper  # noqa: E402

names = st.lists(st.text(min_size=0, max_size=14), max_size=9)
# what a writer is given: ROS strings (UTF-8, so no lone surrogate; a C string cannot hold a NUL)
ros_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=14)
doubles = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def joint_states(draw):
    m = JointState()
    m.header.stamp.sec = draw(st.integers(-2**31, 2**31 - 1))
    m.header.stamp.nanosec = draw(st.integers(0, 2**32 - 1))
    m.header.frame_id = draw(st.text(max_size=9))
    m.name = draw(names)
    k = len(m.name)
    for f in ("position", "velocity", "effort"):
        n = draw(st.sampled_from([0, k, draw(st.integers(0, 9))]))
        setattr(m, f, draw(st.lists(doubles, min_size=n, max_size=n)))
    return m


def same(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@settings(max_examples=400, deadline=None)
@given(st.lists(joint_states(), min_size=1, max_size=4))
def test_joint_state_reads_back_exactly(msgs):
    """One reader over a sequence of messages (its name cache sees repeats and changes)."""
    r = JointStateCdr()
    for m in msgs + msgs[:1]:
        raw = serialize_message(m)
        d = deserialize_message(raw, JointState)            # what the middleware reads (a name with a
        assert r.parse(raw)                                  # NUL in it ends there, as a C string does)
        assert r.names == list(d.name)
        assert (r.sec, r.nanosec) == (m.header.stamp.sec, m.header.stamp.nanosec)
        for f in ("position", "velocity", "effort"):
            assert same(getattr(r, f), getattr(m, f)), f


def test_name_cache_sees_a_change_in_one_character():
    r = JointStateCdr()
    a = JointState(name=["panda_joint1", "panda_joint2"], position=[1.0, 2.0])
    b = JointState(name=["panda_joint1", "panda_joint3"], position=[1.0, 2.0])
    assert r.parse(serialize_message(a)) and r.names_changed and r.names == a.name
    assert r.parse(serialize_message(a)) and not r.names_changed
    assert r.parse(serialize_message(b)) and r.names_changed and r.names == b.name


def test_mapper_from_bytes_matches_the_mapper_from_messages():
    """JointStateMapper.map_cdr (the control path) and .map (a message) give the same q, v and the
    same rejections, with names shuffled, extra, missing, repeated, a NaN."""
    model = ["a", "b", "c"]
    cases = [
        JointState(name=["c", "x", "a", "b"], position=[3.0, 9.0, 1.0, 2.0], velocity=[0.3, 0.0, 0.1, 0.2]),
        JointState(name=["a", "b"], position=[1.0, 2.0], velocity=[0.0, 0.0]),              # c missing
        JointState(name=["a", "b", "c", "a"], position=[1.0] * 4, velocity=[0.0] * 4),      # repeated
        JointState(name=["a", "b", "c"], position=[1.0, math.nan, 3.0], velocity=[0.0] * 3),
        JointState(name=["a", "b", "c"], position=[1.0, 2.0, 3.0], velocity=[]),            # no velocity
        JointState(name=["a", "b", "c"], position=[1.0, 2.0], velocity=[0.0] * 3),          # short
    ]
    for require_velocity in (True, False):
        m1, m2, r = JointStateMapper(model, require_velocity), JointStateMapper(model, require_velocity), JointStateCdr()
        for msg in cases:
            ok1 = m1.map(msg)
            assert r.parse(serialize_message(msg))
            ok2 = m2.map_cdr(r)
            assert ok1 == ok2, (msg, m1.reason, m2.reason)
            assert (m1.reason, m1.detail) == (m2.reason, m2.detail)
            if ok1:
                assert np.array_equal(m1.q, m2.q) and np.array_equal(m1.v, m2.v)


def test_truncated_buffers_are_refused():
    raw = serialize_message(JointState(name=["a", "bb"], position=[1.0, 2.0], velocity=[3.0, 4.0]))
    for cut in range(8, len(raw) - 1):
        r = JointStateCdr()
        try:
            ok = r.parse(raw[:cut])
        except (ValueError, IndexError):
            continue
        # a cut inside the trailing padding or the effort count may still parse: never with values
        # that are not the message's
        assert ok and list(r.position) == [1.0, 2.0] and list(r.velocity) == [3.0, 4.0], cut


def test_other_encapsulations_are_left_to_rclpy():
    raw = bytearray(serialize_message(JointState(name=["a"], position=[1.0])))
    raw[1] = 0                                      # big-endian CDR: not read here
    assert JointStateCdr().parse(bytes(raw)) is False
    assert read_float64_array(bytes(raw)) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=9), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)), max_size=3),
       st.integers(0, 2**32 - 1), st.lists(doubles, max_size=12))
def test_float64_array_reads_back(dims, offset, data):
    m = Float64MultiArray()
    m.layout.dim = [MultiArrayDimension(label=a, size=b, stride=c) for a, b, c in dims]
    m.layout.data_offset = offset
    m.data = data
    assert same(read_float64_array(serialize_message(m)), data)


@pytest.mark.parametrize("n,label", [(0, "joints"), (1, ""), (7, "joints"), (9, "abcdefgh")])
def test_float64_array_writer(n, label):
    w = Float64ArrayCdr(n, label)
    w.data[:] = np.arange(n) * 1.5 - 2.0
    m = deserialize_message(w.bytes(), Float64MultiArray)
    assert list(m.data) == list(np.arange(n) * 1.5 - 2.0)
    assert [(d.label, d.size, d.stride) for d in m.layout.dim] == [(label, n, n)] and m.layout.data_offset == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(ros_text, max_size=9), ros_text, st.integers(-2**31, 2**31 - 1), st.integers(0, 2**32 - 1),
       st.data())
def test_joint_state_writer(nm, frame, sec, nsec, data):
    w = JointStateWriter(nm, frame)
    w.set_stamp(sec, nsec)
    vals = {f: data.draw(st.lists(doubles, min_size=len(nm), max_size=len(nm))) for f in ("position", "velocity", "effort")}
    for f, v in vals.items():
        getattr(w, f)[:] = v
    m = deserialize_message(w.bytes(), JointState)
    assert m.name == nm and m.header.frame_id == frame and (m.header.stamp.sec, m.header.stamp.nanosec) == (sec, nsec)
    for f, v in vals.items():
        assert same(getattr(m, f), v)


def test_wrench_and_clock_writers():
    w = WrenchStampedWriter("panda_link8")
    w.set_stamp(5, 6)
    w.wrench[:] = [1, 2, 3, 4, 5, 6]
    m = deserialize_message(w.bytes(), WrenchStamped)
    f, t = m.wrench.force, m.wrench.torque
    assert m.header.frame_id == "panda_link8" and (m.header.stamp.sec, m.header.stamp.nanosec) == (5, 6)
    assert [f.x, f.y, f.z, t.x, t.y, t.z] == [1, 2, 3, 4, 5, 6]
    c = ClockWriter()
    c.set_stamp(12, 34)
    m = deserialize_message(c.bytes(), Clock)
    assert (m.clock.sec, m.clock.nanosec) == (12, 34)


# ---------------------------------------------------------------- trajectories (nodes/cdr_trajectory.py)
from builtin_interfaces.msg import Duration  # noqa: E402
from geometry_msgs.msg import Transform, Twist  # noqa: E402
from trajectory_msgs.msg import (JointTrajectory, JointTrajectoryPoint, MultiDOFJointTrajectory,  # noqa: E402
                                 MultiDOFJointTrajectoryPoint)

from robot_dynamics.nodes.cdr_trajectory import read_joint_trajectory, read_multidof_trajectory  # noqa: E402

# strings rclpy can serialize (UTF-8: no lone surrogates; a C string: no NUL)
ros_str = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=14)
durations = st.builds(Duration, sec=st.integers(-2**31, 2**31 - 1), nanosec=st.integers(0, 2**32 - 1))


def _headed(draw, m, names):
    """A trajectory message with a drawn header and up to `names` joint names."""
    m.header.stamp.sec = draw(st.integers(-2**31, 2**31 - 1))
    m.header.stamp.nanosec = draw(st.integers(0, 2**32 - 1))
    m.header.frame_id = draw(ros_str)
    m.joint_names = draw(st.lists(ros_str, max_size=names))
    return m


@st.composite
def joint_trajectories(draw):
    m = _headed(draw, JointTrajectory(), 5)
    for _ in range(draw(st.integers(0, 5))):
        p = JointTrajectoryPoint()
        for f in ("positions", "velocities", "accelerations", "effort"):     # any lengths, also
            setattr(p, f, draw(st.lists(doubles, max_size=6)))              # inconsistent ones
        p.time_from_start = draw(durations)
        m.points.append(p)
    return m


def _twist(draw):
    return Twist(linear=_v3(draw), angular=_v3(draw))


def _v3(draw):
    from geometry_msgs.msg import Vector3
    return Vector3(x=draw(doubles), y=draw(doubles), z=draw(doubles))


@st.composite
def multidof_trajectories(draw):
    from geometry_msgs.msg import Quaternion
    m = _headed(draw, MultiDOFJointTrajectory(), 3)
    for _ in range(draw(st.integers(0, 4))):
        p = MultiDOFJointTrajectoryPoint()
        p.transforms = [Transform(translation=_v3(draw), rotation=Quaternion(
            x=draw(doubles), y=draw(doubles), z=draw(doubles), w=draw(doubles)))
            for _ in range(draw(st.integers(0, 3)))]
        p.velocities = [_twist(draw) for _ in range(draw(st.integers(0, 3)))]
        p.accelerations = [_twist(draw) for _ in range(draw(st.integers(0, 3)))]
        p.time_from_start = draw(durations)
        m.points.append(p)
    return m


def _same_head_and_times(d, m):
    """Header, joint names and point times of the read data against the message; yields (k, point)."""
    assert (d.sec, d.nanosec, d.frame_id) == (m.header.stamp.sec, m.header.stamp.nanosec, m.header.frame_id)
    assert d.joint_names == list(m.joint_names)
    assert len(d.times) == len(m.points)
    for k, p in enumerate(m.points):
        assert d.times[k] == p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec
        yield k, p


@settings(max_examples=300, deadline=None)
@given(joint_trajectories())
def test_joint_trajectory_reads_back_exactly(m):
    d = read_joint_trajectory(serialize_message(m))
    for k, p in _same_head_and_times(d, m):
        for f in ("positions", "velocities", "accelerations", "effort"):
            assert same(getattr(d, f)[k], getattr(p, f)), (k, f)


@settings(max_examples=300, deadline=None)
@given(multidof_trajectories())
def test_multidof_trajectory_reads_back_exactly(m):
    d = read_multidof_trajectory(serialize_message(m))
    for k, p in _same_head_and_times(d, m):
        want = [[t.translation.x, t.translation.y, t.translation.z,
                 t.rotation.x, t.rotation.y, t.rotation.z, t.rotation.w] for t in p.transforms]
        assert same(d.transforms[k], np.array(want).reshape(-1, 7)), k
        for f in ("velocities", "accelerations"):
            want = [[w.linear.x, w.linear.y, w.linear.z, w.angular.x, w.angular.y, w.angular.z]
                    for w in getattr(p, f)]
            assert same(getattr(d, f)[k], np.array(want).reshape(-1, 6)), (k, f)


def test_trajectory_conversions_from_bytes_equal_those_from_messages():
    """What the controller builds from the bytes equals what it builds from rclpy's message: joint
    columns by name (trajectory_arrays), the Cartesian trajectory's points (the frame's transform by
    index); and the same ValueError for an inconsistent point."""
    from robot_dynamics.nodes.cartesian_refs import cartesian_trajectory_from_msg
    from robot_dynamics.nodes.common import trajectory_arrays
    rng = np.random.default_rng(3)
    jt = JointTrajectory(joint_names=["b", "a", "c"])
    for k in range(1, 6):
        jt.points.append(JointTrajectoryPoint(positions=rng.normal(size=3).tolist(),
                                              velocities=rng.normal(size=3).tolist(),
                                              time_from_start=Duration(sec=k, nanosec=5)))
    got = trajectory_arrays(["a", "b"], read_joint_trajectory(serialize_message(jt)))
    want = trajectory_arrays(["a", "b"], jt)
    for g, w in zip(got, want):
        assert (g is None and w is None) or np.array_equal(g, w)
    jt.points[2].positions = [1.0, 2.0]
    for src in (jt, read_joint_trajectory(serialize_message(jt))):
        with pytest.raises(ValueError, match="point 2: 2 positions for 3 joints"):
            trajectory_arrays(["a", "b"], src)
    mt = MultiDOFJointTrajectory(joint_names=["other", "tool"])
    for k in range(1, 5):
        tfs = []
        for _ in range(2):
            t = Transform()
            t.translation.x, t.translation.y, t.translation.z = rng.normal(size=3).tolist()
            t.rotation.x, t.rotation.y, t.rotation.z, t.rotation.w = (0.0, 0.0, float(np.sin(0.1 * k)), float(np.cos(0.1 * k)))
            tfs.append(t)
        mt.points.append(MultiDOFJointTrajectoryPoint(transforms=tfs, time_from_start=Duration(sec=k)))
    a = cartesian_trajectory_from_msg(read_multidof_trajectory(serialize_message(mt)), 1)
    b = cartesian_trajectory_from_msg(mt, 1)
    assert np.array_equal(a.positions, b.positions) and np.array_equal(a.rotations, b.rotations)
    assert np.array_equal(a.times, b.times) and a.kind == b.kind
    assert np.array_equal(b.positions[:, 0], [p.transforms[1].translation.x for p in mt.points])


def test_truncated_trajectories_are_refused():
    """Every cut before the end of the data is refused (ValueError), never read past; a cut in the
    slack the middleware leaves after it reads the whole message.  The ends, by the XCDR1 layout
    (offsets from the buffer start, the 4-byte encapsulation header first, alignment relative to
    the payload): JointTrajectory: header 4 + stamp 8 + frame_id '' 5 -> 20; names: count 24, 'a'
    30 -> 32, 'b' 38 -> 40; points count 44; each point: positions count, pad to 8, 2 doubles,
    velocities the same, two empty counts, the duration: 44 -> 108 -> 172.  MultiDOF: 20; names count
    24, 't' 30 -> 32; points count 36; each point: transforms count, pad, 7 doubles, velocities count,
    pad, 6 doubles, an empty count, the duration: 36 -> 168 -> 296."""
    jt = JointTrajectory(joint_names=["a", "b"], points=[JointTrajectoryPoint(
        positions=[1.0, 2.0], velocities=[3.0, 4.0], time_from_start=Duration(sec=1))] * 2)
    mt = MultiDOFJointTrajectory(joint_names=["t"], points=[MultiDOFJointTrajectoryPoint(
        transforms=[Transform()], velocities=[Twist()], time_from_start=Duration(sec=1))] * 2)
    for msg, read, end in ((jt, read_joint_trajectory, 172), (mt, read_multidof_trajectory, 296)):
        raw = serialize_message(msg)
        assert len(raw) >= end
        for cut in range(4, len(raw) + 1):
            if cut < end:
                with pytest.raises(ValueError):
                    read(raw[:cut])
            else:
                d = read(raw[:cut])
                assert len(d.times) == 2 and d.joint_names == list(msg.joint_names) and d.times[1] == 1.0
        raw = bytearray(raw)
        raw[1] = 0
        assert read(bytes(raw)) is None               # big-endian: left to rclpy


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20),
       st.lists(doubles, min_size=6, max_size=6))
def test_wrench_stamped_reads_back_exactly(frame, w):
    m = WrenchStamped()
    m.header.frame_id = frame
    (m.wrench.force.x, m.wrench.force.y, m.wrench.force.z,
     m.wrench.torque.x, m.wrench.torque.y, m.wrench.torque.z) = w
    raw = serialize_message(m)
    got_frame, got = read_wrench_stamped(raw)
    assert got_frame == frame and same(got, w)
    for cut in range(4, 12 + len(frame.encode()) + 1 + 48 - 1):   # every cut before the last torque
        with pytest.raises(ValueError):
            read_wrench_stamped(raw[:cut])
    raw = bytearray(raw)
    raw[1] = 0
    assert read_wrench_stamped(bytes(raw)) is None
