"""A small model package used by the Python package tests: weights, graph function, declaration, NumPy formula."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

import tensoracle

IN, HIDDEN, OUT = 8, 16, 4


def make_weights(path: Path, seed: int = 0) -> Path:
    """Writes the model's weights with the official safetensors package."""
    rng = np.random.default_rng(seed)
    save_file(
        {
            "fc1.weight": rng.standard_normal((HIDDEN, IN)).astype(np.float32),
            "fc1.bias": rng.standard_normal(HIDDEN).astype(np.float32),
            "norm.weight": rng.standard_normal(HIDDEN).astype(np.float32),
            "norm.bias": rng.standard_normal(HIDDEN).astype(np.float32),
            "fc2.weight": rng.standard_normal((OUT, HIDDEN)).astype(np.float32),
            "fc2.bias": rng.standard_normal(OUT).astype(np.float32),
        },
        str(path),
    )
    return path


def graph(weights: tensoracle.WeightStore) -> tensoracle.Network:
    """x [B, IN] -> linear -> layer norm -> relu -> linear -> softmax."""
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [-1, IN])
    h = net.add_linear(x, weights["fc1.weight"], weights["fc1.bias"])
    h = net.add_layer_norm(h, weights["norm.weight"], weights["norm.bias"], epsilon=1e-5)
    h = net.add_activation("relu", h)
    y = net.add_linear(h, weights["fc2.weight"], weights["fc2.bias"])
    net.mark_output(net.add_softmax(y, axis=-1), "probs")
    return net


def declaration(graph_version: int = 1, out_dtype: str = "f32") -> tensoracle.EngineDeclaration:
    """The engine the model wants: batch 1..16 on the CPU."""
    return tensoracle.EngineDeclaration(
        name="small-mlp",
        graph_version=graph_version,
        inputs=(tensoracle.TensorSpec("x", "f32", (-1, IN)),),
        outputs=(tensoracle.TensorSpec("probs", out_dtype, (-1, OUT)),),
        builder=tensoracle.BuilderConfig(
            target="cpu", profiles={"x": ([1, IN], [4, IN], [16, IN])}, time_kernels=False
        ),
    )


def reference(weights_path: Path, x: np.ndarray) -> np.ndarray:
    """The same model in NumPy (float64), reading the weights with the official package."""
    from safetensors.numpy import load_file

    w = {k: v.astype(np.float64) for k, v in load_file(str(weights_path)).items()}
    h = x.astype(np.float64) @ w["fc1.weight"].T + w["fc1.bias"]
    mean = h.mean(-1, keepdims=True)
    var = h.var(-1, keepdims=True)
    h = (h - mean) / np.sqrt(var + 1e-5) * w["norm.weight"] + w["norm.bias"]
    h = np.maximum(h, 0)
    y = h @ w["fc2.weight"].T + w["fc2.bias"]
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
