// Code generation for fused_elementwise layers: CUDA C++ for one program, with each op's formula as the CPU reference
// and the hand-written kernels (kernels/elementwise.cu) compute it.
#include "backends/cuda/codegen/elementwise_codegen.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "graph/op_def.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cuda::codegen {

namespace {

bool supported_dtype(DataType t) {
  switch (t) {
    case DataType::kF32:
    case DataType::kF16:
    case DataType::kBF16:
    case DataType::kF64:
    case DataType::kI64:
    case DataType::kI32:
    case DataType::kI16:
    case DataType::kI8:
    case DataType::kU8:
    case DataType::kBool: return true;
    default: return false;
  }
}

bool is_float(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16 || t == DataType::kF64;
}

// How a dtype is stored in memory by the generated code (f16/bf16 as raw bits, bool as one byte 0/1).
const char* storage_type(DataType t) {
  switch (t) {
    case DataType::kF32: return "float";
    case DataType::kF64: return "double";
    case DataType::kF16:
    case DataType::kBF16: return "unsigned short";
    case DataType::kI64: return "long long";
    case DataType::kI32: return "int";
    case DataType::kI16: return "short";
    case DataType::kI8: return "signed char";
    case DataType::kU8:
    case DataType::kBool: return "unsigned char";
    default: break;
  }
  throw UnsupportedError(fmt::format("fused elementwise code generation: dtype {} is not supported", to_string(t)));
}

// The bits of `v` as the compute type holds a float attribute: f64 keeps it, f32 rounds it to nearest (beyond the
// float range to ±infinity), as the hand-written kernels' param_as / host_double_to_float do.
std::string float_constant(double v, bool f64) {
  if (f64) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    return fmt::format("__longlong_as_double(0x{:016X}LL)", bits);
  }
  constexpr double kOverflow = 0x1.ffffffp127;
  float f = 0;
  if (v >= kOverflow) {
    f = std::numeric_limits<float>::infinity();
  } else if (v <= -kOverflow) {
    f = -std::numeric_limits<float>::infinity();
  } else {
    f = static_cast<float>(v);
  }
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return fmt::format("__uint_as_float(0x{:08X}u)", bits);
}

// Helpers every generated source starts with: the wait each kernel begins with (as kernels/step_launch.cuh) and the
// marker saying the binary's kernels have it (kWaitsMarker), conversions (as kernels/common.cuh does them), integer
// arithmetic (as kernels/elementwise.cu), the parameter structs (as elementwise_codegen.hpp).
constexpr const char* kPrelude = R"(typedef unsigned long long tsr_u64;

extern "C" __device__ int tensoracle_waits_for_preceding_steps = 1;
__device__ __forceinline__ void tsr_wait_for_preceding_steps() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

struct FusedPointers {
  void* out;
  const void* in[TSR_MAX_INPUTS];
};
struct FusedContiguousArgs {
  long long n;
  unsigned int scalar_mask;
  int vectorized;
};
struct FusedBroadcastArgs32 {
  int n;
  int skip;
  int dims[TSR_MAX_RANK];
  int strides[TSR_MAX_INPUTS][TSR_MAX_RANK];
  int vectorized;
};
struct FusedBroadcastArgs64 {
  long long n;
  long long skip;
  long long dims[TSR_MAX_RANK];
  long long strides[TSR_MAX_INPUTS][TSR_MAX_RANK];
  long long vectorized;
};

template <typename T, int V>
struct alignas(sizeof(T) * V < 16 ? sizeof(T) * V : 16) TsrVec {
  T v[V];
};

// f16 NaNs keep sign and payload and get the quiet bit; f16 results round to nearest even with NaN as 0x7E00 (signed).
__device__ __forceinline__ float tsr_f16_to_f32(unsigned short b) {
  if ((b & 0x7FFFu) > 0x7C00u)
    return __uint_as_float(((unsigned)(b & 0x8000u) << 16) | 0x7FC00000u | ((unsigned)(b & 0x03FFu) << 13));
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
  return f;
}
// The plain widening, for inputs that only arithmetic reads: a NaN stays a NaN, and the arithmetic after it would not
// keep its sign or payload anyway (the GPU's float instructions return the canonical NaN). Saves the NaN test, about
// a sixth of a generated GELU's instructions.
__device__ __forceinline__ float tsr_f16_to_f32_arith(unsigned short b) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
  return f;
}
__device__ __forceinline__ unsigned short tsr_f32_to_f16(float v) {
  if (v != v) return (__float_as_uint(v) >> 31) != 0u ? (unsigned short)0xFE00u : (unsigned short)0x7E00u;
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
// bf16: round to nearest even (overflow to infinity); NaN is 0x7FC0.
__device__ __forceinline__ float tsr_bf16_to_f32(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ unsigned short tsr_f32_to_bf16(float v) {
  if (v != v) return (unsigned short)0x7FC0u;
  const unsigned u = __float_as_uint(v);
  return (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

#if __CUDA_ARCH__ >= 800
// Two results rounded with one packed conversion (lo at the lower address); the NaN rules above when the pair has a
// NaN.
__device__ __forceinline__ unsigned tsr_f32x2_to_f16x2(float lo, float hi) {
  if (lo != lo || hi != hi) return (unsigned)tsr_f32_to_f16(lo) | ((unsigned)tsr_f32_to_f16(hi) << 16);
  unsigned d;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ unsigned tsr_f32x2_to_bf16x2(float lo, float hi) {
  if (lo != lo || hi != hi) return (unsigned)tsr_f32_to_bf16(lo) | ((unsigned)tsr_f32_to_bf16(hi) << 16);
  unsigned d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
#endif

// Integers compute in int64, wrapping through uint64, and wrap to their width after every instruction.
__device__ __forceinline__ long long tsr_add(long long a, long long b) { return (long long)((tsr_u64)a + (tsr_u64)b); }
__device__ __forceinline__ long long tsr_sub(long long a, long long b) { return (long long)((tsr_u64)a - (tsr_u64)b); }
__device__ __forceinline__ long long tsr_mul(long long a, long long b) { return (long long)((tsr_u64)a * (tsr_u64)b); }
__device__ __forceinline__ long long tsr_neg(long long a) { return (long long)(0ULL - (tsr_u64)a); }
__device__ __forceinline__ long long tsr_abs(long long a) { return a < 0 ? tsr_neg(a) : a; }
// Truncates toward zero; a zero divisor gives 0 and INT64_MIN / -1 wraps.
__device__ __forceinline__ long long tsr_div(long long a, long long b) {
  if (b == 0) return 0;
  if (b == -1) return tsr_neg(a);
  return a / b;
}
__device__ __forceinline__ long long tsr_pow(long long base, long long exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 == 0 ? 1 : -1;
    return 0;
  }
  tsr_u64 result = 1;
  tsr_u64 factor = (tsr_u64)base;
  for (tsr_u64 e = (tsr_u64)exponent; e != 0; e >>= 1) {
    if ((e & 1u) != 0) result *= factor;
    factor *= factor;
  }
  return (long long)result;
}
__device__ __forceinline__ long long tsr_wrap_i32(long long v) { return (long long)(int)(unsigned)(tsr_u64)v; }
__device__ __forceinline__ long long tsr_wrap_i16(long long v) {
  return (long long)(short)(unsigned short)(tsr_u64)v;
}
__device__ __forceinline__ long long tsr_wrap_i8(long long v) {
  return (long long)(signed char)(unsigned char)(tsr_u64)v;
}
__device__ __forceinline__ long long tsr_wrap_u8(long long v) { return (long long)(unsigned char)(tsr_u64)v; }
// Float to integer: truncates toward zero, saturates, NaN gives 0.
__device__ __forceinline__ long long tsr_f2i(double d, double lo, double hi, long long ilo, long long ihi) {
  if (d != d) return 0;
  if (d >= hi) return ihi;
  if (d <= lo) return ilo;
  return (long long)d;
}

// torch.maximum / torch.minimum: a NaN operand makes the result NaN.
__device__ __forceinline__ float tsr_max(float a, float b) {
  if (a != a || b != b) return __uint_as_float(0x7FC00000u);
  return a > b ? a : b;
}
__device__ __forceinline__ double tsr_max(double a, double b) {
  if (a != a || b != b) return __longlong_as_double(0x7FF8000000000000LL);
  return a > b ? a : b;
}
__device__ __forceinline__ float tsr_min(float a, float b) {
  if (a != a || b != b) return __uint_as_float(0x7FC00000u);
  return a < b ? a : b;
}
__device__ __forceinline__ double tsr_min(double a, double b) {
  if (a != a || b != b) return __longlong_as_double(0x7FF8000000000000LL);
  return a < b ? a : b;
}
__device__ __forceinline__ long long tsr_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ long long tsr_min(long long a, long long b) { return a < b ? a : b; }
// min(max(v, 0), 6), letting NaN through.
__device__ __forceinline__ double tsr_relu6(double v) { return v < 0.0 ? 0.0 : (v > 6.0 ? 6.0 : v); }
)";

class Emitter {
 public:
  Emitter(const graph::ElementwiseProgram& program, const std::vector<DataType>& input_dtypes)
      : program_(program), dtypes_(input_dtypes) {
    for (const auto& ins : program.instructions) dtypes_.push_back(ins.dtype);
    f64_ = std::any_of(dtypes_.begin(), dtypes_.end(), [](DataType t) { return t == DataType::kF64; });
    F_ = f64_ ? "double" : "float";
    // An input keeps its NaN's sign and payload when a value-passing op (cast, max, min, where's values, relu,
    // abs, neg, clip, floor, ...) reads it; inputs that only arithmetic and comparisons read widen plainly.
    const std::size_t n = input_dtypes.size();
    arithmetic_only_.assign(n, true);
    for (const auto& ins : program.instructions) {
      for (std::size_t k = 0; k < ins.args.size(); ++k) {
        const auto arg = static_cast<std::size_t>(ins.args[k]);
        const bool where_condition = ins.op == "where" && k == 0;
        if (arg < n && !where_condition && !reads_as_arithmetic(ins.op)) arithmetic_only_[arg] = false;
      }
    }
  }

  // The element function: storage values of the inputs in, the output's storage value out.
  std::string element_function() const {
    const std::size_t n = dtypes_.size() - program_.instructions.size();
    const DataType out = dtypes_.back();
    std::string params;
    for (std::size_t i = 0; i < n; ++i)
      params += fmt::format("{}const {} x{}", i == 0 ? "" : ", ", storage_type(dtypes_[i]), i);
    std::string body;
    for (std::size_t i = 0; i < n; ++i)
      body += fmt::format("  const {} v{} = {};\n", compute_type(dtypes_[i]), i,
                          load(dtypes_[i], fmt::format("x{}", i), arithmetic_only_[i]));
    for (std::size_t k = 0; k < program_.instructions.size(); ++k) {
      const auto& ins = program_.instructions[k];
      std::vector<std::string> a;
      std::vector<DataType> at;
      for (auto arg : ins.args) {
        a.push_back(fmt::format("v{}", arg));
        at.push_back(dtypes_[static_cast<std::size_t>(arg)]);
      }
      body += fmt::format("  const {} v{} = {};  // {}\n", compute_type(ins.dtype), n + k,
                          narrow(ins.dtype, expression(ins, a, at)), ins.op);
    }
    const std::string result = fmt::format("v{}", dtypes_.size() - 1);
    std::string args;
    for (std::size_t i = 0; i < n; ++i) args += fmt::format("{}x{}", i == 0 ? "" : ", ", i);
    if (out == DataType::kF16 || out == DataType::kBF16) {
      // The result before rounding, for the vector loop's paired conversions; the element function rounds it.
      return fmt::format(
          "__device__ __forceinline__ float tsr_element_value({0}) {{\n{1}  return (float){2};\n}}\n"
          "__device__ __forceinline__ {3} tsr_element({0}) {{\n  return {4};\n}}\n",
          params, body, result, storage_type(out), store(out, fmt::format("tsr_element_value({})", args)));
    }
    body += fmt::format("  return {};\n", store(out, result));
    return fmt::format("__device__ __forceinline__ {} tsr_element({}) {{\n{}}}\n", storage_type(out), params, body);
  }

 private:
  std::string compute_type(DataType t) const { return is_float(t) ? F_ : "long long"; }
  std::string fn(const char* name) const { return f64_ ? name : fmt::format("{}f", name); }
  std::string lit(const char* text) const { return fmt::format("(({}){})", F_, text); }

  // Ops whose float result is computed (a NaN operand gives the canonical NaN) or is a comparison's 0/1.
  static bool reads_as_arithmetic(const std::string& op) {
    static const char* const kOps[] = {"add",  "sub",  "mul",     "div",      "pow",   "exp",   "log",
                                       "sqrt", "sin",  "cos",     "tanh",     "erf",   "rsqrt", "reciprocal",
                                       "gelu", "silu", "sigmoid", "softplus", "equal", "less",  "greater"};
    return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* o) { return op == o; });
  }

  std::string load(DataType t, const std::string& x, bool arithmetic_only) const {
    switch (t) {
      case DataType::kF32: return fmt::format("({}){}", F_, x);
      case DataType::kF64: return x;
      case DataType::kF16:
        return fmt::format("({}){}({})", F_, arithmetic_only ? "tsr_f16_to_f32_arith" : "tsr_f16_to_f32", x);
      case DataType::kBF16: return fmt::format("({})tsr_bf16_to_f32({})", F_, x);
      case DataType::kBool: return fmt::format("({} != 0 ? 1LL : 0LL)", x);
      default: return fmt::format("(long long){}", x);
    }
  }

  // Rounds a float value to `t` and back to the compute type (casts only); integers wrap to their width.
  std::string narrow(DataType t, const std::string& e) const {
    switch (t) {
      case DataType::kI32: return fmt::format("tsr_wrap_i32({})", e);
      case DataType::kI16: return fmt::format("tsr_wrap_i16({})", e);
      case DataType::kI8: return fmt::format("tsr_wrap_i8({})", e);
      case DataType::kU8: return fmt::format("tsr_wrap_u8({})", e);
      default: return e;
    }
  }

  std::string store(DataType t, const std::string& v) const {
    switch (t) {
      case DataType::kF32: return fmt::format("(float){}", v);
      case DataType::kF64: return v;
      case DataType::kF16: return fmt::format("tsr_f32_to_f16((float){})", v);
      case DataType::kBF16: return fmt::format("tsr_f32_to_bf16((float){})", v);
      case DataType::kBool: return fmt::format("(unsigned char)({} != 0 ? 1 : 0)", v);
      default: return fmt::format("({}){}", storage_type(t), v);
    }
  }

  // As cast_kernel of the CPU reference: float sources convert by value (into narrow floats through f32, into
  // integers truncated and saturated with NaN -> 0, into bool as x != 0); integer and bool sources wrap into integers
  // and round once into floats (through f32 for f32 and narrower, directly for f64).
  std::string cast(DataType from, DataType to, const std::string& x) const {
    if (to == DataType::kBool) return fmt::format("({} != 0 ? 1LL : 0LL)", x);
    if (is_float(from)) {
      switch (to) {
        case DataType::kF64: return fmt::format("(double){}", x);
        case DataType::kF32: return fmt::format("({})(float){}", F_, x);
        case DataType::kF16: return fmt::format("({})tsr_f16_to_f32(tsr_f32_to_f16((float){}))", F_, x);
        case DataType::kBF16: return fmt::format("({})tsr_bf16_to_f32(tsr_f32_to_bf16((float){}))", F_, x);
        case DataType::kI64:
          return fmt::format(
              "tsr_f2i((double){}, -9.2233720368547758e18, 9.2233720368547758e18, (-9223372036854775807LL "
              "- 1), 9223372036854775807LL)",
              x);
        case DataType::kI32:
          return fmt::format("tsr_f2i((double){}, -2147483648.0, 2147483647.0, -2147483648LL, 2147483647LL)", x);
        case DataType::kI16: return fmt::format("tsr_f2i((double){}, -32768.0, 32767.0, -32768LL, 32767LL)", x);
        case DataType::kI8: return fmt::format("tsr_f2i((double){}, -128.0, 127.0, -128LL, 127LL)", x);
        case DataType::kU8: return fmt::format("tsr_f2i((double){}, 0.0, 255.0, 0LL, 255LL)", x);
        default: break;
      }
    } else {
      switch (to) {
        case DataType::kF64: return fmt::format("__ll2double_rn({})", x);
        case DataType::kF32: return fmt::format("({})__ll2float_rn({})", F_, x);
        case DataType::kF16: return fmt::format("({})tsr_f16_to_f32(tsr_f32_to_f16(__ll2float_rn({})))", F_, x);
        case DataType::kBF16: return fmt::format("({})tsr_bf16_to_f32(tsr_f32_to_bf16(__ll2float_rn({})))", F_, x);
        default: return x;  // integers: narrow() wraps to the width
      }
    }
    throw UnsupportedError(fmt::format("fused elementwise code generation: cast from {} to {} is not supported",
                                       to_string(from), to_string(to)));
  }

  std::string expression(const graph::ProgramInstruction& ins, const std::vector<std::string>& a,
                         const std::vector<DataType>& at) const {
    const std::string& op = ins.op;
    graph::AttrReader attrs(ins.attrs, "fused_elementwise", op);
    const bool fl = !at.empty() && is_float(at[0]);
    // Binary arithmetic.
    if (op == "add") return fl ? fmt::format("({} + {})", a[0], a[1]) : fmt::format("tsr_add({}, {})", a[0], a[1]);
    if (op == "sub") return fl ? fmt::format("({} - {})", a[0], a[1]) : fmt::format("tsr_sub({}, {})", a[0], a[1]);
    if (op == "mul") return fl ? fmt::format("({} * {})", a[0], a[1]) : fmt::format("tsr_mul({}, {})", a[0], a[1]);
    if (op == "div") return fl ? fmt::format("({} / {})", a[0], a[1]) : fmt::format("tsr_div({}, {})", a[0], a[1]);
    if (op == "pow")
      return fl ? fmt::format("{}({}, {})", fn("pow"), a[0], a[1]) : fmt::format("tsr_pow({}, {})", a[0], a[1]);
    if (op == "max") return fmt::format("tsr_max({}, {})", a[0], a[1]);
    if (op == "min") return fmt::format("tsr_min({}, {})", a[0], a[1]);
    // Comparisons (false with NaN), where, not.
    if (op == "equal") return fmt::format("({} == {} ? 1LL : 0LL)", a[0], a[1]);
    if (op == "less") return fmt::format("({} < {} ? 1LL : 0LL)", a[0], a[1]);
    if (op == "greater") return fmt::format("({} > {} ? 1LL : 0LL)", a[0], a[1]);
    if (op == "where") return fmt::format("({} != 0 ? {} : {})", a[0], a[1], a[2]);
    if (op == "not") return fmt::format("({} == 0 ? 1LL : 0LL)", a[0]);
    // Unary math.
    const std::string& x = a[0];
    if (op == "abs") return fl ? fmt::format("{}({})", fn("fabs"), x) : fmt::format("tsr_abs({})", x);
    if (op == "neg") return fl ? fmt::format("(-{})", x) : fmt::format("tsr_neg({})", x);
    for (const char* f : {"exp", "log", "sqrt", "sin", "cos", "tanh", "erf", "floor", "ceil"}) {
      if (op == f) return fmt::format("{}({})", fn(f), x);
    }
    if (op == "rsqrt") return fmt::format("({} / {}({}))", lit("1"), fn("sqrt"), x);
    if (op == "reciprocal") return fmt::format("({} / {})", lit("1"), x);
    // Activations.
    if (op == "relu") return fmt::format("({0} < {1} ? {1} : {0})", x, lit("0"));
    if (op == "leaky_relu") {
      const double alpha = attrs.get_float("alpha", 0.01);
      return fmt::format("({0} > {1} ? {0} : ({2})({3} * (double){0}))", x, lit("0"), F_, float_constant(alpha, true));
    }
    if (op == "gelu") {
      if (attrs.get_string("approximate", "none") == "tanh") {
        return fmt::format("({0} * {1} * ({2} + {3}({4} * ({1} + {5} * {1} * {1} * {1}))))", lit("0.5"), x, lit("1"),
                           fn("tanh"), lit("0.79788456080286535588"), lit("0.044715"));
      }
      return fmt::format("({0} * {1} * ({2} + {3}({1} * {4})))", lit("0.5"), x, lit("1"), fn("erf"),
                         lit("0.70710678118654752440"));
    }
    if (op == "silu") return fmt::format("({0} / ({1} + {2}(-{0})))", x, lit("1"), fn("exp"));
    if (op == "sigmoid") return fmt::format("({1} / ({1} + {2}(-{0})))", x, lit("1"), fn("exp"));
    if (op == "hard_sigmoid") return fmt::format("({})(tsr_relu6((double){} + 3.0) / 6.0)", F_, x);
    if (op == "hard_swish") return fmt::format("({0})((double){1} * tsr_relu6((double){1} + 3.0) / 6.0)", F_, x);
    if (op == "softplus") {
      const std::string beta = float_constant(attrs.get_float("beta", 1.0), f64_);
      const std::string threshold = float_constant(attrs.get_float("threshold", 20.0), f64_);
      return fmt::format("({1} * {0} > {2} ? {0} : {3}({4}({1} * {0})) / {1})", x, beta, threshold, fn("log1p"),
                         fn("exp"));
    }
    if (op == "clip") {
      const std::string lo = float_constant(attrs.get_float("min", -std::numeric_limits<double>::infinity()), f64_);
      const std::string hi = float_constant(attrs.get_float("max", std::numeric_limits<double>::infinity()), f64_);
      // torch.clamp: max is applied last; NaN passes through.
      return fmt::format("(({0} < {1} ? {1} : {0}) > {2} ? {2} : ({0} < {1} ? {1} : {0}))", x, lo, hi);
    }
    if (op == "cast") return cast(at[0], ins.dtype, x);
    throw UnsupportedError(fmt::format("fused elementwise code generation: op '{}' is not supported", op));
  }

  const graph::ElementwiseProgram& program_;
  std::vector<DataType> dtypes_;       // inputs, then each instruction's result
  std::vector<bool> arithmetic_only_;  // per input: only arithmetic and comparisons read it
  bool f64_ = false;
  std::string F_;
};

std::vector<DataType> layer_input_dtypes(const graph::Graph& graph, const graph::Layer& layer) {
  std::vector<DataType> dtypes;
  for (auto id : layer.inputs) dtypes.push_back(graph.tensor(id).dtype);
  return dtypes;
}

}  // namespace

std::vector<std::string> entry_names() { return {kEntryContiguous, kEntryBroadcast32, kEntryBroadcast64}; }

bool supports_instruction(const std::string& op, const std::vector<DataType>& arg_dtypes, DataType result) {
  if (!graph::is_program_op(op) || !supported_dtype(result)) return false;
  return std::all_of(arg_dtypes.begin(), arg_dtypes.end(), supported_dtype);
}

bool supports_layer(const graph::Graph& graph, const graph::Layer& layer) {
  if (!graph::is_program_op(layer.op) || layer.outputs.size() != 1) return false;
  std::vector<DataType> args;
  for (auto id : layer.inputs) {
    if (id < 0) return false;
    args.push_back(graph.tensor(id).dtype);
  }
  const auto& out = graph.tensor(layer.outputs[0]);
  return out.shape.size() <= static_cast<std::size_t>(kMaxRank) && supports_instruction(layer.op, args, out.dtype);
}

bool supports_fused_layer(const graph::Graph& graph, const graph::Layer& layer) {
  if (layer.op != graph::kFusedElementwiseOp || layer.outputs.size() != 1 || layer.inputs.empty() ||
      layer.inputs.size() > static_cast<std::size_t>(kMaxInputs))
    return false;
  std::vector<DataType> values;
  for (auto id : layer.inputs) {
    if (id < 0) return false;
    values.push_back(graph.tensor(id).dtype);
  }
  if (graph.tensor(layer.outputs[0]).shape.size() > static_cast<std::size_t>(kMaxRank)) return false;
  try {
    const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
    const auto program =
        graph::ElementwiseProgram::parse(attrs.get_string(graph::kProgramAttr), layer.inputs.size(), layer.name);
    for (const auto& ins : program.instructions) {
      std::vector<DataType> args;
      for (auto a : ins.args) args.push_back(values[static_cast<std::size_t>(a)]);
      if (!supports_instruction(ins.op, args, ins.dtype)) return false;
      values.push_back(ins.dtype);
    }
  } catch (const GraphError&) {
    return false;
  }
  return true;
}

int vector_width(const std::vector<DataType>& input_dtypes, DataType output_dtype) {
  std::size_t narrowest = element_size(output_dtype);
  for (DataType t : input_dtypes) narrowest = std::min(narrowest, element_size(t));
  return static_cast<int>(std::min<std::size_t>(8, 16 / narrowest));
}

GeneratedSource generate_fused_elementwise(const graph::ElementwiseProgram& program,
                                           const std::vector<DataType>& input_dtypes, int rank,
                                           const std::string& layer_name) {
  const auto n = static_cast<int>(input_dtypes.size());
  if (n < 1 || n > kMaxInputs || rank < 0 || rank > kMaxRank || program.instructions.empty()) {
    throw UnsupportedError(
        fmt::format("layer '{}': fused elementwise code generation takes 1 to {} inputs and rank up "
                    "to {} ({} inputs, rank {})",
                    layer_name, kMaxInputs, kMaxRank, n, rank));
  }
  std::vector<DataType> values = input_dtypes;
  for (const auto& ins : program.instructions) {
    std::vector<DataType> args;
    for (auto a : ins.args) args.push_back(values.at(static_cast<std::size_t>(a)));
    if (!supports_instruction(ins.op, args, ins.dtype))
      throw UnsupportedError(fmt::format("layer '{}': fused elementwise code generation does not handle op '{}' on {}",
                                         layer_name, ins.op, to_string(ins.dtype)));
    values.push_back(ins.dtype);
  }
  const DataType out = program.instructions.back().dtype;
  const int width = vector_width(input_dtypes, out);

  std::string s;
  s += fmt::format("// Generated by tensoracle: fused elementwise program {}\n", program.to_json());
  s += fmt::format("// inputs ({}) -> {}, rank {}, {} elements per vector access\n",
                   fmt::join(
                       [&] {
                         std::vector<std::string> names;
                         for (DataType t : input_dtypes) names.emplace_back(to_string(t));
                         return names;
                       }(),
                       ", "),
                   to_string(out), rank, width);
  s += fmt::format("#define TSR_MAX_INPUTS {}\n#define TSR_MAX_RANK {}\n#define TSR_RANK {}\n#define TSR_VEC {}\n",
                   kMaxInputs, kMaxRank, rank, width);
  s += kPrelude;
  s += "\n";
  Emitter emitter(program, input_dtypes);
  s += emitter.element_function();
  s += "\n";

  const std::string out_type = storage_type(out);
  auto typed_pointers = [&] {
    std::string p = fmt::format("  {}* __restrict__ out = ({}*)p.out;\n", out_type, out_type);
    for (int i = 0; i < n; ++i) {
      const char* t = storage_type(input_dtypes[static_cast<std::size_t>(i)]);
      p += fmt::format("  const {0}* __restrict__ in{1} = (const {0}*)p.in[{1}];\n", t, i);
    }
    return p;
  };
  auto call = [&](const std::string& pattern) {
    std::string c;
    for (int i = 0; i < n; ++i) c += (i == 0 ? "" : ", ") + fmt::format(fmt::runtime(pattern), i);
    return c;
  };

  // x0..x{n-1}, each input's vector (`indent` spaces deep): where `broadcast(i)` holds, its element at `scalar_at(i)`
  // in every lane, else the vector at `vector_at(i)`.
  auto vector_inputs = [&](const std::string& indent, auto broadcast, auto scalar_at, auto vector_at) {
    std::string c;
    for (int i = 0; i < n; ++i) {
      const char* t = storage_type(input_dtypes[static_cast<std::size_t>(i)]);
      c += fmt::format("{}TsrVec<{}, TSR_VEC> x{};\n", indent, t, i);
      c += fmt::format("{}if ({}) {{\n", indent, broadcast(i));
      c += fmt::format("{}  const {} s = in{}[{}];\n#pragma unroll\n", indent, t, i, scalar_at(i));
      c += fmt::format("{}  for (int j = 0; j < TSR_VEC; ++j) x{}.v[j] = s;\n", indent, i);
      c += fmt::format("{}}} else {{\n", indent);
      c += fmt::format("{0}  x{2} = *(const TsrVec<{1}, TSR_VEC>*)(in{2} + {3});\n", indent, t, i, vector_at(i));
      c += fmt::format("{}}}\n", indent);
    }
    return c;
  };

  // The vector of results from x0..x{n-1} (TsrVec loads), stored at out + `at` (`indent` spaces deep).
  auto vector_result = [&](const std::string& at, const std::string& indent) {
    std::string c;
    c += fmt::format("{}TsrVec<{}, TSR_VEC> o;\n", indent, out_type);
    const bool paired = (out == DataType::kF16 || out == DataType::kBF16) && width % 2 == 0;
    if (paired) {
      // Pairs rounded with one conversion each (sm_80 and newer).
      c += "#if __CUDA_ARCH__ >= 800\n";
      c += fmt::format("{}float r[TSR_VEC];\n#pragma unroll\n", indent);
      c += fmt::format("{}for (int j = 0; j < TSR_VEC; ++j) r[j] = tsr_element_value({});\n", indent, call("x{}.v[j]"));
      c += "#pragma unroll\n";
      c += fmt::format("{}for (int j = 0; j < TSR_VEC; j += 2) ((unsigned*)o.v)[j / 2] = {}(r[j], r[j + 1]);\n", indent,
                       out == DataType::kF16 ? "tsr_f32x2_to_f16x2" : "tsr_f32x2_to_bf16x2");
      c += "#else\n";
    }
    c += "#pragma unroll\n";
    c += fmt::format("{}for (int j = 0; j < TSR_VEC; ++j) o.v[j] = tsr_element({});\n", indent, call("x{}.v[j]"));
    if (paired) c += "#endif\n";
    c += fmt::format("{}*(TsrVec<{}, TSR_VEC>*)(out + {}) = o;\n", indent, out_type, at);
    return c;
  };

  // Contiguous: vector accesses of TSR_VEC elements (scalar inputs broadcast), then the tail one element at a time.
  s += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(FusedPointers p, FusedContiguousArgs a) {{\n",
                   kThreads, kEntryContiguous);
  s += "  tsr_wait_for_preceding_steps();\n";
  s += typed_pointers();
  s += "  const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n";
  s += "  const long long stride = (long long)gridDim.x * blockDim.x;\n";
  s += "  const long long vectors = a.vectorized ? a.n / TSR_VEC : 0;\n";
  s += "  for (long long v = first; v < vectors; v += stride) {\n";
  s += "    const long long base = v * TSR_VEC;\n";
  s += vector_inputs(
      "    ", [](int i) { return fmt::format("a.scalar_mask & {}u", 1u << i); }, [](int) { return std::string("0"); },
      [](int) { return std::string("base"); });
  s += vector_result("base", "    ");
  s += "  }\n";
  s += "  for (long long i = vectors * TSR_VEC + first; i < a.n; i += stride) {\n";
  std::string tail_args;
  for (int i = 0; i < n; ++i)
    tail_args += fmt::format("{}in{}[(a.scalar_mask & {}u) ? 0 : i]", i == 0 ? "" : ", ", i, 1u << i);
  s += fmt::format("    out[i] = tsr_element({});\n", tail_args);
  s += "  }\n}\n\n";

  // Broadcast: per-input strides over the (right-aligned) output dims.
  for (const auto& [entry, index, args] : {std::tuple{kEntryBroadcast32, "int", "FusedBroadcastArgs32"},
                                           std::tuple{kEntryBroadcast64, "long long", "FusedBroadcastArgs64"}}) {
    s += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(FusedPointers p, {} a) {{\n", kThreads,
                     entry, args);
    s += "  tsr_wait_for_preceding_steps();\n";
    s += typed_pointers();
    s += fmt::format("  const {0} stride = ({0})gridDim.x * ({0})blockDim.x;\n", index);
    s += fmt::format("  const {0} first = ({0})blockIdx.x * ({0})blockDim.x + ({0})threadIdx.x;\n", index);
    // Input offsets of output element i (`indent` spaces deep).
    auto offsets = [&, index = index](const std::string& indent) {
      std::string c = fmt::format("{}{} rest = i;\n", indent, index);
      for (int i = 0; i < n; ++i) c += fmt::format("{}{} o{} = 0;\n", indent, index, i);
      if (rank > 0) {
        c += "#pragma unroll\n";
        c += fmt::format("{}for (int d = TSR_RANK - 1; d >= 0; --d) {{\n", indent);
        c += fmt::format("{}  if (d < a.skip) break;\n", indent);
        c += fmt::format("{0}  const {1} q = rest / a.dims[d];\n{0}  const {1} c = rest - q * a.dims[d];\n", indent,
                         index);
        c += fmt::format("{}  rest = q;\n", indent);
        for (int i = 0; i < n; ++i) c += fmt::format("{}  o{} += c * a.strides[{}][d];\n", indent, i, i);
        c += fmt::format("{}}}\n", indent);
      }
      return c;
    };
    if (rank > 0) {
      // Vectorized (set by the launch): the innermost axis is whole vectors, every input steps 1 along it (a vector
      // load, aligned) or 0 (one value for the whole vector).
      s += "  if (a.vectorized) {\n";
      s += fmt::format("    for ({0} v = first; v < a.n / TSR_VEC; v += stride) {{\n", index);
      s += fmt::format("      const {} i = v * TSR_VEC;\n", index);
      s += offsets("      ");
      const auto offset = [](int i) { return fmt::format("o{}", i); };
      s += vector_inputs(
          "      ", [](int i) { return fmt::format("a.strides[{}][TSR_RANK - 1] == 0", i); }, offset, offset);
      s += vector_result("i", "      ");
      s += "    }\n    return;\n  }\n";
    }
    s += fmt::format("  for ({0} i = first; i < a.n; i += stride) {{\n", index);
    s += offsets("    ");
    s += fmt::format("    out[i] = tsr_element({});\n", call("in{0}[o{0}]"));
    s += "  }\n}\n\n";
  }
  return GeneratedSource{std::move(s), entry_names()};
}

GeneratedSource generate_fused_elementwise(const graph::Graph& graph, const graph::Layer& layer) {
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  const auto program =
      graph::ElementwiseProgram::parse(attrs.get_string(graph::kProgramAttr), layer.inputs.size(), layer.name);
  return generate_fused_elementwise(program, layer_input_dtypes(graph, layer),
                                    static_cast<int>(graph.tensor(layer.outputs.at(0)).shape.size()), layer.name);
}

}  // namespace tensoracle::cuda::codegen
