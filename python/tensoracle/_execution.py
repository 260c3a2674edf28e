"""Engine and EngineExecution: deserialized engines and the per-caller state that runs them on caller buffers."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _tensoracle
from ._buffers import Buffer, describe, stream_handle

PathLike = Union[str, "os.PathLike[str]"]

def numpy_dtype(dtype: str) -> Any:
    """The NumPy dtype of a short dtype name (bf16 and f8 through ml_dtypes, which must be installed)."""
    import numpy as np

    name = _tensoracle.numpy_name(dtype)
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


class Engine:
    """A deserialized engine: immutable, its weights on the target, shareable between threads."""

    def __init__(self, impl: _tensoracle.Engine) -> None:
        """Wraps an extension engine (use deserialize(), load() or open_engine())."""
        self._impl = impl

    @classmethod
    def deserialize(cls, data: bytes, display_name: str = "engine bytes") -> "Engine":
        """Validates and loads engine bytes (Builder.build's output). FormatError when damaged."""
        return cls(_tensoracle.Engine.deserialize(bytes(data), display_name))

    @classmethod
    def load(cls, path: PathLike) -> "Engine":
        """Reads and deserializes an engine plan file (IoError when it can't be read)."""
        return cls(_tensoracle.Engine.load(os.fspath(path)))

    @property
    def inputs(self) -> List[Dict[str, Any]]:
        """The inputs: [{name, dtype, shape (-1 where ranged), profile {min, opt, max}}]."""
        return self._impl.inputs

    @property
    def outputs(self) -> List[Dict[str, Any]]:
        """The outputs: [{name, dtype, shape}]."""
        return self._impl.outputs

    @property
    def target(self) -> str:
        """"cpu" or "cuda:N"."""
        return self._impl.target

    @property
    def precision(self) -> str:
        """fp32, tf32, fp16 or bf16."""
        return self._impl.precision

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights held on the target."""
        return self._impl.weight_bytes

    @property
    def context_memory_bytes(self) -> int:
        """Bytes of activation and scratch memory each execution allocates."""
        return self._impl.context_memory_bytes

    def manifest(self) -> Dict[str, Any]:
        """The manifest (tensors, steps, kernels, memory plan, target) as a dict."""
        import json

        return json.loads(self._impl.manifest_json())

    def create_execution(self) -> "EngineExecution":
        """A new execution unit with its own activation memory (one per thread or CUDA graph)."""
        return EngineExecution(self)

    def __repr__(self) -> str:
        return f"Engine(target={self.target!r}, precision={self.precision!r})"


class EngineExecution:
    """Runs an engine: set_input_shapes -> tensor_shape / tensor_dtype -> set_tensor_address -> enqueue.

    Used by one thread at a time. Buffers may be int addresses or objects implementing __dlpack__,
    __cuda_array_interface__ or __array_interface__; the execution keeps a reference to each bound object.
    """

    def __init__(self, engine: Union[Engine, Any]) -> None:
        """An execution of `engine` (an Engine or an EngineHandle)."""
        self._engine: Engine = getattr(engine, "engine", engine)
        self._ctx = self._engine._impl.create_execution_context()
        target = self._engine.target
        self._device = "cpu" if target == "cpu" else "cuda"
        self._device_id = None if target == "cpu" else int(target.split(":")[1])
        self._inputs = {t["name"]: t for t in self._engine.inputs}
        self._outputs = {t["name"]: t for t in self._engine.outputs}
        self._bound: Dict[str, Any] = {}

    @property
    def engine(self) -> Engine:
        """The engine this execution runs (kept alive by it)."""
        return self._engine

    def set_input_shapes(self, shapes: Mapping[str, Sequence[int]]) -> None:
        """Sets all ranged input shapes together; InvalidArgumentError (a ValueError) names the input on failure."""
        self._ctx.set_input_shapes({name: [int(d) for d in shape] for name, shape in shapes.items()})

    def tensor_shape(self, name: str) -> Tuple[int, ...]:
        """Concrete shape of an input or output for the current input shapes."""
        return tuple(self._ctx.tensor_shape(name))

    def tensor_dtype(self, name: str) -> str:
        """Short dtype name ("f32", "f16", ...) of an input or output."""
        return self._ctx.tensor_dtype(name)

    def _check(self, name: str, buffer: Buffer) -> None:
        if name not in self._inputs and name not in self._outputs:
            raise _tensoracle.InvalidArgumentError(
                f"'{name}' is not an input or output of this engine (inputs: {sorted(self._inputs)}, "
                f"outputs: {sorted(self._outputs)})"
            )
        if buffer.protocol == "int":
            return
        role = "input" if name in self._inputs else "output"
        where = "host memory" if self._device == "cpu" else f"CUDA device {self._device_id} memory"
        if buffer.device != self._device:
            raise _tensoracle.InvalidArgumentError(
                f"{role} '{name}': the buffer ({buffer.protocol}) is in {buffer.device} memory but this engine "
                f"({self._engine.target}) needs {where}"
            )
        device_id = buffer.device_id
        if self._device == "cuda" and device_id is None and buffer.address != 0:
            # __cuda_array_interface__ names no device: CUDA says where the pointer is (unknown without a driver).
            kind, located = _tensoracle.locate_pointer(buffer.address)
            if kind in ("host", "pinned_host"):
                raise _tensoracle.InvalidArgumentError(
                    f"{role} '{name}': the buffer ({buffer.protocol}) points to {kind.replace('_', ' ')} memory, not "
                    f"device memory, but this engine ({self._engine.target}) needs {where}"
                )
            if kind in ("device", "managed"):
                device_id = located
        if self._device == "cuda" and device_id is not None and device_id != self._device_id:
            raise _tensoracle.InvalidArgumentError(
                f"{role} '{name}': the buffer is on CUDA device {device_id} but the engine runs on "
                f"device {self._device_id}"
            )
        expected_dtype = self._ctx.tensor_dtype(name)
        if buffer.dtype != expected_dtype:
            raise _tensoracle.InvalidArgumentError(
                f"{role} '{name}': the buffer's dtype is {buffer.dtype or 'not one tensoracle knows'} but the "
                f"engine's is {expected_dtype}"
            )
        if not self._ctx.shapes_ready():
            raise _tensoracle.InvalidArgumentError(
                f"{role} '{name}': set the ranged input shapes with set_input_shapes before binding buffers"
            )
        expected_shape = self.tensor_shape(name)
        if buffer.shape != expected_shape:
            raise _tensoracle.InvalidArgumentError(
                f"{role} '{name}': the buffer's shape is {list(buffer.shape or ())} but the engine's is "
                f"{list(expected_shape)} for the current input shapes"
            )
        if not buffer.contiguous:
            raise _tensoracle.InvalidArgumentError(
                f"{role} '{name}': the buffer is not C-contiguous; pass a contiguous copy"
            )
        if role == "output" and buffer.readonly:
            raise _tensoracle.InvalidArgumentError(f"output '{name}': the buffer is read-only")

    def set_tensor_address(self, name: str, address: Any) -> None:
        """Binds an input or output to an int address or to an array object (checked against the tensor's
        device, dtype, shape and layout before anything runs; the object is kept alive while bound)."""
        buffer = describe(address)
        self._check(name, buffer)
        self._ctx.set_tensor_address(name, buffer.address)
        self._bound[name] = buffer.keepalive

    def tensor_address(self, name: str) -> int:
        """The address bound to a tensor (0 when unbound)."""
        return self._ctx.tensor_address(name)

    def enqueue(self, stream: Any = 0) -> None:
        """Runs the engine on a CUDA stream (int handle or stream object); CPU engines run to completion and take
        stream 0. The GIL is released while it runs."""
        handle = stream_handle(stream)
        if self._device == "cpu" and handle != 0:
            raise _tensoracle.InvalidArgumentError("a CPU engine runs on the calling thread: pass stream=0")
        self._ctx.enqueue(handle)

    @property
    def graph_mode(self) -> bool:
        """Graph mode (off by default; CUDA engines). While on, enqueue captures the engine into a CUDA graph the first
        time and then launches that graph, capturing again after set_input_shapes changed a shape or when a bound address changed:
        the host's per-kernel launch cost goes away, results are bit-identical. No effect on CPU engines."""
        return bool(self._ctx.graph_mode)

    @graph_mode.setter
    def graph_mode(self, enabled: bool) -> None:
        self._ctx.graph_mode = bool(enabled)

    @property
    def graph_captures(self) -> int:
        """How many times graph mode captured the engine (steady while enqueue replays)."""
        return int(self._ctx.graph_captures)

    def enqueue_profiled(self, stream: Any = 0) -> List[Dict[str, Any]]:
        """Enqueues with timing around each step, waits, and returns [{layer, kernel, milliseconds}]."""
        return self._ctx.enqueue_profiled(stream_handle(stream))

    def run(self, inputs: Mapping[str, Any], stream: Any = 0) -> Dict[str, Any]:
        """Sets the input shapes from the arrays, allocates only the outputs, runs, and returns {name: output}.

        CPU engines take and return NumPy arrays (any host array with a buffer protocol is accepted as input).
        CUDA engines take device arrays and return outputs made by the inputs' own library (found through the
        arrays themselves, never imported here); then the call waits for nothing: synchronize `stream` yourself.
        """
        unknown = sorted(set(inputs) - set(self._inputs))
        if unknown:
            raise _tensoracle.InvalidArgumentError(
                f"{unknown} are not inputs of this engine (inputs: {sorted(self._inputs)})"
            )
        missing = sorted(set(self._inputs) - set(inputs))
        if missing:
            raise _tensoracle.InvalidArgumentError(f"run() needs every input; missing: {missing}")
        buffers = {name: describe(value) for name, value in inputs.items()}
        for name, buffer in buffers.items():
            if buffer.protocol == "int":
                raise _tensoracle.InvalidArgumentError(f"input '{name}': run() takes arrays, not addresses")
        self.set_input_shapes({name: buffer.shape for name, buffer in buffers.items()})
        for name, value in inputs.items():
            buffer = buffers[name]
            self._check(name, buffer)
            self._ctx.set_tensor_address(name, buffer.address)
            self._bound[name] = buffer.keepalive
        results: Dict[str, Any] = {}
        for name in self._outputs:
            shape, dtype = self.tensor_shape(name), self.tensor_dtype(name)
            if self._device == "cpu":
                import numpy as np

                out = np.empty(shape, dtype=numpy_dtype(dtype))
            else:
                out = _empty_like_library(next(iter(inputs.values())), shape, dtype)
            self.set_tensor_address(name, out)
            results[name] = out
        self.enqueue(stream)
        return results

    def __repr__(self) -> str:
        return f"EngineExecution(engine={self._engine!r})"


def _empty_like_library(example: Any, shape: Tuple[int, ...], dtype: str) -> Any:
    """An uninitialized device array of the library `example` comes from (PyTorch, CuPy or an array-API library)."""
    module = sys.modules.get(type(example).__module__.split(".")[0])
    name = _tensoracle.numpy_name(dtype)
    if hasattr(example, "new_empty") and module is not None:  # PyTorch
        return example.new_empty(shape, dtype=getattr(module, name))
    if hasattr(example, "__array_namespace__"):  # JAX and other array-API libraries
        xp = example.__array_namespace__()
        return xp.empty(shape, dtype=getattr(xp, name))
    if module is not None and callable(getattr(module, "empty", None)) and hasattr(module, name):
        # CuPy (whose ndarray has no __array_namespace__ in 14.x) and NumPy-like device libraries: module.empty
        # allocates on the current device, which holds the inputs.
        return module.empty(shape, dtype=getattr(module, name))
    raise _tensoracle.UnsupportedError(
        f"run() can't allocate outputs like a {type(example).__name__}: allocate them and use set_tensor_address"
    )
