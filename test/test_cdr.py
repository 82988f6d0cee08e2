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
                                      WrenchStampedWriter, read_float64_array)
from robot_dynamics.nodes.common import JointStateMapper  # noqa: E402

names = st.lists(st.text(min_size=0, max_size=14), max_size=9)
# what a writer is given: ROS strings (a C string cannot hold a NUL)
ros_text = st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=14)
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
