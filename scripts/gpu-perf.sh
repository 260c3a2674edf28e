#!/usr/bin/env bash
# On the GPU machine (carry .device, staged by scripts/stage-device.sh --pack): a quick check of the newest kernels
# (the CUDA unit tests of PERF_UNIT, a gtest filter: the erf-GELU products when unset, none when empty, within
# PERF_UNIT_TIMEOUT_S seconds, 300 by default; the op-conformance cases of PERF_CONFORMANCE, a pytest -k expression,
# empty skips them, within PERF_CONFORMANCE_TIMEOUT_S seconds, 200 by default (the whole suite takes longer); those of
# PERF_SANITIZE under compute-sanitizer's memcheck and racecheck; the unit tests of
# PERF_SANITIZE_UNIT, a gtest filter, under memcheck or PERF_SANITIZE_UNIT_TOOLS), the kernel micro-benchmarks of PERF_KERNELS
# (bench/kernel_profile.py --only; empty skips them), then bench/pytorch_comparison.py on PERF_MODELS (empty skips it)
# within PERF_BUDGET_S seconds (PERF_BENCH_ARGS: more of its arguments, e.g. --build-extra=-v), then
# bench/quantized_comparison.py on PERF_QUANTIZED (models; empty, the default, skips it). PERF_PYTEST (a pytest -k
# expression over tests/python/test_calibrate.py and test_engine_cli.py, the CLI tests with GPU halves; empty, the
# default, skips them) runs those tests first. PERF_CONFORMANCE_FIRST (a -k
# expression, empty by default) runs those conformance cases again with every step on its first candidate
# (--no-timing). PERF_STARTUP (bench/pytorch_models.py keys, comma-separated, e.g. bert,resnet50; empty, the default,
# skips it) runs bench/startup_profile.py on each: where a fresh process's time to the first inference goes.
# PERF_TIMELINE (MODEL:BATCH,..., e.g. bert:1,gpt2:1; empty, the default, skips it) installs the staged wheel and runs
# bench/graph_timeline.py last: every kernel's own time and the gaps between them in a graph-mode enqueue.
# PERF_CLOCKS (a period in ms) samples the clocks for the whole run (below).
# Logs and results go to $OUT; a summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/tensoracle-gpu-perf}
mkdir -p "$out"
bash scripts/unpack-device.sh
source scripts/device-env.sh
export PYTHONUNBUFFERED=1
conformance=${PERF_CONFORMANCE-linear or conv or pad}
kernels=${PERF_KERNELS-linear,linear_gelu_erf,stem_conv,patch_conv}
models=${PERF_MODELS-bert,resnet50,vit_b16}
summary=()
# PERF_CLOCKS (a period in ms, e.g. 100; empty, the default, skips it): nvidia-smi samples the SM clock, power draw
# and the active clock-throttle reasons into $OUT/clocks.csv for the whole run, and $OUT/phases.log says when each
# phase below began, so that a kernel's speed in one phase can be set against the clocks it ran at.
mark() { [[ -z ${PERF_CLOCKS:-} ]] || echo "$(date +%Y/%m/%d\ %H:%M:%S.%3N) $1" >>"$out/phases.log"; }
if [[ -n ${PERF_CLOCKS:-} ]]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv \
    -lms "$PERF_CLOCKS" >"$out/clocks.csv" 2>&1 &
  clocks_pid=$!
fi
mark pytest
if [[ -n ${PERF_PYTEST:-} ]]; then
  timeout 300 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_calibrate.py tests/python/test_engine_cli.py \
    -k "$PERF_PYTEST" >"$out/pytest.log" 2>&1
  summary+=("pytest (-k '$PERF_PYTEST'): rc $? $(tail -n 1 "$out/pytest.log")")
  grep -E '^(FAILED|ERROR)|SKIPPED' "$out/pytest.log" | head -20
fi
mark unit
if [[ -n ${PERF_UNIT-CudaFusedLinear.*} ]]; then
  timeout "${PERF_UNIT_TIMEOUT_S:-300}" "$build/tests/tensoracle_cuda_tests" --gtest_filter="${PERF_UNIT:-CudaFusedLinear.*}" >"$out/unit.log" 2>&1
  summary+=("unit (${PERF_UNIT:-CudaFusedLinear.*}): rc $? $(grep -E '^\[  (PASSED|FAILED) ' "$out/unit.log" | tr '\n' ' ')")
  grep -E 'Failure|error|FAILED' "$out/unit.log" | head -20
fi
mark conformance
if [[ -n $conformance ]]; then
  TENSORACLE_CONFORMANCE_TARGET=cuda timeout "${PERF_CONFORMANCE_TIMEOUT_S:-200}" python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_conformance.py \
    -k "$conformance" >"$out/conformance.log" 2>&1
  summary+=("conformance on cuda (-k '$conformance'): rc $? $(tail -n 1 "$out/conformance.log")")
  grep -E '^FAILED' "$out/conformance.log" | head -20
fi
mark conformance_first
if [[ -n ${PERF_CONFORMANCE_FIRST:-} ]]; then
  TENSORACLE_CONFORMANCE_TARGET=cuda TENSORACLE_CONFORMANCE_BUILD_ARGS=--no-timing timeout 200 python3 -m pytest -q \
    -p no:cacheprovider tests/python/test_conformance.py -k "$PERF_CONFORMANCE_FIRST" >"$out/conformance_first.log" 2>&1
  summary+=("conformance on cuda, first candidates (-k '$PERF_CONFORMANCE_FIRST'): rc $? $(tail -n 1 "$out/conformance_first.log")")
  grep -E '^FAILED' "$out/conformance_first.log" | head -20
fi
# PERF_SANITIZE: a pytest -k expression of conformance cases to run under compute-sanitizer memcheck and racecheck
# (PERF_SANITIZE_TOOLS, both by default), each within PERF_SANITIZE_TIMEOUT_S seconds (150; racecheck of the CUTLASS
# products needs more).
mark sanitize
if [[ -n ${PERF_SANITIZE:-} ]]; then
  for tool in ${PERF_SANITIZE_TOOLS:-memcheck racecheck}; do
    TENSORACLE_CONFORMANCE_TARGET=cuda TENSORACLE_CONFORMANCE_SANITIZER=$tool timeout "${PERF_SANITIZE_TIMEOUT_S:-150}" \
      python3 -m pytest -q \
      -p no:cacheprovider tests/python/test_conformance.py -k "$PERF_SANITIZE" >"$out/$tool.log" 2>&1
    summary+=("$tool (-k '$PERF_SANITIZE'): rc $? $(tail -n 1 "$out/$tool.log")")
    grep -E '^FAILED' "$out/$tool.log" | head -10
  done
fi
# PERF_SANITIZE_UNIT: a gtest filter of CUDA unit tests to run under compute-sanitizer's memcheck (within
# PERF_SANITIZE_TIMEOUT_S seconds): the unit tests run each kernel entry directly, where the conformance cases get
# the kernel that timing chose (e.g. CUTLASS's attention takes only whole tiles of 64 or 128 keys).
# PERF_SANITIZE_UNIT_TOOLS: the tools, memcheck by default (racecheck: shared-memory hazards), each to
# $OUT/<tool>_unit.log; PERF_SANITIZE_UNIT_KERNELS (compute-sanitizer's --kernel-name, e.g. kns=attention) limits
# them to some kernels.
mark sanitize_unit
if [[ -n ${PERF_SANITIZE_UNIT:-} ]]; then
  for tool in ${PERF_SANITIZE_UNIT_TOOLS:-memcheck}; do
    timeout "${PERF_SANITIZE_TIMEOUT_S:-150}" compute-sanitizer --tool "$tool" --error-exitcode 97 \
      ${PERF_SANITIZE_UNIT_KERNELS:+--kernel-name "$PERF_SANITIZE_UNIT_KERNELS"} \
      "$build/tests/tensoracle_cuda_tests" --gtest_filter="$PERF_SANITIZE_UNIT" >"$out/${tool}_unit.log" 2>&1
    summary+=("$tool unit ($PERF_SANITIZE_UNIT): rc $? $(grep -E '^\[  (PASSED|FAILED) |ERROR SUMMARY|RACECHECK SUMMARY' "$out/${tool}_unit.log" | tr '\n' ' ')")
  done
fi
mark kernels
if [[ -n $kernels ]]; then
  # PERF_KERNELS_ARGS: more kernel_profile.py arguments (e.g. --ncu --pipes).
  timeout 200 python3 bench/kernel_profile.py --cli "$TENSORACLE_CLI" --out /tmp/kernel_profile --only "$kernels" \
    ${PERF_KERNELS_ARGS:-} >"$out/kernels.log" 2>&1
  summary+=("kernel_profile: rc $?")
fi
mark models
if [[ -n $models ]]; then
  timeout $(( ${PERF_BUDGET_S:-400} + 60 )) python3 bench/pytorch_comparison.py --cli "$TENSORACLE_CLI" \
    --out "$out/bench" --device cuda --models "$models" --budget-s "${PERF_BUDGET_S:-400}" ${PERF_BENCH_ARGS:-} >"$out/bench.log" 2>&1
  summary+=("pytorch_comparison ($models): rc $?")
fi
mark quantized
if [[ -n ${PERF_QUANTIZED:-} ]]; then
  timeout "${PERF_QUANTIZED_TIMEOUT_S:-400}" python3 bench/quantized_comparison.py --cli "$TENSORACLE_CLI" \
    --out "$out/quantized" --models "$PERF_QUANTIZED" ${PERF_QUANTIZED_ARGS:-} >"$out/quantized.log" 2>&1
  summary+=("quantized_comparison ($PERF_QUANTIZED): rc $?")
fi
mark startup
if [[ -n ${PERF_STARTUP:-} ]]; then
  for model in ${PERF_STARTUP//,/ }; do
    timeout 300 python3 bench/startup_profile.py --cli "$TENSORACLE_CLI" --out "$out/startup-$model" --model "$model" \
      >"$out/startup-$model.log" 2>&1
    summary+=("startup_profile ($model): rc $?")
  done
fi
mark timeline
if [[ -n ${PERF_TIMELINE:-} ]]; then
  if bash scripts/device-install-wheel.sh >"$out/timeline.log" 2>&1; then
    timeout "${PERF_TIMELINE_TIMEOUT_S:-300}" /tmp/tensoracle-venv/bin/python bench/graph_timeline.py \
      --cli "$TENSORACLE_CLI" --out "$out/timeline" --models "$PERF_TIMELINE" >>"$out/timeline.log" 2>&1
  fi
  summary+=("graph_timeline ($PERF_TIMELINE): rc $?")
fi
mark end
[[ -z ${clocks_pid:-} ]] || kill "$clocks_pid" 2>/dev/null
cat "$out/kernels.log" 2>/dev/null
cat "$out/quantized.log" 2>/dev/null
[[ -f $out/bench/results.md ]] && cat "$out/bench/results.md"
cat "$out"/startup-*.log 2>/dev/null
cat "$out/timeline.log" 2>/dev/null
printf '%s\n' "${summary[@]}"
