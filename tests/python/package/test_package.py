"""The installed package: stubs, py.typed, docstrings, the bundled command and the console script."""

from __future__ import annotations

import inspect
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
