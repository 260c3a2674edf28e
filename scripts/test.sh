#!/usr/bin/env bash
# The README's second command: builds tensoracle, installs its Python package and runs the whole test suite with ctest
# (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/python-package.sh install  # tests/python/package tests the installed package
build_dir=${TENSORACLE_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
