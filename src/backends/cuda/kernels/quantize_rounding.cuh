// The rounding of a float value divided by an f32 scale onto the i8 or e4m3fn grid, as the CPU reference quantizes
// (in f64; the f32 path gives the same bytes), shared by the quantize kernels (quantization.cu) and the layers that
// quantize their own result (pooling.cu's max_pool2d with `quantize_to`).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tensoracle::cuda::quantize_rounding {

// ---- rounding onto the quantized grids (host and device, so that they can be checked on the host) ----

// i8: half to even (rint in round-to-nearest), saturated to [-128, 127]; NaN has no integer to go to and becomes 0.
__host__ __device__ inline std::int8_t quantize_i8(double v) {
  if (v != v) return 0;
  const double r = rint(v);
  return static_cast<std::int8_t>(r < -128.0 ? -128.0 : (r > 127.0 ? 127.0 : r));
}

// e4m3fn: 3 mantissa bits; the smallest normal binade is 2^-6 and subnormals continue its step of 2^-9. Magnitudes
// of 448 and beyond (infinities too) saturate to ±448; zeros keep their sign; a NaN becomes 0x7F with the given sign.
// The magnitude is scaled by a power of two (exact) so that its binade's grid steps are integers, rounded half to even
// there (rint), and the integer gives the encoding: exponent and mantissa from bit operations only, no frexp/ldexp.
__host__ __device__ inline std::uint8_t quantize_e4m3(double v, bool nan_negative) {
  if (v != v) return nan_negative ? 0xFFU : 0x7FU;
  std::uint64_t bits = 0;
  memcpy(&bits, &v, sizeof bits);
  const auto sign = static_cast<std::uint8_t>((bits >> 63) << 7);
  const double magnitude = fabs(v);
  if (magnitude >= 448.0) return sign | 0x7EU;  // 448: exponent field 15, mantissa 6
  // The binade 2^e of the magnitude (a double's zero and subnormals count as below e4m3's smallest normal 2^-6, whose
  // step of 2^-9 the subnormals share); 2^(3 - e) makes that binade's steps 1.
  int e = static_cast<int>((bits >> 52) & 0x7FFU) - 1023;
  e = e < -6 ? -6 : e;
  const std::uint64_t scale_bits = static_cast<std::uint64_t>(1023 + 3 - e) << 52;
  double scale = 0.0;
  memcpy(&scale, &scale_bits, sizeof scale);
  const auto steps = static_cast<int>(rint(magnitude * scale));   // 0..16: 16 carries into the next binade
  if (steps < 8) return sign | static_cast<std::uint8_t>(steps);  // a subnormal (e is -6 then) or zero
  const int exponent = steps == 16 ? e + 8 : e + 7;
  const int mantissa = steps == 16 ? 0 : steps - 8;
  return sign | static_cast<std::uint8_t>((exponent << 3) | mantissa);
}

// ---- NaN signs and widening ----

__device__ __forceinline__ bool sign_of(float v) { return (__float_as_uint(v) >> 31) != 0; }
__device__ __forceinline__ bool sign_of(double v) { return __double_as_longlong(v) < 0; }
__device__ __forceinline__ bool sign_of(__half v) { return (__half_as_ushort(v) >> 15) != 0; }
__device__ __forceinline__ bool sign_of(__nv_bfloat16 v) { return (__bfloat16_as_ushort(v) >> 15) != 0; }

__device__ __forceinline__ bool is_nan(float v) { return v != v; }
__device__ __forceinline__ bool is_nan(double v) { return v != v; }
__device__ __forceinline__ bool is_nan(__half v) { return (__half_as_ushort(v) & 0x7FFFU) > 0x7C00U; }
__device__ __forceinline__ bool is_nan(__nv_bfloat16 v) { return (__bfloat16_as_ushort(v) & 0x7FFFU) > 0x7F80U; }

__device__ __forceinline__ double to_double(float v) { return static_cast<double>(v); }
__device__ __forceinline__ double to_double(double v) { return v; }
__device__ __forceinline__ double to_double(__half v) { return static_cast<double>(__half2float(v)); }
__device__ __forceinline__ double to_double(__nv_bfloat16 v) { return static_cast<double>(__bfloat162float(v)); }

// ---- one element ----

// One element: x / scale in f64 onto the grid, as its byte.
template <typename TIn, bool kE4M3>
__device__ __forceinline__ std::uint8_t quantize_one(TIn xv, float s) {
  const double q = to_double(xv) / static_cast<double>(s);
  if constexpr (kE4M3) {
    // A NaN quotient is x's NaN, else the scale's, else x86's default NaN (negative).
    const bool nan_negative = is_nan(xv) ? sign_of(xv) : (s != s ? sign_of(s) : true);
    return quantize_e4m3(q, nan_negative);
  } else {
    return static_cast<std::uint8_t>(quantize_i8(q));
  }
}

// e4m3's rounding midpoints in f32: half a step of 2^-9 below the smallest normal binade 2^-6, else the f32s whose
// 20 mantissa bits below e4m3's 3 are 1000...0 (beyond 448 this flags values that saturate anyway; harmless).
__device__ __forceinline__ bool on_e4m3_midpoint(float q) {
  const float a = fabsf(q);
  if (a < 0x1p-6F) {
    const float steps = a * 512.0F;  // exact: a power-of-two scaling
    return steps - truncf(steps) == 0.5F;
  }
  return (__float_as_uint(a) & 0xFFFFFU) == 0x80000U;
}

// The same result as quantize_one for f16/bf16/f32 x, mostly in f32: x / scale correctly rounded to f32 is rounded
// onto the grid (i8: to nearest even integer, saturating; e4m3: the hardware conversion, to nearest even, saturating
// at ±448). Rounding is monotonic and every rounding midpoint of both grids is an f32, so an f32 quotient off a
// midpoint lies strictly between the same two midpoints as the exact quotient and rounds to the same grid point. On a
// midpoint (the exact quotient may be a tie or just beside one) and for NaN, the f64 quotient decides, as the
// reference: it is never a false tie, since x (at most 24 bits) - m * scale (at most 33 bits for a midpoint m) is a
// multiple of a unit far above f64's rounding error when it is not zero.
template <typename TIn, bool kE4M3>
__device__ __noinline__ std::uint8_t quantize_one_f64(TIn xv, float s) {  // rare: kept out of the hot loop's registers
  return quantize_one<TIn, kE4M3>(xv, s);
}

template <typename TIn, bool kE4M3>
__device__ __forceinline__ std::uint8_t quantize_one_f32(TIn xv, float s) {
  const float q = __fdiv_rn(static_cast<float>(xv), s);
  if constexpr (kE4M3) {
    if (q != q || on_e4m3_midpoint(q)) return quantize_one_f64<TIn, true>(xv, s);
    return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
  } else {
    if (fabsf(q - rintf(q)) == 0.5F) return quantize_one_f64<TIn, false>(xv, s);
    const int r = __float2int_rn(q);  // NaN -> 0; beyond int32 saturates
    return static_cast<std::uint8_t>(static_cast<std::int8_t>(r < -128 ? -128 : (r > 127 ? 127 : r)));
  }
}

// The reciprocal quantize_i8_by_reciprocal multiplies by: 1/scale rounded to nearest, or NaN (which sends every value
// to the division) when that is not a normal f32 (a zero, infinite or NaN scale, or one above 2^126 whose reciprocal
// would be subnormal and lose the relative precision the argument below needs). Once per thread.
__device__ __forceinline__ float i8_reciprocal(float scale) {
  const float r = __frcp_rn(scale);
  const float a = fabsf(r);
  return a >= 0x1p-126F && a < INFINITY ? r : __int_as_float(0x7FC00000);
}

// The same i8 as quantize_one_f32 with a multiplication instead of the division, `reciprocal` from i8_reciprocal:
// q = x · fl(1/scale) is within 2^-22 of x / scale relatively (two roundings of 2^-24), so below 256 in magnitude
// within 2^-14 absolutely, and it rounds to the same integer unless it lies within 2^-12 of a midpoint k + 0.5 (then
// the division decides, as quantize_one_f32 does, for NaN and infinities too, and for a NaN reciprocal). From 256 up
// both saturate.
template <typename TIn>
__device__ __forceinline__ std::uint8_t quantize_i8_by_reciprocal(TIn xv, float s, float reciprocal) {
  const float q = static_cast<float>(xv) * reciprocal;
  const float a = fabsf(q);
  if (a < 256.0F) {
    if (!(fabsf(fabsf(q - rintf(q)) - 0.5F) > 0x1p-12F)) return quantize_one_f32<TIn, false>(xv, s);
  } else if (!(a < INFINITY)) {
    return quantize_one_f32<TIn, false>(xv, s);  // NaN, infinities (and a reciprocal that overflowed)
  }
  const int r = __float2int_rn(q);  // beyond int32 saturates
  return static_cast<std::uint8_t>(static_cast<std::int8_t>(r < -128 ? -128 : (r > 127 ? 127 : r)));
}

}  // namespace tensoracle::cuda::quantize_rounding
