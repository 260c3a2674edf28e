"""Inference application for tiny_classifier: opens the engine through the cache and checks it against PyTorch/NumPy.

Usage: python examples/python/infer.py [WORKDIR]   (run it twice: the second run reuses the engine, graph not called)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import tensoracle  # noqa: E402
import tiny_classifier as model  # noqa: E402


def make_weights(path: Path) -> None:
    """Random weights for the example, written with the official safetensors package."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file(
        {
            "fc1.weight": (rng.standard_normal((model.HIDDEN, model.FEATURES)) * 0.2).astype(np.float32),
            "fc1.bias": rng.standard_normal(model.HIDDEN).astype(np.float32),
            "norm.weight": np.ones(model.HIDDEN, np.float32),
            "norm.bias": np.zeros(model.HIDDEN, np.float32),
            "fc2.weight": (rng.standard_normal((model.CLASSES, model.HIDDEN)) * 0.2).astype(np.float32),
            "fc2.bias": rng.standard_normal(model.CLASSES).astype(np.float32),
        },
        str(path),
    )


def reference(weights_path: Path, x: np.ndarray) -> np.ndarray:
    """The model in PyTorch when it is installed, else in NumPy."""
    from safetensors.numpy import load_file

    w = load_file(str(weights_path))
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        from math import erf

        h = x.astype(np.float64) @ w["fc1.weight"].T + w["fc1.bias"]
        h = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
        h = h * w["norm.weight"] + w["norm.bias"]
        y = h @ w["fc2.weight"].T + w["fc2.bias"]
        e = np.exp(y - y.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)).astype(np.float32)
    t = {k: torch.from_numpy(v) for k, v in w.items()}
    h = F.gelu(F.linear(torch.from_numpy(x), t["fc1.weight"], t["fc1.bias"]))
    h = F.layer_norm(h, (model.HIDDEN,), t["norm.weight"], t["norm.bias"])
    return torch.softmax(F.linear(h, t["fc2.weight"], t["fc2.bias"]), -1).numpy()


def main() -> int:
    workdir = Path(sys.argv[1] if len(sys.argv) > 1 else "tiny-classifier-work").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    weights = workdir / "model.safetensors"
    if not weights.exists():
        make_weights(weights)
    handle = tensoracle.open_engine(model.declaration, [weights], model.graph, cache_dir=workdir / "cache")
    print(f"engine {'built' if handle.built else 'reused'}: {handle.path}")
    x = np.random.default_rng(1).standard_normal((8, model.FEATURES)).astype(np.float32)
    if handle.engine.target == "cpu":
        probabilities = handle.create_execution().run({"features": x})["probabilities"]
    else:  # a CUDA engine: PyTorch tensors on the GPU through __cuda_array_interface__ / DLPack
        import torch

        features = torch.from_numpy(x).cuda()
        probabilities = handle.create_execution().run({"features": features})["probabilities"]
        torch.cuda.synchronize()
        probabilities = probabilities.cpu().numpy()
    result = tensoracle.compare(probabilities, reference(weights, x), rel_l2=1e-4)
    print(f"rel_l2_error {result['rel_l2_error']:.3g}, max_abs_error {result['max_abs_error']:.3g}: "
          f"{'passed' if result['passed'] else 'FAILED'}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
