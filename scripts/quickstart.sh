#!/usr/bin/env bash
# The README's first command: from a fresh machine to the main job running (deps, configure, build, the Python package
# installed, the example model packages, C++ and Python, built into engines for the best target here, saved, reopened,
# run, checked and timed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/python-package.sh install
build_dir=${TENSORACLE_BUILD_DIR:-build}
python=${TENSORACLE_PYTHON:-python3}
# The console command the package installed, where pip puts that Python's scripts.
"$("$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/tensoracle" --version
"$build_dir/examples/transformer_encoder" --dir "$build_dir/encoder_example" --target auto --iterations 20
# The Python model package: the first run builds the engine into the cache, the second reuses it.
for run in 1 2; do "$python" examples/python/infer.py "$build_dir/python_example"; done
