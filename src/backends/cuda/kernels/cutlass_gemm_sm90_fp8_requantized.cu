// The sm_90 quantized products of cutlass_gemm_sm90.hpp for f8e4m3 operands whose result is quantized to f8e4m3
// again (compiled for sm_90a only; a file of its own so that the instantiations compile in parallel).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_f8e4m3_requantized_gemm(GemmConfig config, Activation activation, int device,
                                                        int sm_count) {
  return make_typed_quantized_gemm<cutlass::float_e4m3_t, cutlass::float_e4m3_t, cutlass::half_t,
                                   GemmConfig::kCooperative128x128>(config, activation, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
