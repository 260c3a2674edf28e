#!/usr/bin/env python3
"""Writes a few valid safetensors files with the official package, as seeds for the fuzzer corpus."""
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
from safetensors.numpy import save


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    seeds = {
        "valid_empty": ({}, None),
        "valid_metadata": ({"w": rng.standard_normal((2, 3)).astype(np.float32)}, {"format": "pt", "k": "v"}),
        "valid_all_dtypes": (
            {
                "f64": np.arange(3, dtype=np.float64),
                "f16": np.arange(4, dtype=np.float16),
                "bf16": np.arange(2).astype(ml_dtypes.bfloat16),
                "e4": np.arange(2).astype(ml_dtypes.float8_e4m3fn),
                "e5": np.arange(2).astype(ml_dtypes.float8_e5m2),
                "i64": np.arange(2, dtype=np.int64),
                "i32": np.arange(2, dtype=np.int32),
                "i16": np.arange(2, dtype=np.int16),
                "i8": np.arange(2, dtype=np.int8),
                "u8": np.arange(2, dtype=np.uint8),
                "b": np.array([True, False]),
                "scalar": np.array(1.5, dtype=np.float32),
                "empty": np.zeros((0, 3), dtype=np.float32),
            },
            None,
        ),
    }
    for name, (tensors, metadata) in seeds.items():
        (out / f"{name}.safetensors").write_bytes(save(tensors, metadata=metadata))


if __name__ == "__main__":
    main()
