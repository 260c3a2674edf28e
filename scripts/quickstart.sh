#!/usr/bin/env bash
# The README's first command: from a fresh machine to the main job running (deps, configure, build, the example
# model package built into an engine for the best target here, saved, reopened, run, checked and timed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build_dir=${TENSORACLE_BUILD_DIR:-build}
"$build_dir/tools/cli/tensoracle" --version
"$build_dir/examples/transformer_encoder" --dir "$build_dir/encoder_example" --target auto --iterations 20
