// Shared helpers of the CUDA kernels: dtype conversions and dispatch, broadcast index math, reductions, launch sizes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/step_launch.cuh"
#include "tensoracle/data_type.hpp"
#include "tensoracle/float_convert.hpp"

namespace tensoracle::cuda::kernels {

// ---- storage types ----
// f16 and bf16 are kept as raw bits so that every conversion goes through the helpers below (round to nearest even,
// NaN encodings as the CPU reference writes them). bool is one byte, 0 or 1 (read as byte != 0).
struct F16 {
  std::uint16_t bits;
};
struct BF16 {
  std::uint16_t bits;
};
struct F8E4M3 {
  std::uint8_t bits;
};
struct F8E5M2 {
  std::uint8_t bits;
};
struct Bool8 {
  std::uint8_t bits;
};

// Traits of each storage type: its DataType and the type it computes in (f32 for the narrow floats, f64 for f64,
// int64 for integers and bool, as the CPU reference does for integers).
template <typename T>
struct TypeTraits;
#define TENSORACLE_TYPE_TRAITS(T, DT, C)            \
  template <>                                       \
  struct TypeTraits<T> {                            \
    static constexpr DataType dtype = DataType::DT; \
    using compute = C;                              \
  };
TENSORACLE_TYPE_TRAITS(float, kF32, float)
TENSORACLE_TYPE_TRAITS(double, kF64, double)
TENSORACLE_TYPE_TRAITS(F16, kF16, float)
TENSORACLE_TYPE_TRAITS(BF16, kBF16, float)
TENSORACLE_TYPE_TRAITS(F8E4M3, kF8E4M3, float)
TENSORACLE_TYPE_TRAITS(F8E5M2, kF8E5M2, float)
TENSORACLE_TYPE_TRAITS(std::int64_t, kI64, std::int64_t)
TENSORACLE_TYPE_TRAITS(std::int32_t, kI32, std::int64_t)
TENSORACLE_TYPE_TRAITS(std::int16_t, kI16, std::int64_t)
TENSORACLE_TYPE_TRAITS(std::int8_t, kI8, std::int64_t)
TENSORACLE_TYPE_TRAITS(std::uint8_t, kU8, std::int64_t)
TENSORACLE_TYPE_TRAITS(Bool8, kBool, std::int64_t)
#undef TENSORACLE_TYPE_TRAITS

template <typename T>
using Compute = typename TypeTraits<T>::compute;

// Integer limits as constants device code can use.
template <typename T>
struct IntLimits {
  static constexpr T kMax = std::numeric_limits<T>::max();
  static constexpr T kLowest = std::numeric_limits<T>::lowest();
};

template <typename T>
inline constexpr bool kIsFloatStorage = std::is_floating_point_v<Compute<T>>;

// ---- float8 (ported from core/float_convert.cpp: the same rounding, overflow and NaN encodings) ----

template <int kExpBits, int kManBits, bool kHasInf, std::uint32_t kNanBits, bool kNanKeepsSign>
struct SmallFloat {
  static constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  static constexpr int kWidth = kExpBits + kManBits;
  static constexpr std::uint32_t kMagnitudeMask = (1U << kWidth) - 1U;
  static constexpr std::uint32_t kManMask = (1U << kManBits) - 1U;
  static constexpr std::uint32_t kInfBits = kMagnitudeMask & ~kManMask;
  static constexpr std::uint32_t kMaxFiniteBits = kHasInf ? kInfBits - 1U : kMagnitudeMask - 1U;
  static constexpr std::uint32_t kOverflowBits = kHasInf ? kInfBits : kMagnitudeMask;

  static __device__ __forceinline__ std::uint32_t shift_right_round_even(std::uint32_t value, int shift) {
    if (shift > 31) return 0;
    const std::uint32_t half_minus_one = (1U << (shift - 1)) - 1U;
    const std::uint32_t kept_is_odd = (value >> shift) & 1U;
    return (value + half_minus_one + kept_is_odd) >> shift;
  }

  static __device__ std::uint32_t narrow(float value) {
    const std::uint32_t bits = __float_as_uint(value);
    const std::uint32_t sign = (bits >> 31) << kWidth;
    const std::uint32_t magnitude = bits & 0x7FFFFFFFU;
    if (magnitude > 0x7F800000U) return (kNanKeepsSign ? sign : 0U) | kNanBits;
    if (magnitude == 0x7F800000U) return sign | kOverflowBits;
    const int f32_exp = static_cast<int>(magnitude >> 23);
    const std::uint32_t significand = (magnitude & 0x007FFFFFU) | (f32_exp != 0 ? 0x00800000U : 0U);
    const int exp = (f32_exp > 1 ? f32_exp : 1) - 127 + kBias;
    std::uint32_t result = 0;
    if (exp >= 1) {
      const std::uint32_t fixed = (static_cast<std::uint32_t>(exp - 1) << 23) + significand;
      result = shift_right_round_even(fixed, 23 - kManBits);
    } else {
      result = shift_right_round_even(significand, 23 - kManBits + (1 - exp));
    }
    if (result > kMaxFiniteBits) result = kOverflowBits;
    return sign | result;
  }

  static __device__ float widen(std::uint32_t bits) {
    constexpr int kManShift = 23 - kManBits;
    const std::uint32_t sign = ((bits >> kWidth) & 1U) << 31;
    const std::uint32_t magnitude = bits & kMagnitudeMask;
    const std::uint32_t mantissa = magnitude & kManMask;
    const bool is_nan = kHasInf ? magnitude > kInfBits : magnitude == kMagnitudeMask;
    if (is_nan) return __uint_as_float(sign | 0x7F800000U | 0x00400000U | (mantissa << kManShift));
    if (kHasInf && magnitude == kInfBits) return __uint_as_float(sign | 0x7F800000U);
    if (magnitude == 0) return __uint_as_float(sign);
    const int exp_field = static_cast<int>(magnitude >> kManBits);
    std::uint32_t significand = (mantissa | (exp_field != 0 ? 1U << kManBits : 0U)) << kManShift;
    int exp = (exp_field > 1 ? exp_field : 1) - kBias + 127;
    const int shift = __clz(static_cast<int>(significand)) - 8;
    significand <<= shift;
    exp -= shift;
    return __uint_as_float(sign | ((static_cast<std::uint32_t>(exp - 1) << 23) + significand));
  }
};
using F8E4M3Format = SmallFloat<4, 3, false, 0x7FU, true>;
using F8E5M2Format = SmallFloat<5, 2, true, 0x7FU, true>;

// ---- conversions between storage and compute types ----

__device__ __forceinline__ float to_compute(float v) { return v; }
__device__ __forceinline__ double to_compute(double v) { return v; }
// A NaN keeps its sign and payload and gets the quiet bit, as the CPU reference's widening does.
__device__ __forceinline__ float to_compute(F16 v) {
  if ((v.bits & 0x7FFFU) > 0x7C00U) {
    return __uint_as_float((static_cast<std::uint32_t>(v.bits & 0x8000U) << 16) | 0x7FC00000U |
                           (static_cast<std::uint32_t>(v.bits & 0x03FFU) << 13));
  }
  return __half2float(__ushort_as_half(v.bits));
}
__device__ __forceinline__ float to_compute(BF16 v) {
  return __uint_as_float(static_cast<std::uint32_t>(v.bits) << 16);
}
__device__ __forceinline__ float to_compute(F8E4M3 v) { return F8E4M3Format::widen(v.bits); }
__device__ __forceinline__ float to_compute(F8E5M2 v) { return F8E5M2Format::widen(v.bits); }
__device__ __forceinline__ std::int64_t to_compute(std::int64_t v) { return v; }
__device__ __forceinline__ std::int64_t to_compute(std::int32_t v) { return v; }
__device__ __forceinline__ std::int64_t to_compute(std::int16_t v) { return v; }
__device__ __forceinline__ std::int64_t to_compute(std::int8_t v) { return v; }
__device__ __forceinline__ std::int64_t to_compute(std::uint8_t v) { return v; }
__device__ __forceinline__ std::int64_t to_compute(Bool8 v) { return v.bits != 0 ? 1 : 0; }
// For values that only arithmetic reads (a norm's statistics and scaling): the plain widening. A NaN stays a NaN, and
// the arithmetic after it returns the canonical NaN whatever its payload, so the test above would be wasted work.
template <typename T>
__device__ __forceinline__ Compute<T> to_compute_arith(T v) {
  if constexpr (std::is_same_v<T, F16>) {
    return __half2float(__ushort_as_half(v.bits));
  } else {
    return to_compute(v);
  }
}

// f16: round to nearest even (overflow to infinity); a NaN becomes 0x7E00 with its sign, as c10::Half.
__device__ __forceinline__ F16 f16_from_float(float v) {
  if (v != v) return F16{static_cast<std::uint16_t>((__float_as_uint(v) >> 31) != 0 ? 0xFE00U : 0x7E00U)};
  return F16{__half_as_ushort(__float2half_rn(v))};
}
// bf16: round to nearest even (overflow to infinity); a NaN becomes 0x7FC0, as c10::BFloat16.
__device__ __forceinline__ BF16 bf16_from_float(float v) {
  if (v != v) return BF16{0x7FC0U};
  return BF16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}

// Two floats rounded to f16 (bf16) as f16_from_float (bf16_from_float) does each, with one packed conversion: the
// NaN rule is applied only when the pair has a NaN. `lo` is the lower address. Memory-bound kernels' stores: a third
// fewer instructions than two single conversions.
__device__ __forceinline__ std::uint32_t f16x2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  std::uint32_t bits = 0;
  memcpy(&bits, &h, sizeof bits);
  if (lo != lo || hi != hi)
    bits = static_cast<std::uint32_t>(f16_from_float(lo).bits) |
           (static_cast<std::uint32_t>(f16_from_float(hi).bits) << 16);
  return bits;
}
__device__ __forceinline__ std::uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  std::uint32_t bits = 0;
  memcpy(&bits, &h, sizeof bits);
  if (lo != lo || hi != hi)
    bits = static_cast<std::uint32_t>(bf16_from_float(lo).bits) |
           (static_cast<std::uint32_t>(bf16_from_float(hi).bits) << 16);
  return bits;
}

// Stores a compute value: floats round once to the storage type; integers wrap to their width; bool is value != 0.
template <typename T>
__device__ __forceinline__ T from_compute(Compute<T> v);
template <>
__device__ __forceinline__ float from_compute<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ double from_compute<double>(double v) {
  return v;
}
template <>
__device__ __forceinline__ F16 from_compute<F16>(float v) {
  return f16_from_float(v);
}
template <>
__device__ __forceinline__ BF16 from_compute<BF16>(float v) {
  return bf16_from_float(v);
}
template <>
__device__ __forceinline__ F8E4M3 from_compute<F8E4M3>(float v) {
  return F8E4M3{static_cast<std::uint8_t>(F8E4M3Format::narrow(v))};
}
template <>
__device__ __forceinline__ F8E5M2 from_compute<F8E5M2>(float v) {
  return F8E5M2{static_cast<std::uint8_t>(F8E5M2Format::narrow(v))};
}
template <>
__device__ __forceinline__ std::int64_t from_compute<std::int64_t>(std::int64_t v) {
  return v;
}
template <>
__device__ __forceinline__ std::int32_t from_compute<std::int32_t>(std::int64_t v) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(v)));
}
template <>
__device__ __forceinline__ std::int16_t from_compute<std::int16_t>(std::int64_t v) {
  return static_cast<std::int16_t>(static_cast<std::uint16_t>(static_cast<std::uint64_t>(v)));
}
template <>
__device__ __forceinline__ std::int8_t from_compute<std::int8_t>(std::int64_t v) {
  return static_cast<std::int8_t>(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v)));
}
template <>
__device__ __forceinline__ std::uint8_t from_compute<std::uint8_t>(std::int64_t v) {
  return static_cast<std::uint8_t>(static_cast<std::uint64_t>(v));
}
template <>
__device__ __forceinline__ Bool8 from_compute<Bool8>(std::int64_t v) {
  return Bool8{static_cast<std::uint8_t>(v != 0 ? 1 : 0)};
}

// Stores a double as the CPU reference's from_f64 rounds it: to f32 once, f16 and bf16 from that f32.
__device__ __forceinline__ void store_double(float* p, std::int64_t i, double v) { p[i] = __double2float_rn(v); }
__device__ __forceinline__ void store_double(double* p, std::int64_t i, double v) { p[i] = v; }
__device__ __forceinline__ void store_double(F16* p, std::int64_t i, double v) {
  p[i] = f16_from_float(__double2float_rn(v));
}
__device__ __forceinline__ void store_double(BF16* p, std::int64_t i, double v) {
  p[i] = bf16_from_float(__double2float_rn(v));
}

template <typename T, typename Index>
__device__ __forceinline__ Compute<T> load(const T* p, Index i) {
  return to_compute(p[i]);
}
template <typename T, typename Index>
__device__ __forceinline__ void store(T* p, Index i, Compute<T> v) {
  p[i] = from_compute<T>(v);
}

// ---- math on the compute types (float overloads call the f32 functions, never the fast intrinsics) ----

namespace math {
__device__ __forceinline__ float exp(float x) { return ::expf(x); }
__device__ __forceinline__ double exp(double x) { return ::exp(x); }
__device__ __forceinline__ float log(float x) { return ::logf(x); }
__device__ __forceinline__ double log(double x) { return ::log(x); }
__device__ __forceinline__ float log1p(float x) { return ::log1pf(x); }
__device__ __forceinline__ double log1p(double x) { return ::log1p(x); }
__device__ __forceinline__ float sqrt(float x) { return ::sqrtf(x); }
__device__ __forceinline__ double sqrt(double x) { return ::sqrt(x); }
__device__ __forceinline__ float sin(float x) { return ::sinf(x); }
__device__ __forceinline__ double sin(double x) { return ::sin(x); }
__device__ __forceinline__ float cos(float x) { return ::cosf(x); }
__device__ __forceinline__ double cos(double x) { return ::cos(x); }
__device__ __forceinline__ float tanh(float x) { return ::tanhf(x); }
__device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
__device__ __forceinline__ float erf(float x) { return ::erff(x); }
__device__ __forceinline__ double erf(double x) { return ::erf(x); }
__device__ __forceinline__ float floor(float x) { return ::floorf(x); }
__device__ __forceinline__ double floor(double x) { return ::floor(x); }
__device__ __forceinline__ float ceil(float x) { return ::ceilf(x); }
__device__ __forceinline__ double ceil(double x) { return ::ceil(x); }
__device__ __forceinline__ float fabs(float x) { return ::fabsf(x); }
__device__ __forceinline__ double fabs(double x) { return ::fabs(x); }
__device__ __forceinline__ float pow(float x, float y) { return ::powf(x, y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }
// GELU, erf form: x·Φ(x) = 0.5·x·(1 + erf(x/√2)).
template <typename C>
__device__ __forceinline__ C gelu_erf(C x) {
  return C(0.5) * x * (C(1) + erf(x * static_cast<C>(0.70710678118654752440)));
}
__device__ __forceinline__ bool isnan(float x) { return x != x; }
__device__ __forceinline__ bool isnan(double x) { return x != x; }
template <typename C>
__device__ __forceinline__ C quiet_nan() {
  if constexpr (std::is_same_v<C, double>) {
    return __longlong_as_double(0x7FF8000000000000LL);
  } else {
    return __int_as_float(0x7FC00000);
  }
}
template <typename C>
__device__ __forceinline__ C infinity() {
  if constexpr (std::is_same_v<C, double>) {
    return __longlong_as_double(0x7FF0000000000000LL);
  } else {
    return __int_as_float(0x7F800000);
  }
}
}  // namespace math

// A double attribute in the compute type: f64 keeps it, f32 rounds it (beyond the float range to ±infinity).
template <typename C>
__device__ __forceinline__ C param_as(float f, double d) {
  if constexpr (std::is_same_v<C, double>) {
    return d;
  } else {
    return f;
  }
}

// double -> float on the host, rounding to nearest even with values beyond the float range going to ±infinity (as
// the CPU reference's to_float).
inline float host_double_to_float(double v) {
  constexpr double kOverflow = 0x1.ffffffp127;
  if (v >= kOverflow) return std::numeric_limits<float>::infinity();
  if (v <= -kOverflow) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(v);
}

// The bytes a double takes when stored in `dtype` as the CPU reference stores it (floats rounded once through f32,
// integers truncated toward zero and saturated with NaN -> 0, bool is value != 0). Returned in the low bytes.
inline std::uint64_t host_scalar_bits(DataType dtype, double v) {
  std::uint64_t out = 0;
  auto put = [&out](auto x) { std::memcpy(&out, &x, sizeof(x)); };
  auto saturate = [v](auto lo, auto hi) -> std::int64_t {
    if (v != v) return 0;
    if (v >= static_cast<double>(hi)) return static_cast<std::int64_t>(hi);
    if (v <= static_cast<double>(lo)) return static_cast<std::int64_t>(lo);
    return static_cast<std::int64_t>(v);
  };
  switch (dtype) {
    case DataType::kF64: put(v); break;
    case DataType::kF32: put(host_double_to_float(v)); break;
    case DataType::kF16: put(f32_to_f16_bits(host_double_to_float(v))); break;
    case DataType::kBF16: put(f32_to_bf16_bits(host_double_to_float(v))); break;
    case DataType::kF8E4M3: put(f32_to_f8e4m3_bits(host_double_to_float(v))); break;
    case DataType::kF8E5M2: put(f32_to_f8e5m2_bits(host_double_to_float(v))); break;
    case DataType::kI64: {
      std::int64_t x = 0;
      if (v == v) {
        x = v >= 9.2233720368547758e18    ? std::numeric_limits<std::int64_t>::max()
            : v <= -9.2233720368547758e18 ? std::numeric_limits<std::int64_t>::min()
                                          : static_cast<std::int64_t>(v);
      }
      put(x);
      break;
    }
    case DataType::kI32: put(static_cast<std::int32_t>(saturate(INT32_MIN, INT32_MAX))); break;
    case DataType::kI16: put(static_cast<std::int16_t>(saturate(INT16_MIN, INT16_MAX))); break;
    case DataType::kI8: put(static_cast<std::int8_t>(saturate(INT8_MIN, INT8_MAX))); break;
    case DataType::kU8: put(static_cast<std::uint8_t>(saturate(0, UINT8_MAX))); break;
    case DataType::kBool: put(static_cast<std::uint8_t>(v != 0.0 ? 1 : 0)); break;
  }
  return out;
}

// ---- dtype dispatch (once, at the launch boundary) ----

template <typename T>
struct Tag {
  using type = T;
};
template <typename... Ts>
struct TypeList {};

using FloatTypes = TypeList<float, F16, BF16, double>;
using IntegerTypes = TypeList<std::int64_t, std::int32_t, std::int16_t, std::int8_t, std::uint8_t>;
using NumericTypes =
    TypeList<float, F16, BF16, double, std::int64_t, std::int32_t, std::int16_t, std::int8_t, std::uint8_t>;
using EqualityTypes =
    TypeList<float, F16, BF16, double, std::int64_t, std::int32_t, std::int16_t, std::int8_t, std::uint8_t, Bool8>;
using AllTypes = TypeList<float, F16, BF16, double, F8E4M3, F8E5M2, std::int64_t, std::int32_t, std::int16_t,
                          std::int8_t, std::uint8_t, Bool8>;

// Calls f(Tag<T>{}) for the storage type T of `dtype` when it is in the list; false when it is not.
template <typename... Ts, typename F>
bool dispatch(TypeList<Ts...>, DataType dtype, F&& f) {
  return ((TypeTraits<Ts>::dtype == dtype ? (f(Tag<Ts>{}), true) : false) || ...);
}

template <typename... Ts>
bool in_list(TypeList<Ts...>, DataType dtype) {
  return ((TypeTraits<Ts>::dtype == dtype) || ...);
}

// Unsigned words of 1, 2, 4, 8 and 16 bytes, for copies that move elements without looking at them.
template <int kBytes>
struct Word;
template <>
struct Word<1> {
  using type = std::uint8_t;
};
template <>
struct Word<2> {
  using type = std::uint16_t;
};
template <>
struct Word<4> {
  using type = std::uint32_t;
};
template <>
struct Word<8> {
  using type = std::uint64_t;
};
template <>
struct Word<16> {
  using type = uint4;
};

// A layer's result quantized in its own epilogue (quantized_linear's and layer_norm's `quantize_to`): v times the f32
// reciprocal of the scale (__frcp_rn(scale), computed once by the caller), rounded onto the grid as the hardware
// conversions do: i8 half to even, saturating, NaN to 0; F8E4M3 to nearest even, saturating at ±448, NaN stays NaN. The
// CUTLASS products do the same (MultiplyByReciprocal, cutlass_gemm_sm90.cuh).
template <typename Q>
__device__ __forceinline__ Q quantize_result(float v, float reciprocal_scale);
template <>
__device__ __forceinline__ std::int8_t quantize_result<std::int8_t>(float v, float reciprocal_scale) {
  const int r = __float2int_rn(v * reciprocal_scale);  // NaN -> 0; beyond int32 saturates
  return static_cast<std::int8_t>(r < -128 ? -128 : (r > 127 ? 127 : r));
}
template <>
__device__ __forceinline__ F8E4M3 quantize_result<F8E4M3>(float v, float reciprocal_scale) {
  return F8E4M3{static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(v * reciprocal_scale, __NV_SATFINITE, __NV_E4M3))};
}

// Calls f(T{}) with CUDA's own storage type of a float dtype (float, __half, __nv_bfloat16, double); false for other
// dtypes. For kernels that convert through cuda_fp16.h / cuda_bf16.h rather than this file's F16 / BF16.
template <typename F>
bool dispatch_float(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kF32: f(float{}); return true;
    case DataType::kF16: f(__half{}); return true;
    case DataType::kBF16: f(__nv_bfloat16{}); return true;
    case DataType::kF64: f(double{}); return true;
    default: return false;
  }
}

// Calls f(Tag<Word>) for a word of `bytes` (1, 2, 4, 8 or 16); false for other sizes.
template <typename F>
bool dispatch_word(std::size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(Tag<Word<1>::type>{}); return true;
    case 2: f(Tag<Word<2>::type>{}); return true;
    case 4: f(Tag<Word<4>::type>{}); return true;
    case 8: f(Tag<Word<8>::type>{}); return true;
    case 16: f(Tag<Word<16>::type>{}); return true;
    default: return false;
  }
}

// Calls f(Tag<Word>) for the word of one element of `bytes` (1, 2, 4 or 8: every dtype); false for other sizes.
template <typename F>
bool dispatch_element_word(std::size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(Tag<Word<1>::type>{}); return true;
    case 2: f(Tag<Word<2>::type>{}); return true;
    case 4: f(Tag<Word<4>::type>{}); return true;
    case 8: f(Tag<Word<8>::type>{}); return true;
    default: return false;
  }
}

// The largest power of two (up to `cap`) dividing the address.
inline std::size_t pointer_alignment(const void* p, std::size_t cap = 256) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::size_t a = 1;
  while (a < cap && address % (a * 2) == 0) a *= 2;
  return a;
}

// ---- launch sizes and checks ----

constexpr int kThreads = 256;
constexpr int kMaxRank = 8;
// Grids stay below 2^24 threads, so a grid-stride index below kMaxIndex32 + 2^24 still fits in int32.
constexpr std::int64_t kMaxGridBlocks = 65536;
constexpr std::int64_t kMaxIndex32 = std::numeric_limits<std::int32_t>::max() - (std::int64_t{1} << 25);

inline unsigned grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, kMaxGridBlocks));
}

inline bool fits_index32(std::int64_t extent) { return extent <= kMaxIndex32; }

// An optional input given to the step (a tensor, or a caller buffer bound at enqueue).
inline bool present(const StepLaunch& launch, std::size_t index) {
  return index < launch.inputs.size() && (launch.inputs[index].data != nullptr || launch.inputs[index].caller_buffer);
}

inline std::int64_t volume(const Dims& shape, int begin, int end) {
  std::int64_t v = 1;
  for (int i = begin; i < end; ++i) v *= shape[i];
  return v;
}
inline std::int64_t volume(const Dims& shape) { return volume(shape, 0, shape.rank()); }

// ---- graph queries for the supports functions ----

inline bool has_tensor(const graph::Layer& layer, std::size_t input) {
  return input < layer.inputs.size() && layer.inputs[input] >= 0;
}
inline DataType input_dtype(const graph::Graph& graph, const graph::Layer& layer, std::size_t i) {
  return graph.tensor(layer.inputs.at(i)).dtype;
}
inline DataType output_dtype(const graph::Graph& graph, const graph::Layer& layer, std::size_t i) {
  return graph.tensor(layer.outputs.at(i)).dtype;
}
inline int input_rank(const graph::Graph& graph, const graph::Layer& layer, std::size_t i) {
  return static_cast<int>(graph.tensor(layer.inputs.at(i)).shape.size());
}
inline int output_rank(const graph::Graph& graph, const graph::Layer& layer, std::size_t i) {
  return static_cast<int>(graph.tensor(layer.outputs.at(i)).shape.size());
}
// quantized_linear's weight-only form: a float x (f32, f16 or bf16) of the result's type times an i8 or f8e4m3
// weight, no quantized result (what its kernels in linear_algebra.cu and quantized_linear.cu take).
inline bool is_weight_only_product(const graph::Graph& graph, const graph::Layer& layer) {
  if (!has_tensor(layer, 0) || !has_tensor(layer, 1) || !has_tensor(layer, 2) || has_tensor(layer, 5)) return false;
  const DataType x = input_dtype(graph, layer, 0), w = input_dtype(graph, layer, 1);
  return (x == DataType::kF32 || x == DataType::kF16 || x == DataType::kBF16) && output_dtype(graph, layer, 0) == x &&
         (w == DataType::kI8 || w == DataType::kF8E4M3);
}

// ---- broadcast / strided index math ----

// Element strides of `in` for each axis of `out` (NumPy broadcasting, right-aligned): 0 where `in` is broadcast
// (size 1 or absent).
inline std::vector<std::int64_t> broadcast_strides(const Dims& in, const Dims& out) {
  const int rank = out.rank();
  const int offset = rank - in.rank();
  std::vector<std::int64_t> strides(static_cast<std::size_t>(rank), 0);
  std::int64_t s = 1;
  for (int a = in.rank() - 1; a >= 0; --a) {
    if (in[a] != 1) strides[static_cast<std::size_t>(a + offset)] = s;
    s *= in[a];
  }
  return strides;
}

inline std::vector<std::int64_t> row_major_strides(const Dims& shape) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(shape.rank()), 1);
  for (int i = shape.rank() - 2; i >= 0; --i)
    strides[static_cast<std::size_t>(i)] = strides[static_cast<std::size_t>(i) + 1] * shape[i + 1];
  return strides;
}

// For each element of an output (row-major, dims `dims`), the element offsets of N operands with per-axis strides.
// Axes of size 1 are dropped and neighbouring axes that every operand walks contiguously are merged, so the common
// cases (same shapes, a scalar or row operand) end up with rank 0 or 1.
template <int N>
struct StridePlan {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t strides[N][kMaxRank] = {};
};

// Returns false when more than kMaxRank axes remain after merging.
template <int N>
bool make_stride_plan(const std::vector<std::int64_t>& dims, const std::array<std::vector<std::int64_t>, N>& strides,
                      StridePlan<N>& plan) {
  std::vector<std::int64_t> d;
  std::array<std::vector<std::int64_t>, N> s;
  for (std::size_t a = 0; a < dims.size(); ++a) {
    if (dims[a] == 1) continue;
    if (!d.empty()) {
      bool mergeable = true;
      for (int k = 0; k < N; ++k) mergeable = mergeable && s[k].back() == strides[k][a] * dims[a];
      if (mergeable) {
        d.back() *= dims[a];
        for (int k = 0; k < N; ++k) s[k].back() = strides[k][a];
        continue;
      }
    }
    d.push_back(dims[a]);
    for (int k = 0; k < N; ++k) s[k].push_back(strides[k][a]);
  }
  if (d.size() > static_cast<std::size_t>(kMaxRank)) return false;
  plan = StridePlan<N>{};
  plan.rank = static_cast<int>(d.size());
  for (std::size_t a = 0; a < d.size(); ++a) {
    plan.dims[a] = d[a];
    for (int k = 0; k < N; ++k) plan.strides[k][a] = s[k][a];
  }
  return true;
}

// The plan in the index type the kernel uses (int32 when every offset fits).
template <typename Index, int N>
struct Indexer {
  int rank;
  Index dims[kMaxRank];
  Index strides[N][kMaxRank];

  // Offsets of output element i in each operand.
  __device__ __forceinline__ void offsets(Index i, Index (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int a = kMaxRank - 1; a >= 1; --a) {
      if (a < rank) {
        const Index q = i / dims[a];
        const Index r = i - q * dims[a];
        i = q;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += r * strides[k][a];
      }
    }
    if (rank > 0) {
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][0];
    }
  }
};

template <typename Index, int N>
Indexer<Index, N> to_indexer(const StridePlan<N>& plan) {
  Indexer<Index, N> ix{};
  ix.rank = plan.rank;
  for (int a = 0; a < kMaxRank; ++a) {
    ix.dims[a] = static_cast<Index>(a < plan.rank ? plan.dims[a] : 1);
    for (int k = 0; k < N; ++k) ix.strides[k][a] = static_cast<Index>(a < plan.rank ? plan.strides[k][a] : 0);
  }
  return ix;
}

// Calls f(indexer) with int32 offsets when every index and offset stays below `extent` <= kMaxIndex32, else int64.
template <int N, typename F>
void with_indexer(const StridePlan<N>& plan, std::int64_t extent, F&& f) {
  if (fits_index32(extent)) {
    f(to_indexer<std::int32_t>(plan));
  } else {
    f(to_indexer<std::int64_t>(plan));
  }
}

// Grid-stride loop bounds in the index type.
template <typename Index>
__device__ __forceinline__ Index global_thread() {
  return static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
}
template <typename Index>
__device__ __forceinline__ Index grid_threads() {
  return static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
}

// ---- warp and block reductions ----

struct SumOp {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    return a + b;
  }
};
// Maximum in which a NaN wins (as the CPU reference's softmax maximum).
struct NanMaxOp {
  template <typename C>
  __device__ __forceinline__ C operator()(C a, C b) const {
    if (math::isnan(a)) return a;
    return (b > a || math::isnan(b)) ? b : a;
  }
};

template <typename C, typename Op>
__device__ __forceinline__ C warp_reduce(C v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFU, v, offset));
  return v;
}

// Reduces over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result. `scratch`
// holds 32 values in shared memory; the function synchronizes before returning so it can be reused.
template <typename C, typename Op>
__device__ __forceinline__ C block_reduce(C v, Op op, C identity, C* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = static_cast<int>(blockDim.x >> 5);
  v = warp_reduce(v, op);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    C w = lane < warps ? scratch[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  const C result = scratch[0];
  __syncthreads();
  return result;
}

}  // namespace tensoracle::cuda::kernels
