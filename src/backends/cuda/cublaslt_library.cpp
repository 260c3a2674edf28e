// Opens cuBLASLt with dlopen on a thread of its own and resolves the entry points tensoracle calls.
#include "backends/cuda/cublaslt_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

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
  const std::string soname = fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR);
  std::vector<std::string> tried;
  void* handle = nullptr;
  for (const std::string& name : {soname, std::string(TENSORACLE_CUBLASLT_LIBRARY_PATH)}) {
    if (name.empty()) continue;
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      l.api.path = name;
      break;
    }
    const char* why = dlerror();
    tried.push_back(fmt::format("{} ({})", name, why != nullptr ? why : "not found"));
  }
  if (handle == nullptr) {
    l.error = fmt::format(
        "cuBLASLt, which runs the products of CUDA engines, could not be loaded: tried {}. Install cuBLAS {} (the "
        "libcublaslt package, or `pip install nvidia-cublas`) or put its folder on LD_LIBRARY_PATH",
        fmt::join(tried, ", "), CUBLAS_VER_MAJOR);
    return l;
  }
  const auto resolve = [&](auto& slot, const char* symbol) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(handle, symbol));
    if (slot == nullptr && l.error.empty()) {
      l.error = fmt::format("cuBLASLt library {} has no symbol {}; install cuBLAS {}", l.api.path, symbol,
                            CUBLAS_VER_MAJOR);
    }
  };
  CublasLtLibrary& a = l.api;
  resolve(a.cublasLtCreate, "cublasLtCreate");
  resolve(a.cublasLtDestroy, "cublasLtDestroy");
  resolve(a.cublasLtGetVersion, "cublasLtGetVersion");
  resolve(a.cublasLtGetStatusName, "cublasLtGetStatusName");
  resolve(a.cublasLtGetStatusString, "cublasLtGetStatusString");
  resolve(a.cublasLtMatmul, "cublasLtMatmul");
  resolve(a.cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate");
  resolve(a.cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy");
  resolve(a.cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  resolve(a.cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  resolve(a.cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  resolve(a.cublasLtMatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  resolve(a.cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  resolve(a.cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  resolve(a.cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  resolve(a.cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  return l;
}

// The load, begun by the first caller on a thread of its own; every later caller shares it.
const std::shared_future<Loaded>& load() {
  static std::once_flag once;
  static std::shared_future<Loaded> loading;
  std::call_once(once, [] { loading = std::async(std::launch::async, open_cublaslt).share(); });
  return loading;
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
