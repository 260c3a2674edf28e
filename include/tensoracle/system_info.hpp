// What this build of tensoracle contains and which CUDA devices the machine offers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tensoracle {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
  unsigned long long total_memory_bytes = 0;
  // The further properties an engine's identity records (docs/cache.md).
  int memory_bus_width_bits = 0;
  int l2_cache_bytes = 0;
  unsigned long long shared_memory_per_block_bytes = 0;
  unsigned long long shared_memory_per_block_optin_bytes = 0;
  unsigned long long shared_memory_per_multiprocessor_bytes = 0;
  unsigned long long texture_alignment_bytes = 0;
  bool integrated = false;
  bool ecc_enabled = false;
};

struct SystemInfo {
  std::string library_version;
  bool cuda_backend_built = false;   // compiled with the CUDA backend
  int cuda_runtime_version = 0;      // e.g. 13000; 0 when not built
  int cuda_driver_version = 0;       // 0 when no driver is present
  std::size_t cublaslt_version = 0;  // cublasLtGetVersion() of the loaded library; 0 when not built
  std::size_t cudnn_version = 0;     // cudnnGetVersion() of the loaded library; 0 when not built
  std::vector<CudaDeviceInfo> cuda_devices;
  std::string cuda_unavailable_reason;  // why no device can be used, when cuda_devices is empty
};

// Queries the build and the machine. Never throws for a missing driver or device: the reason is
// reported in cuda_unavailable_reason.
SystemInfo system_info();

}  // namespace tensoracle
