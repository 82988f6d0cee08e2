# Sphinx configuration of the robot_dynamics manual, laid out as rosdoc2 builds a ROS Python package
# (doc/conf.py, doc/index.rst, the API from the docstrings).  Build it, warnings as errors, from the
# venv ./run.sh makes:
#     .venv/bin/python -m sphinx -W -b html doc /tmp/robot_dynamics_doc
# test/test_docs.py does the same in the test suite.
#
# The API reference imports the modules for real (no autodoc_mock_imports): the venv has rclpy, the
# message packages, Pinocchio, MuJoCo and franky, and the ROS wheels' libraries are found by the
# interpreter itself (ros_wheels_bootstrapper), so a module that no longer imports fails the build
# instead of being documented from a mock.
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, os.path.dirname(HERE))          # the package from this checkout

project = "robot_dynamics"
author = "robot_dynamics maintainers"
copyright = "robot_dynamics maintainers"
try:
    from robot_dynamics import __version__ as release
except Exception:                                   # noqa: BLE001 (the build reports the import error)
    release = "0.1.0"
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "myst_parser",
    "param_tables",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

# ignore-module-all: a package's __all__ re-exports what its modules define (documented there once);
# reference/__init__ re-exports `aba`, `crba`, `rnea` under its modules' own names.
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True,
                           "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"



def _docstring_as_written(app, what, name, obj, options, lines):
    """The package's docstrings are plain text (ASCII layouts, indented examples, symbols such as
    `*` and `|`), written for `help()` and the source, not reStructuredText: show them as written, in a
    literal block, instead of reading them as markup (which would warn on most and break -W)."""
    if not any(line.strip() for line in lines):
        return
    body = ["    " + line if line.strip() else "" for line in lines]
    lines[:] = ["::", ""] + body + [""]


def setup(app):
    app.connect("autodoc-process-docstring", _docstring_as_written)


html_theme = "alabaster"
html_title = "robot_dynamics manual"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {"page_width": "1280px", "sidebar_width": "230px", "body_max_width": "none"}
