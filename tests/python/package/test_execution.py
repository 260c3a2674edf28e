"""EngineExecution from Python: shapes, buffers by protocol (NumPy and small fake producers), streams, run()."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import small_model
import tensoracle
from protocol_wrappers import ArrayInterfaceOnly, DLPackOnly


@pytest.fixture
def handle(weights_file, cache_dir):
    return tensoracle.open_engine(small_model.declaration(), [weights_file], small_model.graph, cache_dir=cache_dir)


class FakeCudaArray:
    """Claims to be device memory through __cuda_array_interface__ (never dereferenced: it must be refused)."""

    def __init__(self, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (0x1000, False), "version": 3}


class FakeCudaDLPack(DLPackOnly):
    """A DLPack producer that says it lives on CUDA device 0."""

    def __dlpack_device__(self):
        return (2, 0)


class FakeStream:
    def __init__(self, handle):
        self._handle = handle

    def __cuda_stream__(self):
        return (0, self._handle)


def test_run_matches_numpy(handle, weights_file):
    execution = handle.create_execution()
    for batch in (1, 5, 16):
        x = np.random.default_rng(batch).standard_normal((batch, small_model.IN)).astype(np.float32)
        out = execution.run({"x": x})
        assert set(out) == {"probs"} and out["probs"].shape == (batch, small_model.OUT)
        np.testing.assert_allclose(out["probs"], small_model.reference(weights_file, x), rtol=1e-5, atol=1e-6)


def test_documented_flow_with_every_buffer_kind(handle, weights_file):
    execution = handle.create_execution()
    execution.set_input_shapes({"x": (3, small_model.IN)})
    assert execution.tensor_shape("probs") == (3, small_model.OUT)
    assert execution.tensor_dtype("x") == "f32" and execution.tensor_dtype("probs") == "f32"
    x = np.random.default_rng(8).standard_normal((3, small_model.IN)).astype(np.float32)
    reference = small_model.reference(weights_file, x)
    for wrap in (lambda a: a, ArrayInterfaceOnly, DLPackOnly, lambda a: a.ctypes.data):
        out = np.full((3, small_model.OUT), np.nan, np.float32)
        execution.set_tensor_address("x", wrap(x))
        execution.set_tensor_address("probs", wrap(out))
        execution.enqueue()
        np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-6)
    assert execution.tensor_address("x") == x.ctypes.data


def test_set_input_shapes_errors(handle):
    execution = handle.create_execution()
    with pytest.raises(tensoracle.InvalidArgumentError, match="'x'"):
        execution.set_input_shapes({"x": (17, small_model.IN)})  # above the profile
    with pytest.raises(tensoracle.InvalidArgumentError):
        execution.tensor_shape("probs")  # unusable after a failed setting
    with pytest.raises(tensoracle.InvalidArgumentError, match="'x'"):
        execution.set_input_shapes({"x": (2,)})  # wrong rank
    with pytest.raises(tensoracle.InvalidArgumentError, match="nope"):
        execution.set_input_shapes({"x": (2, small_model.IN), "nope": (1,)})
    with pytest.raises(tensoracle.InvalidArgumentError, match="'x'"):
        execution.set_input_shapes({})  # the ranged input is missing
    execution.set_input_shapes({"x": (2, small_model.IN)})
    assert execution.tensor_shape("probs") == (2, small_model.OUT)
    with pytest.raises(tensoracle.InvalidArgumentError):
        execution.tensor_shape("nope")


def test_buffers_are_checked_before_anything_runs(handle):
    execution = handle.create_execution()
    with pytest.raises(tensoracle.InvalidArgumentError, match="set_input_shapes"):
        execution.set_tensor_address("x", np.zeros((2, small_model.IN), np.float32))
    execution.set_input_shapes({"x": (2, small_model.IN)})
    cases = [
        ("x", np.zeros((2, small_model.IN), np.float64), "dtype is f64"),
        ("x", np.zeros((3, small_model.IN), np.float32), r"shape is \[3, 8\]"),
        ("x", np.zeros((small_model.IN, 2), np.float32).T, "not C-contiguous"),
        ("x", DLPackOnly(np.zeros((small_model.IN, 2), np.float32).T), "not C-contiguous"),
        ("x", FakeCudaArray((2, small_model.IN)), "cuda memory"),
        ("x", FakeCudaDLPack(np.zeros((2, small_model.IN), np.float32)), "cuda memory"),
        ("nope", np.zeros(1, np.float32), "not an input or output"),
        ("x", "a string", "not a buffer"),
    ]
    for name, buffer, message in cases:
        with pytest.raises(tensoracle.InvalidArgumentError, match=message) as info:
            execution.set_tensor_address(name, buffer)
        if name == "x":
            assert "'x'" in str(info.value) or "not a buffer" in str(info.value)
    readonly = np.zeros((2, small_model.OUT), np.float32)
    readonly.setflags(write=False)
    with pytest.raises(tensoracle.InvalidArgumentError, match="read-only"):
        execution.set_tensor_address("probs", readonly)
    with pytest.raises(tensoracle.InvalidArgumentError, match="missing"):
        execution.run({})
    with pytest.raises(tensoracle.InvalidArgumentError, match="dtype"):
        execution.run({"x": np.zeros((2, small_model.IN), np.float16)})


def test_streams(handle):
    execution = handle.create_execution()
    x = np.ones((1, small_model.IN), np.float32)
    out = execution.run({"x": x}, stream=None)["probs"]
    execution.enqueue(0)
    execution.enqueue(FakeStream(0))
    with pytest.raises(tensoracle.InvalidArgumentError, match="CPU engine"):
        execution.enqueue(FakeStream(1234))
    with pytest.raises(tensoracle.InvalidArgumentError, match="not a stream"):
        execution.enqueue("stream")
    assert tensoracle.stream_handle(FakeStream(77)) == 77
    assert np.isfinite(out).all()


def test_two_executions_on_two_threads(handle, weights_file):
    errors = []

    def work(seed):
        try:
            execution = handle.create_execution()
            for i in range(20):
                x = np.random.default_rng(seed * 100 + i).standard_normal((4, small_model.IN)).astype(np.float32)
                out = execution.run({"x": x})["probs"]
                np.testing.assert_allclose(out, small_model.reference(weights_file, x), rtol=1e-5, atol=1e-6)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_builder_engine_round_trip(weights_file, tmp_path):
    weights = tensoracle.WeightStore.open(weights_file)
    config = small_model.declaration().builder
    data = tensoracle.Builder(config).build(small_model.graph(weights))
    assert isinstance(data, bytes)
    plan = tmp_path / "plan.bin"
    plan.write_bytes(data)
    engine = tensoracle.Engine.load(plan)
    assert engine.target == "cpu" and engine.precision == "fp32"
    assert [t["name"] for t in engine.inputs] == ["x"] and engine.inputs[0]["profile"]["max"] == [16, 8]
    assert tensoracle.inspect(data) == engine.manifest()
    x = np.ones((2, small_model.IN), np.float32)
    np.testing.assert_allclose(
        engine.create_execution().run({"x": x})["probs"], small_model.reference(weights_file, x), rtol=1e-5
    )
