// CPU reference kernels of the normalization family: softmax, log_softmax and the norms, computed in double.
#include <cmath>
#include <cstddef>
#include <limits>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"
#include "backends/cpu/kernels/quantized_rounding.hpp"

namespace tensoracle::cpu {
namespace {

std::size_t volume(const Dims& shape, int begin, int end) {
  std::size_t n = 1;
  for (int i = begin; i < end; ++i) n *= static_cast<std::size_t>(shape[i]);
  return n;
}

// Every kernel here reads floats as double and rounds once per output element.
std::vector<double> optional_f64(const KernelContext& ctx, std::size_t i) {
  return ctx.has_input(i) ? to_f64(ctx.input(i)) : std::vector<double>{};
}

struct Moments {
  double mean = 0;
  double var = 0;  // biased (divided by n), as the norms use
};

// Two passes over a contiguous block: the mean first, so the variance has no cancellation.
Moments moments(const double* x, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += x[i];
  Moments m;
  m.mean = sum / static_cast<double>(n);
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) sq += (x[i] - m.mean) * (x[i] - m.mean);
  m.var = sq / static_cast<double>(n);
  return m;
}

double param(const std::vector<double>& p, std::size_t i, double absent) { return p.empty() ? absent : p[i]; }

// softmax / log_softmax along one axis, with the row maximum subtracted first so exp never
// overflows. A row of -inf gives (-inf) - (-inf) = NaN everywhere, as torch does.
void softmax_kernel(KernelContext& ctx, bool log) {
  const TensorRef& in = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const int rank = in.shape.rank();
  std::int64_t axis = ctx.get_int("axis");
  if (rank == 0) {
    axis = 0;
  } else if (axis < 0) {
    axis += rank;
  }
  const int a = static_cast<int>(axis);
  const std::size_t outer = rank == 0 ? 1 : volume(in.shape, 0, a);
  const std::size_t len = rank == 0 ? 1 : static_cast<std::size_t>(in.shape[a]);
  const std::size_t inner = rank == 0 ? 1 : volume(in.shape, a + 1, rank);
  const std::vector<double> x = to_f64(in);
  std::vector<double> y(x.size());
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < inner; ++i) {
      const std::size_t base = o * len * inner + i;
      double max = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < len; ++j) {
        const double v = x[base + j * inner];
        if (v > max || std::isnan(v)) max = v;
      }
      double sum = 0;
      for (std::size_t j = 0; j < len; ++j) sum += std::exp(x[base + j * inner] - max);
      const double log_sum = std::log(sum);
      for (std::size_t j = 0; j < len; ++j) {
        const double shifted = x[base + j * inner] - max;
        y[base + j * inner] = log ? shifted - log_sum : std::exp(shifted) / sum;
      }
    }
  }
  from_f64(out, y);
}

void softmax(KernelContext& ctx) { softmax_kernel(ctx, false); }
void log_softmax(KernelContext& ctx) { softmax_kernel(ctx, true); }

// layer_norm and rms_norm: each row is the last normalized_rank dims; weight and bias are
// indexed by the position within the row.
void last_dims_norm(KernelContext& ctx, bool rms) {
  const TensorRef& in = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const int rank = in.shape.rank();
  const double eps = ctx.get_float("epsilon", rms ? 1e-6 : 1e-5);
  const auto normalized = static_cast<int>(ctx.get_int("normalized_rank", 1));
  const std::size_t row = volume(in.shape, rank - normalized, rank);
  const std::vector<double> x = to_f64(in);
  const std::vector<double> weight = optional_f64(ctx, 1);
  const std::vector<double> bias = rms ? std::vector<double>{} : optional_f64(ctx, 2);
  std::vector<double> y(x.size());
  const std::size_t rows = row == 0 ? 0 : x.size() / row;
  for (std::size_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * row;
    double* yr = y.data() + r * row;
    if (rms) {
      double sq = 0;
      for (std::size_t j = 0; j < row; ++j) sq += xr[j] * xr[j];
      const double denom = std::sqrt(sq / static_cast<double>(row) + eps);
      for (std::size_t j = 0; j < row; ++j) yr[j] = xr[j] / denom * param(weight, j, 1.0);
    } else {
      const Moments m = moments(xr, row);
      const double denom = std::sqrt(m.var + eps);
      for (std::size_t j = 0; j < row; ++j)
        yr[j] = (xr[j] - m.mean) / denom * param(weight, j, 1.0) + param(bias, j, 0.0);
    }
  }
  from_f64(out, y);
  // `quantize_to` (output_scale: layer_norm's input 3, rms_norm's 2): the normalized values quantized, in double, as a
  // second output.
  if (const std::size_t scale = rms ? 2 : 3; ctx.has_input(scale)) {
    quantize_in_place(y, to_f64(ctx.input(scale))[0], ctx.output(1).dtype);
    from_f64(ctx.output(1), y);
  }
}

void layer_norm(KernelContext& ctx) { last_dims_norm(ctx, false); }
void rms_norm(KernelContext& ctx) { last_dims_norm(ctx, true); }

// x [N, C, ...] in inference mode: the statistics are inputs.
void batch_norm(KernelContext& ctx) {
  const TensorRef& in = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const double eps = ctx.get_float("epsilon", 1e-5);
  const auto channels = static_cast<std::size_t>(in.shape[1]);
  const std::size_t spatial = volume(in.shape, 2, in.shape.rank());
  const std::vector<double> x = to_f64(in);
  const std::vector<double> mean = to_f64(ctx.input(1));
  const std::vector<double> var = to_f64(ctx.input(2));
  const std::vector<double> weight = optional_f64(ctx, 3);
  const std::vector<double> bias = optional_f64(ctx, 4);
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = (i / spatial) % channels;
    y[i] = (x[i] - mean[c]) / std::sqrt(var[c] + eps) * param(weight, c, 1.0) + param(bias, c, 0.0);
  }
  from_f64(out, y);
}

// group_norm (groups = num_groups) and instance_norm (groups = C): in row-major NC... layout
// each (n, group) block of channels x spatial positions is contiguous.
void grouped_norm(KernelContext& ctx, bool instance) {
  const TensorRef& in = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const double eps = ctx.get_float("epsilon", 1e-5);
  const auto channels = static_cast<std::size_t>(in.shape[1]);
  const auto groups = instance ? channels : static_cast<std::size_t>(ctx.get_int("num_groups"));
  const std::size_t spatial = volume(in.shape, 2, in.shape.rank());
  const std::vector<double> x = to_f64(in);
  const std::vector<double> weight = optional_f64(ctx, 1);
  const std::vector<double> bias = optional_f64(ctx, 2);
  std::vector<double> y(x.size());
  const std::size_t block = groups == 0 ? 0 : channels / groups * spatial;
  const std::size_t blocks = block == 0 ? 0 : x.size() / block;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t start = b * block;
    const Moments m = moments(x.data() + start, block);
    const double denom = std::sqrt(m.var + eps);
    for (std::size_t i = start; i < start + block; ++i) {
      const std::size_t c = (i / spatial) % channels;
      y[i] = (x[i] - m.mean) / denom * param(weight, c, 1.0) + param(bias, c, 0.0);
    }
  }
  from_f64(out, y);
}

void group_norm(KernelContext& ctx) { grouped_norm(ctx, false); }
void instance_norm(KernelContext& ctx) { grouped_norm(ctx, true); }

}  // namespace

void register_normalization_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back({"softmax", softmax});
  kernels.push_back({"log_softmax", log_softmax});
  kernels.push_back({"layer_norm", layer_norm});
  kernels.push_back({"rms_norm", rms_norm});
  kernels.push_back({"batch_norm", batch_norm});
  kernels.push_back({"group_norm", group_norm});
  kernels.push_back({"instance_norm", instance_norm});
}

}  // namespace tensoracle::cpu
