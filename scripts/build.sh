#!/usr/bin/env bash
# Configures and builds tensoracle into build/ (or $TENSORACLE_BUILD_DIR); extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TENSORACLE_BUILD_DIR:-build}
if [[ ! -f "$build_dir/CMakeCache.txt" || $# -gt 0 ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
cmake --build "$build_dir" -j "$(nproc)"
