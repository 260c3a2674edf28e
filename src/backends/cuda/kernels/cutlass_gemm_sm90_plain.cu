// linear's plain products of cutlass_gemm_sm90.hpp for f16 operands: the 128x128 ping-pong and 128x192 cooperative
// tiles without an activation, with a residual C or without C (compiled for sm_90a only, in a file of its own so that
// the instantiations compile in parallel).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_f16_plain_gemm(GemmConfig config, bool residual, int device, int sm_count) {
  return make_typed_plain_gemm<cutlass::half_t>(config, residual, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
