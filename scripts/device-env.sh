#!/usr/bin/env bash
# Sourced on the GPU machine by scripts/gpu-check.sh and scripts/gpu-perf.sh: the staged build's libraries and
# programs (BUILD, default .device/build) in the environment, and NVRTC (the builder compiles generated kernels with it):
# the system's, else the CUDA runtime's or a PyTorch (nvidia-*) wheel's copy.
build=${build:-.device/build}
machine_ld_path=${LD_LIBRARY_PATH:-}  # the package tests run on the wheel's library, not the staged one
export LD_LIBRARY_PATH="$PWD/$build/src:$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
export TENSORACLE_REQUIRE_GPU=1
export TENSORACLE_CLI="$PWD/$build/tools/cli/tensoracle"
# The staged test plugin (tensoracle_cuda_tests' CudaPlugins; the binary's built-in path is the staging machine's).
export TENSORACLE_TEST_PLUGIN="$PWD/$build/tests/plugins/libtensoracle_test_plugin.so"
if ! ldconfig -p | grep -q 'libnvrtc.so.13 '; then
  site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)
  nvrtc=$(find /usr/local /usr/lib /opt $site -name 'libnvrtc.so.13' 2>/dev/null | head -n 1)
  [[ -n $nvrtc ]] && export LD_LIBRARY_PATH="$(dirname "$nvrtc"):$LD_LIBRARY_PATH"
fi
echo "NVRTC: ${nvrtc:-$(ldconfig -p | grep -m1 'libnvrtc.so.13 ' || echo 'not found')}"
