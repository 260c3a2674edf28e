#!/usr/bin/env bash
# The README's second command: builds tensoracle and runs the whole test suite with ctest (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build_dir=${TENSORACLE_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
