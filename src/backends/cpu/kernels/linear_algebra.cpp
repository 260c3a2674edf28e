// CPU reference kernels of the linear_algebra family: matmul and linear, through OpenBLAS gemm.
#include <cblas.h>
#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/blas.hpp"
#include "backends/cpu/kernels/epilogue.hpp"
#include "backends/cpu/kernels/numeric.hpp"

namespace tensoracle::cpu {
namespace {

using blas::gemm;
using blas::load;

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
  const TensorRef& a = ctx.input(0);
  const TensorRef& b = ctx.input(1);
  const TensorRef& out = ctx.output(0);
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
  const TensorRef& x = ctx.input(0);
  const TensorRef& weight = ctx.input(1);
  const TensorRef& out = ctx.output(0);
  const std::int64_t rows = volume_of(x.shape, 0, x.shape.rank() - 1);
  const std::int64_t in = weight.shape[1], features = weight.shape[0];
  const std::vector<T> vx = load<T>(x), vw = load<T>(weight);
  std::vector<T> c(out.size());
  gemm(ctx, false, true, rows, features, in, vx.data(), vw.data(), c.data());
  // The bias (and the builder's fused epilogue) in double: the output is rounded once more only, to its dtype.
  std::vector<double> y(c.begin(), c.end());
  apply_epilogue(ctx, y, 2, 3);
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
