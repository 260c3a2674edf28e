// CUDA kernels of quantized_conv (a 2D convolution of i8 or f8e4m3 x and weight, its sum scaled per output channel,
// plus bias and residual (float, or quantized times its scale), through relu, the result in a float type or quantized
// again): a cuDNN graph plan for channels-last layers (i8 summed in i32, f8e4m3 in f32, the epilogue in f32 and rounded
// once; a quantized result is that value divided by the output scale, converted by cuDNN) and a direct kernel for every
// layout, dtype and problem, behind it (a quantized result as the other quantized kernels round it,
// kernels::quantize_result). Semantics follow the CPU reference (src/backends/cpu/kernels/convolution.cpp), which sums
// in double: i8 sums agree exactly (within i32), f8e4m3 sums to f32 rounding. On sm_90, an i8 1x1 convolution with relu
// and an i8 result (a ResNet block's first and last) is also a CUTLASS product of [n·h·w, c] by the weight [o, c]ᵀ
// with the residual (i8 times its scale, or f16) read in its epilogue (cutlass_gemm_sm90.hpp), timed against the cuDNN
// plans.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/cudnn_conv_graph.hpp"
#include "backends/cuda/kernels/cudnn_util.hpp"
#include "backends/cuda/kernels/cutlass_gemm_sm90.hpp"

namespace tensoracle::cuda {
namespace {

using conv_family::binds_caller_buffer;
using conv_family::channels_last;
using conv_family::check_cudnn;
using conv_family::conv_shape;
using conv_family::ConvShape;
using conv_family::graph_aligned;
using conv_family::require_cudnn9;
using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels

// cuDNN's scratch for these plans, at most.
constexpr std::size_t kWorkspaceBytes = std::size_t{64} << 20;

// i8 operands multiply and sum in i32 (exact); f8e4m3 ones in f32 (each product exact).
__device__ __forceinline__ std::int32_t operand(std::int8_t v) { return v; }
__device__ __forceinline__ float operand(F8E4M3 v) { return to_compute(v); }

// The residual's form: none, in the epilogue's type, or quantized (i8 / f8e4m3, times residual_scale).
enum class Residual : std::uint8_t { kNone, kEpilogue, kI8, kF8E4M3 };

template <typename Epi>
__device__ __forceinline__ float residual_value(const void* residual, Residual kind, std::int64_t i,
                                                const float* residual_scale) {
  switch (kind) {
    case Residual::kEpilogue: return to_compute_arith(static_cast<const Epi*>(residual)[i]);
    case Residual::kI8: return static_cast<float>(static_cast<const std::int8_t*>(residual)[i]) * *residual_scale;
    case Residual::kF8E4M3: return to_compute(static_cast<const F8E4M3*>(residual)[i]) * *residual_scale;
    default: return 0.0F;
  }
}

// One output element per thread (a grid-stride loop), the taps summed in order. Epi is `to` (the bias's type and a
// float residual's); Out is Epi, or i8 / F8E4M3 for a result quantized by output_scale.
template <typename In, typename Epi, typename Out>
__global__ void quantized_conv_direct(const In* __restrict__ x, const In* __restrict__ w,
                                      const float* __restrict__ scale, const Epi* __restrict__ bias,
                                      const void* __restrict__ residual, Residual residual_kind,
                                      const float* __restrict__ residual_scale, const float* __restrict__ output_scale,
                                      Out* __restrict__ y, ConvShape s, bool nhwc, bool relu) {
  wait_for_preceding_steps();
  using Acc = decltype(operand(In{}));
  const std::int64_t total = s.n * s.o * s.oh * s.ow;
  const std::int64_t group_in = s.c / s.groups, group_out = s.o / s.groups;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    std::int64_t n = 0, o = 0, oh = 0, ow = 0;
    if (nhwc) {
      o = i % s.o, ow = i / s.o % s.ow, oh = i / (s.o * s.ow) % s.oh, n = i / (s.o * s.ow * s.oh);
    } else {
      ow = i % s.ow, oh = i / s.ow % s.oh, o = i / (s.ow * s.oh) % s.o, n = i / (s.ow * s.oh * s.o);
    }
    const std::int64_t first_channel = o / group_out * group_in;
    Acc acc = 0;
    for (std::int64_t c = 0; c < group_in; ++c) {
      const std::int64_t channel = first_channel + c;
      for (std::int64_t a = 0; a < s.kh; ++a) {
        const std::int64_t ih = oh * s.sh - s.ph + a * s.dh;
        if (ih < 0 || ih >= s.h) continue;
        for (std::int64_t b = 0; b < s.kw; ++b) {
          const std::int64_t iw = ow * s.sw - s.pw + b * s.dw;
          if (iw < 0 || iw >= s.w) continue;
          const std::int64_t xi =
              nhwc ? ((n * s.h + ih) * s.w + iw) * s.c + channel : ((n * s.c + channel) * s.h + ih) * s.w + iw;
          const std::int64_t wi =
              nhwc ? ((o * s.kh + a) * s.kw + b) * group_in + c : ((o * group_in + c) * s.kh + a) * s.kw + b;
          acc += operand(x[xi]) * operand(w[wi]);
        }
      }
    }
    float v = static_cast<float>(acc) * scale[o];
    if (bias != nullptr) v += to_compute_arith(bias[o]);
    if (residual_kind != Residual::kNone) v += residual_value<Epi>(residual, residual_kind, i, residual_scale);
    if (relu && v < 0.0F) v = 0.0F;
    if constexpr (std::is_same_v<Out, Epi>) {
      y[i] = from_compute<Out>(v);
    } else {
      y[i] = quantize_result<Out>(v, __frcp_rn(*output_scale));
    }
  }
}

// The plan: the cuDNN graph (channels last, the pointers known when prepared 16-byte aligned, a plan that cuDNN
// offers), else the direct kernel; a launch whose caller buffers are not aligned also runs the direct kernel.
struct QuantizedConvPlan {
  using RunFn = void (*)(const StepLaunch& launch, const QuantizedConvPlan& plan);
  RunFn direct = nullptr;  // nullptr: an empty output, nothing to launch
  ConvShape shape;
  bool nhwc = false, relu = false, bias = false, residual = false, quantized_output = false;
  Residual residual_kind = Residual::kNone;
  cudnnHandle_t handle = nullptr;
  std::unique_ptr<ConvGraphPlan> graph;
  // The CUTLASS product instead of the graph (a 1x1 convolution); planned again at each enqueue when rebind (a caller's
  // buffer), running the direct kernel for buffers that are not 16-byte aligned.
  std::unique_ptr<sm90::FusedGemm> gemm;
  sm90::GemmProblem problem;
  bool rebind = false;
};

template <typename In, typename Epi, typename Out>
void run_direct(const StepLaunch& launch, const QuantizedConvPlan& p) {
  const ConvShape& s = p.shape;
  launch_kernel(launch, quantized_conv_direct<In, Epi, Out>, grid_for(s.n * s.o * s.oh * s.ow), kThreads, 0,
                static_cast<const In*>(launch.inputs[0].data), static_cast<const In*>(launch.inputs[1].data),
                static_cast<const float*>(launch.inputs[2].data),
                p.bias ? static_cast<const Epi*>(launch.inputs[3].data) : nullptr,
                p.residual ? launch.inputs[4].data : nullptr, p.residual_kind,
                p.residual_kind == Residual::kI8 || p.residual_kind == Residual::kF8E4M3
                    ? static_cast<const float*>(launch.inputs[6].data)
                    : nullptr,
                p.quantized_output ? static_cast<const float*>(launch.inputs[5].data) : nullptr,
                static_cast<Out*>(launch.outputs[0].data), s, p.nhwc, p.relu);
}

// The result in Epi itself, or quantized to `out`.
template <typename In, typename Epi>
QuantizedConvPlan::RunFn direct_for(DataType out) {
  switch (out) {
    case DataType::kI8: return run_direct<In, Epi, std::int8_t>;
    case DataType::kF8E4M3: return run_direct<In, Epi, F8E4M3>;
    default: return run_direct<In, Epi, Epi>;
  }
}

template <typename In>
QuantizedConvPlan::RunFn direct_for(DataType epilogue, DataType out) {
  switch (epilogue) {
    case DataType::kF16: return direct_for<In, F16>(out);
    case DataType::kBF16: return direct_for<In, BF16>(out);
    default: return direct_for<In, float>(out);
  }
}

cudnnDataType_t cudnn_result_type(DataType dtype) {
  switch (dtype) {
    case DataType::kF16: return CUDNN_DATA_HALF;
    case DataType::kBF16: return CUDNN_DATA_BFLOAT16;
    case DataType::kI8: return CUDNN_DATA_INT8;
    case DataType::kF8E4M3: return CUDNN_DATA_FP8_E4M3;
    default: return CUDNN_DATA_FLOAT;
  }
}

ConvGraphProblem graph_problem(const StepLaunch& launch, const QuantizedConvPlan& plan) {
  const ConvShape& s = plan.shape;
  ConvGraphProblem p;
  p.n = s.n, p.c = s.c, p.h = s.h, p.w = s.w, p.o = s.o, p.kh = s.kh, p.kw = s.kw, p.oh = s.oh, p.ow = s.ow;
  p.sh = s.sh, p.sw = s.sw, p.ph = s.ph, p.pw = s.pw, p.dh = s.dh, p.dw = s.dw, p.groups = s.groups;
  const bool i8 = launch.inputs.at(0).dtype == DataType::kI8;
  p.input_type = i8 ? CUDNN_DATA_INT8 : CUDNN_DATA_FP8_E4M3;
  p.compute = i8 ? CUDNN_DATA_INT32 : CUDNN_DATA_FLOAT;  // what cuDNN's i8 engines take (f32 has none on sm_90)
  p.type = cudnn_result_type(launch.attrs->get_dtype("to", DataType::kF32));
  p.output_type = cudnn_result_type(launch.outputs.at(0).dtype);
  p.nhwc = true;
  p.scale = true;
  p.bias = plan.bias;
  p.residual = plan.residual;
  p.residual_scale = plan.residual_kind == Residual::kI8 || plan.residual_kind == Residual::kF8E4M3;
  if (p.residual_scale) p.residual_type = plan.residual_kind == Residual::kI8 ? CUDNN_DATA_INT8 : CUDNN_DATA_FP8_E4M3;
  p.relu = plan.relu;
  p.output_scale = plan.quantized_output;
  return p;
}

// Sums of at most 2^17 i8 products (each within 2^14) stay within i32.
constexpr std::int64_t kMaxI8Taps = std::int64_t{1} << 17;

QuantizedConvPlan prepare_direct(const StepLaunch& launch) {
  QuantizedConvPlan plan;
  plan.shape = conv_shape(launch);
  const ConvShape& s = plan.shape;
  plan.nhwc = channels_last(launch);
  plan.relu = launch.attrs->get_string("activation", "none") == "relu";
  plan.bias = present(launch, 3);
  plan.residual = present(launch, 4);
  plan.quantized_output = present(launch, 5);
  if (plan.residual) {
    const bool quantized = present(launch, 6);
    const DataType r = launch.inputs[4].dtype;
    plan.residual_kind = !quantized               ? Residual::kEpilogue
                         : r == DataType::kI8     ? Residual::kI8
                         : r == DataType::kF8E4M3 ? Residual::kF8E4M3
                                                  : Residual::kNone;
    if (plan.residual_kind == Residual::kNone) launch.attrs->fail("a quantized residual must be i8 or f8e4m3");
  }
  if (s.n * s.o * s.oh * s.ow == 0) return plan;
  const DataType in = launch.inputs.at(0).dtype;
  if (in == DataType::kI8 && s.c / s.groups * s.kh * s.kw > kMaxI8Taps) {
    launch.attrs->fail(fmt::format("an i8 convolution over {} > {} terms per output could overflow its i32 sum",
                                   s.c / s.groups * s.kh * s.kw, kMaxI8Taps));
  }
  const DataType epilogue = launch.attrs->get_dtype("to", DataType::kF32), out = launch.outputs.at(0).dtype;
  plan.direct = in == DataType::kI8 ? direct_for<std::int8_t>(epilogue, out) : direct_for<F8E4M3>(epilogue, out);
  return plan;
}

// The plan of cuDNN's heuristics at index kIndex (counting the deterministic non-FFT ones; the next one when it does
// not build; the first one past the list's end; the direct kernel when there is none): each index is an entry of its
// own, timed against the others by the builder (the heuristics' first is not always the fastest: up to 1.4x slower on
// ResNet-50's shapes on the H200, bench/quantized_conv_probe.cpp). Only that plan is finalized (each finalization
// compiles a kernel).
template <std::size_t kIndex>
QuantizedConvPlan prepare_cudnn(const StepLaunch& launch) {
  QuantizedConvPlan plan = prepare_direct(launch);
  if (plan.direct == nullptr || !plan.nhwc || !graph_aligned(launch)) return plan;
  require_cudnn9(launch);
  plan.handle = launch.handles->cudnn(layer_name(launch));
  const std::size_t limit = launch.workspace != nullptr ? launch.workspace_bytes : 0;
  const ConvGraphProblem problem = graph_problem(launch, plan);
  std::vector<std::unique_ptr<ConvGraphPlan>> plans = ConvGraphPlan::build_all(plan.handle, problem, limit, 1, kIndex);
  // Past the list's end: the first plan again (timing the direct kernel at a large problem would take seconds).
  if (plans.empty() && kIndex > 0) plans = ConvGraphPlan::build_all(plan.handle, problem, limit, 1, 0);
  if (!plans.empty()) plan.graph = std::move(plans.front());
  return plan;
}

// Input i's address; nullptr for an absent input or a caller's buffer not bound yet.
const void* input_data(const StepLaunch& launch, std::size_t i) {
  return present(launch, i) ? launch.inputs[i].data : nullptr;
}

// The launch's addresses in the CUTLASS product's problem.
void bind_addresses(const StepLaunch& launch, sm90::GemmProblem& p) {
  p.a = input_data(launch, 0);
  p.b = input_data(launch, 1);
  p.scale = static_cast<const float*>(input_data(launch, 2));
  p.bias = input_data(launch, 3);
  p.c = input_data(launch, 4);
  p.output_scale = static_cast<const float*>(input_data(launch, 5));
  p.c_scale = static_cast<const float*>(input_data(launch, 6));
  p.d = launch.outputs.at(0).data;
}

// The CUTLASS product of a 1x1 convolution (supports_cutlass says which): x [n, h, w, c] is A [n·h·w, c], the weight
// [o, 1, 1, c] is B [o, c], the residual C and the result D [n·h·w, o].
template <sm90::GemmConfig kConfig>
QuantizedConvPlan prepare_cutlass(const StepLaunch& launch) {
  QuantizedConvPlan plan = prepare_direct(launch);
  if (plan.direct == nullptr) return plan;
  const ConvShape& s = plan.shape;
  if (!plan.nhwc || s.kh != 1 || s.kw != 1 || s.sh != 1 || s.sw != 1 || s.ph != 0 || s.pw != 0 || s.groups != 1 ||
      !plan.relu || !plan.quantized_output || plan.residual_kind == Residual::kF8E4M3 ||
      launch.attrs->get_dtype("to", DataType::kF32) != DataType::kF16) {
    launch.attrs->fail(
        "the CUTLASS quantized convolution takes 1x1 convolutions with relu, a quantized result, an "
        "f16 epilogue and no residual, an f16 one or an i8 one");
  }
  const sm90::DeviceInfo gpu = sm90::current_device(layer_name(launch));
  if (gpu.sm_count == 0) {
    launch.attrs->fail(
        fmt::format("the CUTLASS sm_90 products run on compute capability 9.0 GPUs, not {}.{}", gpu.major, gpu.minor));
  }
  const sm90::ResidualC residual = plan.residual_kind == Residual::kNone       ? sm90::ResidualC::kNone
                                   : plan.residual_kind == Residual::kEpilogue ? sm90::ResidualC::kF16
                                                                               : sm90::ResidualC::kI8;
  plan.gemm = sm90::make_quantized_residual_gemm(kConfig, launch.inputs.at(0).dtype, residual, sm90::Activation::kRelu,
                                                 gpu.device, gpu.sm_count);
  if (plan.gemm == nullptr) launch.attrs->fail("this build has no CUTLASS sm_90 product for the convolution");
  sm90::GemmProblem& p = plan.problem;
  p.m = s.n * s.h * s.w;
  p.n = s.o;
  p.k = s.c;
  bind_addresses(launch, p);
  // Placeholders where a caller's buffer is not bound yet: the sizes are what can_implement reads.
  sm90::GemmProblem sizes = p;
  const auto placeholder = [&](auto*& address, bool wanted) {
    if (wanted && address == nullptr) address = reinterpret_cast<std::remove_reference_t<decltype(address)>>(16);
  };
  placeholder(sizes.a, true);
  placeholder(sizes.b, true);
  placeholder(sizes.scale, true);
  placeholder(sizes.bias, plan.bias);
  placeholder(sizes.c, plan.residual);
  placeholder(sizes.output_scale, true);
  placeholder(sizes.c_scale, plan.residual_kind == Residual::kI8);
  placeholder(sizes.d, true);
  if (!plan.gemm->can_implement(sizes)) {
    launch.attrs->fail(
        fmt::format("CUTLASS's sm_90 quantized product does not take a {}x{}x{} problem (a 1x1 "
                    "convolution)",
                    p.m, p.n, p.k));
  }
  if (plan.gemm->workspace_bytes(sizes) > launch.workspace_bytes) {
    launch.attrs->fail("CUTLASS's sm_90 product needs scratch that the step does not have");
  }
  plan.rebind = binds_caller_buffer(launch);
  if (plan.rebind) return plan;
  if (!sm90::aligned_for_tma(p)) launch.attrs->fail("an operand of the CUTLASS sm_90 product is not 16-byte aligned");
  plan.gemm->plan(p, launch.workspace, layer_name(launch).c_str());
  return plan;
}

void launch_cutlass(const StepLaunch& launch, const QuantizedConvPlan& plan) {
  if (plan.rebind) {
    sm90::GemmProblem p = plan.problem;
    bind_addresses(launch, p);
    if (!sm90::aligned_for_tma(p)) return plan.direct(launch, plan);
    plan.gemm->plan(p, launch.workspace, layer_name(launch).c_str());
  }
  plan.gemm->run(launch.stream, launch.programmatic, layer_name(launch).c_str());
}

void launch_quantized_conv(const StepLaunch& launch, const QuantizedConvPlan& plan) {
  if (plan.direct == nullptr) return;
  if (plan.gemm != nullptr) return launch_cutlass(launch, plan);
  if (plan.graph == nullptr || (binds_caller_buffer(launch) && !graph_aligned(launch))) {
    return plan.direct(launch, plan);
  }
  check_cudnn(cudnnSetStream(plan.handle, launch.stream), "cudnnSetStream", launch);
  const auto data = [&](std::size_t i) { return input_data(launch, i); };
  check_cudnn(plan.graph->execute(plan.handle, data(0), data(1), data(2), data(3), data(4), data(5), data(6),
                                  launch.outputs.at(0).data, launch.workspace),
              "cudnnBackendExecute", launch);
}

// ---- supports ----

// x and weight i8 or f8e4m3 (the same), 2D (rank 4).
bool supports_direct(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (!has_tensor(layer, 0) || !has_tensor(layer, 1) || !has_tensor(layer, 2)) return false;
  const DataType in = input_dtype(graph, layer, 0);
  return (in == DataType::kI8 || in == DataType::kF8E4M3) && input_dtype(graph, layer, 1) == in &&
         graph.tensor(layer.inputs[0]).shape.size() == 4;
}

bool channels_last_layer(const graph::Layer& layer) {
  return graph::AttrReader(layer.attrs, layer.name, layer.op).get_string("layout", "nchw") == "nhwc";
}

// cuDNN's further plans: channels-last layers only (a channels-first one has just the direct kernel behind them).
bool supports_cudnn(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return supports_direct(graph, layer, precision) && channels_last_layer(layer);
}

// The direct kernel as a candidate of its own: channels-first layers (those the builder leaves channels first). A
// channels-last layer has it behind the cuDNN entries only: timed at a large problem it takes seconds.
bool supports_direct_alone(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return supports_direct(graph, layer, precision) && !channels_last_layer(layer);
}

// The CUTLASS product: i8 x, weight and result (a constant weight [o, 1, 1, c] with o and c multiples of 16),
// channels last, 1x1 with stride 1, no padding, dilation 1 and one group, relu, bias absent or f16 (`to` f16), the
// residual absent, f16, or i8 with its scale.
bool supports_cutlass(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  if (!supports_cudnn(graph, layer, precision) || input_dtype(graph, layer, 0) != DataType::kI8) return false;
  if (layer.outputs.size() != 1 || output_dtype(graph, layer, 0) != DataType::kI8 || !has_tensor(layer, 5))
    return false;
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  if (attrs.get_string("activation", "none") != "relu" || attrs.get_dtype("to", DataType::kF32) != DataType::kF16 ||
      attrs.get_int("groups", 1) != 1) {
    return false;
  }
  const auto all_equal = [&](const char* name, std::int64_t value) {
    for (const std::int64_t v : attrs.get_ints(name, std::vector<std::int64_t>{})) {
      if (v != value) return false;
    }
    return true;
  };
  if (!all_equal("stride", 1) || !all_equal("padding", 0) || !all_equal("dilation", 1)) return false;
  if (has_tensor(layer, 4)) {
    const DataType residual = input_dtype(graph, layer, 4);
    if (residual != (has_tensor(layer, 6) ? DataType::kI8 : DataType::kF16)) return false;
  }
  const Dims weight = graph.static_dims(layer.inputs[1]);  // channels last: [o, kh, kw, c]
  return weight.rank() == 4 && weight[1] == 1 && weight[2] == 1 && weight[0] > 0 && weight[0] % 16 == 0 &&
         weight[3] > 0 && weight[3] % 16 == 0;
}

}  // namespace

void register_quantized_convolution_kernels(std::vector<KernelEntry>& kernels) {
  // cuDNN first (what --no-timing builds take: the heuristics' first plan), then its next four plans; the direct
  // kernel runs behind them where cuDNN has no plan.
  const std::vector<KernelEntry> entries = {
      prepared_kernel<prepare_cudnn<0>, launch_quantized_conv>("quantized_conv_any_cudnn", "quantized_conv",
                                                               supports_direct, kWorkspaceBytes),
      prepared_kernel<prepare_cudnn<1>, launch_quantized_conv>("quantized_conv_any_cudnn_plan1", "quantized_conv",
                                                               supports_cudnn, kWorkspaceBytes),
      prepared_kernel<prepare_cudnn<2>, launch_quantized_conv>("quantized_conv_any_cudnn_plan2", "quantized_conv",
                                                               supports_cudnn, kWorkspaceBytes),
      prepared_kernel<prepare_cudnn<3>, launch_quantized_conv>("quantized_conv_any_cudnn_plan3", "quantized_conv",
                                                               supports_cudnn, kWorkspaceBytes),
      prepared_kernel<prepare_cudnn<4>, launch_quantized_conv>("quantized_conv_any_cudnn_plan4", "quantized_conv",
                                                               supports_cudnn, kWorkspaceBytes),
      prepared_kernel<prepare_direct, launch_quantized_conv>("quantized_conv_any_direct", "quantized_conv",
                                                             supports_direct_alone),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
  if (!sm90::kFusedGemmBuilt) return;
  using sm90::GemmConfig;
  const std::vector<KernelEntry> cutlass = {
      prepared_kernel<prepare_cutlass<GemmConfig::kCooperative128x256>, launch_quantized_conv>(
          "quantized_conv_i8_1x1_cutlass_sm90_coop128x256", "quantized_conv", supports_cutlass, kWorkspaceBytes),
  };
  kernels.insert(kernels.end(), cutlass.begin(), cutlass.end());
}

}  // namespace tensoracle::cuda
