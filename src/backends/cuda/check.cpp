// Turns failed CUDA and cuBLASLt calls into CudaError messages that name the call and the work.
#include "backends/cuda/check.hpp"
#include "backends/cuda/cublaslt_library.hpp"

#include <fmt/format.h>

namespace tensoracle::cuda {

void throw_cuda_error(const char* call, cudaError_t status, const std::string& context) {
  throw CudaError(
      fmt::format("{}: {} failed: {} ({})", context, call, cudaGetErrorName(status), cudaGetErrorString(status)));
}

void throw_cublas_error(const char* call, cublasStatus_t status, const std::string& context) {
  throw CudaError(fmt::format("{}: {} failed: {} ({})", context, call, cublaslt_library().cublasLtGetStatusName(status),
                              cublaslt_library().cublasLtGetStatusString(status)));
}

}  // namespace tensoracle::cuda
