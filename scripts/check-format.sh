#!/usr/bin/env bash
# Checks that every tracked C++/CUDA source is formatted with the committed .clang-format (CI runs this).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.in')
files=("${files[@]/cmake\/version.hpp.in}")
# Sources the bundle producer generates (bundle.cpp: the cubins as byte arrays) keep the producer's layout.
mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -E '\.(cpp|hpp|cu|cuh)$' | grep -v -E '(^|/)bundle/bundle\.cpp$')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run -Werror "${files[@]}"
  echo "check-format: ${#files[@]} files formatted correctly"
fi
