#!/usr/bin/env bash
# Configures and builds tensoracle (library, command, Python extension, tests) into build/ (or $TENSORACLE_BUILD_DIR);
# extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TENSORACLE_BUILD_DIR:-build}
if [[ ! -f "$build_dir/CMakeCache.txt" || $# -gt 0 ]]; then
  # The Python package's extension is built here too, for the Python that runs the tests; scripts/python-package.sh
  # then installs it from this folder without compiling the library again.
  python=$(command -v "${TENSORACLE_PYTHON:-python3}")
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORACLE_PYTHON_PACKAGE=ON \
    "-DPython_EXECUTABLE=$python" "$@" >/dev/null
fi
cmake --build "$build_dir" -j "$(nproc)"
