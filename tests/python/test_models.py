"""Model-level tests: small real architectures (BERT, GPT-2 and Llama layers, ResNet blocks; see
tests/python/models/) run as tensoracle networks on the CPU reference executor and compared with the
PyTorch module computed in float64. Runs under a Python that has torch; TENSORACLE_CLI names the binary.

Each run draws fresh random weights, inputs and dynamic sizes; the seed is printed on failure and
TENSORACLE_MODEL_SEED=N reruns with it. The files of a run stay in pytest's tmp_path.

With TENSORACLE_MODEL_TARGET=cuda (or cpu, cuda:N) every model is also built from its f32 network as an
fp32 and an fp16 engine for that target (`tensoracle build`), run with `tensoracle run ENGINE` on the same
inputs and compared with the same float64 reference (test_engine; the engines are built and run
concurrently). Without it those tests skip."""
from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402

SEED = int(os.environ.get("TENSORACLE_MODEL_SEED", torch.randint(0, 2**31 - 1, ()).item()))
SPECS = {name: importlib.import_module(f"models.{name}") for name in models.MODELS}

# Relative L2 error allowed against the float64 reference, which uses the same (rounded) weights and
# inputs as the network, so only the network's arithmetic is judged. The reference executor rounds each
# layer's output once to the network dtype (unit roundoff u: f32 2^-24, f16 2^-11, bf16 2^-8). A block
# chains 20-40 layers; their rounding errors are damped by the normalisations and mostly hidden by the
# residual path, so the output error is dominated by the last roundings: simulating per-layer rounding
# in torch gives about 1.1u for every model here (f32 7e-8, f16 5.7e-4, bf16 4.5e-3 over many seeds);
# tensoracle measures f32 2-3e-7 (its f32 gemm accumulates in float), f16 5e-4, bf16 4e-3.
# f32: 1e-5 leaves ~30x room for a different but correct summation order, yet catches small formula
# errors (tanh instead of erf GELU ~1e-4, batch-norm epsilon 1e-3 instead of 1e-5 ~1e-3: see the
# controls below). f16: 1e-2 and bf16: 3e-2 (both ~20x the simulated error, ~8-20u) also allow for a
# kernel that rounds an intermediate (e.g. attention probabilities) to the dtype, while a wrong op (a
# missed mask, wrong rotary convention, dropped bias) gives errors of order 0.1-1.
DTYPES = {"f32": (torch.float32, 1e-5), "f16": (torch.float16, 1e-2), "bf16": (torch.bfloat16, 3e-2)}


@pytest.fixture(scope="module")
def cli():
    path = os.environ.get("TENSORACLE_CLI")
    if not path:
        pytest.fail("TENSORACLE_CLI is not set: point it at the built `tensoracle` binary", pytrace=False)
    if not os.access(path, os.X_OK):
        pytest.fail(f"TENSORACLE_CLI={path} is not an executable file; build tensoracle_cli first", pytrace=False)
    return path


def relative_l2(got: torch.Tensor, want: torch.Tensor) -> float:
    g, w = got.to(torch.float64), want.to(torch.float64)
    return (torch.linalg.norm(g - w) / torch.linalg.norm(w)).item()


def write_model(model: str, variant: str, dtype: str, directory: Path, seed: int, patch=None):
    """Writes weights, inputs and the network to `directory` and computes the float64 reference.
    Returns (inputs, reference output)."""
    spec = SPECS[model]
    torch_dtype, _ = DTYPES[dtype]
    torch.manual_seed(seed)
    module = spec.create()
    state = {n: (t.to(torch_dtype) if t.is_floating_point() else t).contiguous() for n, t in module.state_dict().items()}
    inputs = spec.make_inputs(torch_dtype)
    network = spec.network(dtype, **spec.VARIANTS[variant]).to_json()
    if patch is not None:
        patch(network)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state, str(directory / "weights.safetensors"))
    save_file({n: t.contiguous() for n, t in inputs.items()}, str(directory / "inputs.safetensors"))
    (directory / "network.json").write_text(json.dumps(network, indent=1))

    reference = copy.deepcopy(module).double()
    reference.load_state_dict({n: (t.double() if t.is_floating_point() else t) for n, t in state.items()})
    with torch.no_grad():
        want = reference(**{n: t.double() for n, t in inputs.items()})
    return inputs, want


def run_model(cli: str, model: str, variant: str, dtype: str, directory: Path, seed: int, patch=None):
    """Writes weights, inputs and the network to `directory`, runs `tensoracle run`, and computes the
    float64 reference. Returns (output or None, reference, description of the run)."""
    inputs, want = write_model(model, variant, dtype, directory, seed, patch)
    cmd = [cli, "run", str(directory / "network.json"), "--inputs", str(directory / "inputs.safetensors"),
           "--output", str(directory / "outputs.safetensors")]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    shapes = {n: list(t.shape) for n, t in inputs.items()}
    about = (f"seed {seed} (TENSORACLE_MODEL_SEED={SEED}); files kept in {directory}\n"
             f"input shapes {shapes}; `{' '.join(cmd)}` took {seconds:.2f} s\nstderr: {proc.stderr.strip()}")
    if proc.returncode != 0:
        return None, want, f"tensoracle run failed with exit status {proc.returncode}\n{about}"
    outputs = load_file(str(directory / "outputs.safetensors"))
    if "output" not in outputs:
        return None, want, f"tensoracle wrote no tensor 'output' (it wrote {sorted(outputs)})\n{about}"
    return outputs["output"], want, about


def seed_of(*parts: str) -> int:
    # One seed per test, derived from the session seed, so each test reruns alone with the same data.
    return (SEED + sum(ord(c) * 31 ** i for i, c in enumerate("/".join(parts)))) % (2**31 - 1)


PARAMS = [(m, v, d) for m in models.MODELS for v in SPECS[m].VARIANTS for d in DTYPES]


@pytest.mark.parametrize("model,variant,dtype", PARAMS,
                         ids=[f"{m}{'_' + v if v else ''}-{d}" for m, v, d in PARAMS])
def test_model(cli, model, variant, dtype, tmp_path):
    got, want, about = run_model(cli, model, variant, dtype, tmp_path, seed_of(model, variant, dtype))
    check_output(got, want, DTYPES[dtype][0], DTYPES[dtype][1], about)


def check_output(got, want, dtype: torch.dtype, tolerance: float, about: str) -> None:
    assert got is not None, about
    assert got.dtype == dtype, f"output dtype {got.dtype}, expected {dtype}\n{about}"
    assert tuple(got.shape) == tuple(want.shape), f"output shape {tuple(got.shape)} != reference {tuple(want.shape)}\n{about}"
    assert torch.isfinite(got.to(torch.float64)).all(), f"non-finite values in the output\n{about}"
    error = relative_l2(got, want)
    print(f"relative L2 error {error:.2e} (tolerance {tolerance:.0e})")
    worst = torch.argmax((got.double() - want).abs()).item()
    assert error <= tolerance, (f"relative L2 error {error:.3e} > {tolerance:.0e} (worst at flat index {worst}: "
                                f"got {got.flatten()[worst].item()!r}, want {want.flatten()[worst].item()!r})\n{about}")


# ---- engines: with TENSORACLE_MODEL_TARGET=cuda (or cpu, cuda:N) every model is also built as an engine ----
# From the f32 network (same weights and inputs as test_model[...-f32]), `tensoracle build --target T
# --precision P` with a dynamic profile around the input shapes, then `tensoracle run ENGINE` on the
# same inputs, compared with the float64 PyTorch reference. Unset, these tests skip (CI stays as fast).

TARGET = os.environ.get("TENSORACLE_MODEL_TARGET", "")
# Relative L2 tolerance by engine precision. fp32 (TF32 off): the f32 tolerance above; the CPU engines
# measure 1-3e-7 like the reference executor, and another summation order with f32 accumulation
# (cuBLASLt, the CUDA kernels) changes that by a few u (2^-24 = 6e-8), far below 1e-5. fp16: the f16
# network tolerance; the engine lowers the f32 network (weights rounded to f16 at build time, casts at
# the f32 inputs and output, f32 accumulation and statistics), so besides the f16 rounding of each
# layer's output it has the f16 rounding of weights and inputs, which the float64 reference (from the
# f32 weights and inputs) does not share: measured 5-7e-4 on the CPU target, like the f16 networks.
ENGINE_PRECISIONS = {"fp32": 1e-5, "fp16": 1e-2}
ENGINE_PARAMS = [(m, v, p) for m in models.MODELS for v in SPECS[m].VARIANTS for p in ENGINE_PRECISIONS]


def engine_profile(declared: list[int], shape: list[int]) -> str:
    """MIN:OPT:MAX around the input's shape: each dynamic (-1) dim d ranges over ceil(d/2)..2d with
    opt d, so the engine is planned for a range and runs at its opt point."""
    def text(dims):
        return "x".join(str(d) for d in dims)
    lo = [(d + 1) // 2 if want == -1 else d for want, d in zip(declared, shape)]
    hi = [2 * d if want == -1 else d for want, d in zip(declared, shape)]
    return f"{text(lo)}:{text(shape)}:{text(hi)}"


def build_and_run_engine(cli: str, directory: Path, target: str, precision: str, profiles: list[str]):
    """`tensoracle build` then `tensoracle run` (subprocesses only, so it can run on a thread).
    Returns (path of the outputs or None, description of the commands)."""
    stem = f"{target.replace(':', '_')}_{precision}"
    engine = directory / f"{stem}.engine"
    outputs = directory / f"{stem}_outputs.safetensors"
    build = [cli, "build", str(directory / "network.json"), "-o", str(engine), "--target", target,
             "--precision", precision, "-q"]
    for p in profiles:
        build += ["--profile", p]
    run = [cli, "run", str(engine), "--inputs", str(directory / "inputs.safetensors"), "--output", str(outputs)]
    log = []
    for cmd in (build, run):
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        log.append(f"`{' '.join(cmd)}` took {time.monotonic() - start:.2f} s, exit status {proc.returncode}"
                   + (f"\nstderr: {proc.stderr.strip()}" if proc.stderr.strip() else ""))
        if proc.returncode != 0:
            return None, "\n".join(log)
    manifest = subprocess.run([cli, "inspect", str(engine)], capture_output=True, text=True, timeout=300)
    try:
        kernels = ", ".join(f"{s['layer']}: {s['kernel']}" for s in json.loads(manifest.stdout).get("steps", []))
    except (ValueError, KeyError, TypeError):
        kernels = f"(tensoracle inspect failed: {manifest.stderr.strip()})"
    log.append(f"kernels: {kernels}")
    return outputs, "\n".join(log)


class EngineRuns(dict):
    def __repr__(self):  # keeps the tensors out of pytest's failure reports
        return f"<{len(self)} engine runs>"


@pytest.fixture(scope="module")
def engine_runs(request, tmp_path_factory):
    """Every model/variant written once as an f32 network, then built and run as an engine at every
    precision, all engines concurrently. Returns {(model, variant, precision): (outputs path or None,
    reference, description)}."""
    if not TARGET:
        pytest.skip("TENSORACLE_MODEL_TARGET is not set; set it to cuda (or cpu) to build every model as "
                    "fp32 and fp16 engines for that target and compare them with PyTorch")
    cli = request.getfixturevalue("cli")
    base = tmp_path_factory.mktemp(f"model_engines_{TARGET.replace(':', '_')}")
    # Only the engines of the selected tests (e.g. `-k llama`) are built.
    selected = {(i.callspec.params["model"], i.callspec.params["variant"], i.callspec.params["precision"])
                for i in request.session.items if getattr(i, "originalname", "") == "test_engine"}
    wanted = [key for key in ENGINE_PARAMS if key in selected]
    prepared = {}
    for model, variant in dict.fromkeys((m, v) for m, v, _ in wanted):
        directory = base / (model + ("_" + variant if variant else ""))
        seed = seed_of(model, variant, "f32")  # the data of test_model[...-f32]
        inputs, want = write_model(model, variant, "f32", directory, seed)
        declared = {i["name"]: i["shape"] for i in json.loads((directory / "network.json").read_text())["inputs"]}
        profiles = [f"{n}={engine_profile(declared[n], list(t.shape))}" for n, t in inputs.items()]
        shapes = {n: list(t.shape) for n, t in inputs.items()}
        about = (f"seed {seed} (TENSORACLE_MODEL_SEED={SEED}; the data of test_model[{model}"
                 f"{'_' + variant if variant else ''}-f32]); files kept in {directory}\ninput shapes {shapes}")
        prepared[model, variant] = directory, profiles, want, about
    results = EngineRuns()
    with ThreadPoolExecutor(max_workers=min(len(wanted), max(4, os.cpu_count() or 1))) as pool:
        futures = {(m, v, p): pool.submit(build_and_run_engine, cli, prepared[m, v][0], TARGET, p, prepared[m, v][1])
                   for m, v, p in wanted}
        for key, future in futures.items():
            _, _, want, about = prepared[key[:2]]
            try:
                outputs, log = future.result()
            except Exception as error:  # one failure must not hide the others
                outputs, log = None, f"{type(error).__name__}: {error}"
            results[key] = outputs, want, f"{TARGET} {key[2]} engine; {about}\n{log}"
    return results


@pytest.mark.parametrize("model,variant,precision", ENGINE_PARAMS,
                         ids=[f"{m}{'_' + v if v else ''}-{p}" for m, v, p in ENGINE_PARAMS])
def test_engine(engine_runs, model, variant, precision):
    path, want, about = engine_runs[model, variant, precision]
    got = None
    if path is not None:
        outputs = load_file(str(path))
        assert "output" in outputs, f"the engine wrote no tensor 'output' (it wrote {sorted(outputs)})\n{about}"
        got = outputs["output"]
    # The network's output is f32; lowering keeps f32 at the engine's inputs and outputs.
    check_output(got, want, torch.float32, ENGINE_PRECISIONS[precision], about)


# ---- controls: a small deliberate change to the network must exceed the f32 tolerance ----

def set_attrs(op: str, **attrs):
    def patch(network):
        layers = [layer for layer in network["layers"] if layer["op"] == op]
        assert layers, f"no '{op}' layer to change"
        for layer in layers:
            layer["attrs"].update(attrs)
    return patch


CONTROLS = {
    "gpt2_gelu_erf_instead_of_tanh": ("gpt2", set_attrs("gelu", approximate="none")),
    "llama_rotary_interleaved": ("llama", set_attrs("rotary_embedding", interleaved=1)),
    "resnet_basic_batch_norm_epsilon_1e-3": ("resnet_basic", set_attrs("batch_norm", epsilon=1e-3)),
}


@pytest.mark.parametrize("control", CONTROLS)
def test_control_is_detected(cli, control, tmp_path):
    model, patch = CONTROLS[control]
    got, want, about = run_model(cli, model, "", "f32", tmp_path, seed_of(control), patch)
    if got is None:
        pytest.skip(f"the changed network does not run (see test_model[{model}-f32])")
    error = relative_l2(got, want)
    print(f"changed network: relative L2 error {error:.2e}")
    assert error > DTYPES["f32"][1], f"the change went unnoticed: relative L2 error {error:.3e}\n{about}"


# ---- the torch modules against independent compositions ----

SANITY = [m for m in models.MODELS if hasattr(SPECS[m], "sanity")]


@pytest.mark.parametrize("model", SANITY)
def test_sanity(model):
    torch.manual_seed(seed_of("sanity", model))
    SPECS[model].sanity()
