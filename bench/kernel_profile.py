#!/usr/bin/env python3
"""Kernel micro-benchmarks on the GPU: one-layer fp16 engines at the shapes of BERT-large (batch 32, seq 384) and of
ResNet-50's stem (batch 256), timed with `tensoracle bench --per-step` and set against the device-to-device copy limit,
optionally profiled with ncu.

    python3 bench/kernel_profile.py --cli .device/build/tools/cli/tensoracle --out $OUT/kernels [--ncu]

Each case is a network JSON with f16 inputs and weights (no casts at the engine's edge), built for cuda fp16; the
quantized_linear_* cases quantize the linear case explicitly (i8 or f8e4m3, per-feature weight scales), the
weight_only_* and decode_* cases quantize its weight alone (and a decoding step's 4096 -> 11008 product). For the
memory-bound cases it prints the bytes moved (read + written), the step's median time and the fraction of the copy
limit measured in the same run with torch (cudaMemcpy device to device, read + write); for attention the TFLOP/s.
"""
import argparse
import itertools
import json
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


SAFETENSORS_DTYPES = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.int8): "I8"}


def write_safetensors(path, tensors):
    """tensors: name -> float16, float32 or int8 array; the layout of the safetensors format (8-byte header size,
    JSON, data)."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)


def sw_i8(w):
    """Per-output-feature i8 scales of a weight [out, in]: its largest |value| per row over 127."""
    return (np.abs(w.astype(np.float32)).max(axis=1) / 127.0).astype(np.float32)


def ncu_metrics(patterns):
    """The metrics of `ncu --query-metrics` (this machine's GPU) whose names match one of the comma-separated regular
    expressions: counters as a percentage of their sustained peak over the active cycles, ratios as they are."""
    if not patterns:
        return []
    listing = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True).stdout.splitlines()
    found = []
    for ln in listing:
        words = ln.split()
        if len(words) < 2 or not any(re.search(x, words[0]) for x in patterns.split(",")):
            continue
        if words[1] == "Counter":
            found.append(words[0] + ".avg.pct_of_peak_sustained_active")
        elif words[1] == "Ratio":
            found.append(words[0] + ".ratio")
    return found


def cases(rows, hidden, ffn, batch, seq, heads, image_batch):
    rng = np.random.default_rng(0)
    h16 = lambda *s: (rng.standard_normal(s) * 0.1).astype(np.float16)  # noqa: E731
    d = hidden // heads
    yield {
        "name": "layer_norm", "bytes": 2 * rows * hidden * 2,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]}],
        "weights": {"g": h16(hidden) + 1, "b": h16(hidden)},
        "layers": [{"name": "ln", "op": "layer_norm", "inputs": ["x", "g", "b"], "outputs": ["y"],
                    "attrs": {"epsilon": 1e-12}}],
    }
    # The layer norm at a quantized block boundary: its result read in f16 (the residual) and quantized to i8 for the
    # next product (written by the layer norm itself on CUDA).
    yield {
        "name": "layer_norm_i8_out", "bytes": rows * hidden * (2 + 2 + 1),
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]}],
        "weights": {"g": h16(hidden) + 1, "b": h16(hidden)},
        "inline": [{"name": "s", "dtype": "f32", "shape": [], "values": [4.0 / 127]}],
        "layers": [{"name": "ln", "op": "layer_norm", "inputs": ["x", "g", "b"], "outputs": ["y"],
                    "attrs": {"epsilon": 1e-12}},
                   {"name": "q", "op": "quantize", "inputs": ["y", "s"], "outputs": ["yq"], "attrs": {"to": "i8"}}],
        "outputs": ["y", "yq"],
    }
    # The quantize step left before a product whose input no producer quantizes (attention's output before the output
    # projection): f16 read, i8 written, one scale.
    yield {
        "name": "quantize_i8", "bytes": rows * hidden * (2 + 1),
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]}], "weights": {},
        "inline": [{"name": "s", "dtype": "f32", "shape": [], "values": [0.3 / 127]}],
        "layers": [{"name": "q", "op": "quantize", "inputs": ["x", "s"], "outputs": ["y"], "attrs": {"to": "i8"}}],
    }
    yield {
        "name": "gelu_erf", "bytes": 2 * rows * ffn * 2,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, ffn]}], "weights": {},
        "layers": [{"name": "act", "op": "gelu", "inputs": ["x"], "outputs": ["y"]}],
    }
    yield {
        "name": "add", "bytes": 3 * rows * hidden * 2,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]},
                   {"name": "r", "dtype": "f16", "shape": [rows, hidden]}], "weights": {},
        "layers": [{"name": "sum", "op": "add", "inputs": ["x", "r"], "outputs": ["y"]}],
    }
    yield {
        "name": "linear", "flops": 2 * rows * hidden * ffn,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]}],
        "weights": {"w": h16(ffn, hidden), "b": h16(ffn)},
        "layers": [{"name": "fc1", "op": "linear", "inputs": ["x", "w", "b"], "outputs": ["y"]}],
    }
    # The products of few columns, with the residual added in their epilogue: the attention output projection
    # (hidden -> hidden) and the MLP's second product (ffn -> hidden).
    for name, k in (("linear_proj_residual", hidden), ("linear_down_residual", ffn)):
        yield {
            "name": name, "flops": 2 * rows * k * hidden,
            "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, k]},
                       {"name": "r", "dtype": "f16", "shape": [rows, hidden]}],
            "weights": {"w": h16(hidden, k), "b": h16(hidden)},
            "layers": [{"name": "fc", "op": "linear", "inputs": ["x", "w", "b"], "outputs": ["h"]},
                       {"name": "residual", "op": "add", "inputs": ["h", "r"], "outputs": ["y"]}],
        }
    yield {
        "name": "linear_gelu_erf", "flops": 2 * rows * hidden * ffn,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]}],
        "weights": {"w": h16(ffn, hidden), "b": h16(ffn)},
        "layers": [{"name": "fc1", "op": "linear", "inputs": ["x", "w", "b"], "outputs": ["h"]},
                   {"name": "act", "op": "gelu", "inputs": ["h"], "outputs": ["y"]}],
    }
    yield {
        "name": "linear_gelu_tanh", "flops": 2 * rows * hidden * ffn,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]}],
        "weights": {"w": h16(ffn, hidden), "b": h16(ffn)},
        "layers": [{"name": "fc1", "op": "linear", "inputs": ["x", "w", "b"], "outputs": ["h"]},
                   {"name": "act", "op": "gelu", "inputs": ["h"], "outputs": ["y"], "attrs": {"approximate": "tanh"}}],
    }
    # The same product quantized explicitly (what tensoracle calibrate writes): x quantized with one scale, the weight
    # with one per output feature; the builder makes them one quantized_linear after the activation's quantize step.
    w = h16(ffn, hidden)
    for q, qmax in (("i8", 127.0), ("f8e4m3", 448.0)):
        sw = (np.abs(w.astype(np.float32)).max(axis=1) / qmax).astype(np.float32)
        if q == "i8":
            weights = {"wq": np.clip(np.rint(w / sw[:, None]), -127, 127).astype(np.int8)}
            quantize_weight = []
        else:  # an f16 weight quantized in the network: folded into an f8e4m3 constant at build time
            weights = {"wf": w}
            quantize_weight = [{"name": "qw", "op": "quantize", "inputs": ["wf", "sw"], "outputs": ["wq"],
                                "attrs": {"to": q, "axis": 0}}]
        # _gelu_erf_out: FC1's result quantized again for FC2 (the quantize after the GELU fused into the product).
        for act in ("", "_gelu_erf", "_gelu_erf_out"):
            layers = quantize_weight + [
                {"name": "qx", "op": "quantize", "inputs": ["x", "sx"], "outputs": ["xq"], "attrs": {"to": q}},
                {"name": "dqx", "op": "dequantize", "inputs": ["xq", "sx"], "outputs": ["xd"], "attrs": {"to": "f16"}},
                {"name": "dqw", "op": "dequantize", "inputs": ["wq", "sw"], "outputs": ["wd"],
                 "attrs": {"to": "f16", "axis": 0}},
                {"name": "fc1", "op": "linear", "inputs": ["xd", "wd", "b"], "outputs": ["h" if act else "y"]}]
            inline = [{"name": "sx", "dtype": "f32", "shape": [], "values": [0.5 / qmax]}]
            if act:
                out = "g" if act.endswith("_out") else "y"
                layers.append({"name": "act", "op": "gelu", "inputs": ["h"], "outputs": [out]})
            if act.endswith("_out"):
                layers.append({"name": "qy", "op": "quantize", "inputs": ["g", "sy"], "outputs": ["y"],
                               "attrs": {"to": q}})
                inline.append({"name": "sy", "dtype": "f32", "shape": [], "values": [4.0 / qmax]})
            yield {
                "name": f"quantized_linear_{q}{act}", "flops": 2 * rows * hidden * ffn,
                "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]}],
                "weights": {**weights, "sw": sw, "b": h16(ffn)},
                "inline": inline,
                "layers": layers,
            }
    # Weight-only i8 (what tensoracle calibrate --weight-only writes): the f16 x times the i8 weight dequantized per
    # output feature, the builder's weight-only quantized_linear, at BERT-large's FC1 shape and at a decoding step's
    # (1 and 8 rows of a 4096 -> 11008 product, where the weight's bytes bound the time), each beside the f16 linear.
    wq = np.clip(np.rint(w / sw_i8(w)[:, None]), -127, 127).astype(np.int8)
    weight_only_layers = [
        {"name": "dqw", "op": "dequantize", "inputs": ["wq", "sw"], "outputs": ["wd"], "attrs": {"to": "f16", "axis": 0}},
        {"name": "fc1", "op": "linear", "inputs": ["x", "wd", "b"], "outputs": ["y"]}]
    yield {
        "name": "weight_only_linear_i8", "flops": 2 * rows * hidden * ffn,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [rows, hidden]}],
        "weights": {"wq": wq, "sw": sw_i8(w), "b": h16(ffn)}, "layers": weight_only_layers,
    }
    wide = h16(11008, 4096)
    for r in (1, 8):
        yield {
            "name": f"decode_linear_rows{r}", "bytes": wide.size * 2,
            "inputs": [{"name": "x", "dtype": "f16", "shape": [r, 4096]}],
            "weights": {"w": wide, "b": h16(11008)},
            "layers": [{"name": "fc1", "op": "linear", "inputs": ["x", "w", "b"], "outputs": ["y"]}],
        }
        yield {
            "name": f"decode_weight_only_i8_rows{r}", "bytes": wide.size,
            "inputs": [{"name": "x", "dtype": "f16", "shape": [r, 4096]}],
            "weights": {"wq": np.clip(np.rint(wide / sw_i8(wide)[:, None]), -127, 127).astype(np.int8),
                        "sw": sw_i8(wide), "b": h16(11008)},
            "layers": weight_only_layers,
        }
    yield {
        "name": "attention_packed", "flops": 4 * batch * heads * seq * seq * d,
        "inputs": [{"name": "qkv", "dtype": "f16", "shape": [batch, seq, 3 * hidden]}], "weights": {},
        "layers": [{"name": "attn", "op": "attention", "inputs": ["qkv", "qkv", "qkv"], "outputs": ["y"],
                    "attrs": {"layout": "packed", "heads": heads, "kv_heads": heads}}],
    }


    # ResNet-50's stem: 7x7 stride 2 on the 3 channels of 224x224 images, bias and relu (channels last, the input
    # channels padded to 8 by the builder).
    yield {
        "name": "stem_conv", "flops": 2 * image_batch * 64 * 112 * 112 * 3 * 49,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [image_batch, 3, 224, 224]}],
        "weights": {"w": h16(64, 3, 7, 7), "b": h16(64)},
        "layers": [{"name": "conv1", "op": "conv", "inputs": ["x", "w", "b"], "outputs": ["c"],
                    "attrs": {"stride": [2, 2], "padding": [3, 3]}},
                   {"name": "relu", "op": "relu", "inputs": ["c"], "outputs": ["y"]}],
    }

    # ViT-B/16's patch embedding at batch 128: 16x16 patches, stride 16 (one product over the patches on CUDA).
    yield {
        "name": "patch_conv", "flops": 2 * 128 * 768 * 196 * 3 * 256,
        "inputs": [{"name": "x", "dtype": "f16", "shape": [128, 3, 224, 224]}],
        "weights": {"w": h16(768, 3, 16, 16), "b": h16(768)},
        "layers": [{"name": "conv_proj", "op": "conv", "inputs": ["x", "w", "b"], "outputs": ["y"],
                    "attrs": {"stride": [16, 16]}}],
    }


def attention_cases(specs):
    """One packed attention case per spec BxSxH[xD][c] (batch, sequence, heads, head dim 64 by default, c: causal):
    the attention of a model's fused q/k/v product, e.g. 1x512x12c for GPT-2 small's prefill at batch 1."""
    for spec in filter(None, specs.split(",")):
        causal = spec.endswith("c")
        dims = [int(v) for v in spec.rstrip("c").split("x")]
        batch, seq, heads = dims[:3]
        d = dims[3] if len(dims) > 3 else 64
        hidden = heads * d
        yield {
            "name": f"attention_b{batch}_s{seq}_h{heads}_d{d}" + ("_causal" if causal else ""),
            "flops": 4 * batch * heads * seq * seq * d // (2 if causal else 1),
            "inputs": [{"name": "qkv", "dtype": "f16", "shape": [batch, seq, 3 * hidden]}], "weights": {},
            "layers": [{"name": "attn", "op": "attention", "inputs": ["qkv", "qkv", "qkv"], "outputs": ["y"],
                        "attrs": {"layout": "packed", "heads": heads, "kv_heads": heads, "causal": int(causal)}}],
        }


def copy_limit_gbs():
    import torch
    a = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    return 2 * a.numel() * 20 / (start.elapsed_time(end) * 1e-3) / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="", help="comma-separated case names")
    p.add_argument("--ncu", action="store_true", help="also profile each case's steps with ncu (SOL, occupancy)")
    p.add_argument("--pipes", action="store_true", help="with --ncu: also the pipe utilization and instruction mix")
    p.add_argument("--ncu-metrics", default="",
                   help="with --ncu: comma-separated regular expressions over the names `ncu --query-metrics` lists "
                        "(e.g. 'pipe_.*_cycles_active$,warps_issue_stalled_.*_per_issue_active$'); each match is "
                        "collected too (counters as %% of their sustained peak, ratios as ratios) and printed")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=384)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--image-batch", type=int, default=256, help="images of the stem_conv case")
    p.add_argument("--attention", default="",
                   help="comma-separated attention shapes BxSxH[xD][c] (c: causal), each its own case, e.g. "
                        "1x128x12,1x512x12c; with it the other cases run only where --only names them")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    limit = copy_limit_gbs()
    print(f"copy limit (read + write): {limit:.0f} GB/s")
    only = set(filter(None, a.only.split(",")))
    rows = a.batch * a.seq
    attention = list(attention_cases(a.attention))
    attention_names = {case["name"] for case in attention}
    metrics = ncu_metrics(a.ncu_metrics) if a.ncu else []  # the machine's list, asked once
    for case in itertools.chain(attention, cases(rows, a.hidden, 4 * a.hidden, a.batch, a.seq, a.heads,
                                                 a.image_batch)):
        if case["name"] not in attention_names and (only or attention) and case["name"] not in only:
            continue
        d = out / case["name"]
        d.mkdir(exist_ok=True)
        write_safetensors(d / "w.safetensors", case["weights"])
        net = {"format": "tensoracle-network", "version": 1, "inputs": case["inputs"],
               "constants": [{"name": n, "weight": n, "file": "w.safetensors"} for n in case["weights"]] +
                            case.get("inline", []),
               "layers": case["layers"], "outputs": case.get("outputs", ["y"])}
        (d / "net.json").write_text(json.dumps(net))
        engine = d / "net.engine"
        t0 = time.time()
        b = subprocess.run([a.cli, "build", str(d / "net.json"), "-o", str(engine), "-t", "cuda", "-p", "fp16", "-v"],
                           capture_output=True, text=True)
        timed = [ln.split("build: ", 1)[1] for ln in b.stderr.splitlines() if "build: timed " in ln]
        if b.returncode != 0:
            print(f"{case['name']}: build failed: {b.stderr.strip()[-800:]}")
            continue
        r = subprocess.run([a.cli, "bench", str(engine), "--per-step", "-n", "100"], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{case['name']}: bench failed: {r.stderr.strip()[-800:]}")
            continue
        result = json.loads(r.stdout)
        steps = result.get("steps", result.get("per_step", []))
        total = result["target_time_ms"]["p50"]
        line = f"{case['name']}: build {time.time() - t0:.1f} s, p50 {total * 1e3:.1f} us"
        if "bytes" in case:
            line += f", {case['bytes'] / 1e6:.0f} MB moved: {case['bytes'] / (total * 1e-3) / 1e9:.0f} GB/s " \
                    f"({case['bytes'] / (total * 1e-3) / 1e9 / limit:.0%} of the copy limit)"
        if "flops" in case:
            line += f", {case['flops'] / (total * 1e-3) / 1e12:.0f} TFLOP/s"
        print(line)
        for t in timed:  # each candidate's median time (tensoracle build -v)
            print(f"    {t}")
        for s in steps:
            print(f"    {json.dumps(s)}")
        if a.ncu:
            report = d / "ncu.txt"
            sections = ["SpeedOfLight", "Occupancy", "LaunchStats"] + (["ComputeWorkloadAnalysis", "InstructionStats"]
                                                                       if a.pipes else [])
            n = subprocess.run(["ncu"] + [x for s in sections for x in ("--section", s)] +
                               (["--metrics", ",".join(metrics)] if metrics else []) +
                               ["--launch-skip", "30", "--launch-count", "1" if a.pipes or metrics else "3", a.cli,
                                "bench", str(engine), "-n", "10", "--warmup", "30"], capture_output=True, text=True)
            report.write_text(n.stdout + n.stderr)
            for ln in n.stdout.splitlines():
                words = ln.split()
                if words and words[0] in metrics:
                    print(f"    ncu metric: {words[0]} {' '.join(words[1:])}")
            keep = ("Duration", "DRAM Throughput", "Memory Throughput", "Compute (SM) Throughput", "Registers Per",
                    "Achieved Occupancy", "Theoretical Occupancy", "Block Size", "Grid Size", "  ", "Block Limit")
            if a.pipes:
                print("\n".join("    " + ln.strip() for ln in n.stdout.splitlines()
                                 if "Pipe" in ln or "Executed Ipc" in ln or "Issue Slots" in ln or "Warp Cycles" in ln
                                 or "Avg. Executed" in ln or "Stall" in ln))
            for ln in n.stdout.splitlines():
                s = ln.strip()
                if s.startswith(keep[:-2]) or (s and "(" in s and ")" in s and "<<<" not in s and s[0].isalpha()
                                                and ln.startswith("  ") and not ln.startswith("    ")):
                    print(f"    ncu: {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
