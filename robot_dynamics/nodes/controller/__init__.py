"""The torque controller node as a package: one lifecycle node class (node.py) made of one mixin per
concern (description, control thread, inputs, services; outputs and params beside them).  See
node.py's docstring for the layout, and what the node reads, writes and guarantees.

    from robot_dynamics.nodes.controller import TorqueControllerNode, main
    python -m robot_dynamics.nodes.controller --print-params
"""
from .node import TorqueControllerNode, main  # noqa: F401
