"""tensoracle.Calibrator: activation ranges against NumPy over the same batches, weight scales against NumPy's
per-channel maxima, the quantized network (built as a CPU engine) against NumPy's float64 quantize-dequantize of the
same scales, the written network and weights read back with the official safetensors package, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file

import tensoracle

RNG = np.random.default_rng(5)
W1 = (RNG.standard_normal((16, 8)) * 0.4).astype(np.float32)
B1 = (RNG.standard_normal(16) * 0.1).astype(np.float32)
W2 = (RNG.standard_normal((4, 16)) * 0.4).astype(np.float32)
B2 = (RNG.standard_normal(4) * 0.1).astype(np.float32)


def network() -> tensoracle.Network:
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [-1, 8])
    a = net.add_activation("relu", net.add_linear(x, W1, B1))
    net.mark_output(net.add_linear(a, W2, B2), "y")
    return net


def fake_quant(t, scale, axis=None):
    """Quantize-dequantize in float64: round half to even of t/scale, clamped to [-128, 127]."""
    s = np.asarray(scale, dtype=np.float64)
    if axis is not None:
        s = s.reshape([-1] + [1] * (t.ndim - 1))
    return np.clip(np.round(t.astype(np.float64) / s), -128, 127) * s


def test_ranges_scales_and_quantized_network_match_numpy(tmp_path):
    net = network()
    calibrator = tensoracle.Calibrator(net)
    xs = [RNG.standard_normal((6, 8)).astype(np.float32) for _ in range(3)]
    for x in xs:
        calibrator.add_batch({"x": x})
    assert calibrator.batches == 3
    ranges = {r["tensor"]: r for r in calibrator.activation_ranges()}
    assert len(ranges) == 2
    x_all = np.concatenate(xs)
    assert ranges["x"]["max_abs"] == float(np.abs(x_all).max())
    hidden = np.maximum(x_all.astype(np.float64) @ W1.T.astype(np.float64) + B1, 0)
    [a_name] = [n for n in ranges if n != "x"]
    assert ranges[a_name]["layers"] == ["linear_1"]
    assert ranges[a_name]["amax"] == pytest.approx(float(hidden.max()), rel=1e-5)
    scales = {w["tensor"]: w for w in calibrator.weight_scales()}
    [w1_name] = [n for n, w in scales.items() if len(w["scales"]) == 16]
    np.testing.assert_allclose(scales[w1_name]["scales"], np.abs(W1).max(axis=1).astype(np.float64) / 127, rtol=1e-12)

    quantized = calibrator.quantized_network()
    config = tensoracle.BuilderConfig(profiles={"x": ([1, 8], [6, 8], [6, 8])}, time_kernels=False)
    engine = tensoracle.Engine.deserialize(tensoracle.Builder(config).build(quantized))
    got = engine.create_execution().run({"x": xs[0]})["y"]
    s1 = np.float32(np.array(scales[w1_name]["scales"], dtype=np.float32))
    [w2_name] = [n for n in scales if n != w1_name]
    s2 = np.array(scales[w2_name]["scales"], dtype=np.float32)
    xq = fake_quant(xs[0], np.float32(ranges["x"]["scale"]))
    a = np.maximum(xq @ fake_quant(W1, s1, axis=0).T + B1, 0).astype(np.float32)
    want = fake_quant(a, np.float32(ranges[a_name]["scale"])) @ fake_quant(W2, s2, axis=0).T + B2
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5

    side = calibrator.write(tmp_path / "q.json")
    assert side == str(tmp_path / "q.safetensors")
    written = load_file(side)
    q1 = written[w1_name + ".quantized"]
    assert q1.dtype == np.int8
    np.testing.assert_array_equal(q1, np.clip(np.round(W1.astype(np.float64) / s1[:, None]), -128, 127))
    back = tensoracle.Network.from_json_file(str(tmp_path / "q.json"))
    engine = tensoracle.Engine.deserialize(tensoracle.Builder(config).build(back))
    np.testing.assert_array_equal(engine.create_execution().run({"x": xs[0]})["y"], got)


def test_errors():
    net = network()
    with pytest.raises(tensoracle.InvalidArgumentError, match="entropy"):
        tensoracle.Calibrator(net, method="entropy", dtype="f8e4m3")
    with pytest.raises(tensoracle.InvalidArgumentError, match="median"):
        tensoracle.Calibrator(net, method="median")
    with pytest.raises(tensoracle.InvalidArgumentError, match="target 'tpu'"):
        tensoracle.Calibrator(net, target="tpu")
    calibrator = tensoracle.Calibrator(net)
    with pytest.raises(tensoracle.InvalidArgumentError, match="no batch"):
        calibrator.activation_ranges()
    with pytest.raises(tensoracle.InvalidArgumentError):
        calibrator.add_batch({"y": np.zeros((2, 8), np.float32)})
    weight_only = tensoracle.Calibrator(net, activations=False, per_channel_weights=False)
    assert weight_only.activation_ranges() == []
    assert all(len(w["scales"]) == 1 for w in weight_only.weight_scales())


def gpu_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_a_cuda_target_runs_the_batches_on_the_gpu():
    """target="cuda": the ranges are NumPy's over batches of two shapes (the engine is built again for the second).
    Without a GPU, adding a batch raises CudaError (UnsupportedError in a build without CUDA)."""
    net = network()
    calibrator = tensoracle.Calibrator(net, target="cuda")
    xs = [RNG.standard_normal((rows, 8)).astype(np.float32) for rows in (6, 6, 9)]
    if not gpu_visible():
        with pytest.raises((tensoracle.CudaError, tensoracle.UnsupportedError)):
            calibrator.add_batch({"x": xs[0]})
        return
    for x in xs:
        calibrator.add_batch({"x": x})
    ranges = {r["tensor"]: r for r in calibrator.activation_ranges()}
    x_all = np.concatenate(xs)
    assert ranges["x"]["max_abs"] == float(np.abs(x_all).max())
    hidden = np.maximum(x_all.astype(np.float64) @ W1.T.astype(np.float64) + B1, 0)
    [a_name] = [n for n in ranges if n != "x"]
    assert ranges[a_name]["amax"] == pytest.approx(float(hidden.max()), rel=1e-5)
    assert ranges[a_name]["values"] == hidden.size
