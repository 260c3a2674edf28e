"""Stand-ins that expose one buffer protocol of an array or tensor and nothing else, as a foreign library would."""

from __future__ import annotations


class ArrayInterfaceOnly:
    """Only __array_interface__ (host memory)."""

    def __init__(self, array):
        self._array = array
        self.__array_interface__ = array.__array_interface__


class CudaArrayInterfaceOnly:
    """Only __cuda_array_interface__ (what Numba and cuda-python arrays expose)."""

    def __init__(self, tensor):
        self._tensor = tensor
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


class DLPackOnly:
    """Only the DLPack protocol, forwarding to the wrapped object's producer."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()
