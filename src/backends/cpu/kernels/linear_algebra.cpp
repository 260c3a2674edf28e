// CPU reference kernels of the linear_algebra family: matmul and linear, through OpenBLAS gemm.
#include <cblas.h>
#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <vector>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"

namespace tensoracle::cpu {
namespace {

// BLAS takes 32-bit sizes; a larger matrix is refused rather than silently truncated.
blasint blas_size(const KernelContext& ctx, std::int64_t v) {
  if (v > INT_MAX) ctx.fail(fmt::format("a matrix dimension of {} is too large for BLAS", v));
  return static_cast<blasint>(v);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, const float* a, blasint lda,
               const float* b, blasint ldb, float* c, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, const double* a, blasint lda,
               const double* b, blasint ldb, double* c, blasint ldc) {
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
std::vector<T> load(const HostTensor& t);
template <>
std::vector<float> load<float>(const HostTensor& t) {
  return to_f32(t);
}
template <>
std::vector<double> load<double>(const HostTensor& t) {
  return to_f64(t);
}

std::int64_t volume_of(const Dims& shape, int begin, int end) {
  std::int64_t v = 1;
  for (int i = begin; i < end; ++i) v *= shape[i];
  return v;
}

Dims leading_dims(const Dims& shape, int drop) {
  return Dims(std::vector<std::int64_t>(shape.begin(), shape.end() - drop));
}

template <typename T>
void matmul(KernelContext& ctx) {
  const HostTensor& a = ctx.input(0);
  const HostTensor& b = ctx.input(1);
  HostTensor& out = ctx.output(0);
  const bool trans_a = ctx.get_bool("transpose_a", false);
  const bool trans_b = ctx.get_bool("transpose_b", false);
  const int rank = out.shape.rank();
  const std::int64_t m = out.shape[rank - 2], n = out.shape[rank - 1];
  const std::int64_t k = trans_a ? a.shape[a.shape.rank() - 2] : a.shape[a.shape.rank() - 1];

  const Dims batch = leading_dims(out.shape, 2);
  const std::vector<std::int64_t> batch_a = broadcast_indices(leading_dims(a.shape, 2), batch);
  const std::vector<std::int64_t> batch_b = broadcast_indices(leading_dims(b.shape, 2), batch);
  const std::vector<T> va = load<T>(a), vb = load<T>(b);
  std::vector<T> c(out.size());
  for (std::size_t i = 0; i < batch_a.size(); ++i) {
    gemm(ctx, trans_a, trans_b, m, n, k, va.data() + batch_a[i] * m * k, vb.data() + batch_b[i] * k * n,
         c.data() + static_cast<std::int64_t>(i) * m * n);
  }
  from_f64(out, std::vector<double>(c.begin(), c.end()));
}

template <typename T>
void linear(KernelContext& ctx) {
  const HostTensor& x = ctx.input(0);
  const HostTensor& weight = ctx.input(1);
  HostTensor& out = ctx.output(0);
  const std::int64_t rows = volume_of(x.shape, 0, x.shape.rank() - 1);
  const std::int64_t in = weight.shape[1], features = weight.shape[0];
  const std::vector<T> vx = load<T>(x), vw = load<T>(weight);
  std::vector<T> c(out.size());
  gemm(ctx, false, true, rows, features, in, vx.data(), vw.data(), c.data());
  // The bias is added in double so that the output is rounded once more only, to its dtype.
  std::vector<double> y(c.begin(), c.end());
  if (ctx.has_input(2)) {
    const std::vector<double> bias = to_f64(ctx.input(2));
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += bias[i % bias.size()];
  }
  from_f64(out, y);
}

// f64 runs in double (dgemm); every other float dtype in float (sgemm, fp32 accumulation).
void matmul_kernel(KernelContext& ctx) {
  if (ctx.input(0).dtype == DataType::kF64) return matmul<double>(ctx);
  matmul<float>(ctx);
}

void linear_kernel(KernelContext& ctx) {
  if (ctx.input(0).dtype == DataType::kF64) return linear<double>(ctx);
  linear<float>(ctx);
}

}  // namespace

void register_linear_algebra_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back({"matmul", matmul_kernel});
  kernels.push_back({"linear", linear_kernel});
}

}  // namespace tensoracle::cpu
