"""The controller node's start-up before configure: where its model comes from (the
`robot_description` parameter, else the TRANSIENT_LOCAL /robot_description topic, else `urdf_path`
(URDF or xacro), else `robot`, example-robot-data's stand-in, said at WARN), the `autostart` timer that
waits for one of them and says what it waits for, and the warning for a params file's unknown keys.

Reads: the node's parameters and the /robot_description message.  Writes: nothing but the node's
`_rd_msg` / `_rd_sub` and its log; `_load_model` returns (Model, source) or raises ValueError naming
the cause.  Runs on the executor thread (no lock: nothing here touches the control loop).
A mixin of TorqueControllerNode (nodes/controller/node.py)."""
import time

from rclpy.lifecycle import TransitionCallbackReturn
from std_msgs.msg import String

from ...dynamics import Model
from ..common import SILENT_AFTER, silent_publisher_hint
from .params import parse_xacro_args
from .inputs import QOS_LATCHED

SUCCESS = TransitionCallbackReturn.SUCCESS


class ModelSource:
    """Robot description, autostart and unknown-parameter warnings (see the module docstring)."""

    # ---------------------------------------------------------------- robot description / autostart
    RD_RESUBSCRIBE = 5.0            # s: a publisher seen this long without its TRANSIENT_LOCAL sample

    def _subscribe_robot_description(self):
        """(Re)create the /robot_description subscription: a new reader is a new match, and the
        publisher sends its TRANSIENT_LOCAL sample again (a restarted controller next to a running
        Franka bridge waited for it for minutes, the publisher seen: the first match's delivery lost)."""
        if self._rd_sub is not None:
            self.destroy_subscription(self._rd_sub)
        self._rd_sub = self.create_subscription(
            String, self.get_parameter("robot_description_topic").value, self._on_robot_description,
            QOS_LATCHED)
        self._rd_subscribed = time.monotonic()

    def _on_robot_description(self, msg):
        self._rd_msg = msg.data

    def _end_autostart(self):
        """The one-shot autostart timer is done: destroy it (one entity fewer in every wait set)."""
        t, self._autostart_timer = self._autostart_timer, None
        if t is not None:
            t.cancel()
            self.destroy_timer(t)

    def _autostart(self):
        if self._autostart_timer is None:
            return
        if self.lifecycle_state != "unconfigured":
            self._end_autostart()
            return
        waited = time.monotonic() - self._t_created
        have_param = bool(self._p("robot_description"))
        have_fallback = bool(self._p("urdf_path") or self._p("robot"))
        if not (have_param or self._rd_msg):
            if waited < self._p("robot_description_timeout") or not have_fallback:
                # say what it waits for, again every 10 s (a user's restarted controller must not sit
                # there in silence)
                pubs = self.count_publishers(self._p("robot_description_topic"))
                if pubs and time.monotonic() - self._rd_subscribed > self.RD_RESUBSCRIBE:
                    self._log.warn(f"autostart: {pubs} publisher(s) of {self._p('robot_description_topic')} "
                                   f"seen for {self.RD_RESUBSCRIBE:.0f} s and no description: subscribing again")
                    self._subscribe_robot_description()
                if not have_fallback and waited > 1.0 and waited - self._autostart_logged >= 10.0:
                    self._autostart_logged = waited
                    hint = ("; " + silent_publisher_hint(self._p("robot_description_topic"), pubs, waited)) \
                        if pubs and waited >= SILENT_AFTER else ""
                    self._log.warn(f"autostart: waiting {waited:.0f} s for a robot description on "
                                   f"{self._p('robot_description_topic')} ({pubs} publisher(s) seen; "
                                   "it is read TRANSIENT_LOCAL: a publisher that is up delivers it at "
                                   f"once), or set robot_description, urdf_path or robot{self._clock_note()}{hint}")
                return
        partners = self._partners_waiting()            # a cell's other arms' models (partners.py)
        if partners:
            if waited > 1.0 and waited - self._autostart_logged >= 10.0:
                self._autostart_logged = waited
                self._log.warn(f"autostart: waiting {waited:.0f} s for the partner arms' descriptions on "
                               f"{partners} (arm_distance.partners)")
            return
        self._log.info(
            f"autostart: configuring ({'robot_description parameter' if have_param else ''}"
            f"{'' if have_param else (self._p('robot_description_topic') + ' received' if self._rd_msg else 'fallback ' + repr(self._p('urdf_path') or self._p('robot')) + ': no robot description came in ' + format(waited, '.1f') + ' s')})")
        self._end_autostart()
        if self.trigger_configure() == SUCCESS:
            self.trigger_activate()

    def _clock_note(self):
        """'' or, with use_sim_time, what the node's clock is doing (for the lines that say what the
        node waits for)."""
        if not self.get_parameter("use_sim_time").value:
            return ""
        ns = self._clock_handle.get_now().nanoseconds
        return ("; use_sim_time: no /clock received yet (" + str(self.count_publishers("/clock")) +
                " publisher(s))") if ns == 0 else ""

    def _load_model(self, joints):
        """(model, source) from the first available description; ValueError naming the cause."""
        kw = {"active_joints": list(joints)} if joints else {}
        kw.update(strict=bool(self._p("strict")), min_joint_inertia=float(self._p("min_joint_inertia")))
        rd = self._p("robot_description")
        if rd:
            src, urdf = "robot_description parameter", rd
        elif self._rd_msg:
            src, urdf = f"{self._p('robot_description_topic')} topic", self._rd_msg
        elif self._p("urdf_path"):
            src = f"urdf_path {self._p('urdf_path')}"
            xacro_args = parse_xacro_args(self._p("xacro_args"))     # ValueError naming a bad entry
            try:                                       # a .urdf or a .xacro file (expanded here)
                return Model.from_description(self._p("urdf_path"), xacro_args=xacro_args or None,
                                              **kw), src
            except Exception as e:                     # noqa: BLE001 (file, xacro, XML, inertia errors)
                raise ValueError(f"{src}: {e}") from None
        elif self._p("robot"):
            src = f"robot {self._p('robot')!r} (example-robot-data's model, a stand-in)"
            try:
                model = Model.from_robot(self._p("robot"), **kw)
            except (ValueError, FileNotFoundError, KeyError) as e:
                raise ValueError(f"{src}: {e}") from None
            # named by the user (the `robot` parameter: the sim and demo configs, real_robot.launch.py's
            # fallback_robot), and still not the arm's own description: said at WARN (issue 42)
            self._log.warning(
                f"no robot description (parameter or {self._p('robot_description_topic')}): using "
                f"example-robot-data's {self._p('robot')!r} model, as the `robot` parameter names it; it is "
                "not your driver's URDF (dimensions, masses, limits and tool may differ)")
            return model, src
        else:
            raise ValueError(
                f"no robot description: none on the robot_description parameter or on "
                f"{self._p('robot_description_topic')} (start the robot's driver first: it publishes it, "
                f"TRANSIENT_LOCAL), and no urdf_path.  Pass one: real_robot.launch.py "
                f"robot_description:=\"$(xacro my_arm.urdf.xacro)\", or -p urdf_path:=/path/arm.urdf; "
                f"example-robot-data's model only if you name it (real_robot.launch.py fallback_robot:=panda, "
                f"the `robot` parameter)")
        try:
            return Model.from_urdf_string(urdf, **kw), src
        except Exception as e:                         # noqa: BLE001 (XML / parser errors of any type)
            raise ValueError(f"{src}: {e}") from None


    # parameters of rclpy itself or of the middleware, which a params file may carry for this node
    FOREIGN_PARAMS = ("use_sim_time", "qos_overrides.", "start_type_description_service")

    def _warn_unknown_parameters(self):
        """A params file's keys this node does not declare (a typo: `k_gain`, `watchdog_timout`) are
        dropped by rclpy in silence: a WARN each at configure, with the nearest known names."""
        import difflib
        overrides = getattr(self, "_parameter_overrides", {}) or {}
        known = list(self._specs)
        for name in sorted(overrides):
            if name in self._specs or name.startswith(self.FOREIGN_PARAMS):
                continue
            near = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            self.counts["parameters.unknown"] += 1
            self._log.warning(f"parameter {name!r} is not a parameter of this node: ignored{hint}")

