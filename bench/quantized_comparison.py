#!/usr/bin/env python3
"""Quantized engines against fp16 ones, on the GPU, in one run: each model calibrated with `tensoracle calibrate`
(int8 and/or fp8; the encoders' linears, ResNet-50's convolutions) on random-but-structured batches, built at fp16
like the float network, and measured with `tensoracle bench --graph-mode`; accuracy of each engine's output against
the PyTorch fp32 model on the same input (rel-L2 and cosine; for ResNet-50 also top-1 agreement of the logits), and
torch eager fp16 and torch.compile (mode reduce-overhead) timed in the same run.

    python3 bench/quantized_comparison.py --cli .device/build/tools/cli/tensoracle --out $OUT/quantized \
        [--models bert,bert_large,resnet50] [--types i8,f8e4m3,w-i8,w-f8e4m3] [--batch 32] [--image-batch 256]
        [--no-compile]
        [--no-quantize-residuals] [--calib-target cuda|cpu]

The models are bench/pytorch_models.py's (BERT-base and BERT-large encoders at --batch, ResNet-50 at --image-batch).
Calibration runs the float network on the GPU (--calib-target cpu: on the CPU reference): --calib-batches batches of --calib-size N(0, 1) inputs (the encoders' hidden
states, or images), --method percentile 99.99 for i8 and max for f8e4m3 unless --method is given; ResNet-50 with
--quantize-residuals (docs/precision.md's recipe); its stem (conv1) quantized for i8 (the engine runs an i8 stem
before a max pool quantized) and left float for f8e4m3 (cuDNN's e4m3 stem is slower than f16; --float-stem leaves
it float for every type). Types "w-i8" and "w-f8e4m3" are weight-only (`tensoracle calibrate --weight-only` of the
linears: no batches, the activations stay float). Prints a table and writes OUT/results.json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pytorch_models import model_specs, write_model_files  # noqa: E402


def run(cmd, log) -> str:
    t0 = time.perf_counter()
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    log.write(f"$ {' '.join(map(str, cmd))}\n[{time.perf_counter() - t0:.1f} s, exit {r.returncode}]\n"
              f"{r.stderr[-3000:]}\n")
    log.flush()
    if r.returncode != 0:
        raise RuntimeError(f"{Path(str(cmd[0])).name} {cmd[1]} failed: {r.stderr.strip()[-600:]}")
    return r.stdout


def time_torch(fn, x, iters=100, warmup=20) -> float:
    for _ in range(warmup):
        fn(x)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def compare(out: torch.Tensor, ref: torch.Tensor) -> dict:
    o, r = out.double().flatten(), ref.double().flatten()
    return {"rel_l2": ((o - r).norm() / r.norm()).item(),
            "cosine": torch.nn.functional.cosine_similarity(o, r, dim=0).item()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cli", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--models", default="bert,bert_large")
    p.add_argument("--types", default="i8,f8e4m3")
    p.add_argument("--batch", type=int, default=32, help="batch of the encoders")
    p.add_argument("--image-batch", type=int, default=256, help="batch of ResNet-50")
    p.add_argument("--calib-batches", type=int, default=4)
    p.add_argument("--calib-size", type=int, default=4)
    p.add_argument("--method", default="", help="calibration method for every type (default: see above)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--quantize-residuals", action=argparse.BooleanOptionalAction, default=True,
                   help="calibrate ResNet-50 with --quantize-residuals (default: yes)")
    p.add_argument("--float-stem", action="store_true",
                   help="calibrate ResNet-50 with --skip conv1 for every type (default: for f8e4m3 only)")
    p.add_argument("--calib-target", default="cuda",
                   help="where tensoracle calibrate runs the float network: cuda (default) or cpu (the CPU reference)")
    p.add_argument("--iterations", type=int, default=200)
    a = p.parse_args()
    from safetensors.torch import load_file, save_file

    cli = str(Path(a.cli).resolve())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "commands.log", "w")
    results = {"batch": a.batch, "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "models": []}
    specs = {s.key: s for s in model_specs()}
    for key in filter(None, a.models.split(",")):
        spec = specs[key]
        image = key.startswith("resnet")
        batch = a.image_batch if image else a.batch
        work = out / key
        work.mkdir(exist_ok=True)
        rec = {"key": key, "title": spec.title, "batch": batch, "rows": []}
        results["models"].append(rec)
        model = write_model_files(spec, work).eval()
        # Calibration batches and the measured input: N(0, 1) hidden states of the encoder's input shape.
        gen = torch.Generator().manual_seed(1)
        batches = []
        for i in range(a.calib_batches):
            path = work / f"calib{i}.safetensors"
            save_file({"x": torch.randn(*spec.input_shape(a.calib_size), generator=gen)}, str(path))
            batches.append(path)
        x = torch.randn(*spec.input_shape(batch), generator=gen)
        save_file({"x": x}, str(work / "in.safetensors"))
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.inference_mode():
            model = model.cuda()
            reference = model(x.cuda()).float().cpu()
            model = model.half()
            xh = x.cuda().half()
            rec["torch_fp16"] = {"accuracy": compare(model(xh).float().cpu(), reference),
                                 "p50_ms": time_torch(model, xh, a.iterations)}
            if not a.no_compile:
                compiled = torch.compile(model, mode="reduce-overhead")
                rec["torch_compile"] = {"p50_ms": time_torch(compiled, xh, a.iterations, warmup=30)}
                del compiled
        del model
        torch.cuda.empty_cache()
        shape = "x=" + "x".join(map(str, spec.input_shape(batch)))
        variants = [("fp16", work / "net.json", None)]
        for qtype in filter(None, a.types.split(",")):
            qnet = work / f"net_{qtype}.json"
            t0 = time.perf_counter()
            if qtype.startswith("w-"):  # weight-only: the linears' weights alone, no batches
                method = "weight-only"
                report = json.loads(run([cli, "calibrate", work / "net.json", "-o", qnet, "-t", qtype[2:],
                                         "--weight-only", "--ops", "linear", "-q"], log))
            else:
                method = a.method or ("percentile" if qtype == "i8" else "max")
                report = json.loads(run([cli, "calibrate", work / "net.json", "-o", qnet, "-t", qtype, "-m", method,
                                         "--ops", "conv" if image else "linear", "--target", a.calib_target, "-q"]
                                        + (["--quantize-residuals"] if image and a.quantize_residuals else [])
                                        + (["--skip", "conv1"] if image and (a.float_stem or qtype != "i8") else [])
                                        + [x for b in batches for x in ("-b", b)], log))
            variants.append((qtype, qnet, {"method": method, "target": a.calib_target,
                                           "seconds": time.perf_counter() - t0,
                                           "activations": len(report.get("activations", [])),
                                           "weights": len(report.get("quantized_weights", []))}))
        for name, net, calibration in variants:
            row = {"engine": name, "calibration": calibration}
            rec["rows"].append(row)
            engine = work / f"{name}.engine"
            try:
                t0 = time.perf_counter()
                run([cli, "build", net, "-o", engine, "-t", "cuda", "-p", "fp16", "--profile", f"{shape}"], log)
                row["build_s"] = time.perf_counter() - t0
                steps = json.loads(run([cli, "inspect", engine], log))["steps"]
                op_of = {s["layer"]: s["op"] for s in steps}
                kernel_of = {s["layer"]: s["kernel"] for s in steps}
                quantized_ops = ("quantized_linear", "quantized_conv")
                row["quantized_steps"] = sum(1 for s in steps if s["op"] in quantized_ops)
                row["kernels"] = sorted({s["kernel"] for s in steps if s["op"] in quantized_ops})
                run([cli, "run", engine, "--inputs", work / "in.safetensors", "-o", work / f"{name}_out.safetensors"],
                    log)
                got = next(iter(load_file(str(work / f"{name}_out.safetensors")).values()))
                row["accuracy"] = compare(got.float(), reference)
                if image:  # logits [batch, classes]
                    agree = (got.float().argmax(-1) == reference.argmax(-1)).double().mean().item()
                    row["accuracy"]["top1_agreement"] = agree
                bench = json.loads(run([cli, "bench", engine, "--graph-mode", "-n", a.iterations, "--warmup", 30], log))
                row["p50_ms"] = bench["target_time_ms"]["p50"]
                row["weights_bytes"] = bench.get("weights_bytes")
                per_step = json.loads(run([cli, "bench", engine, "-n", 50, "--per-step"], log))
                by_op = {}
                for s in per_step.get("steps", []):
                    op = op_of.get(s["layer"], "?")
                    by_op[op] = by_op.get(op, 0.0) + s["median_ms"]
                row["ms_by_op"] = {k: round(v, 4) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])}
                slowest = sorted(per_step.get("steps", []), key=lambda s: -s["median_ms"])[:25]
                row["slowest_steps"] = [[s["layer"], kernel_of.get(s["layer"], "?"), round(s["median_ms"], 4)]
                                        for s in slowest]
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e)
            (out / "results.json").write_text(json.dumps(results, indent=1))
        fp16 = rec["rows"][0].get("p50_ms")
        print(f"\n{spec.title}, batch {batch} (H200 fp16 engines; torch fp16 eager "
              f"{rec['torch_fp16']['p50_ms']:.3f} ms" + (f", compile {rec['torch_compile']['p50_ms']:.3f} ms"
                                                          if "torch_compile" in rec else "") + ")")
        print("| engine | p50 ms | fp16/this | compile/this | rel-L2 vs torch fp32 | cosine | weights MiB | "
              "quantized steps |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for row in rec["rows"]:
            if "error" in row:
                print(f"| {row['engine']} | error: {row['error'][:200]} |")
                continue
            comp = rec.get("torch_compile", {}).get("p50_ms")
            print(f"| {row['engine']} | {row['p50_ms']:.3f} | {fp16 / row['p50_ms']:.2f}x | "
                  + (f"{comp / row['p50_ms']:.2f}x" if comp else "-")
                  + f" | {row['accuracy']['rel_l2']:.2e} | {row['accuracy']['cosine']:.5f}"
                  + (f" (top-1 {row['accuracy']['top1_agreement']:.3f})" if "top1_agreement" in row["accuracy"] else "")
                  + " | "
                  f"{(row['weights_bytes'] or 0) / 2**20:.1f} | {row['quantized_steps']} |")
            print(f"|   time by op: {json.dumps(row['ms_by_op'])} |")
            if row.get("calibration"):
                c = row["calibration"]
                print(f"|   calibration: {c['method']} on {c['target']}, {c['seconds']:.1f} s, build {row['build_s']:.1f} s |")
        print(f"torch fp16 eager rel-L2 vs fp32: {rec['torch_fp16']['accuracy']['rel_l2']:.2e}")
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
