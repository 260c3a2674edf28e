"""Conformance framework: writes a case's network JSON, inputs and weights, runs `tensoracle run`,
and checks every output against a PyTorch reference computed in float64 at test time.

A case module (cases_<family>.py) defines `cases()` returning a list of Case. The reference function
receives every input and weight as a torch tensor, float tensors upcast to float64, and returns a
dict of output name -> tensor.

The comparison itself is `tensoracle compare` (docs/compare.md), the code model developers use too:
the framework rounds each float64 reference once to its output's dtype (the correctly rounded result),
writes the references with the official safetensors package and runs
`tensoracle compare outputs.safetensors reference.safetensors`. Its per-dtype defaults are the
tolerances of docs/testing.md (relative L2 error: f64 1e-12, f32 1e-5, f16 2e-3, bf16 1.6e-2;
integers and bool exact); a case's `tolerance` replaces them (--rel-l2). NaN and infinities must be
in the same places, and every output must have a reference tensor and the reverse.
"""
from __future__ import annotations

import json
import math
import os
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_file

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
    tolerance: float | None = None  # relative L2 (--rel-l2); replaces the per-dtype default
    max_abs: float | None = None  # --max-abs: e.g. 1 lets an integer output be one step off
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


SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
if hasattr(torch, "float8_e4m3fn"):
    SAFETENSORS_DTYPES["F8_E4M3"] = torch.float8_e4m3fn


def safetensors_dtypes(path: Path) -> dict[str, str]:
    """Tensor name -> safetensors dtype name, read from the file's header only."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return {name: entry["dtype"] for name, entry in header.items() if name != "__metadata__"}


def reference_as(want: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """The reference in the output's dtype: float references rounded once; integer and bool ones only
    when every value survives the conversion (otherwise the reference keeps int64 and the comparison
    fails on the dtype: the output cannot hold the right values)."""
    if dtype is None or want.dtype == dtype:
        return want
    if dtype.is_floating_point:
        return want.to(dtype)
    as_int = want.to(torch.int64)
    converted = as_int.to(dtype)
    return converted if torch.equal(converted.to(torch.int64), as_int) else as_int


def describe_failure(entry: dict) -> str:
    """One line for a failed tensor of `tensoracle compare`'s JSON report."""
    text = f"{entry['name']}: " + "; ".join(entry["failed_checks"])
    at = entry.get("max_abs_error_at")
    if at is not None and entry.get("max_abs_error") not in (None, 0.0):
        text += (f" (max abs error {entry['max_abs_error']} at flat index {at['index']}: got {at['candidate']!r}, "
                 f"want {at['reference']!r}; relative L2 error {entry['rel_l2_error']})")
    return text


def compare_outputs(outputs: Path, want: dict[str, torch.Tensor], directory: Path, cli: str,
                    tolerance: float | None, max_abs: float | None = None) -> list[str]:
    """Writes the references next to the outputs and runs `tensoracle compare`. Returns the problems."""
    got_dtypes = {n: SAFETENSORS_DTYPES.get(d) for n, d in safetensors_dtypes(outputs).items()}
    # clone(): save_file refuses tensors that share memory (an op whose reference returns one tensor twice).
    reference = {n: reference_as(t.detach(), got_dtypes.get(n)).contiguous().clone() for n, t in want.items()}
    reference_path = directory / "reference.safetensors"
    save_file(reference, str(reference_path))
    cmd = [cli, "compare", str(outputs), str(reference_path)]
    if tolerance is not None:
        cmd += ["--rel-l2", repr(float(tolerance))]
    if max_abs is not None:
        cmd += ["--max-abs", repr(float(max_abs))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 1) or not proc.stdout:
        return [f"tensoracle compare failed ({proc.returncode}): {proc.stderr.strip()}"]
    (directory / "compare.json").write_text(proc.stdout)
    report = json.loads(proc.stdout)
    problems = [describe_failure(e) for e in report["tensors"] if not e["passed"]]
    if (proc.returncode == 0) != (report["passed"] and not problems):
        problems.append(f"tensoracle compare exited {proc.returncode} but reported passed={report['passed']}")
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
    values = {n: (t.to(torch.float64) if t.dtype in FLOAT_TYPES else t) for n, t in {**case.inputs, **case.weights}.items()}
    for n, (vals, dtype, shape) in case.inline.items():
        values[n] = torch.tensor(vals, dtype=torch.float64).reshape(shape)
    want = case.reference(values)
    return compare_outputs(directory / "outputs.safetensors", want, directory, cli, case.tolerance, case.max_abs)


def cli_path() -> str:
    cli = os.environ.get("TENSORACLE_CLI")
    if not cli:
        raise RuntimeError("TENSORACLE_CLI must name the tensoracle binary (ctest sets it)")
    return cli
