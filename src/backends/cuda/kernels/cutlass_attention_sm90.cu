// CUTLASS's Hopper FMHA kernels of cutlass_attention_sm90.hpp for f16 operands, and the dispatch by dtype (compiled
// for sm_90a only).
#include "backends/cuda/kernels/cutlass_attention_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedAttention> make_f16_fused_attention(std::int64_t head_dim, bool causal, int device, int sm_count) {
  return make_typed_fused_attention<cutlass::half_t>(head_dim, causal, device, sm_count);
}

std::unique_ptr<FusedAttention> make_fused_attention(DataType dtype, std::int64_t head_dim, bool causal, int device,
                                                     int sm_count) {
  switch (dtype) {
    case DataType::kF16: return make_f16_fused_attention(head_dim, causal, device, sm_count);
    case DataType::kBF16: return make_bf16_fused_attention(head_dim, causal, device, sm_count);
    default: return nullptr;
  }
}

}  // namespace tensoracle::cuda::sm90
