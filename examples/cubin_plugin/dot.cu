// The example cubin plugin's small matmul in three variants (f32, extern "C"), compiled into the bundle by the
// producer from kernels.json (the specialized one's constants arrive as -D macros).
#include <cstdint>

// y[m, n] = x[m, k] . w[k, n], specialized: k is the compile-time DOT_K, the block is DOT_BLOCK threads, and each
// thread computes four adjacent outputs with 16-byte loads of w and stores of y (so n % 4 == 0 and w, y 16-byte
// aligned: the divisibility rules of its kernels.json entry).
#ifndef DOT_K
#define DOT_K 64
#endif
#ifndef DOT_BLOCK
#define DOT_BLOCK 128
#endif
extern "C" __global__ void __launch_bounds__(DOT_BLOCK)
    dot_f32_specialized(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int m, int n) {
  const int quads = n / 4;
  const long long index = blockIdx.x * (long long)DOT_BLOCK + threadIdx.x;
  if (index >= (long long)m * quads) return;
  const long long row = index / quads;
  const int col = (int)(index % quads) * 4;
  const float* xr = x + row * DOT_K;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 16
  for (int k = 0; k < DOT_K; ++k) {
    const float a = xr[k];
    const float4 b = *reinterpret_cast<const float4*>(w + (long long)k * n + col);
    acc.x = fmaf(a, b.x, acc.x);
    acc.y = fmaf(a, b.y, acc.y);
    acc.z = fmaf(a, b.z, acc.z);
    acc.w = fmaf(a, b.w, acc.w);
  }
  *reinterpret_cast<float4*>(y + row * n + col) = acc;
}

// The same product for any m, n, k and alignment: one output per thread, the block size chosen by the caller.
extern "C" __global__ void dot_f32_unspecialized(const float* __restrict__ x, const float* __restrict__ w,
                                                 float* __restrict__ y, int m, int n, int k) {
  const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (index >= (long long)m * n) return;
  const long long row = index / n;
  const int col = (int)(index % n);
  float acc = 0.f;
  for (int i = 0; i < k; ++i) acc = fmaf(x[row * k + i], w[(long long)i * n + col], acc);
  y[index] = acc;
}

// A value rounded to TF32 (10 mantissa bits, round to nearest, ties away from zero: cvt.rna), as a TF32 tensor-core
// GEMM rounds its inputs; the products of two TF32 values are exact in f32 and accumulate in f32.
__device__ __forceinline__ float round_to_tf32(float x) {
  std::uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
  return __uint_as_float(bits);
}

// The unspecialized product with TF32-rounded inputs: a control for comparing an f32 result with a TF32 one.
extern "C" __global__ void dot_f32_tf32_control(const float* __restrict__ x, const float* __restrict__ w,
                                                float* __restrict__ y, int m, int n, int k) {
  const long long index = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (index >= (long long)m * n) return;
  const long long row = index / n;
  const int col = (int)(index % n);
  float acc = 0.f;
  for (int i = 0; i < k; ++i) {
    acc = fmaf(round_to_tf32(x[row * k + i]), round_to_tf32(w[(long long)i * n + col]), acc);
  }
  y[index] = acc;
}
