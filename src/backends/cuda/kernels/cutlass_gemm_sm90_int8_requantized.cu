// The sm_90 quantized products of cutlass_gemm_sm90.hpp for i8 operands whose result is quantized to i8 again
// (compiled for sm_90a only; a file of its own so that the instantiations compile in parallel): 128x256 cooperative
// and 128x128 ping-pong tiles, each with an f16 residual C or without C (BERT's MLP products: no shared memory held
// for C, so the more for the operands' stages).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_i8_requantized_gemm(GemmConfig config, Activation activation, bool residual, int device,
                                                    int sm_count) {
  return make_typed_quantized_gemm<std::int8_t, std::int8_t, GemmConfig::kCooperative128x256,
                                   GemmConfig::kPingpong128x128>(config, activation, residual, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
