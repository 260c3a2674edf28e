// Op definitions (inputs, attributes, dtype and shape inference) of the normalization family.
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "graph/op_def.hpp"
#include "graph/ops/quantized_output_checks.hpp"

namespace tensoracle::graph {
namespace {

const TensorType& float_input(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, kFloatTypes, "input");
  return x;
}

// A negative epsilon can make the denominator's square root NaN, a non-finite one makes every
// output meaningless: both are mistakes in the network, not data.
double read_epsilon(InferContext& ctx, double fallback) {
  double eps = ctx.get_float("epsilon", fallback);
  if (!std::isfinite(eps) || eps < 0) ctx.fail(fmt::format("attribute 'epsilon' must be finite and >= 0, not {}", eps));
  return eps;
}

// Checks an optional per-channel or per-element parameter (weight, bias, mean, var): same dtype
// as x and exactly the shape `want`, which is described as `want_what` in messages.
void check_parameter(InferContext& ctx, std::size_t index, std::string_view role, const TensorType& x,
                     const std::vector<DimId>& want, std::string_view want_what) {
  if (!ctx.has_input(index)) return;
  const TensorType& p = ctx.input(index, role);
  if (p.dtype != x.dtype) {
    ctx.fail(fmt::format("{} '{}' has dtype {} but x '{}' has {}; add a cast", role, p.name, to_string(p.dtype), x.name,
                         to_string(x.dtype)));
  }
  bool same = p.shape.size() == want.size();
  for (std::size_t i = 0; same && i < want.size(); ++i) {
    auto a = ctx.value(p.shape[i]), b = ctx.value(want[i]);
    if (a && b && *a != *b) same = false;
  }
  if (!same) {
    ctx.fail(fmt::format("{} '{}' has shape {}, expected {} ({} of x '{}' {})", role, p.name, ctx.shape_string(p.shape),
                         ctx.shape_string(want), want_what, x.name, ctx.shape_string(x.shape)));
  }
}

// softmax / log_softmax: axis is required; a scalar is a single row (axis 0 or -1, as torch).
std::vector<OutputType> infer_softmax(InferContext& ctx) {
  const TensorType& x = float_input(ctx);
  std::int64_t axis = ctx.get_int("axis");
  if (x.rank() > 0 || (axis != 0 && axis != -1)) ctx.normalize_axis(axis, x.rank(), x);
  return {OutputType{x.dtype, x.shape}};
}

// The trailing `normalized_rank` dims of x: the shape weight and bias must have.
std::vector<DimId> normalized_shape(InferContext& ctx, const TensorType& x) {
  std::int64_t rank = ctx.get_int("normalized_rank", 1);
  if (rank < 1 || rank > x.rank()) {
    ctx.fail(fmt::format("attribute 'normalized_rank' is {} but must be between 1 and the rank of x '{}' {} ({})", rank,
                         x.name, ctx.shape_string(x.shape), x.rank()));
  }
  return {x.shape.end() - rank, x.shape.end()};
}

// With `quantize_to` (i8 or f8e4m3) and output_scale (input 3, f32, a scalar), a second output: the normalized value
// quantized by that scale (builder::fuse_quantized_outputs).
std::vector<OutputType> infer_layer_norm(InferContext& ctx) {
  const TensorType& x = float_input(ctx);
  read_epsilon(ctx, 1e-5);
  auto shape = normalized_shape(ctx, x);
  check_parameter(ctx, 1, "weight", x, shape, "the normalized dims");
  check_parameter(ctx, 2, "bias", x, shape, "the normalized dims");
  const std::optional<DataType> quantized = quantized_output_type(ctx);
  if (!quantized) return {OutputType{x.dtype, x.shape}};
  return {OutputType{x.dtype, x.shape}, OutputType{*quantized, x.shape}};
}

// With `quantize_to` and output_scale (input 2), a second output as layer_norm's.
std::vector<OutputType> infer_rms_norm(InferContext& ctx) {
  const TensorType& x = float_input(ctx);
  read_epsilon(ctx, 1e-6);
  auto shape = normalized_shape(ctx, x);
  check_parameter(ctx, 1, "weight", x, shape, "the normalized dims");
  const std::optional<DataType> quantized = quantized_output_type(ctx);
  if (!quantized) return {OutputType{x.dtype, x.shape}};
  return {OutputType{x.dtype, x.shape}, OutputType{*quantized, x.shape}};
}

// x [N, C, ...]: the ops below normalize per channel (dim 1).
const TensorType& channel_input(InferContext& ctx, int min_rank) {
  const TensorType& x = float_input(ctx);
  if (x.rank() < min_rank) {
    ctx.fail(fmt::format("x '{}' has shape {} but must have rank >= {} ([N, C{}])", x.name, ctx.shape_string(x.shape),
                         min_rank, min_rank > 2 ? ", spatial..." : ", ..."));
  }
  return x;
}

std::vector<OutputType> infer_batch_norm(InferContext& ctx) {
  const TensorType& x = channel_input(ctx, 2);
  read_epsilon(ctx, 1e-5);
  ctx.input(1, "mean");
  ctx.input(2, "var");
  const std::vector<DimId> channels{x.shape[1]};
  check_parameter(ctx, 1, "mean", x, channels, "the channel dim");
  check_parameter(ctx, 2, "var", x, channels, "the channel dim");
  check_parameter(ctx, 3, "weight", x, channels, "the channel dim");
  check_parameter(ctx, 4, "bias", x, channels, "the channel dim");
  return {OutputType{x.dtype, x.shape}};
}

std::vector<OutputType> infer_group_norm(InferContext& ctx) {
  const TensorType& x = channel_input(ctx, 2);
  read_epsilon(ctx, 1e-5);
  std::int64_t groups = ctx.get_int("num_groups");
  if (groups < 1) ctx.fail(fmt::format("attribute 'num_groups' must be >= 1, not {}", groups));
  if (auto c = ctx.value(x.shape[1]); c && *c % groups != 0) {
    ctx.fail(fmt::format("num_groups {} does not divide the {} channels of x '{}' {}", groups, *c, x.name,
                         ctx.shape_string(x.shape)));
  }
  const std::vector<DimId> channels{x.shape[1]};
  check_parameter(ctx, 1, "weight", x, channels, "the channel dim");
  check_parameter(ctx, 2, "bias", x, channels, "the channel dim");
  return {OutputType{x.dtype, x.shape}};
}

// Rank >= 3: the statistics are over the spatial dims, which a rank-2 input does not have.
std::vector<OutputType> infer_instance_norm(InferContext& ctx) {
  const TensorType& x = channel_input(ctx, 3);
  read_epsilon(ctx, 1e-5);
  const std::vector<DimId> channels{x.shape[1]};
  check_parameter(ctx, 1, "weight", x, channels, "the channel dim");
  check_parameter(ctx, 2, "bias", x, channels, "the channel dim");
  return {OutputType{x.dtype, x.shape}};
}

}  // namespace

void register_normalization_ops(std::vector<OpDef>& ops) {
  ops.push_back(OpDef{"softmax", 1, 1, {"axis"}, infer_softmax, "exp(x) / sum(exp(x)) along axis"});
  ops.push_back(OpDef{"log_softmax", 1, 1, {"axis"}, infer_softmax, "x - log(sum(exp(x))) along axis"});
  ops.push_back(OpDef{"layer_norm",
                      1,
                      4,
                      {"epsilon", "normalized_rank", "quantize_to"},
                      infer_layer_norm,
                      "(x - mean) / sqrt(var + eps) * weight + bias over the last normalized_rank dims (and, with "
                      "`quantize_to`, that quantized by output_scale as a second output)"});
  ops.push_back(OpDef{"rms_norm",
                      1,
                      3,
                      {"epsilon", "normalized_rank", "quantize_to"},
                      infer_rms_norm,
                      "x / sqrt(mean(x^2) + eps) * weight over the last normalized_rank dims (and, with "
                      "`quantize_to`, that quantized by output_scale as a second output)"});
  ops.push_back(OpDef{"batch_norm",
                      3,
                      5,
                      {"epsilon"},
                      infer_batch_norm,
                      "(x - mean) / sqrt(var + eps) * weight + bias per channel (inference)"});
  ops.push_back(OpDef{"group_norm",
                      1,
                      3,
                      {"num_groups", "epsilon"},
                      infer_group_norm,
                      "normalization over groups of channels and all spatial positions"});
  ops.push_back(OpDef{"instance_norm",
                      1,
                      3,
                      {"epsilon"},
                      infer_instance_norm,
                      "normalization per sample and channel over the spatial dims"});
}

}  // namespace tensoracle::graph
