"""The estimation stage: what the arm feels.  The momentum observer (external joint torques, collisions,
a wrench estimate), the F/T sensor's wrench processing (tare, tool weight, filter, frame change) and the
environment's joint torques from link-side joint torque sensors (effort_link_side).

Reads: the cycle's state (q, v, seq, stamp), the command sent last (`tau`, the torque applied since the
previous update) and `ramps` (a safe-command step restarts the observer: the applied torque left the law);
the parameters observer.*, sensor_frame, tool_mass, tool_com, wrench_filter_cutoff_hz, wrench_deadband,
watchdog_timeout, cartesian_impedance.wrench_source, effort_link_side (with the cycle's `effort`).
Writes: the cycle state's `wrench` and `wrench_frame` (the law's measured wrench), `tau_ext` and
`tau_ext_sd`, its own estimates.  Raises: `collision()` (the loop's port:
observer.on_collision 'hold' holds the position, identification runs stop where they are).

Guarantees: a wrench that is not 6 finite numbers, stale (older than watchdog_timeout) or in an unknown
frame is not used (force control runs open loop), counted (rejected.wrench) and logged throttled; the
observer restarts (r = 0) after any gap (activation, a trip, a safe-command step, a step more than
watchdog_timeout after the last) and never raises into the cycle (errors.observer).
"""
import math

import numpy as np

from ..wrench import NoiseEstimate, WrenchProcessor

LINK_TARE = 0.2        # s: effort_link_side's tare, the mean environment torque over this after the law starts
LINK_NOISE_EVERY = 16  # ... its noise's spread (the dead zone) taken from the estimate every this many samples,
LINK_NOISE_SUBSAMPLE = 4   # ... which gets every this many samples (29 us each on the Panda's 7 joints)


class Estimation:
    """See the module docstring."""

    def __init__(self, model, law, backend, gravity_backend, p, report, cycle, collision, to_model_order,
                 labels=None):
        self.model, self.law, self.backend, self.gravity_backend = model, law, backend, gravity_backend
        self.to_model_order = to_model_order            # a per-joint array in `joints` order -> model order
        self._p, self.report, self.c = p, report, cycle
        self._collision = collision
        self.wrench_label = dict(labels or {}).get("wrench", "the wrench input")
        self.cartesian = law.name == "cartesian_impedance"
        self.wrench_episode = report.episode("wrench")
        self.wrench_proc = None
        self.wrench_frame_error = None
        self.wrench_raw = None
        self.wrench_raw_frame = ""
        self.wrench_time = -math.inf
        self.wrench_noise = NoiseEstimate()            # the raw reading's noise (6x6 covariance)
        if self.cartesian and p["sensor_frame"]:
            self.wrench_proc = self._make_wrench_processor(p["sensor_frame"])
        self._make_observer(p)
        self._make_link_torque(p)

    # ------------------------------------------------------------------ the momentum observer
    def _make_observer(self, p):
        """The momentum observer (observer.* parameters), built once; None when not enabled."""
        from ..observer import MomentumObserver
        to_model_order = self.to_model_order
        n = self.model.nv
        self.observer = None
        self.obs_wrench = None                     # the last wrench estimate [f; n] (None: none yet)
        self.obs_wrench_stamp = None               # the loop time `t` of the state it was computed at
        self.obs_edge = False                      # the flag changed at the last update
        self.obs_last = None                       # `now` of the last observer update (None: reset)
        self._obs_tau = np.zeros(n)
        self._obs_q_prev = np.zeros(n)
        self._obs_seq = -1                         # the cycle's seq at the last observer update
        self._obs_stamp = None
        self._obs_ramps = self.c.ramps
        law_frame = self.law.params.get("frame") if self.cartesian else None
        self.wrench_source = p["cartesian_impedance.wrench_source"] if self.cartesian else "sensor"
        if not p["observer.enabled"]:
            if self.wrench_source == "observer":
                raise ValueError("cartesian_impedance.wrench_source: observer needs observer.enabled true")
            return
        frame = p["observer.frame"] or law_frame or self.model.frame_names[-1]
        if frame not in self.model.frame_names:
            raise ValueError(f"observer.frame: {frame!r} is not a frame of the model "
                             f"(frames: {list(self.model.frame_names)})")
        if self.wrench_source == "observer" and frame != (law_frame or self.model.frame_names[-1]):
            raise ValueError(f"cartesian_impedance.wrench_source: observer needs observer.frame ({frame!r}) = "
                             f"the law's frame ({law_frame!r})")
        thr = self.threshold(p["observer.threshold"])
        try:
            self.observer = MomentumObserver(self.model, self.gravity_backend,
                                             gain=to_model_order(p["observer.gain"]), frame=frame,
                                             reference="local", threshold=thr, release=p["observer.release"])
        except ValueError as e:
            raise ValueError(f"observer: {e}") from None
        dag = p["observer.driver_adds_gravity"]
        self.obs_adds_gravity = (not self.law.params.get("compensate_gravity", True)) if dag == "auto" \
            else dag == "true"

    def threshold(self, v):
        """observer.threshold (joints order) -> model order, or None when all zero (no detection)."""
        a = self.to_model_order(v)
        if not np.any(a > 0):
            return None
        if np.any(a <= 0):
            raise ValueError(f"observer.threshold: every element must be > 0 (or all 0: off), got {list(v)}")
        return a

    def restart(self):
        """The observer restarts at its next update (activation, after a trip); the link-side joint torques
        are tared again."""
        self.obs_last = None
        self._lt_count = 0

    def observe(self, now):
        """One observer step with the torque applied since the last one (the command sent, + g(q) when
        the driver adds gravity).  Reset (r = 0) after any gap: activation, a watchdog trip, a
        safe-command step, a control step more than watchdog_timeout after the last.  Never raises
        (errors.observer, reset)."""
        obs, c = self.observer, self.c
        self.obs_edge = False
        if c.ramps != self._obs_ramps:                    # the applied torque left the law: restart
            self._obs_ramps = c.ramps
            self.obs_last = None
        if c.seq == self._obs_seq:                        # no new measurement since the last update
            return
        stamp, last_stamp = c.stamp, self._obs_stamp
        self._obs_seq, self._obs_stamp = c.seq, stamp
        try:
            if self.obs_last is None or now - self.obs_last > self._p["watchdog_timeout"] \
                    or now <= self.obs_last:
                self.obs_edge = obs.collision                 # a reset clears the flag
                obs.reset(c.q, c.v)
                self.obs_last = now
                return
            tau = self._obs_tau
            tau[:] = c.tau
            if self.obs_adds_gravity:
                tau += self.gravity_backend.gravity(self._obs_q_prev)
            was = obs.collision
            dt = now - self.obs_last
            if stamp is not None and last_stamp is not None and 0.0 < stamp - last_stamp <= \
                    self._p["watchdog_timeout"]:
                dt = stamp - last_stamp                       # when the states were measured
            obs.update(c.q, c.v, tau, dt)
            self.obs_last = now
            if obs.collision != was:
                self.obs_edge = True
                if obs.collision:
                    self.report.counts["observer.collisions"] += 1
                    k = int(np.argmax(np.abs(obs.r) / obs.threshold))
                    self.report.log("warn", f"collision: |r| of {self.model.joint_names[k]} = {abs(obs.r[k]):.2f} "
                                            f"N m > {obs.threshold[k]:.2f} N m (reaction: "
                                            f"{self._p['observer.on_collision']})")
                    self._collision(self._p["observer.on_collision"] == "hold")
        except ValueError as e:
            self.report.exception("observer", e, now)
            self.obs_last = None
        finally:
            self._obs_q_prev[:] = c.q

    def observer_wrench(self, t=None):
        """The wrench estimate [f; n] at observer.frame (local axes) at the current q; None without an
        observer.  Computed on call (an SVD): call it at the publish rate, not every step."""
        if self.observer is None:
            return None
        self.obs_wrench = self.observer.wrench(self.c.q)
        self.obs_wrench_stamp = t
        return self.obs_wrench

    # ------------------------------------------------------------------ link-side joint torque sensors
    def _make_link_torque(self, p):
        """effort_link_side: the measured effort is the link-side joint torque tau_J (after the gear and its
        friction).  The links' balance, M(q) a + C(q, v) v + g(q) = tau_J + tau_ext, gives the environment's
        torque tau_ext = g(q) - tau_J at rest, where the stiction term acts (it fades out as a joint slides,
        control/laws/friction.py), less its mean over the first LINK_TARE s after the law starts (the
        sensors' offsets and the model's gravity error at that pose, as a Franka's tau_ext_hat is tared at
        its start: nothing may push the arm then), low-passed (FrictionCompensation.link_filter: M a, left
        out for want of a measured acceleration, closes a loop through the arm's inertia that the filter
        keeps stable)."""
        n = self.model.nv
        self.link_torque = bool(p["effort_link_side"])
        self._lt_period = 1.0 / p["update_rate"]         # (read at construction, as the loop's own period)
        self._lt_raw, self._lt_ext, self._lt_sd = np.zeros(n), np.zeros(n), np.zeros(n)
        self._lt_tare, self._lt_count, self._lt_t0, self._lt_seq = np.zeros(n), 0, 0.0, -1
        self._lt_ready, self._lt_t, self._lt_n, self._lt_k = False, 0.0, 0, 0
        self._lt_warned = False                           # said once: no effort in the joint states
        self.link_noise = NoiseEstimate(n)                # the effort's noise (its covariance's diagonal)

    def measure_link_torque(self, now):
        """State.tau_ext and tau_ext_sd from this cycle's effort (effort_link_side), when the law's stiction
        term uses them (friction_stiction_sensed > 0 with the compensation on); None while tared, and
        without an effort."""
        c = self.c
        st = c.state
        fr = self.law.friction
        if not (fr.active and fr.stiction_sensed > 0.0 and c.have_effort):
            if fr.active and fr.stiction_sensed > 0.0 and not self._lt_warned:
                self._lt_warned = True
                self.report.log("warn", "effort_link_side is true but the joint states carry no (finite) effort: "
                                        "the stiction term runs without the joint torques until they do")
            st.tau_ext = None
            return
        if c.seq != self._lt_seq:                         # a new measurement
            self._lt_seq = c.seq
            t = c.stamp if c.stamp is not None else c.t
            x = self._lt_raw
            np.subtract(self.gravity_backend.gravity(c.q), c.effort, out=x)
            self._lt_k += 1
            if self._lt_k % LINK_NOISE_SUBSAMPLE == 0:    # (white noise: every 4th sample tells its spread too)
                self.link_noise.add(c.effort, t)
            if self._lt_count == 0:
                self._lt_tare.fill(0.0)
                self._lt_t0, self._lt_ready = t, False
            if not self._lt_ready:                        # the tare: the mean over the first LINK_TARE s
                self._lt_count += 1
                self._lt_tare += (x - self._lt_tare) / self._lt_count
                if t - self._lt_t0 >= LINK_TARE:
                    self._lt_ready, self._lt_t, self._lt_n = True, t, 0
                    np.subtract(x, self._lt_tare, out=self._lt_ext)
                st.tau_ext = None
                return
            x -= self._lt_tare
            tau = fr.link_filter(self._lt_period)
            b = math.exp(-min(max(t - self._lt_t, 0.0), 0.1) / tau)
            self._lt_t = t
            x -= self._lt_ext
            x *= 1.0 - b
            self._lt_ext += x
            self._lt_n += 1
            if self._lt_n % LINK_NOISE_EVERY == 1:        # the noise's spread (averaged over about 1 s)
                cov = self.link_noise.covariance
                if cov is None:
                    self._lt_sd.fill(0.0)
                else:                                     # white noise through the filter: sqrt((1 - b) / (1 + b))
                    b = math.exp(-self._lt_period / tau)
                    np.sqrt(np.fmax(np.diagonal(cov), 0.0) * ((1.0 - b) / (1.0 + b)), out=self._lt_sd)
        if self._lt_ready:
            st.tau_ext, st.tau_ext_sd = self._lt_ext, self._lt_sd
        else:
            st.tau_ext = None

    # ------------------------------------------------------------------ the F/T sensor
    def _make_wrench_processor(self, frame):
        self.model.check_frame(frame)
        target = self.law.params.get("frame") or self.model.frame_names[-1]
        fc = self._p["wrench_filter_cutoff_hz"]
        return WrenchProcessor(self.model, self.backend, frame, target, tool_mass=self._p["tool_mass"],
                               tool_com=tuple(self._p["tool_com"]), filter_cutoff_hz=fc if fc > 0 else None,
                               deadband=tuple(self._p["wrench_deadband"]))

    def set_wrench(self, raw, frame_id, now):
        """The F/T sensor's raw reading [f; n] in `frame_id` (ignored unless cartesian_impedance or
        sensor_frame is set: payload identification from the F/T sensor).  A non-finite one is counted
        (rejected.wrench) and not used: force control runs open loop."""
        if not self.cartesian and not self._p["sensor_frame"]:
            return
        w = np.array(raw, dtype=float).reshape(-1)       # a new array: a step may be reading the old
        if w.shape != (6,) or not np.all(np.isfinite(w)):
            self.report.counts["rejected.wrench"] += 1
            self.wrench_raw = None
            self._wrench_problem("non_finite", "NaN or Inf in the wrench" if w.shape == (6,)
                                 else f"{w.size} values, expected 6", now)
            return
        if frame_id != self.wrench_raw_frame:
            self.wrench_noise = NoiseEstimate()          # another sensor (frame): its own noise
        self.wrench_raw_frame = frame_id
        self.wrench_raw = w
        self.wrench_time = now
        self.wrench_noise.add(w, now)

    def _wrench_problem(self, reason, detail, now):
        self.wrench_episode.occur(reason, now, "warn", lambda extra: (
            f"wrench on {self.wrench_label} not used ({reason}): {detail}; force control runs open "
            f"loop until a valid wrench arrives{extra}"))

    def tare(self):
        """Tare the wrench sensor with the current reading.  (ok, message)"""
        if not self.cartesian:
            return False, "no wrench processing (configure with cartesian_impedance)"
        if self.wrench_raw is None or not self.c.have_state:
            return False, "no wrench or joint state received yet"
        if self.wrench_proc is None:
            self.wrench_proc = self._make_wrench_processor(self._p["sensor_frame"] or self.wrench_raw_frame)
        self.wrench_proc.tare(self.wrench_raw, self.c.q)
        return True, "tared with " + str(np.round(self.wrench_raw, 3).tolist())

    # ------------------------------------------------------------------ per cycle
    def measure_wrench(self, now, t, dt):
        """The law's measured wrench this cycle (the observer's estimate or the sensor's), after observe()."""
        if not self.cartesian:
            return
        st = self.c.state
        st.wrench_source = self.wrench_source
        st.wrench_cov = None
        if self.wrench_source == "observer":
            st.wrench = self.observer_wrench(t) if self.obs_last is not None else None
            st.wrench_frame = ""                         # observer.frame = the law's frame, its axes
        else:
            self._process_wrench(now, dt)

    def _process_wrench(self, now, dt):
        """The latest raw wrench -> State.wrench (tare, tool weight, filter, frame change)."""
        st = self.c.state
        if self.wrench_raw is None:
            st.wrench = None
            return
        age = now - self.wrench_time
        timeout = self._p["watchdog_timeout"]
        if age > timeout:                                # the sensor went silent
            if self.wrench_episode.reason != "stale":
                self.report.counts["rejected.wrench"] += 1
            self._wrench_problem("stale", f"no wrench for {age:.3f} s (watchdog_timeout {timeout} s)", now)
            st.wrench = None
            return
        frame = self._p["sensor_frame"] or self.wrench_raw_frame
        if self.wrench_proc is None or self.wrench_proc.sensor_frame != frame:
            if self.wrench_frame_error == frame:
                st.wrench = None
                return
            try:
                self.wrench_proc = self._make_wrench_processor(frame)
            except ValueError as e:
                self.wrench_frame_error = frame
                self.report.counts["rejected.wrench"] += 1
                self._wrench_problem("unknown_frame", f"sensor frame {frame!r}: {e}", now)
                st.wrench = None
                return
        if self.wrench_episode.reason:
            self.wrench_episode.end(lambda e: f"wrench on {self.wrench_label} valid again ({e.reason} before)")
        st.wrench = self.wrench_proc.process(self.wrench_raw, st.q, dt)
        st.wrench_frame = self.wrench_proc.frame
        fr = self.law.friction                            # the stiction term's dead zone needs its noise
        cov = self.wrench_noise.covariance if fr.active and fr.stiction_sensed > 0.0 else None
        st.wrench_cov = None if cov is None else \
            self.wrench_proc.noise_covariance(cov, dt, self.wrench_noise.interval)

    def set_threshold(self, threshold, release):
        """observer.threshold / observer.release changed live (validated; ValueError)."""
        if self.observer is not None:
            self.observer.set_threshold(self.threshold(threshold), release)

    def diagnostics(self):
        if self.observer is None:
            return []
        return [("observer.collision", str(self.observer.collision)),
                ("observer.collisions", str(self.report.counts["observer.collisions"])),
                ("observer.max_abs_r", f"{float(np.max(np.abs(self.observer.r))):.3f}")]
