// CPU reference kernels of the quantization family: symmetric (zero point 0) quantize and dequantize, i8 and f8e4m3,
// and the quantized linear (a product of quantized operands, scaled per output feature).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/blas.hpp"
#include "backends/cpu/kernels/epilogue.hpp"
#include "backends/cpu/kernels/numeric.hpp"
#include "backends/cpu/kernels/quantized_rounding.hpp"

namespace tensoracle::cpu {
namespace {

// Which scale applies to element i of x: scale[0] per tensor, or its index along `axis` per channel.
struct ChannelOf {
  std::size_t inner = 1;     // elements per step along the axis
  std::size_t channels = 1;  // scale values
  std::size_t operator()(std::size_t i) const { return channels == 1 ? 0 : (i / inner) % channels; }
};

ChannelOf channel_of(const KernelContext& ctx, const TensorRef& x, const TensorRef& scale) {
  if (scale.shape.rank() == 0) return {};
  const std::int64_t axis_attr = ctx.get_int("axis", 0);
  const auto axis = static_cast<std::size_t>(axis_attr < 0 ? axis_attr + x.shape.rank() : axis_attr);
  // A zero-sized dim makes `inner` 0, but then x has no elements and the map is never called.
  return {static_cast<std::size_t>(row_major_strides(x.shape)[axis]),
          static_cast<std::size_t>(x.shape[static_cast<int>(axis)])};
}

// x / scale computed in double, rounded to the quantized grid; the grid values are exact in the
// output dtype, so storing them does not round again.
template <double (*Round)(double)>
void quantize_to(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& scale = ctx.input(1);
  const TensorRef& out = ctx.output(0);
  const std::vector<double> vx = to_f64(x);
  const std::vector<double> vs = to_f64(scale);
  const ChannelOf channel = channel_of(ctx, x, scale);
  std::vector<double> q(vx.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = Round(vx[i] / vs[channel(i)]);
  from_f64(out, q);
}

void quantize_kernel(KernelContext& ctx) {
  if (ctx.output(0).dtype == DataType::kI8) {
    quantize_to<round_to_i8>(ctx);
  } else {
    quantize_to<round_to_e4m3_saturating>(ctx);
  }
}

// x * scale in double, rounded once to the output dtype.
void dequantize_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& scale = ctx.input(1);
  const std::vector<double> vx = to_f64(x);
  const std::vector<double> vs = to_f64(scale);
  const ChannelOf channel = channel_of(ctx, x, scale);
  std::vector<double> result(vx.size());
  for (std::size_t i = 0; i < result.size(); ++i) result[i] = vx[i] * vs[channel(i)];
  from_f64(ctx.output(0), result);
}

// activation(scale[n] * Σ_k x[m, k] · weight[n, k] + bias[n] + residual[m, n]), rounded once to the output dtype, or,
// with `quantize_to`, divided by output_scale and rounded once onto the quantized grid as quantize does (the value is
// not rounded to `to` first). The quantized values are exact in double and so are their products; the sum (dgemm) is
// exact for i8 and within a double's rounding for f8e4m3, far below any output dtype's. A weight-only product's float
// x is read as it is (its values are exact in double too).
void quantized_linear_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& weight = ctx.input(1);
  const TensorRef& out = ctx.output(0);
  const std::int64_t features = weight.shape[0], in = weight.shape[1];
  const std::int64_t rows = features == 0 ? 0 : static_cast<std::int64_t>(out.size()) / features;
  const std::vector<double> vx = to_f64(x), vw = to_f64(weight), scale = to_f64(ctx.input(2));
  std::vector<double> y(out.size());
  blas::gemm(ctx, false, true, rows, features, in, vx.data(), vw.data(), y.data());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] *= scale[i % scale.size()];
  apply_epilogue(ctx, y, 3, 4);
  if (ctx.has_input(5)) quantize_in_place(y, to_f64(ctx.input(5))[0], out.dtype);
  from_f64(out, y);
}

}  // namespace

void register_quantization_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back({"quantize", quantize_kernel});
  kernels.push_back({"dequantize", dequantize_kernel});
  kernels.push_back({"quantized_linear", quantized_linear_kernel});
}

}  // namespace tensoracle::cpu
