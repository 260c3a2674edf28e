"""NetworkBuilder: writes the JSON form of a tensoracle network (docs/network-json.md) from Python.

    b = NetworkBuilder()
    x = b.input("x", "f32", [-1, 64])
    y = b.layer("linear", [x, b.weight("fc1.weight"), b.weight("fc1.bias")], name="fc1")
    b.output(b.layer("gelu", [y], {"approximate": "tanh"}))
    json.dumps(b.to_json())

Every method returns the tensor name(s) it defines, so layers chain like function calls.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence


class NetworkBuilder:
    def __init__(self, weights_file: str = "weights.safetensors"):
        self.weights_file = weights_file  # relative to the JSON file's folder
        self._inputs: list[dict] = []
        self._constants: list[dict] = []
        self._layers: list[dict] = []
        self._outputs: list[str] = []
        self._names: set[str] = set()
        self._counter = 0

    def _define(self, name: str) -> str:
        if name in self._names:
            raise ValueError(f"tensor or layer name '{name}' is defined twice")
        self._names.add(name)
        return name

    def input(self, name: str, dtype: str, shape: Sequence[int]) -> str:
        """A network input; -1 in `shape` marks a dynamic dimension."""
        self._inputs.append({"name": self._define(name), "dtype": dtype, "shape": list(shape)})
        return name

    def weight(self, name: str, file: str | None = None) -> str:
        """A constant that refers to tensor `name` of the weights file (the constant takes the same name)."""
        self._constants.append({"name": self._define(name), "weight": name, "file": file or self.weights_file})
        return name

    def constant(self, name: str, values: Sequence[float], dtype: str, shape: Sequence[int]) -> str:
        """A small inline constant (at most 4096 elements)."""
        values = [float(v) if math.isfinite(v) else str(float(v)) for v in values]
        if len(values) != math.prod(shape):
            raise ValueError(f"constant '{name}': {len(values)} values for shape {list(shape)}")
        self._constants.append({"name": self._define(name), "dtype": dtype, "shape": list(shape), "values": values})
        return name

    def scalar(self, name: str, value: float, dtype: str) -> str:
        return self.constant(name, [value], dtype, [])

    def layer(self, op: str, inputs: Sequence[str | None], attrs: dict | None = None, name: str | None = None,
              num_outputs: int = 1) -> str | list[str]:
        """Adds a layer; None in `inputs` is an absent optional input. The outputs are named after the
        layer (NAME, or NAME.0, NAME.1, ... when there are several); returns the name or the list."""
        if name is None:
            self._counter += 1
            name = f"{op}_{self._counter}"
        self._define(name)
        outputs = [name] if num_outputs == 1 else [self._define(f"{name}.{i}") for i in range(num_outputs)]
        self._layers.append({"name": name, "op": op, "inputs": list(inputs), "outputs": outputs, "attrs": dict(attrs or {})})
        return outputs[0] if num_outputs == 1 else outputs

    def output(self, *names: str) -> None:
        self._outputs.extend(names)

    def to_json(self) -> dict:
        return {"format": "tensoracle-network", "version": 1, "inputs": self._inputs, "constants": self._constants,
                "layers": self._layers, "outputs": self._outputs}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1))
