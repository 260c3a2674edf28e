#!/usr/bin/env bash
# The README's first command: from a fresh machine to the main job running (deps, configure, build, example).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build_dir=${TENSORACLE_BUILD_DIR:-build}
"$build_dir/tools/cli/tensoracle" --version
"$build_dir/examples/make_example_weights" "$build_dir/example.safetensors"
"$build_dir/tools/cli/tensoracle" safetensors info --sha256 "$build_dir/example.safetensors"
