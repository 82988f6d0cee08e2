"""trajectory_msgs/JointTrajectory and MultiDOFJointTrajectory read from their serialized bytes.

A 1000-point trajectory costs rclpy 20-60 ms to turn into Python message objects (a point object, its
Duration and a list or array per field, each set through a checking property), on the executor thread,
holding the interpreter the control thread needs every millisecond.  The numbers are all the
controller wants: read straight out of the bytes, per point a float64 view per field, the whole
message in a few milliseconds.  Format: nodes/cdr.py (XCDR1 little endian; a sequence is a uint32
count, then its elements, 8-aligned before the first double when there is one).

    d = read_joint_trajectory(raw)         # None: an encapsulation not read here (use rclpy)
    d.sec, d.nanosec, d.frame_id, d.joint_names, d.times (N,)
    d.positions, d.velocities, d.accelerations: [float64 array per point] (may differ in length)
    d = read_multidof_trajectory(raw)
    d.transforms: [(k, 7) per point: x y z, qx qy qz qw], d.velocities, d.accelerations: [(k, 6): linear,
    angular]

ValueError on a truncated or inconsistent buffer.  Checked against rclpy's serialization in
test/test_cdr.py.
"""
import struct

import numpy as np

from .cdr import CDR_LE, _HDR, _STAMP, _U32, _a4, _a8

_F8 = np.dtype("<f8")


class TrajectoryData:
    """The fields of a trajectory message the controller reads (see the module docstring)."""
    __slots__ = ("sec", "nanosec", "frame_id", "joint_names", "times", "positions", "velocities",
                 "accelerations", "effort", "transforms")

    def __init__(self):
        self.positions = self.velocities = self.accelerations = self.effort = self.transforms = None


class _Reader:
    def __init__(self, raw, what):
        self.raw, self.n, self.what = raw, len(raw), what
        self.o = _HDR

    def u32(self):
        o = _a4(self.o)
        if o + 4 > self.n:
            raise ValueError(f"{self.what}: truncated message")
        self.o = o + 4
        return _U32.unpack_from(self.raw, o)[0]

    def string(self):
        ln = self.u32()
        o = self.o
        if ln < 1 or o + ln > self.n:
            raise ValueError(f"{self.what}: a string overruns the message")
        self.o = o + ln
        return bytes(self.raw[o:o + ln]).split(b"\x00", 1)[0].decode("utf-8")

    def doubles(self, per):
        """A sequence of `per`-double elements -> float64 array (k * per,) (a view into raw)."""
        k = self.u32()
        if not k:
            return np.zeros(0)
        o = _a8(self.o)
        end = o + 8 * per * k
        if end > self.n:
            raise ValueError(f"{self.what}: {k} elements overrun the {self.n}-byte message")
        self.o = end
        return np.frombuffer(self.raw, dtype=_F8, count=per * k, offset=o)

    def duration(self):
        o = _a4(self.o)
        if o + 8 > self.n:
            raise ValueError(f"{self.what}: truncated message")
        self.o = o + 8
        s, ns = _STAMP.unpack_from(self.raw, o)
        return s + 1e-9 * ns

    def head(self, d):
        d.sec, d.nanosec = _STAMP.unpack_from(self.raw, _HDR)
        self.o = _HDR + 8
        d.frame_id = self.string()
        count = self.u32()
        if 4 * count > self.n:
            raise ValueError(f"{self.what}: {count} joint names in a {self.n}-byte message")
        d.joint_names = [self.string() for _ in range(count)]
        count = self.u32()
        if 8 * count > self.n:
            raise ValueError(f"{self.what}: {count} points in a {self.n}-byte message")
        return count


def _read(raw, what, fields):
    if bytes(raw[:2]) != CDR_LE:
        return None
    r = _Reader(raw, what)
    d = TrajectoryData()
    try:
        N = r.head(d)
        cols = [[] for _ in fields]
        times = np.empty(N)
        for k in range(N):
            for c, (_, per) in zip(cols, fields):
                c.append(r.doubles(per))
            times[k] = r.duration()
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"{what}: unreadable message ({e})") from None
    d.times = times
    for c, (name, per) in zip(cols, fields):
        setattr(d, name, c if per == 1 else [a.reshape(-1, per) for a in c])
    return d


def read_joint_trajectory(raw):
    """A serialized trajectory_msgs/JointTrajectory -> TrajectoryData, or None (another encapsulation)."""
    return _read(raw, "joint_trajectory", (("positions", 1), ("velocities", 1), ("accelerations", 1),
                                           ("effort", 1)))


def read_multidof_trajectory(raw):
    """A serialized trajectory_msgs/MultiDOFJointTrajectory -> TrajectoryData, or None."""
    return _read(raw, "cartesian_trajectory", (("transforms", 7), ("velocities", 6), ("accelerations", 6)))
