// CPU reference kernels of the convolution family: conv (im2col + gemm), conv_transpose2d (gemm + col2im), pooling,
// resize.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/blas.hpp"
#include "backends/cpu/kernels/numeric.hpp"
#include "backends/cpu/kernels/quantized_rounding.hpp"
#include "core/bytes.hpp"

namespace tensoracle::cpu {
namespace {

using blas::load;

// c[m, n] = op(a) · b: the shared gemm without a transposed b.
template <typename T>
void gemm(const KernelContext& ctx, bool trans_a, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
          const T* b, T* c) {
  blas::gemm(ctx, trans_a, false, m, n, k, a, b, c);
}

// ---- geometry ----

// One spatial axis of a convolution or pooling: the input position of output o and kernel tap i
// is o * stride - padding + i * dilation.
struct Axis {
  std::int64_t in = 1, kernel = 1, stride = 1, padding = 0, dilation = 1, out = 1;
  std::int64_t source(std::int64_t o, std::int64_t i) const { return o * stride - padding + i * dilation; }
};

std::int64_t list_value(const KernelContext& ctx, const char* name, std::size_t i, std::int64_t fallback) {
  const std::vector<std::int64_t> values = ctx.get_ints(name, std::vector<std::int64_t>{});
  return values.empty() ? fallback : values.at(i);
}

// The H and W axes of a layer with stride/padding/dilation lists; a 1D layer ([N, C, L]) is
// treated as 2D with H = 1.
std::array<Axis, 2> conv_axes(const KernelContext& ctx, const Dims& x, const Dims& weight, const Dims& out) {
  std::array<Axis, 2> axes;
  const int spatial = x.rank() - 2;
  for (int i = 0; i < spatial; ++i) {
    Axis& a = axes[static_cast<std::size_t>(2 - spatial + i)];
    const auto s = static_cast<std::size_t>(i);
    a.in = x[i + 2];
    a.kernel = weight[i + 2];
    a.out = out[i + 2];
    a.stride = list_value(ctx, "stride", s, 1);
    a.padding = list_value(ctx, "padding", s, 0);
    a.dilation = list_value(ctx, "dilation", s, 1);
  }
  return axes;
}

bool channels_last(const KernelContext& ctx) { return ctx.get_string("layout", "nchw") == "nhwc"; }

// [N, H, W, C] -> [N, C, H, W] (to_channels_first) and back (to_channels_last); elements are moved as bytes.
HostTensor permute_channels(const TensorRef& t, bool to_first) {
  const Dims& s = t.shape;
  const std::int64_t n = s[0], h = to_first ? s[1] : s[2], w = to_first ? s[2] : s[3], c = to_first ? s[3] : s[1];
  HostTensor r(t.dtype, to_first ? Dims{n, c, h, w} : Dims{n, h, w, c});
  const std::size_t e = element_size(t.dtype);
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t y = 0; y < h; ++y) {
      for (std::int64_t x = 0; x < w; ++x) {
        for (std::int64_t k = 0; k < c; ++k) {
          const std::int64_t first = ((b * c + k) * h + y) * w + x, last = ((b * h + y) * w + x) * c + k;
          const std::int64_t from = to_first ? last : first, to = to_first ? first : last;
          std::memcpy(r.bytes.data() + static_cast<std::size_t>(to) * e,
                      t.bytes.data() + static_cast<std::size_t>(from) * e, e);
        }
      }
    }
  }
  return r;
}
HostTensor to_channels_first(const TensorRef& t) { return permute_channels(t, true); }
HostTensor to_channels_last(const TensorRef& t) { return permute_channels(t, false); }

// max_pool2d's x [N, H, W, b·b·C] in b x b cells (`input_block_size`; element (dy, dx) of a cell at channels
// (dy·b + dx)·C) -> [N, C, b·H, b·W].
HostTensor blocks_to_channels_first(const TensorRef& t, std::int64_t b) {
  const Dims& s = t.shape;
  const std::int64_t n = s[0], h = s[1], w = s[2], c = s[3] / (b * b);
  HostTensor r(t.dtype, Dims{n, c, b * h, b * w});
  const std::size_t e = element_size(t.dtype);
  std::size_t from = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t y = 0; y < h; ++y) {
      for (std::int64_t x = 0; x < w; ++x) {
        for (std::int64_t dy = 0; dy < b; ++dy) {
          for (std::int64_t dx = 0; dx < b; ++dx) {
            for (std::int64_t k = 0; k < c; ++k, ++from) {
              const std::int64_t to = ((i * c + k) * b * h + b * y + dy) * b * w + b * x + dx;
              std::memcpy(r.bytes.data() + static_cast<std::size_t>(to) * e, t.bytes.data() + from * e, e);
            }
          }
        }
      }
    }
  }
  return r;
}

// out (channels first) = y + bias[channel]; for conv also the fused epilogue: + residual, then the activation. The
// sum is rounded once, to out's dtype. The bias is input `bias_input` (conv's 2, quantized_conv's 3), the residual
// the next one; quantized_conv's residual may be quantized, times the scalar at `residual_scale_input` (exact in
// double, not rounded to out's dtype first).
void add_bias_and_store(const KernelContext& ctx, const TensorRef& out, std::vector<double> y, bool epilogue = false,
                        std::size_t bias_input = 2, std::size_t output_scale_input = SIZE_MAX,
                        std::size_t residual_scale_input = SIZE_MAX) {
  if (ctx.has_input(bias_input) && !y.empty()) {
    const std::vector<double> bias = to_f64(ctx.input(bias_input));
    const std::int64_t channels = out.shape[1], plane = out.shape[2] * (out.shape.rank() == 4 ? out.shape[3] : 1);
    for (std::size_t i = 0; i < y.size(); ++i) {
      y[i] += bias[static_cast<std::size_t>(static_cast<std::int64_t>(i) / plane % channels)];
    }
  }
  if (epilogue && ctx.has_input(bias_input + 1)) {
    const TensorRef& r = ctx.input(bias_input + 1);
    HostTensor first = channels_last(ctx) ? to_channels_first(r) : HostTensor();
    const std::vector<double> residual = channels_last(ctx) ? to_f64(first) : to_f64(r);
    const double scale = ctx.has_input(residual_scale_input) ? to_f64(ctx.input(residual_scale_input))[0] : 1.0;
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += residual[i] * scale;
  }
  if (epilogue && ctx.get_string("activation", "none") == "relu") {
    for (double& v : y) v = v < 0.0 ? 0.0 : v;  // as the relu kernel
  }
  // quantized_conv with `quantize_to`: the value quantized by output_scale, once, as quantize rounds.
  if (ctx.has_input(output_scale_input)) quantize_in_place(y, to_f64(ctx.input(output_scale_input))[0], out.dtype);
  from_f64(out, y);
}

// ---- conv: per sample and group, im2col then weight [O/g, C/g·kh·kw] · cols [C/g·kh·kw, OH·OW] ----

// The sums of conv (x, w and out channels first), before bias and epilogue.
template <typename T>
std::vector<double> conv_sums(KernelContext& ctx, const TensorRef& x, const TensorRef& w, const TensorRef& out) {
  const std::array<Axis, 2> axes = conv_axes(ctx, x.shape, w.shape, out.shape);
  const Axis &ah = axes[0], &aw = axes[1];
  const std::int64_t batch = x.shape[0], channels = x.shape[1], out_channels = out.shape[1];
  const std::int64_t groups = ctx.get_int("groups", 1);
  const std::int64_t group_in = channels / groups, group_out = out_channels / groups;
  const std::int64_t taps = ah.kernel * aw.kernel, in_plane = ah.in * aw.in, out_plane = ah.out * aw.out;

  const std::vector<T> vx = load<T>(x), vw = load<T>(w);
  std::vector<T> cols(static_cast<std::size_t>(group_in * taps * out_plane));
  std::vector<T> y(out.size());
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t g = 0; g < groups; ++g) {
      // cols[(c, i, j), (oh, ow)] = x[n, g·C/g + c, ih, iw], zero in the padding.
      const T* xg = vx.data() + (n * channels + g * group_in) * in_plane;
      std::size_t at = 0;
      for (std::int64_t c = 0; c < group_in; ++c) {
        for (std::int64_t i = 0; i < ah.kernel; ++i) {
          for (std::int64_t j = 0; j < aw.kernel; ++j) {
            for (std::int64_t oh = 0; oh < ah.out; ++oh) {
              const std::int64_t ih = ah.source(oh, i);
              for (std::int64_t ow = 0; ow < aw.out; ++ow) {
                const std::int64_t iw = aw.source(ow, j);
                const bool inside = ih >= 0 && ih < ah.in && iw >= 0 && iw < aw.in;
                cols[at++] = inside ? xg[c * in_plane + ih * aw.in + iw] : T(0);
              }
            }
          }
        }
      }
      gemm(ctx, false, group_out, out_plane, group_in * taps, vw.data() + g * group_out * group_in * taps, cols.data(),
           y.data() + (n * out_channels + g * group_out) * out_plane);
    }
  }
  return std::vector<double>(y.begin(), y.end());
}

// x, w and out channels first.
template <typename T>
void conv(KernelContext& ctx, const TensorRef& x, const TensorRef& w, const TensorRef& out) {
  add_bias_and_store(ctx, out, conv_sums<T>(ctx, x, w, out), true);
}

// quantized_conv, channels first: the sums of the i8 or f8e4m3 values in double (products and sums exact for i8,
// within a double's rounding for f8e4m3), times scale[channel], then bias, residual and activation, rounded once (with
// `quantize_to`: divided by output_scale and rounded onto the quantized grid, not rounded to `to` first).
void quantized_conv(KernelContext& ctx, const TensorRef& x, const TensorRef& w, const TensorRef& out) {
  std::vector<double> y = conv_sums<double>(ctx, x, w, out);
  const std::vector<double> scale = to_f64(ctx.input(2));
  const std::int64_t channels = out.shape[1], plane = out.shape[2] * out.shape[3];
  for (std::size_t i = 0; i < y.size(); ++i) {
    y[i] *= scale[static_cast<std::size_t>(static_cast<std::int64_t>(i) / plane % channels)];
  }
  add_bias_and_store(ctx, out, std::move(y), true, 3, 5, 6);
}

// ---- conv_transpose2d: per sample and group, cols = weightᵀ [O/g·kh·kw, C/g] · x [C/g, H·W], then col2im ----

template <typename T>
void conv_transpose2d(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& w = ctx.input(1);
  const TensorRef& out = ctx.output(0);
  const std::array<Axis, 2> axes = conv_axes(ctx, x.shape, w.shape, out.shape);
  const Axis &ah = axes[0], &aw = axes[1];
  const std::int64_t batch = x.shape[0], channels = x.shape[1], out_channels = out.shape[1];
  const std::int64_t groups = ctx.get_int("groups", 1);
  const std::int64_t group_in = channels / groups, group_out = out_channels / groups;
  const std::int64_t taps = ah.kernel * aw.kernel, in_plane = ah.in * aw.in, out_plane = ah.out * aw.out;

  const std::vector<T> vx = load<T>(x), vw = load<T>(w);
  std::vector<T> cols(static_cast<std::size_t>(group_out * taps * in_plane));
  // The scatter of col2im sums several taps into one output: accumulated in double, rounded once.
  std::vector<double> y(out.size(), 0.0);
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t g = 0; g < groups; ++g) {
      gemm(ctx, true, group_out * taps, in_plane, group_in, vw.data() + g * group_in * group_out * taps,
           vx.data() + (n * channels + g * group_in) * in_plane, cols.data());
      // Input (ih, iw) through tap (i, j) lands on output (ih·stride - padding + i·dilation, ...):
      // the same relation as conv's, read the other way.
      double* yg = y.data() + (n * out_channels + g * group_out) * out_plane;
      std::size_t at = 0;
      for (std::int64_t o = 0; o < group_out; ++o) {
        for (std::int64_t i = 0; i < ah.kernel; ++i) {
          for (std::int64_t j = 0; j < aw.kernel; ++j) {
            for (std::int64_t ih = 0; ih < ah.in; ++ih) {
              const std::int64_t oh = ah.source(ih, i);
              for (std::int64_t iw = 0; iw < aw.in; ++iw, ++at) {
                const std::int64_t ow = aw.source(iw, j);
                if (oh >= 0 && oh < ah.out && ow >= 0 && ow < aw.out) yg[o * out_plane + oh * aw.out + ow] += cols[at];
              }
            }
          }
        }
      }
    }
  }
  add_bias_and_store(ctx, out, std::move(y));
}

// f64 runs in double (dgemm); every other float dtype in float (sgemm, fp32 accumulation).
// Channels last runs as channels first on permuted copies.
// Runs `run(x, w, out)` channels first: on the layer's tensors, or for layout "nhwc" on permuted copies.
template <typename Run>
void channels_first(KernelContext& ctx, Run run) {
  if (!channels_last(ctx)) return run(ctx.input(0), ctx.input(1), ctx.output(0));
  HostTensor x = to_channels_first(ctx.input(0));
  HostTensor w = to_channels_first(ctx.input(1));
  const TensorRef& out = ctx.output(0);
  HostTensor y(out.dtype, Dims{out.shape[0], out.shape[3], out.shape[1], out.shape[2]});
  run(x, w, y);
  const HostTensor back = to_channels_last(y);
  copy_bytes(out.bytes.data(), back.bytes.data(), back.bytes.size());
}

void conv_kernel(KernelContext& ctx) {
  const bool f64 = ctx.input(0).dtype == DataType::kF64;
  channels_first(ctx, [&](const TensorRef& x, const TensorRef& w, const TensorRef& out) {
    if (f64) return conv<double>(ctx, x, w, out);
    conv<float>(ctx, x, w, out);
  });
}

void quantized_conv_kernel(KernelContext& ctx) {
  channels_first(ctx,
                 [&](const TensorRef& x, const TensorRef& w, const TensorRef& out) { quantized_conv(ctx, x, w, out); });
}

void conv_transpose2d_kernel(KernelContext& ctx) {
  if (ctx.input(0).dtype == DataType::kF64) return conv_transpose2d<double>(ctx);
  conv_transpose2d<float>(ctx);
}

// ---- pooling (in double) ----

std::array<Axis, 2> pool_axes(const KernelContext& ctx, const Dims& x, const Dims& out) {
  const std::vector<std::int64_t> kernel = ctx.get_ints("kernel");
  std::array<Axis, 2> axes;
  for (std::size_t s = 0; s < 2; ++s) {
    Axis& a = axes[s];
    a.in = x[static_cast<int>(s) + 2];
    a.out = out[static_cast<int>(s) + 2];
    a.kernel = kernel.at(s);
    a.stride = list_value(ctx, "stride", s, a.kernel);
    a.padding = list_value(ctx, "padding", s, 0);
  }
  return axes;
}

// Calls f(plane, oh, ow, out_index) for every output element of an [N, C, OH, OW] result.
template <typename F>
void for_each_output(const TensorRef& out, F f) {
  const std::int64_t planes = out.shape[0] * out.shape[1];
  std::size_t at = 0;
  for (std::int64_t p = 0; p < planes; ++p) {
    for (std::int64_t oh = 0; oh < out.shape[2]; ++oh) {
      for (std::int64_t ow = 0; ow < out.shape[3]; ++ow) f(p, oh, ow, at++);
    }
  }
}

// x and out channels first.
void max_pool2d(const KernelContext& ctx, const TensorRef& x, const TensorRef& out) {
  const std::array<Axis, 2> axes = pool_axes(ctx, x.shape, out.shape);
  const Axis &ah = axes[0], &aw = axes[1];
  const std::vector<double> vx = to_f64(x);
  std::vector<double> y(out.size());
  for_each_output(out, [&](std::int64_t p, std::int64_t oh, std::int64_t ow, std::size_t at) {
    // Padding never wins; the shape rules leave at least one input in every window.
    double best = -std::numeric_limits<double>::infinity();
    for (std::int64_t ih = std::max<std::int64_t>(ah.source(oh, 0), 0); ih < std::min(ah.source(oh, ah.kernel), ah.in);
         ++ih) {
      for (std::int64_t iw = std::max<std::int64_t>(aw.source(ow, 0), 0);
           iw < std::min(aw.source(ow, aw.kernel), aw.in); ++iw) {
        const double v = vx[static_cast<std::size_t>((p * ah.in + ih) * aw.in + iw)];
        if (v > best || std::isnan(v)) best = v;  // NaN propagates, as in PyTorch
      }
    }
    y[at] = best;
  });
  // `quantize_to`: the maximum (one of x's values, so exact in x's type) quantized by output_scale as quantize rounds.
  if (ctx.has_input(1)) quantize_in_place(y, to_f64(ctx.input(1))[0], out.dtype);
  from_f64(out, y);
}

void max_pool2d_kernel(KernelContext& ctx) {
  if (!channels_last(ctx)) return max_pool2d(ctx, ctx.input(0), ctx.output(0));
  const std::int64_t block = ctx.get_int("input_block_size", 1);
  HostTensor x = block > 1 ? blocks_to_channels_first(ctx.input(0), block) : to_channels_first(ctx.input(0));
  const TensorRef& out = ctx.output(0);
  HostTensor y(out.dtype, Dims{out.shape[0], out.shape[3], out.shape[1], out.shape[2]});
  max_pool2d(ctx, x, y);
  const HostTensor back = to_channels_last(y);
  copy_bytes(out.bytes.data(), back.bytes.data(), back.bytes.size());
}

void avg_pool2d_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const std::array<Axis, 2> axes = pool_axes(ctx, x.shape, out.shape);
  const Axis &ah = axes[0], &aw = axes[1];
  const bool count_include_pad = ctx.get_bool("count_include_pad", true);
  const std::vector<double> vx = to_f64(x);
  std::vector<double> y(out.size());
  for_each_output(out, [&](std::int64_t p, std::int64_t oh, std::int64_t ow, std::size_t at) {
    // PyTorch's divisor: with count_include_pad the window clipped to the padded input (a ceil_mode
    // window may reach past it), otherwise the window clipped to the input.
    const std::int64_t h0 = ah.source(oh, 0), w0 = aw.source(ow, 0);
    const std::int64_t h1 = std::min(h0 + ah.kernel, ah.in + ah.padding),
                       w1 = std::min(w0 + aw.kernel, aw.in + aw.padding);
    const std::int64_t padded_count = (h1 - h0) * (w1 - w0);
    const std::int64_t hb = std::max<std::int64_t>(h0, 0), wb = std::max<std::int64_t>(w0, 0);
    const std::int64_t he = std::min(h1, ah.in), we = std::min(w1, aw.in);
    double sum = 0.0;
    for (std::int64_t ih = hb; ih < he; ++ih) {
      for (std::int64_t iw = wb; iw < we; ++iw) sum += vx[static_cast<std::size_t>((p * ah.in + ih) * aw.in + iw)];
    }
    y[at] = sum / static_cast<double>(count_include_pad ? padded_count : (he - hb) * (we - wb));
  });
  from_f64(out, y);
}

// Mean over every spatial dim of [N, C, ...]; an empty spatial extent gives NaN (0/0), as torch.mean.
void global_avg_pool_kernel(KernelContext& ctx) {
  const bool last = channels_last(ctx);
  HostTensor first = last ? to_channels_first(ctx.input(0)) : HostTensor();
  const TensorRef x = last ? TensorRef(first) : ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const std::vector<double> vx = to_f64(x);
  const std::size_t planes = out.size();
  const std::size_t plane = planes == 0 ? 0 : vx.size() / planes;
  std::int64_t count = 1;
  for (int i = 2; i < x.shape.rank(); ++i) count *= x.shape[i];
  std::vector<double> y(planes);
  for (std::size_t p = 0; p < planes; ++p) {
    double sum = 0.0;
    for (std::size_t i = 0; i < plane; ++i) sum += vx[p * plane + i];
    y[p] = count == 0 ? std::numeric_limits<double>::quiet_NaN() : sum / static_cast<double>(count);
  }
  from_f64(out, y);
}

// ---- resize (PyTorch interpolate) ----

// PyTorch's 'nearest' (the legacy, asymmetric one): floor(dst · in / out), here exactly. PyTorch's
// f64 kernel agrees (it rounds dst · in/out to float before the floor); its f32 kernel, and some f64
// shapes, compute the scale in float instead and differ where dst · in/out is an integer (26 -> 22
// maps dst 11 to 12, not 13). Written so that no product can overflow: in = q·out + r.
std::int64_t nearest_source(std::int64_t dst, std::int64_t in, std::int64_t out) {
  return dst * (in / out) + dst * (in % out) / out;
}

// The two source indices of a bilinear output position and the weight of the second.
struct LinearTap {
  std::int64_t i0 = 0, i1 = 0;
  double lambda = 0.0;
};

// As PyTorch's upsample_bilinear2d: source = scale · dst (align_corners) or scale · (dst + 0.5) - 0.5
// clamped at 0 (half-pixel centers), then the floor and the next index, clamped to the input.
LinearTap bilinear_source(std::int64_t dst, std::int64_t in, std::int64_t out, bool align_corners) {
  double src = 0.0;
  if (align_corners) {
    const double scale = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
    src = scale * static_cast<double>(dst);
  } else {
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    src = std::max(scale * (static_cast<double>(dst) + 0.5) - 0.5, 0.0);
  }
  LinearTap tap;
  tap.i0 = static_cast<std::int64_t>(src);
  tap.i1 = tap.i0 < in - 1 ? tap.i0 + 1 : tap.i0;
  tap.lambda = std::clamp(src - static_cast<double>(tap.i0), 0.0, 1.0);
  return tap;
}

void resize_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const bool bilinear = ctx.get_string("mode") == "bilinear";
  const bool align_corners = ctx.get_bool("align_corners", false);
  const std::int64_t in_h = x.shape[2], in_w = x.shape[3], out_h = out.shape[2], out_w = out.shape[3];
  const std::vector<double> vx = to_f64(x);
  std::vector<double> y(out.size());
  for_each_output(out, [&](std::int64_t p, std::int64_t oh, std::int64_t ow, std::size_t at) {
    auto value = [&](std::int64_t ih, std::int64_t iw) {
      return vx[static_cast<std::size_t>((p * in_h + ih) * in_w + iw)];
    };
    if (!bilinear) {
      y[at] = value(nearest_source(oh, in_h, out_h), nearest_source(ow, in_w, out_w));
      return;
    }
    const LinearTap th = bilinear_source(oh, in_h, out_h, align_corners);
    const LinearTap tw = bilinear_source(ow, in_w, out_w, align_corners);
    const double top = (1.0 - tw.lambda) * value(th.i0, tw.i0) + tw.lambda * value(th.i0, tw.i1);
    const double bottom = (1.0 - tw.lambda) * value(th.i1, tw.i0) + tw.lambda * value(th.i1, tw.i1);
    y[at] = (1.0 - th.lambda) * top + th.lambda * bottom;
  });
  from_f64(out, y);
}

}  // namespace

void register_convolution_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back({"conv", conv_kernel});
  kernels.push_back({"quantized_conv", quantized_conv_kernel});
  kernels.push_back({"conv_transpose2d", conv_transpose2d_kernel});
  kernels.push_back({"max_pool2d", max_pool2d_kernel});
  kernels.push_back({"avg_pool2d", avg_pool2d_kernel});
  kernels.push_back({"global_avg_pool", global_avg_pool_kernel});
  kernels.push_back({"resize", resize_kernel});
}

}  // namespace tensoracle::cpu
