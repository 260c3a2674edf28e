#!/usr/bin/env python3
"""Where the time to the first inference of a fresh process goes (issue 15's 0.45 s goal for BERT-base).

Builds a model of bench/pytorch_models.py at batch 1 (fp16, CUDA), then times fresh processes:
- `tensoracle run --verbose` on the saved engine, several times: wall time and the library's phase lines;
- `tensoracle run` with and without CUDA's teardown at the process's exit (TENSORACLE_EXIT_TEARDOWN), interleaved,
  alone on the GPU and while another process holds a context on it;
- `tensoracle --version` (process start, library loading, CUDA device query), and the dynamic loader's own
  statistics (LD_DEBUG=statistics);
- the CUDA pieces alone through ctypes, each in a fresh Python process: cuInit, the primary context, cublasLtCreate,
  cudnnCreate; and cuBLASLt's first heuristic answers, with a context current and without one, and
  its first check of an algorithm stored before (what a load that kept the build's choice would ask instead).
Writes startup.json and prints a summary. Needs a GPU, torch and transformers (for the model's weights).

    python3 bench/startup_profile.py --cli build/tools/cli/tensoracle --out OUT [--model bert] [--runs 5]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Each in a fresh interpreter: prints one JSON object of milliseconds per step (python's own start excluded).
CTYPES_PROBE = r"""
import ctypes, json, sys, time
ms = {}
def step(name, fn):
    t = time.perf_counter(); r = fn(); ms[name] = (time.perf_counter() - t) * 1e3
    if r not in (0, None): raise SystemExit(f"{name} returned {r}")
cuda = ctypes.CDLL("libcuda.so.1")
step("cuInit", lambda: cuda.cuInit(0))
dev = ctypes.c_int(); ctx = ctypes.c_void_p()
step("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), 0))
step("primary context (cuDevicePrimaryCtxRetain)", lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
step("cuCtxSetCurrent", lambda: cuda.cuCtxSetCurrent(ctx))
which = sys.argv[1]
if which in ("cublaslt", "both"):
    lt = [None]
    step("dlopen libcublasLt", lambda: lt.__setitem__(0, ctypes.CDLL(sys.argv[2])))
    h = ctypes.c_void_p()
    step("cublasLtCreate", lambda: lt[0].cublasLtCreate(ctypes.byref(h)))
if which in ("cudnn", "both"):
    dnn = [None]
    step("dlopen libcudnn", lambda: dnn.__setitem__(0, ctypes.CDLL(sys.argv[3])))
    h2 = ctypes.c_void_p()
    step("cudnnCreate", lambda: dnn[0].cudnnCreate(ctypes.byref(h2)))
print(json.dumps(ms))
"""

# cuBLASLt's heuristic in a fresh interpreter (argv: libcublasLt, "after_context" or "before_context"): the handle and
# three heuristic queries of f16 products (two new problems, then the first again), then a second handle's first
# query (a third problem), each timed; with
# "before_context" no context is made current first (whether the heuristic's start can overlap the context's);
# "stored_algo HEX" (HEX: the algorithm an "after_context" run printed for the first problem) first checks that stored
# algorithm with cublasLtMatmulAlgoCheck, as a load that kept the build's choice would, then asks the heuristic.
# Prints one JSON object: milliseconds per step, or the status a step returned.
HEURISTIC_PROBE = r"""
import ctypes, json, sys, time
from ctypes import byref, c_int, c_int64, c_uint64, c_void_p
ms = {}
def step(name, fn):
    t = time.perf_counter(); r = fn(); ms[name] = (time.perf_counter() - t) * 1e3
    if r not in (0, None):
        ms[name] = f"status {r}"; print(json.dumps(ms)); raise SystemExit(0)
cuda = ctypes.CDLL("libcuda.so.1")
step("cuInit", lambda: cuda.cuInit(0))
if sys.argv[2] in ("after_context", "stored_algo"):
    dev = c_int(); ctx = c_void_p()
    cuda.cuDeviceGet(byref(dev), 0)
    step("primary context", lambda: cuda.cuDevicePrimaryCtxRetain(byref(ctx), dev))
    cuda.cuCtxSetCurrent(ctx)
lt = ctypes.CDLL(sys.argv[1])
lt.cublasLtMatrixLayoutCreate.argtypes = [ctypes.POINTER(c_void_p), c_int, c_uint64, c_uint64, c_int64]
h = c_void_p()
step("cublasLtCreate", lambda: lt.cublasLtCreate(byref(h)))
def descriptors(m, n, k):
    op, a, b, c = c_void_p(), c_void_p(), c_void_p(), c_void_p()
    lt.cublasLtMatmulDescCreate(byref(op), 68, 0)  # CUBLAS_COMPUTE_32F, CUDA_R_32F scale
    lt.cublasLtMatrixLayoutCreate(byref(a), 2, n, k, n)  # CUDA_R_16F, column-major as the library plans them
    lt.cublasLtMatrixLayoutCreate(byref(b), 2, k, m, k)
    lt.cublasLtMatrixLayoutCreate(byref(c), 2, n, m, n)
    return op, a, b, c
first_algo = {}
def query(m, n, k):
    op, a, b, c = descriptors(m, n, k)
    pref = c_void_p()
    lt.cublasLtMatmulPreferenceCreate(byref(pref))
    ws = c_uint64(8 << 20)
    lt.cublasLtMatmulPreferenceSetAttribute(pref, 1, byref(ws), ctypes.c_size_t(8))
    results, found = ctypes.create_string_buffer(96 * 4), c_int()
    status = lt.cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, c, pref, 4, results, byref(found))
    first_algo.setdefault((m, n, k), results.raw[:64].hex())  # the first result's cublasLtMatmulAlgo_t
    return status
def check(m, n, k, algo_hex):
    op, a, b, c = descriptors(m, n, k)
    algo, result = ctypes.create_string_buffer(bytes.fromhex(algo_hex), 64), ctypes.create_string_buffer(96)
    return lt.cublasLtMatmulAlgoCheck(h, op, a, b, c, c, algo, result)
if sys.argv[2] == "stored_algo":
    step("stored algorithm checked, first problem (cublasLtMatmulAlgoCheck)", lambda: check(128, 768, 768, sys.argv[3]))
    step("stored algorithm checked again", lambda: check(128, 768, 768, sys.argv[3]))
step("heuristic, first problem (128 x 768 -> 768)", lambda: query(128, 768, 768))
step("heuristic, second problem (128 x 768 -> 3072)", lambda: query(128, 3072, 768))
step("heuristic, first problem again", lambda: query(128, 768, 768))
# A second handle's first answer: whether the first answer's cost is the process's (paid once) or each handle's.
step("second handle (cublasLtCreate)", lambda: lt.cublasLtCreate(byref(h)))
step("second handle's heuristic, a third problem (128 x 3072 -> 768)", lambda: query(128, 768, 3072))
ms["first problem's algorithm"] = first_algo[(128, 768, 768)]
# Whether cuBLASLt made the primary context (active) or a context current on its own (before_context).
dev0, flags, active, current = c_int(), ctypes.c_uint(), c_int(), c_void_p()
cuda.cuDeviceGet(byref(dev0), 0)
cuda.cuDevicePrimaryCtxGetState(dev0, byref(flags), byref(active))
cuda.cuCtxGetCurrent(byref(current))
ms["primary context active after"] = active.value
ms["a context current after"] = current.value is not None
if sys.argv[2] == "before_context":  # then the context, and a handle made in it: does the warm-up before it carry over?
    ctx2 = c_void_p()
    step("primary context, after the heuristic", lambda: cuda.cuDevicePrimaryCtxRetain(byref(ctx2), dev0))
    cuda.cuCtxSetCurrent(ctx2)
    step("a handle in the context (cublasLtCreate)", lambda: lt.cublasLtCreate(byref(h)))
    step("its heuristic, a fourth problem (256 x 768 -> 768)", lambda: query(256, 768, 768))
print(json.dumps(ms))
"""

# Holds a CUDA context on GPU 0 until its stdin closes (another process using the GPU, as a server or PyTorch would).
GPU_HOLDER = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
print("ready", flush=True)
sys.stdin.read()
"""


def timed(cmd: list[str], env: dict | None = None, timeout: float = 120) -> dict:
    t = time.perf_counter()
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=timeout)
    return {"seconds": time.perf_counter() - t, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def linked_library(cli: str, stem: str) -> str | None:
    """The path the dynamic loader picks for `stem` (libcudnn, linked) when it starts the command, else a copy in the
    build folder; None where neither exists (cuBLASLt, which the library opens at run time: probed by its soname)."""
    out = subprocess.run(["ldd", cli], capture_output=True, text=True).stdout
    lib_dir = Path(cli).resolve().parent
    for line in out.splitlines():
        if line.strip().startswith(stem + ".so") and "=>" in line:
            return line.split("=>")[1].split("(")[0].strip()
    for candidate in lib_dir.parent.parent.glob(f"**/{stem}.so*"):
        return str(candidate)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True, help="the tensoracle binary")
    ap.add_argument("--out", required=True, help="folder for startup.json and logs")
    ap.add_argument("--model", default="bert", help="a bench/pytorch_models.py key (default bert: BERT-base seq 128)")
    ap.add_argument("--runs", type=int, default=5, help="fresh `tensoracle run` processes (default 5)")
    ap.add_argument("--engine", default=None, help="an engine already built (skips the model and the build)")
    ap.add_argument("--inputs", default=None, help="its inputs (safetensors), with --engine")
    args = ap.parse_args()
    cli = str(Path(args.cli).resolve())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"model": args.model}
    work = Path(tempfile.mkdtemp(prefix="startup-"))

    if args.engine:
        engine, inputs = Path(args.engine), Path(args.inputs)
    else:
        import torch
        from safetensors.torch import save_file

        import pytorch_models

        spec = next(s for s in pytorch_models.model_specs(False) if s.key == args.model)
        pytorch_models.write_model_files(spec, work)
        batch = spec.batches[0]
        save_file({"x": torch.randn(*spec.input_shape(batch))}, str(work / "in.safetensors"))
        shape = "x".join(map(str, spec.input_shape(batch)))
        engine, inputs = work / "model.engine", work / "in.safetensors"
        r = timed([cli, "build", work / "net.json", "-o", engine, "--target", "cuda", "--precision", "fp16",
                   "--profile", f"x={shape}:{shape}:{shape}"], timeout=300)
        result["build_seconds"] = r["seconds"]
        if r["rc"] != 0:
            print(r["stderr"][-2000:], file=sys.stderr)
            return 1
    result["engine_bytes"] = engine.stat().st_size

    runs = []
    for i in range(args.runs):
        r = timed([cli, "run", engine, "--inputs", inputs, "-o", work / "out.safetensors", "--verbose"])
        (out / f"run{i}.log").write_text(r["stderr"])
        runs.append({"seconds": r["seconds"], "rc": r["rc"],
                     "lines": [ln for ln in r["stderr"].splitlines() if "ms" in ln][-30:]})
    result["runs"] = runs
    walls = [r["seconds"] for r in runs if r["rc"] == 0]
    result["run_seconds_median"] = statistics.median(walls) if walls else None
    # The time to the first inference itself: the process's age when its first result was ready (`tensoracle run`'s
    # "first inference ... ms after the process started", 10 ms resolution); the wall above adds writing the output
    # file and the process's teardown.
    firsts = []
    for r in runs:
        m = re.search(r"first inference [0-9.]+ ms after the engine was opened, ([0-9.]+) ms after the process started",
                      "\n".join(r["lines"]))
        if r["rc"] == 0 and m:
            firsts.append(float(m.group(1)))
    result["first_inference_ms"] = firsts

    # The process's end with and without CUDA's teardown at exit (TENSORACLE_EXIT_TEARDOWN=1 keeps it), interleaved:
    # the wall after the library's "released" line is the exit. Alone on the GPU, and while another process holds a
    # context on it (the driver then keeps the GPU initialized between processes).
    teardown = {}
    for holder in (False, True):
        held = subprocess.Popen([sys.executable, "-c", GPU_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True) if holder else None
        if held is not None and held.stdout.readline().strip() != "ready":
            held.kill()
            continue
        for i in range(args.runs):
            for how, value in (("skipped", "0"), ("kept", "1")):
                r = timed([cli, "run", engine, "--inputs", inputs, "-o", work / "out.safetensors"],
                          env=dict(os.environ, TENSORACLE_EXIT_TEARDOWN=value))
                if r["rc"] == 0:
                    teardown.setdefault(f"{how}, {'another process holding the GPU' if holder else 'alone'}",
                                        []).append(r["seconds"])
        if held is not None:
            held.stdin.close()
            held.wait(timeout=30)
    result["exit_teardown_ab_seconds"] = teardown

    versions = [timed([cli, "--version"])["seconds"] for _ in range(3)]
    result["version_seconds"] = versions
    env = dict(os.environ, LD_DEBUG="statistics")
    result["ld_debug_statistics"] = timed([cli, "--help"], env=env)["stderr"][-3000:]
    env = dict(os.environ, LD_DEBUG="statistics", LD_BIND_NOW="1")
    result["ld_debug_statistics_bind_now"] = timed([cli, "--help"], env=env)["stderr"][-3000:]

    lt, dnn = linked_library(cli, "libcublasLt"), linked_library(cli, "libcudnn")
    result["libraries"] = {"cublasLt": lt, "cudnn": dnn}
    probes = {}
    for which in ("none", "cublaslt", "cudnn", "both"):
        r = timed([sys.executable, "-c", CTYPES_PROBE, which, lt or "libcublasLt.so.13", dnn or "libcudnn.so.9"])
        probes[which] = json.loads(r["stdout"]) if r["rc"] == 0 else {"error": r["stderr"][-500:]}
    result["ctypes_probes_ms"] = probes
    heuristic = {}
    for mode in ("after_context", "before_context", "stored_algo"):
        extra = []
        if mode == "stored_algo":  # the algorithm the after_context run's heuristic chose for the first problem
            extra = [heuristic["after_context"].get("first problem's algorithm", "")]
            if not extra[0]:
                heuristic[mode] = {"error": "the after_context run printed no algorithm"}
                continue
        r = timed([sys.executable, "-c", HEURISTIC_PROBE, lt or "libcublasLt.so.13", mode, *extra])
        heuristic[mode] = json.loads(r["stdout"]) if r["rc"] == 0 else {"error": r["stderr"][-500:]}
    result["cublaslt_heuristic_probe_ms"] = heuristic

    (out / "startup.json").write_text(json.dumps(result, indent=2))
    print(f"engine {result['engine_bytes'] / 2 ** 20:.1f} MiB; tensoracle run wall: "
          + ", ".join(f"{s:.3f}" for s in walls) + " s")
    print("first result after the process started: " + ", ".join(f"{v:.0f}" for v in firsts) + " ms")
    for how, walls_ab in teardown.items():
        print(f"tensoracle run wall, CUDA's teardown at exit {how}: " + ", ".join(f"{s:.3f}" for s in walls_ab)
              + (f" s (median {statistics.median(walls_ab):.3f})" if walls_ab else ""))
    print("tensoracle --version wall: " + ", ".join(f"{s:.3f}" for s in versions) + " s")
    for label, p in [*((f"ctypes ({which})", p) for which, p in probes.items()),
                     *((f"cuBLASLt's heuristic ({mode})", p) for mode, p in heuristic.items())]:
        print(f"{label}: " + ", ".join(f"{k} {v:.1f} ms" if isinstance(v, float) else f"{k} {v}" for k, v in p.items()))
    for key in ("ld_debug_statistics", "ld_debug_statistics_bind_now"):
        lines = [ln.split(":", 1)[-1].strip() for ln in result[key].splitlines()
                 if "total startup time" in ln or "time needed for relocation" in ln or "number of relocations:" in ln]
        print(f"{key}: " + "; ".join(lines))
    if runs:
        print("last run's lines:\n  " + "\n  ".join(runs[-1]["lines"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
