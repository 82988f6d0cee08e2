"""robot_dynamics: real-time torque control of robot arms for ROS 2.

Layers (data flows one way): ``nodes`` (rclpy adapters) -> ``control`` (pure control laws) ->
``dynamics`` (Model/Data, Pinocchio and in-repo reference backends).  ``dynamics`` and ``control``
never import rclpy.
"""

import os
import warnings

# A control step multiplies 6x6 and 7x7 matrices: OpenBLAS threading only adds wake-up latency
# (one 6x6 LAPACK call was measured at 440 us instead of 1 us on a loaded 2-core machine).  This
# takes effect when robot_dynamics is imported before numpy, as the console scripts and tests do.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# Finiteness checks square vectors with one dot product; a huge but finite entry overflows to inf and
# is then handled (rejected or diagnosed entry by entry), so numpy's overflow warning is only noise.
warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning, module=r"robot_dynamics(\..*)?$")

__version__ = "0.1.0"
