// The sm_90 products of cutlass_gemm_sm90.hpp for quantized_conv's 1x1 convolutions: i8 operands, an i8 residual
// scaled by its own scale, an f16 one or none, relu and an i8 result (compiled for sm_90a only; a file of its own so
// that the instantiations compile in parallel with the others). The 128x256 cooperative tile only: timing chose it over
// the 128x128 one for every such convolution of ResNet-50 at batch 256 on the H200.
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_i8_residual_gemm(GemmConfig config, ResidualC residual, int device, int sm_count) {
  switch (residual) {
    case ResidualC::kNone:
      return make_typed_quantized_residual_gemm<std::int8_t, void, GemmConfig::kCooperative128x256>(config, device,
                                                                                                    sm_count);
    case ResidualC::kF16:
      return make_typed_quantized_residual_gemm<std::int8_t, cutlass::half_t, GemmConfig::kCooperative128x256>(
          config, device, sm_count);
    case ResidualC::kI8:
      return make_typed_quantized_residual_gemm<std::int8_t, std::int8_t, GemmConfig::kCooperative128x256>(
          config, device, sm_count);
  }
  return nullptr;
}

}  // namespace tensoracle::cuda::sm90
