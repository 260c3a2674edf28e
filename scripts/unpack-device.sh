#!/usr/bin/env bash
# On the GPU machine: unpacks .device/build.tgz (made by scripts/stage-device.sh --pack) into .device/build.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -f .device/build.tgz ]]; then
  rm -rf .device/build && tar -C .device -xzf .device/build.tgz
fi
