from glob import glob

from setuptools import find_packages, setup

package_name = "robot_dynamics"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*", "bench"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml") + glob("config/*.urdf")),
        ("share/" + package_name + "/urdf", glob("urdf/*.xacro") + glob("urdf/*.urdf")),
        # where `ros2 run` and launch_ros look for executables; a pip install (wheel) ignores
        # setup.cfg's install_scripts, so the node wrappers ship as data files as well
        ("lib/" + package_name, glob("resource/lib/*")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="robot_dynamics developers",
    maintainer_email="robot-dynamics@example.org",
    description="Real-time torque control of robot arms on a validated Pinocchio dynamics layer",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            "robot_dynamics_demo = robot_dynamics.demo:main",
            "controller_node = robot_dynamics.nodes.controller_node:main",
            "echo_node = robot_dynamics.nodes.echo_node:main",
            "sim_node = robot_dynamics.nodes.sim_node:main",
        ],
    },
)
