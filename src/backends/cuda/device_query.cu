// CUDA device discovery through the runtime API (linked statically so machines without a driver still load the
// library).
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "backends/cuda/cublaslt_library.hpp"
#include "backends/cuda/device_query.hpp"

namespace tensoracle::cuda {

void query_devices(SystemInfo& info) {
  start_loading_cublaslt();  // opens beside the driver's start (cudaGetDeviceCount runs cuInit)
  list_devices(info);
  info.cublaslt_version = cublaslt_version();
}

void list_devices(SystemInfo& info) {
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) info.cuda_runtime_version = runtime;
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess) info.cuda_driver_version = driver;
  info.cudnn_version = cudnnGetVersion();
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
    device.memory_bus_width_bits = prop.memoryBusWidth;
    device.l2_cache_bytes = prop.l2CacheSize;
    device.shared_memory_per_block_bytes = prop.sharedMemPerBlock;
    device.shared_memory_per_block_optin_bytes = prop.sharedMemPerBlockOptin;
    device.shared_memory_per_multiprocessor_bytes = prop.sharedMemPerMultiprocessor;
    device.texture_alignment_bytes = prop.textureAlignment;
    device.integrated = prop.integrated != 0;
    device.ecc_enabled = prop.ECCEnabled != 0;
    info.cuda_devices.push_back(device);
  }
}

}  // namespace tensoracle::cuda
