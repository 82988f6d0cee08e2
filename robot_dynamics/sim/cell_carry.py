"""The cooperative carry set up in a cell (sim/cell_world.py): the two arms' grasp on the cell's box, their
grasp configurations, and the carry trajectory.  No ROS.

    world = two_panda_cell(integrator="implicitfast")
    carry = CellCarry(world)                       # grasp geometry, IK; world options for friction
    world.reset(carry.q_grasp)                     # both hands beside the box, touching its faces
    law = carry.law(squeeze=30.0)                  # control.cooperative.CooperativeCarry
    law.reset(0.0, carry.states(world))
    ... tau = law.compute(t, carry.states(world, t)); world.step(commands=carry.commands(tau))

The grasp (control.cooperative.plan_grasp): each hand points down beside the box, its grasp frame's y
axis (the fingers' closing direction) along the line from that arm's base to the box (horizontal), the
grasp frame's origin `contact_offset` (default: the arm's link capsule radius, so that the hand's
capsule touches the face) outside the box face, at the height of the box's centre.  X_i (the box in the
grasp frame) follows; `pre_grasp` is each hand's pose 3 cm further out (for an approach from elsewhere).
The trajectory: lift `lift` m, move `travel` (world, m) and back at up to `speed` m/s, set down.  In
the shipped two-Panda cell the arms face each other along x, so the travel goes along y (the 0.2 m of
the issue, across the arms' line).

Friction: MuJoCo's soft contacts let a box held by friction alone creep down (about 0.85 mm/s for this
box at 30 N, measured with the default pyramidal cone); `no_slip` sets MuJoCo's no-slip iterations (10),
the elliptic cone and impratio 10 on the world's model (world.m.opt), as a rubber pad does not creep.
"""
import numpy as np

from ..control.cooperative import CarryObject, CarryTrajectory, CooperativeCarry, plan_grasp


def quat_matrix(qxyzw):
    x, y, z, w = qxyzw
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def no_slip(world, iterations=10, impratio=10.0):
    import mujoco
    world.m.opt.noslip_iterations = int(iterations)
    world.m.opt.impratio = float(impratio)
    world.m.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC


class CellCarry:
    def __init__(self, world, namespaces=("left", "right"), hand_frame="panda_hand_tcp", contact_offset=None,
                 lift=0.05, travel=(0.0, 0.2, 0.0), speed=0.1, friction_fix=True):
        if world.box is None:
            raise ValueError("CellCarry: the cell has no box")
        self.world, self.ns = world, tuple(namespaces)
        if friction_fix:
            no_slip(world)
        p, quat = world.box_pose()
        self.p_o, self.R_o = np.asarray(p, float), quat_matrix(quat)
        size = np.asarray(world.box.size, float)
        self.obj = CarryObject.box(world.box.mass, size)
        cas = [world.arm(ns) for ns in self.ns]
        offs = [ca.spec.collision_radius if contact_offset is None else float(contact_offset) for ca in cas]
        self.arms, qs, self.pre_grasp = plan_grasp([ca.model for ca in cas], [(ca.R_base, ca.p_base) for ca in cas],
                                                   (self.R_o, self.p_o), size, offs, hand_frame=hand_frame)
        for i, arm in enumerate(self.arms):
            arm.name = self.ns[i]
        self.q_grasp = dict(zip(self.ns, qs))
        up = self.p_o + [0.0, 0.0, float(lift)]
        self.trajectory = CarryTrajectory(self.p_o, self.R_o, [up, up + np.asarray(travel, float), up, self.p_o],
                                          max_speed=speed)

    def law(self, squeeze=30.0, obj=None, **kw):
        return CooperativeCarry(self.arms, obj or self.obj, self.trajectory, squeeze=squeeze, **kw)

    def states(self, world=None, t=None):
        """[(q, v)] per arm, or [(q, v, t)] with a stamp."""
        w = world or self.world
        if t is None:
            return [(w.arm(ns).q, w.arm(ns).v) for ns in self.ns]
        return [(w.arm(ns).q, w.arm(ns).v, t) for ns in self.ns]

    def commands(self, taus):
        return {ns: tau for ns, tau in zip(self.ns, taus)}

    def hand_pose(self, i):
        return self.world.arm(self.ns[i]).frame_pose(self.arms[i].hand_frame)

    def box_pose(self):
        p, quat = self.world.box_pose()
        return quat_matrix(quat), np.asarray(p, float)

    def hand_wrenches(self):
        """[w_1, w_2]: each arm's contact force on the box (world axes, N) and its moment about the box's
        centre, summed over that arm's contacts with the box (MuJoCo's constraint forces)."""
        import mujoco
        w = self.world
        m, d = w.m, w.d
        out = [np.zeros(6) for _ in self.ns]
        c6 = np.zeros(6)
        pb = d.xpos[w.box_body]
        bodies = [w.arm(ns).body_ids for ns in self.ns]
        for k in range(d.ncon):
            con = d.contact[k]
            b1, b2 = m.geom_bodyid[con.geom1], m.geom_bodyid[con.geom2]
            if w.box_body not in (b1, b2):
                continue
            other = b2 if b1 == w.box_body else b1
            i = next((i for i, ids in enumerate(bodies) if other in ids), None)
            if i is None:
                continue
            mujoco.mj_contactForce(m, d, k, c6)
            f = con.frame.reshape(3, 3).T @ c6[:3]          # on geom2 from geom1 (world axes)
            if b2 != w.box_body:
                f = -f
            out[i][:3] += f
            out[i][3:] += np.cross(con.pos - pb, f)
        return out
