// The sm_90 products of cutlass_gemm_sm90.hpp for quantized_conv's 1x1 convolutions: i8 operands, an i8 residual
// scaled by its own scale, relu and an i8 result (compiled for sm_90a only; a file of its own so that the
// instantiations compile in parallel with the others).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_i8_residual_gemm(GemmConfig config, int device, int sm_count) {
  return make_typed_quantized_residual_gemm<std::int8_t, GemmConfig::kCooperative128x128,
                                            GemmConfig::kCooperative128x256>(config, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
