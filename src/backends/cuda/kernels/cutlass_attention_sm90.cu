// CUTLASS's Hopper FMHA kernels of cutlass_attention_sm90.hpp for f16 operands (cooperative schedule), and the
// dispatch by dtype and schedule (compiled for sm_90a only).
#include "backends/cuda/kernels/cutlass_attention_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedAttention> make_f16_fused_attention(std::int64_t head_dim, bool causal, int device, int sm_count) {
  return make_typed_fused_attention<cutlass::half_t, AttentionSchedule::kCooperative>(head_dim, causal, device,
                                                                                      sm_count);
}

std::unique_ptr<FusedAttention> make_fused_attention(DataType dtype, std::int64_t head_dim, bool causal,
                                                     AttentionSchedule schedule, int device, int sm_count) {
  const bool pingpong = schedule == AttentionSchedule::kPingpong;
  switch (dtype) {
    case DataType::kF16:
      return pingpong ? make_f16_pingpong_fused_attention(head_dim, causal, device, sm_count)
                      : make_f16_fused_attention(head_dim, causal, device, sm_count);
    case DataType::kBF16:
      return pingpong ? make_bf16_pingpong_fused_attention(head_dim, causal, device, sm_count)
                      : make_bf16_fused_attention(head_dim, causal, device, sm_count);
    default: return nullptr;
  }
}

}  // namespace tensoracle::cuda::sm90
