# Same-machine A/B of kernel choices: a model's engine as timing built it, against the same engine with chosen kernels
# swapped through an edited timing cache (or run with other environment settings), the two benchmarked in alternation.
"""Whether a kernel that wins its build timing also wins inside the model, on one machine in one run.

`tensoracle build` times each step's candidates alone, a kernel repeated over the same inputs; inside a model the
kernel follows other kernels (other data in L2, programmatic launch overlap, the clocks a long run settles at), and
a few choices have won their timing but lost in the model (docs/performance.md). This tool separates the two:

    python3 bench/kernel_ab.py --cli .device/build/tools/cli/tensoracle --out $OUT/ab --model bert_large --batch 32 \
        --swap linear_f16_f32acc_cutlass_sm90_pingpong128x128c2_gelu_erf=linear_f16_f32acc_cutlass_sm90_pingpong128x128e64_gelu_erf

1. Engine A: a cold fp16 build of the model (bench/pytorch_models.py) at that batch, writing a timing cache.
2. Engine B: the same network built with a copy of that cache in which, for every `--swap OLD=NEW` (repeatable),
   each problem timing gave OLD takes NEW instead, where NEW is one of that problem's candidates (a timing cache key
   ends with its candidate list). A and B differ in those steps only; the steps that differ are listed.
   With `--env-b VAR=VALUE` (repeatable) instead of swaps, B is engine A itself, benchmarked with those settings in
   the environment: e.g. `--env-b TENSORACLE_PROGRAMMATIC_LAUNCH=0` measures the programmatic launches
   (docs/architecture.md).
3. `tensoracle bench --graph-mode` on A and B in turn, in the order A B B A repeated `--rounds` times (drift in the
   clocks weighs on both alike), each run `--iterations` replays after `--warmup`.

It prints, and writes to OUT/ab.json, every run's p50 and each engine's median of them, and B's time over A's. Exit
status 2 when no swap changes any problem (A and B would be one engine), 1 when a build or bench fails.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(cmd: list, timeout: float, env: dict[str, str] | None = None) -> str:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **env} if env else None)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:3]))} ... exited {r.returncode}: {r.stderr.strip()[-600:]}")
    return r.stdout


def swapped_cache(cache: dict, swaps: dict[str, str]) -> tuple[dict, dict[str, int], dict[str, int]]:
    """The cache with the swaps applied; how many problems each swap changed, and how many it could not (NEW is
    not among that problem's candidates)."""
    edited = json.loads(json.dumps(cache))
    changed = {old: 0 for old in swaps}
    refused = {old: 0 for old in swaps}
    for key, choice in edited["entries"].items():
        old = choice.get("kernel")
        if old not in swaps:
            continue
        candidates = key.rsplit("|", 1)[-1].split(",")
        if swaps[old] in candidates:
            choice["kernel"] = swaps[old]
            changed[old] += 1
        else:
            refused[old] += 1
    return edited, changed, refused


def step_kernels(cli: str, engine: Path) -> list[tuple[str, str]]:
    manifest = json.loads(run([cli, "inspect", engine], 120))
    return [(s.get("layer", "?"), s["kernel"]) for s in manifest["steps"]]


def build_b(args, report: dict, swaps: dict, build: list, cache_a: Path, engines: dict) -> int:
    """Engine B from a copy of A's timing cache with the swaps applied; 2 when no swap changes a problem."""
    cache_b = cache_a.with_name("timing_cache_b.json")
    edited, changed, refused = swapped_cache(json.loads(cache_a.read_text()), swaps)
    report["problems_changed"], report["problems_refused"] = changed, refused
    for old, new in swaps.items():
        print(f"swap {old} -> {new}: {changed[old]} problems changed, {refused[old]} without {new} "
              "among their candidates", flush=True)
    if sum(changed.values()) == 0:
        print("no problem changed: A and B would be the same engine", file=sys.stderr)
        return 2
    cache_b.write_text(json.dumps(edited, indent=2))
    print("building B (the edited cache: no timing)", flush=True)
    run(build + ["-o", engines["B"], "--timing-cache", cache_b], args.timeout_s)
    steps_a, steps_b = step_kernels(args.cli, engines["A"]), step_kernels(args.cli, engines["B"])
    report["steps_that_differ"] = [
        {"layer": la, "A": ka, "B": kb} for (la, ka), (_, kb) in zip(steps_a, steps_b) if ka != kb]
    print(f"{len(report['steps_that_differ'])} of {len(steps_a)} steps differ", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", required=True, help="the tensoracle command")
    p.add_argument("--out", required=True, help="folder for ab.json and the two timing caches")
    p.add_argument("--model", required=True, help="a key of bench/pytorch_models.py (bert, bert_large, gpt2, ...)")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--swap", action="append", default=[], metavar="OLD=NEW",
                   help="kernel names: the problems timing gave OLD take NEW (repeatable)")
    p.add_argument("--env-b", action="append", default=[], metavar="VAR=VALUE",
                   help="instead of swaps: B is engine A run with VAR=VALUE in the environment (repeatable)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of A B B A")
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--timeout-s", type=float, default=300, help="for each build and bench")
    p.add_argument("--target", default="cuda", help="the engine's target (cpu: a smoke test of this tool)")
    p.add_argument("--tiny", action="store_true", help="the tiny models of bench/pytorch_models.py (a smoke test)")
    args = p.parse_args()

    swaps, env_b = {}, {}
    for s in args.swap:
        old, sep, new = s.partition("=")
        if not sep or not old or not new:
            p.error(f"--swap {s!r}: expected OLD=NEW")
        swaps[old] = new
    for s in args.env_b:
        var, sep, value = s.partition("=")
        if not sep or not var:
            p.error(f"--env-b {s!r}: expected VAR=VALUE")
        env_b[var] = value
    if bool(swaps) == bool(env_b):
        p.error("give either --swap (B: kernels swapped) or --env-b (B: engine A with other settings)")

    import pytorch_models  # torch and the model definitions: imported after the arguments are checked

    specs = {s.key: s for s in pytorch_models.model_specs(args.tiny)}
    if args.model not in specs:
        p.error(f"--model {args.model!r}: not one of {sorted(specs)}")
    spec = specs[args.model]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"model": args.model, "batch": args.batch, "swaps": swaps, "env_b": env_b, "runs": []}
    with tempfile.TemporaryDirectory(prefix="kernel_ab_") as tmp:
        work = Path(tmp)
        pytorch_models.write_model_files(spec, work)
        shape = "x".join(map(str, spec.input_shape(args.batch)))
        build = [args.cli, "build", work / "net.json", "--target", args.target, "--precision",
                 "fp16" if args.target != "cpu" else "fp32", "--profile", f"x={shape}:{shape}:{shape}"]
        cache_a = out / "timing_cache_a.json"
        cache_a.unlink(missing_ok=True)
        engines = {"A": work / "a.engine", "B": work / "b.engine"}
        print(f"building A (cold, timing every candidate) for {args.model} batch {args.batch}", flush=True)
        run(build + ["-o", engines["A"], "--timing-cache", cache_a], args.timeout_s)
        if env_b:
            engines["B"] = engines["A"]
            print(f"B: engine A with {' '.join(f'{k}={v}' for k, v in env_b.items())}", flush=True)
        elif build_b(args, report, swaps, build, cache_a, engines) != 0:
            (out / "ab.json").write_text(json.dumps(report, indent=2))
            return 2

        bench = ["bench", "--shape", f"x={shape}", "--warmup", args.warmup, "--iterations", args.iterations]
        bench += ["--graph-mode"] if args.target != "cpu" else []
        for r in range(args.rounds):
            for side in ("A", "B", "B", "A"):
                rep = json.loads(run([args.cli, bench[0], engines[side]] + bench[1:], args.timeout_s,
                                     env_b if side == "B" else None))
                p50 = rep["target_time_ms"]["p50"]
                report["runs"].append({"round": r, "engine": side, "p50_ms": p50})
                print(f"round {r} {side}: p50 {p50:.4f} ms", flush=True)
    medians = {side: statistics.median(x["p50_ms"] for x in report["runs"] if x["engine"] == side) for side in "AB"}
    report["median_p50_ms"] = medians
    report["b_over_a"] = medians["B"] / medians["A"]
    (out / "ab.json").write_text(json.dumps(report, indent=2))
    what = "with " + " ".join(f"{k}={v}" for k, v in env_b.items()) if env_b else "swapped"
    print(f"A (as timed) {medians['A']:.4f} ms, B ({what}) {medians['B']:.4f} ms: B/A {report['b_over_a']:.4f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"kernel_ab: {e}", file=sys.stderr)
        sys.exit(1)
