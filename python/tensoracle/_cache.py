"""The reference's cache workflow: TensorSpec, EngineDeclaration, open_engine, EngineHandle, cache list/prune."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from . import _tensoracle
from ._execution import Engine, EngineExecution

PathLike = Union[str, "os.PathLike[str]"]
BuilderConfig = _tensoracle.BuilderConfig


@dataclass(frozen=True)
class TensorSpec:
    """An input or output the engine must have: name, dtype (short, NumPy or safetensors name) and shape (-1 where
    it varies)."""

    name: str
    dtype: Any
    shape: Tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _tensoracle.dtype_name(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))


@dataclass(frozen=True)
class EngineDeclaration:
    """Everything besides the weights that decides the engine a model package wants: its name, graph_version
    (raise it when the graph function changes), input/output specs, builder settings and plugin libraries."""

    name: str
    graph_version: int
    inputs: Tuple[TensorSpec, ...]
    outputs: Tuple[TensorSpec, ...]
    builder: Any = field(default_factory=lambda: _tensoracle.BuilderConfig())
    plugins: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "plugins", tuple(os.fspath(p) for p in self.plugins))


@dataclass(frozen=True)
class EngineHandle:
    """What open_engine returns: the shared engine, the .engine file it is saved in, whether this call built it,
    and the build conditions."""

    engine: Engine
    path: Path
    built: bool
    conditions: Dict[str, Any]

    def create_execution(self) -> EngineExecution:
        """A new execution unit (one per thread or CUDA graph); it keeps the engine alive."""
        return EngineExecution(self.engine)


def open_engine(
    declaration: EngineDeclaration,
    weight_files: Union[PathLike, Sequence[PathLike]],
    graph: Callable[[Any], Any],
    *,
    cache_dir: Optional[PathLike] = None,
    force_rebuild: bool = False,
) -> EngineHandle:
    """Opens the engine a declaration describes: reuses the saved one when its conditions match (without calling
    `graph`), else calls graph(WeightStore) -> Network, builds, checks and saves it atomically.

    Raises CorruptEngineError, EngineConditionError or EngineIOError (all EngineCacheError, a ValueError) for a saved
    engine that can't be used, IoError for files, and whatever `graph` or the builder raise. The GIL is released while
    weights are hashed and the engine is built.
    """
    if isinstance(weight_files, (str, os.PathLike)):
        weight_files = [weight_files]
    specs = lambda items: [(s.name, s.dtype, list(s.shape)) for s in items]  # noqa: E731
    impl, path, built, conditions = _tensoracle.open_engine(
        declaration.name,
        int(declaration.graph_version),
        specs(declaration.inputs),
        specs(declaration.outputs),
        declaration.builder,
        list(declaration.plugins),
        [os.fspath(p) for p in weight_files],
        graph,
        os.fspath(cache_dir) if cache_dir is not None else "",
        bool(force_rebuild),
    )
    return EngineHandle(Engine(impl), Path(path), built, json.loads(conditions))


def default_cache_directory() -> Path:
    """$XDG_CACHE_HOME/tensoracle, else ~/.cache/tensoracle (nothing is created)."""
    return Path(_tensoracle.default_cache_directory())


def cache_list(cache_dir: Optional[PathLike] = None) -> Dict[str, Any]:
    """The document `tensoracle cache list` prints, as a dict."""
    return json.loads(_tensoracle.list_cache(os.fspath(cache_dir) if cache_dir is not None else ""))


def cache_prune(
    cache_dir: Optional[PathLike] = None,
    *,
    unused_for: Union[float, str, None] = None,
    max_size: Union[int, str, None] = None,
    dry_run: bool = False,
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Removes engines not used for `unused_for` days, or the oldest until the cache fits `max_size` (bytes, or a
    size such as "1.5GiB"); exactly one of the two. Returns the (plan, result) documents `tensoracle cache prune`
    prints."""
    if (unused_for is None) == (max_size is None):
        raise _tensoracle.InvalidArgumentError("cache_prune needs exactly one of unused_for and max_size")
    plan, result = _tensoracle.prune_cache(
        os.fspath(cache_dir) if cache_dir is not None else "",
        "" if unused_for is None else repr(unused_for) if isinstance(unused_for, float) else str(unused_for),
        "" if max_size is None else str(max_size),
        bool(dry_run),
    )
    return json.loads(plan), json.loads(result)


def read_engine_header(path: PathLike) -> Dict[str, Any]:
    """An engine file's header (conditions, plan_sha256, shape_tensor_outputs, file_size, plan_offset), checked
    without reading the plan."""
    header = _tensoracle.read_engine_header(os.fspath(path))
    header["conditions"] = json.loads(header.pop("conditions_json"))
    return header


def inspect(source: Union[bytes, PathLike]) -> Dict[str, Any]:
    """The manifest of an engine, validated without loading it: plan bytes, a plan file or a cache .engine file."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return json.loads(_tensoracle.Engine.inspect(bytes(source)))
    path = os.fspath(source)
    with open(path, "rb") as stream:
        data = stream.read()
    if data.startswith(b"TENSORACLE\x01"):
        offset = _tensoracle.read_engine_header(path)["plan_offset"]
        data = data[offset:]
    return json.loads(_tensoracle.Engine.inspect(data, path))
