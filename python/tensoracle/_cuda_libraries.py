"""Loads cuBLASLt, cuDNN and NVRTC from NVIDIA's PyPI wheels, when installed, before the extension loads the library."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os

# (library file pattern, wheel packages that may hold it): what libtensoracle.so links (cuDNN) and opens by soname at
# run time (cuBLASLt, NVRTC and its builtins). CUDA 13's wheels put their libraries in nvidia/cu13/lib; older ones in
# nvidia/<name>/lib.
_WHEEL_LIBRARIES = (
    ("libcublasLt.so.[0-9]*", ("nvidia.cu13", "nvidia.cublas")),
    ("libcudnn.so.[0-9]*", ("nvidia.cudnn", "nvidia.cu13")),
    ("libnvrtc.so.[0-9]*", ("nvidia.cu13", "nvidia.cuda_nvrtc")),
    # NVRTC opens its builtins by name when it compiles; with no system copy (a driver-only machine) only a copy
    # already loaded is found.
    ("libnvrtc-builtins.so.[0-9]*", ("nvidia.cu13", "nvidia.cuda_nvrtc")),
)


def preload() -> list:
    """Loads each wheel library found, globally, and returns their paths.

    One process must hold one copy of each: the dynamic loader gives a library already loaded to whoever asks for
    its soname next. Loaded first from the system (the extension's own dependencies), cuDNN then served PyTorch,
    whose wheels bring their own and newer parts of it, and the process aborted. Loaded from the wheels first, the
    extension and PyTorch share them, as PyTorch's own wheels arrange. Where no wheel is installed this does
    nothing, and the system's libraries are used.
    """
    loaded = []
    for path in _found():
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            loaded.append(path)
        except OSError:
            pass  # unusable here: the system's copy is used instead
    return loaded


def library_dirs() -> list:
    """The folders of the wheel libraries found, in search order, without repeats (for the bundled command, which
    the dynamic loader must be told about through LD_LIBRARY_PATH: an exec'd program inherits no preloads)."""
    dirs = []
    for path in _found():
        if os.path.dirname(path) not in dirs:
            dirs.append(os.path.dirname(path))
    return dirs


def _found() -> list:
    """The path of each wheel library of _WHEEL_LIBRARIES that is installed, in that order."""
    return [path for path in (_find(pattern, packages) for pattern, packages in _WHEEL_LIBRARIES) if path is not None]


def _find(pattern: str, packages: tuple) -> "str | None":
    """The first file matching `pattern` in the lib/ folder of the first of `packages` that has one."""
    for package in packages:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for root in spec.submodule_search_locations:
            candidates = sorted(glob.glob(os.path.join(root, "lib", pattern)))
            if candidates:
                return candidates[0]
    return None
