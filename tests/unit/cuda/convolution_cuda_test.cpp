// The f16/bf16 convolution entries run directly through the registry: cuDNN's first graph plan and its next four
// (conv_*_f32math_cudnn, conv_*_f32math_cudnn_plan1..4), channels last with bias, residual and relu fused, on a 3x3 and
// a 1x1 problem, and the 1x1 convolution as cuBLASLt's product (conv_*_1x1_cublaslt_algo0..1), against a
// double-precision reference of the same half-precision operands.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "gpu_test.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::cuda {
namespace {

using gpu_test::device_tensor;
using gpu_test::DeviceBuffer;
using gpu_test::half_to_float;
using gpu_test::random_halves;

struct Problem {
  std::int64_t n, h, w, c, o, k;  // stride 1, padding k/2
};

// relu(conv(x, w) + b + r), channels last, by one registry entry: its relative L2 error against double math
// (infinity when the entry did not prepare or wrote a non-finite value).
double conv_error(const std::string& kernel, DataType dtype, const Problem& p) {
  const std::int64_t pad = p.k / 2;
  std::mt19937 rng(7);
  const auto x = random_halves(static_cast<std::size_t>(p.n * p.h * p.w * p.c), dtype, 1.0F, rng);
  const auto w = random_halves(static_cast<std::size_t>(p.o * p.k * p.k * p.c), dtype, 1.0F, rng);
  const auto b = random_halves(static_cast<std::size_t>(p.o), dtype, 1.0F, rng);
  const auto r = random_halves(static_cast<std::size_t>(p.n * p.h * p.w * p.o), dtype, 1.0F, rng);
  Network net;
  Tensor tx = net.add_input("x", dtype, {p.n, p.h, p.w, p.c});
  Tensor tw = net.add_constant_copy(dtype, {p.o, p.k, p.k, p.c}, w.data(), "w");
  Tensor tb = net.add_constant_copy(dtype, {p.o}, b.data(), "b");
  Tensor tr = net.add_input("r", dtype, {p.n, p.h, p.w, p.o});
  Tensor y = net.add_layer("conv", {tx, tw, tb, tr},
                           {{"layout", std::string("nhwc")},
                            {"activation", std::string("relu")},
                            {"padding", std::vector<std::int64_t>{pad, pad}}},
                           "conv")[0];
  net.mark_output(y, "y");

  const graph::Graph& g = graph::graph_of(net);
  const std::size_t out_count = r.size();
  const DeviceBuffer dx(x.size() * 2), dw(w.size() * 2), db(b.size() * 2), dr(r.size() * 2), dy(out_count * 2);
  dx.upload(x);
  dw.upload(w);
  db.upload(b);
  dr.upload(r);
  dy.fill(0xFF);  // poisoned: NaN where nothing is written
  if (!gpu_test::run_entry(
          kernel, g, g.layers.back(),
          {device_tensor(dtype, {p.n, p.h, p.w, p.c}, dx.base()), device_tensor(dtype, {p.o, p.k, p.k, p.c}, dw.base()),
           device_tensor(dtype, {p.o}, db.base()), device_tensor(dtype, {p.n, p.h, p.w, p.o}, dr.base())},
          {device_tensor(dtype, {p.n, p.h, p.w, p.o}, dy.base())})) {
    return INFINITY;
  }
  const std::vector<std::uint16_t> got = dy.download<std::uint16_t>(out_count);

  double num = 0, den = 0;
  for (std::int64_t ni = 0; ni < p.n; ++ni) {
    for (std::int64_t i = 0; i < p.h; ++i) {
      for (std::int64_t j = 0; j < p.w; ++j) {
        for (std::int64_t o = 0; o < p.o; ++o) {
          double sum = half_to_float(b[static_cast<std::size_t>(o)], dtype);
          for (std::int64_t a = 0; a < p.k; ++a) {
            for (std::int64_t e = 0; e < p.k; ++e) {
              const std::int64_t ii = i - pad + a, jj = j - pad + e;
              if (ii < 0 || ii >= p.h || jj < 0 || jj >= p.w) continue;
              for (std::int64_t ch = 0; ch < p.c; ++ch) {
                sum += half_to_float(x[static_cast<std::size_t>(((ni * p.h + ii) * p.w + jj) * p.c + ch)], dtype) *
                       half_to_float(w[static_cast<std::size_t>(((o * p.k + a) * p.k + e) * p.c + ch)], dtype);
              }
            }
          }
          const auto out = static_cast<std::size_t>(((ni * p.h + i) * p.w + j) * p.o + o);
          const double want = std::fmax(0.0, sum + half_to_float(r[out], dtype));
          const double have = half_to_float(got[out], dtype);
          if (!std::isfinite(have)) return INFINITY;
          num += (have - want) * (have - want);
          den += want * want;
        }
      }
    }
  }
  return std::sqrt(num / den);
}

TEST(CudaConvolution, EveryCudnnGraphPlanEntryComputesTheFusedConvolution) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  for (const DataType dtype : {DataType::kF16, DataType::kBF16}) {
    const std::string prefix = dtype == DataType::kF16 ? "conv_f16_f32math_cudnn" : "conv_bf16_f32math_cudnn";
    for (const std::string suffix : {"", "_plan1", "_plan2", "_plan3", "_plan4"}) {
      for (const Problem& p : {Problem{2, 10, 10, 16, 32, 3}, Problem{2, 12, 12, 64, 128, 1}}) {
        SCOPED_TRACE(prefix + suffix + " k=" + std::to_string(p.k));
        // f16 keeps ~11 bits, bf16 ~8 (the result rounds once; cuDNN may round the convolution before the sum).
        EXPECT_LT(conv_error(prefix + suffix, dtype, p), dtype == DataType::kF16 ? 2e-3 : 1.5e-2);
      }
    }
  }
}

TEST(CudaConvolution, PointwiseConvolutionAsAProductComputesTheFusedConvolution) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  for (const DataType dtype : {DataType::kF16, DataType::kBF16}) {
    for (const char* algo : {"algo0", "algo1"}) {
      const std::string kernel =
          std::string(dtype == DataType::kF16 ? "conv_f16_f32acc_1x1_cublaslt_" : "conv_bf16_f32acc_1x1_cublaslt_") +
          algo;
      for (const Problem& p : {Problem{2, 12, 12, 64, 128, 1}, Problem{1, 7, 9, 24, 40, 1}}) {
        SCOPED_TRACE(kernel + " c=" + std::to_string(p.c));
        EXPECT_LT(conv_error(kernel, dtype, p), dtype == DataType::kF16 ? 2e-3 : 1.5e-2);
      }
    }
  }
}

}  // namespace
}  // namespace tensoracle::cuda
