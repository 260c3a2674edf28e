// The sm_90 quantized products of cutlass_gemm_sm90.hpp for f8e4m3 operands (compiled for sm_90a only; a file of its
// own so that the operand types' instantiations compile in parallel).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_f8e4m3_quantized_gemm(GemmConfig config, Activation activation, bool quantized_output,
                                                      int device, int sm_count) {
  using cutlass::float_e4m3_t;
  if (quantized_output) {
    return make_typed_quantized_gemm<float_e4m3_t, float_e4m3_t, GemmConfig::kCooperative128x128>(config, activation,
                                                                                                  device, sm_count);
  }
  return make_typed_quantized_gemm<float_e4m3_t, cutlass::half_t, GemmConfig::kCooperative128x256,
                                   GemmConfig::kCooperative128x128>(config, activation, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
