// LibraryHandles: the cuBLASLt and cuDNN handles an execution context (or the builder's timing) owns.
#include <fmt/format.h>

#include <cublasLt.h>
#include <cudnn.h>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cublaslt_library.hpp"
#include "backends/cuda/cuda_step.hpp"

namespace tensoracle::cuda {

LibraryHandles::LibraryHandles() {
  TENSORACLE_CUBLAS_CHECK(cublaslt_library().cublasLtCreate(&cublaslt_), "creating a cuBLASLt handle");
}

void LibraryHandles::warm_up_cublaslt() const noexcept {
  const CublasLtLibrary& lt = cublaslt_library();  // opened: the constructor made a handle with it
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  if (lt.cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
      lt.cublasLtMatrixLayoutCreate(&layout, CUDA_R_16F, 128, 128, 128) == CUBLAS_STATUS_SUCCESS &&
      lt.cublasLtMatmulPreferenceCreate(&preference) == CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    (void)lt.cublasLtMatmulAlgoGetHeuristic(cublaslt_, op, layout, layout, layout, layout, preference, 1, &result,
                                            &found);
  }
  if (preference != nullptr) lt.cublasLtMatmulPreferenceDestroy(preference);
  if (layout != nullptr) lt.cublasLtMatrixLayoutDestroy(layout);
  if (op != nullptr) lt.cublasLtMatmulDescDestroy(op);
}

LibraryHandles::~LibraryHandles() {
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublaslt_ != nullptr) cublaslt_library().cublasLtDestroy(cublaslt_);
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
