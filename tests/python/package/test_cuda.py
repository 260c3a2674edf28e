"""The package on a GPU: CUDA engines on PyTorch and CuPy buffers (DLPack, __cuda_array_interface__), caller streams,
CUDA graph capture, two threads, and host or wrong buffers refused. Skips where PyTorch sees no GPU."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading

import numpy as np
import pytest

import small_model
import tensoracle
from protocol_wrappers import CudaArrayInterfaceOnly, DLPackOnly

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU visible to PyTorch", allow_module_level=True)


@pytest.fixture
def handle(weights_file, cache_dir):
    base = small_model.declaration()
    config = tensoracle.BuilderConfig(target="cuda", profiles={"x": ([1, 8], [4, 8], [16, 8])})
    declaration = dataclasses.replace(base, builder=config)
    return tensoracle.open_engine(declaration, [weights_file], small_model.graph, cache_dir=cache_dir)


def inputs(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, small_model.IN)).astype(np.float32)


def check(weights_file, x: np.ndarray, probs: np.ndarray) -> None:
    want = small_model.reference(weights_file, x)
    assert np.abs(probs - want).max() < 1e-5


def test_run_takes_and_returns_torch_tensors(handle, weights_file):
    assert handle.engine.target.startswith("cuda")
    x = inputs(5)
    execution = handle.create_execution()
    out = execution.run({"x": torch.from_numpy(x).cuda()})
    torch.cuda.synchronize()
    assert isinstance(out["probs"], torch.Tensor) and out["probs"].is_cuda
    check(weights_file, x, out["probs"].cpu().numpy())


@pytest.mark.parametrize("wrap", [lambda t: t, CudaArrayInterfaceOnly, DLPackOnly], ids=["torch", "cuda_array_interface", "dlpack"])
def test_buffers_by_protocol_on_a_caller_stream(handle, weights_file, wrap):
    x = inputs(7, seed=1)
    dx = torch.from_numpy(x).cuda()
    dy = torch.full((7, small_model.OUT), float("nan"), device="cuda")
    execution = handle.create_execution()
    execution.set_input_shapes({"x": (7, small_model.IN)})
    execution.set_tensor_address("x", wrap(dx))
    execution.set_tensor_address("probs", wrap(dy))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    execution.enqueue(stream)
    stream.synchronize()
    check(weights_file, x, dy.cpu().numpy())


def test_cupy_arrays(handle, weights_file):
    cupy = pytest.importorskip("cupy")
    x = inputs(3, seed=2)
    execution = handle.create_execution()
    out = execution.run({"x": cupy.asarray(x)})
    cupy.cuda.runtime.deviceSynchronize()
    assert isinstance(out["probs"], cupy.ndarray)
    check(weights_file, x, cupy.asnumpy(out["probs"]))
    # A CuPy stream object.
    dy = cupy.empty((3, small_model.OUT), cupy.float32)
    execution.set_tensor_address("probs", dy)
    stream = cupy.cuda.Stream(non_blocking=True)
    execution.enqueue(stream)
    stream.synchronize()
    check(weights_file, x, cupy.asnumpy(dy))


def test_cuda_graph_capture_replays_bit_identically(handle):
    x = inputs(4, seed=3)
    dx = torch.from_numpy(x).cuda()
    plain = torch.empty((4, small_model.OUT), device="cuda")
    graphed = torch.full((4, small_model.OUT), float("nan"), device="cuda")
    execution = handle.create_execution()
    execution.set_input_shapes({"x": (4, small_model.IN)})
    execution.set_tensor_address("x", dx)
    execution.set_tensor_address("probs", plain)
    execution.enqueue(torch.cuda.current_stream())
    torch.cuda.synchronize()
    execution.set_tensor_address("probs", graphed)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        execution.enqueue(torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert torch.isnan(graphed).all(), "capture ran the work instead of recording it"
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(graphed, plain)


def test_graph_mode_replays_and_captures_again_on_changes(handle):
    x = inputs(4, seed=4)
    dx = torch.from_numpy(x).cuda()
    plain = torch.empty((4, small_model.OUT), device="cuda")
    reference = handle.create_execution()
    reference.set_input_shapes({"x": (4, small_model.IN)})
    reference.set_tensor_address("x", dx)
    reference.set_tensor_address("probs", plain)
    reference.enqueue(torch.cuda.current_stream())

    execution = handle.create_execution()
    assert execution.graph_mode is False
    execution.graph_mode = True
    execution.set_input_shapes({"x": (4, small_model.IN)})
    first = torch.full((4, small_model.OUT), float("nan"), device="cuda")
    execution.set_tensor_address("x", dx)
    execution.set_tensor_address("probs", first)
    for _ in range(3):
        execution.enqueue(torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert torch.equal(first, plain)
    assert execution.graph_captures == 1
    second = torch.full((4, small_model.OUT), float("nan"), device="cuda")
    execution.set_tensor_address("probs", second)  # another address: captured again
    execution.enqueue(torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert torch.equal(second, plain)
    assert execution.graph_captures == 2
    execution.set_input_shapes({"x": (4, small_model.IN)})  # the shapes prepared already: the graph replays
    execution.enqueue(torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert execution.graph_captures == 2
    assert torch.equal(second, plain)
    execution.set_input_shapes({"x": (2, small_model.IN)})  # another shape: prepared again, captured again
    execution.enqueue(torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert execution.graph_captures == 3


def test_two_executions_on_two_threads(handle, weights_file):
    results, errors = {}, []

    def work(seed):
        try:
            x = inputs(6, seed=seed)
            execution = handle.create_execution()
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(20):
                    out = execution.run({"x": torch.from_numpy(x).cuda()}, stream=stream)
            stream.synchronize()
            results[seed] = (x, out["probs"].cpu().numpy())
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in (10, 11)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for x, probs in results.values():
        check(weights_file, x, probs)


def test_host_and_wrong_buffers_are_refused_naming_the_tensor(handle):
    execution = handle.create_execution()
    execution.set_input_shapes({"x": (2, small_model.IN)})
    for bad in (np.zeros((2, small_model.IN), np.float32), torch.zeros((2, small_model.IN))):
        with pytest.raises(tensoracle.InvalidArgumentError, match="'x'"):
            execution.set_tensor_address("x", bad)
    with pytest.raises(tensoracle.InvalidArgumentError, match="'x'"):
        execution.set_tensor_address("x", torch.zeros((2, small_model.IN), dtype=torch.float16, device="cuda"))
    with pytest.raises(tensoracle.InvalidArgumentError, match="'x'"):
        execution.set_tensor_address("x", torch.zeros((3, small_model.IN), device="cuda"))
    with pytest.raises(tensoracle.InvalidArgumentError, match="'x'"):
        execution.set_tensor_address("x", torch.zeros((small_model.IN, 2), device="cuda").t())


class HostCudaArrayInterface:
    """__cuda_array_interface__ over host memory: what a wrong or careless producer hands over."""

    def __init__(self, array):
        self._array = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str, "strides": None,
                                         "data": (array.ctypes.data, False), "version": 3}


def test_cuda_array_interface_buffers_are_located_by_cuda(handle):
    # The protocol names no device: CUDA's pointer attributes give it, so host memory is refused before anything runs.
    execution = handle.create_execution()
    execution.set_input_shapes({"x": (2, small_model.IN)})
    host = np.zeros((2, small_model.IN), np.float32)
    with pytest.raises(tensoracle.InvalidArgumentError, match="input 'x'.* host memory, not device.*CUDA device 0"):
        execution.set_tensor_address("x", HostCudaArrayInterface(host))
    pinned = torch.zeros((2, small_model.IN)).pin_memory()
    with pytest.raises(tensoracle.InvalidArgumentError, match="input 'x'.*pinned host memory"):
        execution.set_tensor_address("x", HostCudaArrayInterface(pinned.numpy()))
    on_device = torch.zeros((2, small_model.IN), device="cuda")
    assert tensoracle._tensoracle.locate_pointer(host.ctypes.data) == ("host", -1)
    assert tensoracle._tensoracle.locate_pointer(pinned.data_ptr())[0] == "pinned_host"
    assert tensoracle._tensoracle.locate_pointer(on_device.data_ptr()) == ("device", torch.cuda.current_device())
    execution.set_tensor_address("x", CudaArrayInterfaceOnly(on_device))  # accepted


@pytest.mark.parametrize("order", ["import tensoracle, torch", "import torch, tensoracle"])
def test_tensoracle_and_torch_in_one_process_in_either_order(order):
    # Each once aborted the process when tensoracle came first (two copies of cuDNN).
    code = f"{order}; torch.ones(4, device='cuda').sum().item(); print(tensoracle._cuda_libraries.preload())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
