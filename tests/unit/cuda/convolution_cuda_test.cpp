// The f16/bf16 convolution entries run directly through the registry: cuDNN's first graph plan and its next four
// (conv_*_f32math_cudnn, conv_*_f32math_cudnn_plan1..4), channels last with bias, residual and relu fused, on a 3x3 and
// a 1x1 problem, and the 1x1 convolution as cuBLASLt's product (conv_*_1x1_cublaslt_algo0..1), against a
// double-precision reference of the same half-precision operands; cuDNN graph plans shared between steps of one
// problem (ConvGraphPlan::build_shared), and an engine whose repeated convolutions share them, against the CPU
// reference.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/cudnn_conv_graph.hpp"
#include "gpu_test.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"
#include "tensoracle/target_memory.hpp"

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

// build_shared gives steps of one problem on one handle one finalized plan (each with its own variant pack), another
// plan index or another handle a plan of their own, and once every sharer is gone a new plan.
TEST(CudaConvolution, GraphPlansOfOneProblemAreSharedPerHandle) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  cudnnHandle_t first = nullptr, second = nullptr;
  ASSERT_EQ(cudnnCreate(&first), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnCreate(&second), CUDNN_STATUS_SUCCESS);
  ConvGraphProblem p;
  p.n = 2, p.c = 16, p.h = 10, p.w = 10, p.o = 16, p.kh = 3, p.kw = 3, p.oh = 10, p.ow = 10, p.ph = 1, p.pw = 1;
  p.nhwc = true, p.bias = true, p.relu = true;
  constexpr std::size_t kLimit = 32 << 20;
  {
    const auto a = ConvGraphPlan::build_shared(first, p, kLimit, 0);
    const auto b = ConvGraphPlan::build_shared(first, p, kLimit, 0);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(a->shares_plan_with(*b));
    EXPECT_EQ(a->workspace_bytes(), b->workspace_bytes());
    const auto other_handle = ConvGraphPlan::build_shared(second, p, kLimit, 0);
    ASSERT_NE(other_handle, nullptr);
    EXPECT_FALSE(a->shares_plan_with(*other_handle));
    const auto other_index = ConvGraphPlan::build_shared(first, p, kLimit, 1);
    ASSERT_NE(other_index, nullptr);  // the next plan of cuDNN's list, or build's first built anew
    EXPECT_FALSE(a->shares_plan_with(*other_index));
    ConvGraphProblem wider = p;
    wider.o = 32;
    const auto other_problem = ConvGraphPlan::build_shared(first, wider, kLimit, 0);
    ASSERT_NE(other_problem, nullptr);
    EXPECT_FALSE(a->shares_plan_with(*other_problem));
  }
  {  // every plan above is gone: built anew, and shared again
    const auto again = ConvGraphPlan::build_shared(first, p, kLimit, 0);
    const auto with_again = ConvGraphPlan::build_shared(first, p, kLimit, 0);
    ASSERT_NE(again, nullptr);
    ASSERT_NE(with_again, nullptr);
    EXPECT_TRUE(again->shares_plan_with(*with_again));
  }
  cudnnDestroy(second);
  cudnnDestroy(first);
}

// Three identical 3x3 convolutions with bias and relu in a chain (one problem: one shared cuDNN plan per context), in
// two contexts of one engine, enqueued twice (the variant packs bound again to other buffers), against the CPU
// reference.
TEST(CudaConvolution, RepeatedConvolutionsOfAnEngineMatchTheCpuReference) {
  TENSORACLE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-0.2F, 0.2F);
  Network net;
  Tensor x = net.add_input("x", DataType::kF32, {2, 16, 10, 10});
  Tensor t = x;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> w(16 * 16 * 3 * 3), b(16);
    for (auto& v : w) v = dist(rng);
    for (auto& v : b) v = dist(rng);
    Tensor tw = net.add_constant_copy(DataType::kF32, {16, 16, 3, 3}, w.data(), "w" + std::to_string(i));
    Tensor tb = net.add_constant_copy(DataType::kF32, {16}, b.data(), "b" + std::to_string(i));
    t = net.add_activation("relu", net.add_layer("conv", {t, tw, tb}, {{"padding", std::vector<std::int64_t>{1, 1}}},
                                                 "conv" + std::to_string(i))[0]);
  }
  net.mark_output(t, "y");
  BuilderConfig config;
  config.target = Target::cuda(0);
  config.precision = Precision::kFp16;
  const auto engine = Engine::deserialize(Builder(config).build(net));
  for (int run = 0; run < 2; ++run) {
    HostTensor in(DataType::kF32, {2, 16, 10, 10});
    std::normal_distribution<float> normal(0.F, 1.F);
    for (std::size_t i = 0; i < in.size(); ++i) in.data<float>()[i] = normal(rng);
    const HostTensor want = run_reference(net, {{"x", in}}).at("y");
    auto first = engine->create_execution_context();
    auto second = engine->create_execution_context();
    for (ExecutionContext* ctx : {first.get(), second.get()}) {
      ctx->set_input_shapes({{"x", in.shape}});
      TargetStream stream(Target::cuda(0));
      HostTensor got(DataType::kF32, ctx->tensor_shape("y"));
      for (int enqueue = 0; enqueue < 2; ++enqueue) {  // other buffers the second time: a new variant pack
        TargetBuffer xb(Target::cuda(0), in.bytes.size()), yb(Target::cuda(0), got.bytes.size());
        xb.copy_from_host(in.bytes.data(), in.bytes.size());
        yb.fill(0xFF);
        ctx->set_tensor_address("x", xb.data());
        ctx->set_tensor_address("y", yb.data());
        ctx->enqueue(stream.get());
        ASSERT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
        yb.copy_to_host(got.bytes.data(), got.bytes.size());
        EXPECT_LT(gpu_test::rel_l2(got, want), 1e-2) << "run " << run << " enqueue " << enqueue;
      }
    }
  }
}

}  // namespace
}  // namespace tensoracle::cuda
