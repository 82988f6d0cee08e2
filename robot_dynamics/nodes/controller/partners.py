"""The other arms of a cell, seen from one arm's controller: arm-to-arm distance rows
(control/arm_distance.py) fed from the partners' joint states, and the partners' controllers watched.

    arm_distance.partners:      [right]                   # the other arms' namespaces
    arm_distance.base_pose:     [-0.55, 0, 0, 0, 0, 0]    # this arm's base in the world: x y z roll pitch yaw
    arm_distance.partner_poses: [0.55, 0, 0, 0, 0, 3.14159]   # 6 per partner, the same world

Per partner <ns>: its model from /<ns>/robot_description (TRANSIENT_LOCAL, as the arm's own; autostart
waits for it), its newest /<ns>/joint_states and the receipt of its controller's commands on
/<ns>/<command_topic> (both taken on the control thread, the newest at each wake-up, as the wrench is).
Before each step the rows hand the envelope one plane per pair of frames (this arm's `safety.frames`,
the partner's `arm_distance.partner_frames`, default the same names) whose sphere gap is under
`arm_distance.reach`: the envelope keeps this arm's spheres off the partner's (its guarantees: no push
toward the plane within the margin, a spring and damping away from it, a stop if held inside).

A partner is lost when its joint states or its controller's commands are older than
`arm_distance.timeout` (never seen counts as lost): this arm then holds where it is (the loop's hold:
the reference becomes the current position, a trajectory or goal in progress ends) and refuses new
targets, with a WARN naming the partner and what went silent, and /diagnostics at WARN; when both come
back it says so and takes targets again (it stays at the hold).  The rows keep using the partner's last
state meanwhile (its arm is braked by its driver or the sim's command timeout, at rest near it).

Reads: the partners' descriptions, joint states and command receipts.  Writes: the envelope's extra
planes (set_extra_planes, before each step), the loop's hold, counts `arm_distance.*`.  Runs on the
control thread under the node's lock (the descriptions: on the executor).  A mixin of
TorqueControllerNode (nodes/controller/node.py)."""
import numpy as np
import pinocchio as pin
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

from ...control.arm_distance import ArmDistanceRows
from ...dynamics import Model
from ..cdr import JointStateCdr
from ..common import JointStateMapper, ParamSpec, make_qos
from ..control_path import TakeSubscription
from .inputs import QOS_LATCHED

T = Parameter.Type

PARAMS = [
    ParamSpec("arm_distance.partners", T.STRING_ARRAY,
              "namespaces of the other arms of a cell (their <ns>/joint_states, <ns>/robot_description and "
              "<ns>/<command_topic>): this arm's safety.frames kept apart from theirs, and this arm holds "
              "while one is lost; empty: off", startup=True),
    ParamSpec("arm_distance.base_pose", T.DOUBLE_ARRAY,
              "this arm's base in the cell's world: x y z [m] roll pitch yaw [rad] (empty: the origin)",
              startup=True),
    ParamSpec("arm_distance.partner_poses", T.DOUBLE_ARRAY,
              "6 numbers per partner, its base in the same world: x y z [m] roll pitch yaw [rad]", startup=True),
    ParamSpec("arm_distance.partner_frames", T.STRING_ARRAY,
              "the partners' frames kept apart (empty: the names of this arm's safety.frames)", startup=True),
    ParamSpec("arm_distance.partner_radii", T.DOUBLE_ARRAY,
              "[m] their sphere radii, 1 or one per frame (empty: this arm's safety.frame_radii)", startup=True),
    ParamSpec("arm_distance.reach", 0.3, "[m] frame pairs whose sphere gap is under this get a plane",
              "positive", startup=True),
    ParamSpec("arm_distance.timeout", 0.25, "[s] a partner's joint states or its controller's commands older "
              "than this: the partner is lost (this arm holds, refuses targets)", "positive", startup=True),
]


def _topic(ns, name):
    """`name` in namespace `ns` ('/right', 'right' -> '/right/name'; an absolute name's leading / dropped)."""
    return "/" + "/".join(p for p in (ns.strip("/"), name.strip("/")) if p)


def _pose(six, what):
    a = np.asarray(six, dtype=float)
    if a.shape != (6,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: expected 6 finite numbers (x y z roll pitch yaw), got {list(six)}")
    return pin.rpy.rpyToMatrix(*a[3:]), a[:3]


class _Partner:
    def __init__(self, ns, model, rows):
        self.ns, self.model, self.rows = ns, model, rows
        self.mapper = JointStateMapper(list(model.joint_names), require_velocity=False)
        self.cdr = JointStateCdr()
        self.q = None                  # its newest valid q (model order)
        self.t_state = self.t_cmd = None   # receipt (monotonic) of its newest state / command
        self.lost = True
        self.why = "not seen yet"


class PartnerArms:
    """The cell's other arms (see the module docstring)."""

    def _partner_names(self):
        """arm_distance.partners without empty entries (a launch file's [""] for none: a typed empty list)."""
        return [ns for ns in (self._p("arm_distance.partners") or []) if ns.strip("/")]

    def _partners_subscribe(self):
        """At construction: the partners' descriptions (TRANSIENT_LOCAL), kept for configure."""
        self._partner_rd = {}
        self._partner_rd_subs = [
            self.create_subscription(String, _topic(ns, "robot_description"),
                                     lambda m, ns=ns: self._partner_rd.__setitem__(ns, m.data), QOS_LATCHED)
            for ns in self._partner_names()]

    def _partners_waiting(self):
        """The description topics autostart still waits for ('' when none)."""
        return ", ".join(_topic(ns, "robot_description") for ns in self._partner_names()
                         if ns not in self._partner_rd)

    def _partners_configure(self, c, extra):
        """At configure (under the lock): the rows and subscriptions, appended to the control path's
        `extra`.  ValueError naming the cause."""
        c.partners = []
        names = self._partner_names()
        if not names:
            return
        if len(set(names)) != len(names):
            raise ValueError(f"arm_distance.partners: duplicate namespaces in {names}")
        env = c.loop.envelope
        if not len(env.fids):
            raise ValueError("arm_distance.partners: set safety.frames (this arm's frames kept apart "
                             "from the partners')")
        poses = list(self._p("arm_distance.partner_poses") or [])
        if len(poses) != 6 * len(names):
            raise ValueError(f"arm_distance.partner_poses: expected 6 numbers per partner ({6 * len(names)} "
                             f"for {names}), got {len(poses)}")
        own = list(self._p("arm_distance.base_pose") or [0.0] * 6)
        R0, p0 = _pose(own, "arm_distance.base_pose")
        frames = list(self._p("arm_distance.partner_frames") or self._p("safety.frames"))
        radii = list(self._p("arm_distance.partner_radii") or self._p("safety.frame_radii"))
        joints = list(self._p("joints") or [])
        qos = make_qos(self._p("qos_reliability"), self._p("qos_depth"))
        for i, ns in enumerate(names):
            topic = _topic(ns, "robot_description")
            urdf = self._partner_rd.get(ns)
            if urdf is None:
                raise ValueError(f"arm_distance: no robot description on {topic} yet (the partner's driver "
                                 "or the cell sim publishes it, TRANSIENT_LOCAL)")
            model = None
            if joints:                               # the same arm: its joints as this arm's (fingers locked)
                try:
                    model = Model.from_urdf_string(urdf, active_joints=joints, strict=False)
                except ValueError:
                    model = None
            try:
                model = model or Model.from_urdf_string(urdf, strict=False)
            except Exception as e:                   # noqa: BLE001 (XML / parser errors of any type)
                raise ValueError(f"arm_distance: {topic}: {e}") from None
            R1, p1 = _pose(poses[6 * i:6 * i + 6], f"arm_distance.partner_poses[{6 * i}:{6 * i + 6}]")
            try:
                rows = ArmDistanceRows(c.model, model, (R0.T @ R1, R0.T @ (p1 - p0)), frames, radii,
                                       reach=float(self._p("arm_distance.reach")))
            except ValueError as e:
                raise ValueError(f"arm_distance ({ns}): {e}") from None
            p = _Partner(ns, model, rows)
            js = TakeSubscription(self, JointState, _topic(ns, self._p("joint_states_topic")), qos, raw=True)
            cmd = TakeSubscription(self, Float64MultiArray, _topic(ns, self._p("command_topic")), qos, raw=True)
            extra.append((js, lambda raw, now, p=p: self._on_partner_state(p, raw, now)))
            extra.append((cmd, lambda raw, now, p=p: setattr(p, "t_cmd", now)))
            c.partners.append(p)
        self._log.info(f"arm_distance: kept apart from {names} (frames {frames}); holding while one is lost")

    def _on_partner_state(self, p, raw, now):
        """A partner's newest joint state (bytes), on the control thread."""
        with self._lock:
            try:
                ok = p.cdr.parse(raw) and p.mapper.map_cdr(p.cdr)
            except (ValueError, IndexError):           # a truncated or inconsistent buffer
                ok = False
            if not ok:                                 # counted; the partner's state goes stale
                self.counts["arm_distance.rejected_states"] += 1
                return
            p.q = p.mapper.q.copy()
            p.t_state = now

    def _partners_step(self, c, now):
        """Before each step (control thread, under the lock): partners' liveness, then the rows."""
        loop = c.loop
        for p in c.partners:
            why = ("no joint state" if p.t_state is None else
                   f"joint states silent {now - p.t_state:.3f} s" if now - p.t_state > self._partner_timeout else
                   "its controller's commands: none yet" if p.t_cmd is None else
                   f"its controller's commands silent {now - p.t_cmd:.3f} s" if now - p.t_cmd > self._partner_timeout
                   else "")
            if why and not p.lost:
                p.lost, p.why = True, why
                self.counts["arm_distance.partner_lost"] += 1
                ok, _ = loop.hold()
                self._log.warning(f"arm_distance: partner {p.ns!r} lost ({why}): "
                                  f"{'holding here' if ok else 'not holding (no valid state)'}, targets refused "
                                  "until it is back")
            elif not why and p.lost:
                if p.why != "not seen yet":
                    self._log.info(f"arm_distance: partner {p.ns!r} back: targets taken again")
                p.lost, p.why = False, ""
            if p.q is not None:                        # this arm's frames at its newest state
                p.rows.update(loop.envelope, p.q, loop.q if loop.cycle.have_state else None)

    def _partner_lost(self, c):
        """'' or why a new target is refused now."""
        lost = [f"{p.ns} ({p.why})" for p in c.__dict__.get("partners", ()) if p.lost]
        return f"partner arm lost: {', '.join(lost)}; holding" if lost else ""
