// NVRTC at build time: loads libnvrtc with dlopen (so the library still loads where NVRTC is missing) and compiles.
#include "backends/cuda/codegen/nvrtc_compiler.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <string>
#include <vector>

#include "backends/cuda/runtime_library.hpp"
#include "tensoracle/error.hpp"

#ifndef TENSORACLE_NVRTC_LIBRARY_PATH
#define TENSORACLE_NVRTC_LIBRARY_PATH ""
#endif

namespace tensoracle::cuda::codegen {

namespace {

// The NVRTC entry points this file uses, resolved from the loaded library.
struct Nvrtc {
  std::string library;
  const char* (*get_error_string)(nvrtcResult) = nullptr;
  nvrtcResult (*version)(int*, int*) = nullptr;
  nvrtcResult (*create_program)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                const char* const*) = nullptr;
  nvrtcResult (*destroy_program)(nvrtcProgram*) = nullptr;
  nvrtcResult (*compile_program)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*get_program_log_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*get_program_log)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*get_cubin_size)(nvrtcProgram, std::size_t*) = nullptr;
  nvrtcResult (*get_cubin)(nvrtcProgram, char*) = nullptr;
};

// Loaded once per process and never unloaded; `error` says why loading failed.
struct Loaded {
  Nvrtc api;
  std::string error;
};

const Loaded& load_nvrtc() {
  static const Loaded loaded = [] {
    Loaded l;
    // The soname of the toolkit this build was compiled against, then the toolkit's own copy.
    const RuntimeLibrary library = open_runtime_library(
        {fmt::format("libnvrtc.so.{}", CUDART_VERSION / 1000), std::string(TENSORACLE_NVRTC_LIBRARY_PATH)});
    if (library.handle == nullptr) {
      l.error = fmt::format(
          "NVRTC, which compiles the fused elementwise kernels of CUDA engines at build time, could not be loaded: "
          "tried {}. Install NVRTC of CUDA {} (the cuda-nvrtc package) or put its folder on LD_LIBRARY_PATH",
          fmt::join(library.tried, ", "), CUDART_VERSION / 1000);
      return l;
    }
    l.api.library = library.name;
    std::string missing;
    library.resolve(l.api.get_error_string, "nvrtcGetErrorString", missing);
    library.resolve(l.api.version, "nvrtcVersion", missing);
    library.resolve(l.api.create_program, "nvrtcCreateProgram", missing);
    library.resolve(l.api.destroy_program, "nvrtcDestroyProgram", missing);
    library.resolve(l.api.compile_program, "nvrtcCompileProgram", missing);
    library.resolve(l.api.get_program_log_size, "nvrtcGetProgramLogSize", missing);
    library.resolve(l.api.get_program_log, "nvrtcGetProgramLog", missing);
    library.resolve(l.api.get_cubin_size, "nvrtcGetCUBINSize", missing);
    library.resolve(l.api.get_cubin, "nvrtcGetCUBIN", missing);
    if (!missing.empty()) {
      l.error = fmt::format("NVRTC library {} has no symbol {}; install NVRTC of CUDA {}", l.api.library, missing,
                            CUDART_VERSION / 1000);
    }
    return l;
  }();
  return loaded;
}

const Nvrtc& nvrtc() {
  const Loaded& l = load_nvrtc();
  if (!l.error.empty()) throw UnsupportedError(l.error);
  return l.api;
}

// Destroys the program on every path.
class Program {
 public:
  Program(const Nvrtc& api, nvrtcProgram program) : api_(api), program_(program) {}
  ~Program() { api_.destroy_program(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return program_; }

 private:
  const Nvrtc& api_;
  nvrtcProgram program_;
};

}  // namespace

std::string nvrtc_description() {
  const Nvrtc& api = nvrtc();
  int major = 0, minor = 0;
  if (api.version(&major, &minor) != NVRTC_SUCCESS) return fmt::format("NVRTC ({})", api.library);
  return fmt::format("NVRTC {}.{} ({})", major, minor, api.library);
}

std::vector<std::byte> compile_to_cubin(const std::string& source, int cc_major, int cc_minor,
                                        const std::string& what) {
  const Nvrtc& api = nvrtc();
  auto check = [&](nvrtcResult status, const char* call) {
    if (status != NVRTC_SUCCESS)
      throw CudaError(fmt::format("{}: {} failed: {}", what, call, api.get_error_string(status)));
  };
  nvrtcProgram raw = nullptr;
  check(api.create_program(&raw, source.c_str(), "fused_elementwise.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  Program program(api, raw);
  const std::string arch = fmt::format("--gpu-architecture=sm_{}{}", cc_major, cc_minor);
  const char* options[] = {arch.c_str(), "-default-device", "--std=c++17"};
  const nvrtcResult compiled = api.compile_program(program.get(), 3, options);
  std::size_t log_size = 0;
  std::string log;
  if (api.get_program_log_size(program.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    if (api.get_program_log(program.get(), log.data()) != NVRTC_SUCCESS) log.clear();
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  if (compiled != NVRTC_SUCCESS) {
    throw CudaError(fmt::format("{}: NVRTC could not compile the generated kernel for sm_{}{}: {}\n{}", what, cc_major,
                                cc_minor, api.get_error_string(compiled), log));
  }
  std::size_t size = 0;
  check(api.get_cubin_size(program.get(), &size), "nvrtcGetCUBINSize");
  if (size == 0)
    throw CudaError(fmt::format("{}: NVRTC produced an empty CUBIN for sm_{}{}", what, cc_major, cc_minor));
  std::vector<std::byte> cubin(size);
  check(api.get_cubin(program.get(), reinterpret_cast<char*>(cubin.data())), "nvrtcGetCUBIN");
  return cubin;
}

}  // namespace tensoracle::cuda::codegen
