"""Runs conformance cases as engines on a target (TENSORACLE_CONFORMANCE_TARGET=cuda or cpu) and compares each
engine's outputs with the CPU reference executor's outputs for the same inputs, with `tensoracle compare`."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from .framework import Case, run_case, safetensors_dtypes

# Relative L2 tolerances of an engine against the CPU reference, by output dtype. f32 and f64 are the
# single-op tolerances; f16/bf16 allow for kernels that round intermediate values (e.g. the softmax
# weights of fused attention) where the reference rounds once.
TARGET_TOLERANCE = {"F16": 5e-3, "BF16": 3e-2}


def target() -> str:
    return os.environ.get("TENSORACLE_CONFORMANCE_TARGET", "")


def build_args() -> list[str]:
    """TENSORACLE_CONFORMANCE_BUILD_ARGS: extra `tensoracle build` arguments, e.g. "--no-timing" so that every step
    runs its first candidate kernel (cuDNN/cuBLASLt before the direct kernels) instead of the fastest."""
    return shlex.split(os.environ.get("TENSORACLE_CONFORMANCE_BUILD_ARGS", ""))


def sanitizer_prefix() -> list[str]:
    """TENSORACLE_CONFORMANCE_SANITIZER=memcheck|racecheck|synccheck|initcheck runs each engine under
    compute-sanitizer with that tool (any error fails the case)."""
    tool = os.environ.get("TENSORACLE_CONFORMANCE_SANITIZER", "")
    return ["compute-sanitizer", "--tool", tool, "--error-exitcode", "97"] if tool else []


# Kernels of the libraries tensoracle calls (cuDNN's generated and precompiled kernels, cuBLASLt's), whose names
# racecheck prints as they are. Hopper's cuDNN attention kernels move shared memory with TMA and wgmma, which racecheck
# reports as hazards between their own instructions although their results are right (the conformance comparison
# checks them); racecheck is here to check tensoracle's kernels.
LIBRARY_KERNEL_PREFIXES = ("cudnn", "sm90_xmma", "sm80_xmma", "cutlass", "nvjet", "cublas")
RACE_LINE = re.compile(r"Race reported between \w+ access at (\S+?)\+0x[0-9a-f]+\s+and \w+ access at (\S+?)\+0x")


def only_library_races(output: str) -> bool:
    """True when racecheck's output reports hazards, all of them between instructions of library kernels."""
    text = " ".join(line.replace("=========", " ").strip() for line in output.splitlines())
    pairs = RACE_LINE.findall(text)
    if not pairs or len(pairs) != text.count("Race reported"):  # a report this doesn't parse: not known to be theirs
        return False
    return all(k.startswith(LIBRARY_KERNEL_PREFIXES) for pair in pairs for k in pair)


def shape_text(shape) -> str:
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def run_case_on_target(case: Case, directory: Path, cli: str, target_name: str) -> list[str]:
    """CPU reference first (checked against PyTorch as usual), then the engine against that reference."""
    problems = run_case(case, directory, cli)
    if problems:
        return ["CPU reference: " + p for p in problems]
    engine = directory / f"{target_name}.engine"
    cmd = [cli, "build", str(directory / "network.json"), "-o", str(engine), "--target", target_name, "-q"]
    cmd += build_args()
    for name, tensor in case.inputs.items():
        cmd += ["--profile", f"{name}={shape_text(tensor.shape)}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return [f"tensoracle build --target {target_name} failed ({proc.returncode}): {proc.stderr.strip()}"]
    out = directory / f"{target_name}_outputs.safetensors"
    cmd = sanitizer_prefix() + [cli, "run", str(engine), "--output", str(out)]
    if case.inputs:
        cmd += ["--inputs", str(directory / "inputs.safetensors")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    racecheck = os.environ.get("TENSORACLE_CONFORMANCE_SANITIZER", "") == "racecheck"
    if proc.returncode == 97 and racecheck and only_library_races(proc.stdout + proc.stderr):
        print(f"{case.name}: racecheck reports hazards inside library kernels only (not tensoracle's): "
              f"{sorted(set(k for p in RACE_LINE.findall(' '.join((proc.stdout + proc.stderr).split())) for k in p))}")
        proc = subprocess.run(cmd[len(sanitizer_prefix()):], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return [f"tensoracle run ({target_name} engine) failed ({proc.returncode}): {proc.stderr.strip()}"
                f"{proc.stdout.strip()[-3000:] if sanitizer_prefix() else ''}"]
    reference = directory / "outputs.safetensors"
    cmd = [cli, "compare", str(out), str(reference)]
    dtypes = set(safetensors_dtypes(reference).values())
    tolerance = case.tolerance
    for d in dtypes:
        if d in TARGET_TOLERANCE:
            tolerance = max(tolerance or 0.0, TARGET_TOLERANCE[d])
    if tolerance is not None:
        cmd += ["--rel-l2", repr(float(tolerance))]
    if case.max_abs is not None:
        cmd += ["--max-abs", repr(float(case.max_abs))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode not in (0, 1) or not proc.stdout:
        return [f"tensoracle compare failed ({proc.returncode}): {proc.stderr.strip()}"]
    report = json.loads(proc.stdout)
    kernels = json.loads(subprocess.run([cli, "inspect", str(engine)], capture_output=True, text=True).stdout)
    chosen = ", ".join(s["kernel"] for s in kernels.get("steps", []))
    return [f"{target_name} engine ({chosen}) vs CPU reference: {e['name']}: " + "; ".join(e["failed_checks"])
            for e in report["tensors"] if not e["passed"]]


def run_all(cases: list[Case], base: Path, cli: str, target_name: str, workers: int = 12) -> dict[str, list[str]]:
    """Runs every case concurrently (each case is a few short processes) and returns problems by case name."""
    torch.set_num_threads(1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {c.name: pool.submit(run_case_on_target, c, base / c.name, cli, target_name) for c in cases}
        results = {}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except Exception as error:  # a crash in one case must not hide the others
                results[name] = [f"{type(error).__name__}: {error}"]
    return results
