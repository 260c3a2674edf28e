#!/usr/bin/env bash
# On the GPU machine: installs the wheel that scripts/stage-device.sh built (.device/build/wheels) into a fresh
# virtual environment VENV (default /tmp/tensoracle-venv), as a user's `pip install` would. The machine has no
# package index, so the environment sees the machine's own Python packages (PyTorch, CuPy, NumPy and NVIDIA's CUDA
# wheels) through a .pth file instead of installing them.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-/tmp/tensoracle-venv}
wheels=(.device/build/wheels/tensoracle-*.whl)
[[ -f ${wheels[0]} ]] || { echo "device-install-wheel: no wheel in .device/build/wheels (run scripts/stage-device.sh)" >&2; exit 1; }
rm -rf "$venv"
python3 -m venv "$venv"
# The site-packages of the python3 this machine runs (a virtual environment itself, so --system-site-packages would
# give its base interpreter's instead).
"$venv/bin/python" - "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" <<'PY'
import pathlib, sys, sysconfig
pathlib.Path(sysconfig.get_paths()["purelib"], "machine-packages.pth").write_text(sys.argv[1] + "\n")
PY
"$venv/bin/python" -m pip install -q --no-deps --no-index --disable-pip-version-check "${wheels[0]}"
echo "device-install-wheel: $("$venv/bin/tensoracle" --version) in $venv"
