// linear's small-tile products of cutlass_gemm_sm90.hpp for bf16 operands: 64x128 and 64x64 ping-pong tiles, erf-GELU
// or no activation, with a residual C or without C (compiled for sm_90a only, in a file of its own so that the
// instantiations compile in parallel).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_bf16_small_tile_gemm(GemmConfig config, Activation activation, bool residual,
                                                     int device, int sm_count) {
  return make_typed_small_tile_gemm<cutlass::bfloat16_t>(config, activation, residual, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
