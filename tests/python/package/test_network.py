"""tensoracle.Network, WeightStore and Builder from Python, checked against NumPy formulas."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest
from safetensors.numpy import save_file

import small_model
import tensoracle


def build_and_run(net: tensoracle.Network, inputs: dict, profiles=None) -> dict:
    config = tensoracle.BuilderConfig(profiles=profiles, time_kernels=False)
    engine = tensoracle.Engine.deserialize(tensoracle.Builder(config).build(net))
    return engine.create_execution().run(inputs)


def test_graph_function_with_weights_matches_numpy(weights_file):
    weights = tensoracle.WeightStore.open(weights_file)
    assert weights.names() == sorted(["fc1.weight", "fc1.bias", "norm.weight", "norm.bias", "fc2.weight", "fc2.bias"])
    assert "fc1.weight" in weights and len(weights) == 6
    w = weights["fc1.weight"]
    assert (w.name, w.dtype, w.shape) == ("fc1.weight", "f32", [small_model.HIDDEN, small_model.IN])
    net = small_model.graph(weights)
    x = np.random.default_rng(1).standard_normal((5, small_model.IN)).astype(np.float32)
    out = build_and_run(net, {"x": x}, {"x": ([1, 8], [4, 8], [16, 8])})["probs"]
    np.testing.assert_allclose(out, small_model.reference(weights_file, x), rtol=1e-5, atol=1e-6)


def test_sharded_index(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full(2, 0.5, dtype=np.float32)
    save_file({"a": a}, str(tmp_path / "s1.safetensors"))
    save_file({"b": b}, str(tmp_path / "s2.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}))
    weights = tensoracle.WeightStore.open([index])
    assert weights.names() == ["a", "b"]
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [4, 3])
    net.mark_output(net.add_linear(x, weights["a"], weights["b"]), "y")
    xi = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(build_and_run(net, {"x": xi})["y"], xi @ a.T + b, rtol=1e-6)


def test_missing_weight_and_bad_file(tmp_path, weights_file):
    weights = tensoracle.WeightStore.open(weights_file)
    with pytest.raises(tensoracle.NotFoundError, match="nope"):
        weights["nope"]
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    with pytest.raises(tensoracle.FormatError, match="bad.safetensors"):
        tensoracle.WeightStore.open(bad)
    with pytest.raises(tensoracle.IoError):
        tensoracle.WeightStore.open(tmp_path / "absent.safetensors")


def test_numpy_constants_are_copied_and_kept_alive():
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [2, 3])
    w = np.random.default_rng(3).standard_normal((3, 3)).astype(np.float32)
    expected_w = w.copy()
    y = net.add_matmul(x, w, transpose_b=True)
    y = net.add_binary("add", y, np.array([1.0, 2.0, 3.0], dtype=np.float32))
    net.mark_output(net.add_activation("gelu", y, {"approximate": "tanh"}), "y")
    w[...] = 99.0  # the network holds a copy
    del w
    gc.collect()
    xi = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    out = build_and_run(net, {"x": xi})["y"]
    z = xi.astype(np.float64) @ expected_w.T.astype(np.float64) + [1.0, 2.0, 3.0]
    gelu = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))
    np.testing.assert_allclose(out, gelu, rtol=1e-5, atol=1e-6)


def test_typed_layers_match_numpy():
    rng = np.random.default_rng(5)
    net = tensoracle.Network()
    a = net.add_input("a", "f32", [2, 3, 4])
    b = net.add_input("b", "f32", [2, 3, 4])
    s = net.add_softmax(net.add_binary("mul", a, b), axis=1)
    t = net.add_transpose(s, [0, 2, 1])
    r = net.add_reshape(t, [2, 12])
    c = net.add_concat([r, r], axis=1)
    first, second = net.add_split(c, [10, 14], axis=1)
    net.mark_output(first, "first")
    net.mark_output(net.add_reduce("sum", second, [1], keep_dims=False), "total")
    net.mark_output(net.add_unary("exp", net.add_rms_norm(a, np.ones(4, np.float32), epsilon=1e-6)), "rms")
    ai = rng.standard_normal((2, 3, 4)).astype(np.float32)
    bi = rng.standard_normal((2, 3, 4)).astype(np.float32)
    out = build_and_run(net, {"a": ai, "b": bi})
    p = ai.astype(np.float64) * bi
    sm = np.exp(p - p.max(1, keepdims=True))
    sm /= sm.sum(1, keepdims=True)
    flat = sm.transpose(0, 2, 1).reshape(2, 12)
    cat = np.concatenate([flat, flat], axis=1)
    np.testing.assert_allclose(out["first"], cat[:, :10], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["total"], cat[:, 10:].sum(1), rtol=1e-5)
    rms = ai / np.sqrt((ai.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out["rms"], np.exp(rms), rtol=1e-5)


def test_attention_and_conv_match_numpy():
    rng = np.random.default_rng(6)
    net = tensoracle.Network()
    q = net.add_input("q", "f32", [1, 2, 3, 4])
    k = net.add_input("k", "f32", [1, 2, 5, 4])
    v = net.add_input("v", "f32", [1, 2, 5, 4])
    net.mark_output(net.add_attention(q, k, v), "attn")
    img = net.add_input("img", "f32", [1, 2, 5, 5])
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    net.mark_output(net.add_conv(img, w, None, padding=[1, 1]), "conv")
    qi, ki, vi = (rng.standard_normal(s).astype(np.float32) for s in ([1, 2, 3, 4], [1, 2, 5, 4], [1, 2, 5, 4]))
    ii = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    out = build_and_run(net, {"q": qi, "k": ki, "v": vi, "img": ii})
    s = qi.astype(np.float64) @ ki.transpose(0, 1, 3, 2) / 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(out["attn"], p @ vi, rtol=1e-5, atol=1e-6)
    padded = np.pad(ii.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 3, 5, 5))
    for o in range(3):
        for y in range(5):
            for x in range(5):
                conv[0, o, y, x] = (padded[0, :, y : y + 3, x : x + 3] * w[o]).sum()
    np.testing.assert_allclose(out["conv"], conv, rtol=1e-5, atol=1e-5)


def test_generic_add_layer_and_json_round_trip(weights_file):
    weights = tensoracle.WeightStore.open(weights_file)
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [-1, small_model.IN])
    (y,) = net.add_layer("linear", [x, weights["fc1.weight"], None], {}, name="fc")
    net.mark_output(y, "y")
    assert net.shape(y) == [-1, small_model.HIDDEN]
    assert net.dtype(y) == "f32"
    assert net.find("nothing") is None
    assert net.infer_shapes({"x": [3, small_model.IN]})["y"] == [3, small_model.HIDDEN]
    text = net.to_json()
    assert json.loads(text)["constants"][0]["weight"] == "fc1.weight"
    again = tensoracle.Network.from_json(text, weights)
    assert again.to_json() == text
    xi = np.ones((3, small_model.IN), np.float32)
    out = build_and_run(again, {"x": xi}, {"x": ([1, 8], [2, 8], [4, 8])})["y"]
    np.testing.assert_allclose(out, xi @ weights_file_array(weights_file).T, rtol=1e-5)


def weights_file_array(path):
    from safetensors.numpy import load_file

    return load_file(str(path))["fc1.weight"]


def test_graph_errors_carry_the_message():
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [2, 4])
    with pytest.raises(tensoracle.GraphError, match="linear") as info:
        net.add_linear(x, np.ones((3, 5), np.float32))
    assert isinstance(info.value, ValueError) and isinstance(info.value, tensoracle.Error)
    with pytest.raises(tensoracle.InvalidArgumentError, match="unknown dtype"):
        net.add_input("y", "float128", [1])
    with pytest.raises(tensoracle.GraphError):
        net.verify()  # no output yet
    with pytest.raises(tensoracle.InvalidArgumentError, match="pooling"):
        net.add_pool2d(x, "median", [2, 2])


def test_builder_errors():
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [-1, 4])
    net.mark_output(net.add_activation("relu", x), "y")
    with pytest.raises(tensoracle.InvalidArgumentError):
        tensoracle.Builder(tensoracle.BuilderConfig()).build(net)  # no profile for the dynamic input
    with pytest.raises(tensoracle.InvalidArgumentError):
        tensoracle.BuilderConfig(precision="fp7")
    with pytest.raises(tensoracle.FormatError):
        tensoracle.Engine.deserialize(b"not an engine")


def test_timing_cache_is_written_but_is_not_a_build_condition(weights_file, tmp_path):
    path = tmp_path / "timing.json"
    profiles = {"x": ([1, 8], [4, 8], [16, 8])}
    plain = tensoracle.BuilderConfig(profiles=profiles)
    cached = tensoracle.BuilderConfig(profiles=profiles, timing_cache=str(path))
    assert cached.timing_cache == str(path) and plain.timing_cache == ""
    assert cached.to_json() == plain.to_json()  # the cache key of open_engine does not see it
    net = small_model.graph(tensoracle.WeightStore.open(weights_file))
    tensoracle.Builder(cached).build(net)
    saved = json.loads(path.read_text())
    assert saved["format"] == "tensoracle-timing-cache" and saved["version"] == 2
    assert saved["identity"]["target"]["kind"] == "cpu"
    assert isinstance(saved["entries"], dict)  # the CPU has one kernel per op: nothing to time


def test_bfloat16_and_float8_numpy_constants_keep_their_bits():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(5)
    values = rng.standard_normal(6).astype(np.float32)
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [6])
    outputs = {}
    for name, dtype in (("bf16", ml_dtypes.bfloat16), ("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)):
        constant = values.astype(dtype)
        c = net.add_constant(constant, "c_" + name)
        assert net.dtype(c) == {"bf16": "bf16", "e4m3": "f8e4m3", "e5m2": "f8e5m2"}[name]
        # x + cast(c) in f32: the constant's values are exactly ml_dtypes' (its bits, read as that dtype)
        net.mark_output(net.add_binary("add", x, net.add_cast(c, "f32")), "y_" + name)
        outputs[name] = constant.astype(np.float32)
    x_value = rng.standard_normal(6).astype(np.float32)
    got = build_and_run(net, {"x": x_value})
    for name, want in outputs.items():
        np.testing.assert_array_equal(got["y_" + name], x_value + want)
    # A strided array is copied contiguous first, as for NumPy's own dtypes.
    strided = tensoracle.Network()
    s = strided.add_constant(np.arange(12, dtype=np.float32).astype(ml_dtypes.bfloat16)[::2], "s")
    strided.mark_output(strided.add_cast(s, "f32"), "y")
    np.testing.assert_array_equal(build_and_run(strided, {})["y"], np.arange(0, 12, 2, dtype=np.float32))
