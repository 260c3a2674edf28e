#!/usr/bin/env bash
# On the GPU machine: checks that the installed wheel (scripts/device-install-wheel.sh, VENV) runs on a machine with
# only the NVIDIA driver and NVIDIA's CUDA wheels. In a private mount namespace every system copy of cuBLAS(Lt),
# cuDNN, NVRTC and the CUDA runtime is made unreadable (the driver stays), then scripts/driver_only_check.py builds
# and runs a CUDA engine through the package and the bundled command, and checks where the libraries came from.
# Needs root (unshare -m). Use: bash scripts/driver-only-check.sh [VENV] [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-/tmp/tensoracle-venv}
work=${2:-/tmp/tensoracle-driver-only}
# The system's files, resolved through their links (each once); not the driver (libcuda, libnvidia-*).
mapfile -t hidden < <(ldconfig -p | awk '$1 ~ /^lib(cublas|cublasLt|cudnn[a-z_]*|nvrtc|nvrtc-builtins|cudart)\.so/ {print $NF}' |
  xargs -r realpath -e | sort -u)
((${#hidden[@]})) || echo "driver-only-check: the system has no CUDA libraries to hide"
exec unshare -m bash -euo pipefail -c '
  mount --make-rprivate /
  for file in "${@:3}"; do mount --bind /dev/null "$file"; done
  "$1/bin/python" scripts/driver_only_check.py "$1" "$2" "${@:3}"
' driver-only "$venv" "$work" "${hidden[@]}"
