"""Conformance framework: writes a case's network JSON, inputs and weights, runs `tensoracle run`,
and compares every output with a PyTorch reference computed in float64 at test time.

A case module (cases_<family>.py) defines `cases()` returning a list of Case. The reference function
receives every input and weight as a torch tensor, float tensors upcast to float64, and returns a
dict of output name -> tensor. Integer and bool outputs must match exactly; float outputs within the
per-dtype relative L2 tolerance below (docs/testing.md), with NaN and infinities in the same places.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

# Relative L2 error allowed per output dtype for a single op: the output is rounded once to its
# dtype, so the error is about that dtype's unit roundoff (f32 2^-24, f16 2^-11, bf16 2^-8).
TOLERANCE = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}

DTYPE_NAMES = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}
if hasattr(torch, "float8_e4m3fn"):
    DTYPE_NAMES[torch.float8_e4m3fn] = "f8e4m3"

FLOAT_TYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


@dataclass
class Case:
    name: str
    layers: list[dict]
    inputs: dict[str, torch.Tensor]
    reference: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    outputs: list[str] | None = None  # default: every output of the last layer
    dynamic: dict[str, list[int]] = field(default_factory=dict)  # declared dims with -1, per input
    tolerance: float | None = None  # relative L2, overrides TOLERANCE for float outputs
    inline: dict[str, tuple[list[float], str, list[int]]] = field(default_factory=dict)  # small constants


def rand(*shape, dtype=torch.float32, low=-1.0, high=1.0):
    """Uniform random values, generated in float64 then rounded to dtype."""
    return (torch.rand(*shape, dtype=torch.float64) * (high - low) + low).to(dtype)


def randn(*shape, dtype=torch.float32, std=1.0):
    return (torch.randn(*shape, dtype=torch.float64) * std).to(dtype)


def randint(*shape, low=-100, high=100, dtype=torch.int64):
    return torch.randint(low, high, shape, dtype=torch.int64).to(dtype)


def network_json(case: Case) -> dict:
    layers = []
    for i, layer in enumerate(case.layers):
        entry = {"name": layer.get("name", f"layer{i}"), "op": layer["op"], "inputs": layer["inputs"],
                 "outputs": layer["outputs"], "attrs": layer.get("attrs", {})}
        layers.append(entry)
    inputs = [{"name": n, "dtype": DTYPE_NAMES[t.dtype], "shape": case.dynamic.get(n, list(t.shape))}
              for n, t in case.inputs.items()]
    constants = [{"name": n, "weight": n, "file": "weights.safetensors"} for n in case.weights]
    for n, (values, dtype, shape) in case.inline.items():
        constants.append({"name": n, "dtype": dtype, "shape": shape,
                          "values": [v if math.isfinite(v) else str(v) for v in values]})
    outputs = case.outputs if case.outputs is not None else list(case.layers[-1]["outputs"])
    return {"format": "tensoracle-network", "version": 1, "inputs": inputs, "constants": constants,
            "layers": layers, "outputs": outputs}


def compare(name: str, got: torch.Tensor, want: torch.Tensor, tolerance: float | None) -> list[str]:
    problems = []
    if tuple(got.shape) != tuple(want.shape):
        return [f"{name}: shape {tuple(got.shape)} != reference {tuple(want.shape)}"]
    if got.dtype not in FLOAT_TYPES:
        if not torch.equal(got.to(torch.int64), want.to(torch.int64)):
            diff = (got.to(torch.int64) != want.to(torch.int64)).nonzero()[:5].tolist()
            problems.append(f"{name}: integer output differs at {diff}")
        return problems
    g = got.to(torch.float64)
    w = want.to(torch.float64)
    if not torch.equal(torch.isnan(g), torch.isnan(w)):
        problems.append(f"{name}: NaN positions differ (got {int(torch.isnan(g).sum())}, want {int(torch.isnan(w).sum())})")
        return problems
    inf_g, inf_w = torch.isinf(g), torch.isinf(w)
    if not torch.equal(inf_g, inf_w) or not torch.equal(g[inf_g], w[inf_w]):
        problems.append(f"{name}: infinities differ")
        return problems
    finite = torch.isfinite(w)
    g, w = g[finite], w[finite]
    tol = tolerance if tolerance is not None else TOLERANCE[got.dtype]
    err = torch.linalg.norm(g - w).item()
    ref = torch.linalg.norm(w).item()
    # Outputs that are (nearly) zero are judged by absolute error against the tolerance.
    rel = err / max(ref, 1e-30) if ref > 1e-6 * max(1, w.numel()) ** 0.5 else err
    if rel > tol:
        idx = torch.argmax((g - w).abs()).item() if g.numel() else 0
        problems.append(f"{name}: relative L2 error {rel:.3e} > {tol:.1e} (max abs error {(g - w).abs().max().item():.3e} "
                        f"at flat index {idx}: got {g[idx].item()!r}, want {w[idx].item()!r})")
    return problems


def run_case(case: Case, directory: Path, cli: str) -> list[str]:
    """Runs one case in `directory` (kept for inspection on failure). Returns the problems found."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "network.json").write_text(json.dumps(network_json(case), indent=1))
    save_file({n: t.contiguous() for n, t in case.inputs.items()} or {"unused": torch.zeros(0)}, str(directory / "inputs.safetensors"))
    save_file({n: t.contiguous() for n, t in case.weights.items()}, str(directory / "weights.safetensors"))
    if not case.inputs:
        (directory / "inputs.safetensors").unlink()
    cmd = [cli, "run", str(directory / "network.json"), "--output", str(directory / "outputs.safetensors")]
    if case.inputs:
        cmd += ["--inputs", str(directory / "inputs.safetensors")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"tensoracle run failed ({proc.returncode}): {proc.stderr.strip()}"]
    got = load_file(str(directory / "outputs.safetensors"))
    values = {n: (t.to(torch.float64) if t.dtype in FLOAT_TYPES else t) for n, t in {**case.inputs, **case.weights}.items()}
    for n, (vals, dtype, shape) in case.inline.items():
        values[n] = torch.tensor(vals, dtype=torch.float64).reshape(shape)
    want = case.reference(values)
    problems = []
    for name, expected in want.items():
        if name not in got:
            problems.append(f"output '{name}' missing")
            continue
        problems += compare(name, got[name], expected, case.tolerance)
    return problems


def cli_path() -> str:
    cli = os.environ.get("TENSORACLE_CLI")
    if not cli:
        raise RuntimeError("TENSORACLE_CLI must name the tensoracle binary (ctest sets it)")
    return cli
