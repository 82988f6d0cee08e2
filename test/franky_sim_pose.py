"""franky-sim's MuJoCo robot server, as `franky-sim -s mujoco --hostname ADDR` runs it, with the arm
started at a pose of the caller's (franky-sim's own command line has no option for it; its
MujocoSimulator.add_robot takes `initial_q`): the Franka tests' and benches' other start poses.

Run: python franky_sim_pose.py --hostname 127.0.0.x --initial-q 0 -0.3 0 -2.0 0 1.7 0.785
"""
import argparse


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hostname", required=True)
    ap.add_argument("--initial-q", type=float, nargs=7, required=True, metavar="Q",
                    help="the arm's joint positions at start [rad], fr3_joint1..7")
    args = ap.parse_args()
    import franky_sim
    from franky_sim.mujoco_simulator import MujocoSimulator
    with MujocoSimulator(enable_visualization=False) as sim:
        robot = sim.add_robot(initial_q=args.initial_q)
        with franky_sim.SimulationServer(sim, hostname_candidates=[args.hostname]) as server:
            print(f"start pose {args.initial_q}", flush=True)
            print(f"Connect to the server using '{robot.hostname}' as the robot IP address", flush=True)
            server.run_forever()


if __name__ == "__main__":
    main()
