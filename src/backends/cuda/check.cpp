// Turns failed CUDA and cuBLASLt calls into CudaError messages that name the call and the work.
#include "backends/cuda/check.hpp"

#include <fmt/format.h>

namespace tensoracle::cuda {

void throw_cuda_error(const char* call, cudaError_t status, const std::string& context) {
  throw CudaError(
      fmt::format("{}: {} failed: {} ({})", context, call, cudaGetErrorName(status), cudaGetErrorString(status)));
}

void throw_cublas_error(const char* call, cublasStatus_t status, const std::string& context) {
  throw CudaError(fmt::format("{}: {} failed: {} ({})", context, call, cublasLtGetStatusName(status),
                              cublasLtGetStatusString(status)));
}

}  // namespace tensoracle::cuda
