// CPU reference kernels of the elementwise family: arithmetic, comparisons, where, math functions, activations, cast.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"
#include "graph/elementwise_program.hpp"

namespace tensoracle::cpu {
namespace {

// ---- integer arithmetic ----
// Integer ops compute in int64 and the result is narrowed to the output dtype by wrapping, as the
// fixed-width types (and PyTorch) do. Going through uint64 keeps int64 overflow defined (it wraps)
// instead of undefined behaviour.

std::int64_t wrap(std::uint64_t v) { return static_cast<std::int64_t>(v); }
std::uint64_t bits(std::int64_t v) { return static_cast<std::uint64_t>(v); }

std::int64_t wrapping_add(std::int64_t a, std::int64_t b) { return wrap(bits(a) + bits(b)); }
std::int64_t wrapping_sub(std::int64_t a, std::int64_t b) { return wrap(bits(a) - bits(b)); }
std::int64_t wrapping_mul(std::int64_t a, std::int64_t b) { return wrap(bits(a) * bits(b)); }
std::int64_t wrapping_neg(std::int64_t a) { return wrap(0U - bits(a)); }

// Truncates toward zero like torch.div(rounding_mode="trunc"). PyTorch raises on a zero divisor; a
// kernel can't, so the result is defined as 0. INT64_MIN / -1 wraps to INT64_MIN.
std::int64_t truncating_div(std::int64_t a, std::int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return wrapping_neg(a);
  return a / b;
}

// PyTorch's integer pow: square-and-multiply, wrapping. A negative exponent has an integer result
// only for bases 1 and -1; every other base (0 included) gives 0.
std::int64_t integer_pow(std::int64_t base, std::int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 == 0 ? 1 : -1;
    return 0;
  }
  std::uint64_t result = 1;
  std::uint64_t factor = bits(base);
  for (auto e = static_cast<std::uint64_t>(exponent); e != 0; e >>= 1) {
    if ((e & 1U) != 0) result *= factor;
    factor *= factor;
  }
  return wrap(result);
}

// ---- loading and storing in the computation type ----
// Float tensors compute in double (exact for every float dtype), integer and bool tensors in int64
// (exact for i64, which double is not).

template <typename T>
std::vector<T> load(const TensorRef& t);
template <>
std::vector<double> load<double>(const TensorRef& t) {
  return to_f64(t);
}
template <>
std::vector<std::int64_t> load<std::int64_t>(const TensorRef& t) {
  return to_i64(t);
}

// Rounds once to the output dtype (doubles) or wraps to its width (int64; bool is value != 0).
void store(const TensorRef& t, const std::vector<double>& values) { from_f64(t, values); }
void store(const TensorRef& t, const std::vector<std::int64_t>& values) { from_i64(t, values); }

template <typename T, typename F>
void map_unary(const TensorRef& x, const TensorRef& out, F f) {
  const std::vector<T> vx = load<T>(x);
  std::vector<decltype(f(T{}))> result(out.size());
  for (std::size_t i = 0; i < result.size(); ++i) result[i] = f(vx[i]);
  store(out, result);
}

// out = f(a, b) over the broadcast shape of a and b.
template <typename T, typename F>
void map_binary(const TensorRef& a, const TensorRef& b, const TensorRef& out, F f) {
  const std::vector<T> va = load<T>(a);
  const std::vector<T> vb = load<T>(b);
  const std::vector<std::int64_t> ia = broadcast_indices(a.shape, out.shape);
  const std::vector<std::int64_t> ib = broadcast_indices(b.shape, out.shape);
  std::vector<decltype(f(T{}, T{}))> result(out.size());
  for (std::size_t i = 0; i < result.size(); ++i) {
    result[i] = f(va[static_cast<std::size_t>(ia[i])], vb[static_cast<std::size_t>(ib[i])]);
  }
  store(out, result);
}

// ---- binary ops: each has a double (float dtypes) and an int64 (integer dtypes) form ----

struct Add {
  static double apply(double a, double b) { return a + b; }
  static std::int64_t apply(std::int64_t a, std::int64_t b) { return wrapping_add(a, b); }
};
struct Sub {
  static double apply(double a, double b) { return a - b; }
  static std::int64_t apply(std::int64_t a, std::int64_t b) { return wrapping_sub(a, b); }
};
struct Mul {
  static double apply(double a, double b) { return a * b; }
  static std::int64_t apply(std::int64_t a, std::int64_t b) { return wrapping_mul(a, b); }
};
struct Div {
  static double apply(double a, double b) { return a / b; }  // IEEE: x/0 is ±inf, 0/0 is NaN
  static std::int64_t apply(std::int64_t a, std::int64_t b) { return truncating_div(a, b); }
};
struct Pow {
  static double apply(double a, double b) { return std::pow(a, b); }
  static std::int64_t apply(std::int64_t a, std::int64_t b) { return integer_pow(a, b); }
};
// torch.maximum / torch.minimum: a NaN operand makes the result NaN.
struct Max {
  static double apply(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
    return a > b ? a : b;
  }
  static std::int64_t apply(std::int64_t a, std::int64_t b) { return a > b ? a : b; }
};
struct Min {
  static double apply(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
    return a < b ? a : b;
  }
  static std::int64_t apply(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
};
// Comparisons give 1/0, stored into the bool output. Any comparison with NaN is false.
struct Equal {
  template <typename T>
  static std::int64_t apply(T a, T b) {
    return a == b ? 1 : 0;
  }
};
struct Less {
  template <typename T>
  static std::int64_t apply(T a, T b) {
    return a < b ? 1 : 0;
  }
};
struct Greater {
  template <typename T>
  static std::int64_t apply(T a, T b) {
    return a > b ? 1 : 0;
  }
};

template <typename Op>
void binary_kernel(KernelContext& ctx) {
  const TensorRef& a = ctx.input(0);
  const TensorRef& b = ctx.input(1);
  const TensorRef& out = ctx.output(0);
  if (is_floating_point(a.dtype)) {
    map_binary<double>(a, b, out, [](double x, double y) { return Op::apply(x, y); });
  } else {
    map_binary<std::int64_t>(a, b, out, [](std::int64_t x, std::int64_t y) { return Op::apply(x, y); });
  }
}

// Copies whole elements, so every dtype (f8, i64, NaN payloads) passes through unchanged.
void where_kernel(KernelContext& ctx) {
  const TensorRef& condition = ctx.input(0);
  const TensorRef& a = ctx.input(1);
  const TensorRef& b = ctx.input(2);
  const TensorRef& out = ctx.output(0);
  const std::size_t size = element_size(out.dtype);
  const std::vector<std::int64_t> ic = broadcast_indices(condition.shape, out.shape);
  const std::vector<std::int64_t> ia = broadcast_indices(a.shape, out.shape);
  const std::vector<std::int64_t> ib = broadcast_indices(b.shape, out.shape);
  const std::vector<std::int64_t> take_a = to_i64(condition);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const bool from_a = take_a[static_cast<std::size_t>(ic[i])] != 0;
    const TensorRef& source = from_a ? a : b;
    const auto index = static_cast<std::size_t>(from_a ? ia[i] : ib[i]);
    std::memcpy(out.bytes.data() + i * size, source.bytes.data() + index * size, size);
  }
}

// ---- unary ops ----

// abs and neg on floats or integers (integers wrap: abs and neg of the minimum are the minimum).
void abs_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  if (is_floating_point(x.dtype)) {
    map_unary<double>(x, ctx.output(0), [](double v) { return std::fabs(v); });
  } else {
    map_unary<std::int64_t>(x, ctx.output(0), [](std::int64_t v) { return v < 0 ? wrapping_neg(v) : v; });
  }
}

void neg_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  if (is_floating_point(x.dtype)) {
    map_unary<double>(x, ctx.output(0), [](double v) { return -v; });
  } else {
    map_unary<std::int64_t>(x, ctx.output(0), [](std::int64_t v) { return wrapping_neg(v); });
  }
}

template <typename F>
void float_unary(KernelContext& ctx, F f) {
  map_unary<double>(ctx.input(0), ctx.output(0), f);
}

void not_kernel(KernelContext& ctx) {
  map_unary<std::int64_t>(ctx.input(0), ctx.output(0), [](std::int64_t v) -> std::int64_t { return v == 0 ? 1 : 0; });
}

// ---- activations (float) ----

constexpr double kSqrt1_2 = 0.70710678118654752440;   // 1/sqrt(2)
constexpr double kSqrt2_Pi = 0.79788456080286535588;  // sqrt(2/pi)

// min(max(v, 0), 6), written with comparisons that let NaN through as PyTorch does.
double relu6(double v) { return v < 0.0 ? 0.0 : (v > 6.0 ? 6.0 : v); }

void relu_kernel(KernelContext& ctx) {
  float_unary(ctx, [](double x) { return x < 0.0 ? 0.0 : x; });
}

void leaky_relu_kernel(KernelContext& ctx) {
  const double alpha = ctx.get_float("alpha", 0.01);
  float_unary(ctx, [alpha](double x) { return x > 0.0 ? x : alpha * x; });
}

void gelu_kernel(KernelContext& ctx) {
  if (ctx.get_string("approximate", "none") == "tanh") {
    float_unary(ctx, [](double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2_Pi * (x + 0.044715 * x * x * x))); });
  } else {
    float_unary(ctx, [](double x) { return 0.5 * x * (1.0 + std::erf(x * kSqrt1_2)); });
  }
}

// Above `threshold` the result is x itself (torch.nn.functional.softplus).
void softplus_kernel(KernelContext& ctx) {
  const double beta = ctx.get_float("beta", 1.0);
  const double threshold = ctx.get_float("threshold", 20.0);
  float_unary(ctx,
              [beta, threshold](double x) { return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta; });
}

// torch.clamp: max is applied last, so min > max gives max everywhere; NaN passes through.
void clip_kernel(KernelContext& ctx) {
  const double lo = ctx.get_float("min", -std::numeric_limits<double>::infinity());
  const double hi = ctx.get_float("max", std::numeric_limits<double>::infinity());
  float_unary(ctx, [lo, hi](double x) {
    const double v = x < lo ? lo : x;
    return v > hi ? hi : v;
  });
}

// ---- cast ----

// Float sources convert from double (truncating toward zero and saturating into integers, NaN to
// 0, x != 0 into bool; f16/bf16/f8 round through f32 as PyTorch does). Integer and bool sources
// stay exact in int64: integers wrap into narrower integers as in PyTorch, and into floats they
// round once (through f32 for the narrow floats, as c10 does), which the double path would not
// do for large i64.
void cast_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  if (is_floating_point(x.dtype)) {
    from_f64(out, to_f64(x));
    return;
  }
  const std::vector<std::int64_t> values = to_i64(x);
  if (!is_floating_point(out.dtype)) {
    from_i64(out, values);
  } else if (out.dtype == DataType::kF64) {
    std::vector<double> converted(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) converted[i] = static_cast<double>(values[i]);
    from_f64(out, converted);
  } else {
    std::vector<float> converted(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) converted[i] = static_cast<float>(values[i]);
    from_f32(out, converted);
  }
}

// ---- fused_elementwise ----

// NumPy broadcast of concrete shapes (the program's shape function has checked that they broadcast).
Dims broadcast_dims(const std::vector<const TensorRef*>& args) {
  int rank = 0;
  for (const auto* a : args) rank = std::max(rank, a->shape.rank());
  std::vector<std::int64_t> out(static_cast<std::size_t>(rank), 1);
  for (const auto* a : args) {
    for (int i = 0; i < a->shape.rank(); ++i) {
      auto& slot = out[static_cast<std::size_t>(rank - a->shape.rank() + i)];
      if (a->shape[i] != 1) slot = a->shape[i];
    }
  }
  return Dims(out);
}

// Runs the program one instruction at a time with this family's kernels, each result stored in its own dtype: the
// layer computes exactly what the unfused chain did, which defines its semantics (the CUDA code generated for it
// computes in f32/f64 without rounding the intermediates, within the f16/bf16 tolerances).
void fused_elementwise_kernel(KernelContext& ctx) {
  const graph::ElementwiseProgram program =
      graph::ElementwiseProgram::parse(ctx.get_string(graph::kProgramAttr), ctx.num_inputs(), ctx.layer_name());
  std::vector<const TensorRef*> values;
  for (std::size_t i = 0; i < ctx.num_inputs(); ++i) values.push_back(&ctx.input(i));
  std::deque<HostTensor> results;
  std::deque<TensorRef> refs;
  for (std::size_t k = 0; k < program.instructions.size(); ++k) {
    const graph::ProgramInstruction& ins = program.instructions[k];
    std::vector<const TensorRef*> args;
    for (auto a : ins.args) args.push_back(values[static_cast<std::size_t>(a)]);
    const Dims shape = broadcast_dims(args);
    const TensorRef* out = nullptr;
    if (k + 1 == program.instructions.size()) {
      out = &ctx.output(0);
      if (out->shape != shape || out->dtype != ins.dtype) ctx.fail("the program's result does not match the output");
    } else {
      out = &refs.emplace_back(results.emplace_back(ins.dtype, shape));
    }
    graph::Layer layer;
    layer.name = fmt::format("{}/{}:{}", ctx.layer_name(), k, ins.op);
    layer.op = ins.op;
    layer.attrs = ins.attrs;
    const Kernel kernel = find_kernel(ins.op);
    if (kernel == nullptr) ctx.fail(fmt::format("no CPU kernel for op '{}'", ins.op));
    KernelContext sub(layer, args, {out});
    kernel(sub);
    values.push_back(out);
  }
}

}  // namespace

void register_elementwise_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back({"add", binary_kernel<Add>});
  kernels.push_back({"sub", binary_kernel<Sub>});
  kernels.push_back({"mul", binary_kernel<Mul>});
  kernels.push_back({"div", binary_kernel<Div>});
  kernels.push_back({"pow", binary_kernel<Pow>});
  kernels.push_back({"max", binary_kernel<Max>});
  kernels.push_back({"min", binary_kernel<Min>});
  kernels.push_back({"equal", binary_kernel<Equal>});
  kernels.push_back({"less", binary_kernel<Less>});
  kernels.push_back({"greater", binary_kernel<Greater>});
  kernels.push_back({"where", where_kernel});
  kernels.push_back({"abs", abs_kernel});
  kernels.push_back({"neg", neg_kernel});
  kernels.push_back({"exp", [](KernelContext& c) { float_unary(c, [](double x) { return std::exp(x); }); }});
  kernels.push_back({"log", [](KernelContext& c) { float_unary(c, [](double x) { return std::log(x); }); }});
  kernels.push_back({"sqrt", [](KernelContext& c) { float_unary(c, [](double x) { return std::sqrt(x); }); }});
  kernels.push_back({"rsqrt", [](KernelContext& c) { float_unary(c, [](double x) { return 1.0 / std::sqrt(x); }); }});
  kernels.push_back({"reciprocal", [](KernelContext& c) { float_unary(c, [](double x) { return 1.0 / x; }); }});
  kernels.push_back({"sin", [](KernelContext& c) { float_unary(c, [](double x) { return std::sin(x); }); }});
  kernels.push_back({"cos", [](KernelContext& c) { float_unary(c, [](double x) { return std::cos(x); }); }});
  kernels.push_back({"tanh", [](KernelContext& c) { float_unary(c, [](double x) { return std::tanh(x); }); }});
  kernels.push_back({"erf", [](KernelContext& c) { float_unary(c, [](double x) { return std::erf(x); }); }});
  kernels.push_back({"floor", [](KernelContext& c) { float_unary(c, [](double x) { return std::floor(x); }); }});
  kernels.push_back({"ceil", [](KernelContext& c) { float_unary(c, [](double x) { return std::ceil(x); }); }});
  kernels.push_back({"not", not_kernel});
  kernels.push_back({"relu", relu_kernel});
  kernels.push_back({"leaky_relu", leaky_relu_kernel});
  kernels.push_back({"gelu", gelu_kernel});
  kernels.push_back(
      {"silu", [](KernelContext& c) { float_unary(c, [](double x) { return x / (1.0 + std::exp(-x)); }); }});
  kernels.push_back(
      {"sigmoid", [](KernelContext& c) { float_unary(c, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }); }});
  kernels.push_back(
      {"hard_sigmoid", [](KernelContext& c) { float_unary(c, [](double x) { return relu6(x + 3.0) / 6.0; }); }});
  kernels.push_back(
      {"hard_swish", [](KernelContext& c) { float_unary(c, [](double x) { return x * relu6(x + 3.0) / 6.0; }); }});
  kernels.push_back({"softplus", softplus_kernel});
  kernels.push_back({"clip", clip_kernel});
  kernels.push_back({"cast", cast_kernel});
  kernels.push_back({graph::kFusedElementwiseOp, fused_elementwise_kernel});
}

}  // namespace tensoracle::cpu
