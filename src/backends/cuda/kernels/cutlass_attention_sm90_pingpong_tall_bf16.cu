// CUTLASS's Hopper FMHA kernels of cutlass_attention_sm90.hpp for bf16 operands, ping-pong with tiles of 192 queries
// (three consumer warpgroups) by 128 keys at head dim 64 (compiled for sm_90a only; a file of its own so that the
// instantiations compile in parallel).
#include "backends/cuda/kernels/cutlass_attention_sm90.cuh"

namespace tensoracle::cuda::sm90 {

TENSORACLE_FUSED_ATTENTION_MAKER(make_bf16_pingpong_tall_fused_attention) {
  return make_typed_fused_attention<cutlass::bfloat16_t, AttentionSchedule::kPingpongTall>(head_dim, causal, keys,
                                                                                           device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
