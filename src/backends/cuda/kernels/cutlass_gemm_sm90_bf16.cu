// linear's erf-GELU products (128-row tiles) of cutlass_gemm_sm90.hpp for bf16 operands, with a residual C (compiled
// for sm_90a only; a file of its own so that the two dtypes' instantiations compile in parallel).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_bf16_fused_gemm(GemmConfig config, int device, int sm_count) {
  return make_large_tile_gelu_gemm<cutlass::bfloat16_t, cutlass::bfloat16_t>(config, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
