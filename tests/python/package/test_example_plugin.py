"""The example cubin plugin (examples/cubin_plugin) on a GPU, as the reference's test_example_plugin: the engine built,
then reused in a separate process without calling the graph; a new cache entry when the plugin library changes; two
executions at once; its outputs against NumPy in float64 (fp32) and with TF32-rounded inputs (the tf32-control
kernel); a CUDA graph capture and replay; inspect_library accepting its bundle and refusing another one.

Environment: TENSORACLE_EXAMPLE_PLUGIN (the example's plugin library, built for this GPU). Skips where PyTorch sees no
GPU; TENSORACLE_REQUIRE_GPU=1 turns a missing GPU or library into a failure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import tensoracle

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cubin_plugin"
LIBRARY = os.environ.get("TENSORACLE_EXAMPLE_PLUGIN", "")
REQUIRED = os.environ.get("TENSORACLE_REQUIRE_GPU") == "1"

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or not LIBRARY:
    if REQUIRED:
        raise RuntimeError("TENSORACLE_REQUIRE_GPU=1 but no GPU or no TENSORACLE_EXAMPLE_PLUGIN")
    pytest.skip("needs a CUDA GPU and the example plugin library (TENSORACLE_EXAMPLE_PLUGIN)", allow_module_level=True)


def graph(weights):
    """The example network with the Python API: y = 0.5 * (x · w + b) and y_tf32 = x · w with TF32-rounded inputs."""
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [-1, 64])
    h = net.add_plugin("dot", "1", [x, weights["dot.w"]], {"precision": "fp32"}, name="dot")[0]
    h = net.add_plugin("bias", "1", [h, weights["bias.b"]], name="bias")[0]
    net.mark_output(net.add_plugin("scale", "1", [h], {"alpha": 0.5}, name="scale")[0], "y")
    t = net.add_plugin("dot", "1", [x, weights["dot.w"]], {"precision": "tf32-control"}, name="dot_tf32")[0]
    net.mark_output(t, "y_tf32")
    return net


def declaration(library):
    return tensoracle.EngineDeclaration(
        name="example-cubin-plugin",
        graph_version=1,
        inputs=[tensoracle.TensorSpec("x", "f32", [-1, 64])],
        outputs=[tensoracle.TensorSpec("y", "f32", [-1, 32]), tensoracle.TensorSpec("y_tf32", "f32", [-1, 32])],
        builder=tensoracle.BuilderConfig(target="cuda", profiles={"x": ([1, 64], [8, 64], [64, 64])}),
        plugins=[library],
    )


def weights():
    import safetensors.numpy as stnp

    return stnp.load_file(str(EXAMPLE / "weights.safetensors"))


def tf32(a: np.ndarray) -> np.ndarray:
    """Rounds f32 values to TF32 (10 mantissa bits, to nearest, ties away from zero), as cvt.rna.tf32.f32."""
    bits = a.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def references(x: np.ndarray):
    w = weights()
    y = 0.5 * (x.astype(np.float64) @ w["dot.w"].astype(np.float64) + w["bias.b"])
    y_tf32 = tf32(x).astype(np.float64) @ tf32(w["dot.w"]).astype(np.float64)
    return y, y_tf32


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


def check(out, x):
    y, y_tf32 = references(x)
    assert rel(out["y"], y) < 1e-6
    assert rel(out["y_tf32"], y_tf32) < 1e-6
    # The control differs from the f32 product by TF32's rounding, far more than f32's.
    assert rel(out["y_tf32"], y / 0.5 - weights()["bias.b"]) > 1e-5


def open_in_child(library, cache_dir):
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import numpy as np, tensoracle, torch, test_example_plugin as t
        def graph(weights):
            raise RuntimeError("graph called on a hit")
        h = tensoracle.open_engine(t.declaration({str(library)!r}), [{str(EXAMPLE / "weights.safetensors")!r}],
                                   graph if sys.argv[1] == "reuse" else t.graph, cache_dir={str(cache_dir)!r})
        x = np.random.default_rng(4).standard_normal((5, 64)).astype(np.float32)
        out = h.create_execution().run({{"x": torch.from_numpy(x).cuda()}})
        torch.cuda.synchronize()
        t.check({{k: v.cpu().numpy() for k, v in out.items()}}, x)
        print(json.dumps({{"built": h.built, "path": str(h.path)}}))
        """
    )
    return lambda mode: subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True)


def last_json(result):
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_built_then_reused_in_another_process_and_rebuilt_for_a_changed_library(tmp_path):
    library = tmp_path / "libexample.so"
    shutil.copyfile(LIBRARY, library)
    run = open_in_child(library, tmp_path / "cache")
    first = last_json(run("build"))
    second = last_json(run("reuse"))
    assert first["built"] and not second["built"] and first["path"] == second["path"]
    with open(library, "ab") as f:  # the same code, another SHA-256: another engine
        f.write(b"\0" * 32)
    third = last_json(run("build"))
    assert third["built"] and third["path"] != first["path"]


def test_outputs_two_executions_at_once_and_a_cuda_graph(tmp_path):
    handle = tensoracle.open_engine(declaration(LIBRARY), [EXAMPLE / "weights.safetensors"], graph,
                                    cache_dir=tmp_path / "cache")
    xs = [np.random.default_rng(s).standard_normal((b, 64)).astype(np.float32) for s, b in ((1, 64), (2, 3))]
    results = [None, None]

    def work(i):
        execution = handle.create_execution()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(20):
                out = execution.run({"x": torch.from_numpy(xs[i]).cuda()}, stream=stream)
            stream.synchronize()
        results[i] = {k: v.cpu().numpy() for k, v in out.items()}

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        check(results[i], xs[i])

    # Captured by PyTorch's CUDA graph on its stream, replayed three times.
    execution = handle.create_execution()
    x = torch.from_numpy(xs[0]).cuda()
    y = torch.full((64, 32), float("nan"), device="cuda")
    y_tf32 = torch.full((64, 32), float("nan"), device="cuda")
    execution.set_input_shapes({"x": (64, 64)})
    for name, t in (("x", x), ("y", y), ("y_tf32", y_tf32)):
        execution.set_tensor_address(name, t)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        execution.enqueue(stream)  # the first, un-captured run
    stream.synchronize()
    y.fill_(float("nan"))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        execution.enqueue(stream)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    check({"y": y.cpu().numpy(), "y_tf32": y_tf32.cpu().numpy()}, xs[0])


def test_inspect_library_matches_its_bundle_only(tmp_path):
    from tensoracle import bundle

    report = bundle.inspect_wheel(LIBRARY, EXAMPLE / "bundle")
    assert report is not None
    other = tmp_path / "other-bundle"
    shutil.copytree(EXAMPLE / "bundle", other)
    cubin = other / "cubins" / "sm90" / "scale.cubin"
    data = bytearray(cubin.read_bytes())
    data[-1] ^= 0xFF  # another cubin than the library embeds
    cubin.write_bytes(bytes(data))
    with pytest.raises(Exception):
        bundle.inspect_wheel(LIBRARY, other)
