// Op definitions (inputs, attributes, dtype and shape inference) of the reduction family.
#include <fmt/format.h>

#include <algorithm>

#include "graph/op_def.hpp"

namespace tensoracle::graph {
namespace {

constexpr std::initializer_list<DataType> kFloatAndIntegerTypes = {DataType::kF32, DataType::kF16, DataType::kBF16,
                                                                   DataType::kF64, DataType::kI64, DataType::kI32,
                                                                   DataType::kI16, DataType::kI8,  DataType::kU8};

// As torch, a scalar accepts axis 0 and -1 (it behaves as one element along a single axis).
std::int64_t normalize_axis_or_scalar(InferContext& ctx, std::int64_t axis, const TensorType& x) {
  if (x.rank() == 0 && (axis == 0 || axis == -1)) return 0;
  return ctx.normalize_axis(axis, x.rank(), x);
}

// Reduce ops whose result over an empty axis is undefined (no identity element).
bool needs_nonempty(std::string_view op) {
  return op == "reduce_max" || op == "reduce_min" || op == "argmax" || op == "argmin";
}

void require_nonempty(InferContext& ctx, const TensorType& x, std::size_t axis) {
  if (ctx.value(x.shape[axis]) == 0) {
    ctx.fail(fmt::format("axis {} of x '{}' {} is empty; {} of no elements is undefined", axis, x.name,
                         ctx.shape_string(x.shape), ctx.op()));
  }
}

// reduce_*: axes (empty or absent = all; negative counts from the end; unique), keep_dims.
std::vector<OutputType> infer_reduce(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const bool integers_allowed = ctx.op() != "reduce_mean";
  if (integers_allowed) {
    ctx.require_dtype(x, kFloatAndIntegerTypes, "input");
  } else {
    ctx.require_dtype(x, kFloatTypes, "input");
  }
  const auto axes = ctx.get_ints("axes", std::vector<std::int64_t>{});
  const bool keep_dims = ctx.get_bool("keep_dims", false);
  // A scalar has the one pseudo-axis 0; only the real axes end up in `reduced`.
  std::vector<bool> seen(std::max<std::size_t>(x.shape.size(), 1), false);
  for (std::int64_t a : axes) {
    auto axis = static_cast<std::size_t>(normalize_axis_or_scalar(ctx, a, x));
    if (seen[axis]) ctx.fail(fmt::format("attribute 'axes' [{}] names axis {} twice", fmt::join(axes, ","), axis));
    seen[axis] = true;
  }
  std::vector<bool> reduced(x.shape.size(), axes.empty());
  for (std::size_t i = 0; i < reduced.size(); ++i) reduced[i] = reduced[i] || seen[i];
  std::vector<DimId> shape;
  for (std::size_t i = 0; i < x.shape.size(); ++i) {
    if (!reduced[i]) {
      shape.push_back(x.shape[i]);
      continue;
    }
    if (needs_nonempty(ctx.op())) require_nonempty(ctx, x, i);
    if (keep_dims) shape.push_back(ctx.constant(1));
  }
  return {OutputType{x.dtype, shape}};
}

std::vector<OutputType> infer_arg_reduce(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, kFloatAndIntegerTypes, "input");
  const std::int64_t axis = normalize_axis_or_scalar(ctx, ctx.get_int("axis"), x);
  const bool keep_dims = ctx.get_bool("keep_dims", false);
  std::vector<DimId> shape;
  for (std::size_t i = 0; i < x.shape.size(); ++i) {
    if (static_cast<std::int64_t>(i) != axis) {
      shape.push_back(x.shape[i]);
      continue;
    }
    require_nonempty(ctx, x, i);
    if (keep_dims) shape.push_back(ctx.constant(1));
  }
  return {OutputType{DataType::kI64, shape}};
}

std::vector<OutputType> infer_top_k(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, kFloatAndIntegerTypes, "input");
  if (x.rank() < 1) ctx.fail(fmt::format("x '{}' is a scalar; top_k needs rank >= 1", x.name));
  const std::int64_t k = ctx.get_int("k");
  const auto axis = static_cast<std::size_t>(ctx.normalize_axis(ctx.get_int("axis", -1), x.rank(), x));
  ctx.get_bool("largest", true);
  if (k < 0) ctx.fail(fmt::format("attribute 'k' must be >= 0, not {}", k));
  if (auto n = ctx.value(x.shape[axis]); n && k > *n) {
    ctx.fail(fmt::format("k {} is larger than axis {} of x '{}' {} ({} elements)", k, axis, x.name,
                         ctx.shape_string(x.shape), *n));
  }
  std::vector<DimId> shape = x.shape;
  shape[axis] = ctx.constant(k);
  return {OutputType{x.dtype, shape}, OutputType{DataType::kI64, shape}};
}

}  // namespace

void register_reduction_ops(std::vector<OpDef>& ops) {
  const std::vector<std::string_view> reduce_attrs{"axes", "keep_dims"};
  ops.push_back(OpDef{"reduce_sum", 1, 1, reduce_attrs, infer_reduce, "sum over axes"});
  ops.push_back(OpDef{"reduce_mean", 1, 1, reduce_attrs, infer_reduce, "mean over axes"});
  ops.push_back(OpDef{"reduce_max", 1, 1, reduce_attrs, infer_reduce, "maximum over axes (NaN propagates)"});
  ops.push_back(OpDef{"reduce_min", 1, 1, reduce_attrs, infer_reduce, "minimum over axes (NaN propagates)"});
  ops.push_back(OpDef{"reduce_prod", 1, 1, reduce_attrs, infer_reduce, "product over axes"});
  ops.push_back(OpDef{"argmax",
                      1,
                      1,
                      {"axis", "keep_dims"},
                      infer_arg_reduce,
                      "index of the first maximum along axis (NaN counts as the maximum)"});
  ops.push_back(OpDef{"argmin",
                      1,
                      1,
                      {"axis", "keep_dims"},
                      infer_arg_reduce,
                      "index of the first minimum along axis (NaN counts as the minimum)"});
  ops.push_back(OpDef{"top_k",
                      1,
                      1,
                      {"k", "axis", "largest"},
                      infer_top_k,
                      "the k largest (or smallest) values along axis, sorted, and their indices"});
}

}  // namespace tensoracle::graph
