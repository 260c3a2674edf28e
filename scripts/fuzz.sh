#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for SECONDS (default 60) on a seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build_dir=${TENSORACLE_FUZZ_BUILD_DIR:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORACLE_FUZZ=ON \
  -DTENSORACLE_CUDA=OFF -DTENSORACLE_BUILD_TESTS=ON -DTENSORACLE_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build_dir" --target fuzz_safetensors_reader
corpus="$build_dir/fuzz-corpus/safetensors"
rm -rf "$corpus" && mkdir -p "$corpus"
python3 tests/python/make_malformed_corpus.py "$corpus" >/dev/null
rm -f "$corpus/expectations.json"
python3 tests/fuzz/make_valid_seeds.py "$corpus"
"$build_dir/tests/fuzz/fuzz_safetensors_reader" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
  -print_final_stats=1 "$corpus" 2>&1 | tail -n 15

# Engine bytes: seeds are small valid CPU engines written by make_engine_seeds.
cmake --build "$build_dir" --target fuzz_engine_plan make_engine_seeds
corpus="$build_dir/fuzz-corpus/engine"
rm -rf "$corpus" && mkdir -p "$corpus"
"$build_dir/tests/fuzz/make_engine_seeds" "$corpus"
"$build_dir/tests/fuzz/fuzz_engine_plan" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
  -print_final_stats=1 "$corpus" 2>&1 | tail -n 15
