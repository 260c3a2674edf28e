#!/usr/bin/env bash
# A quick GPU smoke check on the device machine (carry .device): CUDA engine tests, the example at fp32 and fp16,
# and the engine command tests with the GPU required. scripts/gpu-check.sh is the full run.
set -u
b=.device/build
export LD_LIBRARY_PATH=$PWD/$b/src:$PWD/$b/lib
export TENSORACLE_REQUIRE_GPU=1 TENSORACLE_CLI=$PWD/$b/tools/cli/tensoracle
$TENSORACLE_CLI --version
timeout 120 $b/tests/tensoracle_cuda_tests 2>&1 | tail -25
timeout 60 $b/examples/transformer_encoder --dir $OUT/ex --target cuda --precision fp32 2>&1 | tail -8
timeout 60 $b/examples/transformer_encoder --dir $OUT/ex --target cuda --precision fp16 --batch 8 --seq 256 2>&1 | tail -8
timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/python/test_engine_cli.py 2>&1 | tail -15
