// The erf-GELU of the products whose result is quantized next: x·Φ(x) from one exp2 and one reciprocal (host and
// device; the host form is what tests/unit/gelu_erf_fast_test.cpp measures against std::erf).
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

}  // namespace tensoracle::cuda::kernels

#undef TENSORACLE_GELU_INLINE
