#!/usr/bin/env bash
# One entry point for a fresh machine:  ./run.sh demo   (the main job)   ./run.sh test   (all tests)
# Creates .venv with the pinned dependencies on first use (no ROS install needed: ROS 2 Jazzy wheels).
set -euo pipefail
cd "$(dirname "$0")"
VENV="${ROBOT_DYNAMICS_VENV:-$PWD/.venv}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

# Extra wheel folders (':'-separated) installed with --no-deps, plus requirements-ros-tools.lock: the
# upstream ROS 2 launch / launch_testing / ros2cli wheels, which the package index does not have.
# Default: ../shared/ros-wheels when that folder exists; ROBOT_DYNAMICS_EXTRA_WHEELS= (empty) for none.
if [ -z "${ROBOT_DYNAMICS_EXTRA_WHEELS+set}" ] && [ -d ../shared/ros-wheels ]; then
  ROBOT_DYNAMICS_EXTRA_WHEELS="$(cd ../shared/ros-wheels && pwd)"
fi
EXTRA_WHEELS="${ROBOT_DYNAMICS_EXTRA_WHEELS:-}"

extra_wheels() {   # the wheel files of the extra folders, one per line, sorted
  local IFS=:
  for d in $EXTRA_WHEELS; do
    [ -n "$d" ] || continue
    [ -d "$d" ] || { echo "[run.sh] ROBOT_DYNAMICS_EXTRA_WHEELS: $d is not a folder" >&2; exit 2; }
    ls "$d"/*.whl
  done | sort
}

setup() {
  if [ ! -f "$VENV/.installed" ] || [ requirements.lock -nt "$VENV/.installed" ] || [ setup.py -nt "$VENV/.installed" ]; then
    echo "[run.sh] creating $VENV (pinned dependencies from requirements.lock)" >&2
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet -r requirements.lock >&2
    touch "$VENV/.installed"
    rm -f "$VENV/.extra-wheels"
  fi
  # the extra wheels (no dependency resolution: their metadata uses ROS names) and what they import
  local wanted
  wanted="$(extra_wheels | xargs -r sha256sum; [ -z "$EXTRA_WHEELS" ] || sha256sum requirements-ros-tools.lock)"
  if [ -n "$wanted" ] && [ "$wanted" != "$(cat "$VENV/.extra-wheels" 2>/dev/null)" ]; then
    echo "[run.sh] installing requirements-ros-tools.lock + the wheels of $EXTRA_WHEELS (--no-deps)" >&2
    # The lock first, the ROS wheels after it: pip checks the environment's dependencies after an
    # install that resolves them, and the wheels name upstream distributions the index spells
    # otherwise (launch-ros requires `ament-index-python`, the index's wheel is
    # `ros-jazzy-ament-index-python`, the same module): that check would print a resolver ERROR
    # although everything imports.  An install with --no-deps makes no such check.  The lock again
    # over wheels already there (the lock or the wheels changed): --no-warn-conflicts (it quiets any
    # conflict; a fresh venv, the path a new user takes, gets the full check).
    local warn=()
    [ ! -f "$VENV/.extra-wheels" ] || warn=(--no-warn-conflicts)
    "$VENV/bin/python" -m pip install --quiet "${warn[@]}" -r requirements-ros-tools.lock >&2
    extra_wheels | xargs "$VENV/bin/python" -m pip install --quiet --no-deps >&2
    echo "$wanted" > "$VENV/.extra-wheels"
  fi
  # (re)install the package itself when its sources changed: console scripts, share/robot_dynamics
  if [ ! -f "$VENV/.pkg" ] || [ -n "$(find robot_dynamics launch config urdf resource setup.py setup.cfg package.xml -newer "$VENV/.pkg" -print -quit)" ]; then
    "$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation . >&2
    rm -rf build robot_dynamics.egg-info
    touch "$VENV/.pkg"
  fi
}

export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"   # small matrices: threads only add latency
# `ros2 launch` / `ros2 run` / launch_test find this package (share/, lib/) in the venv's prefix
export AMENT_PREFIX_PATH="$VENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export PATH="$VENV/bin:$PATH"
cmd="${1:-demo}"
shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; exec "$VENV/bin/robot_dynamics_demo" "$@" ;;
  test) setup; exec "$VENV/bin/python" -m pytest "$@" ;;
  # the contributors' inner loop: the tests that start no process and need no ROS tool, on two workers
  # (pytest-xdist; a later -n N wins)
  quick) setup; exec "$VENV/bin/python" -m pytest -m "not system" -n 2 --dist worksteal "$@" ;;
  bench) setup; exec "$VENV/bin/python" "bench/${1:-dynamics}.py" "${@:2}" ;;
  *) echo "usage: ./run.sh {demo|test|quick|bench NAME|setup} [args...]" >&2; exit 2 ;;
esac
