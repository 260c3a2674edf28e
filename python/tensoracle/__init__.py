"""tensoracle: build inference engines from networks and safetensors weights, cache them, and run them.

The workflow of the reference package: a model package defines ``graph(weights) -> Network`` and an
``EngineDeclaration``; ``open_engine`` builds once (calling ``graph`` only on a cache miss) and reopens the
saved engine afterwards; ``handle.create_execution()`` runs it on caller buffers.
"""

from __future__ import annotations

import atexit

from . import _cuda_libraries

_cuda_libraries.preload()  # before the extension: see _cuda_libraries.preload

from . import _tensoracle  # noqa: E402
from ._buffers import stream_handle
from ._cache import (
    EngineDeclaration,
    EngineHandle,
    TensorSpec,
    cache_list,
    cache_prune,
    default_cache_directory,
    inspect,
    open_engine,
    read_engine_header,
)
from ._compare import compare
from ._calibrate import Calibrator
from ._convert import convert, list_checkpoint
from ._errors import (
    CorruptEngineError,
    CudaError,
    EngineCacheError,
    EngineConditionError,
    EngineIOError,
    Error,
    FormatError,
    GraphError,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    UnsupportedError,
)
from ._execution import Engine, EngineExecution, numpy_dtype

__version__: str = _tensoracle.__version__

Network = _tensoracle.Network
Tensor = _tensoracle.Tensor
Weight = _tensoracle.Weight
WeightStore = _tensoracle.WeightStore
BuilderConfig = _tensoracle.BuilderConfig
set_log_level = _tensoracle.set_log_level
set_log_callback = _tensoracle.set_log_callback
load_plugin_library = _tensoracle.load_plugin_library
loaded_plugins = _tensoracle.loaded_plugins
# A Python callback must not outlive the interpreter: the library would call it, or release it, after finalization.
atexit.register(_tensoracle.set_log_callback, None)


class Builder:
    """Builds engines from networks; build() may run on several threads at once."""

    def __init__(self, config: "BuilderConfig | None" = None) -> None:
        """A builder for one configuration (default: BuilderConfig(): CPU, fp32)."""
        self._impl = _tensoracle.Builder(config if config is not None else BuilderConfig())

    @property
    def config(self) -> BuilderConfig:
        """The configuration."""
        return self._impl.config

    def build(self, network: Network) -> bytes:
        """Verifies, optimizes and compiles the network; returns the serialized engine (GIL released)."""
        return self._impl.build(network)


__all__ = [
    "Builder",
    "BuilderConfig",
    "Calibrator",
    "CorruptEngineError",
    "CudaError",
    "Engine",
    "EngineCacheError",
    "EngineConditionError",
    "EngineDeclaration",
    "EngineExecution",
    "EngineHandle",
    "EngineIOError",
    "Error",
    "FormatError",
    "GraphError",
    "InvalidArgumentError",
    "IoError",
    "Network",
    "NotFoundError",
    "Tensor",
    "TensorSpec",
    "UnsupportedError",
    "Weight",
    "WeightStore",
    "cache_list",
    "cache_prune",
    "compare",
    "convert",
    "default_cache_directory",
    "inspect",
    "list_checkpoint",
    "load_plugin_library",
    "loaded_plugins",
    "numpy_dtype",
    "open_engine",
    "read_engine_header",
    "set_log_callback",
    "set_log_level",
    "stream_handle",
]
