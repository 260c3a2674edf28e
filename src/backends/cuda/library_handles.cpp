// LibraryHandles: the cuBLASLt and cuDNN handles an execution context (or the builder's timing) owns.
#include <fmt/format.h>

#include <cublasLt.h>
#include <cudnn.h>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_step.hpp"

namespace tensoracle::cuda {

LibraryHandles::LibraryHandles() { TENSORACLE_CUBLAS_CHECK(cublasLtCreate(&cublaslt_), "creating a cuBLASLt handle"); }

LibraryHandles::~LibraryHandles() {
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublaslt_ != nullptr) cublasLtDestroy(cublaslt_);
}

cudnnContext* LibraryHandles::cudnn(const std::string& context) {
  if (cudnn_ == nullptr) {
    const cudnnStatus_t status = cudnnCreate(&cudnn_);
    if (status != CUDNN_STATUS_SUCCESS) {
      cudnn_ = nullptr;
      throw CudaError(fmt::format("{}: cudnnCreate failed: {}", context, cudnnGetErrorString(status)));
    }
  }
  return cudnn_;
}

}  // namespace tensoracle::cuda
