// Hopper fused attention through CUTLASS's FMHA forward kernels (warp-specialized TMA/wgmma flash attention, shipped
// with CUTLASS as examples/88_hopper_fmha): the interface, with no CUTLASS type in it (kernels/cutlass_attention_sm90
// *.cu implement it). f16/bf16, head dims 64 and 128, unmasked (any key count) or causal (top-left aligned, whole key
// tiles), one kv head per query head; four schedules.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensoracle/data_type.hpp"

namespace tensoracle::cuda::sm90 {

// softmax(scale · q·kᵀ)·v per (batch, head): q [B, H, Sq, D], k and v [B, H, Skv, D], out like q, each addressed by
// (row, head, batch) strides in elements with the head dim contiguous. Every address and stride must be 16-byte
// aligned (the bulk tensor copy engine).
struct AttentionProblem {
  std::int64_t batch = 0, heads = 0, sq = 0, skv = 0, head_dim = 0;
  std::int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {}, o_stride[3] = {};  // row, head, batch
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float scale = 1.0F;
};

class FusedAttention {
 public:
  virtual ~FusedAttention() = default;
  // Whether the kernel takes the problem: its head dim, its key count (whole key tiles, or not, as the kernel was made
  // for), sizes and strides within int32, 16-byte strides.
  virtual bool can_implement(const AttentionProblem& problem) const = 0;
  // The scratch a problem needs (the kernel writes each row's log-sum-exp there).
  virtual std::size_t workspace_bytes(const AttentionProblem& problem) const = 0;
  // Plans the launch for the problem's addresses (host work only, capture safe: the bulk copy descriptors); again
  // whenever an address changes. The problem's sizes and strides must be ones can_implement took (not checked again:
  // a step bound to caller buffers plans at every enqueue).
  virtual void plan(const AttentionProblem& problem, void* workspace, const char* context) = 0;
  // Launches the planned kernel on `stream`; with `programmatic`, it may start while the kernel before it finishes
  // (the kernel waits for it first, then lets the next kernel start: step_wait.cuh's order).
  virtual void run(cudaStream_t stream, bool programmatic, const char* context) = 0;
};

// How the kernel's blocks take their tiles of queries. kCooperative: a block per tile of 128 queries (of one batch
// and head), its two consumer warpgroups each taking 64 of the rows. kPingpong: persistent, one block per SM walking
// the tiles, loading each tile's Q on its own so that the next tile's loads overlap the current one's products and
// softmax (CUTLASS's "ping-pong" forward kernels); for many short tiles (BERT-large's 384 keys are 6 tiles of 64).
// Under a causal mask the persistent schedules deal the tiles heaviest first, alternating direction each round
// (CausalBalancedTileScheduler, cutlass_attention_sm90_scheduler.cuh), since query tile m has m + 1 tiles of keys.
// Both walk the keys in tiles of 64 at head dim 64 and of 128 at head dim 128. kPingpongWide: kPingpong with tiles of
// 128 keys at head dim 64 (half the softmax rescaling steps: BERT-large's 384 keys in 3 tiles); head dim 64 only.
// kPingpongTall: kPingpongWide with tiles of 192 queries, a consumer warpgroup for each 64 rows (three), the tile
// FlashAttention-3 takes at head dim 64: each key tile loaded serves 1.5x the queries; head dim 64 only.
enum class AttentionSchedule { kCooperative, kPingpong, kPingpongWide, kPingpongTall };

// Whether a schedule's kernels take head dim 64 only (the wide and tall ones); the others take 64 and 128.
constexpr bool head_dim_64_only(AttentionSchedule schedule) {
  return schedule != AttentionSchedule::kCooperative && schedule != AttentionSchedule::kPingpong;
}

#if defined(TENSORACLE_HAVE_CUTLASS_SM90)
constexpr bool kFusedAttentionBuilt = true;
// The kernel for f16 or bf16 operands with head dim 64 or 128, causal or not, for problems of `keys` keys, on `device`
// (an sm_90 GPU with `sm_count` multiprocessors): unmasked with a key count that is not whole tiles, the kernel that
// masks the last tile's missing keys (CUTLASS's ResidualFusion), and the one without that mask otherwise; nullptr for
// another dtype or head dim.
std::unique_ptr<FusedAttention> make_fused_attention(DataType dtype, std::int64_t head_dim, bool causal,
                                                     std::int64_t keys, AttentionSchedule schedule, int device,
                                                     int sm_count);
#else
constexpr bool kFusedAttentionBuilt = false;
inline std::unique_ptr<FusedAttention> make_fused_attention(DataType /*dtype*/, std::int64_t /*head_dim*/,
                                                            bool /*causal*/, std::int64_t /*keys*/,
                                                            AttentionSchedule /*schedule*/, int /*device*/,
                                                            int /*sm_count*/) {
  return nullptr;
}
#endif

}  // namespace tensoracle::cuda::sm90
