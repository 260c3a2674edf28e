// The driver's current-context check behind DeviceGuard, through the runtime's driver entry point (no link to libcuda).
#include "backends/cuda/device_guard.hpp"

#include <cuda.h>

namespace tensoracle::cuda {

bool thread_has_current_context() noexcept {
  using GetCurrent = CUresult (*)(CUcontext*);
  static const GetCurrent get_current = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &entry, 4000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<GetCurrent>(nullptr);
    }
    return reinterpret_cast<GetCurrent>(entry);
  }();
  if (get_current == nullptr) return false;  // unknown: the guard then sets the device, which is always correct
  CUcontext context = nullptr;
  return get_current(&context) == CUDA_SUCCESS && context != nullptr;
}

}  // namespace tensoracle::cuda
