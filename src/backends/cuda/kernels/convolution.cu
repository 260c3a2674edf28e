// CUDA kernels of conv (1D/2D) and conv_transpose2d: cuDNN (graph plans and the legacy API) and direct kernels.
//
// The hand-written direct kernels run beside cuDNN (timed against it) and behind it, for problems cuDNN refuses.
// Semantics follow the CPU reference kernels (src/backends/cpu/kernels/convolution.cpp): f16/bf16 compute in f32, f64
// in f64.
//
// cuDNN runs on the execution context's handle (StepLaunch::handles), taken when the step is prepared; a launch sets
// its stream and enqueues. f16/bf16 forward convolutions run as cuDNN graph plans (cudnn_conv_graph.hpp): the
// convolution and its fused bias, residual and relu in one operation graph whose execution plan is finalized when the
// step is prepared, the epilogue computed in f32 and rounded once. Problems no graph engine takes, launches whose
// pointers are not all 16-byte aligned, f32/f64 and conv_transpose2d use the legacy API below.
// Algorithms come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7: host-only, no benchmarking, no device
// allocation), the first one whose workspace fits launch.workspace_bytes (FFT algorithms and, for the data gradient,
// non-deterministic ones excluded); the choice and the descriptors are made when the step is prepared. f32 runs on FMA
// kernels unless launch.precision is Precision::kTf32. With a bias, cuDNN adds the convolution onto the bias (beta =
// 1); for f16/bf16 it rounds the convolution to the dtype before that sum, so the result can differ from the
// reference's single rounding by one unit in the last place of the unbiased convolution (the direct kernels round
// once). cuDNN 9.0 or newer is required at run time (cudnn_runtime_version()).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/cudnn_conv_graph.hpp"
#include "backends/cuda/kernels/cudnn_util.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cuda {

int cudnn_runtime_version() { return static_cast<int>(cudnnGetVersion()); }

namespace {

using conv_family::Accum;
using conv_family::ActivationDesc;
using conv_family::all_dtype;
using conv_family::binds_caller_buffer;
using conv_family::channels_first_dims;
using conv_family::channels_last;
using conv_family::check_cudnn;
using conv_family::conv_shape;
using conv_family::ConvDesc;
using conv_family::ConvShape;
using conv_family::cudnn_type;
using conv_family::FilterDesc;
using conv_family::graph_aligned;
using conv_family::is_refusal;
using conv_family::list_value;
using conv_family::load;
using conv_family::require_cudnn9;
using conv_family::store;
using conv_family::TensorDesc;
using kernels::dispatch_float;
using kernels::grid_for;
using kernels::has_tensor;
using kernels::kThreads;
using kernels::launch_kernel;
using kernels::layer_name;
using kernels::wait_for_preceding_steps;

// cuDNN's scratch: what its convolution heuristics ask for at most in the common cases.
constexpr std::size_t kCudnnWorkspaceBytes = std::size_t{64} << 20;

__device__ __forceinline__ std::int64_t min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// First k in [0, ∞) with base + k * step >= 0 (step > 0).
__device__ __forceinline__ std::int64_t first_inside(std::int64_t base, std::int64_t step) {
  return base >= 0 ? 0 : (-base + step - 1) / step;
}
// One past the last k with base + k * step < limit, capped at taps.
__device__ __forceinline__ std::int64_t end_inside(std::int64_t base, std::int64_t step, std::int64_t limit,
                                                   std::int64_t taps) {
  if (base >= limit) return 0;
  return min64(taps, (limit - base + step - 1) / step);
}

// ---- conv, direct: one thread per output element, the C/groups · kh · kw taps in the accumulation type ----

template <typename T>
__global__ void conv_direct_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                                   T* __restrict__ y, ConvShape s) {
  wait_for_preceding_steps();
  using A = Accum<T>;
  const std::int64_t total = s.n * s.o * s.oh * s.ow;
  const std::int64_t group_in = s.c / s.groups, group_out = s.o / s.groups;
  const std::int64_t plane = s.h * s.w, taps = s.kh * s.kw;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ox = i % s.ow;
    std::int64_t t = i / s.ow;
    const std::int64_t oy = t % s.oh;
    t /= s.oh;
    const std::int64_t o = t % s.o;
    const std::int64_t n = t / s.o;
    const std::int64_t g = o / group_out;
    const std::int64_t iy0 = oy * s.sh - s.ph, ix0 = ox * s.sw - s.pw;
    const std::int64_t ky0 = first_inside(iy0, s.dh), ky1 = end_inside(iy0, s.dh, s.h, s.kh);
    const std::int64_t kx0 = first_inside(ix0, s.dw), kx1 = end_inside(ix0, s.dw, s.w, s.kw);
    const T* xg = x + (n * s.c + g * group_in) * plane;
    const T* wo = weight + o * group_in * taps;
    A acc = 0;
    for (std::int64_t c = 0; c < group_in; ++c) {
      const T* xc = xg + c * plane;
      const T* wc = wo + c * taps;
      for (std::int64_t ky = ky0; ky < ky1; ++ky) {
        const T* xrow = xc + (iy0 + ky * s.dh) * s.w + ix0;
        const T* wrow = wc + ky * s.kw;
        for (std::int64_t kx = kx0; kx < kx1; ++kx) acc += load(xrow, kx * s.dw) * load(wrow, kx);
      }
    }
    if (bias != nullptr) acc += load(bias, o);
    store(y, i, acc);
  }
}

// ---- conv_transpose2d, direct: one thread per output element gathering the inputs that land on it ----

template <typename T>
__global__ void conv_transpose_direct_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                             const T* __restrict__ bias, T* __restrict__ y, ConvShape s) {
  wait_for_preceding_steps();
  using A = Accum<T>;
  const std::int64_t total = s.n * s.o * s.oh * s.ow;
  const std::int64_t group_in = s.c / s.groups, group_out = s.o / s.groups;
  const std::int64_t plane = s.h * s.w, taps = s.kh * s.kw;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ox = i % s.ow;
    std::int64_t t = i / s.ow;
    const std::int64_t oy = t % s.oh;
    t /= s.oh;
    const std::int64_t o = t % s.o;
    const std::int64_t n = t / s.o;
    const std::int64_t g = o / group_out, local_o = o - g * group_out;
    // Input (iy, ix) through tap (ky, kx) lands on (iy * sh - ph + ky * dh, ix * sw - pw + kx * dw).
    A acc = 0;
    for (std::int64_t c = 0; c < group_in; ++c) {
      const std::int64_t ci = g * group_in + c;
      const T* xc = x + (n * s.c + ci) * plane;
      const T* wc = weight + (ci * group_out + local_o) * taps;
      for (std::int64_t ky = 0; ky < s.kh; ++ky) {
        const std::int64_t ty = oy + s.ph - ky * s.dh;
        if (ty < 0) break;  // decreasing in ky
        if (ty % s.sh != 0) continue;
        const std::int64_t iy = ty / s.sh;
        if (iy >= s.h) continue;
        for (std::int64_t kx = 0; kx < s.kw; ++kx) {
          const std::int64_t tx = ox + s.pw - kx * s.dw;
          if (tx < 0) break;
          if (tx % s.sw != 0) continue;
          const std::int64_t ix = tx / s.sw;
          if (ix >= s.w) continue;
          acc += load(xc, iy * s.w + ix) * load(wc, ky * s.kw + kx);
        }
      }
    }
    if (bias != nullptr) acc += load(bias, o);
    store(y, i, acc);
  }
}

// ---- the direct kernels' plan (their entries, and behind cuDNN's) ----

// The geometry and, chosen for the dtype, the launchers of the direct kernel, of the bias fill before a legacy cuDNN
// convolution and of the fused epilogue after either (conv behind cuDNN: relu and residual).
struct DirectPlan {
  ConvShape s;
  std::int64_t total = 0;  // output elements; 0: nothing to launch
  unsigned grid = 1;
  std::int64_t bias_plane = 1;  // elements per channel of y in fill_bias (1: channels last)
  bool nhwc = false;            // channels last: there is no direct kernel (cuDNN's entries only)
  bool relu = false, residual = false;
  void (*conv)(const StepLaunch&, const DirectPlan&) = nullptr;
  void (*fill_bias)(const StepLaunch&, const DirectPlan&) = nullptr;
  void (*epilogue)(const StepLaunch&, const DirectPlan&) = nullptr;
};

template <typename T, bool kTranspose>
void launch_direct_typed(const StepLaunch& launch, const DirectPlan& plan) {
  const T* x = static_cast<const T*>(launch.inputs.at(0).data);
  const T* weight = static_cast<const T*>(launch.inputs.at(1).data);
  const T* bias = static_cast<const T*>(launch.inputs.size() > 2 ? launch.inputs[2].data : nullptr);
  T* y = static_cast<T*>(launch.outputs.at(0).data);
  if constexpr (kTranspose) {
    launch_kernel(launch, conv_transpose_direct_kernel<T>, plan.grid, kThreads, 0, x, weight, bias, y, plan.s);
  } else {
    launch_kernel(launch, conv_direct_kernel<T>, plan.grid, kThreads, 0, x, weight, bias, y, plan.s);
  }
}

// y[n, o, ...] = bias[o]: the convolution then adds its result (beta = 1), so the sum is rounded once.
template <typename T>
__global__ void fill_bias_kernel(const T* __restrict__ bias, T* __restrict__ y, std::int64_t total, std::int64_t plane,
                                 std::int64_t channels) {
  wait_for_preceding_steps();
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[i] = bias[(i / plane) % channels];
  }
}

template <typename T>
void launch_fill_bias_typed(const StepLaunch& launch, const DirectPlan& plan) {
  launch_kernel(launch, fill_bias_kernel<T>, plan.grid, kThreads, 0, static_cast<const T*>(launch.inputs.at(2).data),
                static_cast<T*>(launch.outputs.at(0).data), plan.total, plan.bias_plane, plan.s.o);
}

// The fused epilogue after a direct convolution: y = relu(y + residual) (either part optional), in f32 (f64).
template <typename T>
__global__ void epilogue_kernel(T* __restrict__ y, const T* __restrict__ residual, std::int64_t total, bool relu) {
  wait_for_preceding_steps();
  using A = Accum<T>;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    A v = static_cast<A>(y[i]);
    if (residual != nullptr) v += static_cast<A>(residual[i]);
    if (relu && v < A(0)) v = A(0);
    y[i] = static_cast<T>(v);
  }
}

template <typename T>
void launch_epilogue_typed(const StepLaunch& launch, const DirectPlan& plan) {
  const void* residual = launch.inputs.size() > 3 ? launch.inputs[3].data : nullptr;
  launch_kernel(launch, epilogue_kernel<T>, plan.grid, kThreads, 0, static_cast<T*>(launch.outputs.at(0).data),
                static_cast<const T*>(residual), plan.total, plan.relu);
}

// Whether the layer has its optional input i: bound now or at each enqueue (a caller's buffer), or, in the builder's
// workspace queries where nothing is bound, named by the layer.
bool input_present(const StepLaunch& launch, std::size_t i) {
  if (i >= launch.inputs.size()) return false;
  if (launch.inputs[i].data != nullptr || launch.inputs[i].caller_buffer) return true;
  return launch.layer != nullptr && i < launch.layer->inputs.size() && launch.layer->inputs[i] >= 0;
}

template <bool kTranspose>
DirectPlan direct_plan(const StepLaunch& launch, const ConvShape& s) {
  DirectPlan plan;
  plan.s = s;
  plan.total = s.n * s.o * s.oh * s.ow;
  if (plan.total == 0) return plan;
  plan.grid = grid_for(plan.total);
  plan.nhwc = channels_last(launch);
  plan.bias_plane = plan.nhwc ? 1 : s.oh * s.ow;  // channels last: the channel is the innermost dim
  const bool handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    plan.conv = &launch_direct_typed<T, kTranspose>;
    plan.fill_bias = &launch_fill_bias_typed<T>;
    plan.epilogue = &launch_epilogue_typed<T>;
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA convolution kernel");
  return plan;
}

template <bool kTranspose>
DirectPlan prepare_conv_direct(const StepLaunch& launch) {
  return direct_plan<kTranspose>(launch, conv_shape(launch));
}

void launch_conv_direct(const StepLaunch& launch, const DirectPlan& plan) {
  if (plan.total == 0) return;
  plan.conv(launch, plan);
}

// The fused epilogue after a convolution that did not include it (either part optional).
void run_epilogue(const StepLaunch& launch, const DirectPlan& plan) {
  if ((!plan.residual && !plan.relu) || plan.total == 0) return;
  plan.epilogue(launch, plan);
}

[[noreturn]] void throw_no_direct_kernel(const StepLaunch& launch) {
  throw CudaError(layer_name(launch) +
                  ": cuDNN cannot run this channels-last convolution and there is no direct kernel for it");
}

// The direct kernel and then the fused epilogue; channels last has no direct kernel.
void run_conv_fallback(const StepLaunch& launch, const DirectPlan& plan) {
  if (plan.nhwc) throw_no_direct_kernel(launch);
  launch_conv_direct(launch, plan);
  run_epilogue(launch, plan);
}

// ---- cuDNN ----

// The descriptors of the forward convolution that a layer is (conv) or is the data gradient of (conv_transpose2d):
// `in` [n, in_c, in_h, in_w] convolved with the filter [k, in_c/groups, kh, kw] gives `out` [n, k, out_h, out_w].
struct CudnnConv {
  TensorDesc in, out;
  FilterDesc filter;
  ConvDesc conv;
};

// Whether every dim, count and attribute of the problem fits cuDNN's int descriptors.
bool fits_cudnn(const ConvShape& s) {
  constexpr std::int64_t kMax = INT_MAX;
  const std::array<std::int64_t, 16> values = {s.n,  s.c,  s.h,  s.w,  s.o,  s.kh, s.kw, s.oh,
                                               s.ow, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw, s.groups};
  for (std::int64_t v : values) {
    if (v < 0 || v > kMax) return false;
  }
  return s.n * s.c * s.h * s.w <= kMax && s.n * s.o * s.oh * s.ow <= kMax &&
         s.o * (s.c / s.groups) * s.kh * s.kw <= kMax;
}

void make_cudnn_conv(const StepLaunch& launch, const ConvShape& s, bool transpose, CudnnConv& d) {
  const cudnnTensorFormat_t format = !transpose && channels_last(launch) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const DataType dtype = launch.inputs.at(0).dtype;
  const cudnnDataType_t type = cudnn_type(dtype);
  const cudnnDataType_t compute = dtype == DataType::kF64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  auto i = [](std::int64_t v) { return static_cast<int>(v); };
  // conv: in = x, out = y, filter [o, c/g, kh, kw]. conv_transpose2d: in = y, out = x, filter [c, o/g, kh, kw].
  const std::int64_t in_c = transpose ? s.o : s.c, out_c = transpose ? s.c : s.o;
  const std::int64_t in_h = transpose ? s.oh : s.h, in_w = transpose ? s.ow : s.w;
  const std::int64_t out_h = transpose ? s.h : s.oh, out_w = transpose ? s.w : s.ow;
  check_cudnn(cudnnCreateTensorDescriptor(&d.in.d), "cudnnCreateTensorDescriptor", launch);
  check_cudnn(cudnnCreateTensorDescriptor(&d.out.d), "cudnnCreateTensorDescriptor", launch);
  check_cudnn(cudnnCreateFilterDescriptor(&d.filter.d), "cudnnCreateFilterDescriptor", launch);
  check_cudnn(cudnnCreateConvolutionDescriptor(&d.conv.d), "cudnnCreateConvolutionDescriptor", launch);
  check_cudnn(cudnnSetTensor4dDescriptor(d.in.d, format, type, i(s.n), i(in_c), i(in_h), i(in_w)),
              "cudnnSetTensor4dDescriptor", launch);
  check_cudnn(cudnnSetTensor4dDescriptor(d.out.d, format, type, i(s.n), i(out_c), i(out_h), i(out_w)),
              "cudnnSetTensor4dDescriptor", launch);
  check_cudnn(cudnnSetFilter4dDescriptor(d.filter.d, type, format, i(out_c), i(in_c / s.groups), i(s.kh), i(s.kw)),
              "cudnnSetFilter4dDescriptor", launch);
  check_cudnn(cudnnSetConvolution2dDescriptor(d.conv.d, i(s.ph), i(s.pw), i(s.sh), i(s.sw), i(s.dh), i(s.dw),
                                              CUDNN_CROSS_CORRELATION, compute),
              "cudnnSetConvolution2dDescriptor", launch);
  check_cudnn(cudnnSetConvolutionGroupCount(d.conv.d, i(s.groups)), "cudnnSetConvolutionGroupCount", launch);
}

// The math type a heuristic result may run with, or false to skip it. f32 without Precision::kTf32 runs on FMA
// kernels only (CUDNN_DEFAULT_MATH would let cuDNN 8+ use TF32 tensor cores); with kTf32 TF32 is allowed but no
// down-conversion to f16. f16/bf16 (f32 compute) take what the heuristic proposes.
bool math_for(DataType dtype, Precision precision, cudnnMathType_t proposed, cudnnMathType_t& math) {
  if (dtype == DataType::kF32) {
    if (precision != Precision::kTf32) {
      math = CUDNN_FMA_MATH;
      return true;
    }
    if (proposed == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  }
  math = proposed;
  return true;
}

cudnnMathType_t query_math(DataType dtype, Precision precision) {
  if (dtype == DataType::kF32) return precision == Precision::kTf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  if (dtype == DataType::kF64) return CUDNN_DEFAULT_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

// The chosen algorithm of a problem, or none (the direct kernel runs instead).
struct AlgoChoice {
  bool use_cudnn = false;
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t workspace_bytes = 0;  // what the algorithm needs
};

// The two kinds of legacy algorithms: the forward convolution (conv) and its data gradient (conv_transpose2d), that is
// the cuDNN calls that differ between them and which results are never chosen.
struct ForwardAlgos {
  using Algo = cudnnConvolutionFwdAlgo_t;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  static constexpr const char* kMaxCountCall = "cudnnGetConvolutionForwardAlgorithmMaxCount";
  static constexpr const char* kHeuristicsCall = "cudnnGetConvolutionForwardAlgorithm_v7";
  // FFT-based algorithms round far from the exact sum when outputs cancel; they are never chosen.
  static bool usable(const Perf& p) {
    return p.algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT && p.algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
  }
  static cudnnStatus_t max_count(cudnnHandle_t handle, int* count) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(handle, count);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t handle, const CudnnConv& d, int requested, int* returned, Perf* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(handle, d.in.d, d.filter.d, d.conv.d, d.out.d, requested, returned,
                                                  perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t handle, const CudnnConv& d, Algo algo, std::size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(handle, d.in.d, d.filter.d, d.conv.d, d.out.d, algo, bytes);
  }
};
struct BackwardDataAlgos {
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  static constexpr const char* kMaxCountCall = "cudnnGetConvolutionBackwardDataAlgorithmMaxCount";
  static constexpr const char* kHeuristicsCall = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
  // Besides the FFT ones, ALGO_0 accumulates with atomics (results vary from run to run), and so do the other
  // non-deterministic ones.
  static bool usable(const Perf& p) {
    return p.algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT && p.algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING &&
           p.algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 && p.determinism == CUDNN_DETERMINISTIC;
  }
  static cudnnStatus_t max_count(cudnnHandle_t handle, int* count) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, count);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t handle, const CudnnConv& d, int requested, int* returned, Perf* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.filter.d, d.out.d, d.conv.d, d.in.d, requested,
                                                       returned, perf);
  }
  static cudnnStatus_t workspace(cudnnHandle_t handle, const CudnnConv& d, Algo algo, std::size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.filter.d, d.out.d, d.conv.d, d.in.d, algo, bytes);
  }
};

// The heuristics' first usable algorithm whose workspace fits `limit`, with its math type; none when cuDNN refuses the
// problem or has none. Leaves d's math type at the last one tried.
template <typename Algos>
AlgoChoice choose_algo(const StepLaunch& launch, cudnnHandle_t handle, CudnnConv& d, std::size_t limit) {
  const DataType dtype = launch.inputs.at(0).dtype;
  check_cudnn(cudnnSetConvolutionMathType(d.conv.d, query_math(dtype, launch.precision)), "cudnnSetConvolutionMathType",
              launch);
  int max_count = 0;
  check_cudnn(Algos::max_count(handle, &max_count), Algos::kMaxCountCall, launch);
  std::vector<typename Algos::Perf> perf(static_cast<std::size_t>(std::max(max_count, 1)));
  int returned = 0;
  const cudnnStatus_t status = Algos::heuristics(handle, d, static_cast<int>(perf.size()), &returned, perf.data());
  if (is_refusal(status)) return {};
  check_cudnn(status, Algos::kHeuristicsCall, launch);
  for (int r = 0; r < returned; ++r) {
    const typename Algos::Perf& p = perf[static_cast<std::size_t>(r)];
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (p.status != CUDNN_STATUS_SUCCESS || !Algos::usable(p) || !math_for(dtype, launch.precision, p.mathType, math)) {
      continue;
    }
    if (cudnnSetConvolutionMathType(d.conv.d, math) != CUDNN_STATUS_SUCCESS) continue;
    std::size_t bytes = 0;
    if (Algos::workspace(handle, d, p.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > limit) continue;
    return {true, static_cast<int>(p.algo), math, bytes};
  }
  return {};
}

// Whether a forward convolution runs as a cuDNN graph plan: f16/bf16 2D problems.
bool graph_eligible(const StepLaunch& launch) {
  const DataType dtype = launch.inputs.at(0).dtype;
  return (dtype == DataType::kF16 || dtype == DataType::kBF16) && graph_aligned(launch);
}

ConvGraphProblem graph_problem(const StepLaunch& launch, const ConvShape& s) {
  ConvGraphProblem p;
  p.n = s.n, p.c = s.c, p.h = s.h, p.w = s.w, p.o = s.o, p.kh = s.kh, p.kw = s.kw, p.oh = s.oh, p.ow = s.ow;
  p.sh = s.sh, p.sw = s.sw, p.ph = s.ph, p.pw = s.pw, p.dh = s.dh, p.dw = s.dw, p.groups = s.groups;
  p.type = launch.inputs.at(0).dtype == DataType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  p.input_type = p.output_type = p.type;  // x and w as y (input_type's default is f16: bf16 needs it set)
  p.nhwc = channels_last(launch);
  p.bias = input_present(launch, 2);
  p.residual = input_present(launch, 3);
  p.relu = launch.attrs->get_string("activation", "none") == "relu";
  return p;
}

// The plan of the cuDNN entries. Prepared: the graph plan (f16/bf16 conv whose known pointers are 16-byte aligned)
// and, for what has none or binds a caller's buffer (a launch with one that is not aligned runs the legacy API), the
// legacy API's algorithm and descriptors (math type set); the direct kernel behind both.
struct CudnnConvPlan {
  DirectPlan direct;  // problems cuDNN refuses: when prepared, or when a legacy call returns a refusal
  cudnnHandle_t handle = nullptr;
  std::size_t limit = 0;  // the scratch cuDNN may use: launch.workspace_bytes (0 without scratch)
  bool has_bias = false;
  bool f64 = false;
  // The whole layer (bias, residual and relu included) as one cuDNN graph plan.
  std::unique_ptr<ConvGraphPlan> graph;
  AlgoChoice choice;  // none: the direct kernel runs (when there is no graph plan, or a launch cannot use it)
  CudnnConv desc;
  // The fused epilogue's (relu; cudnnConvolutionBiasActivationForward): the bias [1, O, 1, 1] and the activation.
  TensorDesc bias;
  ActivationDesc activation;
};

template <bool kTranspose>
void plan_legacy(const StepLaunch& launch, const ConvShape& s, CudnnConvPlan& plan) {
  make_cudnn_conv(launch, s, kTranspose, plan.desc);
  using Algos = std::conditional_t<kTranspose, BackwardDataAlgos, ForwardAlgos>;
  plan.choice = choose_algo<Algos>(launch, plan.handle, plan.desc, plan.limit);
  if (!plan.choice.use_cudnn) {
    plan.desc = CudnnConv{};
    return;
  }
  check_cudnn(cudnnSetConvolutionMathType(plan.desc.conv.d, plan.choice.math), "cudnnSetConvolutionMathType", launch);
  if (!kTranspose && plan.direct.relu) {
    const DataType dtype = launch.outputs.at(0).dtype;
    check_cudnn(cudnnCreateTensorDescriptor(&plan.bias.d), "cudnnCreateTensorDescriptor", launch);
    check_cudnn(cudnnSetTensor4dDescriptor(plan.bias.d, plan.direct.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                           cudnn_type(dtype), 1, static_cast<int>(s.o), 1, 1),
                "cudnnSetTensor4dDescriptor", launch);
    check_cudnn(cudnnCreateActivationDescriptor(&plan.activation.d), "cudnnCreateActivationDescriptor", launch);
    check_cudnn(cudnnSetActivationDescriptor(plan.activation.d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
                "cudnnSetActivationDescriptor", launch);
  }
}

// conv (kTranspose = false) through cudnnConvolutionForward, conv_transpose2d through cudnnConvolutionBackwardData.
// Problems cuDNN refuses (sizes beyond its int descriptors, output_padding that its geometry cannot express, no
// algorithm within the workspace) run the direct kernel, which computes the same thing.
// The graph plan of index `plan_index` in cuDNN's heuristics list (build_all's `skip`; 0: build's first), or, past the
// list's end, the first one again; nullptr when cuDNN has none. Steps of one problem on one handle (an execution
// context's repeated layers) share one finalized plan.
std::unique_ptr<ConvGraphPlan> build_graph_plan(cudnnHandle_t handle, const ConvGraphProblem& problem,
                                                std::size_t limit, std::size_t plan_index) {
  return ConvGraphPlan::build_shared(handle, problem, limit, plan_index);
}

template <bool kTranspose, std::size_t kPlanIndex = 0>
CudnnConvPlan prepare_conv_cudnn(const StepLaunch& launch) {
  require_cudnn9(launch);
  const ConvShape s = conv_shape(launch);
  CudnnConvPlan plan;
  plan.direct = direct_plan<kTranspose>(launch, s);
  if (plan.direct.total == 0) return plan;
  if (!kTranspose) {  // what the builder fused into a conv: the relu and input 3 (residual)
    plan.direct.relu = launch.attrs->get_string("activation", "none") == "relu";
    plan.direct.residual = input_present(launch, 3);
  }
  bool geometry_ok = fits_cudnn(s);
  if (kTranspose && geometry_ok) {
    // cuDNN derives the data gradient's shape from the forward convolution of y; output_padding >= stride (allowed
    // when smaller than the dilation) gives a y that convolves to more than x's size.
    const std::int64_t fh = (s.oh + 2 * s.ph - s.dh * (s.kh - 1) - 1) / s.sh + 1;
    const std::int64_t fw = (s.ow + 2 * s.pw - s.dw * (s.kw - 1) - 1) / s.sw + 1;
    geometry_ok = fh == s.h && fw == s.w;
  }
  if (!geometry_ok) {
    if (plan.direct.nhwc) throw_no_direct_kernel(launch);
    return plan;
  }

  plan.handle = launch.handles->cudnn(layer_name(launch));
  plan.limit = launch.workspace != nullptr ? launch.workspace_bytes : 0;
  plan.has_bias = input_present(launch, 2);
  plan.f64 = launch.inputs.at(0).dtype == DataType::kF64;
  if (!kTranspose && graph_eligible(launch)) {
    plan.graph = build_graph_plan(plan.handle, graph_problem(launch, s), plan.limit, kPlanIndex);
    if (plan.graph != nullptr && plan.graph->workspace_bytes() > plan.limit) {
      throw CudaError(layer_name(launch) + ": the cuDNN plan needs " + std::to_string(plan.graph->workspace_bytes()) +
                      " bytes of scratch but the step has " + std::to_string(plan.limit));
    }
  }
  if (plan.graph == nullptr || binds_caller_buffer(launch)) plan_legacy<kTranspose>(launch, s, plan);
  if (plan.graph == nullptr && !plan.choice.use_cudnn && plan.direct.nhwc) throw_no_direct_kernel(launch);
  return plan;
}

template <bool kTranspose>
void launch_conv_cudnn(const StepLaunch& launch, const CudnnConvPlan& plan) {
  if (plan.direct.total == 0) return;
  const bool graph = plan.graph != nullptr && graph_aligned(launch);
  if (!graph && !plan.choice.use_cudnn) return run_conv_fallback(launch, plan.direct);
  check_cudnn(cudnnSetStream(plan.handle, launch.stream), "cudnnSetStream", launch);
  if (graph) {
    const auto data = [&](std::size_t i) -> const void* {
      return i < launch.inputs.size() ? launch.inputs[i].data : nullptr;
    };
    return check_cudnn(plan.graph->execute(plan.handle, data(0), data(1), nullptr, data(2), data(3), nullptr, nullptr,
                                           launch.outputs.at(0).data, launch.workspace),
                       "cudnnBackendExecute", launch);
  }
  const CudnnConv& d = plan.desc;
  const AlgoChoice& choice = plan.choice;

  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  const void* bias = plan.has_bias ? launch.inputs.at(2).data : nullptr;
  void* y = launch.outputs.at(0).data;
  if (plan.direct.relu && plan.has_bias && plan.activation.d != nullptr) {
    // relu(conv + alpha2 · z + bias), z the residual (or y itself with alpha2 = 0); f16/bf16 accumulate in f32.
    const float one = 1.0F, zero = 0.0F;
    const void* residual = plan.direct.residual ? launch.inputs.at(3).data : nullptr;
    const void* z = residual != nullptr ? residual : y;
    const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
        plan.handle, &one, d.in.d, x.data, d.filter.d, weight.data, d.conv.d,
        static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), launch.workspace, plan.limit,
        residual != nullptr ? &one : &zero, d.out.d, z, plan.bias.d, bias, plan.activation.d, d.out.d, y);
    if (is_refusal(status)) return run_conv_fallback(launch, plan.direct);
    return check_cudnn(status, "cudnnConvolutionBiasActivationForward", launch);
  }
  if (plan.has_bias) {
    plan.direct.fill_bias(launch, plan.direct);
  }
  const double alpha_d = 1.0, beta_d = plan.has_bias ? 1.0 : 0.0;
  const float alpha_f = 1.0F, beta_f = plan.has_bias ? 1.0F : 0.0F;
  const void* alpha = plan.f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = plan.f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  const char* call = nullptr;
  if constexpr (kTranspose) {
    call = "cudnnConvolutionBackwardData";
    status = cudnnConvolutionBackwardData(plan.handle, alpha, d.filter.d, weight.data, d.out.d, x.data, d.conv.d,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo), launch.workspace,
                                          plan.limit, beta, d.in.d, y);
  } else {
    call = "cudnnConvolutionForward";
    status = cudnnConvolutionForward(plan.handle, alpha, d.in.d, x.data, d.filter.d, weight.data, d.conv.d,
                                     static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), launch.workspace, plan.limit,
                                     beta, d.out.d, y);
  }
  // A refusal now: the direct kernel writes every output element, bias included (the plan keeps the choice, so a
  // later launch asks cuDNN again).
  if (is_refusal(status)) return run_conv_fallback(launch, plan.direct);
  check_cudnn(status, call, launch);
  run_epilogue(launch, plan.direct);  // an epilogue without a bias (the builder fuses only with one)
}

// The builder's cuDNN handle for conv_workspace (no execution context exists then): one per device, made on first use
// and kept for the process (destroying cuDNN handles at exit can run after the CUDA context is gone). Builds on
// several threads share it under the lock; the queries are host-only.
class WorkspaceQueryHandle {
 public:
  explicit WorkspaceQueryHandle(const StepLaunch& launch) : lock_(mutex()) {
    int device = 0;
    TENSORACLE_CUDA_CHECK(cudaGetDevice(&device), layer_name(launch));
    cudnnHandle_t& handle = handles()[device];
    if (handle == nullptr) check_cudnn(cudnnCreate(&handle), "cudnnCreate", launch);
    handle_ = handle;
  }
  cudnnHandle_t get() const { return handle_; }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<int, cudnnHandle_t>& handles() {
    static auto* by_device = new std::map<int, cudnnHandle_t>;  // intentionally leaked, with the handles
    return *by_device;
  }

  std::lock_guard<std::mutex> lock_;
  cudnnHandle_t handle_ = nullptr;
};

// The workspace of the algorithm a forward convolution will pick (the heuristic's first that fits
// kCudnnWorkspaceBytes) at these shapes; 0 when the direct kernel runs it.
template <std::size_t kPlanIndex = 0>
std::size_t conv_workspace(const graph::Graph& graph, const graph::Layer& layer, const std::vector<Dims>& shapes,
                           Precision precision) {
  graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  StepLaunch launch;
  launch.layer = &layer;
  launch.attrs = &attrs;
  launch.precision = precision;
  auto tensor = [&](std::int32_t id) {
    DeviceTensor t;
    if (id >= 0) {
      t.dtype = graph.tensor(id).dtype;
      t.shape = shapes.at(static_cast<std::size_t>(id));
    }
    return t;
  };
  for (auto id : layer.inputs) launch.inputs.push_back(tensor(id));
  for (auto id : layer.outputs) launch.outputs.push_back(tensor(id));
  const ConvShape s = conv_shape(launch);
  if (s.n * s.o * s.oh * s.ow == 0 || !fits_cudnn(s)) return 0;
  const WorkspaceQueryHandle handle(launch);
  if (graph_eligible(launch)) {
    const std::unique_ptr<ConvGraphPlan> plan =
        build_graph_plan(handle.get(), graph_problem(launch, s), kCudnnWorkspaceBytes, kPlanIndex);
    if (plan != nullptr) return plan->workspace_bytes();
  }
  CudnnConv d;
  make_cudnn_conv(launch, s, false, d);
  const AlgoChoice choice = choose_algo<ForwardAlgos>(launch, handle.get(), d, kCudnnWorkspaceBytes);
  return choice.use_cudnn ? choice.workspace_bytes : 0;
}

// ---- supports ----

std::string layer_string(const graph::Layer& layer, const char* name, const char* fallback) {
  return graph::AttrReader(layer.attrs, layer.name, layer.op).get_string(name, fallback);
}
bool layer_channels_last(const graph::Layer& layer) { return layer_string(layer, "layout", "nchw") == "nhwc"; }
bool layer_fused(const graph::Layer& layer) {
  return layer_string(layer, "activation", "none") != "none" || has_tensor(layer, 3);
}

// cuDNN runs channels first and (f16, bf16, f32) channels last, with or without a fused epilogue.
template <DataType kDtype>
bool supports_conv(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer_channels_last(layer) && (kDtype == DataType::kF64 || graph.tensor(layer.inputs[0]).shape.size() != 4)) {
    return false;
  }
  return has_tensor(layer, 1) && all_dtype<kDtype>(graph, layer, 3, 4);
}
// The direct kernel: channels first, no fused epilogue (it runs behind cuDNN for those).
template <DataType kDtype>
bool supports_conv_direct(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return !layer_channels_last(layer) && !layer_fused(layer) && supports_conv<kDtype>(graph, layer, precision);
}

// cuDNN's next graph plans: f16/bf16 forward convolutions (those the graph API takes; the others run as the first
// entry does).
template <DataType kDtype>
bool supports_conv_graph(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return (kDtype == DataType::kF16 || kDtype == DataType::kBF16) && supports_conv<kDtype>(graph, layer, precision);
}

template <DataType kDtype>
bool supports_conv_transpose(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return has_tensor(layer, 1) && all_dtype<kDtype>(graph, layer, 4, 4);
}

}  // namespace

#define TENSORACLE_CONV_GRAPH_PLAN_ENTRIES(INDEX)                                                                    \
  prepared_kernel<prepare_conv_cudnn<false, INDEX>, launch_conv_cudnn<false>>(                                       \
      "conv_f16_f32math_cudnn_plan" #INDEX, "conv", supports_conv_graph<DataType::kF16>, ws, conv_workspace<INDEX>), \
      prepared_kernel<prepare_conv_cudnn<false, INDEX>, launch_conv_cudnn<false>>(                                   \
          "conv_bf16_f32math_cudnn_plan" #INDEX, "conv", supports_conv_graph<DataType::kBF16>, ws,                   \
          conv_workspace<INDEX>)

void register_convolution_kernels(std::vector<KernelEntry>& kernels) {
  const std::size_t ws = kCudnnWorkspaceBytes;
  const std::vector<KernelEntry> entries = {
      // conv: cuDNN first (f32 on FMA kernels unless Precision::kTf32), then the direct kernel.
      TENSORACLE_CONV_ENTRIES("conv", "", "f32math_", "cudnn", supports_conv, prepare_conv_cudnn<false>,
                              launch_conv_cudnn<false>, ws, conv_workspace<0>),
      // f16/bf16: cuDNN's next four graph plans (the heuristics' first is not always the fastest), timed against
      // the first by the builder.
      TENSORACLE_CONV_GRAPH_PLAN_ENTRIES(1),
      TENSORACLE_CONV_GRAPH_PLAN_ENTRIES(2),
      TENSORACLE_CONV_GRAPH_PLAN_ENTRIES(3),
      TENSORACLE_CONV_GRAPH_PLAN_ENTRIES(4),
      TENSORACLE_CONV_ENTRIES("conv", "", "f32math_", "direct", supports_conv_direct, prepare_conv_direct<false>,
                              launch_conv_direct, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("conv_transpose2d", "", "f32math_", "cudnn", supports_conv_transpose,
                              prepare_conv_cudnn<true>, launch_conv_cudnn<true>, ws, nullptr),
      TENSORACLE_CONV_ENTRIES("conv_transpose2d", "", "f32math_", "direct", supports_conv_transpose,
                              prepare_conv_direct<true>, launch_conv_direct, 0, nullptr),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

#undef TENSORACLE_CONV_GRAPH_PLAN_ENTRIES

}  // namespace tensoracle::cuda
