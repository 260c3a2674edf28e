#!/usr/bin/env bash
# Installs everything tensoracle needs on a fresh Debian 12 machine: Debian packages for the build,
# PyPI packages for the tests. Idempotent: prints nothing and changes nothing when all is present.
set -euo pipefail

debian_packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libssl-dev libopenblas-dev
  clang libclang-rt-14-dev clang-format
  python3 python3-pip python3-torch
)
python_packages=(numpy ml_dtypes safetensors pytest nanobind scikit-build-core)
python_modules=(numpy ml_dtypes safetensors pytest nanobind scikit_build_core)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python=${TENSORACLE_PYTHON:-python3}
need_pip=0
for m in "${python_modules[@]}"; do
  "$python" -c "import $m" 2>/dev/null || need_pip=1
done
if ((need_pip)); then
  echo "install-deps: installing Python test packages for $("$python" -c 'import sys; print(sys.executable)'): ${python_packages[*]}"
  # Debian's own python3 refuses pip installs by default (PEP 668); these are test-only packages.
  PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore "${python_packages[@]}"
fi

# The CUDA backend's fused attention includes cuDNN's frontend, a header-only library that PyPI ships
# (nvidia-cudnn-frontend puts it in site-packages/include, where CMake looks).
if ! "$python" -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['purelib'], 'include', 'cudnn_frontend.h')))" 2>/dev/null; then
  echo "install-deps: installing the cuDNN frontend headers (nvidia-cudnn-frontend) for $("$python" -c 'import sys; print(sys.executable)')"
  PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore nvidia-cudnn-frontend
fi

# The CUDA backend's Hopper products with fused epilogues include CUTLASS, header-only C++ that PyPI ships in
# nvidia-cutlass (site-packages/cutlass_library/source). Only its headers are used: --no-deps leaves out the Python
# packages its own Python interface needs.
if ! "$python" -c "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['purelib'], 'cutlass_library', 'source', 'include', 'cutlass', 'cutlass.h')))" 2>/dev/null; then
  echo "install-deps: installing CUTLASS's headers (nvidia-cutlass) for $("$python" -c 'import sys; print(sys.executable)')"
  PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps nvidia-cutlass
fi

# The op-conformance and model tests compare with PyTorch: Debian's python3-torch (1.13, CPU) lives
# in /usr/bin/python3, which also needs safetensors and pytest.
torch_python=/usr/bin/python3
if ! "$torch_python" -c "import torch, safetensors, pytest" 2>/dev/null; then
  echo "install-deps: installing safetensors and pytest for $torch_python"
  PIP_BREAK_SYSTEM_PACKAGES=1 "$torch_python" -m pip install -q --disable-pip-version-check --root-user-action=ignore safetensors pytest
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install-deps: note: no CUDA toolkit (nvcc) found; tensoracle will build without its CUDA backend"
fi
