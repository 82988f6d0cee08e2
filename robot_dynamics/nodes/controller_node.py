"""The documented command-line entry of the torque controller node, kept for users' scripts and the
README (`python -m robot_dynamics.nodes.controller_node --print-params`, the setcap example in
realtime.py): the node itself is the package robot_dynamics/nodes/controller/."""
import sys

from .controller.node import TorqueControllerNode, main  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
