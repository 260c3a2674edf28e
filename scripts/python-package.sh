#!/usr/bin/env bash
# Installs the Python package (`install`) or writes its wheel into DIR (`wheel DIR`) from the CMake build that
# scripts/build.sh made: scikit-build-core reuses that build folder, so the C++ library is not compiled a second time.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$(realpath -m "${TENSORACLE_BUILD_DIR:-build}")
python=${TENSORACLE_PYTHON:-python3}
# The same configuration scripts/build.sh gave the folder: with it, the reconfigure changes nothing that is compiled.
settings=(--no-build-isolation --disable-pip-version-check "-Cbuild-dir=$build_dir" -Ccmake.build-type=RelWithDebInfo
  -Ccmake.define.TENSORACLE_BUILD_TESTS=ON -Ccmake.define.TENSORACLE_BUILD_BENCHMARKS=ON)
case "${1:-}" in
  install)
    # Debian's own python3 refuses pip installs by default (PEP 668).
    PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip install -q --root-user-action=ignore "${settings[@]}" .
    ;;
  wheel)
    [[ -n "${2:-}" ]] || { echo "usage: $0 wheel DIR" >&2; exit 2; }
    "$python" -m pip wheel -q --no-deps "${settings[@]}" -w "$2" .
    ;;
  *) echo "usage: $0 install | wheel DIR" >&2; exit 2 ;;
esac
