"""The wheel: built from the CMake build folder, installed into a fresh virtual environment, the example runs there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def run(args, **kwargs):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, args))}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.skipif(
    "TENSORACLE_PACKAGE_BUILD_DIR" not in os.environ,
    reason="needs the CMake build folder to make the wheel from (ctest sets TENSORACLE_PACKAGE_BUILD_DIR)",
)
def test_wheel_installs_into_a_fresh_venv_where_the_example_runs(tmp_path):
    env = dict(os.environ, TENSORACLE_BUILD_DIR=os.environ["TENSORACLE_PACKAGE_BUILD_DIR"], TENSORACLE_PYTHON=sys.executable)
    run(["bash", REPO / "scripts" / "python-package.sh", "wheel", tmp_path / "wheels"], env=env)
    (wheel,) = (tmp_path / "wheels").glob("tensoracle-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    # The wheel's own dependency (numpy) comes from the package index; safetensors is the example's.
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, "safetensors"])
    assert "tensoracle 0.1.0" in run([venv / "bin" / "tensoracle", "--version"]).stdout
    # Run from outside the source tree, so that only the installed package can be imported.
    work = tmp_path / "work"
    outputs = [
        run([python, REPO / "examples" / "python" / "infer.py", work], cwd=tmp_path).stdout for _ in range(2)
    ]
    assert outputs[0].startswith("engine built:") and "passed" in outputs[0], outputs[0]
    assert outputs[1].startswith("engine reused:") and "passed" in outputs[1], outputs[1]
    imported = run([python, "-c", "import tensoracle; print(tensoracle.__file__)"], cwd=tmp_path).stdout
    assert imported.startswith(str(venv)), imported
