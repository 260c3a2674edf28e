"""The installed package: stubs, py.typed, docstrings, the bundled command and the console script."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import tensoracle
import tensoracle._cli

PACKAGE = Path(tensoracle.__file__).parent


def test_stubs_and_marker_ship():
    stub = PACKAGE / "_tensoracle.pyi"
    assert (PACKAGE / "py.typed").is_file()
    assert stub.is_file()
    text = stub.read_text()
    for name in ("class Network", "class WeightStore", "class BuilderConfig", "def open_engine", "def add_linear"):
        assert name in text, name


def test_cubin_plugin_sources_ship_in_the_reference_layout():
    # docs/cubin-plugins.md: a model package passes this folder to CMake as TENSORACLE_CPP_ROOT.
    cpp = PACKAGE / "cpp"
    for name in ("include/tensoracle/cubin_plugin.hpp", "include/tensoracle/plugin.hpp",
                 "include/tensoracle/cubin_bundle.hpp", "src/cubin_plugin.cpp", "cmake/TensoracleCubinPlugin.cmake",
                 "cmake/TensoracleCuda.cmake", "cmake/tensoracle_plugin.map"):
        assert (cpp / name).is_file(), name
    try:
        located = Path(metadata.distribution("tensoracle").locate_file("tensoracle/cpp"))
    except metadata.PackageNotFoundError:
        return  # a development tree: no distribution to ask
    assert located.resolve() == cpp.resolve()


def test_the_library_is_one_file_named_by_its_soname():
    files = sorted((PACKAGE / "lib").iterdir())
    assert [f.name for f in files] == [f"libtensoracle.so.{'.'.join(tensoracle.__version__.split('.')[:2])}"]
    assert not files[0].is_symlink()


def test_cuda_wheel_library_folders_are_found_in_search_order(tmp_path):
    # NVIDIA's CUDA 13 wheels: nvidia/cu13/lib (cuBLASLt, NVRTC) and nvidia/cudnn/lib, as namespace packages; these come
    # first on the path, before any real ones installed here.
    files = (("cu13", "libcublasLt.so.13"), ("cu13", "libnvrtc.so.13"), ("cu13", "libnvrtc-builtins.so.13.0"),
             ("cudnn", "libcudnn.so.9"))
    for folder, name in files:
        (tmp_path / "nvidia" / folder / "lib").mkdir(parents=True, exist_ok=True)
        (tmp_path / "nvidia" / folder / "lib" / name).write_bytes(b"")
    code = "import tensoracle._cuda_libraries as c; print('\\n'.join(c.library_dirs()))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(tmp_path / "nvidia" / "cu13" / "lib"), str(tmp_path / "nvidia" / "cudnn" / "lib")]


def test_every_public_name_has_a_docstring():
    missing = []
    for name in tensoracle.__all__:
        obj = getattr(tensoracle, name)
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member):
                    continue
                if not (getattr(member, "__doc__", "") or "").strip():
                    missing.append(f"{name}.{attr}")
    assert missing == []


def test_error_hierarchy():
    assert issubclass(tensoracle.EngineCacheError, ValueError)
    for cls in (tensoracle.CorruptEngineError, tensoracle.EngineConditionError, tensoracle.EngineIOError):
        assert issubclass(cls, tensoracle.EngineCacheError)
    assert issubclass(tensoracle.IoError, OSError) and issubclass(tensoracle.NotFoundError, LookupError)
    assert all(issubclass(getattr(tensoracle, n), tensoracle.Error) for n in tensoracle._errors.__all__)
    assert tensoracle.GraphError.__module__ == "tensoracle"


def test_bundled_command_runs():
    binary = tensoracle._cli.binary_path()
    assert binary.is_file()
    result = subprocess.run([str(binary), "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "cache" in result.stdout


def test_console_script_is_declared():
    try:
        dist = metadata.distribution("tensoracle")
    except metadata.PackageNotFoundError:
        pytest.skip("the package is not installed (running from a development tree)")
    scripts = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
    assert scripts["tensoracle"] == "tensoracle._cli:main"
    script = Path(sys.executable).parent / "tensoracle"
    if script.exists():
        result = subprocess.run([str(script), "--help"], capture_output=True, text=True)
        assert result.returncode == 0 and "cache" in result.stdout
