#!/usr/bin/env bash
# On the GPU machine: the same benchmarks on two staged builds in one run, for before/after numbers.
# Usage: bench/compare_builds.sh BEFORE_DIR AFTER_DIR [OUT]   (staged builds: scripts/stage-device.sh layout)
#   1. host memory held by a loaded ~300 MB CUDA engine (bench/engine_host_memory of AFTER, run on each library);
#   2. bench/pytorch_comparison.py: BERT-base and ResNet-50 with BEFORE's CLI (no torch.compile), then every row with
#      AFTER's CLI against torch.compile mode reduce-overhead. BUDGET_BEFORE_S / BUDGET_AFTER_S bound them.
set -uo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2 out=${3:-${OUT:-/tmp/compare-builds}}
mkdir -p "$out"
nvrtc=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null || true)
for which in before after; do
  dir=$before
  [[ $which == after ]] && dir=$after
  echo "== engine host memory, $which"
  LD_LIBRARY_PATH="$PWD/$dir/src:$PWD/$dir/lib:$nvrtc:${LD_LIBRARY_PATH:-}" \
    "$after/bench/engine_host_memory" /tmp/engine_host_memory 2>&1 | tee "$out/host_memory_$which.log"
done
run_comparison() {  # run_comparison NAME DIR ARGS...
  local name=$1 dir=$2
  shift 2
  echo "== pytorch_comparison, $name"
  LD_LIBRARY_PATH="$PWD/$dir/src:$PWD/$dir/lib:$nvrtc:${LD_LIBRARY_PATH:-}" \
    python3 bench/pytorch_comparison.py --cli "$dir/tools/cli/tensoracle" --out "$out/bench_$name" --device cuda "$@" \
    >"$out/bench_$name.log" 2>&1
  tail -n 40 "$out/bench_$name/results.md" 2>/dev/null || tail -n 20 "$out/bench_$name.log"
}
run_comparison before "$before" --models bert,resnet50 --compile-mode none --budget-s "${BUDGET_BEFORE_S:-150}"
run_comparison after "$after" --compile-mode reduce-overhead --budget-s "${BUDGET_AFTER_S:-280}"
