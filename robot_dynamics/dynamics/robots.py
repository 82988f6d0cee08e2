"""Robots shipped by the `example-robot-data` wheel (URDFs under cmeel.prefix/share; no Python module)."""
import os
import sys
import sysconfig
from pathlib import Path

# name -> (URDF path under robots/, floating base, active joints (None: all movable joints))
PANDA_ARM = [f"panda_joint{i}" for i in range(1, 8)]
ROBOTS = {
    "panda": ("panda_description/urdf/panda.urdf", False, PANDA_ARM),
    "panda_gripper": ("panda_description/urdf/panda.urdf", False, None),
    "ur3": ("ur_description/urdf/ur3_robot.urdf", False, None),
    "ur5": ("ur_description/urdf/ur5_robot.urdf", False, None),
    "ur10": ("ur_description/urdf/ur10_robot.urdf", False, None),
    "kinova": ("kinova_description/robots/kinova.urdf", False, None),
    "double_pendulum": ("double_pendulum_description/urdf/double_pendulum.urdf", False, None),
    "double_pendulum_continuous": ("double_pendulum_description/urdf/double_pendulum_continuous.urdf",
                                   False, None),
    "talos": ("talos_data/robots/talos_full_v2.urdf", True, None),
    "talos_fixed": ("talos_data/robots/talos_full_v2.urdf", False, None),
    "talos_arm": ("talos_data/robots/talos_left_arm.urdf", False, None),
    "talos_arm_torso": ("talos_data/robots/talos_full_v2.urdf", False,
                        ["torso_1_joint", "torso_2_joint"] + [f"arm_left_{i}_joint" for i in range(1, 8)]),
    "solo12": ("solo_description/robots/solo12.urdf", True, None),
    "anymal": ("anymal_b_simple_description/robots/anymal.urdf", True, None),
    "tiago": ("tiago_description/robots/tiago_no_hand.urdf", False, None),
}


def robots_dir():
    """The example-robot-data `robots/` folder, searched in this interpreter's site-packages,
    $ROBOT_DYNAMICS_ROBOTS_DIR and the usual system prefixes."""
    cands = []
    if os.environ.get("ROBOT_DYNAMICS_ROBOTS_DIR"):
        cands.append(Path(os.environ["ROBOT_DYNAMICS_ROBOTS_DIR"]))
    for key in ("purelib", "platlib"):
        cands.append(Path(sysconfig.get_paths()[key]) / "cmeel.prefix/share/example-robot-data/robots")
    for p in sys.path:
        cands.append(Path(p) / "cmeel.prefix/share/example-robot-data/robots")
    cands += [Path("/opt/openrobots/share/example-robot-data/robots"),
              Path(sys.prefix) / "share/example-robot-data/robots"]
    for c in cands:
        if c.is_dir():
            return c
    raise FileNotFoundError("example-robot-data not found: pip install example-robot-data "
                            "(or set ROBOT_DYNAMICS_ROBOTS_DIR to its robots/ folder)")


def robot_urdf_path(name):
    if name not in ROBOTS:
        raise ValueError(f"unknown robot {name!r}; known: {sorted(ROBOTS)}")
    return robots_dir() / ROBOTS[name][0]
