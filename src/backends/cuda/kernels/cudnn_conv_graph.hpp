// A forward 2D convolution and its fused epilogue (bias, residual, relu) as one cuDNN graph (backend API) with a
// finalized execution plan, so that a launch only binds pointers and calls cudnnBackendExecute.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tensoracle::cuda {

// y = relu(scale · conv(x, w) + bias + residual) / output_scale, each part after the convolution optional (relu and
// residual as the builder fuses them: a residual only with a relu; scale, one f32 per output channel, for quantized x
// and w; output_scale, one f32, for a result quantized again; a quantized residual, i8 or f8e4m3, is added as
// residual · residual_scale, one f32). Dims in NCHW order; nhwc says how they are laid out.
struct ConvGraphProblem {
  std::int64_t n = 1, c = 1, h = 1, w = 1;
  std::int64_t o = 1, kh = 1, kw = 1, oh = 1, ow = 1;
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  cudnnDataType_t input_type = CUDNN_DATA_HALF;   // of x and w: f16 or bf16 as y, or i8 / f8e4m3 (with scale)
  cudnnDataType_t type = CUDNN_DATA_HALF;         // of bias and residual; f16, bf16 or f32
  cudnnDataType_t output_type = CUDNN_DATA_HALF;  // of y: `type`, or i8 / f8e4m3 with output_scale
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;     // the convolution's accumulator: f32, or i32 for i8 operands
  bool nhwc = false;
  bool scale = false, bias = false, residual = false, relu = false, output_scale = false;
  bool residual_scale = false;                      // the residual is quantized: of residual_type, times its scale
  cudnnDataType_t residual_type = CUDNN_DATA_INT8;  // with residual_scale: i8 or f8e4m3
  std::int64_t alignment = 16;                      // bytes every data pointer is aligned to
};

class ConvGraphPlan {
 public:
  // The operation graph and, finalized, the first engine configuration of cuDNN's heuristics (mode A) that is
  // deterministic, not FFT based, finalizes and needs at most workspace_limit bytes; nullptr when cuDNN has none or
  // refuses the graph (the caller then runs the legacy API, which has its own fallbacks). Built when a step is
  // prepared, on the handle it will execute on (the execution context's).
  static std::unique_ptr<ConvGraphPlan> build(cudnnHandle_t handle, const ConvGraphProblem& problem,
                                              std::size_t workspace_limit);
  // The engine configurations of the heuristics' list that build would accept, in the heuristics' order, at most
  // max_plans of them, after the first `skip` deterministic non-FFT ones (skipped without being finalized: a plan
  // that then fails to finalize is passed over for the next one). For timing them against each other.
  static std::vector<std::unique_ptr<ConvGraphPlan>> build_all(cudnnHandle_t handle, const ConvGraphProblem& problem,
                                                               std::size_t workspace_limit, std::size_t max_plans,
                                                               std::size_t skip = 0);
  // build's plan, or for plan_index > 0 build_all's plan of that index (build's when the list is shorter), sharing
  // the finalized execution plan of a live ConvGraphPlan made by build_shared for the same handle, problem, limit and
  // index, if there is one: an engine's repeated layers (ResNet-50's 53 convolutions have 24 distinct problems) build
  // and finalize each plan once per execution context, not once per step. Each result has its own variant pack.
  // Thread-safe.
  static std::unique_ptr<ConvGraphPlan> build_shared(cudnnHandle_t handle, const ConvGraphProblem& problem,
                                                     std::size_t workspace_limit, std::size_t plan_index);
  ConvGraphPlan(const ConvGraphPlan&) = delete;
  ConvGraphPlan& operator=(const ConvGraphPlan&) = delete;
  ~ConvGraphPlan();

  std::size_t workspace_bytes() const { return workspace_; }
  // Whether this plan and `other` run one finalized execution plan (build_shared's sharing).
  bool shares_plan_with(const ConvGraphPlan& other) const { return plan_ == other.plan_; }
  // Runs the plan on handle's stream (the handle it was built with). Absent parts: nullptr. The variant pack, which
  // binds the pointers, is built on the first call and again only when a pointer differs from the last call's; it is
  // the one thing a call changes, hence const with mutable members (one thread at a time, as the execution context).
  cudnnStatus_t execute(cudnnHandle_t handle, const void* x, const void* w, const void* scale, const void* bias,
                        const void* residual, const void* output_scale, const void* residual_scale, void* y,
                        void* workspace) const;

 private:
  ConvGraphPlan() = default;
  // A plan that runs the finalized execution plan `plan` for problem p's parts, with that plan's scratch.
  static std::unique_ptr<ConvGraphPlan> running(std::shared_ptr<void> plan, const ConvGraphProblem& p,
                                                std::size_t workspace);
  // The finalized execution plan (a cudnnBackendDescriptor_t), shared by the plans build_shared gave for one problem.
  std::shared_ptr<void> plan_;
  mutable cudnnBackendDescriptor_t variant_pack_ = nullptr;
  // x, w, scale, bias, residual, output scale, residual scale, y, workspace
  mutable std::array<const void*, 9> bound_{};
  bool scale_ = false, bias_ = false, residual_ = false, output_scale_ = false, residual_scale_ = false;
  std::size_t workspace_ = 0;
};

}  // namespace tensoracle::cuda
