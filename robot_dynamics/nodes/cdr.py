"""The two messages of the per-message path read and written as serialized bytes: no Python message
object per joint state or per command.

Taking a sensor_msgs/JointState as a Python message costs rclpy about 25 us more than taking its bytes
(it builds a JointState, a Header, a Time, a list of str and three arrays), and publishing a
Float64MultiArray about 7 us more than publishing bytes (measured on the 2-core development machine).
At 1 kHz that is 3 % of a core for nothing: the control path reads the numbers it needs straight out
of the bytes and publishes a preallocated serialized command.

The F/T sensor's geometry_msgs/WrenchStamped (1 kHz beside the joint states on a real cell) is read
the same way, on the control thread (read_wrench_stamped).

The format is the one the DDS middlewares ROS 2 uses put on the wire for these types: XCDR version 1
(OMG DDS-XTypes 7.4.3, "plain CDR"), little endian, behind its 4-byte encapsulation header (0x00 0x01:
CDR_LE).  Primitives are aligned to their size relative to the start of the payload (after the
header); a string is a uint32 length (with the terminating NUL) then the bytes; a sequence is a uint32
count then its elements (aligned once, before the first).  Padding bytes carry no meaning (Fast DDS
leaves whatever was in the buffer): nothing here reads them.  Another encapsulation (big endian,
XCDR2) is not parsed: JointStateCdr.parse returns None and the caller deserialises it with rclpy.
Both are checked against rclpy's own (de)serialisation in test/test_cdr.py.
"""
import struct

import numpy as np

_U32 = struct.Struct("<I")
_STAMP = struct.Struct("<iI")
_HDR = 4                                    # encapsulation header
CDR_LE = b"\x00\x01"


def _a4(o):
    """Offset o (absolute) aligned to 4 relative to the payload."""
    return ((o - _HDR + 3) & ~3) + _HDR


def _a8(o):
    return ((o - _HDR + 7) & ~7) + _HDR


class JointStateCdr:
    """Reads a serialized sensor_msgs/JointState.

        r = JointStateCdr()
        if r.parse(raw):            # True: r.sec, r.nanosec, r.names (list of str), r.position,
            ...                     # r.velocity, r.effort (float64 views into raw; empty when the
                                    # field is)
    Repeated messages of one layout (the same name bytes, the same field lengths: a driver's stream)
    cost little: the names are compared by bytes and decoded only when they change
    (`names_changed`), and when the layout is the last one's (`layout_changed` False) the values are
    one float64 view, `values`, at the same offsets (`spans`: (start, length) in doubles of position,
    velocity and effort, or None for an empty field).  Raises ValueError on a truncated or
    inconsistent buffer; returns False for an encapsulation it does not read."""

    def __init__(self):
        self.names = None
        self.names_changed = False
        self.layout_changed = True
        self._names_at = -1                   # where the last name list started (its count)
        self._head = None                     # the bytes of its count
        self._segs = ()                       # [(start, end, bytes)] of its strings (length + text)
        self._after_names = 0                 # the offset after it
        self._block = None                    # the bytes from _names_at to _after_names
        self._end = 0                         # the end of the last layout's values
        self.spans = (None, None, None)
        self._counts = None                   # the last layout: (its counts Struct, the counts,
        self._first = self._total = 0         # the first value's offset, the number of doubles)
        self.values = _EMPTY
        self.sec = self.nanosec = 0

    def _field(self, i):
        sp = self.spans[i]
        return _EMPTY if sp is None else self.values[sp[0]:sp[0] + sp[1]]

    position = property(lambda self: self._field(0))
    velocity = property(lambda self: self._field(1))
    effort = property(lambda self: self._field(2))

    def parse(self, raw):
        try:
            return self._parse(raw)
        except struct.error as e:
            raise ValueError(f"JointState: truncated message ({e})") from None

    def _parse(self, raw):
        if raw[:2] != CDR_LE:
            return False
        self.sec, self.nanosec = _STAMP.unpack_from(raw, _HDR)
        flen = _U32.unpack_from(raw, _HDR + 8)[0]
        o = _a4(_HDR + 12 + flen)
        after = self._after_names
        if o == self._names_at and raw[o:after] == self._block:      # the same bytes as last time
            self.names_changed = False
        elif o == self._names_at and raw[o:o + 4] == self._head and all(raw[s:e] == b for s, e, b in self._segs):
            self.names_changed = False                                # the same names, other padding
            self._block = raw[o:after]
        else:
            after = self._read_names(raw, o)
            self._counts = None
        cs = self._counts
        if cs is not None and self._end <= len(raw) and cs[0].unpack_from(raw, after) == cs[1]:
            self.layout_changed = False                               # the last layout again
            self.values = np.frombuffer(raw, dtype="<f8", count=self._total, offset=self._first)
            return True
        self._read_layout(raw, after)
        return True

    def _read_layout(self, raw, after):
        """position, velocity, effort: a count, then (when > 0) 8-aligned doubles; the three value
        runs are read through one float64 view (their starts differ by multiples of 8 bytes)."""
        n_raw = len(raw)
        o = after
        first = -1
        spans, counts, fmt = [], [], "<"
        for i in range(3):
            a = _a4(o)
            fmt += f"{a - o}xI"
            k = _U32.unpack_from(raw, a)[0]
            counts.append(k)
            o = a + 4
            if k:
                a = _a8(o)
                fmt += f"{a - o}x"
                o = a
                if first < 0:
                    first = o
                spans.append(((o - first) >> 3, k))
                o += 8 * k
                if o > n_raw:
                    raise ValueError(f"JointState: {k} values overrun the {n_raw}-byte message")
                fmt += f"{8 * k}x" if i < 2 else ""
            else:
                spans.append(None)
        self.layout_changed = True
        self.spans = tuple(spans)
        self._end = o
        if first < 0:
            self._first = self._total = 0
            self.values = _EMPTY
        else:
            self._first, self._total = first, (o - first) >> 3
            self.values = np.frombuffer(raw, dtype="<f8", count=self._total, offset=first)
        self._counts = (struct.Struct(fmt), tuple(counts))

    def _read_names(self, raw, o):
        n_raw = len(raw)
        start = o
        count = _U32.unpack_from(raw, o)[0]
        if 4 * count > n_raw:
            raise ValueError(f"JointState: {count} names in a {n_raw}-byte message")
        head = bytes(raw[o:o + 4])
        o += 4
        names, segs = [], []
        for _ in range(count):
            o = _a4(o)
            ln = _U32.unpack_from(raw, o)[0]
            if ln < 1 or o + 4 + ln > n_raw:
                raise ValueError("JointState: a name overruns the message")
            seg = bytes(raw[o:o + 4 + ln])
            segs.append((o, o + 4 + ln, seg))
            names.append(seg[4:-1].split(b"\x00", 1)[0].decode("utf-8"))   # a C string: ends at a NUL
            o += 4 + ln
        self._names_at, self._head, self._segs, self._after_names = start, head, segs, o
        self._block = bytes(raw[start:o])
        self.names = names
        self.names_changed = True
        return o


_EMPTY = np.zeros(0)


class Float64ArrayCdr:
    """A serialized std_msgs/Float64MultiArray of n values with one layout dimension (label, size n,
    stride n) and data_offset 0, preallocated; `data` is a float64 view of its values.

        out = Float64ArrayCdr(7, "joints")
        out.data[:] = tau
        pub.publish(out.bytes())
    """

    def __init__(self, n, label="joints"):
        lab = label.encode("utf-8") + b"\x00"
        b = bytearray(CDR_LE + b"\x00\x00")
        b += _U32.pack(1)                          # layout.dim: one dimension
        b += _U32.pack(len(lab)) + lab             # label
        b += bytes(_a4(len(b)) - len(b))
        b += _U32.pack(n) + _U32.pack(n)           # size, stride
        b += _U32.pack(0)                          # data_offset
        b += _U32.pack(n)                          # data: n values
        b += bytes(_a8(len(b)) - len(b))
        self.offset = len(b)
        b += bytes(8 * n)
        self.buf = b
        self.n = n
        self.data = np.frombuffer(self.buf, dtype="<f8", count=n, offset=self.offset)

    def bytes(self):
        return bytes(self.buf)


def read_float64_array(raw):
    """The `data` of a serialized std_msgs/Float64MultiArray as a float64 view into `raw` (any
    layout), or None for an encapsulation this module does not read.  ValueError on a truncated
    buffer."""
    try:
        return _read_float64_array(raw)
    except struct.error as e:
        raise ValueError(f"Float64MultiArray: truncated message ({e})") from None


def _read_float64_array(raw):
    if raw[:2] != CDR_LE:
        return None
    n_raw = len(raw)
    o = _HDR
    ndim = _U32.unpack_from(raw, o)[0]
    o += 4
    if 12 * ndim > n_raw:
        raise ValueError(f"Float64MultiArray: {ndim} dimensions in a {n_raw}-byte message")
    for _ in range(ndim):                          # label, size, stride
        o = _a4(o)
        o += 4 + _U32.unpack_from(raw, o)[0]
        o = _a4(o) + 8
    o = _a4(o) + 4                                 # data_offset
    k = _U32.unpack_from(raw, o)[0]
    o += 4
    if not k:
        return _EMPTY
    o = _a8(o)
    if o + 8 * k > n_raw:
        raise ValueError(f"Float64MultiArray: {k} values overrun the {n_raw}-byte message")
    return np.frombuffer(raw, dtype="<f8", count=k, offset=o)


def read_wrench_stamped(raw):
    """A serialized geometry_msgs/WrenchStamped -> (frame_id, wrench: a float64 view (6,) into raw:
    force x y z, torque x y z), or None for an encapsulation this module does not read.  ValueError
    on a truncated buffer."""
    if raw[:2] != CDR_LE:
        return None
    n_raw = len(raw)
    if n_raw < _HDR + 12:
        raise ValueError("WrenchStamped: truncated message")
    ln = _U32.unpack_from(raw, _HDR + 8)[0]
    o = _HDR + 12
    if ln < 1 or o + ln > n_raw:
        raise ValueError("WrenchStamped: the frame_id overruns the message")
    frame = bytes(raw[o:o + ln]).split(b"\x00", 1)[0].decode("utf-8", errors="replace")
    o = _a8(o + ln)
    if o + 48 > n_raw:
        raise ValueError("WrenchStamped: truncated message")
    return frame, np.frombuffer(raw, dtype="<f8", count=6, offset=o)


def _string(s, at):
    """CDR bytes of string s starting at absolute offset `at` (alignment padding first)."""
    b = s.encode("utf-8") + b"\x00"
    return bytes(_a4(at) - at) + _U32.pack(len(b)) + b


class _Writer:
    """A preallocated serialized message of fixed layout: numpy views into it, `bytes()` to publish."""

    def _grow(self, chunk):
        self.buf += chunk

    def _doubles(self, n):
        """Append (aligned) a uint32 count n and n doubles; return their view's offset."""
        self._grow(bytes(_a4(len(self.buf)) - len(self.buf)) + _U32.pack(n))
        self._grow(bytes(_a8(len(self.buf)) - len(self.buf)) if n else b"")
        at = len(self.buf)
        self._grow(bytes(8 * n))
        return at

    def _view(self, at, n):
        return np.frombuffer(self.buf, dtype="<f8", count=n, offset=at)

    def set_stamp(self, sec, nanosec):
        _STAMP.pack_into(self.buf, _HDR, sec, nanosec)

    def bytes(self):
        return bytes(self.buf)


class JointStateWriter(_Writer):
    """A serialized sensor_msgs/JointState with fixed names (and frame_id) and n positions,
    velocities and efforts: set_stamp(sec, nanosec), write into .position / .velocity / .effort,
    publish .bytes()."""

    def __init__(self, names, frame_id=""):
        n = len(names)
        self.buf = bytearray(CDR_LE + b"\x00\x00" + bytes(8))        # header.stamp
        self._grow(_string(frame_id, len(self.buf)))
        self._grow(bytes(_a4(len(self.buf)) - len(self.buf)) + _U32.pack(n))
        for s in names:
            self._grow(_string(s, len(self.buf)))
        at = [self._doubles(n) for _ in range(3)]
        self.position, self.velocity, self.effort = (self._view(a, n) for a in at)


class WrenchStampedWriter(_Writer):
    """A serialized geometry_msgs/WrenchStamped: set_stamp, .wrench (6: force x y z, torque x y z)."""

    def __init__(self, frame_id=""):
        self.buf = bytearray(CDR_LE + b"\x00\x00" + bytes(8))
        self._grow(_string(frame_id, len(self.buf)))
        self._grow(bytes(_a8(len(self.buf)) - len(self.buf)))
        at = len(self.buf)
        self._grow(bytes(48))
        self.wrench = self._view(at, 6)


class ClockWriter(_Writer):
    """A serialized rosgraph_msgs/Clock: set_stamp(sec, nanosec) then bytes()."""

    def __init__(self):
        self.buf = bytearray(CDR_LE + b"\x00\x00" + bytes(8))
