#!/usr/bin/env python3
"""Where a CUDA engine's time goes inside one graph-mode enqueue: every kernel's duration and the gaps between them.

Builds bench/pytorch_models.py models (fp16, CUDA, one fixed shape per batch), loads each engine through the Python
package, enqueues it in graph mode (ExecutionContext::set_graph_mode, what `tensoracle bench --graph-mode` times), and
records the replays with CUPTI through torch.profiler: each kernel's start and end on the GPU, so programmatic launches
show as overlaps (negative gaps) and launch latency as gaps. Prints, per model and batch, the median replay span (first
kernel's start to last kernel's end), the sum of kernel durations, the sum of the gaps, the time per kernel family and
the kernels in launch order (median duration and gap before each); writes timeline.json. Unlike `tensoracle bench
--per-step` (CUDA events between steps, which stop the overlap and add their own cost), this is the graph as it runs.

    python3 bench/graph_timeline.py --cli build/tools/cli/tensoracle --out OUT --models bert:1,gpt2:1,bert:32

Needs a GPU, torch (with CUPTI, as its wheels have) and the tensoracle package (scripts/device-install-wheel.sh).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Kernel families by name (first match wins): what a row of the summary adds up.
FAMILIES = [
    ("CUTLASS product", r"cutlass"),
    # cuDNN's convolution kernels are named like cuBLASLt's (sm90_xmma_fprop_implicit_gemm_...): matched first.
    ("convolution (cuDNN or ours)", r"fprop|conv"),
    ("cuBLASLt product", r"^sm90_xmma|^sm80_xmma|^nvjet|cublas|gemm"),
    ("our attention", r"attention_flash|attention_rowwise"),
    ("attention NaN scan", r"attention_causal_poison"),
    ("cuDNN attention", r"sdpa|cudnn|fmha"),
    ("layer norm", r"norm_rows|norm_block"),
    ("generated elementwise (NVRTC)", r"fused_elementwise"),
    ("weight-only product", r"weight_only"),
    ("copies and transposes", r"copy|transpose"),
    ("pooling", r"pool"),
]


def family(name: str) -> str:
    for title, pattern in FAMILIES:
        if re.search(pattern, name, re.IGNORECASE):
            return title
    return "other: " + short(name, 40)


def short(name: str, limit: int = 70) -> str:
    """A kernel's name without template arguments and parameter lists, at most `limit` characters."""
    out, depth = [], 0
    for ch in name:
        if ch in "<(":
            if depth == 0:
                out.append("<>" if ch == "<" else "()")
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    text = "".join(out).replace("void ", "")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def build_engine(cli: str, spec, batch: int, work: Path) -> Path:
    import pytorch_models

    folder = work / spec.key  # a folder per model: the network refers to its weights file by a relative name
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / f"{spec.key}_b{batch}.engine"
    if engine.exists():
        return engine
    if not (folder / "net.json").exists():
        pytorch_models.write_model_files(spec, folder)
    shape = "x".join(map(str, spec.input_shape(batch)))
    r = subprocess.run([cli, "build", str(folder / "net.json"), "-o", str(engine), "--target", "cuda",
                        "--precision", "fp16", "--profile", f"x={shape}:{shape}:{shape}"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"build of {spec.key} batch {batch} failed: {r.stderr[-1500:]}")
    return engine


def kernel_events(trace: Path) -> list[dict]:
    events = json.loads(trace.read_text()).get("traceEvents", [])
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]
    kernels.sort(key=lambda e: float(e["ts"]))
    return [{"name": e["name"], "start": float(e["ts"]), "end": float(e["ts"]) + float(e["dur"])} for e in kernels]


def profile(engine_path: Path, replays: int, warmup: int) -> dict:
    import torch
    import tensoracle

    torch_dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
                    "i64": torch.int64}
    engine = tensoracle.Engine.load(str(engine_path))
    manifest = engine.manifest()
    execution = engine.create_execution()
    buffers = {}
    for t in manifest["inputs"]:
        shape = t["profile"]["opt"]
        execution.set_input_shapes({t["name"]: shape})
        buffers[t["name"]] = torch.randn(shape, device="cuda").to(torch_dtypes[execution.tensor_dtype(t["name"])])
    for t in manifest["outputs"]:
        buffers[t["name"]] = torch.empty(execution.tensor_shape(t["name"]), device="cuda",
                                         dtype=torch_dtypes[execution.tensor_dtype(t["name"])])
    for name, buffer in buffers.items():
        execution.set_tensor_address(name, buffer)
    execution.graph_mode = True
    stream = torch.cuda.current_stream()
    for _ in range(warmup):
        execution.enqueue(stream)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            execution.enqueue(stream)
            torch.cuda.synchronize()
    trace = engine_path.with_suffix(".trace.json")  # beside the engine, not in OUT: the device returns few files
    prof.export_chrome_trace(str(trace))
    kernels = kernel_events(trace)
    if not kernels or len(kernels) % replays != 0:
        raise RuntimeError(f"{len(kernels)} kernels recorded for {replays} replays: not a whole number per replay")
    per = len(kernels) // replays
    runs = [kernels[i * per:(i + 1) * per] for i in range(replays)]
    names = [k["name"] for k in runs[0]]
    if any([k["name"] for k in run] != names for run in runs):
        raise RuntimeError("the replays launched different kernels")
    spans = [run[-1]["end"] - run[0]["start"] for run in runs]
    rows = []
    for i, name in enumerate(names):
        durations = [run[i]["end"] - run[i]["start"] for run in runs]
        gaps = [run[i]["start"] - run[i - 1]["end"] for run in runs] if i else [0.0]
        # A kernel launched programmatically starts before its predecessor ends and waits inside: its own time is
        # from the later of its start and the predecessor's end.
        own = [run[i]["end"] - max(run[i]["start"], run[i - 1]["end"] if i else run[i]["start"]) for run in runs]
        rows.append({"name": name, "family": family(name), "duration_us": statistics.median(durations),
                     "own_us": statistics.median(own), "gap_us": statistics.median(gaps)})
    families: dict[str, dict] = {}
    for r in rows:
        f = families.setdefault(r["family"], {"kernels": 0, "duration_us": 0.0, "own_us": 0.0})
        f["kernels"] += 1
        f["duration_us"] += r["duration_us"]
        f["own_us"] += r["own_us"]
    steps = [{"layer": s["layer"], "op": s["op"], "kernel": s.get("kernel")} for s in manifest.get("steps", [])]
    return {"engine": engine_path.name, "replays": replays, "kernels_per_replay": per,
            "span_us": {"p50": statistics.median(spans), "min": min(spans), "max": max(spans)},
            "kernel_time_us": sum(r["duration_us"] for r in rows), "own_time_us": sum(r["own_us"] for r in rows),
            "gap_us": sum(r["gap_us"] for r in rows[1:] if r["gap_us"] > 0),
            "overlap_us": -sum(r["gap_us"] for r in rows[1:] if r["gap_us"] < 0),
            "families": dict(sorted(families.items(), key=lambda kv: -kv[1]["own_us"])), "kernels": rows,
            "steps": steps}


def report(key: str, batch: int, r: dict) -> str:
    lines = [f"## {key} batch {batch}: {r['kernels_per_replay']} kernels, span p50 {r['span_us']['p50']:.1f} us "
             f"(min {r['span_us']['min']:.1f}): kernels' own time {r['own_time_us']:.1f} us, gaps {r['gap_us']:.1f} us "
             f"(durations {r['kernel_time_us']:.1f} us with {r['overlap_us']:.1f} us of overlaps)", "",
             "| family | kernels | own time us | share of the span |", "| --- | ---: | ---: | ---: |"]
    for name, f in r["families"].items():
        lines.append(f"| {name} | {f['kernels']} | {f['own_us']:.1f} | {100 * f['own_us'] / r['span_us']['p50']:.1f} % |")
    lines += ["", "| # | kernel | own us | duration us | gap before us |", "| ---: | --- | ---: | ---: | ---: |"]
    for i, k in enumerate(r["kernels"]):
        lines.append(f"| {i} | {short(k['name'])} | {k['own_us']:.2f} | {k['duration_us']:.2f} | {k['gap_us']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True, help="the tensoracle binary (builds the engines)")
    ap.add_argument("--out", required=True, help="folder for timeline.json and timeline.md")
    ap.add_argument("--models", default="bert:1,gpt2:1",
                    help="MODEL:BATCH,... (bench/pytorch_models.py keys; default bert:1,gpt2:1)")
    ap.add_argument("--replays", type=int, default=50, help="graph-mode enqueues recorded (default 50)")
    ap.add_argument("--warmup", type=int, default=20, help="enqueues before recording (default 20)")
    ap.add_argument("--engines", default=None,
                    help="folder for the engines (KEY/KEY_bBATCH.engine, reused when there) and their traces "
                         "(default: a new temporary folder)")
    args = ap.parse_args()
    import pytorch_models

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.engines) if args.engines else Path(tempfile.mkdtemp(prefix="timeline-"))
    work.mkdir(parents=True, exist_ok=True)
    specs = {s.key: s for s in pytorch_models.model_specs(False)}
    results, sections, failed = {}, [], 0
    for item in args.models.split(","):
        key, _, batch_text = item.partition(":")
        batch = int(batch_text or specs[key].batches[0])
        try:
            engine = build_engine(args.cli, specs[key], batch, work)
            r = profile(engine, args.replays, args.warmup)
        except Exception as e:  # noqa: BLE001
            failed += 1
            results[f"{key}:{batch}"] = {"error": str(e)[-2000:]}
            print(f"{key} batch {batch}: {e}", file=sys.stderr)
            continue
        results[f"{key}:{batch}"] = r
        sections.append(report(key, batch, r))
        print(sections[-1], flush=True)
    (out / "timeline.json").write_text(json.dumps(results, indent=1))
    (out / "timeline.md").write_text("\n\n".join(sections) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
