// The sm_90 quantized products of cutlass_gemm_sm90.hpp for i8 operands with an f16 result, with an f16 residual C
// or without C (compiled for sm_90a only; the operand types and result kinds each have a file of their own so that
// their instantiations compile in parallel).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_i8_quantized_gemm(GemmConfig config, Activation activation, bool residual, int device,
                                                  int sm_count) {
  return make_typed_quantized_gemm<std::int8_t, cutlass::half_t, GemmConfig::kCooperative128x256,
                                   GemmConfig::kPingpong128x128>(config, activation, residual, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
