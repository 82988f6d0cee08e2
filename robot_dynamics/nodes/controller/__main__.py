"""python -m robot_dynamics.nodes.controller [--print-params] --ros-args ..."""
import sys

from .node import main

sys.exit(main())
