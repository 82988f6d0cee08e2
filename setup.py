import os
import sys
from glob import glob

from setuptools import find_packages, setup
try:
    from setuptools.command.install_data import install_data
except ImportError:               # setuptools < 80 (colcon-core pins setuptools<80)
    from distutils.command.install_data import install_data

package_name = "robot_dynamics"


class InstallDataWrappers(install_data):
    """Install data files; the node wrappers for lib/robot_dynamics get the shebang of the interpreter
    that installs them (pip's or colcon's), not `#!/usr/bin/env python3`, which would find the system
    Python outside an activated venv."""

    def run(self):
        super().run()
        for path in self.get_outputs():
            if os.path.basename(os.path.dirname(path)) == package_name and \
                    os.path.basename(os.path.dirname(os.path.dirname(path))) == "lib" and os.path.isfile(path):
                with open(path) as f:
                    lines = f.read().splitlines(keepends=True)
                if lines and lines[0].startswith("#!") and "python" in lines[0]:
                    lines[0] = "#!" + sys.executable + "\n"
                    with open(path, "w") as f:
                        f.writelines(lines)
                    os.chmod(path, 0o755)


setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*", "bench"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml") + glob("config/*.urdf") + glob("config/*.xml")),
        ("share/" + package_name + "/urdf", glob("urdf/*.xacro") + glob("urdf/*.urdf")),
        # where `ros2 run` and launch_ros look for executables; a pip install (wheel) ignores
        # setup.cfg's install_scripts, so the node wrappers ship as data files as well
        ("lib/" + package_name, glob("resource/lib/*")),
    ],
    install_requires=["setuptools"],
    extras_require={"test": ["pytest"]},          # colcon test: run the pytest step
    cmdclass={"install_data": InstallDataWrappers},
    zip_safe=True,
    maintainer="robot_dynamics developers",
    maintainer_email="robot-dynamics@example.org",
    description="Real-time torque control of robot arms on a validated Pinocchio dynamics layer",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            "robot_dynamics_demo = robot_dynamics.demo:main",
            "controller_node = robot_dynamics.nodes.controller:main",
            "echo_node = robot_dynamics.nodes.echo_node:main",
            "sim_node = robot_dynamics.nodes.sim_node:main",
            "franka_bridge = robot_dynamics.nodes.franka_bridge:main",
            "carry_node = robot_dynamics.nodes.carry_node:main",
        ],
    },
)
