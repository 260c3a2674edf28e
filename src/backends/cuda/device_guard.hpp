// DeviceGuard: makes a device current for a scope and restores the caller's device after it.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/check.hpp"

namespace tensoracle::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TENSORACLE_CUDA_CHECK(cudaGetDevice(&previous_), "selecting the engine's device");
    if (previous_ != device) TENSORACLE_CUDA_CHECK(cudaSetDevice(device), "selecting the engine's device");
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
