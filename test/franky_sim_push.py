"""franky-sim's MuJoCo robot server, as `franky-sim -s mujoco --hostname ADDR` runs it, with a hand to
push the arm: the tests' external force, which the Franka protocol has no message for.

A UDP socket on ADDR:PORT takes text lines `body fx fy fz px py pz` (world frame: the force [N] and the
point it acts at [m]); the point is fixed to the body from then on, and the force is held on it (MuJoCo
xfrc_applied: the force at the body's centre of mass plus its moment about it, set before every
simulation step as the body moves) until the next line; a zero force releases.  The reply is `ok <body id>` or `error
<reason>`.  Run: python franky_sim_push.py --hostname 127.0.0.x --push-port 47000
"""
import argparse
import socket
import threading

import numpy as np


class Push:
    """The force held on a body-fixed point (see the module docstring)."""

    def __init__(self, sim):
        self.sim = sim
        self.lock = threading.Lock()
        self.body = None
        self.force = np.zeros(3)
        self.point_b = np.zeros(3)          # the point in the body's frame

    def set(self, body_name, force, point):
        import mujoco
        m, d = self.sim.model, self.sim.data
        names = [body_name, f"robot0_{body_name}"]
        ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n) for n in names]
        bid = next((i for i in ids if i >= 0), -1)
        if bid < 0:
            raise ValueError(f"no body {body_name!r}")
        R = d.xmat[bid].reshape(3, 3)
        with self.lock:
            if self.body is not None:
                d.xfrc_applied[self.body] = 0.0
            self.body = bid
            self.force = np.asarray(force, float)
            self.point_b = R.T @ (np.asarray(point, float) - d.xpos[bid])
        return bid

    def apply(self):
        d = self.sim.data
        with self.lock:
            if self.body is None:
                return
            b = self.body
            p = d.xpos[b] + d.xmat[b].reshape(3, 3) @ self.point_b
            d.xfrc_applied[b, :3] = self.force
            d.xfrc_applied[b, 3:] = np.cross(p - d.xipos[b], self.force)


def serve(push, host, port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    while True:
        data, peer = sock.recvfrom(1024)
        try:
            parts = data.decode().split()
            values = [float(x) for x in parts[1:7]]
            if len(values) != 6:
                raise ValueError("expected: body fx fy fz px py pz")
            reply = f"ok {push.set(parts[0], values[:3], values[3:])}"
        except Exception as e:                     # noqa: BLE001 (answered: the server runs on)
            reply = f"error {type(e).__name__}: {e}"
        sock.sendto(reply.encode(), peer)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hostname", required=True)
    ap.add_argument("--push-port", type=int, required=True)
    args = ap.parse_args()
    import franky_sim
    from franky_sim.mujoco_simulator import MujocoSimulator
    with MujocoSimulator(enable_visualization=False) as sim:
        robot = sim.add_robot()
        with franky_sim.SimulationServer(sim, hostname_candidates=[args.hostname]) as server:
            push = Push(sim)
            sim.register_pre_step_callback(lambda s: push.apply())
            threading.Thread(target=serve, args=(push, args.hostname, args.push_port), daemon=True).start()
            print(f"push: udp {args.hostname}:{args.push_port}", flush=True)
            print(f"Connect to the server using '{robot.hostname}' as the robot IP address", flush=True)
            server.run_forever()


if __name__ == "__main__":
    main()
