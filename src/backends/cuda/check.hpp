// Checked CUDA, cuBLASLt and driver calls: a failure becomes a CudaError naming the call and what was being done.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "tensoracle/error.hpp"

namespace tensoracle::cuda {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t status, const std::string& context);
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t status, const std::string& context);

}  // namespace tensoracle::cuda

// `context` is a std::string (or literal) describing what was being done, e.g. the layer name.
#define TENSORACLE_CUDA_CHECK(call, context)                                                                           \
  do {                                                                                                                 \
    const cudaError_t tensoracle_status_ = (call);                                                                     \
    if (tensoracle_status_ != cudaSuccess) ::tensoracle::cuda::throw_cuda_error(#call, tensoracle_status_, (context)); \
  } while (0)

#define TENSORACLE_CUBLAS_CHECK(call, context)                                      \
  do {                                                                              \
    const cublasStatus_t tensoracle_status_ = (call);                               \
    if (tensoracle_status_ != CUBLAS_STATUS_SUCCESS)                                \
      ::tensoracle::cuda::throw_cublas_error(#call, tensoracle_status_, (context)); \
  } while (0)
