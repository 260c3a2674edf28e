# Host cost of the Python package's enqueue and run() against the C++ enqueue and PyTorch's own call overhead.
"""Builds a one-step engine and BERT-base (batch 1, seq 128, fp16), then measures each on the GPU in one run:

- C++: `tensoracle bench ENGINE` -> enqueue_ms (host time of the enqueue call), latency and target time;
- Python: the host time of `EngineExecution.enqueue(stream)` (the package's wrapper, with an int handle and with a
  torch.cuda.Stream), of the extension's raw binding, and of `run({"x": tensor})` (shapes, output allocation,
  binding and enqueue), each call timed alone with the stream drained before it;
- PyTorch: the host time of calling the same model eagerly (fp16) and of a CUDA graph replay (what
  torch.compile's reduce-overhead mode launches).

Usage (GPU machine): PYTHONPATH=SITE python3 bench/python_overhead.py --cli TENSORACLE --out DIR
Prints and writes DIR/python_overhead.json; medians in microseconds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

if "--child-without-torch" not in sys.argv:
    import torch

import tensoracle  # noqa: E402


def host_us(call, drain, iterations: int) -> dict:
    """Median and p90 of call()'s host time in microseconds; drain() (not timed) empties the stream first."""
    times = []
    for i in range(iterations + 20):
        drain()
        t0 = time.perf_counter_ns()
        call()
        t1 = time.perf_counter_ns()
        if i >= 20:
            times.append((t1 - t0) / 1000)
    times.sort()
    return {"p50": statistics.median(times), "p90": times[int(0.9 * (len(times) - 1))], "n": len(times)}


def enqueue_without_torch(engine_path: str, iterations: int) -> dict:
    """The package's enqueue in a process that never imported PyTorch (device memory and the stream from the CUDA
    runtime through ctypes), to tell the package's own cost from that of the CUDA libraries PyTorch loads first."""
    import ctypes

    cudart = ctypes.CDLL("libcudart.so.13")
    engine = tensoracle.Engine.load(engine_path)
    execution = engine.create_execution()
    execution.set_input_shapes({i["name"]: [max(d, 1) for d in i["profile"]["opt"]] for i in engine.inputs})
    keep = []
    for t in engine.inputs + engine.outputs:
        shape = execution.tensor_shape(t["name"])
        size = tensoracle._tensoracle.element_size(execution.tensor_dtype(t["name"]))
        for d in shape:
            size *= d
        pointer = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(size)) == 0
        keep.append(pointer)
        execution.set_tensor_address(t["name"], pointer.value)
    stream = ctypes.c_void_p()
    assert cudart.cudaStreamCreate(ctypes.byref(stream)) == 0
    return host_us(lambda: execution.enqueue(stream.value), lambda: cudart.cudaStreamSynchronize(stream), iterations)


def measure_engine(cli: str, engine_path: Path, x: "torch.Tensor", y: "torch.Tensor", iterations: int) -> dict:
    """The C++ command's enqueue against the package's on one engine (inputs x, output y: device tensors)."""
    # A process without PyTorch first, then `tensoracle bench`, then this process.
    child = subprocess.run([sys.executable, __file__, "--child-without-torch", str(engine_path), str(iterations)],
                           check=True, capture_output=True, text=True)
    bench = json.loads(subprocess.run([cli, "bench", engine_path, "-n", str(iterations)], check=True,
                                      capture_output=True, text=True).stdout)
    result = {"cpp_p50_us": {k[:-3]: bench[k]["p50"] * 1000 for k in ("enqueue_ms", "latency_ms", "target_time_ms")}}
    engine = tensoracle.Engine.load(engine_path)
    execution = engine.create_execution()
    execution.set_input_shapes({"x": list(x.shape)})
    execution.set_tensor_address("x", x)
    execution.set_tensor_address(engine.outputs[0]["name"], y)
    stream = torch.cuda.Stream()
    handle = stream.cuda_stream
    drain = stream.synchronize
    python = result["python"] = {"enqueue_int_stream_without_torch": json.loads(child.stdout.strip().splitlines()[-1])}
    python["enqueue_int_stream"] = host_us(lambda: execution.enqueue(handle), drain, iterations)
    python["enqueue_torch_stream"] = host_us(lambda: execution.enqueue(stream), drain, iterations)
    python["raw_binding_enqueue"] = host_us(lambda: execution._ctx.enqueue(handle), drain, iterations)
    python["run"] = host_us(lambda: execution.run({"x": x}, stream=stream), drain, iterations // 4)
    result["python_minus_cpp_enqueue_us"] = python["enqueue_int_stream"]["p50"] - result["cpp_p50_us"]["enqueue"]
    return result


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child-without-torch":
        print(json.dumps(enqueue_without_torch(sys.argv[2], int(sys.argv[3]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True, help="the tensoracle binary")
    ap.add_argument("--out", required=True, help="folder for the engines, weights and python_overhead.json")
    ap.add_argument("--iterations", type=int, default=2000)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n = args.iterations
    result = {"device": torch.cuda.get_device_name(), "iterations": n}

    # One step (relu on 1x1024): what the call itself costs when the engine launches almost nothing.
    (out / "one_step.json").write_text(json.dumps({
        "format": "tensoracle-network", "version": 1, "constants": [],
        "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 1024]}],
        "layers": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"], "attrs": {}}], "outputs": ["y"]}))
    subprocess.run([args.cli, "build", out / "one_step.json", "-o", out / "one_step.engine", "--target", "cuda", "-q"],
                   check=True)
    x1 = torch.randn(1, 1024, device="cuda")
    result["one_step"] = measure_engine(args.cli, out / "one_step.engine", x1, torch.empty_like(x1), n)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import pytorch_models

    spec = next(s for s in pytorch_models.model_specs() if s.key == "bert")
    torch.manual_seed(0)
    model = spec.create()
    from safetensors.torch import save_file

    save_file({k: v.detach().float().contiguous() for k, v in model.state_dict().items()}, str(out / "weights.safetensors"))
    spec.network().write(out / "net.json")
    shape = spec.input_shape(1)
    subprocess.run([args.cli, "build", out / "net.json", "-o", out / "bert_b1.engine", "--target", "cuda", "--precision",
                    "fp16", "--profile", "x=" + "x".join(map(str, shape)), "-q"], check=True)
    x = torch.randn(*shape, device="cuda")
    bert = result["bert_base_b1"] = measure_engine(args.cli, out / "bert_b1.engine", x,
                                                   torch.empty(*spec.output_shape(1), device="cuda"), n)
    bert["model"] = spec.title
    eager = model.to("cuda").half().eval()
    xh = x.half()
    sync = torch.cuda.synchronize
    with torch.inference_mode():
        pt = bert["pytorch"] = {"eager_call": host_us(lambda: eager(xh), sync, n // 4)}
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                eager(xh)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(graph):
            eager(xh)
        pt["cuda_graph_replay"] = host_us(graph.replay, sync, n)
    (out / "python_overhead.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
