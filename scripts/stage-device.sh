#!/usr/bin/env bash
# Copies a build's programs and libraries, stripped, into .device/build (git-ignored) so that they fit the
# GPU machine's 64 MiB carry limit, together with the non-CUDA shared libraries that machine lacks (OpenBLAS).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
stage=.device/build
rm -rf "$stage" && mkdir -p "$stage/src" "$stage/tools/cli" "$stage/tests" "$stage/lib" "$stage/examples"
cp -P "$build"/src/libtensoracle.so* "$stage/src/"
cp "$build/tools/cli/tensoracle" "$stage/tools/cli/"
for t in tensoracle_unit_tests tensoracle_cuda_tests safetensors_rewrite cache_open_child; do cp "$build/tests/$t" "$stage/tests/"; done
cp "$build/examples/transformer_encoder" "$stage/examples/"
mkdir -p "$stage/bench" && cp "$build/bench/engine_host_memory" "$build/bench/quantized_conv_probe" "$stage/bench/"
find "$stage/src" -type f -name 'libtensoracle.so*' -exec strip --strip-debug {} +
strip --strip-debug "$stage/tools/cli/tensoracle" "$stage"/tests/* "$stage"/examples/* "$stage"/bench/*
# The test plugin libraries (after the strip above, which takes files only).
mkdir -p "$stage/tests/plugins" && cp "$build"/tests/plugins/*.so "$stage/tests/plugins/"
cp "$build"/examples/cubin_plugin/libtensoracle_example_cubin_plugin.so "$stage/examples/"
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')" "$stage/lib/"
done
# The Python package as a wheel for the GPU machine's Python (3.12 there), built on its own against this build
# installed into a scratch prefix (python/CMakeLists.txt): only the extension is compiled. The device tests install
# it into a fresh virtual environment (scripts/device-install-wheel.sh).
device_python=${TENSORACLE_DEVICE_PYTHON:-}
if [[ -z $device_python ]]; then
  for candidate in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      device_python=$candidate
      break
    fi
  done
fi
if [[ -z $device_python ]]; then
  echo "stage-device: no Python 3.12 (the GPU machine's) here to build its wheel; set TENSORACLE_DEVICE_PYTHON" >&2
  exit 1
fi
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" --strip >/dev/null
"$device_python" -m pip wheel -q --no-deps --disable-pip-version-check -w "$stage/wheels" \
  -Ccmake.source-dir=python "-Ccmake.define.CMAKE_PREFIX_PATH=$prefix" "-Cbuild-dir=$build/device-wheel" .
du -sh "$stage" "$stage"/wheels/*.whl
# --pack: also a gzip archive (the staged build is close to the 64 MiB carry limit); scripts/unpack-device.sh
# unpacks it there.
if [[ ${2:-} == --pack ]]; then
  tar -C .device -czf .device/build.tgz build
  du -sh .device/build.tgz
fi
