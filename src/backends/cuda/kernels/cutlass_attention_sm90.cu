// CUTLASS's Hopper FMHA kernels of cutlass_attention_sm90.hpp for f16 operands (cooperative schedule), and the
// dispatch by dtype and schedule (compiled for sm_90a only).
#include "backends/cuda/kernels/cutlass_attention_sm90.cuh"

namespace tensoracle::cuda::sm90 {

TENSORACLE_FUSED_ATTENTION_MAKER(make_f16_fused_attention) {
  return make_typed_fused_attention<cutlass::half_t, AttentionSchedule::kCooperative>(head_dim, causal, keys, device,
                                                                                      sm_count);
}

std::unique_ptr<FusedAttention> make_fused_attention(DataType dtype, std::int64_t head_dim, bool causal,
                                                     std::int64_t keys, AttentionSchedule schedule, int device,
                                                     int sm_count) {
  const bool bf16 = dtype == DataType::kBF16;
  if (dtype != DataType::kF16 && !bf16) return nullptr;
  switch (schedule) {
    case AttentionSchedule::kCooperative:
      return (bf16 ? make_bf16_fused_attention : make_f16_fused_attention)(head_dim, causal, keys, device, sm_count);
    case AttentionSchedule::kPingpong:
      return (bf16 ? make_bf16_pingpong_fused_attention : make_f16_pingpong_fused_attention)(head_dim, causal, keys,
                                                                                             device, sm_count);
    case AttentionSchedule::kPingpongWide:
      return (bf16 ? make_bf16_pingpong_wide_fused_attention : make_f16_pingpong_wide_fused_attention)(
          head_dim, causal, keys, device, sm_count);
    case AttentionSchedule::kPingpongTall:
      return (bf16 ? make_bf16_pingpong_tall_fused_attention : make_f16_pingpong_tall_fused_attention)(
          head_dim, causal, keys, device, sm_count);
  }
  return nullptr;
}

}  // namespace tensoracle::cuda::sm90
