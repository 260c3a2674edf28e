// CUDA device discovery through the runtime API (linked statically so machines without a driver still load the
// library).
#include <cuda_runtime_api.h>

#include <string>

#include "backends/cuda/device_query.hpp"

namespace tensoracle::cuda {

void query_devices(SystemInfo& info) {
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) info.cuda_runtime_version = runtime;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) info.cuda_driver_version = driver;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    info.cuda_unavailable_reason =
        std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return;
  }
  if (count == 0) {
    info.cuda_unavailable_reason = "the CUDA driver reports no devices";
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    status = cudaGetDeviceProperties(&prop, i);
    if (status != cudaSuccess) {
      info.cuda_unavailable_reason = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(status);
      continue;
    }
    CudaDeviceInfo device;
    device.index = i;
    device.name = prop.name;
    device.compute_capability_major = prop.major;
    device.compute_capability_minor = prop.minor;
    device.multiprocessor_count = prop.multiProcessorCount;
    device.total_memory_bytes = prop.totalGlobalMem;
    info.cuda_devices.push_back(device);
  }
}

}  // namespace tensoracle::cuda
