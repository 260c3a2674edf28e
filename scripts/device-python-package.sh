#!/usr/bin/env bash
# On the GPU machine: builds the Python extension there, for that machine's python3, against the library staged by
# scripts/stage-device.sh (.device/build), and lays out an importable package in SITE (default /tmp/tensoracle-site).
# Use: PYTHONPATH=SITE LD_LIBRARY_PATH=SITE/tensoracle/lib:.device/build/lib python3 -m pytest tests/python/package
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
stage=$root/.device/build
site=${1:-/tmp/tensoracle-site}
work=/tmp/tensoracle-extension
rm -rf "$work" && mkdir -p "$work"
# A project of its own: the machine lacks the library's build dependencies, and the extension needs only the public
# headers, the staged library and nanobind.
cat >"$work/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(tensoracle_extension LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(Python 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
execute_process(COMMAND "\${Python_EXECUTABLE}" -m nanobind --cmake_dir OUTPUT_VARIABLE nanobind_ROOT
                OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
find_package(nanobind CONFIG REQUIRED)
add_library(tensoracle SHARED IMPORTED)
set_target_properties(tensoracle PROPERTIES IMPORTED_LOCATION "$stage/src/libtensoracle.so"
                      INTERFACE_INCLUDE_DIRECTORIES "$root/include;$stage/include")
file(GLOB sources "$root/python/src/*.cpp")
nanobind_add_module(_tensoracle NB_STATIC \${sources})
target_link_libraries(_tensoracle PRIVATE tensoracle)
set_target_properties(_tensoracle PROPERTIES INSTALL_RPATH "\\\$ORIGIN/lib" BUILD_WITH_INSTALL_RPATH ON)
CMAKE
cmake -S "$work" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DPython_EXECUTABLE=$(command -v python3)" >/dev/null
cmake --build "$work/build" -j "$(nproc)"
rm -rf "$site" && mkdir -p "$site/tensoracle/bin" "$site/tensoracle/lib"
cp "$root"/python/tensoracle/*.py "$root/python/tensoracle/py.typed" "$work"/build/_tensoracle*.so "$site/tensoracle/"
cp "$stage/tools/cli/tensoracle" "$site/tensoracle/bin/"
cp -P "$stage"/src/libtensoracle.so* "$stage"/lib/* "$site/tensoracle/lib/"
PYTHONPATH=$site python3 -m nanobind.stubgen -q -m tensoracle._tensoracle -o "$site/tensoracle/_tensoracle.pyi" ||
  echo "device-python-package: stubgen failed; the stub test will fail"
echo "device-python-package: $site/tensoracle ready"
