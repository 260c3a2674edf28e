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
source scripts/device-env.sh  # LD_LIBRARY_PATH (machine_ld_path keeps the machine's), TENSORACLE_CLI, NVRTC
export TENSORACLE_SAFETENSORS_REWRITE="$PWD/$build/tests/safetensors_rewrite"
export TENSORACLE_FLOAT_REFS_DIR="$PWD/$build/float_refs_device"
export TENSORACLE_CACHE_OPEN_CHILD="$PWD/$build/tests/cache_open_child"
export TENSORACLE_EXAMPLE_PLUGIN="$PWD/$build/examples/libtensoracle_example_cubin_plugin.so"
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
# GPU_CHECK_PART=tests runs everything but the sanitizers, =sanitizers (or =racecheck, =memcheck) only those;
# =package the wheel's tests and the driver-only check (about a minute); =quick the CUDA engine tests, the op-conformance and model suites on the GPU only, =rest what =tests adds to
# =quick (the examples, the unit tests, the Python tests and the package's). quick, rest and sanitizers each fit one
# 10-minute call.
part=${GPU_CHECK_PART:-all}
step version "$TENSORACLE_CLI" --version
if [[ $part == plugins ]]; then  # =plugins: plugin layers and cubin plugins only (a quick check of that work)
  step cuda_unit "$build/tests/tensoracle_cuda_tests" --gtest_filter='CudaPlugins.*'
  step python python3 -m pytest -q -p no:cacheprovider tests/python/test_plugin_cli.py
  step python_package_install bash scripts/device-install-wheel.sh /tmp/tensoracle-venv
  step python_package env -u TENSORACLE_CLI LD_LIBRARY_PATH="$machine_ld_path" /tmp/tensoracle-venv/bin/python -m pytest -q \
    -p no:cacheprovider tests/python/package/test_example_plugin.py tests/python/package/test_plugins.py \
    tests/python/package/test_bundle.py
  part=none
fi
if [[ $part == package ]]; then  # =package: the wheel in a fresh environment, its tests, and driver-only
  step python_package_install bash scripts/device-install-wheel.sh /tmp/tensoracle-venv
  step python_package env -u TENSORACLE_CLI LD_LIBRARY_PATH="$machine_ld_path" /tmp/tensoracle-venv/bin/python -m pytest -q \
    -p no:cacheprovider tests/python/package
  step driver_only env LD_LIBRARY_PATH="$machine_ld_path" bash scripts/driver-only-check.sh /tmp/tensoracle-venv
  part=none
fi
if [[ $part != sanitizers && $part != racecheck && $part != memcheck && $part != none ]]; then
if [[ $part != rest ]]; then
step cuda_unit "$build/tests/tensoracle_cuda_tests"
# The op-conformance suite: every case on the CPU reference against PyTorch, then built as a CUDA engine
# and checked against the CPU reference.
step conformance_cuda env TENSORACLE_CONFORMANCE_TARGET=cuda python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_conformance.py
# The library kernels (cuDNN convolutions, pooling and attention, cuBLASLt products) on the cases where timing picks
# the direct kernels: every step takes its first candidate.
step conformance_cuda_first_kernels env TENSORACLE_CONFORMANCE_TARGET=cuda TENSORACLE_CONFORMANCE_BUILD_ARGS=--no-timing \
  python3 -m pytest -q -p no:cacheprovider tests/python/test_conformance.py -k "conv or pool or matmul or linear or attention"
# The model-level networks (BERT, GPT-2, Llama layers, ResNet blocks) as fp32 and fp16 CUDA engines vs PyTorch.
step models_cuda env TENSORACLE_MODEL_TARGET=cuda python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_models.py -k test_engine
fi
if [[ $part != quick ]]; then
# The main job on the GPU, fp32 and fp16.
step example_fp32 "$build/examples/transformer_encoder" --dir "$out/example" --target cuda --precision fp32
step example_fp16 "$build/examples/transformer_encoder" --dir "$out/example" --target cuda --precision fp16
rm -rf "$out/example"  # engines and weights: too large to bring back
step float_refs python3 tests/python/gen_float_references.py "$TENSORACLE_FLOAT_REFS_DIR"
step unit "$build/tests/tensoracle_unit_tests" --gtest_brief=1
# The Python tests of the command and files (torch here is the machine's: test_convert.py reads what it writes),
# then the Python package's own tests on its wheel (built here for this machine's Python) in a fresh environment,
# and the wheel with the system's CUDA libraries hidden (only the driver and NVIDIA's wheels).
step python python3 -m pytest -q -p no:cacheprovider tests/python --ignore=tests/python/test_conformance.py \
  --ignore=tests/python/package
step python_package_install bash scripts/device-install-wheel.sh /tmp/tensoracle-venv
step python_package env -u TENSORACLE_CLI LD_LIBRARY_PATH="$machine_ld_path" /tmp/tensoracle-venv/bin/python -m pytest -q \
  -p no:cacheprovider tests/python/package
step driver_only env LD_LIBRARY_PATH="$machine_ld_path" bash scripts/driver-only-check.sh /tmp/tensoracle-venv
fi
fi
# compute-sanitizer on the op suite's kernels that use shared memory or warp shuffles (racecheck) and on every
# op family (memcheck), each case's engine run under the tool.
if [[ $part == tests || $part == quick || $part == rest || $part == none ]]; then
  :
elif command -v compute-sanitizer >/dev/null; then
  # racecheck: the cases of the families whose kernels use shared memory or warp shuffles; memcheck: every family.
  # GPU_CHECK_PART=sanitizers takes their f16/bf16 cases (both tools, about 2.5 minutes on the H200);
  # =racecheck and =memcheck run one tool on every dtype (about 4 and 5 minutes).
  shared='(attention or norm or softmax or reduce or top_k or argm or transpose or global_avg or conv or linear or matmul or split or concat)'
  race_k="$shared and f16" mem_k="f16"
  [[ $part == racecheck ]] && race_k="$shared"
  [[ $part == memcheck ]] && mem_k="not test_case_names_are_unique"
  if [[ $part != memcheck ]]; then
    step racecheck_ops env TENSORACLE_CONFORMANCE_TARGET=cuda TENSORACLE_CONFORMANCE_SANITIZER=racecheck \
      timeout 540 python3 -m pytest -q -p no:cacheprovider tests/python/test_conformance.py -k "$race_k"
  fi
  if [[ $part != racecheck ]]; then
    step memcheck_ops env TENSORACLE_CONFORMANCE_TARGET=cuda TENSORACLE_CONFORMANCE_SANITIZER=memcheck \
      timeout 540 python3 -m pytest -q -p no:cacheprovider tests/python/test_conformance.py -k "$mem_k"
  fi
else
  summary+=("SKIP compute-sanitizer: not installed on this machine")
fi
cat "$out/version.log" "$out"/example_*.log 2>/dev/null
for log in unit cuda_unit python python_package conformance_cuda conformance_cuda_first_kernels models_cuda racecheck_ops memcheck_ops; do
  [[ -f "$out/$log.log" ]] && echo "$log: $(grep -hE '^\[  (PASSED|FAILED)|[0-9]+ (passed|failed)' "$out/$log.log" | tail -n 2 | tr '\n' ' ')"
done
printf '%s\n' "${summary[@]}"
! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
