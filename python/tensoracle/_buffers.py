"""Buffers and streams by protocol: ints, __cuda_array_interface__, __array_interface__, DLPack, __cuda_stream__."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

from . import _tensoracle

# NumPy typestr (without byte order) -> short dtype name.
_TYPESTR = {
    "f8": "f64",
    "f4": "f32",
    "f2": "f16",
    "i8": "i64",
    "i4": "i32",
    "i2": "i16",
    "i1": "i8",
    "u1": "u8",
    "b1": "bool",
}
_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13


@dataclass
class Buffer:
    """What a buffer object says about its memory."""

    address: int
    device: str  # "cpu" or "cuda"
    device_id: Optional[int]  # None when the protocol does not say
    dtype: Optional[str]  # short name; None when unknown
    shape: Optional[Tuple[int, ...]]
    contiguous: bool
    readonly: bool
    protocol: str
    keepalive: Any


def _c_contiguous(shape: Sequence[int], strides: Optional[Sequence[int]], itemsize: int) -> bool:
    if strides is None:
        return True
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _typestr_dtype(typestr: str, obj: Any) -> Optional[str]:
    order, code = typestr[0], typestr[1:]
    if order == ">" and code not in ("i1", "u1", "b1"):
        return None
    name = _TYPESTR.get(code)
    if name is None and hasattr(obj, "dtype"):
        # Extension dtypes (ml_dtypes' bfloat16 and float8) show as void types in typestr.
        try:
            name = _tensoracle.dtype_name(str(obj.dtype))
        except Exception:
            name = None
    return name


def _itemsize(dtype: Optional[str], typestr: Optional[str] = None) -> int:
    if dtype is not None:
        return int(_tensoracle.element_size(dtype))
    if typestr:
        try:
            return int(typestr[2:])
        except ValueError:
            return 1
    return 1


def _from_interface(obj: Any, interface: dict, device: str, protocol: str) -> Buffer:
    typestr = interface["typestr"]
    dtype = _typestr_dtype(typestr, obj)
    shape = tuple(int(d) for d in interface["shape"])
    strides = interface.get("strides")
    data = interface.get("data")
    if not isinstance(data, tuple):
        raise _tensoracle.InvalidArgumentError(f"{protocol} without a (pointer, read-only) data tuple is not supported")
    address, readonly = int(data[0]), bool(data[1])
    address += int(interface.get("offset", 0) or 0) if protocol == "__array_interface__" else 0
    contiguous = _c_contiguous(shape, strides, _itemsize(dtype, typestr))
    return Buffer(address, device, None, dtype, shape, contiguous, readonly, protocol, obj)


def _from_dlpack(obj: Any) -> Buffer:
    device_type, device_id = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (None, None)
    capsule = obj.__dlpack__()
    info = _tensoracle.dlpack_info(capsule)
    if device_type is None:
        device_type, device_id = info["device_type"], info["device_id"]
    if device_type in (_KDL_CPU, _KDL_CUDA_HOST):
        device = "cpu"
    elif device_type in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        device = "cuda"
    else:
        device = f"dlpack device type {device_type}"
    dtype = info["dtype"]
    shape = tuple(int(d) for d in info["shape"])
    strides = info["strides"]
    contiguous = strides is None or _c_contiguous(shape, [s for s in strides], 1)
    # DLPack strides count elements: compare with element counts.
    return Buffer(int(info["data"]), device, int(device_id), dtype, shape, contiguous, False, "__dlpack__", (obj, capsule))


def describe(obj: Any) -> Buffer:
    """Reads a buffer's address, device, dtype, shape and layout through the first protocol it implements."""
    if isinstance(obj, bool):
        raise _tensoracle.InvalidArgumentError("a buffer is an int address or an array object, not a bool")
    if isinstance(obj, int):
        return Buffer(obj, "unknown", None, None, None, True, False, "int", None)
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        return _from_interface(obj, interface, "cuda", "__cuda_array_interface__")
    interface = getattr(obj, "__array_interface__", None)
    if interface is not None:
        return _from_interface(obj, interface, "cpu", "__array_interface__")
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj)
    raise _tensoracle.InvalidArgumentError(
        f"{type(obj).__name__} is not a buffer: give an int address or an object with __dlpack__, "
        "__cuda_array_interface__ or __array_interface__"
    )


def stream_handle(stream: Any) -> int:
    """The CUDA stream handle (an int) of None, an int, or an object with __cuda_stream__ / cuda_stream / ptr."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise _tensoracle.InvalidArgumentError("a stream is an int handle or a stream object, not a bool")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        value = stream.__cuda_stream__()
        # The protocol returns (version, handle); accept a bare handle too.
        if isinstance(value, tuple):
            return int(value[1])
        return int(value)
    for attribute in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy.cuda.Stream, cuda-python
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise _tensoracle.InvalidArgumentError(
        f"{type(stream).__name__} is not a stream: give an int handle or an object with __cuda_stream__"
    )
