// DeviceGuard: makes a device current for a scope, with its context current on the calling thread, and restores the
// caller's device after it.
#pragma once

#include <cuda_runtime_api.h>

#include <new>

#include "backends/cuda/check.hpp"

namespace tensoracle::cuda {

// Whether the calling thread has a current CUDA context (the driver's cuCtxGetCurrent). A thread that has made no
// runtime call yet has none, although cudaGetDevice already reports device 0 there.
bool thread_has_current_context() noexcept;

class DeviceGuard {
 public:
  // cudaSetDevice also when `device` is already the current device but the thread has no context yet: the libraries
  // and driver calls of the scope (cuBLASLt's handle, CUTLASS's cuCtxGetLimit) need the device's primary context
  // current, and on a caller's fresh thread nothing has made it so.
  explicit DeviceGuard(int device) {
    TENSORACLE_CUDA_CHECK(cudaGetDevice(&previous_), "selecting the engine's device");
    if (previous_ != device || !thread_has_current_context())
      TENSORACLE_CUDA_CHECK(cudaSetDevice(device), "selecting the engine's device");
  }
  // The same switch for release paths that must not throw (frees, destroys): a failed switch is ignored and cleared,
  // as the release calls after it then fail on their own and report nothing either.
  DeviceGuard(int device, std::nothrow_t) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = device;
    if ((previous_ != device || !thread_has_current_context()) && cudaSetDevice(device) != cudaSuccess)
      cudaGetLastError();
  }
  ~DeviceGuard() {
    int current = 0;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace tensoracle::cuda
