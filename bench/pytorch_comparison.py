# Benchmarks tensoracle engines against PyTorch eager and torch.compile: latency, peak memory, engine size, accuracy.
"""tensoracle vs PyTorch on five standard models.

On the GPU machine (one H200; torch 2.x with CUDA, numpy, safetensors), one call per group of models (each fits a
10-minute call):

    python3 bench/pytorch_comparison.py --cli .device/build/tools/cli/tensoracle --out $OUT/bench --device cuda \
        --models bert,resnet50,gpt2 --budget-s 420
    python3 bench/pytorch_comparison.py --cli .device/build/tools/cli/tensoracle --out $OUT/bench_large --device cuda \
        --models bert_large,vit_b16 --budget-s 420

Smoke test of the whole flow on the CPU (tiny models, CPU engines, a minute or two):

    /usr/bin/python3 bench/pytorch_comparison.py --cli build/tools/cli/tensoracle --out /tmp/pcbench --device cpu --tiny

Rows, in this order (the models are in bench/pytorch_models.py):
    BERT-base encoder (12 layers, hidden 768, 12 heads, FFN 3072, GELU, post-LN)   batch 1 and 32, seq 128
    ResNet-50 (torchvision architecture, bottlenecks [3,4,6,3], batch norm)        batch 1 and 256, 224x224
    GPT-2 small prefill (12 layers, hidden 768, causal, tanh GELU, pre-LN, Conv1D)  batch 1, 8 and 16, seq 512
    BERT-large encoder (24 layers, hidden 1024, 16 heads, FFN 4096)                batch 32, seq 384
    ViT-B/16 (torchvision layout: patch conv, class token, 12 pre-LN blocks)        batch 1 and 128, 224x224

Per model: deterministic random weights (torch.manual_seed) saved as f32 safetensors; the network JSON
with dynamic batch (and sequence) dims; `tensoracle build --precision fp16 --profile x=S:S:S`, one engine per
row with that row's fixed shape S (activation memory planned for that row); `tensoracle run` at the small batch
compared with PyTorch f32 (TF32 off) by relative L2 error; `tensoracle bench --per-step` per row; PyTorch
eager (fp16, inference_mode; CUDA events and host wall time per run, one synchronize per run, inputs
rotated among 4 copies) and torch.compile (in a subprocess with a per-row time cap) per row, and `--graph-mode` (the execution context's graph mode; once more with TENSORACLE_PROGRAMMATIC_LAUNCH=0,
every kernel launched plainly); peak memory
(torch.cuda.max_memory_allocated for one eager inference; ours = engine weights + context memory +
input + output). The GPU's measured limits (large fp16 matmul, device-to-device copy) come first.

results.md ends with where the time goes at each model's largest batch: per op kind, then the ten costliest layers
with a model's repeated blocks grouped (steps, kernels, time a step and in all, and each product's TFLOP/s and
fraction of the measured matmul limit).

Everything is written incrementally to OUT/results.json and OUT/results.md (small logs and the network
JSON under OUT/MODEL/); weights and engines go to a scratch folder (--work, default a temporary folder,
removed at the end) so they are not copied back with OUT. The run stops starting new work once the
--budget-s time budget is nearly spent and marks the remaining rows skipped; every subprocess has a
timeout and every failure is recorded in the table instead of ending the run.
"""
from __future__ import annotations

import time

PROCESS_START = time.monotonic()  # the budget counts from here, before torch is imported

import argparse
import datetime
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pytorch_models  # noqa: E402  (bench/pytorch_models.py)

# Least time (s) that must be left to start each kind of step; below it the step is recorded as skipped.
NEED_MODEL_S = 25
NEED_BENCH_S = 6
NEED_EAGER_S = 4
NEED_COMPILE_S = 20


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def short_error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
    return text[:300]


def last_lines(text: str, n: int = 3, limit: int = 400) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-limit:]


class Budget:
    def __init__(self, seconds: float):
        self.start = PROCESS_START
        self.deadline = self.start + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def run_cmd(cmd: list[str], timeout: float, log_path: Path | None = None, env: dict | None = None) -> dict:
    """Runs `cmd` in its own process group (with `env` added to the environment); on timeout kills that group. Never
    raises."""
    cmd = [str(c) for c in cmd]
    timeout = max(1.0, timeout)
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
                             start_new_session=True, env={**os.environ, **env} if env else None)
    except OSError as e:
        return {"rc": None, "stdout": "", "stderr": str(e), "seconds": 0.0, "error": f"could not start: {e}"}
    try:
        out, err = p.communicate(timeout=timeout)
        error = None if p.returncode == 0 else f"exit {p.returncode}: {last_lines(err)}"
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        error = f"timeout after {timeout:.0f} s"
    seconds = time.perf_counter() - t0
    if log_path is not None:
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(f"$ {' '.join(cmd)}\n# rc={p.returncode} {seconds:.2f} s{' ' + error if error else ''}\n")
            f.write((err or "")[-2_000_000:] + "\n")
    return {"rc": p.returncode, "stdout": out or "", "stderr": err or "", "seconds": seconds, "error": error}


def percentiles(values: list[float]) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"min": float(a.min()), "mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)), "p99": float(np.percentile(a, 99)), "max": float(a.max())}


def rel_l2(candidate: torch.Tensor, reference: torch.Tensor) -> float:
    c, r = candidate.detach().double().cpu(), reference.detach().double().cpu()
    if c.shape != r.shape:
        raise ValueError(f"shape {list(c.shape)} vs reference {list(r.shape)}")
    return float((c - r).norm() / r.norm())


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ---- timing PyTorch ----

def time_torch(fn, inputs: list[torch.Tensor], device: str, target_s: float, min_iters: int = 20,
               max_iters: int = 1000, grad_mode=torch.inference_mode) -> dict:
    """Per run: CUDA events around the call and host wall time of call + synchronize (as `tensoracle bench`).
    Warm-up, then as many runs as fit in about target_s (between min_iters and max_iters)."""
    cuda = device.startswith("cuda")
    with grad_mode():
        for i in range(3):
            fn(inputs[i % len(inputs)])
        sync(device)
        t0 = time.perf_counter()
        for i in range(3):
            fn(inputs[i % len(inputs)])
        sync(device)
        estimate = max((time.perf_counter() - t0) / 3, 1e-6)
        iters = int(min(max_iters, max(min_iters, target_s / estimate)))
        warmup = int(min(50, max(3, iters // 10)))
        for i in range(warmup):
            fn(inputs[i % len(inputs)])
        sync(device)
        device_ms, wall_ms = [], []
        for i in range(iters):
            x = inputs[i % len(inputs)]
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                start.record()
                fn(x)
                end.record()
                end.synchronize()
                wall_ms.append((time.perf_counter() - t0) * 1e3)
                device_ms.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn(x)
                wall_ms.append((time.perf_counter() - t0) * 1e3)
    return {"iterations": iters, "warmup": warmup, "device_ms": percentiles(device_ms or wall_ms),
            "wall_ms": percentiles(wall_ms), "device_ms_source": "cuda events" if cuda else "wall clock"}


def make_inputs(shape: list[int], dtype: torch.dtype, device: str, copies: int = 4, seed: int = 7) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(device=device, dtype=dtype) for _ in range(copies)]


def torch_peak_bytes(model, x: torch.Tensor, device: str) -> int | None:
    """torch.cuda.max_memory_allocated over one inference (weights + input + activations + output)."""
    if not device.startswith("cuda"):
        return None
    sync(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        y = model(x)
    sync(device)
    peak = torch.cuda.max_memory_allocated()
    del y
    return int(peak)


# ---- the GPU's limits ----

def measure_limits(device: str, tiny: bool) -> dict:
    """A large fp16 matmul (TFLOP/s) and a large device-to-device copy (GB/s), CUDA events around `reps` calls."""
    cuda = device.startswith("cuda")

    def timed(fn, reps: int) -> float:
        sync(device)
        if not cuda:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            return time.perf_counter() - t0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    out: dict = {"device": device}
    if cuda:
        props = torch.cuda.get_device_properties(torch.device(device))
        out.update(name=props.name, total_memory_bytes=props.total_memory, multiprocessors=props.multi_processor_count,
                   torch_cuda=torch.version.cuda)
    dtype = torch.float16 if cuda else torch.float32
    reps = 50 if cuda else 5

    def matmul() -> dict:
        n = 512 if tiny or not cuda else 8192
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        for _ in range(5):
            torch.matmul(a, b)
        seconds = timed(lambda: torch.matmul(a, b), reps)
        return {"n": n, "dtype": str(dtype).replace("torch.", ""), "tflops": 2 * n ** 3 * reps / seconds / 1e12}

    def copy() -> dict:
        nbytes = (1 << 30) if cuda and not tiny else (64 << 20)
        src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        seconds = timed(lambda: dst.copy_(src), reps)
        return {"bytes": nbytes, "gbps_read_plus_write": 2 * nbytes * reps / seconds / 1e9,
                "gbps_copied": nbytes * reps / seconds / 1e9}

    for key, fn in (("matmul", matmul), ("copy", copy)):
        try:
            out[key] = fn()
        except Exception as e:  # noqa: BLE001
            out[key] = {"error": short_error(e)}
    if cuda:
        torch.cuda.empty_cache()
    return out


# ---- results ----

def engine_flops(manifest: dict) -> tuple[float, dict[str, float], dict[str, str]]:
    """Multiply-add work of an engine at its opt shapes, from its manifest (tensoracle inspect): 2·M·N·K for linear
    and matmul, 2·output·(C/groups·KH·KW) for conv, 2·B·H·Sq·Skv·(D + Dv) for attention (half for causal masks: the
    keys a row does not see are skipped). Other steps count as 0. Returns the total, the work of each step's layer,
    and each step's op."""
    shapes = {w["tensor"]: w["shape"] for w in manifest.get("weights", [])}
    for t in manifest.get("inputs", []):
        shapes[t["name"]] = t["profile"]["opt"]
    attrs = {layer["name"]: layer.get("attrs", {}) for layer in manifest.get("network", {}).get("layers", [])}
    for c in manifest.get("network", {}).get("constants", []):
        if "shape" in c:
            shapes.setdefault(c["name"], c["shape"])
    total = 0.0
    by_layer, ops = {}, {}
    for step in manifest.get("steps", []):
        ops[step["layer"]] = step["op"]
        before = total
        outs = [o["opt_shape"] for o in step["outputs"]]
        for o in step["outputs"]:
            shapes[o["name"]] = o["opt_shape"]
        ins = [shapes.get(n) if n else None for n in step["inputs"]]
        op, out = step["op"], outs[0] if outs else None
        try:
            if op in ("linear", "matmul") and out and ins[0]:
                total += 2.0 * math.prod(out) * ins[0][-1]
            elif op == "conv" and out and ins[1]:
                total += 2.0 * math.prod(out) * math.prod(ins[1]) / ins[1][0]
            elif op == "attention" and out and ins[0]:
                a = attrs.get(step["layer"], {})
                layout = a.get("layout", "bhsd")
                q = ins[0]
                if layout == "packed":
                    heads, kv = a.get("heads"), a.get("kv_heads")
                    d = q[-1] // (heads + 2 * kv)
                    work = 2.0 * q[0] * heads * q[1] * q[1] * 2 * d
                elif layout == "bshd":
                    k = ins[1]
                    work = 2.0 * q[0] * q[2] * q[1] * k[1] * (q[3] + ins[2][3])
                else:
                    k = ins[1]
                    work = 2.0 * q[0] * q[1] * q[2] * k[2] * (q[3] + ins[2][3])
                total += work / 2 if a.get("causal") else work
        except (TypeError, IndexError, KeyError, ZeroDivisionError):
            pass
        if total > before:
            by_layer[step["layer"]] = total - before
    return total, by_layer, ops


def layer_groups(steps: list[dict], work: dict[str, float]) -> list[dict]:
    """Steps grouped by layer name with its first whole number (after a dot or an underscore) as N: a model's repeated
    blocks (encoder.layer.N.output.dense, encoder_layer_N.mlp.0, layer3.N.conv2), costliest first: steps, kernels
    (most steps first), summed medians and summed work (FLOPs, 0 where unknown)."""
    groups: dict[str, dict] = {}
    for st in steps:
        name = re.sub(r"(?<=[._])\d+(?=[./]|$)", "N", st["layer"], count=1)
        g = groups.setdefault(name, {"layer": name, "steps": 0, "ms": 0.0, "flops": 0.0, "by_kernel": {}})
        g["steps"] += 1
        g["ms"] += st["median_ms"]
        g["flops"] += work.get(st["layer"], 0.0)
        g["by_kernel"][st["kernel"]] = g["by_kernel"].get(st["kernel"], 0) + 1
    for g in groups.values():
        g["kernels"] = ", ".join(k if n == g["steps"] else f"{k} ({n})"
                                 for k, n in sorted(g.pop("by_kernel").items(), key=lambda kv: -kv[1]))
    return sorted(groups.values(), key=lambda g: -g["ms"])


def fmt_ms(v) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}" if v < 100 else f"{v:.1f}"


def fmt_x(v) -> str:
    # Three decimals below 10: the goals are ratios such as 1.25×, and 1.2486 must not read as 1.25.
    return "—" if v is None else f"{v:.3f}×" if v < 10 else f"{v:.2f}×"


def fmt_mib(v) -> str:
    return "—" if v is None else f"{v / 2 ** 20:.0f}" if v >= 100 * 2 ** 20 else f"{v / 2 ** 20:.1f}"


def get(d: dict | None, *keys):
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def cell(part: dict | None, value: str) -> str:
    """The value, or why there is none (skipped / timeout / error)."""
    if part is None:
        return "—"
    if part.get("skipped"):
        return "skipped"
    if part.get("error"):
        return "timeout" if "timeout" in part["error"] else "error"
    return value


class Results:
    def __init__(self, out: Path, meta: dict):
        self.out = out
        self.data = {"meta": meta, "limits": None, "models": []}

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        for name, text in (("results.json", json.dumps(self.data, indent=1)), ("results.md", self.markdown())):
            tmp = self.out / (name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.out / name)

    def markdown(self) -> str:
        m = self.data["meta"]
        lines = [f"# tensoracle vs PyTorch ({m.get('device_name', m['device'])})", ""]
        lines.append(f"{m['date']}; tensoracle target {m['target']}, precision {m['precision']}; torch {m['torch']} "
                     f"({m['torch_dtype']}); torch.compile mode {m['compile_mode']}; {'tiny models' if m['tiny'] else 'full-size models'}; "
                     f"budget {m['budget_s']:.0f} s" + (f", used {m['elapsed_s']:.0f} s" if m.get("elapsed_s") else "") + ".")
        lim = self.data.get("limits") or {}
        if lim:
            mm, cp = lim.get("matmul", {}), lim.get("copy", {})
            mtxt = f"{mm['tflops']:.3g} TFLOP/s ({mm['dtype']} matmul n={mm['n']})" if "tflops" in mm else f"matmul: {mm.get('error')}"
            ctxt = (f"{cp['gbps_read_plus_write']:.0f} GB/s read+write ({cp['gbps_copied']:.0f} GB/s copied, "
                    f"{cp['bytes'] / 2 ** 20:.0f} MiB device-to-device copy)") if "gbps_copied" in cp else f"copy: {cp.get('error')}"
            lines.append(f"Measured limits: {mtxt}; {ctxt}.")
        lines += ["", "| model | batch | ours p50 ms | ours graph mode p50 ms | eager p50 ms | compile p50 ms "
                      "| ours/eager speedup | ours/compile ratio | ours graph mode/compile ratio "
                      "| our peak MiB | torch peak MiB | engine/weights size ratio | rel-L2 vs PyTorch fp32 |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        detail = ["| model | batch | ours wall p50/p90/p99 | ours device p50 | ours CUDA graph p50/p90/p99 "
                  "| ours graph mode p50, plain launches "
                  "| eager device p50/p90/p99 | eager wall p50 "
                  "| compile device p50/p90/p99 | compile wall p50 | ours iters | compile s |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        problems, steps_sections = [], []
        for model in self.data["models"]:
            ratio = model.get("engine_weights_ratio")
            corr = model.get("correctness") or {}
            for row in model["rows"]:
                ours, eager, comp = row.get("ours"), row.get("eager"), row.get("compile")
                o50 = get(ours, "target_time_ms", "p50")
                g50 = get(ours, "graph_mode", "target_time_ms", "p50")
                e50 = get(eager, "device_ms", "p50")
                c50 = get(comp, "device_ms", "p50")
                rl2 = corr.get("rel_l2") if row["batch"] == corr.get("batch") else None
                rl2_txt = "—"
                if row["batch"] == corr.get("batch"):
                    rl2_txt = (f"{rl2:.2e}" + (" ⚠" if rl2 > 1e-2 else "")) if rl2 is not None else cell(corr, "—")
                lines.append(" | ".join([
                    f"| {model['title']}", str(row["batch"]), cell(ours, fmt_ms(o50)), fmt_ms(g50) if g50 else "—",
                    cell(eager, fmt_ms(e50)), cell(comp, fmt_ms(c50)), fmt_x(e50 / o50) if o50 and e50 else "—",
                    fmt_x(c50 / o50) if o50 and c50 else "—", fmt_x(c50 / g50) if g50 and c50 else "—",
                    cell(ours, fmt_mib(get(ours, "peak_bytes"))), cell(eager, fmt_mib(get(eager, "peak_bytes"))),
                    f"{ratio:.4f}" if ratio else "—", rl2_txt]) + " |")

                def three(part, key):
                    d = get(part, key)
                    return cell(part, "/".join(fmt_ms(d[p]) for p in ("p50", "p90", "p99")) if d else "—")
                detail.append(" | ".join([
                    f"| {model['title']}", str(row["batch"]), three(ours, "latency_ms"), cell(ours, fmt_ms(o50)),
                    three(ours, "graph_target_time_ms") if get(ours, "graph_target_time_ms", "p50") else "—",
                    fmt_ms(get(ours, "graph_mode_plain_launches", "target_time_ms", "p50"))
                    if get(ours, "graph_mode_plain_launches", "target_time_ms", "p50") else "—",
                    three(eager, "device_ms"), cell(eager, fmt_ms(get(eager, "wall_ms", "p50"))),
                    three(comp, "device_ms"), cell(comp, fmt_ms(get(comp, "wall_ms", "p50"))),
                    str(get(ours, "iterations") or "—"),
                    f"{comp['compile_s']:.1f}" if get(comp, "compile_s") else "—"]) + " |")
                for what, part in (("ours", ours), ("eager", eager), ("compile", comp)):
                    if part and (part.get("error") or part.get("skipped")):
                        problems.append(f"- {model['title']} batch {row['batch']}, {what}: "
                                        f"{part.get('error') or 'skipped: ' + part['skipped']}")
            for what in ("build", "correctness"):
                part = model.get(what) or {}
                if part.get("error") or part.get("skipped"):
                    problems.append(f"- {model['title']}, {what}: {part.get('error') or 'skipped: ' + part['skipped']}")
            rows_with_steps = [r for r in model["rows"] if get(r, "ours", "steps")]
            if rows_with_steps:
                row = rows_with_steps[-1]
                steps = sorted(row["ours"]["steps"], key=lambda s: -s["median_ms"])
                total = row["ours"].get("steps_total_ms") or sum(s["median_ms"] for s in steps) or 1.0
                fb = model.get("flops_at_batch") or {}
                work = fb.get("by_layer", {}) if fb.get("batch") == row["batch"] else {}
                ops = fb.get("step_ops", {}) if fb.get("batch") == row["batch"] else {}
                mm_limit = get(self.data.get("limits"), "matmul", "tflops")
                # Time per op kind (sums of step medians), then the costliest layers, a model's repeated blocks grouped
                # (each class of product with its rate: what it reaches of the measured matmul limit).
                kinds = {}
                for st in steps:
                    kind = ops.get(st["layer"], st["kernel"].split("_")[0])
                    n, t = kinds.get(kind, (0, 0.0))
                    kinds[kind] = (n + 1, t + st["median_ms"])
                sec = [f"### {model['title']}, batch {row['batch']}: {len(steps)} steps "
                       f"(sum of step medians {fmt_ms(total)} ms)", "",
                       "By op: " + ", ".join(f"{k} {fmt_ms(t)} ms ({n})" for k, (n, t) in
                                             sorted(kinds.items(), key=lambda kv: -kv[1][1])), "",
                       "| # | layer (N: the block's number) | steps | kernel | median ms a step | all steps ms | share "
                       "| TFLOP/s (of matmul limit) |",
                       "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
                for i, g in enumerate(layer_groups(steps, work)[:10]):
                    rate = "—"
                    if g["flops"] and g["ms"] > 0:
                        tf = g["flops"] / (g["ms"] * 1e-3) / 1e12
                        rate = f"{tf:.3g}" + (f" ({100 * tf / mm_limit:.0f} %)" if mm_limit else "")
                    sec.append(f"| {i + 1} | {g['layer']} | {g['steps']} | {g['kernels']} | "
                               f"{fmt_ms(g['ms'] / g['steps'])} | {fmt_ms(g['ms'])} | "
                               f"{100 * g['ms'] / total:.1f} % | {rate} |")
                steps_sections += sec + [""]
        lines += ["", "Latencies are per inference at these shapes, one synchronize per run: ours = `tensoracle bench` "
                  "target_time_ms (CUDA events around the enqueue), PyTorch = CUDA events around the call (wall clock on "
                  "the CPU). ours/eager speedup = eager p50 / ours p50 and ours/compile ratio = compile p50 / ours p50 "
                  "(both > 1: ours faster). Peak: ours = engine weights + context memory + f32 input + f32 output; torch "
                  "= torch.cuda.max_memory_allocated over one eager inference (weights, input, activations, output). "
                  "engine/weights = engine file bytes / packed weight bytes. rel-L2 = ‖ours − torch f32‖ / ‖torch f32‖ "
                  "at the small batch (torch f32 with TF32 off); ⚠ marks one above 1e-2.", ""]
        lines += ["## Latency detail (ms)", ""] + detail + [""]
        builds = ["## Builds and accuracy", "",
                  f"| model | build s | rebuild with timing cache s (same kernels) | engine MiB | packed weights MiB "
                  f"| f32 safetensors MiB | ours rel-L2 | torch {m['torch_dtype']} rel-L2 |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        startup = ["## Time to first inference (`tensoracle run` in a fresh process, small batch)", "",
                   "| model | process s | breakdown |", "| --- | ---: | --- |"]
        for model in self.data["models"]:
            b, c = model.get("build") or {}, model.get("correctness") or {}
            rb = model.get("rebuild_with_timing_cache") or {}
            fi = model.get("first_inference") or {}
            if fi:
                startup.append(f"| {model['title']} | {fi['process_s']:.3f} | {fi.get('breakdown', '—')} |")
            builds.append(" | ".join([
                f"| {model['title']}", cell(b, f"{b['seconds']:.1f}" if b.get("seconds") else "—"),
                (f"{rb['seconds']:.1f} ({'yes' if rb.get('same_kernels') else 'NO'})" if rb.get("seconds") and
                 not rb.get("error") else cell(rb, "—")),
                fmt_mib(b.get("engine_bytes")), fmt_mib(model.get("packed_weights_bytes")),
                fmt_mib(model.get("weights_f32_bytes")),
                cell(c, f"{c['rel_l2']:.2e}" if c.get("rel_l2") is not None else "—"),
                f"{c['torch_lowp_rel_l2']:.2e}" if c.get("torch_lowp_rel_l2") is not None else "—"]) + " |")
        lines += builds + [""] + startup + [""]
        # What each row reaches of the GPU's measured limits: the engine's multiply-add work (linear, matmul, conv,
        # attention) over our time, and the weights read once over our time.
        mm_tflops = get(lim, "matmul", "tflops")
        copy_gbps = get(lim, "copy", "gbps_read_plus_write")
        limits = ["## Fraction of the GPU's measured limits", "",
                  f"Work = 2·M·N·K of every product and convolution plus attention's two products (half when causal) "
                  f"at the row's shape; limits measured in the same run: {mm_tflops:.0f} TFLOP/s matmul, "
                  f"{copy_gbps:.0f} GB/s copy." if mm_tflops and copy_gbps else "Limits not measured.", "",
                  "| model | batch | GFLOP | ours TFLOP/s (graph mode) | of matmul limit | weights GB/s (graph mode) "
                  "| of copy limit |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for model in self.data["models"]:
            fb = model.get("flops_at_batch") or {}
            for row in model["rows"]:
                ours = row.get("ours")
                t = get(ours, "graph_mode", "target_time_ms", "p50") or get(ours, "target_time_ms", "p50")
                wb = get(ours, "weights_bytes")
                if not t or not fb.get("flops"):
                    continue
                flops = fb["flops"] * row["batch"] / fb["batch"]
                tflops = flops / (t * 1e-3) / 1e12
                gbps = wb / (t * 1e-3) / 1e9 if wb else None
                limits.append(" | ".join([
                    f"| {model['title']}", str(row["batch"]), f"{flops / 1e9:.1f}", f"{tflops:.0f}",
                    f"{100 * tflops / mm_tflops:.0f} %" if mm_tflops else "—",
                    f"{gbps:.0f}" if gbps else "—",
                    f"{100 * gbps / copy_gbps:.0f} %" if gbps and copy_gbps else "—"]) + " |")
        lines += limits + [""]
        if steps_sections:
            lines += ["## Where the time goes (`tensoracle bench --per-step`, largest batch measured)", ""] + steps_sections
        if problems:
            lines += ["## Failures and skipped work", ""] + problems + [""]
        return "\n".join(lines) + "\n"


# ---- the torch.compile worker (a subprocess, so that a hung or slow compile can be killed) ----

def compile_worker(args) -> int:
    spec = next(s for s in pytorch_models.model_specs(args.tiny) if s.key == args.model)
    result_file = Path(args.result_file)

    def emit(rec: dict) -> None:
        with open(result_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    class RowTimeout(Exception):
        pass

    def on_alarm(signum, frame):
        raise RowTimeout(f"timeout after {args.row_cap_s:.0f} s (per-row cap)")

    batches = [int(b) for b in args.batches.split(",")]
    if not hasattr(torch, "compile"):
        for b in batches:
            emit({"batch": b, "error": f"torch.compile is not available in torch {torch.__version__}"})
        return 0
    dtype = torch.float16 if args.torch_dtype == "fp16" else torch.float32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(args.seed)
    model = spec.create().to(device=args.device, dtype=dtype)
    mode = None if args.compile_mode == "default" else args.compile_mode
    compiled = torch.compile(model, mode=mode, dynamic=False)
    grad_mode = torch.inference_mode
    signal.signal(signal.SIGALRM, on_alarm)
    for b in batches:
        signal.alarm(max(1, int(args.row_cap_s)))
        try:
            inputs = make_inputs(spec.input_shape(b), dtype, args.device)
            t0 = time.perf_counter()
            note = None
            try:
                with grad_mode():
                    compiled(inputs[0])
            except RowTimeout:
                raise
            except Exception as e:  # noqa: BLE001 (some torch versions can't compile under inference_mode)
                if grad_mode is torch.no_grad:
                    raise
                note = f"inference_mode failed ({short_error(e)[:150]}); timed under no_grad"
                traceback.print_exc()
                grad_mode = torch.no_grad
                torch._dynamo.reset()
                compiled = torch.compile(model, mode=mode, dynamic=False)
                with grad_mode():
                    compiled(inputs[0])
            sync(args.device)
            compile_s = time.perf_counter() - t0
            timing = time_torch(compiled, inputs, args.device, args.bench_target_s, grad_mode=grad_mode)
            signal.alarm(0)
            del inputs
            rec = {"batch": b, "compile_s": compile_s, "mode": args.compile_mode, **timing}
            if note:
                rec["note"] = note
        except BaseException as e:  # noqa: BLE001 (RowTimeout, compile errors, OOM)
            signal.alarm(0)
            rec = {"batch": b, "error": short_error(e)}
            traceback.print_exc()
        emit(rec)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return 0


# ---- one model ----

def run_model(spec, args, budget: Budget, results: Results, models_after: int) -> None:
    cli = str(Path(args.cli).resolve())
    out_dir = Path(args.out) / spec.key
    work = Path(args.work) / spec.key
    out_dir.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "commands.log"
    rec = {"key": spec.key, "title": spec.title, "batches": list(spec.batches),
           "rows": [{"batch": b, "input_shape": spec.input_shape(b), "output_shape": spec.output_shape(b),
                     "ours": None, "eager": None, "compile": None} for b in spec.batches]}
    results.data["models"].append(rec)
    rows = rec["rows"]

    def skip_all(reason: str, parts=("ours", "eager", "compile")) -> None:
        for r in rows:
            for p in parts:
                if r[p] is None:
                    r[p] = {"skipped": reason}
        results.save()

    if budget.left() < NEED_MODEL_S:
        rec["build"] = {"skipped": "time budget"}
        skip_all("time budget")
        return
    device, cuda = args.device, args.device.startswith("cuda")
    torch_dtype = torch.float16 if args.torch_dtype == "fp16" else torch.float32
    small, large = spec.batches[0], spec.batches[-1]

    # 1. the PyTorch model, its weights and the network JSON
    log(f"{spec.key}: creating the model and writing weights + network JSON")
    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    model = spec.create()
    state = {k: v.detach().float().contiguous() for k, v in model.state_dict().items() if v.is_floating_point()}
    from safetensors.torch import load_file, save_file
    save_file(state, str(work / "weights.safetensors"))
    rec["weights_f32_bytes"] = sum(v.numel() * 4 for v in state.values())
    rec["parameters"] = sum(v.numel() for v in state.values())
    del state
    net = spec.network()  # refers to "weights.safetensors" next to the JSON
    net.write(work / "net.json")
    shutil.copyfile(work / "net.json", out_dir / "net.json")
    x_small = torch.randn(*spec.input_shape(small), generator=torch.Generator().manual_seed(args.seed + 1))
    save_file({"x": x_small.contiguous()}, str(work / "in.safetensors"))
    rec["prepare_s"] = time.perf_counter() - t0

    # 2. the PyTorch f32 reference (TF32 off) and the low-precision model for eager timing
    corr = rec["correctness"] = {"batch": small}
    try:
        torch.backends.cuda.matmul.allow_tf32 = False  # the f32 reference: no TF32
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True  # eager convolutions get cuDNN's fastest algorithms
        model = model.to(device)
        with torch.inference_mode():
            reference = model(x_small.to(device)).float().cpu()
        model = model.to(torch_dtype)
        with torch.inference_mode():
            lowp = model(x_small.to(device, torch_dtype)).float().cpu()
        corr["torch_lowp_rel_l2"] = rel_l2(lowp, reference)
        corr["torch_dtype"] = args.torch_dtype
    except Exception as e:  # noqa: BLE001
        reference = None
        corr["error"] = f"PyTorch reference: {short_error(e)}"
    if cuda:
        torch.cuda.empty_cache()
    results.save()

    # 3. tensoracle build, one engine per row (fixed shapes: its activation memory is planned for that row only),
    # and inspect
    shp = lambda b: "x".join(map(str, spec.input_shape(b)))  # noqa: E731
    engines = {b: work / f"model_b{b}.engine" for b in spec.batches}
    rec["builds"] = {}
    timing_cache = work / "timing_cache.json"  # made by the largest row's build (cold), reused by the rebuild below
    for b in reversed(spec.batches):  # the largest first: it is the one the table reports
        profile = f"x={shp(b)}:{shp(b)}:{shp(b)}"
        build = rec["builds"][str(b)] = {"profile": profile}
        timeout = min(args.build_timeout_s, budget.left() - 5)
        log(f"{spec.key}: tensoracle build --target {args.target} --precision {args.precision} --profile {profile} "
            f"(timeout {timeout:.0f} s)")
        cache_arg = ["--timing-cache", timing_cache] if b == large else []
        r = run_cmd([cli, "build", work / "net.json", "-o", engines[b], "--target", args.target, "--precision",
                     args.precision, "--profile", profile] + cache_arg + shlex.split(args.build_extra), timeout,
                    log_path)
        build["seconds"] = r["seconds"]
        if r["error"]:
            build["error"] = r["error"]
        else:
            try:
                info = json.loads(r["stdout"].strip().splitlines()[-1])
                build["build_seconds"] = info.get("build_seconds")
                build["engine_bytes"] = engines[b].stat().st_size
            except Exception as e:  # noqa: BLE001
                build["error"] = f"unreadable build output: {short_error(e)}"
        results.save()
    build = rec["build"] = rec["builds"][str(large)]
    engine = engines[large]
    if any(v.get("error") for v in rec["builds"].values()):
        failed = {b: v["error"] for b, v in rec["builds"].items() if v.get("error")}
        build.setdefault("error", f"build failed for batches {sorted(failed)}: {next(iter(failed.values()))}")
    if build.get("error"):
        log(f"{spec.key}: build failed: {build['error']}")
        corr.setdefault("error", "no engine (build failed)")
        for row in rows:
            row["ours"] = {"error": "no engine (build failed)"}
    else:
        r = run_cmd([cli, "inspect", engine], 60, log_path)
        if r["error"]:
            rec["inspect_error"] = r["error"]
        else:
            try:
                manifest = json.loads(r["stdout"])
                rec["packed_weights_bytes"] = manifest["memory"]["weights_bytes"]
                rec["arena_bytes"] = manifest["memory"].get("arena_bytes")
                rec["scratch_bytes"] = manifest["memory"].get("scratch_bytes")
                rec["engine_steps"] = len(manifest.get("steps", []))
                flops, by_layer, ops = engine_flops(manifest)
                rec["flops_at_batch"] = {"batch": large, "flops": flops, "by_layer": by_layer, "step_ops": ops}
                rec["engine_weights_ratio"] = build["engine_bytes"] / rec["packed_weights_bytes"]
            except Exception as e:  # noqa: BLE001
                rec["inspect_error"] = f"unreadable manifest: {short_error(e)}"
        log(f"{spec.key}: built in {build['seconds']:.1f} s, engine {build['engine_bytes'] / 2 ** 20:.1f} MiB")

        # 3b. the same build again with the timing cache the first one wrote: its time and whether the kernels match
        if timing_cache.exists() and budget.left() > NEED_BENCH_S:
            again = work / "rebuild.engine"
            profile = f"x={shp(large)}:{shp(large)}:{shp(large)}"
            r = run_cmd([cli, "build", work / "net.json", "-o", again, "--target", args.target, "--precision",
                         args.precision, "--profile", profile, "--timing-cache", timing_cache] +
                        shlex.split(args.build_extra), min(args.build_timeout_s, budget.left() - 5), log_path)
            rebuild = rec["rebuild_with_timing_cache"] = {"seconds": r["seconds"], "error": r["error"]}
            if not r["error"]:
                kernels = []
                for path in (engine, again):
                    q = run_cmd([cli, "inspect", path], 60, log_path)
                    kernels.append([st["kernel"] for st in json.loads(q["stdout"])["steps"]] if not q["error"] else None)
                rebuild["same_kernels"] = kernels[0] is not None and kernels[0] == kernels[1]
                log(f"{spec.key}: rebuilt with the timing cache in {r['seconds']:.1f} s (cold {build['seconds']:.1f} s), "
                    f"same kernels: {rebuild['same_kernels']}")
                again.unlink(missing_ok=True)

        # 4. correctness at the small batch
        if budget.left() < NEED_BENCH_S:
            corr.setdefault("skipped", "time budget")
        else:
            r = run_cmd([cli, "run", engines[small], "--inputs", work / "in.safetensors", "-o", work / "out.safetensors"],
                        min(args.run_timeout_s, budget.left() - 2), log_path)
            # Time to the first inference of a fresh process (`tensoracle run`: start, load, context, first run, write).
            rec["first_inference"] = {"process_s": r["seconds"]}
            for line in r["stderr"].splitlines():
                if "first inference" in line:
                    rec["first_inference"]["breakdown"] = line.split("tensoracle run: ", 1)[-1]
            if r["error"]:
                corr["error"] = f"tensoracle run: {r['error']}"
            elif reference is not None:
                try:
                    ours = load_file(str(work / "out.safetensors"))["output"]
                    corr["rel_l2"] = rel_l2(ours, reference)
                    corr["max_abs_error"] = float((ours.double() - reference.double()).abs().max())
                    corr["reference_rms"] = float(reference.double().pow(2).mean().sqrt())
                    log(f"{spec.key}: rel-L2 vs PyTorch f32 at batch {small}: {corr['rel_l2']:.3e} "
                        f"(torch {args.torch_dtype}: {corr.get('torch_lowp_rel_l2', float('nan')):.3e})")
                except Exception as e:  # noqa: BLE001
                    corr["error"] = f"comparing outputs: {short_error(e)}"
        results.save()

        # 5. tensoracle bench per row
        for row in rows:
            if budget.left() < NEED_BENCH_S:
                row["ours"] = {"skipped": "time budget"}
                continue
            shape = f"x={shp(row['batch'])}"
            probe = run_cmd([cli, "bench", engines[row["batch"]], "--shape", shape, "--warmup", 1, "--iterations", 2,
                             "--input-sets", 1], min(args.bench_timeout_s, budget.left() - 2), log_path)
            if probe["error"]:
                row["ours"] = {"error": f"bench: {probe['error']}"}
                results.save()
                continue
            try:
                est = json.loads(probe["stdout"])["latency_ms"]["mean"]
            except Exception as e:  # noqa: BLE001
                row["ours"] = {"error": f"bench output: {short_error(e)}"}
                continue
            iters = int(min(1000, max(10, args.bench_target_s * 1e3 / max(est, 1e-3))))
            warmup = int(min(50, max(3, iters // 10)))
            r = run_cmd([cli, "bench", engines[row["batch"]], "--shape", shape, "--warmup", warmup, "--iterations", iters,
                         "--per-step"], min(args.bench_timeout_s, budget.left() - 2), log_path)
            if r["error"]:
                row["ours"] = {"error": f"bench: {r['error']}"}
            else:
                try:
                    rep = json.loads(r["stdout"])
                    io_bytes = 4 * (math.prod(row["input_shape"]) + math.prod(row["output_shape"]))
                    row["ours"] = {k: rep.get(k) for k in (
                        "latency_ms", "target_time_ms", "throughput_per_s", "weights_bytes", "context_memory_bytes",
                        "iterations", "warmup", "input_sets", "steps", "steps_total_ms", "device", "target")}
                    row["ours"]["io_bytes"] = io_bytes
                    row["ours"]["peak_bytes"] = rep["weights_bytes"] + rep["context_memory_bytes"] + io_bytes
                    log(f"{spec.key} batch {row['batch']}: ours p50 {rep['target_time_ms']['p50']:.3f} ms "
                        f"(wall {rep['latency_ms']['p50']:.3f} ms, {iters} runs)")
                except Exception as e:  # noqa: BLE001
                    row["ours"] = {"error": f"bench output: {short_error(e)}"}
            # The same engine replayed as a CUDA graph (trtexec --useCudaGraph): what is left without host launch cost.
            if cuda and isinstance(row.get("ours"), dict) and "target_time_ms" in row["ours"] and \
                    budget.left() >= NEED_BENCH_S:
                r = run_cmd([cli, "bench", engines[row["batch"]], "--shape", shape, "--warmup", warmup, "--iterations",
                             iters, "--cuda-graph"], min(args.bench_timeout_s, budget.left() - 2), log_path)
                try:
                    row["ours"]["graph_target_time_ms"] = json.loads(r["stdout"])["target_time_ms"] \
                        if not r["error"] else {"error": r["error"]}
                except Exception as e:  # noqa: BLE001
                    row["ours"]["graph_target_time_ms"] = {"error": f"bench --cuda-graph output: {short_error(e)}"}
            # The execution context's graph mode (one switch for an application): enqueue launches its own graph.
            # Then again with every kernel launched plainly (TENSORACLE_PROGRAMMATIC_LAUNCH=0): what programmatic
            # dependent launch gains.
            for key, what, env, keys in (
                    ("graph_mode", "graph mode", None, ("latency_ms", "target_time_ms", "enqueue_ms", "graph_captures")),
                    ("graph_mode_plain_launches", "graph mode, plain launches", {"TENSORACLE_PROGRAMMATIC_LAUNCH": "0"},
                     ("latency_ms", "target_time_ms"))):
                if not (cuda and get(row, "ours", "target_time_ms") and budget.left() >= NEED_BENCH_S):
                    break
                r = run_cmd([cli, "bench", engines[row["batch"]], "--shape", shape, "--warmup", warmup, "--iterations",
                             iters, "--graph-mode"], min(args.bench_timeout_s, budget.left() - 2), log_path, env=env)
                try:
                    if r["error"]:
                        row["ours"][key] = {"error": r["error"]}
                        break
                    rep = json.loads(r["stdout"])
                    row["ours"][key] = {k: rep.get(k) for k in keys}
                    log(f"{spec.key} batch {row['batch']}: ours {what} p50 {rep['target_time_ms']['p50']:.3f} ms "
                        f"(wall {rep['latency_ms']['p50']:.3f} ms)")
                except Exception as e:  # noqa: BLE001
                    row["ours"][key] = {"error": f"bench --graph-mode output: {short_error(e)}"}
                    break
            results.save()

    # 6. PyTorch eager per row
    for row in rows:
        if reference is None:
            row["eager"] = {"error": corr.get("error", "no PyTorch model")}
            continue
        if budget.left() < NEED_EAGER_S:
            row["eager"] = {"skipped": "time budget"}
            continue
        try:
            inputs = make_inputs(row["input_shape"], torch_dtype, device)
            timing = time_torch(model, inputs, device, args.bench_target_s)
            del inputs[1:]  # peak after the warm-up (cuDNN autotuning done), with one input alive
            peak = torch_peak_bytes(model, inputs[0], device)
            del inputs
            row["eager"] = {**timing, "peak_bytes": peak, "dtype": args.torch_dtype}
            log(f"{spec.key} batch {row['batch']}: eager p50 {timing['device_ms']['p50']:.3f} ms "
                f"({timing['iterations']} runs), peak {fmt_mib(peak)} MiB")
        except Exception as e:  # noqa: BLE001
            row["eager"] = {"error": short_error(e)}
        if cuda:
            torch.cuda.empty_cache()
        results.save()
    del model
    if cuda:
        torch.cuda.empty_cache()

    # 7. torch.compile per row, in a subprocess with a per-row cap (leaving time for the models after this one)
    if args.compile_mode == "none":
        skip_all("--compile-mode none", ("compile",))
        return
    timeout = min(args.compile_cap_s * len(rows) + 15, budget.left() - 3 - args.reserve_per_model_s * models_after)
    if timeout < NEED_COMPILE_S:
        skip_all("time budget", ("compile",))
        return
    result_file = work / "compile.jsonl"
    result_file.unlink(missing_ok=True)
    log(f"{spec.key}: torch.compile (mode {args.compile_mode}) in a subprocess, timeout {timeout:.0f} s")
    r = run_cmd([sys.executable, Path(__file__).resolve(), "--worker", "compile", "--model", spec.key,
                 "--batches", ",".join(map(str, spec.batches)), "--device", device, "--torch-dtype", args.torch_dtype,
                 "--compile-mode", args.compile_mode, "--row-cap-s", args.compile_cap_s,
                 "--bench-target-s", args.bench_target_s, "--seed", args.seed, "--result-file", result_file,
                 "--cli", args.cli, "--out", args.out] + (["--tiny"] if args.tiny else []),
                timeout, out_dir / "compile.log")
    got = {}
    if result_file.exists():
        for line in result_file.read_text().splitlines():
            try:
                d = json.loads(line)
                got[d["batch"]] = d
            except (ValueError, KeyError):
                pass
    for row in rows:
        d = got.get(row["batch"])
        if d is None:
            row["compile"] = {"error": r["error"] or "the worker wrote no result"}
        else:
            row["compile"] = {k: v for k, v in d.items() if k != "batch"}
            if "device_ms" in d:
                log(f"{spec.key} batch {row['batch']}: compile p50 {d['device_ms']['p50']:.3f} ms "
                    f"(first call {d['compile_s']:.1f} s)")
            else:
                log(f"{spec.key} batch {row['batch']}: compile failed: {d.get('error')}")
    results.save()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True, help="the tensoracle binary")
    ap.add_argument("--out", required=True, help="folder for results.json, results.md and small logs")
    ap.add_argument("--device", default="cuda", help="torch device: cuda (default), cuda:N or cpu")
    ap.add_argument("--target", default=None, help="tensoracle build --target (default: cuda for a cuda device, else cpu)")
    ap.add_argument("--precision", default="fp16", help="tensoracle build --precision (default fp16)")
    ap.add_argument("--torch-dtype", choices=["fp16", "fp32"], default=None,
                    help="PyTorch eager/compile dtype (default fp16 on CUDA, fp32 on the CPU)")
    ap.add_argument("--budget-s", type=float, default=240, help="total time budget in seconds (default 240)")
    ap.add_argument("--tiny", action="store_true", help="tiny models for a quick test (2 layers, small sizes)")
    ap.add_argument("--models", default="bert,resnet50,gpt2,bert_large,vit_b16",
                    help="comma-separated subset of bert,resnet50,gpt2,bert_large,vit_b16")
    ap.add_argument("--compile-mode", default="reduce-overhead",
                    help="torch.compile mode: reduce-overhead (the default: CUDA graphs, what a latency-minded PyTorch "
                         "user runs), default, max-autotune-no-cudagraphs, ... or none to skip")
    ap.add_argument("--compile-cap-s", type=float, default=120, help="torch.compile time cap per row (default 120)")
    ap.add_argument("--reserve-per-model-s", type=float, default=None,
                    help="time kept for each later model when capping torch.compile (default 45, tiny 5)")
    ap.add_argument("--bench-target-s", type=float, default=2.0, help="timed seconds per latency measurement")
    ap.add_argument("--build-extra", default="", help="more `tensoracle build` options, e.g. '--no-timing'")
    ap.add_argument("--build-timeout-s", type=float, default=300)
    ap.add_argument("--bench-timeout-s", type=float, default=120)
    ap.add_argument("--run-timeout-s", type=float, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None, help="scratch folder for weights and engines (default: a temporary folder)")
    ap.add_argument("--keep-work", action="store_true", help="keep the scratch folder")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--batches", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--row-cap-s", type=float, default=120, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    args.torch_dtype = args.torch_dtype or ("fp16" if cuda else "fp32")
    if args.worker == "compile":
        return compile_worker(args)
    args.target = args.target or (args.device if cuda else "cpu")
    if args.reserve_per_model_s is None:
        args.reserve_per_model_s = 5.0 if args.tiny else 45.0
    budget = Budget(args.budget_s)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.out = str(out)
    temp_work = args.work is None
    args.work = str(Path(args.work or tempfile.mkdtemp(prefix="tensoracle-bench-")).resolve())
    Path(args.work).mkdir(parents=True, exist_ok=True)

    wanted = [m.strip() for m in args.models.split(",") if m.strip()]
    specs = [s for s in pytorch_models.model_specs(args.tiny) if s.key in wanted]
    unknown = set(wanted) - {s.key for s in specs}
    if unknown:
        ap.error(f"unknown models: {', '.join(sorted(unknown))}")
    if cuda and not torch.cuda.is_available():
        print("pytorch_comparison: --device cuda but torch sees no GPU (use --device cpu --target cpu)", file=sys.stderr)
        return 2
    version = run_cmd([args.cli, "--version"], 30)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "device": args.device,
            "device_name": torch.cuda.get_device_name(torch.device(args.device)) if cuda else "CPU",
            "target": args.target, "precision": args.precision, "torch": torch.__version__,
            "torch_dtype": args.torch_dtype, "compile_mode": args.compile_mode, "tiny": args.tiny,
            "budget_s": args.budget_s, "cli": args.cli,
            "tensoracle_version": (version["stdout"] or version["stderr"]).strip()[:2000],
            "command": " ".join(sys.argv), "python": sys.version.split()[0], "numpy": np.__version__}
    results = Results(out, meta)
    results.save()
    log(f"tensoracle vs PyTorch on {meta['device_name']}; budget {args.budget_s:.0f} s; scratch {args.work}")
    try:
        log("measuring the device's limits (fp16 matmul, device-to-device copy)")
        results.data["limits"] = measure_limits(args.device, args.tiny)
        lim = results.data["limits"]
        log(f"limits: matmul {get(lim, 'matmul', 'tflops') or float('nan'):.3g} TFLOP/s, copy "
            f"{get(lim, 'copy', 'gbps_read_plus_write') or float('nan'):.0f} GB/s read+write")
        results.save()
        for i, spec in enumerate(specs):
            try:
                run_model(spec, args, budget, results, len(specs) - i - 1)
            except Exception as e:  # noqa: BLE001 (a failure of one model never ends the run)
                traceback.print_exc()
                if results.data["models"] and results.data["models"][-1]["key"] == spec.key:
                    m = results.data["models"][-1]
                    m["error"] = short_error(e)
                    for row in m["rows"]:
                        for p in ("ours", "eager", "compile"):
                            if row[p] is None:
                                row[p] = {"error": short_error(e)}
                results.save()
            finally:
                if not args.keep_work:
                    shutil.rmtree(Path(args.work) / spec.key, ignore_errors=True)
                if cuda:
                    torch.cuda.empty_cache()
    finally:
        results.data["meta"]["elapsed_s"] = budget.elapsed()
        results.save()
        if temp_work and not args.keep_work:
            shutil.rmtree(args.work, ignore_errors=True)
    print()
    print(results.markdown(), flush=True)
    log(f"done in {budget.elapsed():.0f} s; results in {out / 'results.json'} and {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
