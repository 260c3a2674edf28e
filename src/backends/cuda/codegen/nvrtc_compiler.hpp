// NVRTC at build time: compiles generated CUDA C++ to a CUBIN for one GPU architecture (NVRTC is loaded on first use).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tensoracle::cuda::codegen {

// Compiles `source` with NVRTC for sm_<major><minor> (-default-device, C++17, IEEE math) and returns the CUBIN.
// `what` names the work in errors (e.g. "layer 'mlp/gelu'"). Throws UnsupportedError when NVRTC can't be loaded
// (naming the library and what to install) and CudaError with NVRTC's log when the compilation fails.
std::vector<std::byte> compile_to_cubin(const std::string& source, int cc_major, int cc_minor, const std::string& what);

// "NVRTC <major>.<minor> (<library>)", or throws UnsupportedError saying why NVRTC can't be loaded.
std::string nvrtc_description();

}  // namespace tensoracle::cuda::codegen
