// Op definitions (inputs, attributes, dtype and shape inference) of the data_movement family.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "graph/op_def.hpp"
#include "graph/ops/quantized_output_checks.hpp"

namespace tensoracle::graph {
namespace {

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

std::string list_string(const std::vector<std::int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }

// Normalizes every axis of `axes` against `rank` and rejects repeats; `role` names the list.
std::vector<std::int64_t> normalize_unique_axes(InferContext& ctx, const std::vector<std::int64_t>& axes, int rank,
                                                const TensorType& tensor, std::string_view role) {
  std::vector<std::int64_t> out;
  for (auto a : axes) {
    if (a < -rank || a >= rank) {
      ctx.fail(fmt::format("{} {} has axis {}, out of range for tensor '{}' of rank {}", role, list_string(axes), a,
                           tensor.name, rank));
    }
    const std::int64_t n = a < 0 ? a + rank : a;
    if (std::find(out.begin(), out.end(), n) != out.end()) {
      ctx.fail(fmt::format("{} {} names axis {} more than once", role, list_string(axes), n));
    }
    out.push_back(n);
  }
  return out;
}

// ---- reshape ----

// Splits a product of dims into its constant part and its symbolic factors.
struct Factors {
  std::int64_t constant = 1;
  std::vector<DimId> symbols;
};

std::vector<OutputType> infer_reshape(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const auto shape = ctx.get_ints("shape");
  DimPool& dp = ctx.dims();
  std::vector<DimId> out(shape.size(), -1);
  int infer_at = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::int64_t s = shape[i];
    if (s == -1) {
      if (infer_at >= 0) {
        ctx.fail(fmt::format("shape {} has more than one -1; only one dim can be inferred", list_string(shape)));
      }
      infer_at = static_cast<int>(i);
    } else if (s == 0) {
      if (static_cast<int>(i) >= x.rank()) {
        ctx.fail(fmt::format("shape {} has 0 (copy the input dim) at position {}, but '{}' has rank {}",
                             list_string(shape), i, x.name, x.rank()));
      }
      out[i] = x.shape[i];
    } else if (s < 0) {
      ctx.fail(
          fmt::format("shape {} has the invalid size {}; sizes are >= 0, 0 copies the input dim, -1 infers one dim",
                      list_string(shape), s));
    } else {
      out[i] = ctx.constant(s);
    }
  }

  // Volumes as constant * symbolic factors, with common symbolic factors cancelled so that e.g.
  // [x.0, 12] -> [-1, 3, 4] infers x.0 rather than (x.0 * 12) // 12.
  Factors in, rest;
  auto add_factor = [&](Factors& f, DimId d, std::string_view what) {
    if (auto v = ctx.value(d)) {
      if (__builtin_mul_overflow(f.constant, *v, &f.constant))
        ctx.fail(fmt::format("the volume of {} overflows int64", what));
    } else {
      f.symbols.push_back(d);
    }
  };
  for (DimId d : x.shape) add_factor(in, d, fmt::format("'{}'", x.name));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) != infer_at) add_factor(rest, out[i], fmt::format("shape {}", list_string(shape)));
  }
  for (auto it = rest.symbols.begin(); it != rest.symbols.end();) {
    auto match = std::find(in.symbols.begin(), in.symbols.end(), *it);
    if (match != in.symbols.end()) {
      in.symbols.erase(match);
      it = rest.symbols.erase(it);
    } else {
      ++it;
    }
  }
  auto product = [&](const Factors& f) {
    DimId p = ctx.constant(f.constant);
    for (DimId d : f.symbols) p = dp.mul(p, d);
    return p;
  };
  const bool all_constant = in.symbols.empty() && rest.symbols.empty();
  auto mismatch = [&] {
    return fmt::format("can't reshape '{}' of shape {} to {}", x.name, ctx.shape_string(x.shape), list_string(shape));
  };

  if (infer_at < 0) {
    // Cancelled factors are equal on both sides, so equal remaining constants mean equal volumes.
    if (all_constant && in.constant != rest.constant) {
      ctx.fail(fmt::format("{}: the volumes differ ({} vs {})", mismatch(), in.constant, rest.constant));
    }
    return {OutputType{x.dtype, out}};
  }
  if (all_constant) {
    if (rest.constant == 0) {
      ctx.fail(fmt::format("{}: the -1 can't be inferred when the other sizes have a zero product", mismatch()));
    }
    if (in.constant % rest.constant != 0) {
      ctx.fail(fmt::format("{}: the volume {} is not divisible by {}", mismatch(), in.constant, rest.constant));
    }
    out[static_cast<std::size_t>(infer_at)] = ctx.constant(in.constant / rest.constant);
  } else if (rest.symbols.empty() && rest.constant != 0 && in.constant % rest.constant == 0) {
    out[static_cast<std::size_t>(infer_at)] =
        dp.mul(product(Factors{1, in.symbols}), ctx.constant(in.constant / rest.constant));
  } else {
    // Divisibility is checked when the dims are known (every dim is constant then).
    out[static_cast<std::size_t>(infer_at)] = dp.floor_div(product(in), product(rest));
  }
  return {OutputType{x.dtype, out}};
}

// ---- transpose ----

std::vector<OutputType> infer_transpose(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const auto perm = ctx.get_ints("perm");
  if (static_cast<int>(perm.size()) != x.rank()) {
    ctx.fail(
        fmt::format("perm {} has {} entries but '{}' has rank {}", list_string(perm), perm.size(), x.name, x.rank()));
  }
  const auto axes = normalize_unique_axes(ctx, perm, x.rank(), x, "perm");
  std::vector<DimId> out;
  for (auto a : axes) out.push_back(x.shape[static_cast<std::size_t>(a)]);
  return {OutputType{x.dtype, out}};
}

// ---- slice ----

std::vector<OutputType> infer_slice(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const auto starts = ctx.get_ints("starts");
  const auto ends = ctx.get_ints("ends");
  auto axes = ctx.get_ints("axes", std::vector<std::int64_t>{});
  auto steps = ctx.get_ints("steps", std::vector<std::int64_t>{});
  if (ends.size() != starts.size()) {
    ctx.fail(fmt::format("starts {} and ends {} must have the same length", list_string(starts), list_string(ends)));
  }
  if (axes.empty()) {
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size()) {
    ctx.fail(fmt::format("axes {} must have one entry per start ({} starts)", list_string(axes), starts.size()));
  }
  if (steps.size() != starts.size()) {
    ctx.fail(fmt::format("steps {} must have one entry per start ({} starts)", list_string(steps), starts.size()));
  }
  const auto norm_axes = normalize_unique_axes(ctx, axes, x.rank(), x, "axes");
  DimPool& dp = ctx.dims();
  std::vector<DimId> out = x.shape;
  const DimId zero = ctx.constant(0);
  for (std::size_t i = 0; i < norm_axes.size(); ++i) {
    const std::int64_t step = steps[i];
    if (step == 0)
      ctx.fail(fmt::format("steps {} has a 0 at position {}; steps must be non-zero", list_string(steps), i));
    const DimId d = x.shape[static_cast<std::size_t>(norm_axes[i])];
    // Negative indices count from the end; then ONNX clamps to [0, d] (step > 0) or start to
    // [0, d-1] and end to [-1, d-1] (step < 0), clamping below first so d = 0 gives length 0.
    auto resolve = [&](std::int64_t v, std::int64_t low, DimId high) {
      DimId r = v < 0 ? dp.add(d, ctx.constant(v)) : ctx.constant(v);
      return dp.min(dp.max(r, ctx.constant(low)), high);
    };
    DimId length;
    if (step > 0) {
      // Same clamp to [0, d], written so that common cases stay short expressions.
      auto resolve_forward = [&](std::int64_t v) {
        return v < 0 ? dp.max(dp.add(d, ctx.constant(v)), zero) : dp.min(ctx.constant(v), d);
      };
      const DimId s = resolve_forward(starts[i]);
      const DimId e = resolve_forward(ends[i]);
      length = dp.max(zero, dp.ceil_div(dp.sub(e, s), ctx.constant(step)));
    } else {
      const DimId last = dp.sub(d, ctx.constant(1));
      const DimId s = resolve(starts[i], 0, last);
      const DimId e = resolve(ends[i], -1, last);
      // |step| of INT64_MIN does not fit; any step >= d walks the same single element.
      const std::int64_t magnitude = step == std::numeric_limits<std::int64_t>::min() ? kInt64Max : -step;
      length = dp.max(zero, dp.ceil_div(dp.sub(s, e), ctx.constant(magnitude)));
    }
    out[static_cast<std::size_t>(norm_axes[i])] = length;
  }
  return {OutputType{x.dtype, out}};
}

// ---- concat ----

std::vector<OutputType> infer_concat(InferContext& ctx) {
  const TensorType& first = ctx.input(0, "x0");
  const std::int64_t raw_axis = ctx.get_int("axis");
  if (first.rank() == 0) ctx.fail(fmt::format("input '{}' is a scalar; concat needs tensors of rank >= 1", first.name));
  const auto axis = static_cast<std::size_t>(ctx.normalize_axis(raw_axis, first.rank(), first));
  std::vector<DimId> out = first.shape;
  DimId total = ctx.constant(0);
  for (std::size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorType& t = ctx.input(i, fmt::format("x{}", i));
    if (t.dtype != first.dtype) {
      ctx.fail(fmt::format("input '{}' has dtype {} but '{}' has {}; inputs must have the same dtype (add a cast)",
                           t.name, to_string(t.dtype), first.name, to_string(first.dtype)));
    }
    if (t.rank() != first.rank()) {
      ctx.fail(fmt::format("input '{}' has shape {} but '{}' has shape {}; inputs must have the same rank", t.name,
                           ctx.shape_string(t.shape), first.name, ctx.shape_string(first.shape)));
    }
    for (std::size_t a = 0; a < out.size(); ++a) {
      if (a == axis) continue;
      ctx.require_equal(
          out[a], t.shape[a],
          fmt::format("input '{}' of shape {} differs from '{}' of shape {} at axis {} (only axis {} may differ)",
                      t.name, ctx.shape_string(t.shape), first.name, ctx.shape_string(first.shape), a, axis));
      // A constant says more than a symbol: prefer it.
      if (!ctx.value(out[a]) && ctx.value(t.shape[a])) out[a] = t.shape[a];
    }
    total = ctx.dims().add(total, t.shape[axis]);
  }
  out[axis] = total;
  return {OutputType{first.dtype, out}};
}

// ---- split ----

std::vector<OutputType> infer_split(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const auto sizes = ctx.get_ints("sizes");
  if (x.rank() == 0) ctx.fail(fmt::format("input '{}' is a scalar; split needs rank >= 1", x.name));
  const auto axis = static_cast<std::size_t>(ctx.normalize_axis(ctx.get_int("axis"), x.rank(), x));
  if (sizes.empty()) ctx.fail("sizes is empty; give at least one size (one output per size)");
  std::int64_t sum = 0;
  for (auto s : sizes) {
    if (s < 0) ctx.fail(fmt::format("sizes {} has the negative size {}", list_string(sizes), s));
    if (__builtin_add_overflow(sum, s, &sum)) ctx.fail(fmt::format("sizes {} overflow int64", list_string(sizes)));
  }
  if (auto d = ctx.value(x.shape[axis]); d && *d != sum) {
    ctx.fail(fmt::format("sizes {} sum to {} but axis {} of '{}' (shape {}) has size {}", list_string(sizes), sum, axis,
                         x.name, ctx.shape_string(x.shape), *d));
  }
  std::vector<OutputType> outs;
  for (auto s : sizes) {
    std::vector<DimId> shape = x.shape;
    shape[axis] = ctx.constant(s);
    outs.push_back(OutputType{x.dtype, shape});
  }
  return outs;
}

// ---- gather ----

std::vector<OutputType> infer_gather(InferContext& ctx) {
  const TensorType& data = ctx.input(0, "data");
  const TensorType& indices = ctx.input(1, "indices");
  ctx.require_dtype(indices, {DataType::kI32, DataType::kI64}, "indices");
  if (data.rank() == 0) ctx.fail(fmt::format("data '{}' is a scalar; gather needs rank >= 1", data.name));
  const auto axis = static_cast<std::size_t>(ctx.normalize_axis(ctx.get_int("axis", 0), data.rank(), data));
  std::vector<DimId> out(data.shape.begin(), data.shape.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), indices.shape.begin(), indices.shape.end());
  out.insert(out.end(), data.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.shape.end());
  return {OutputType{data.dtype, out}};
}

// ---- squeeze / unsqueeze ----

std::vector<OutputType> infer_squeeze(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const auto axes = ctx.get_ints("axes", std::vector<std::int64_t>{});
  std::vector<bool> drop(static_cast<std::size_t>(x.rank()), false);
  if (axes.empty()) {
    for (std::size_t a = 0; a < drop.size(); ++a) {
      auto v = ctx.value(x.shape[a]);
      // Which dynamic dims are 1 is known only at run time, and the output rank can't depend on it.
      if (!v) {
        ctx.fail(
            fmt::format("axes is empty (squeeze every size-1 dim) but '{}' has the dynamic shape {}; list the axes to "
                        "squeeze explicitly",
                        x.name, ctx.shape_string(x.shape)));
      }
      drop[a] = *v == 1;
    }
  } else {
    for (auto a : normalize_unique_axes(ctx, axes, x.rank(), x, "axes")) {
      const DimId d = x.shape[static_cast<std::size_t>(a)];
      if (auto v = ctx.value(d); v && *v != 1) {
        ctx.fail(fmt::format("axis {} of '{}' (shape {}) has size {}; only size-1 dims can be squeezed", a, x.name,
                             ctx.shape_string(x.shape), *v));
      }
      drop[static_cast<std::size_t>(a)] = true;
    }
  }
  std::vector<DimId> out;
  for (std::size_t a = 0; a < drop.size(); ++a) {
    if (!drop[a]) out.push_back(x.shape[a]);
  }
  return {OutputType{x.dtype, out}};
}

std::vector<OutputType> infer_unsqueeze(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const auto axes = ctx.get_ints("axes");
  if (axes.empty()) ctx.fail("axes is empty; list the positions of the new size-1 dims in the output");
  const int out_rank = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> is_new(static_cast<std::size_t>(out_rank), false);
  for (auto a : normalize_unique_axes(ctx, axes, out_rank, x, "axes (positions in the output)")) {
    is_new[static_cast<std::size_t>(a)] = true;
  }
  std::vector<DimId> out;
  std::size_t next = 0;
  for (std::size_t a = 0; a < is_new.size(); ++a) out.push_back(is_new[a] ? ctx.constant(1) : x.shape[next++]);
  return {OutputType{x.dtype, out}};
}

// ---- expand ----

std::vector<OutputType> infer_expand(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const auto shape = ctx.get_ints("shape");
  if (static_cast<int>(shape.size()) < x.rank()) {
    ctx.fail(fmt::format("shape {} has fewer dims than '{}' of shape {}; expand can only add leading dims",
                         list_string(shape), x.name, ctx.shape_string(x.shape)));
  }
  const std::size_t lead = shape.size() - static_cast<std::size_t>(x.rank());
  std::vector<DimId> out;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::int64_t t = shape[i];
    if (t < -1) ctx.fail(fmt::format("shape {} has the invalid size {}", list_string(shape), t));
    if (i < lead) {
      if (t == -1)
        ctx.fail(fmt::format("shape {} has -1 at position {}, a new leading dim; new dims need a size",
                             list_string(shape), i));
      out.push_back(ctx.constant(t));
      continue;
    }
    const DimId d = x.shape[i - lead];
    if (t == -1) {
      out.push_back(d);
      continue;
    }
    // Only size-1 dims stretch; any other dim must already be the target size.
    if (auto v = ctx.value(d); v && *v != 1 && *v != t) {
      ctx.fail(fmt::format("can't expand '{}' of shape {} to {}: axis {} has size {}, which is neither 1 nor {}",
                           x.name, ctx.shape_string(x.shape), list_string(shape), i - lead, *v, t));
    }
    out.push_back(ctx.constant(t));
  }
  return {OutputType{x.dtype, out}};
}

// ---- pad ----

std::vector<OutputType> infer_pad(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  const auto pads = ctx.get_ints("pads");
  const std::string mode = ctx.get_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") {
    ctx.fail(fmt::format("mode '{}' is not one of constant, reflect, edge", mode));
  }
  const double value = ctx.get_float("value", 0.0);
  (void)value;
  const auto rank = static_cast<std::size_t>(x.rank());
  if (pads.size() != 2 * rank) {
    ctx.fail(fmt::format("pads {} has {} entries; '{}' of rank {} needs {} (all begins, then all ends)",
                         list_string(pads), pads.size(), x.name, rank, 2 * rank));
  }
  for (auto p : pads) {
    if (p < 0)
      ctx.fail(fmt::format("pads {} has the negative pad {}; negative pads (cropping) are not supported, use slice",
                           list_string(pads), p));
  }
  DimPool& dp = ctx.dims();
  std::vector<DimId> out;
  for (std::size_t a = 0; a < rank; ++a) {
    const std::int64_t begin = pads[a], end = pads[a + rank];
    std::int64_t both = 0;
    if (__builtin_add_overflow(begin, end, &both)) ctx.fail(fmt::format("pads {} overflow int64", list_string(pads)));
    const DimId d = x.shape[a];
    if (auto v = ctx.value(d)) {
      if (mode == "reflect" && (begin >= *v || end >= *v) && both > 0) {
        ctx.fail(fmt::format(
            "reflect padding of axis {} by ({}, {}) needs pads smaller than its size {} ('{}' has shape {})", a, begin,
            end, *v, x.name, ctx.shape_string(x.shape)));
      }
      if (mode == "edge" && *v == 0 && both > 0) {
        ctx.fail(fmt::format("edge padding of axis {} needs a non-empty dim, but '{}' has shape {}", a, x.name,
                             ctx.shape_string(x.shape)));
      }
      std::int64_t total = 0;
      if (__builtin_add_overflow(*v, both, &total)) ctx.fail(fmt::format("pads {} overflow int64", list_string(pads)));
    }
    out.push_back(dp.add(d, ctx.constant(both)));
  }
  return {OutputType{x.dtype, out}};
}

// ---- space_to_depth ----

// x [N, C, H, W], zero-padded by `pads` [top, left, bottom, right], regrouped in block x block cells: output channel
// (by * block + bx) * C + c holds x[n, c, i * block + by - top, j * block + bx - left] (ONNX's DCR order), zeros in
// channels C * block^2 .. `channels`; [N, channels, H', W'], or [N, H', W', channels] with output_layout "nhwc". With
// `quantize_to` (i8 or f8e4m3) and output_scale (input 1, an f32 scalar), a float x's values are written quantized, as
// quantize rounds them (a quantized stem's input: builder::to_channels_last).
std::vector<OutputType> infer_space_to_depth(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  std::optional<DataType> quantized = quantized_output_type(ctx);
  if (quantized && std::find(kFloatTypes.begin(), kFloatTypes.end(), x.dtype) == kFloatTypes.end()) {
    ctx.fail(fmt::format("x '{}' has dtype {}; 'quantize_to' needs a float x (f32, f16, bf16 or f64)", x.name,
                         to_string(x.dtype)));
  }
  if (x.rank() != 4) {
    ctx.fail(fmt::format("'{}' has shape {}; space_to_depth takes an image [N, C, H, W]", x.name,
                         ctx.shape_string(x.shape)));
  }
  const std::int64_t block = ctx.get_int("block_size");
  if (block < 1 || block > 64) ctx.fail(fmt::format("block_size {} is not in [1, 64]", block));
  const auto pads = ctx.get_ints("pads", std::vector<std::int64_t>{0, 0, 0, 0});
  if (pads.size() != 4) {
    ctx.fail(
        fmt::format("pads {} has {} entries; it takes [top, left, bottom, right]", list_string(pads), pads.size()));
  }
  for (auto p : pads) {
    if (p < 0 || p > (std::int64_t{1} << 40))
      ctx.fail(fmt::format("pads {} has the pad {}; pads are in [0, 2^40]", list_string(pads), p));
  }
  const std::string layout = ctx.get_string("output_layout", "nchw");
  if (layout != "nchw" && layout != "nhwc") ctx.fail(fmt::format("output_layout '{}' is not nchw or nhwc", layout));
  DimPool& dp = ctx.dims();
  const DimId b = ctx.constant(block);
  DimId channels = dp.mul(x.shape[1], ctx.constant(block * block));
  if (ctx.has("channels")) {
    const std::int64_t wanted = ctx.get_int("channels");
    const std::optional<std::int64_t> c = ctx.value(x.shape[1]);
    if (!c)
      ctx.fail(fmt::format("'channels' needs the channels of '{}' (shape {}) to be static", x.name,
                           ctx.shape_string(x.shape)));
    if (wanted < *c * block * block) {
      ctx.fail(fmt::format("channels {} is below the {} that {} channels in {}x{} blocks fill", wanted,
                           *c * block * block, *c, block, block));
    }
    if (wanted > (std::int64_t{1} << 40)) ctx.fail(fmt::format("channels {} is above 2^40", wanted));
    channels = ctx.constant(wanted);
  }
  std::vector<DimId> extent;
  for (std::size_t a = 0; a < 2; ++a) {
    const DimId padded = dp.add(x.shape[a + 2], ctx.constant(pads[a] + pads[a + 2]));
    if (auto v = ctx.value(padded); v && *v % block != 0) {
      ctx.fail(fmt::format("the padded {} of '{}' (shape {}, pads {}) is {}, not a multiple of block_size {}",
                           a == 0 ? "height" : "width", x.name, ctx.shape_string(x.shape), list_string(pads), *v,
                           block));
    }
    extent.push_back(dp.floor_div(padded, b));
  }
  const DataType dtype = quantized.value_or(x.dtype);
  if (layout == "nhwc") return {OutputType{dtype, {x.shape[0], extent[0], extent[1], channels}}};
  return {OutputType{dtype, {x.shape[0], channels, extent[0], extent[1]}}};
}

}  // namespace

void register_data_movement_ops(std::vector<OpDef>& ops) {
  ops.push_back(
      OpDef{"reshape", 1, 1, {"shape"}, infer_reshape, "same elements in a new shape (0 copies a dim, -1 infers one)"});
  ops.push_back(OpDef{"transpose", 1, 1, {"perm"}, infer_transpose, "permutes the axes"});
  ops.push_back(OpDef{
      "slice", 1, 1, {"starts", "ends", "axes", "steps"}, infer_slice, "strided slices along axes (ONNX semantics)"});
  ops.push_back(OpDef{"concat", 1, -1, {"axis"}, infer_concat, "joins tensors along an axis"});
  ops.push_back(
      OpDef{"split", 1, 1, {"sizes", "axis"}, infer_split, "splits a tensor along an axis, one output per size"});
  ops.push_back(OpDef{"gather", 2, 2, {"axis"}, infer_gather, "takes the entries of data at indices along an axis"});
  ops.push_back(OpDef{"squeeze", 1, 1, {"axes"}, infer_squeeze, "removes size-1 dims"});
  ops.push_back(OpDef{"unsqueeze", 1, 1, {"axes"}, infer_unsqueeze, "inserts size-1 dims at output positions"});
  ops.push_back(OpDef{"expand", 1, 1, {"shape"}, infer_expand, "broadcasts to a target shape (torch.expand)"});
  ops.push_back(OpDef{
      "pad", 1, 1, {"pads", "mode", "value"}, infer_pad, "pads each axis at both ends (constant, reflect, edge)"});
  ops.push_back(OpDef{"space_to_depth",
                      1,
                      2,
                      {"block_size", "pads", "output_layout", "channels", "quantize_to"},
                      infer_space_to_depth,
                      "moves block x block cells of a zero-padded image into channels (ONNX's DCR order)"});
}

}  // namespace tensoracle::graph
