"""The wheel: built from the CMake build folder (and on its own against an installed tensoracle), installed into a
fresh virtual environment where the example runs and a cubin plugin builds from the C++ sources it ships."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BUILD_DIR = os.environ.get("TENSORACLE_PACKAGE_BUILD_DIR")
needs_build = pytest.mark.skipif(
    BUILD_DIR is None,
    reason="needs the CMake build folder to make the wheel from (ctest sets TENSORACLE_PACKAGE_BUILD_DIR)",
)
VERSION = "0.1.0"
SONAME = "libtensoracle.so.0.1"


def run(args, **kwargs):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, args))}\n{result.stdout}\n{result.stderr}"
    return result


def check_wheel_contents(wheel: Path) -> None:
    """One library file under its SONAME (a wheel holds no links), the command, the stubs, the plugin sources."""
    with zipfile.ZipFile(wheel) as z:
        infos = {i.filename: i for i in z.infolist()}
    libraries = sorted(n for n in infos if n.startswith("tensoracle/lib/"))
    assert libraries == [f"tensoracle/lib/{SONAME}"], libraries
    assert not any(stat.S_ISLNK(i.external_attr >> 16) for i in infos.values())
    for name in ("tensoracle/bin/tensoracle", "tensoracle/_tensoracle.pyi", "tensoracle/py.typed",
                 "tensoracle/cpp/include/tensoracle/cubin_plugin.hpp", "tensoracle/cpp/src/cubin_plugin.cpp",
                 "tensoracle/cpp/cmake/TensoracleCubinPlugin.cmake", "tensoracle/cpp/cmake/TensoracleCuda.cmake"):
        assert name in infos, name
    assert any(n.startswith("tensoracle/_tensoracle.") and n.endswith(".so") for n in infos)


def fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    # The wheel's own dependency (numpy) comes from the package index; safetensors is the example's.
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, "safetensors"])
    assert f"tensoracle {VERSION}" in run([venv / "bin" / "tensoracle", "--version"]).stdout
    return python


def run_example_twice(python: Path, tmp_path: Path) -> None:
    # Run from outside the source tree, so that only the installed package can be imported.
    work = tmp_path / "work"
    outputs = [run([python, REPO / "examples" / "python" / "infer.py", work], cwd=tmp_path).stdout for _ in range(2)]
    assert outputs[0].startswith("engine built:") and "passed" in outputs[0], outputs[0]
    assert outputs[1].startswith("engine reused:") and "passed" in outputs[1], outputs[1]
    imported = run([python, "-c", "import tensoracle; print(tensoracle.__file__)"], cwd=tmp_path).stdout
    assert imported.startswith(str(python.parent.parent)), imported


def cuda_header_here() -> bool:
    return any(Path(d, "cuda.h").is_file() for d in ("/usr/local/cuda/include", "/usr/include"))


@needs_build
def test_wheel_installs_into_a_fresh_venv_where_the_example_runs_and_a_plugin_builds(tmp_path):
    env = dict(os.environ, TENSORACLE_BUILD_DIR=BUILD_DIR, TENSORACLE_PYTHON=sys.executable)
    run(["bash", REPO / "scripts" / "python-package.sh", "wheel", tmp_path / "wheels"], env=env)
    (wheel,) = (tmp_path / "wheels").glob("tensoracle-*.whl")
    check_wheel_contents(wheel)
    python = fresh_venv(tmp_path, wheel)
    run_example_twice(python, tmp_path)

    # The reference's plugin build: TENSORACLE_CPP_ROOT from the installed distribution, the example plugin project
    # (examples/cubin_plugin) built with its helper, the library loaded by the installed package.
    if not cuda_header_here() or shutil.which("cmake") is None:
        return  # needs cuda.h (the CUDA toolkit's headers), as every cubin plugin build does
    locate = "from importlib.metadata import distribution; print(distribution('tensoracle').locate_file('tensoracle/cpp'))"
    cpp_root = run([python, "-c", locate], cwd=tmp_path).stdout.strip()
    assert cpp_root.startswith(str(tmp_path / "venv")), cpp_root
    build = tmp_path / "plugin-build"
    run(["cmake", "-S", REPO / "examples" / "cubin_plugin", "-B", build, "-DCMAKE_BUILD_TYPE=Release",
         f"-DTENSORACLE_CPP_ROOT={cpp_root}"])
    run(["cmake", "--build", build, "-j", "2"])
    (library,) = build.glob("libtensoracle_example_cubin_plugin.so")
    # Loading needs libcuda.so.1: where no driver is installed, the toolkit's stub stands in (nothing is launched).
    env = dict(os.environ)
    if "libcuda.so.1 " not in run(["ldconfig", "-p"]).stdout:
        stub = next(Path("/usr/local/cuda").glob("lib*/stubs/libcuda.so"), None)
        if stub is None:
            return
        (tmp_path / "driver").mkdir()
        (tmp_path / "driver" / "libcuda.so.1").symlink_to(stub)
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(tmp_path / "driver"), env.get("LD_LIBRARY_PATH", "")])
    code = ("import sys, tensoracle; tensoracle.load_plugin_library(sys.argv[1]); "
            "print(sorted(p['type'] for p in tensoracle.loaded_plugins()))")
    loaded = run([python, "-c", code, library], cwd=tmp_path, env=env).stdout
    assert loaded.strip() == "['bias', 'dot', 'scale']", loaded


@needs_build
def test_wheel_builds_on_its_own_against_an_installed_tensoracle(tmp_path):
    # What scripts/stage-device.sh does for the GPU machine's Python: python/ as the CMake project, the library and
    # command from an installed prefix, only the extension compiled.
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD_DIR, "--prefix", prefix, "--strip"])
    assert not (prefix / "tensoracle").exists()  # the package's layout installs only for the package
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
         "-w", tmp_path / "wheels", "-Ccmake.source-dir=python", f"-Ccmake.define.CMAKE_PREFIX_PATH={prefix}",
         f"-Cbuild-dir={tmp_path / 'build'}", "."], cwd=REPO)
    (wheel,) = (tmp_path / "wheels").glob("tensoracle-*.whl")
    check_wheel_contents(wheel)
    run_example_twice(fresh_venv(tmp_path, wheel), tmp_path)
