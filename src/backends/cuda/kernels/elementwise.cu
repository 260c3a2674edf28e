// CUDA kernels of the elementwise family: broadcast arithmetic, comparisons, where, math, activations, cast.
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"

namespace tensoracle::cuda {
namespace {

using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels

// ---- integer arithmetic ----
// As the CPU reference: integers compute in int64 and wrap (through uint64, so overflow is defined), then wrap again
// to the output width when stored.

__device__ __forceinline__ std::int64_t wrap(std::uint64_t v) { return static_cast<std::int64_t>(v); }
__device__ __forceinline__ std::uint64_t bits(std::int64_t v) { return static_cast<std::uint64_t>(v); }
__device__ __forceinline__ std::int64_t wrapping_neg(std::int64_t a) { return wrap(0U - bits(a)); }

// Truncates toward zero; a zero divisor gives 0 and INT64_MIN / -1 wraps to INT64_MIN.
__device__ __forceinline__ std::int64_t truncating_div(std::int64_t a, std::int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return wrapping_neg(a);
  return a / b;
}

// Square-and-multiply, wrapping. A negative exponent gives 1 for base 1, ±1 for base -1 and 0 otherwise.
__device__ __forceinline__ std::int64_t integer_pow(std::int64_t base, std::int64_t exponent) {
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

// ---- plans ----
// Each entry's prepare function reads the attributes, validates, sizes the grid and picks the instantiation that runs
// (dtype, index width); the launch binds the tensors' addresses and calls it.

// A broadcast op over N operands (binary, where): the element offsets in the index type chosen for the output's size.
template <int N>
struct BroadcastPlan {
  using RunFn = void (*)(const StepLaunch& launch, const BroadcastPlan& plan);
  RunFn run = nullptr;  // the instantiation for the dtype and index width; nullptr: the output is empty
  std::int64_t n = 0;   // output elements
  unsigned grid = 1;
  Indexer<std::int32_t, N> ix32{};  // the indexer of `run`'s index width (the other stays unused)
  Indexer<std::int64_t, N> ix64{};

  void set_indexer(const Indexer<std::int32_t, N>& ix) { ix32 = ix; }
  void set_indexer(const Indexer<std::int64_t, N>& ix) { ix64 = ix; }
  template <typename Index>
  const Indexer<Index, N>& indexer() const {
    if constexpr (std::is_same_v<Index, std::int32_t>) {
      return ix32;
    } else {
      return ix64;
    }
  }
};
using BinaryPlan = BroadcastPlan<2>;
using WherePlan = BroadcastPlan<3>;

// The launch of a planned entry: the instantiation prepare chose, or nothing for an empty output.
template <typename Plan>
void launch_planned(const StepLaunch& launch, const Plan& plan) {
  if (plan.run != nullptr) plan.run(launch, plan);
}

// ---- binary ops: a template for the float compute types (f32, f64), an overload for int64 ----

struct AddOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return a + b;
  }
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return wrap(bits(a) + bits(b)); }
};
struct SubOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return a - b;
  }
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return wrap(bits(a) - bits(b)); }
};
struct MulOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return a * b;
  }
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return wrap(bits(a) * bits(b)); }
};
struct DivOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return a / b;  // IEEE: x/0 is ±inf, 0/0 is NaN
  }
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return truncating_div(a, b); }
};
struct PowOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    return math::pow(a, b);
  }
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return integer_pow(a, b); }
};
// torch.maximum / torch.minimum: a NaN operand makes the result NaN.
struct MaxOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if (math::isnan(a) || math::isnan(b)) return math::quiet_nan<C>();
    return a > b ? a : b;
  }
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return a > b ? a : b; }
};
struct MinOp {
  template <typename C>
  __device__ C operator()(C a, C b) const {
    if (math::isnan(a) || math::isnan(b)) return math::quiet_nan<C>();
    return a < b ? a : b;
  }
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return a < b ? a : b; }
};
// Comparisons give 1/0 (stored into bool); any comparison with NaN is false.
struct EqualOp {
  template <typename C>
  __device__ std::int64_t operator()(C a, C b) const {
    return a == b ? 1 : 0;
  }
};
struct LessOp {
  template <typename C>
  __device__ std::int64_t operator()(C a, C b) const {
    return a < b ? 1 : 0;
  }
};
struct GreaterOp {
  template <typename C>
  __device__ std::int64_t operator()(C a, C b) const {
    return a > b ? 1 : 0;
  }
};

template <typename T, typename TOut, typename Op, typename Index>
__global__ void binary_kernel(const T* a, const T* b, TOut* out, Index n, Indexer<Index, 2> ix, Op op) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    Index off[2];
    ix.offsets(i, off);
    store(out, i, static_cast<Compute<TOut>>(op(load(a, off[0]), load(b, off[1]))));
  }
}

template <typename T, typename TOut, typename Op, typename Index>
void run_binary(const StepLaunch& launch, const BinaryPlan& plan) {
  launch_kernel(launch, binary_kernel<T, TOut, Op, Index>, plan.grid, kThreads, 0,
                static_cast<const T*>(launch.inputs[0].data), static_cast<const T*>(launch.inputs[1].data),
                static_cast<TOut*>(launch.outputs[0].data), static_cast<Index>(plan.n), plan.indexer<Index>(), Op{});
}

// kCompare: the output is bool (comparisons); otherwise it has the inputs' dtype.
template <typename Types, typename Op, bool kCompare>
BinaryPlan prepare_binary(const StepLaunch& launch) {
  const DeviceTensor& a = launch.inputs.at(0);
  const DeviceTensor& b = launch.inputs.at(1);
  const DeviceTensor& out = launch.outputs.at(0);
  BinaryPlan plan;
  plan.n = volume(out.shape);
  if (plan.n == 0) return plan;
  StridePlan<2> axes;
  if (!make_stride_plan<2>(out.shape.values(),
                           {broadcast_strides(a.shape, out.shape), broadcast_strides(b.shape, out.shape)}, axes)) {
    launch.attrs->fail("the CUDA kernel handles at most 8 broadcast axes");
  }
  plan.grid = grid_for(plan.n);
  const bool handled = dispatch(Types{}, a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using TOut = std::conditional_t<kCompare, Bool8, T>;
    with_indexer(axes, plan.n, [&](const auto& ix) {
      using Index = std::decay_t<decltype(ix.dims[0])>;
      plan.set_indexer(ix);
      plan.run = &run_binary<T, TOut, Op, Index>;
    });
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA kernel");
  return plan;
}

void launch_binary(const StepLaunch& launch, const BinaryPlan& plan) { launch_planned(launch, plan); }

// ---- where: copies whole elements, so every dtype passes through unchanged ----

template <typename W, typename Index>
__global__ void where_kernel(const Bool8* condition, const W* a, const W* b, W* out, Index n, Indexer<Index, 3> ix) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    Index off[3];
    ix.offsets(i, off);
    out[i] = condition[off[0]].bits != 0 ? a[off[1]] : b[off[2]];
  }
}

template <typename W, typename Index>
void run_where(const StepLaunch& launch, const WherePlan& plan) {
  launch_kernel(launch, where_kernel<W, Index>, plan.grid, kThreads, 0,
                static_cast<const Bool8*>(launch.inputs[0].data), static_cast<const W*>(launch.inputs[1].data),
                static_cast<const W*>(launch.inputs[2].data), static_cast<W*>(launch.outputs[0].data),
                static_cast<Index>(plan.n), plan.indexer<Index>());
}

WherePlan prepare_where(const StepLaunch& launch) {
  const DeviceTensor& condition = launch.inputs.at(0);
  const DeviceTensor& a = launch.inputs.at(1);
  const DeviceTensor& b = launch.inputs.at(2);
  const DeviceTensor& out = launch.outputs.at(0);
  WherePlan plan;
  plan.n = volume(out.shape);
  if (plan.n == 0) return plan;
  StridePlan<3> axes;
  if (!make_stride_plan<3>(out.shape.values(),
                           {broadcast_strides(condition.shape, out.shape), broadcast_strides(a.shape, out.shape),
                            broadcast_strides(b.shape, out.shape)},
                           axes)) {
    launch.attrs->fail("the CUDA kernel handles at most 8 broadcast axes");
  }
  plan.grid = grid_for(plan.n);
  const bool handled = dispatch_element_word(element_size(out.dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    with_indexer(axes, plan.n, [&](const auto& ix) {
      using Index = std::decay_t<decltype(ix.dims[0])>;
      plan.set_indexer(ix);
      plan.run = &run_where<W, Index>;
    });
  });
  if (!handled) launch.attrs->fail("unsupported element size for the CUDA kernel");
  return plan;
}

void launch_where(const StepLaunch& launch, const WherePlan& plan) { launch_planned(launch, plan); }

// ---- unary ops ----

struct AbsOp {
  template <typename C>
  __device__ C operator()(C x) const {
    return math::fabs(x);
  }
  // Integers wrap: abs of the minimum is the minimum.
  __device__ std::int64_t operator()(std::int64_t v) const { return v < 0 ? wrapping_neg(v) : v; }
};
struct NegOp {
  template <typename C>
  __device__ C operator()(C x) const {
    return -x;
  }
  __device__ std::int64_t operator()(std::int64_t v) const { return wrapping_neg(v); }
};
struct NotOp {
  __device__ std::int64_t operator()(std::int64_t v) const { return v == 0 ? 1 : 0; }
};

#define TENSORACLE_FLOAT_UNARY(NAME, EXPR) \
  struct NAME {                            \
    template <typename C>                  \
    __device__ C operator()(C x) const {   \
      return EXPR;                         \
    }                                      \
  };
TENSORACLE_FLOAT_UNARY(ExpOp, math::exp(x))
TENSORACLE_FLOAT_UNARY(LogOp, math::log(x))
TENSORACLE_FLOAT_UNARY(SqrtOp, math::sqrt(x))
TENSORACLE_FLOAT_UNARY(RsqrtOp, C(1) / math::sqrt(x))
TENSORACLE_FLOAT_UNARY(ReciprocalOp, C(1) / x)
TENSORACLE_FLOAT_UNARY(SinOp, math::sin(x))
TENSORACLE_FLOAT_UNARY(CosOp, math::cos(x))
TENSORACLE_FLOAT_UNARY(TanhOp, math::tanh(x))
TENSORACLE_FLOAT_UNARY(ErfOp, math::erf(x))
TENSORACLE_FLOAT_UNARY(FloorOp, math::floor(x))
TENSORACLE_FLOAT_UNARY(CeilOp, math::ceil(x))
// max(x, 0), letting NaN through (and keeping -0) as the CPU reference does.
TENSORACLE_FLOAT_UNARY(ReluOp, x < C(0) ? C(0) : x)
TENSORACLE_FLOAT_UNARY(SiluOp, x / (C(1) + math::exp(-x)))
TENSORACLE_FLOAT_UNARY(SigmoidOp, C(1) / (C(1) + math::exp(-x)))
#undef TENSORACLE_FLOAT_UNARY

// min(max(v, 0), 6), with comparisons that let NaN through.
__device__ __forceinline__ double relu6(double v) { return v < 0.0 ? 0.0 : (v > 6.0 ? 6.0 : v); }
// hard_sigmoid, hard_swish and leaky_relu are a few multiplications: they compute in double for every float dtype, as
// the CPU reference does, so the results match it exactly (and x * relu6(x + 3) can't overflow f32 before the / 6).
struct HardSigmoidOp {
  template <typename C>
  __device__ C operator()(C x) const {
    return static_cast<C>(relu6(static_cast<double>(x) + 3.0) / 6.0);
  }
};
struct HardSwishOp {
  template <typename C>
  __device__ C operator()(C x) const {
    const auto v = static_cast<double>(x);
    return static_cast<C>(v * relu6(v + 3.0) / 6.0);
  }
};

struct LeakyReluOp {
  double alpha;
  template <typename C>
  __device__ C operator()(C x) const {
    return x > C(0) ? x : static_cast<C>(alpha * static_cast<double>(x));
  }
};

struct GeluOp {
  bool tanh_approximation;
  template <typename C>
  __device__ C operator()(C x) const {
    if (tanh_approximation) {
      const C k_sqrt_2_pi = static_cast<C>(0.79788456080286535588);
      return C(0.5) * x * (C(1) + math::tanh(k_sqrt_2_pi * (x + static_cast<C>(0.044715) * x * x * x)));
    }
    return math::gelu_erf(x);
  }
};

// Above `threshold` the result is x itself (torch.nn.functional.softplus).
struct SoftplusOp {
  float beta_f, threshold_f;
  double beta_d, threshold_d;
  template <typename C>
  __device__ C operator()(C x) const {
    const C beta = param_as<C>(beta_f, beta_d);
    const C bx = beta * x;
    return bx > param_as<C>(threshold_f, threshold_d) ? x : math::log1p(math::exp(bx)) / beta;
  }
};

// torch.clamp: max is applied last, so min > max gives max everywhere; NaN passes through. Rounding the bounds to the
// compute type first gives the same result as clamping in double, since rounding is monotonic and x is representable.
struct ClipOp {
  float lo_f, hi_f;
  double lo_d, hi_d;
  template <typename C>
  __device__ C operator()(C x) const {
    const C lo = param_as<C>(lo_f, lo_d);
    const C hi = param_as<C>(hi_f, hi_d);
    const C v = x < lo ? lo : x;
    return v > hi ? hi : v;
  }
};

template <typename T, typename Op, typename Index>
__global__ void unary_kernel(const T* x, T* out, Index n, Op op) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) store(out, i, op(load(x, i)));
}

// The same on 16-byte words (8 f16/bf16, 4 f32, 2 f64 per thread and step): one vector load and store per word.
template <typename T, typename Op>
__global__ void unary_words_kernel(const uint4* x, uint4* out, std::int32_t words, Op op) {
  wait_for_preceding_steps();
  constexpr int kPer = static_cast<int>(sizeof(uint4) / sizeof(T));
  for (std::int32_t w = global_thread<std::int32_t>(); w < words; w += grid_threads<std::int32_t>()) {
    const uint4 in = x[w];
    uint4 result;
    const T* src = reinterpret_cast<const T*>(&in);
    T* dst = reinterpret_cast<T*>(&result);
#pragma unroll
    for (int k = 0; k < kPer; ++k) store(dst, k, op(load(src, k)));
    out[w] = result;
  }
}

// A unary op: the op with its attribute values, and both ways of running it. The 16-byte word path needs both
// pointers 16-byte aligned too, which the launch tests on the actual addresses.
template <typename Op>
struct UnaryPlan {
  using RunFn = void (*)(const StepLaunch& launch, const UnaryPlan& plan);
  RunFn run = nullptr;  // the instantiation for the dtype; nullptr: the output is empty
  Op op{};
  std::int64_t n = 0;  // elements
  bool index32 = false;
  unsigned grid = 1;
  bool words = false;  // whole 16-byte words that int32 indexes, given aligned pointers
  std::int64_t word_count = 0;
  unsigned word_grid = 1;
};

template <typename T, typename Op>
void run_unary(const StepLaunch& launch, const UnaryPlan<Op>& plan) {
  const void* x = launch.inputs[0].data;
  void* out = launch.outputs[0].data;
  const bool words = plan.words && reinterpret_cast<std::uintptr_t>(x) % sizeof(uint4) == 0 &&
                     reinterpret_cast<std::uintptr_t>(out) % sizeof(uint4) == 0;
  if (words) {
    launch_kernel(launch, unary_words_kernel<T, Op>, plan.word_grid, kThreads, 0, static_cast<const uint4*>(x),
                  static_cast<uint4*>(out), static_cast<std::int32_t>(plan.word_count), plan.op);
  } else if (plan.index32) {
    launch_kernel(launch, unary_kernel<T, Op, std::int32_t>, plan.grid, kThreads, 0, static_cast<const T*>(x),
                  static_cast<T*>(out), static_cast<std::int32_t>(plan.n), plan.op);
  } else {
    launch_kernel(launch, unary_kernel<T, Op, std::int64_t>, plan.grid, kThreads, 0, static_cast<const T*>(x),
                  static_cast<T*>(out), plan.n, plan.op);
  }
}

template <typename Types, typename Op>
UnaryPlan<Op> prepare_unary(const StepLaunch& launch, const Op& op) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  UnaryPlan<Op> plan;
  plan.op = op;
  const std::int64_t n = volume(out.shape);
  plan.n = n;
  if (n == 0) return plan;
  plan.index32 = fits_index32(n);
  plan.grid = grid_for(n);
  const bool handled = dispatch(Types{}, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::int64_t per_word = static_cast<std::int64_t>(sizeof(uint4) / sizeof(T));
    plan.words = sizeof(uint4) % sizeof(T) == 0 && n % per_word == 0 && fits_index32(n);
    plan.word_count = n / per_word;
    plan.word_grid = grid_for(plan.word_count);
    plan.run = &run_unary<T, Op>;
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA kernel");
  return plan;
}

template <typename Op>
void launch_unary(const StepLaunch& launch, const UnaryPlan<Op>& plan) {
  launch_planned(launch, plan);
}

template <typename Types, typename Op>
UnaryPlan<Op> prepare_simple_unary(const StepLaunch& launch) {
  return prepare_unary<Types>(launch, Op{});
}

UnaryPlan<LeakyReluOp> prepare_leaky_relu(const StepLaunch& launch) {
  const double alpha = launch.attrs->get_float("alpha", 0.01);
  return prepare_unary<FloatTypes>(launch, LeakyReluOp{alpha});
}

UnaryPlan<GeluOp> prepare_gelu(const StepLaunch& launch) {
  return prepare_unary<FloatTypes>(launch, GeluOp{launch.attrs->get_string("approximate", "none") == "tanh"});
}

UnaryPlan<SoftplusOp> prepare_softplus(const StepLaunch& launch) {
  const double beta = launch.attrs->get_float("beta", 1.0);
  const double threshold = launch.attrs->get_float("threshold", 20.0);
  return prepare_unary<FloatTypes>(
      launch, SoftplusOp{host_double_to_float(beta), host_double_to_float(threshold), beta, threshold});
}

UnaryPlan<ClipOp> prepare_clip(const StepLaunch& launch) {
  const double lo = launch.attrs->get_float("min", -std::numeric_limits<double>::infinity());
  const double hi = launch.attrs->get_float("max", std::numeric_limits<double>::infinity());
  return prepare_unary<FloatTypes>(launch, ClipOp{host_double_to_float(lo), host_double_to_float(hi), lo, hi});
}

// ---- cast ----
// As the CPU reference: float sources convert from their (exact) double value: into floats rounded once through f32
// for the narrow types, into integers truncated toward zero and saturated with NaN -> 0, into bool as x != 0. Integer
// and bool sources stay exact in int64: into integers they wrap, into floats they round once (through f32 for f32 and
// the narrow floats, directly for f64).

template <typename D>
__device__ __forceinline__ D cast_from_double(double d) {
  if constexpr (std::is_same_v<D, double>) {
    return d;
  } else if constexpr (kIsFloatStorage<D>) {
    return from_compute<D>(__double2float_rn(d));
  } else if constexpr (std::is_same_v<D, Bool8>) {
    return Bool8{static_cast<std::uint8_t>(d != 0.0 ? 1 : 0)};
  } else if constexpr (std::is_same_v<D, std::int64_t>) {
    if (d != d) return 0;
    if (d >= 9.2233720368547758e18) return IntLimits<std::int64_t>::kMax;
    if (d <= -9.2233720368547758e18) return IntLimits<std::int64_t>::kLowest;
    return static_cast<std::int64_t>(d);
  } else {
    constexpr D kMax = IntLimits<D>::kMax;
    constexpr D kLowest = IntLimits<D>::kLowest;
    if (d != d) return 0;
    if (d >= static_cast<double>(kMax)) return kMax;
    if (d <= static_cast<double>(kLowest)) return kLowest;
    return static_cast<D>(d);
  }
}

template <typename D>
__device__ __forceinline__ D cast_from_int64(std::int64_t v) {
  if constexpr (std::is_same_v<D, double>) {
    return __ll2double_rn(v);
  } else if constexpr (kIsFloatStorage<D>) {
    return from_compute<D>(__ll2float_rn(v));
  } else {
    return from_compute<D>(v);
  }
}

template <typename S, typename D, typename Index>
__global__ void cast_kernel(const S* x, D* out, Index n) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    if constexpr (kIsFloatStorage<S>) {
      out[i] = cast_from_double<D>(static_cast<double>(load(x, i)));
    } else {
      out[i] = cast_from_int64<D>(load(x, i));
    }
  }
}

struct CastPlan {
  using RunFn = void (*)(const StepLaunch& launch, const CastPlan& plan);
  RunFn run = nullptr;  // the instantiation for the two dtypes and the index width; nullptr: the output is empty
  std::int64_t n = 0;   // elements
  unsigned grid = 1;
};

template <typename S, typename D, typename Index>
void run_cast(const StepLaunch& launch, const CastPlan& plan) {
  launch_kernel(launch, cast_kernel<S, D, Index>, plan.grid, kThreads, 0, static_cast<const S*>(launch.inputs[0].data),
                static_cast<D*>(launch.outputs[0].data), static_cast<Index>(plan.n));
}

CastPlan prepare_cast(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  CastPlan plan;
  plan.n = volume(out.shape);
  if (plan.n == 0) return plan;
  plan.grid = grid_for(plan.n);
  bool handled = false;
  dispatch(AllTypes{}, x.dtype, [&](auto source) {
    using S = typename decltype(source)::type;
    handled = dispatch(AllTypes{}, out.dtype, [&](auto destination) {
      using D = typename decltype(destination)::type;
      plan.run = fits_index32(plan.n) ? &run_cast<S, D, std::int32_t> : &run_cast<S, D, std::int64_t>;
    });
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA kernel");
  return plan;
}

void launch_cast(const StepLaunch& launch, const CastPlan& plan) { launch_planned(launch, plan); }

// ---- supports ----

// The dtype classes of the kernel entries: one entry per float dtype, one for every integer dtype, one for bool.
enum class Cls { kF32, kF16, kBF16, kF64, kInt, kBool };

bool in_class(Cls cls, DataType dtype) {
  switch (cls) {
    case Cls::kF32: return dtype == DataType::kF32;
    case Cls::kF16: return dtype == DataType::kF16;
    case Cls::kBF16: return dtype == DataType::kBF16;
    case Cls::kF64: return dtype == DataType::kF64;
    case Cls::kInt: return in_list(IntegerTypes{}, dtype);
    case Cls::kBool: return dtype == DataType::kBool;
  }
  return false;
}

// Broadcast ops (binary, comparisons): the first input's dtype is in the class (the second has the same dtype) and
// the output has at most 8 axes.
template <Cls kClass>
bool supports_broadcast(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer.inputs.size() != 2 || !has_tensor(layer, 0) || !has_tensor(layer, 1)) return false;
  return in_class(kClass, input_dtype(graph, layer, 0)) &&
         input_dtype(graph, layer, 1) == input_dtype(graph, layer, 0) && output_rank(graph, layer, 0) <= kMaxRank;
}

bool supports_where(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer.inputs.size() != 3) return false;
  for (std::size_t i = 0; i < 3; ++i) {
    if (!has_tensor(layer, i)) return false;
  }
  return input_dtype(graph, layer, 0) == DataType::kBool && output_rank(graph, layer, 0) <= kMaxRank &&
         input_dtype(graph, layer, 1) == input_dtype(graph, layer, 2) &&
         output_dtype(graph, layer, 0) == input_dtype(graph, layer, 1);
}

template <Cls kClass>
bool supports_unary(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer.inputs.empty() || !has_tensor(layer, 0)) return false;
  return in_class(kClass, input_dtype(graph, layer, 0)) &&
         output_dtype(graph, layer, 0) == input_dtype(graph, layer, 0);
}

bool supports_cast(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer.inputs.empty() || !has_tensor(layer, 0)) return false;
  return in_list(AllTypes{}, input_dtype(graph, layer, 0)) && in_list(AllTypes{}, output_dtype(graph, layer, 0));
}

}  // namespace

// Entries of an op for the four float dtypes (f16/bf16 compute in f32, f64 in f64).
// clang-format off
#define TENSORACLE_FLOAT_ENTRIES(OP, VARIANT, SUPPORTS, PREPARE, LAUNCH)                         \
  prepared_kernel<PREPARE, LAUNCH>(OP "_f32_" VARIANT, OP, SUPPORTS<Cls::kF32>, 0),           \
  prepared_kernel<PREPARE, LAUNCH>(OP "_f16_f32math_" VARIANT, OP, SUPPORTS<Cls::kF16>, 0),   \
  prepared_kernel<PREPARE, LAUNCH>(OP "_bf16_f32math_" VARIANT, OP, SUPPORTS<Cls::kBF16>, 0), \
  prepared_kernel<PREPARE, LAUNCH>(OP "_f64_" VARIANT, OP, SUPPORTS<Cls::kF64>, 0)
// The entry of an op for every integer dtype (i64, i32, i16, i8, u8; computed in int64, wrapping).
#define TENSORACLE_INT_ENTRY(OP, VARIANT, SUPPORTS, PREPARE, LAUNCH) \
  prepared_kernel<PREPARE, LAUNCH>(OP "_int_i64math_" VARIANT, OP, SUPPORTS<Cls::kInt>, 0)
// clang-format on

void register_elementwise_kernels(std::vector<KernelEntry>& kernels) {
  const std::vector<KernelEntry> entries = {
      // arithmetic with broadcasting
      TENSORACLE_FLOAT_ENTRIES("add", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, AddOp, false>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("add", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, AddOp, false>),
                           launch_binary),
      TENSORACLE_FLOAT_ENTRIES("sub", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, SubOp, false>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("sub", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, SubOp, false>),
                           launch_binary),
      TENSORACLE_FLOAT_ENTRIES("mul", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, MulOp, false>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("mul", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, MulOp, false>),
                           launch_binary),
      TENSORACLE_FLOAT_ENTRIES("div", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, DivOp, false>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("div", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, DivOp, false>),
                           launch_binary),
      TENSORACLE_FLOAT_ENTRIES("pow", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, PowOp, false>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("pow", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, PowOp, false>),
                           launch_binary),
      TENSORACLE_FLOAT_ENTRIES("max", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, MaxOp, false>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("max", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, MaxOp, false>),
                           launch_binary),
      TENSORACLE_FLOAT_ENTRIES("min", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, MinOp, false>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("min", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, MinOp, false>),
                           launch_binary),
      // comparisons (bool output)
      TENSORACLE_FLOAT_ENTRIES("equal", "broadcast", supports_broadcast, (prepare_binary<EqualityTypes, EqualOp, true>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("equal", "broadcast", supports_broadcast, (prepare_binary<EqualityTypes, EqualOp, true>),
                           launch_binary),
      prepared_kernel<prepare_binary<EqualityTypes, EqualOp, true>, launch_binary>("equal_bool_broadcast", "equal",
                                                                                   supports_broadcast<Cls::kBool>, 0),
      TENSORACLE_FLOAT_ENTRIES("less", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, LessOp, true>),
                               launch_binary),
      TENSORACLE_INT_ENTRY("less", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, LessOp, true>),
                           launch_binary),
      TENSORACLE_FLOAT_ENTRIES("greater", "broadcast", supports_broadcast,
                               (prepare_binary<NumericTypes, GreaterOp, true>), launch_binary),
      TENSORACLE_INT_ENTRY("greater", "broadcast", supports_broadcast, (prepare_binary<NumericTypes, GreaterOp, true>),
                           launch_binary),
      // where (any dtype: elements are copied)
      prepared_kernel<prepare_where, launch_where>("where_any_broadcast", "where", supports_where, 0),
      // unary ops on floats and integers
      TENSORACLE_FLOAT_ENTRIES("abs", "elementwise", supports_unary, (prepare_simple_unary<NumericTypes, AbsOp>),
                               launch_unary<AbsOp>),
      TENSORACLE_INT_ENTRY("abs", "elementwise", supports_unary, (prepare_simple_unary<NumericTypes, AbsOp>),
                           launch_unary<AbsOp>),
      TENSORACLE_FLOAT_ENTRIES("neg", "elementwise", supports_unary, (prepare_simple_unary<NumericTypes, NegOp>),
                               launch_unary<NegOp>),
      TENSORACLE_INT_ENTRY("neg", "elementwise", supports_unary, (prepare_simple_unary<NumericTypes, NegOp>),
                           launch_unary<NegOp>),
      prepared_kernel<prepare_simple_unary<TypeList<Bool8>, NotOp>, launch_unary<NotOp>>("not_bool_elementwise", "not",
                                                                                         supports_unary<Cls::kBool>, 0),
      // math functions and activations on floats
      TENSORACLE_FLOAT_ENTRIES("exp", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, ExpOp>),
                               launch_unary<ExpOp>),
      TENSORACLE_FLOAT_ENTRIES("log", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, LogOp>),
                               launch_unary<LogOp>),
      TENSORACLE_FLOAT_ENTRIES("sqrt", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, SqrtOp>),
                               launch_unary<SqrtOp>),
      TENSORACLE_FLOAT_ENTRIES("rsqrt", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, RsqrtOp>),
                               launch_unary<RsqrtOp>),
      TENSORACLE_FLOAT_ENTRIES("reciprocal", "elementwise", supports_unary,
                               (prepare_simple_unary<FloatTypes, ReciprocalOp>), launch_unary<ReciprocalOp>),
      TENSORACLE_FLOAT_ENTRIES("sin", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, SinOp>),
                               launch_unary<SinOp>),
      TENSORACLE_FLOAT_ENTRIES("cos", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, CosOp>),
                               launch_unary<CosOp>),
      TENSORACLE_FLOAT_ENTRIES("tanh", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, TanhOp>),
                               launch_unary<TanhOp>),
      TENSORACLE_FLOAT_ENTRIES("erf", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, ErfOp>),
                               launch_unary<ErfOp>),
      TENSORACLE_FLOAT_ENTRIES("floor", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, FloorOp>),
                               launch_unary<FloorOp>),
      TENSORACLE_FLOAT_ENTRIES("ceil", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, CeilOp>),
                               launch_unary<CeilOp>),
      TENSORACLE_FLOAT_ENTRIES("relu", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, ReluOp>),
                               launch_unary<ReluOp>),
      TENSORACLE_FLOAT_ENTRIES("leaky_relu", "elementwise", supports_unary, prepare_leaky_relu,
                               launch_unary<LeakyReluOp>),
      TENSORACLE_FLOAT_ENTRIES("gelu", "elementwise", supports_unary, prepare_gelu, launch_unary<GeluOp>),
      TENSORACLE_FLOAT_ENTRIES("silu", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, SiluOp>),
                               launch_unary<SiluOp>),
      TENSORACLE_FLOAT_ENTRIES("sigmoid", "elementwise", supports_unary, (prepare_simple_unary<FloatTypes, SigmoidOp>),
                               launch_unary<SigmoidOp>),
      TENSORACLE_FLOAT_ENTRIES("hard_sigmoid", "elementwise", supports_unary,
                               (prepare_simple_unary<FloatTypes, HardSigmoidOp>), launch_unary<HardSigmoidOp>),
      TENSORACLE_FLOAT_ENTRIES("hard_swish", "elementwise", supports_unary,
                               (prepare_simple_unary<FloatTypes, HardSwishOp>), launch_unary<HardSwishOp>),
      TENSORACLE_FLOAT_ENTRIES("softplus", "elementwise", supports_unary, prepare_softplus, launch_unary<SoftplusOp>),
      TENSORACLE_FLOAT_ENTRIES("clip", "elementwise", supports_unary, prepare_clip, launch_unary<ClipOp>),
      // cast between every pair of dtypes
      prepared_kernel<prepare_cast, launch_cast>("cast_any_elementwise", "cast", supports_cast, 0),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

#undef TENSORACLE_FLOAT_ENTRIES
#undef TENSORACLE_INT_ENTRY

}  // namespace tensoracle::cuda
