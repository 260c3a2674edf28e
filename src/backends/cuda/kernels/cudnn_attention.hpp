// Fused attention (softmax(q·kᵀ·scale [causal])·v) through cuDNN's SDPA as a graph of the cuDNN frontend, built once
// per problem when a step is prepared, so that a launch only binds pointers and executes the plan.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tensoracle::cuda {

// One attention problem: [B, H, S, D] views of q, k, v and the output whose last dim is contiguous; the strides
// (elements) are those of b, h and s.
struct AttentionGraphProblem {
  std::int64_t b = 1, hq = 1, hkv = 1, sq = 1, skv = 1, d = 1, dv = 1;
  std::int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {}, o_stride[3] = {};
  bool bf16 = false;    // else f16; scores, softmax and accumulation are f32
  bool causal = false;  // keys j > i masked (top-left aligned)
  float scale = 1.0F;
};

class AttentionGraphPlan {
 public:
  // The finalized plan of cuDNN's heuristics (mode A) for the problem on the handle it will execute on, needing at
  // most workspace_limit bytes; nullptr when this cuDNN or GPU has none (then `why` says what cuDNN answered).
  static std::unique_ptr<AttentionGraphPlan> build(cudnnHandle_t handle, const AttentionGraphProblem& problem,
                                                   std::size_t workspace_limit, std::string* why);
  AttentionGraphPlan(const AttentionGraphPlan&) = delete;
  AttentionGraphPlan& operator=(const AttentionGraphPlan&) = delete;
  ~AttentionGraphPlan();

  std::size_t workspace_bytes() const;
  // Runs on handle's stream. False (with `why`) when cuDNN fails.
  bool execute(cudnnHandle_t handle, const void* q, const void* k, const void* v, void* out, void* workspace,
               std::string* why) const;

 private:
  struct Impl;
  explicit AttentionGraphPlan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensoracle::cuda
