"""tensoracle's exception classes (defined by the extension so C++ errors map onto them)."""

from __future__ import annotations

from . import _tensoracle

Error = _tensoracle.Error
InvalidArgumentError = _tensoracle.InvalidArgumentError
NotFoundError = _tensoracle.NotFoundError
IoError = _tensoracle.IoError
FormatError = _tensoracle.FormatError
UnsupportedError = _tensoracle.UnsupportedError
CudaError = _tensoracle.CudaError
GraphError = _tensoracle.GraphError
EngineCacheError = _tensoracle.EngineCacheError
CorruptEngineError = _tensoracle.CorruptEngineError
EngineConditionError = _tensoracle.EngineConditionError
EngineIOError = _tensoracle.EngineIOError

__all__ = [
    "Error",
    "InvalidArgumentError",
    "NotFoundError",
    "IoError",
    "FormatError",
    "UnsupportedError",
    "CudaError",
    "GraphError",
    "EngineCacheError",
    "CorruptEngineError",
    "EngineConditionError",
    "EngineIOError",
]
