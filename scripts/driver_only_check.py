"""Run by scripts/driver-only-check.sh with the system's CUDA libraries hidden: the wheel's package and command work
on the driver and NVIDIA's wheels alone. Arguments: VENV WORKDIR HIDDEN_FILE..."""

from __future__ import annotations

import ctypes
import runpy
import subprocess
import sys
from pathlib import Path

venv, work, hidden = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
for path in hidden:  # really gone: loading the system's copy fails
    try:
        ctypes.CDLL(path)
    except OSError:
        continue
    sys.exit(f"driver-only-check: {path} still loads")
print(f"hidden system libraries: {len(hidden)}")

import tensoracle  # noqa: E402

assert Path(tensoracle.__file__).is_relative_to(venv), tensoracle.__file__
print("preloaded from wheels:", *tensoracle._cuda_libraries.preload(), sep="\n  ")

# The Python example, on the GPU: builds (NVRTC, cuBLASLt), runs on PyTorch tensors, compares with PyTorch.
example = Path(__file__).resolve().parents[1] / "examples" / "python" / "infer.py"
sys.argv = [str(example), str(work)]
try:
    runpy.run_path(str(example), run_name="__main__")
except SystemExit as done:
    if done.code not in (0, None):
        sys.exit(f"driver-only-check: the example failed ({done.code})")

maps = Path("/proc/self/maps").read_text().splitlines()
cuda = sorted({line.split()[-1] for line in maps if any(n in line for n in ("libcublas", "libcudnn", "libnvrtc", "libcudart"))})
print("CUDA libraries mapped:", *cuda, sep="\n  ")
outside = [path for path in cuda if "site-packages/nvidia/" not in path]
assert not outside, f"loaded from outside NVIDIA's wheels: {outside}"
assert any("libcublasLt" in p for p in cuda) and any("libcudnn" in p for p in cuda) and any("libnvrtc" in p for p in cuda)

# The bundled command through the console script (LD_LIBRARY_PATH from the wheels): loads and runs the engine.
(engine,) = (work / "cache").rglob("*.engine")
for args in (["--version"], ["bench", str(engine), "--iterations", "20"]):
    result = subprocess.run([str(venv / "bin" / "tensoracle"), *args], capture_output=True, text=True)
    print(f"$ tensoracle {' '.join(args)}\n{result.stdout}{result.stderr}")
    assert result.returncode == 0, result.returncode
print("driver-only-check: passed")
