// Op definitions (inputs, attributes, dtype and shape inference) of the quantization family.
#include <fmt/format.h>

#include <optional>

#include "graph/op_def.hpp"
#include "graph/ops/linear_checks.hpp"
#include "graph/ops/quantized_output_checks.hpp"

namespace tensoracle::graph {
namespace {

constexpr std::initializer_list<DataType> kQuantizedTypes = {DataType::kI8, DataType::kF8E4M3};

// The scale is f32, either a scalar (per tensor) or [C] with C = x.shape[axis] (per channel).
// `axis` matters only for a per-channel scale, so it is checked only then.
void check_scale(InferContext& ctx, const TensorType& x, const TensorType& scale) {
  ctx.require_dtype(scale, {DataType::kF32}, "scale");
  const std::int64_t axis = ctx.get_int("axis", 0);
  if (scale.rank() == 0) return;
  if (scale.rank() != 1) {
    ctx.fail(fmt::format("scale '{}' must be a scalar (per tensor) or have rank 1 (per channel), but has shape {}",
                         scale.name, ctx.shape_string(scale.shape)));
  }
  if (x.rank() == 0) {
    ctx.fail(fmt::format("scale '{}' is per channel (shape {}) but x '{}' is a scalar", scale.name,
                         ctx.shape_string(scale.shape), x.name));
  }
  const std::int64_t a = ctx.normalize_axis(axis, x.rank(), x);
  ctx.require_equal(scale.shape[0], x.shape[static_cast<std::size_t>(a)],
                    fmt::format("per-channel scale '{}' must have one value per channel of x '{}' along axis {}",
                                scale.name, x.name, axis));
}

std::vector<OutputType> infer_quantize(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const TensorType& scale = ctx.input(1, "scale");
  ctx.require_dtype(x, kFloatTypes, "input");
  const DataType to = ctx.get_dtype("to");
  if (to != DataType::kI8 && to != DataType::kF8E4M3) {
    ctx.fail(fmt::format("attribute 'to' must be i8 or f8e4m3, not {}", to_string(to)));
  }
  check_scale(ctx, x, scale);
  return {OutputType{to, x.shape}};
}

std::vector<OutputType> infer_dequantize(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const TensorType& scale = ctx.input(1, "scale");
  ctx.require_dtype(x, kQuantizedTypes, "input");
  const DataType to = ctx.get_dtype("to", DataType::kF32);
  if (to != DataType::kF32 && to != DataType::kF16 && to != DataType::kBF16 && to != DataType::kF64) {
    ctx.fail(fmt::format("attribute 'to' must be f32, f16, bf16 or f64, not {}", to_string(to)));
  }
  check_scale(ctx, x, scale);
  return {OutputType{to, x.shape}};
}

// x [..., in] (i8 or f8e4m3) · weight[out, in]ᵀ (the same type), scaled per output feature by scale[out] (f32), plus
// bias[out] and the residual, through the activation; the result in `to` (a float type), or, with `quantize_to` and
// output_scale (f32, a scalar), quantized by that scale to i8 or f8e4m3. The builder's lowering of a linear between
// dequantizes (builder::lower_quantized_products) and of a quantize after it (builder::fuse_quantized_outputs).
// A weight-only product has a float x of `to`'s type and a quantized weight (a linear whose weight alone is a
// dequantize); its result is never quantized.
std::vector<OutputType> infer_quantized_linear(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const TensorType& weight = ctx.input(1, "weight");
  const TensorType& scale = ctx.input(2, "scale");
  const DataType to = ctx.get_dtype("to", DataType::kF32);
  if (to != DataType::kF32 && to != DataType::kF16 && to != DataType::kBF16) {
    ctx.fail(fmt::format("attribute 'to' must be f32, f16 or bf16, not {}", to_string(to)));
  }
  const bool weight_only = x.dtype != DataType::kI8 && x.dtype != DataType::kF8E4M3;
  if (weight_only) {
    if (x.dtype != to) {
      ctx.fail(
          fmt::format("x '{}' must be i8 or f8e4m3, or (a weight-only product) have the type of attribute 'to' "
                      "({}), but is {}",
                      x.name, to_string(to), to_string(x.dtype)));
    }
    ctx.require_dtype(weight, kQuantizedTypes, "weight");
    if (ctx.has_input(5) || ctx.has("quantize_to")) {
      ctx.fail(
          fmt::format("a weight-only product (x '{}' is {}) has no quantized result: 'quantize_to' and "
                      "output_scale need an i8 or f8e4m3 x",
                      x.name, to_string(x.dtype)));
    }
  } else {
    ctx.require_same_dtype(x, weight);
  }
  std::vector<DimId> shape = linear_output_shape(ctx, x, weight);
  ctx.require_dtype(scale, {DataType::kF32}, "scale");
  require_per_feature(ctx, scale, "scale", weight);
  if (ctx.has_input(3)) {
    const TensorType& bias = ctx.input(3, "bias");
    ctx.require_dtype(bias, {to}, "bias");
    require_per_feature(ctx, bias, "bias", weight);
  }
  if (ctx.has_input(4)) ctx.require_dtype(ctx.input(4, "residual"), {to}, "residual");
  check_linear_epilogue(ctx, 4, shape);
  const std::optional<DataType> quantized = quantized_output_type(ctx);
  if (!quantized) return {OutputType{to, std::move(shape)}};
  return {OutputType{*quantized, std::move(shape)}};
}

}  // namespace

void register_quantization_ops(std::vector<OpDef>& ops) {
  ops.push_back(OpDef{"quantize",
                      2,
                      2,
                      {"to", "axis"},
                      infer_quantize,
                      "x / scale rounded to i8 (half to even) or f8e4m3, saturating; scale per tensor or per channel"});
  ops.push_back(OpDef{"dequantize",
                      2,
                      2,
                      {"to", "axis"},
                      infer_dequantize,
                      "x * scale for i8 or f8e4m3 x; scale per tensor or per channel"});
  ops.push_back(OpDef{"quantized_linear",
                      3,
                      6,
                      {"to", "activation", "quantize_to"},
                      infer_quantized_linear,
                      "activation(scale[out] * (x [..., in] · weight[out, in]ᵀ) + bias[out] + residual) for i8 or "
                      "f8e4m3 x and weight (or a float x of `to`'s type: weight-only), in `to`, or quantized by "
                      "output_scale to `quantize_to`"});
}

}  // namespace tensoracle::graph
