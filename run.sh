#!/usr/bin/env bash
# One entry point for a fresh machine:  ./run.sh demo   (the main job)   ./run.sh test   (all tests)
# Creates .venv with the pinned dependencies on first use (no ROS install needed: ROS 2 Jazzy wheels).
set -euo pipefail
cd "$(dirname "$0")"
VENV="${ROBOT_DYNAMICS_VENV:-$PWD/.venv}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

setup() {
  if [ ! -f "$VENV/.installed" ] || [ requirements.lock -nt "$VENV/.installed" ] || [ setup.py -nt "$VENV/.installed" ]; then
    echo "[run.sh] creating $VENV (pinned dependencies from requirements.lock)" >&2
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet -r requirements.lock >&2
    touch "$VENV/.installed"
  fi
  # (re)install the package itself when its sources changed: console scripts, share/robot_dynamics
  if [ ! -f "$VENV/.pkg" ] || [ -n "$(find robot_dynamics launch config urdf resource setup.py setup.cfg package.xml -newer "$VENV/.pkg" -print -quit)" ]; then
    "$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation . >&2
    rm -rf build robot_dynamics.egg-info
    touch "$VENV/.pkg"
  fi
}

export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"   # small matrices: threads only add latency
cmd="${1:-demo}"
shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; exec "$VENV/bin/robot_dynamics_demo" "$@" ;;
  test) setup; exec "$VENV/bin/python" -m pytest "$@" ;;
  bench) setup; exec "$VENV/bin/python" "bench/${1:-dynamics}.py" "${@:2}" ;;
  *) echo "usage: ./run.sh {demo|test|bench NAME|setup} [args...]" >&2; exit 2 ;;
esac
