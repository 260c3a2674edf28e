#!/usr/bin/env bash
# Copies a build's programs and libraries, stripped, into .device/build (git-ignored) so that they fit the
# GPU machine's 64 MiB carry limit, together with the non-CUDA shared libraries that machine lacks (OpenBLAS).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
stage=.device/build
rm -rf "$stage" && mkdir -p "$stage/src" "$stage/tools/cli" "$stage/tests" "$stage/lib" "$stage/examples"
cp -P "$build"/src/libtensoracle.so* "$stage/src/"
cp -r "$build/include" "$stage/include"  # the generated version.hpp, for scripts/device-python-package.sh
cp "$build/tools/cli/tensoracle" "$stage/tools/cli/"
for t in tensoracle_unit_tests tensoracle_cuda_tests safetensors_rewrite cache_open_child; do cp "$build/tests/$t" "$stage/tests/"; done
cp "$build/examples/transformer_encoder" "$stage/examples/"
mkdir -p "$stage/bench" && cp "$build/bench/engine_host_memory" "$stage/bench/"
# The library is one unversioned file when the build has the Python package on, else a versioned file and its links.
find "$stage/src" -type f -name 'libtensoracle.so*' -exec strip --strip-debug {} +
strip --strip-debug "$stage/tools/cli/tensoracle" "$stage"/tests/* "$stage"/examples/* "$stage"/bench/*
# The test plugin libraries (after the strip above, which takes files only).
mkdir -p "$stage/tests/plugins" && cp "$build"/tests/plugins/*.so "$stage/tests/plugins/"
cp "$build"/examples/cubin_plugin/libtensoracle_example_cubin_plugin.so "$stage/examples/"
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
  cp -L "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')" "$stage/lib/"
done
du -sh "$stage"
# --pack: also a gzip archive (the staged build is close to the 64 MiB carry limit); scripts/unpack-device.sh
# unpacks it there.
if [[ ${2:-} == --pack ]]; then
  tar -C .device -czf .device/build.tgz build
  du -sh .device/build.tgz
fi
