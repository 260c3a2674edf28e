// linear's erf-GELU products (128-row tiles) of cutlass_gemm_sm90.hpp for f16 operands without C (no residual; compiled
// for sm_90a only, in a file of its own so that the instantiations compile in parallel).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_f16_fused_gemm_no_c(GemmConfig config, int device, int sm_count) {
  return make_large_tile_gelu_gemm<cutlass::half_t, void>(config, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
