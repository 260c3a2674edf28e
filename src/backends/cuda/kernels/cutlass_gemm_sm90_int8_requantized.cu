// The sm_90 quantized products of cutlass_gemm_sm90.hpp for i8 operands whose result is quantized to i8 again
// (compiled for sm_90a only; a file of its own so that the instantiations compile in parallel). The 128x256
// cooperative tile only: timing never chose the 128x128 ping-pong one for these (BERT's MLP products).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_i8_requantized_gemm(GemmConfig config, Activation activation, int device,
                                                    int sm_count) {
  return make_typed_quantized_gemm<std::int8_t, std::int8_t, GemmConfig::kCooperative128x256>(config, activation,
                                                                                              device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
