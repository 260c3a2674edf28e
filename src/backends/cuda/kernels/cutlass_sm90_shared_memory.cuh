// Raising a CUTLASS sm_90 kernel's dynamic shared-memory limit, for the products (cutlass_gemm_sm90.cuh) and the
// flash attention (cutlass_attention_sm90.cuh) alike.
#pragma once

#include <cutlass/device_kernel.h>

#include <fmt/format.h>

#include "tensoracle/error.hpp"

namespace tensoracle::cuda::sm90 {

// Lets `function`, the global function that runs `Kernel`, use Kernel's SharedStorageSize of dynamic shared memory on
// the current device where that is past the default 48 KiB (host work, once per kernel's owner). Throws CudaError
// naming `what` (e.g. "a CUTLASS sm_90 product") when the device refuses.
template <class Kernel, class Function>
void allow_shared_storage(Function* function, const char* what) {
  constexpr int kSharedBytes = Kernel::SharedStorageSize;
  if constexpr (kSharedBytes >= (48 << 10)) {
    const cudaError_t status =
        cudaFuncSetAttribute(function, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw CudaError(fmt::format("cudaFuncSetAttribute({} bytes of shared memory) for {}: {}", kSharedBytes, what,
                                  cudaGetErrorString(status)));
    }
  }
}

// The same for CUTLASS's own cutlass::device_kernel<Kernel>.
template <class Kernel>
void allow_shared_storage(const char* what) {
  allow_shared_storage<Kernel>(cutlass::device_kernel<Kernel>, what);
}

}  // namespace tensoracle::cuda::sm90
