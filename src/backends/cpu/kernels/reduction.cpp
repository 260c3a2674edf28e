// CPU reference kernels of the reduction family: reduce_*, argmax/argmin and top_k, in double (floats) or int64
// (integers).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"

namespace tensoracle::cpu {
namespace {

enum class Reduce { kSum, kMean, kMax, kMin, kProd };

bool is_nan(double v) { return std::isnan(v); }
bool is_nan(std::int64_t) { return false; }

// Integer sums and products wrap modulo 2^64 as torch's int64 arithmetic does; unsigned
// arithmetic makes that defined behaviour.
std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
std::int64_t wrapping_mul(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}
double wrapping_add(double a, double b) { return a + b; }
double wrapping_mul(double a, double b) { return a * b; }

void store(const TensorRef& t, const std::vector<double>& v) { from_f64(t, v); }
void store(const TensorRef& t, const std::vector<std::int64_t>& v) { from_i64(t, v); }

// The (outer, len, inner) view of a shape around one axis; a scalar is one element on one axis.
struct AxisView {
  std::size_t outer = 1;
  std::size_t len = 1;
  std::size_t inner = 1;
};

AxisView axis_view(const Dims& shape, std::int64_t axis) {
  AxisView v;
  const int rank = shape.rank();
  if (rank == 0) return v;
  const int a = static_cast<int>(axis < 0 ? axis + rank : axis);
  for (int i = 0; i < rank; ++i) {
    const auto d = static_cast<std::size_t>(shape[i]);
    if (i < a) v.outer *= d;
    if (i == a) v.len = d;
    if (i > a) v.inner *= d;
  }
  return v;
}

// ---- reduce_* ----

template <typename T>
std::vector<T> reduce_values(const KernelContext& ctx, const std::vector<T>& x, const Dims& shape, std::size_t out_size,
                             Reduce op) {
  const int rank = shape.rank();
  const auto axes = ctx.get_ints("axes", std::vector<std::int64_t>{});
  // The input shape with every reduced dim set to 1: broadcasting it back to the input shape maps
  // each input element to its output element.
  std::vector<std::int64_t> kept(shape.values());
  std::size_t count = 1;  // elements folded into each output
  for (int i = 0; i < rank; ++i) {
    bool reduced = axes.empty();
    for (std::int64_t a : axes) reduced = reduced || a == i || a + rank == i;
    if (!reduced) continue;
    count *= static_cast<std::size_t>(shape[i]);
    kept[static_cast<std::size_t>(i)] = 1;
  }
  if (count == 0 && out_size > 0 && (op == Reduce::kMax || op == Reduce::kMin)) {
    ctx.fail("reducing an empty axis with max/min is undefined");
  }
  const std::vector<std::int64_t> slot = broadcast_indices(Dims(kept), shape);
  T init{};
  if (op == Reduce::kProd) init = T{1};
  if (op == Reduce::kMax) init = std::numeric_limits<T>::lowest();
  if (op == Reduce::kMin) init = std::numeric_limits<T>::max();
  if constexpr (std::numeric_limits<T>::has_infinity) {
    if (op == Reduce::kMax) init = -std::numeric_limits<T>::infinity();
    if (op == Reduce::kMin) init = std::numeric_limits<T>::infinity();
  }
  std::vector<T> acc(out_size, init);
  for (std::size_t i = 0; i < x.size(); ++i) {
    T& a = acc[static_cast<std::size_t>(slot[i])];
    const T v = x[i];
    switch (op) {
      case Reduce::kSum:
      case Reduce::kMean: a = wrapping_add(a, v); break;
      case Reduce::kProd: a = wrapping_mul(a, v); break;
      // NaN propagates, as torch.amax/amin.
      case Reduce::kMax:
        if (!is_nan(a) && (v > a || is_nan(v))) a = v;
        break;
      case Reduce::kMin:
        if (!is_nan(a) && (v < a || is_nan(v))) a = v;
        break;
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    // An empty reduction gives 0 / 0 = NaN, as torch.mean.
    if (op == Reduce::kMean) {
      for (T& a : acc) a /= static_cast<T>(count);
    }
  }
  return acc;
}

template <Reduce Op>
void reduce(KernelContext& ctx) {
  const TensorRef& in = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  if (is_floating_point(in.dtype)) {
    store(out, reduce_values(ctx, to_f64(in), in.shape, out.size(), Op));
  } else {
    store(out, reduce_values(ctx, to_i64(in), in.shape, out.size(), Op));
  }
}

// ---- argmax / argmin ----

// True when v should replace the current best: strictly more extreme (so ties keep the first
// index), and NaN counts as the most extreme value, as torch.argmax/argmin.
template <typename T>
bool more_extreme(T v, T best, bool max) {
  if (is_nan(best)) return false;
  if (is_nan(v)) return true;
  return max ? v > best : v < best;
}

template <typename T>
std::vector<std::int64_t> arg_reduce_values(const std::vector<T>& x, const AxisView& view, bool max) {
  std::vector<std::int64_t> result(view.outer * view.inner);
  for (std::size_t o = 0; o < view.outer; ++o) {
    for (std::size_t i = 0; i < view.inner; ++i) {
      const std::size_t base = o * view.len * view.inner + i;
      std::size_t best = 0;
      for (std::size_t j = 1; j < view.len; ++j) {
        if (more_extreme(x[base + j * view.inner], x[base + best * view.inner], max)) best = j;
      }
      result[o * view.inner + i] = static_cast<std::int64_t>(best);
    }
  }
  return result;
}

template <bool Max>
void arg_reduce(KernelContext& ctx) {
  const TensorRef& in = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const AxisView view = axis_view(in.shape, ctx.get_int("axis"));
  if (view.len == 0 && out.size() > 0) ctx.fail("argmax/argmin of an empty axis is undefined");
  if (is_floating_point(in.dtype)) {
    from_i64(out, arg_reduce_values(to_f64(in), view, Max));
  } else {
    from_i64(out, arg_reduce_values(to_i64(in), view, Max));
  }
}

// ---- top_k ----

// Orders a row as torch.sort(stable=True) does: NaN is larger than every number, equal values
// keep their index order. top_k takes the first k.
template <typename T>
void top_k_values(const std::vector<T>& x, const AxisView& view, std::size_t k, bool largest, std::vector<T>& values,
                  std::vector<std::int64_t>& indices) {
  values.resize(view.outer * k * view.inner);
  indices.resize(values.size());
  std::vector<std::size_t> order(view.len);
  for (std::size_t o = 0; o < view.outer; ++o) {
    for (std::size_t i = 0; i < view.inner; ++i) {
      const std::size_t base = o * view.len * view.inner + i;
      auto at = [&](std::size_t j) { return x[base + j * view.inner]; };
      auto greater = [&](std::size_t a, std::size_t b) {
        if (is_nan(at(b))) return false;
        return is_nan(at(a)) || at(a) > at(b);
      };
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return largest ? greater(a, b) : greater(b, a); });
      for (std::size_t j = 0; j < k; ++j) {
        const std::size_t dst = o * k * view.inner + j * view.inner + i;
        values[dst] = at(order[j]);
        indices[dst] = static_cast<std::int64_t>(order[j]);
      }
    }
  }
}

void top_k(KernelContext& ctx) {
  const TensorRef& in = ctx.input(0);
  const auto k = static_cast<std::size_t>(ctx.get_int("k"));
  const bool largest = ctx.get_bool("largest", true);
  const AxisView view = axis_view(in.shape, ctx.get_int("axis", -1));
  if (k > view.len) ctx.fail("k is larger than the axis");
  std::vector<std::int64_t> indices;
  if (is_floating_point(in.dtype)) {
    std::vector<double> values;
    top_k_values(to_f64(in), view, k, largest, values, indices);
    store(ctx.output(0), values);
  } else {
    std::vector<std::int64_t> values;
    top_k_values(to_i64(in), view, k, largest, values, indices);
    store(ctx.output(0), values);
  }
  from_i64(ctx.output(1), indices);
}

}  // namespace

void register_reduction_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back({"reduce_sum", reduce<Reduce::kSum>});
  kernels.push_back({"reduce_mean", reduce<Reduce::kMean>});
  kernels.push_back({"reduce_max", reduce<Reduce::kMax>});
  kernels.push_back({"reduce_min", reduce<Reduce::kMin>});
  kernels.push_back({"reduce_prod", reduce<Reduce::kProd>});
  kernels.push_back({"argmax", arg_reduce<true>});
  kernels.push_back({"argmin", arg_reduce<false>});
  kernels.push_back({"top_k", top_k});
}

}  // namespace tensoracle::cpu
