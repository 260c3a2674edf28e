// Op definitions (inputs, attributes, dtype and shape inference) of the convolution family.
#include <fmt/format.h>

#include <optional>

#include "graph/op_def.hpp"
#include "graph/ops/quantized_output_checks.hpp"

namespace tensoracle::graph {
namespace {

std::size_t index(int i) { return static_cast<std::size_t>(i); }

// Attribute values are bounded so that shape arithmetic with them can't overflow.
constexpr std::int64_t kMaxAttributeValue = 2147483647;

// A per-spatial-dim attribute list: absent or empty means `defaults` (one per spatial dim);
// otherwise one value per spatial dim, each in [min_value, kMaxAttributeValue].
std::vector<std::int64_t> spatial_list(InferContext& ctx, std::string_view name,
                                       const std::vector<std::int64_t>& defaults, std::int64_t min_value) {
  std::vector<std::int64_t> values = ctx.get_ints(name, std::vector<std::int64_t>{});
  if (values.empty()) return defaults;
  if (values.size() != defaults.size()) {
    ctx.fail(fmt::format("attribute '{}' must have {} values (one per spatial dim), but has {}", name, defaults.size(),
                         values.size()));
  }
  for (std::int64_t v : values) {
    if (v < min_value || v > kMaxAttributeValue) {
      ctx.fail(fmt::format("attribute '{}' values must be in [{}, {}], got [{}]", name, min_value, kMaxAttributeValue,
                           fmt::join(values, ",")));
    }
  }
  return values;
}

std::vector<std::int64_t> filled(int spatial_rank, std::int64_t value) {
  return std::vector<std::int64_t>(index(spatial_rank), value);
}

std::int64_t positive_int(InferContext& ctx, std::string_view name, std::int64_t fallback) {
  const std::int64_t v = ctx.get_int(name, fallback);
  if (v < 1 || v > kMaxAttributeValue) {
    ctx.fail(fmt::format("attribute '{}' must be in [1, {}], got {}", name, kMaxAttributeValue, v));
  }
  return v;
}

// Spatial dims (from axis 2 on) of x must not be empty, as in PyTorch.
void require_nonempty_spatial(InferContext& ctx, const TensorType& x) {
  for (int i = 2; i < x.rank(); ++i) {
    if (ctx.value(x.shape[index(i)]) == 0) {
      ctx.fail(
          fmt::format("x '{}' has shape {}: its spatial dims must not be empty", x.name, ctx.shape_string(x.shape)));
    }
  }
}

// What sets quantized_conv apart from conv: x and weight i8 or f8e4m3, an f32 scale per output channel at input 2, so
// that bias and residual come one input later, in the result's dtype `to`.
struct ConvForm {
  bool quantized = false;
  DataType result = DataType::kF32;  // quantized_conv's `to` (conv's result has x's dtype)
  std::size_t bias = 2;              // the bias's input; the residual's is the next one
};

void check_bias(InferContext& ctx, const ConvForm& form, const TensorType& x, DimId channels) {
  if (!ctx.has_input(form.bias)) return;
  const TensorType& bias = ctx.input(form.bias, "bias");
  if (form.quantized) {
    ctx.require_dtype(bias, {form.result}, "bias");
  } else {
    ctx.require_same_dtype(x, bias);
  }
  ctx.require_rank(bias, 1, "bias");
  ctx.require_equal(bias.shape[0], channels,
                    fmt::format("bias '{}' has shape {} but the output has {} channels", bias.name,
                                ctx.shape_string(bias.shape), ctx.dim_string(channels)));
}

// The checks conv and conv_transpose2d share: dtypes, ranks, non-empty channels and spatial dims,
// input channels divisible by groups. Each caller checks how weight's channel dims match x's.
void check_conv_common(InferContext& ctx, const TensorType& x, const TensorType& weight, std::int64_t groups,
                       bool quantized = false) {
  if (quantized) {
    ctx.require_dtype(x, {DataType::kI8, DataType::kF8E4M3}, "x");
  } else {
    ctx.require_dtype(x, kFloatTypes, "x");
  }
  ctx.require_same_dtype(x, weight);
  if (weight.rank() != x.rank()) {
    ctx.fail(fmt::format("weight '{}' has shape {} but x '{}' has shape {}: weight must have rank {}", weight.name,
                         ctx.shape_string(weight.shape), x.name, ctx.shape_string(x.shape), x.rank()));
  }
  const auto c = ctx.value(x.shape[1]);
  if (c == 0) ctx.fail(fmt::format("x '{}' has shape {}: it has no channels", x.name, ctx.shape_string(x.shape)));
  if (c && *c % groups != 0) {
    ctx.fail(fmt::format("x '{}' has {} channels, which is not divisible by groups = {}", x.name, *c, groups));
  }
  require_nonempty_spatial(ctx, x);
  for (int i = 2; i < weight.rank(); ++i) {
    if (ctx.value(weight.shape[index(i)]) == 0) {
      ctx.fail(fmt::format("weight '{}' has shape {}: its kernel dims must not be empty", weight.name,
                           ctx.shape_string(weight.shape)));
    }
  }
}

// The layout attribute of conv, max_pool2d and global_avg_pool: "nchw" (default) or "nhwc" (channels last: x
// [N, H, W, C], conv weight [O, kh, kw, C/groups]; the builder's channels-last pass makes these).
bool channels_last(InferContext& ctx) {
  const std::string layout = ctx.get_string("layout", "nchw");
  if (layout != "nchw" && layout != "nhwc") {
    ctx.fail(fmt::format("attribute 'layout' must be \"nchw\" or \"nhwc\", not \"{}\"", layout));
  }
  return layout == "nhwc";
}

// A channels-last type seen as channels-first ([N, H, W, C] as [N, C, H, W]) and back.
TensorType to_channels_first(const TensorType& t) {
  TensorType n = t;
  n.shape = {t.shape[0], t.shape[3], t.shape[1], t.shape[2]};
  return n;
}
std::vector<DimId> to_channels_last(const std::vector<DimId>& s) { return {s[0], s[2], s[3], s[1]}; }

// conv's fused epilogue (made by the builder): activation "none" or "relu" applied to conv + bias + residual, where
// the optional residual (input 3; quantized_conv's 4) has the output's shape and dtype, or, for quantized_conv with
// residual_scale (input 6, an f32 scalar), is i8 or f8e4m3 and is multiplied by that scale first.
void check_conv_epilogue(InferContext& ctx, const ConvForm& form, const TensorType& x,
                         const std::vector<DimId>& out_shape) {
  const std::string activation = ctx.get_string("activation", "none");
  if (activation != "none" && activation != "relu") {
    ctx.fail(fmt::format("attribute 'activation' must be \"none\" or \"relu\", not \"{}\"", activation));
  }
  constexpr std::size_t kResidualScale = 6;  // quantized_conv's: the residual is quantized
  const bool quantized_residual = form.quantized && ctx.has_input(kResidualScale);
  if (!ctx.has_input(form.bias + 1)) {
    if (quantized_residual) ctx.fail("residual_scale (input 6) is given but there is no residual (input 4)");
    return;
  }
  const TensorType& residual = ctx.input(form.bias + 1, "residual");
  if (quantized_residual) {
    // residual * residual_scale (exact) is what is added: a quantized tensor's dequantize fused in.
    ctx.require_dtype(residual, {DataType::kI8, DataType::kF8E4M3}, "residual (quantized: residual_scale is given)");
    const TensorType& residual_scale = ctx.input(kResidualScale, "residual_scale");
    ctx.require_dtype(residual_scale, {DataType::kF32}, "residual_scale");
    if (residual_scale.rank() != 0) {
      ctx.fail(fmt::format("residual_scale '{}' must be a scalar (one scale for the residual), but has shape {}",
                           residual_scale.name, ctx.shape_string(residual_scale.shape)));
    }
  } else if (form.quantized) {
    ctx.require_dtype(residual, {form.result}, "residual");
  } else {
    ctx.require_same_dtype(x, residual);
  }
  if (residual.rank() != static_cast<int>(out_shape.size())) {
    ctx.fail(fmt::format("residual '{}' has shape {} but the output has shape {}", residual.name,
                         ctx.shape_string(residual.shape), ctx.shape_string(out_shape)));
  }
  for (std::size_t i = 0; i < out_shape.size(); ++i) {
    ctx.require_equal(residual.shape[i], out_shape[i],
                      fmt::format("residual '{}' has shape {} but the output has shape {}", residual.name,
                                  ctx.shape_string(residual.shape), ctx.shape_string(out_shape)));
  }
}

std::vector<OutputType> infer_conv_nchw(InferContext& ctx, const ConvForm& form, const TensorType& x,
                                        const TensorType& weight);

// x [N, C, L] or [N, C, H, W] (or [N, H, W, C] with layout "nhwc"), weight [O, C/groups, k...] (or [O, kh, kw,
// C/groups]), bias [O], residual shaped as the output.
std::vector<OutputType> infer_conv_form(InferContext& ctx, const ConvForm& form) {
  const TensorType& x = ctx.input(0, "x");
  const TensorType& weight = ctx.input(1, "weight");
  std::vector<OutputType> out;
  if (channels_last(ctx)) {
    if (x.rank() != 4 || weight.rank() != 4) {
      ctx.fail(
          fmt::format("layout \"nhwc\" needs x [N, H, W, C] and weight [O, kh, kw, C/groups]; x '{}' has shape "
                      "{}, weight '{}' has shape {}",
                      x.name, ctx.shape_string(x.shape), weight.name, ctx.shape_string(weight.shape)));
    }
    out = infer_conv_nchw(ctx, form, to_channels_first(x), to_channels_first(weight));
    out[0].shape = to_channels_last(out[0].shape);
  } else {
    out = infer_conv_nchw(ctx, form, x, weight);
  }
  check_conv_epilogue(ctx, form, x, out[0].shape);
  return out;
}

std::vector<OutputType> infer_conv(InferContext& ctx) { return infer_conv_form(ctx, ConvForm{}); }

// conv of i8 or f8e4m3 x and weight (the same type), the sum scaled per output channel by scale[O] (f32), then bias,
// residual and activation as conv's, in `to` (a float type), or, with `quantize_to` and output_scale (input 5, an f32
// scalar), quantized by that scale to i8 or f8e4m3. With residual_scale (input 6) the residual is quantized and
// dequantized by it on the way in. The builder's lowering of a conv between dequantizes
// (builder::lower_quantized_products), of a quantize after it (builder::fuse_quantized_outputs) and of a dequantized
// residual (builder::fuse_epilogues).
std::vector<OutputType> infer_quantized_conv(InferContext& ctx) {
  const DataType to = ctx.get_dtype("to", DataType::kF32);
  if (to != DataType::kF32 && to != DataType::kF16 && to != DataType::kBF16) {
    ctx.fail(fmt::format("attribute 'to' must be f32, f16 or bf16, not {}", to_string(to)));
  }
  std::vector<OutputType> out = infer_conv_form(ctx, ConvForm{true, to, 3});
  const TensorType& weight = ctx.input(1, "weight");
  const TensorType& scale = ctx.input(2, "scale");
  ctx.require_dtype(scale, {DataType::kF32}, "scale");
  ctx.require_rank(scale, 1, "scale");
  ctx.require_equal(scale.shape[0], weight.shape[0],
                    fmt::format("scale '{}' has shape {} but weight '{}' has {} output channels", scale.name,
                                ctx.shape_string(scale.shape), weight.name, ctx.dim_string(weight.shape[0])));
  if (const std::optional<DataType> quantized = quantized_output_type(ctx)) out[0].dtype = *quantized;
  return out;
}

std::vector<OutputType> infer_conv_nchw(InferContext& ctx, const ConvForm& form, const TensorType& x,
                                        const TensorType& weight) {
  if (x.rank() != 3 && x.rank() != 4) {
    ctx.fail(fmt::format("x '{}' must have rank 3 ([N, C, L]) or 4 ([N, C, H, W]), but has shape {}", x.name,
                         ctx.shape_string(x.shape)));
  }
  const int spatial = x.rank() - 2;
  const auto stride = spatial_list(ctx, "stride", filled(spatial, 1), 1);
  const auto padding = spatial_list(ctx, "padding", filled(spatial, 0), 0);
  const auto dilation = spatial_list(ctx, "dilation", filled(spatial, 1), 1);
  const std::int64_t groups = positive_int(ctx, "groups", 1);
  check_conv_common(ctx, x, weight, groups, form.quantized);

  const DimId out_channels = weight.shape[0];
  ctx.require_equal(
      ctx.dims().mul(weight.shape[1], ctx.constant(groups)), x.shape[1],
      fmt::format("weight '{}' has shape {} but x '{}' has shape {} (weight's dim 1 times groups = {} "
                  "must equal x's channels)",
                  weight.name, ctx.shape_string(weight.shape), x.name, ctx.shape_string(x.shape), groups));
  if (auto o = ctx.value(out_channels); o && *o % groups != 0) {
    ctx.fail(fmt::format("weight '{}' has {} output channels, which is not divisible by groups = {}", weight.name, *o,
                         groups));
  }
  check_bias(ctx, form, x, out_channels);

  DimPool& d = ctx.dims();
  std::vector<DimId> shape = {x.shape[0], out_channels};
  for (int i = 0; i < spatial; ++i) {
    const auto s = index(i);
    const DimId size = x.shape[index(i + 2)];
    // The dilated kernel spans dilation * (k - 1) + 1 inputs.
    const DimId span =
        d.add(d.mul(d.constant(dilation[s]), d.sub(weight.shape[index(i + 2)], d.constant(1))), d.constant(1));
    const DimId padded = d.add(size, d.constant(2 * padding[s]));
    if (auto p = ctx.value(padded), k = ctx.value(span); p && k && *p < *k) {
      ctx.fail(
          fmt::format("spatial dim {} of x '{}' {} is {} with padding, smaller than the dilated kernel size {} of "
                      "weight '{}' {}",
                      i, x.name, ctx.shape_string(x.shape), *p, *k, weight.name, ctx.shape_string(weight.shape)));
    }
    shape.push_back(d.add(d.floor_div(d.sub(padded, span), d.constant(stride[s])), d.constant(1)));
  }
  return {OutputType{form.quantized ? form.result : x.dtype, std::move(shape)}};
}

// x [N, C, H, W], weight [C, O/groups, kh, kw] (PyTorch's layout), bias [O].
std::vector<OutputType> infer_conv_transpose2d(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const TensorType& weight = ctx.input(1, "weight");
  ctx.require_rank(x, 4, "x");
  const auto stride = spatial_list(ctx, "stride", filled(2, 1), 1);
  const auto padding = spatial_list(ctx, "padding", filled(2, 0), 0);
  const auto output_padding = spatial_list(ctx, "output_padding", filled(2, 0), 0);
  const auto dilation = spatial_list(ctx, "dilation", filled(2, 1), 1);
  const std::int64_t groups = positive_int(ctx, "groups", 1);
  for (std::size_t s = 0; s < 2; ++s) {
    if (output_padding[s] >= stride[s] && output_padding[s] >= dilation[s]) {
      ctx.fail(fmt::format("attribute 'output_padding' [{}] must be smaller than either stride [{}] or dilation [{}]",
                           fmt::join(output_padding, ","), fmt::join(stride, ","), fmt::join(dilation, ",")));
    }
  }
  check_conv_common(ctx, x, weight, groups);
  ctx.require_equal(
      weight.shape[0], x.shape[1],
      fmt::format("weight '{}' has shape {} but x '{}' has shape {} (weight's dim 0 must equal x's channels)",
                  weight.name, ctx.shape_string(weight.shape), x.name, ctx.shape_string(x.shape)));
  DimPool& d = ctx.dims();
  const DimId out_channels = d.mul(weight.shape[1], d.constant(groups));
  check_bias(ctx, ConvForm{}, x, out_channels);

  std::vector<DimId> shape = {x.shape[0], out_channels};
  for (std::size_t s = 0; s < 2; ++s) {
    // (size - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1
    const DimId size = x.shape[s + 2];
    const DimId span = d.mul(d.constant(dilation[s]), d.sub(weight.shape[s + 2], d.constant(1)));
    const DimId out =
        d.add(d.add(d.sub(d.mul(d.sub(size, d.constant(1)), d.constant(stride[s])), d.constant(2 * padding[s])), span),
              d.constant(output_padding[s] + 1));
    if (auto v = ctx.value(out); v && *v < 1) {
      ctx.fail(fmt::format("spatial dim {} of the output would be {}: padding [{}] is too large for x '{}' {}", s, *v,
                           fmt::join(padding, ","), x.name, ctx.shape_string(x.shape)));
    }
    shape.push_back(out);
  }
  return {OutputType{x.dtype, std::move(shape)}};
}

// max_pool2d and avg_pool2d: x [N, C, H, W] -> [N, C, H', W'] with PyTorch's output size rule.
std::vector<OutputType> infer_pool2d_nchw(InferContext& ctx, const TensorType& x);

// max_pool2d's channels-last x [N, H, W, C] seen as channels first; with `input_block_size` b > 1, x [N, H, W, b·b·C]
// holds [N, b·H, b·W, C] with each b x b cell's elements in its channels (element (dy, dx) of a cell at channels
// (dy·b + dx)·C: ONNX DepthToSpace's DCR order), as a space-to-depth stem convolution writes them
// (builder::to_channels_last).
TensorType input_blocks_as_channels_first(InferContext& ctx, const TensorType& x, std::int64_t block) {
  TensorType t = to_channels_first(x);
  if (block == 1) return t;
  DimPool& d = ctx.dims();
  const DimId cells = d.constant(block * block);
  if (auto c = ctx.value(x.shape[3]); c && *c % (block * block) != 0) {
    ctx.fail(fmt::format("x '{}' {} has {} channels, not a multiple of input_block_size^2 = {}", x.name,
                         ctx.shape_string(x.shape), *c, block * block));
  }
  t.shape[1] = d.floor_div(x.shape[3], cells);
  t.shape[2] = d.mul(x.shape[1], d.constant(block));
  t.shape[3] = d.mul(x.shape[2], d.constant(block));
  return t;
}

std::vector<OutputType> infer_pool2d(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  if (ctx.op() != "max_pool2d" || x.dtype != DataType::kI8) ctx.require_dtype(x, kFloatTypes, "x");
  ctx.require_rank(x, 4, "x");
  if (ctx.op() != "max_pool2d") return infer_pool2d_nchw(ctx, x);
  // max_pool2d also takes i8 x (the maximum of integers: a quantized result that a quantize before the pool made,
  // builder::fuse_quantized_outputs), with no `quantize_to`.
  if (x.dtype == DataType::kI8 && ctx.has("quantize_to")) {
    ctx.fail(fmt::format("x '{}' is already quantized (i8): attribute 'quantize_to' needs a float x", x.name));
  }
  const std::int64_t block = ctx.get_int("input_block_size", 1);
  if (block < 1 || block > 8) ctx.fail(fmt::format("attribute 'input_block_size' must be in [1, 8], got {}", block));
  if (block > 1 && !channels_last(ctx)) ctx.fail("attribute 'input_block_size' needs layout \"nhwc\"");
  std::vector<OutputType> out = channels_last(ctx)
                                    ? infer_pool2d_nchw(ctx, input_blocks_as_channels_first(ctx, x, block))
                                    : infer_pool2d_nchw(ctx, x);
  if (channels_last(ctx)) out[0].shape = to_channels_last(out[0].shape);
  // With `quantize_to` and output_scale (input 1): the maximum quantized (builder::fuse_quantized_outputs).
  if (const std::optional<DataType> quantized = quantized_output_type(ctx)) out[0].dtype = *quantized;
  return out;
}

std::vector<OutputType> infer_pool2d_nchw(InferContext& ctx, const TensorType& x) {
  if (ctx.get_ints("kernel").empty()) ctx.fail("attribute 'kernel' must be [kh, kw], but is empty");
  const auto kernel = spatial_list(ctx, "kernel", filled(2, 1), 1);
  const auto stride = spatial_list(ctx, "stride", kernel, 1);
  const auto padding = spatial_list(ctx, "padding", filled(2, 0), 0);
  const bool ceil_mode = ctx.get_bool("ceil_mode", false);
  if (ctx.op() == "avg_pool2d") ctx.get_bool("count_include_pad", true);  // validates the value
  for (std::size_t s = 0; s < 2; ++s) {
    if (padding[s] > kernel[s] / 2) {
      ctx.fail(fmt::format("attribute 'padding' [{}] must be at most half of 'kernel' [{}]", fmt::join(padding, ","),
                           fmt::join(kernel, ",")));
    }
  }
  require_nonempty_spatial(ctx, x);

  DimPool& d = ctx.dims();
  std::vector<DimId> shape = {x.shape[0], x.shape[1]};
  for (std::size_t s = 0; s < 2; ++s) {
    const DimId size = x.shape[s + 2];
    const DimId room = d.sub(d.add(size, d.constant(2 * padding[s])), d.constant(kernel[s]));  // size + 2p - k
    if (auto v = ctx.value(room); v && *v < 0) {
      ctx.fail(fmt::format("spatial dim {} of x '{}' {} is {} with padding, smaller than the kernel [{}]", s, x.name,
                           ctx.shape_string(x.shape), *v + kernel[s], fmt::join(kernel, ",")));
    }
    const DimId step = d.constant(stride[s]);
    DimId out = d.add(d.floor_div(room, step), d.constant(1));
    if (ceil_mode) {
      // PyTorch rounds up, then drops a last window that would start past the input and its left
      // padding: the last start (out - 1) * stride must be < size + padding.
      const DimId last_start_limit = d.add(d.floor_div(d.add(size, d.constant(padding[s] - 1)), step), d.constant(1));
      out = d.min(d.add(d.ceil_div(room, step), d.constant(1)), last_start_limit);
    }
    shape.push_back(out);
  }
  return {OutputType{x.dtype, std::move(shape)}};
}

// x [N, C, ...spatial] -> [N, C, 1, ...].
std::vector<OutputType> infer_global_avg_pool(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, kFloatTypes, "x");
  if (x.rank() < 3) {
    ctx.fail(fmt::format("x '{}' must have rank >= 3 ([N, C, spatial...]), but has shape {}", x.name,
                         ctx.shape_string(x.shape)));
  }
  std::vector<DimId> shape(x.shape.size(), ctx.constant(1));
  shape[0] = x.shape[0];
  shape[1] = x.shape[1];
  if (channels_last(ctx)) {  // x [N, H, W, C] -> [N, C, 1, 1], the same as for channels first
    ctx.require_rank(x, 4, "x");
    shape[1] = x.shape[3];
  }
  return {OutputType{x.dtype, std::move(shape)}};
}

// x [N, C, H, W] -> [N, C, size[0], size[1]], PyTorch interpolate semantics.
std::vector<OutputType> infer_resize(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, kFloatTypes, "x");
  ctx.require_rank(x, 4, "x");
  const std::string mode = ctx.get_string("mode");
  if (mode != "nearest" && mode != "bilinear") {
    ctx.fail(fmt::format("attribute 'mode' must be \"nearest\" or \"bilinear\", not \"{}\"", mode));
  }
  const bool align_corners = ctx.get_bool("align_corners", false);
  if (align_corners && mode == "nearest") ctx.fail("attribute 'align_corners' applies to mode \"bilinear\" only");
  const std::vector<std::int64_t> size = ctx.get_ints("size");
  if (size.size() != 2 || size[0] < 1 || size[1] < 1 || size[0] > kMaxAttributeValue || size[1] > kMaxAttributeValue) {
    ctx.fail(fmt::format("attribute 'size' must be [H', W'] with both in [1, {}], got [{}]", kMaxAttributeValue,
                         fmt::join(size, ",")));
  }
  require_nonempty_spatial(ctx, x);
  return {OutputType{x.dtype, {x.shape[0], x.shape[1], ctx.constant(size[0]), ctx.constant(size[1])}}};
}

}  // namespace

void register_convolution_ops(std::vector<OpDef>& ops) {
  ops.push_back(OpDef{"conv",
                      2,
                      4,
                      {"stride", "padding", "dilation", "groups", "activation", "layout"},
                      infer_conv,
                      "1D/2D convolution (NCL/NCHW or NHWC), weight [O, C/groups, k...]; fused residual and relu"});
  ops.push_back(OpDef{"quantized_conv",
                      3,
                      7,
                      {"stride", "padding", "dilation", "groups", "activation", "layout", "to", "quantize_to"},
                      infer_quantized_conv,
                      "conv of i8 or f8e4m3 x and weight scaled per output channel by scale[O], + bias + residual "
                      "(or a quantized residual times residual_scale), activation; result in `to`, or quantized by "
                      "output_scale to `quantize_to`"});
  ops.push_back(OpDef{"conv_transpose2d",
                      2,
                      3,
                      {"stride", "padding", "output_padding", "dilation", "groups"},
                      infer_conv_transpose2d,
                      "2D transposed convolution, weight [C, O/groups, kh, kw]"});
  ops.push_back(OpDef{"max_pool2d",
                      1,
                      2,
                      {"kernel", "stride", "padding", "ceil_mode", "layout", "quantize_to", "input_block_size"},
                      infer_pool2d,
                      "2D max pooling (NCHW or NHWC, an NHWC input optionally in input_block_size x input_block_size "
                      "cells), optionally quantized by output_scale to `quantize_to`"});
  ops.push_back(OpDef{"avg_pool2d",
                      1,
                      1,
                      {"kernel", "stride", "padding", "ceil_mode", "count_include_pad"},
                      infer_pool2d,
                      "2D average pooling (NCHW)"});
  ops.push_back(
      OpDef{"global_avg_pool", 1, 1, {"layout"}, infer_global_avg_pool, "mean over the spatial dims, kept as 1"});
  ops.push_back(OpDef{"resize",
                      1,
                      1,
                      {"mode", "size", "align_corners"},
                      infer_resize,
                      "nearest or bilinear resize of H and W (PyTorch interpolate)"});
}

}  // namespace tensoracle::graph
