// Times cuDNN graph plans (cudnn_conv_graph) for ResNet-50's convolutions at batch 256, NHWC, with f16 operands and
// with i8 / f8e4m3 operands scaled per output channel, every engine configuration the heuristics offer: which quantized
// convolutions cuDNN runs on this GPU, and how fast against f16. Prints one line per shape and type. The stem shapes
// compare the 7x7 stride-2 stem (3 channels padded to 8) with the same work as a 4x4 stride-1 convolution of its
// 2x2 space-to-depth input (12 channels padded to 16; padding 2 here, so 116x116 results instead of 112x112), and
// wider forms of it (padding k/2 here too).
// Arguments: batch (256), iterations (20), a substring of the shape names to run (all).
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/kernels/cudnn_conv_graph.hpp"

namespace {

using tensoracle::cuda::ConvGraphPlan;
using tensoracle::cuda::ConvGraphProblem;

#define CHECK_CUDA(call)                                                                         \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

struct Shape {
  const char* name;
  std::int64_t c, hw, o, k, stride;
  bool residual;
};

struct Variant {
  const char* name;
  cudnnDataType_t input, compute;
  bool scale;
  std::size_t element_bytes;
  bool quantized = false;  // an i8 result, and with a residual an i8 one (times its scale)
};

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 256;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;
  const std::string only = argc > 3 ? argv[3] : "";
  const std::vector<Shape> shapes = {
      {"1x1 64->64 @56", 64, 56, 64, 1, 1, false},
      {"1x1 256->64 @56", 256, 56, 64, 1, 1, false},
      {"3x3 64->64 @56", 64, 56, 64, 3, 1, false},
      {"1x1 64->256 @56 +res", 64, 56, 256, 1, 1, true},
      {"3x3 128->128 s2 @56", 128, 56, 128, 3, 2, false},
      {"3x3 128->128 @28", 128, 28, 128, 3, 1, false},
      {"1x1 512->128 @28", 512, 28, 128, 1, 1, false},
      {"1x1 128->512 @28 +res", 128, 28, 512, 1, 1, true},
      {"3x3 256->256 @14", 256, 14, 256, 3, 1, false},
      {"1x1 1024->256 @14", 1024, 14, 256, 1, 1, false},
      {"1x1 256->1024 @14 +res", 256, 14, 1024, 1, 1, true},
      {"3x3 512->512 @7", 512, 7, 512, 3, 1, false},
      {"1x1 2048->512 @7", 2048, 7, 512, 1, 1, false},
      {"1x1 512->2048 @7 +res", 512, 7, 2048, 1, 1, true},
      {"stem 7x7 8->64 s2 @224", 8, 224, 64, 7, 2, false},
      {"stem s2d 4x4 16->64 @115", 16, 115, 64, 4, 1, false},
      // The same 2x2 space-to-depth form with its channels padded to 32; and a 4x4 space-to-depth input (48 channels,
      // or 64 padded) whose 3x3 convolution makes each cell's 2x2 results as 4 x 64 channels (more zero taps, wider
      // channels).
      {"stem s2d 4x4 32->64 @115", 32, 115, 64, 4, 1, false},
      {"stem s2d4 3x3 48->256 @58", 48, 58, 256, 3, 1, false},
      {"stem s2d4 3x3 64->256 @58", 64, 58, 256, 3, 1, false},
  };
  const std::vector<Variant> variants = {
      {"f16", CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, false, 2},
      {"i8/i32", CUDNN_DATA_INT8, CUDNN_DATA_INT32, true, 1},
      {"i8/f32", CUDNN_DATA_INT8, CUDNN_DATA_FLOAT, true, 1},
      {"e4m3", CUDNN_DATA_FP8_E4M3, CUDNN_DATA_FLOAT, true, 1},
      // what a calibrated ResNet's blocks run (calibrate --quantize-residuals): i8 results and i8 residuals
      {"i8 q", CUDNN_DATA_INT8, CUDNN_DATA_INT32, true, 1, true},
  };
  cudnnHandle_t handle = nullptr;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) return 1;
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudnnSetStream(handle, stream);
  std::printf("cuDNN %zu, batch %lld\n", cudnnGetVersion(), static_cast<long long>(n));
  const std::size_t workspace_limit = std::size_t{256} << 20;
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, workspace_limit));
  cudaEvent_t start = nullptr, stop = nullptr;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (const Shape& s : shapes) {
    if (std::string(s.name).find(only) == std::string::npos) continue;
    const std::int64_t pad = s.k / 2, out_hw = (s.hw + 2 * pad - s.k) / s.stride + 1;
    const double flops = 2.0 * static_cast<double>(n * out_hw * out_hw * s.o * s.c * s.k * s.k);
    for (const Variant& v : variants) {
      ConvGraphProblem p;
      p.n = n, p.c = s.c, p.h = s.hw, p.w = s.hw, p.o = s.o, p.kh = s.k, p.kw = s.k, p.oh = out_hw, p.ow = out_hw;
      p.sh = p.sw = s.stride, p.ph = p.pw = pad;
      p.input_type = v.input, p.compute = v.compute, p.type = p.output_type = CUDNN_DATA_HALF, p.nhwc = true;
      p.scale = v.scale, p.bias = true, p.residual = s.residual, p.relu = true;
      p.output_scale = v.quantized;
      if (v.quantized) p.output_type = v.input;
      p.residual_scale = s.residual && v.quantized, p.residual_type = v.input;
      std::vector<std::unique_ptr<ConvGraphPlan>> plans = ConvGraphPlan::build_all(handle, p, workspace_limit, 24);
      if (plans.empty()) {
        std::printf("%-24s %-7s no plan\n", s.name, v.name);
        continue;
      }
      void *x = nullptr, *w = nullptr, *scale = nullptr, *bias = nullptr, *residual = nullptr, *y = nullptr;
      const std::size_t y_elems = static_cast<std::size_t>(n * out_hw * out_hw * s.o);
      CHECK_CUDA(cudaMalloc(&x, static_cast<std::size_t>(n * s.hw * s.hw * s.c) * v.element_bytes));
      CHECK_CUDA(cudaMalloc(&w, static_cast<std::size_t>(s.o * s.c * s.k * s.k) * v.element_bytes));
      CHECK_CUDA(cudaMalloc(&scale, static_cast<std::size_t>(s.o) * 4));
      CHECK_CUDA(cudaMalloc(&bias, static_cast<std::size_t>(s.o) * 2));
      CHECK_CUDA(cudaMalloc(&residual, y_elems * 2));
      CHECK_CUDA(cudaMalloc(&y, y_elems * 2));
      CHECK_CUDA(cudaMemset(x, 1, static_cast<std::size_t>(n * s.hw * s.hw * s.c) * v.element_bytes));
      CHECK_CUDA(cudaMemset(w, 1, static_cast<std::size_t>(s.o * s.c * s.k * s.k) * v.element_bytes));
      CHECK_CUDA(cudaMemset(scale, 0, static_cast<std::size_t>(s.o) * 4));
      CHECK_CUDA(cudaMemset(bias, 0, static_cast<std::size_t>(s.o) * 2));
      CHECK_CUDA(cudaMemset(residual, 0, y_elems * 2));
      void* scalars = nullptr;  // the output scale and the residual's: 1
      const float ones[2] = {1.F, 1.F};
      CHECK_CUDA(cudaMalloc(&scalars, sizeof ones));
      CHECK_CUDA(cudaMemcpy(scalars, ones, sizeof ones, cudaMemcpyHostToDevice));
      const float* one = static_cast<const float*>(scalars);
      double best = 1e30, first = 0;
      std::size_t best_index = 0;
      int failures = 0;
      for (std::size_t i = 0; i < plans.size(); ++i) {
        const ConvGraphPlan& plan = *plans[i];
        auto run = [&] {
          return plan.execute(handle, x, w, scale, bias, s.residual ? residual : nullptr, one, one + 1, y, workspace);
        };
        if (run() != CUDNN_STATUS_SUCCESS || cudaStreamSynchronize(stream) != cudaSuccess) {
          ++failures;
          cudaGetLastError();
          continue;
        }
        for (int k = 0; k < 3; ++k) run();
        CHECK_CUDA(cudaEventRecord(start, stream));
        for (int k = 0; k < iterations; ++k) run();
        CHECK_CUDA(cudaEventRecord(stop, stream));
        CHECK_CUDA(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        const double us = 1000.0 * ms / iterations;
        if (i == 0) first = us;
        if (us < best) best = us, best_index = i;
      }
      std::printf("%-24s %-7s plans %2zu failed %d  first %8.1f us  best %8.1f us (#%zu)  %6.1f TFLOP/s\n", s.name,
                  v.name, plans.size(), failures, first, best, best_index, flops / best / 1e6);
      for (void* ptr : {x, w, scale, bias, residual, y, scalars}) cudaFree(ptr);
    }
  }
  cudnnDestroy(handle);
  return 0;
}
