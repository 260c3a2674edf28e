#!/usr/bin/env bash
# Runs the libFuzzer targets: seeded and bounded by default (CI: the same commit gives the same result), or
# --explore MINUTES per target with a random seed, keeping the inputs that find new coverage in tests/fuzz/corpus/.
#
#   scripts/fuzz.sh                 each target -seed=1 for a fixed number of runs ($TENSORACLE_FUZZ_RUNS_<TARGET>)
#   scripts/fuzz.sh --explore 10    each target 10 minutes, random seed; new inputs are merged into tests/fuzz/corpus/
#
# Seeds: generated files (tests/python/make_malformed_corpus.py, tests/fuzz/make_valid_seeds.py, make_engine_seeds,
# tests/fuzz/make_pth_seeds.py:
# each writes the same bytes every run), the committed corpus tests/fuzz/corpus/<target>/ and the committed crash
# inputs tests/fuzz/regressions/<target>/. A crash prints the input (base64) and the command that reproduces it.
# The build (build-fuzz/, clang ASan+UBSan with libFuzzer's instrumentation) is the one .ci/run's sanitizer stage uses.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=ci minutes=0
case "${1:-}" in
  "") ;;
  --explore)
    mode=explore minutes=${2:-10}
    [[ "$minutes" =~ ^[0-9]+$ && "$minutes" -gt 0 ]] || { echo "fuzz.sh: --explore takes whole minutes" >&2; exit 2; }
    ;;
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

build_dir=${TENSORACLE_FUZZ_BUILD_DIR:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORACLE_FUZZ=ON \
  -DTENSORACLE_CUDA=OFF -DTENSORACLE_BUILD_TESTS=ON -DTENSORACLE_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build_dir" --target fuzz_safetensors_reader fuzz_engine_plan fuzz_pth_reader make_engine_seeds | tail -n 1

# Fills DIR with the generated seeds of one corpus (safetensors | engine | pth).
generate_seeds() {
  local corpus=$1 dir=$2
  case "$corpus" in
    safetensors)
      python3 tests/python/make_malformed_corpus.py "$dir" >/dev/null
      rm -f "$dir/expectations.json"
      python3 tests/fuzz/make_valid_seeds.py "$dir" >/dev/null
      ;;
    engine) "$build_dir/tests/fuzz/make_engine_seeds" "$dir" ;;
    pth) python3 tests/fuzz/make_pth_seeds.py "$dir" >/dev/null ;;
  esac
}

# Prints each crash input of an artifacts folder with the commands that reproduce it and keep it as a regression.
report_artifacts() {
  local target=$1 corpus=$2 artifacts=$3 f
  for f in "$artifacts"/*; do
    [[ -f "$f" ]] || continue
    echo "fuzz.sh: $target: $(basename "$f") ($(stat -c %s "$f") bytes), base64:"
    base64 -w 0 "$f"
    echo
    echo "fuzz.sh: reproduce: $build_dir/tests/fuzz/$target $f"
    echo "fuzz.sh: once fixed, keep it: cp $f tests/fuzz/regressions/$corpus/<what-it-found>  (runs in the unit tests)"
  done
}

# Runs one target; in CI mode for RUNS runs from seed 1, in explore mode for the given minutes.
fuzz_target() {
  local target=$1 corpus=$2 runs=$3
  local work="$build_dir/fuzz/$corpus"
  rm -rf "$work" && mkdir -p "$work/seeds" "$work/new" "$work/artifacts"
  generate_seeds "$corpus" "$work/seeds"
  local dirs=("$work/new" "$work/seeds") d
  for d in "tests/fuzz/corpus/$corpus" "tests/fuzz/regressions/$corpus"; do
    [[ -d "$d" ]] && dirs+=("$d")
  done
  local bound
  if [[ $mode == ci ]]; then
    # Nothing that runs on a clock: no allocator purges, corpus reloads or RSS thread (each moves later allocations,
    # and so the address-dependent paths); memory is bounded per allocation instead.
    bound=(-seed=1 -runs="$runs" -purge_allocator_interval=-1 -reload=0 -rss_limit_mb=0 -malloc_limit_mb=4096)
  else
    bound=(-seed=0 -max_total_time=$((minutes * 60)) -rss_limit_mb=4096)
  fi
  # -timeout is generous: a slow machine must not turn a slow input into a failure (CI must not flake).
  local rc=0
  "${runner[@]}" "$build_dir/tests/fuzz/$target" "${bound[@]}" -max_len=65536 -timeout=120 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${dirs[@]}" >"$work/log.txt" 2>&1 || rc=$?
  local done_line executed seed
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/log.txt" | tail -n 1 | sed -E 's/ (exec\/s|rss): [^ ]+//g')
  executed=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$work/log.txt" | tail -n 1)
  seed=$(sed -nE 's/^INFO: Seed: ([0-9]+)/\1/p' "$work/log.txt" | head -n 1)
  if ((rc != 0)); then
    tail -n 60 "$work/log.txt"
    echo "fuzz.sh: $target FAILED (exit $rc, seed $seed); full log: $work/log.txt"
    report_artifacts "$target" "$corpus" "$work/artifacts"
    return 1
  fi
  echo "fuzz.sh: $target: seed $seed, ${executed:-?} runs, $(find "$work/new" -type f | wc -l) new inputs; ${done_line:-no DONE line}"
  if [[ $mode == explore ]]; then
    # Keep what adds coverage beyond the seeds and the committed corpus: merge into a copy of both, then commit the
    # files the merge added (named by their SHA-1) to tests/fuzz/corpus/.
    local base="$work/merge-base" merged="$work/merged" after
    mkdir -p "$base" "$merged" "tests/fuzz/corpus/$corpus"
    cp "$work/seeds"/* "tests/fuzz/corpus/$corpus"/* "tests/fuzz/regressions/$corpus"/* "$base"/ 2>/dev/null || true
    cp "$base"/* "$merged"/
    "$build_dir/tests/fuzz/$target" -merge=1 -max_len=65536 -timeout=120 "$merged" "$work/new" >"$work/merge.txt" 2>&1
    local added=0 f
    for f in "$merged"/*; do
      [[ -e "$base/$(basename "$f")" ]] && continue
      cp "$f" "tests/fuzz/corpus/$corpus/"
      added=$((added + 1))
    done
    after=$(ls "tests/fuzz/corpus/$corpus" | wc -l)
    echo "fuzz.sh: $target: $added inputs with new coverage added to tests/fuzz/corpus/$corpus ($after there now; commit them)"
  fi
}

# A seed alone does not make runs repeat: code paths depend on addresses (libstdc++'s string copies compare source and
# destination pointers, for one), so with address randomization, or with libFuzzer's clock-driven work moving later
# allocations, the same seed explores differently from run to run. In CI mode the targets run without address
# randomization (setarch -R), in a fixed, minimal environment (the stack's layout depends on it) and without the
# clock-driven work (fuzz_target), which makes a commit's runs repeat exactly. Exploration keeps all of it random.
runner=()
if [[ $mode == ci ]]; then
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    runner=(env -i PATH=/usr/bin:/bin OPENBLAS_NUM_THREADS=1 ${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE}
      ${OPENBLAS_L2_SIZE:+OPENBLAS_L2_SIZE=$OPENBLAS_L2_SIZE} UBSAN_OPTIONS=print_stacktrace=1
      setarch "$(uname -m)" -R)
  else
    echo "fuzz.sh: warning: cannot turn off address randomization here (setarch -R); runs will not repeat exactly" >&2
  fi
fi

# Runs per target in CI: about 50 s each on a CI machine (2 cores, ASan+UBSan); override to go longer.
status=0
fuzz_target fuzz_safetensors_reader safetensors "${TENSORACLE_FUZZ_RUNS_SAFETENSORS:-1000000}" || status=1
fuzz_target fuzz_engine_plan engine "${TENSORACLE_FUZZ_RUNS_ENGINE:-500000}" || status=1
fuzz_target fuzz_pth_reader pth "${TENSORACLE_FUZZ_RUNS_PTH:-500000}" || status=1
exit $status
