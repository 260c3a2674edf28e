#!/usr/bin/env bash
# Runs the tests on the GPU machine from a build made here and carried there (default .device/build, staged by scripts/stage-device.sh from
# a build configured with -DTENSORACLE_CUDA_ARCHITECTURES=90-real).
# The device machine has no Debian -dev packages and a different checkout path, so this runs the
# test programs directly instead of through ctest. Logs go to $OUT; a summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-.device/build}
out=${OUT:-/tmp/tensoracle-gpu-check}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$build/src:$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
export TENSORACLE_REQUIRE_GPU=1
export TENSORACLE_CLI="$PWD/$build/tools/cli/tensoracle"
export TENSORACLE_SAFETENSORS_REWRITE="$PWD/$build/tests/safetensors_rewrite"
export TENSORACLE_FLOAT_REFS_DIR="$PWD/$build/float_refs_device"
export TENSORACLE_CACHE_OPEN_CHILD="$PWD/$build/tests/cache_open_child"
summary=()
step() {  # step NAME COMMAND...: runs a step, logs it, records pass/fail
  local name=$1
  shift
  local start=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then
    summary+=("PASS $name ($((SECONDS - start)) s)")
  else
    summary+=("FAIL $name ($((SECONDS - start)) s): see $name.log")
    tail -n 30 "$out/$name.log"
  fi
}
nvidia-smi >"$out/nvidia-smi.log" 2>&1
step version "$TENSORACLE_CLI" --version
step float_refs python3 tests/python/gen_float_references.py "$TENSORACLE_FLOAT_REFS_DIR"
step unit "$build/tests/tensoracle_unit_tests" --gtest_brief=1
step cuda_unit "$build/tests/tensoracle_cuda_tests"
step python python3 -m pytest -q -p no:cacheprovider tests/python --ignore=tests/python/test_conformance.py
# The op-conformance suite: every case on the CPU reference against PyTorch, then built as a CUDA engine
# and checked against the CPU reference.
step conformance_cuda env TENSORACLE_CONFORMANCE_TARGET=cuda python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_conformance.py
# The main job on the GPU, fp32 and fp16.
step example_fp32 "$build/examples/transformer_encoder" --dir "$out/example" --target cuda --precision fp32
step example_fp16 "$build/examples/transformer_encoder" --dir "$out/example" --target cuda --precision fp16
if command -v compute-sanitizer >/dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$build/examples/transformer_encoder" \
    --dir "$out/example_mc" --target cuda --precision fp16 --batch 2 --seq 32 --iterations 2
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 "$build/examples/transformer_encoder" \
    --dir "$out/example_rc" --target cuda --precision fp16 --batch 2 --seq 32 --iterations 1
else
  summary+=("SKIP compute-sanitizer: not installed on this machine")
fi
cat "$out/version.log" "$out"/example_*.log
grep -hE '^\[  (PASSED|FAILED|SKIPPED)|passed|failed' "$out/unit.log" "$out/cuda_unit.log" "$out/python.log" \
  "$out/conformance_cuda.log" | tail -n 12
printf '%s\n' "${summary[@]}"
! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
