// The small OpenBLAS wrapper shared by the CPU matrix-product and convolution kernels.
#pragma once

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"

namespace tensoracle::cpu::blas {

// BLAS takes 32-bit sizes; a larger matrix is refused rather than silently truncated.
inline blasint blas_size(const KernelContext& ctx, std::int64_t v) {
  if (v > INT_MAX) ctx.fail(fmt::format("a matrix dimension of {} is too large for BLAS", v));
  return static_cast<blasint>(v);
}

inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, const float* a,
                      blasint lda, const float* b, blasint ldb, float* c, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
inline void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, const double* a,
                      blasint lda, const double* b, blasint ldb, double* c, blasint ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

// c[m, n] = op(a) · op(b) for contiguous row-major matrices: a is [m, k] ([k, m] when trans_a),
// b is [k, n] ([n, k] when trans_b). c is overwritten. T is float (fp32 accumulation for f32, f16
// and bf16) or double (f64). The BLAS call keeps no state of ours, so it is safe from several threads.
template <typename T>
void gemm(const KernelContext& ctx, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          const T* a, const T* b, T* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum; BLAS would also reject the zero leading dimensions
    std::fill(c, c + m * n, T(0));
    return;
  }
  blas_gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blas_size(ctx, m),
            blas_size(ctx, n), blas_size(ctx, k), a, blas_size(ctx, trans_a ? m : k), b,
            blas_size(ctx, trans_b ? k : n), c, blas_size(ctx, n));
}

// Operands as the BLAS scalar: f32/f16/bf16 widen exactly to float, f64 stays double.
template <typename T>
std::vector<T> load(const TensorRef& t);
template <>
inline std::vector<float> load<float>(const TensorRef& t) {
  return to_f32(t);
}
template <>
inline std::vector<double> load<double>(const TensorRef& t) {
  return to_f64(t);
}

}  // namespace tensoracle::cpu::blas
