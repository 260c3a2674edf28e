// Opens cuBLASLt with dlopen on a thread of its own and resolves the entry points tensoracle calls.
#include "backends/cuda/cublaslt_library.hpp"

#include <fmt/format.h>

#include <atomic>
#include <future>
#include <string>

#include "backends/cuda/runtime_library.hpp"
#include "tensoracle/error.hpp"

#ifndef TENSORACLE_CUBLASLT_LIBRARY_PATH
#define TENSORACLE_CUBLASLT_LIBRARY_PATH ""
#endif

namespace tensoracle::cuda {

namespace {

// Opened once per process and never closed; `error` says why opening failed.
struct Loaded {
  CublasLtLibrary api;
  std::string error;
};

Loaded open_cublaslt() {
  Loaded l;
  // The soname of the cuBLASLt this build was compiled against (found through the loader's search path, which
  // includes this library's run path and the wheels' copy the Python package loaded), then the toolkit's own copy.
  const RuntimeLibrary library = open_runtime_library(
      {fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR), std::string(TENSORACLE_CUBLASLT_LIBRARY_PATH)});
  if (library.handle == nullptr) {
    l.error = fmt::format(
        "cuBLASLt, which runs the products of CUDA engines, could not be loaded: tried {}. Install cuBLAS {} (the "
        "libcublaslt package, or `pip install nvidia-cublas`) or put its folder on LD_LIBRARY_PATH",
        fmt::join(library.tried, ", "), CUBLAS_VER_MAJOR);
    return l;
  }
  CublasLtLibrary& a = l.api;
  a.path = library.name;
  std::string missing;
  library.resolve(a.cublasLtCreate, "cublasLtCreate", missing);
  library.resolve(a.cublasLtDestroy, "cublasLtDestroy", missing);
  library.resolve(a.cublasLtGetVersion, "cublasLtGetVersion", missing);
  library.resolve(a.cublasLtGetStatusName, "cublasLtGetStatusName", missing);
  library.resolve(a.cublasLtGetStatusString, "cublasLtGetStatusString", missing);
  library.resolve(a.cublasLtMatmul, "cublasLtMatmul", missing);
  library.resolve(a.cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate", missing);
  library.resolve(a.cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy", missing);
  library.resolve(a.cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute", missing);
  library.resolve(a.cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate", missing);
  library.resolve(a.cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy", missing);
  library.resolve(a.cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute", missing);
  library.resolve(a.cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate", missing);
  library.resolve(a.cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy", missing);
  library.resolve(a.cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute", missing);
  library.resolve(a.cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic", missing);
  if (!missing.empty()) {
    l.error = fmt::format("cuBLASLt library {} has no symbol {}; install cuBLAS {}", a.path, missing, CUBLAS_VER_MAJOR);
  }
  return l;
}

// The load, begun by the first caller on a thread of its own; every later caller shares it. Never destroyed: a
// context destroyed during the process's exit still releases its handle through it.
const std::shared_future<Loaded>& load() {
  static const std::shared_future<Loaded>* const loading =
      new std::shared_future<Loaded>(std::async(std::launch::async, open_cublaslt).share());
  return *loading;
}

}  // namespace

void start_loading_cublaslt() { (void)load(); }

const CublasLtLibrary& cublaslt_library() {
  // Products call this at every launch: after the first answer it is one atomic load.
  static std::atomic<const CublasLtLibrary*> ready{nullptr};
  if (const CublasLtLibrary* api = ready.load(std::memory_order_acquire)) return *api;
  const Loaded& l = load().get();
  if (!l.error.empty()) throw UnsupportedError(l.error);
  ready.store(&l.api, std::memory_order_release);
  return l.api;
}

std::size_t cublaslt_version() noexcept {
  try {
    const Loaded& l = load().get();
    return l.error.empty() ? l.api.cublasLtGetVersion() : 0;
  } catch (...) {  // no thread to load it on
    return 0;
  }
}

}  // namespace tensoracle::cuda
