// The erf-GELU of the CUTLASS products' epilogues, each from one exp2 and one reciprocal: gelu_erf_fast for a result
// quantized next, gelu_erf_erfc for a float one (host and device; the host forms are what
// tests/unit/gelu_erf_fast_test.cpp measures against std::erf).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TENSORACLE_GELU_INLINE __host__ __device__ __forceinline__
#else
#define TENSORACLE_GELU_INLINE inline
#endif

namespace tensoracle::cuda::kernels {

// x·Φ(x) with Φ(x) = e / (1 + e), e = 2^(x·Q(x²)): the logistic function of Φ's logit, which Q, a degree-4 polynomial
// fitted to (log2 (Φ / (1 − Φ))) / x over 0 < x ≤ 5.5, gives. x is clamped to ±5.5 inside Φ (beyond, Φ is within
// 2e-8 of 0 or 1) and below -5.5 in the product too (where x·Φ(x) is within 1.1e-7 of 0). One exp2 and one reciprocal
// (MUFU.EX2 and MUFU.RCP on the GPU) and 11 more instructions a value, against about 25 for erff. |error| against the
// exact erf-GELU ≤ 5e-6 + 2.4e-7·|x| for every x (3.7e-6 measured in f32 over ±8), far below a quantization step
// of any scale above 1e-3, which is why only products whose result is quantized use it; the others keep erff. NaN gives
// NaN, +inf +inf, -inf about -1e-7.
TENSORACLE_GELU_INLINE float gelu_erf_fast(float x) {
  constexpr float kClamp = 5.5F;
#if defined(__CUDA_ARCH__)
  float m;  // max(x, -kClamp), NaN kept
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(x), "f"(-kClamp));
#else
  const float m = x != x ? x : (x > -kClamp ? x : -kClamp);
#endif
  const float c = fminf(m, kClamp);  // NaN → 5.5 (m carries the NaN through)
  const float s = c * c;
  float q = 3.228929017e-06F;
  q = fmaf(q, s, -8.823710959e-05F);
  q = fmaf(q, s, -3.602786746e-04F);
  q = fmaf(q, s, 1.052266881e-01F);
  q = fmaf(q, s, 2.302045345e+00F);
  const float v = c * q;  // log2 (Φ / (1 − Φ)), within ±26
#if defined(__CUDA_ARCH__)
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(v));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0F));
#else
  const float e = std::exp2(v);
  const float r = 1.0F / (e + 1.0F);
#endif
  return m * (e * r);
}

// x·Φ(x) for the products' f16/bf16 results, as accurate as erff's x·(1 + erf(x/√2))/2 or more, at about half its
// cost. Φ(x) = erfc(−x/√2)/2, and for z = |x|/√2, erfc(z) = t·2^((P(t) − z²)·log2 e) with t = 1/(1 + z/2) and P a
// degree-7 polynomial fitted to ln(erfc(z)/t) + z² over 0 ≤ z ≤ 10 (|error| ≤ 6.5e-7, so erfc's relative error is
// about that). The code computes erfc/2 = t·2^(P'(t) − w²) with w = z·√(log2 e) and P' = P·log2 e − 1, the factors
// folded into the constants (two multiplications fewer a value). Φ = 1 − erfc/2 for x ≥ 0 and erfc/2 below, which
// keeps the relative accuracy in the negative tail that 1 + erf(x/√2) loses to cancellation: rounded to f16 the result
// differs from the exact erf-GELU's for 0.02 % of the values over ±12, against 4.8 % for the erff form, and its
// relative error stays ≤ 3e-5. One reciprocal and one exp2 (MUFU.RCP and MUFU.EX2 on the GPU) and about 12 more
// instructions, without branches, against erff's two polynomial paths that a warp with values on both sides of
// |x/√2| = 0.875 takes both of. NaN gives NaN, +inf +inf, -inf NaN (as the erff form).
TENSORACLE_GELU_INLINE float gelu_erf_erfc(float x) {
  const float w = fabsf(x) * 8.493217826e-01F;      // |x|·√(log2 e / 2)
  const float u = fmaf(4.162773192e-01F, w, 1.0F);  // 1 + z/2 = 1 + w / (2·√(log2 e))
#if defined(__CUDA_ARCH__)
  float t;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(u));
#else
  const float t = 1.0F / u;
#endif
  float p = -2.649572492e-01F;  // P' = P·log2 e − 1
  p = fmaf(p, t, 1.058883071e+00F);
  p = fmaf(p, t, -1.399513960e+00F);
  p = fmaf(p, t, 4.629060626e-01F);
  p = fmaf(p, t, -3.484798595e-02F);
  p = fmaf(p, t, 5.615662336e-01F);
  p = fmaf(p, t, 1.441727638e+00F);
  p = fmaf(p, t, -2.825764656e+00F);
  const float a = fmaf(-w, w, p);  // log2 (erfc(z) / (2t))
#if defined(__CUDA_ARCH__)
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(a));
#else
  const float e = std::exp2(a);
#endif
  const float half_erfc = t * e;
  return x * (x >= 0.0F ? 1.0F - half_erfc : half_erfc);
}

}  // namespace tensoracle::cuda::kernels

#undef TENSORACLE_GELU_INLINE
