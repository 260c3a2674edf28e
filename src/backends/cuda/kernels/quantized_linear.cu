// CUDA kernels of quantized_linear (x · Wᵀ of i8 or f8e4m3 operands, scaled per output feature, with bias, residual
// and activation, the result in a float type or quantized again): CUTLASS's Hopper products on sm_90 (f16 results, or
// results quantized to the operands' type), and a tiled kernel for every GPU, dtype and epilogue that is their
// fallback. A quantized result is the f32 epilogue value times the f32 reciprocal of the output scale, rounded once as
// the hardware conversions do (kernels::quantize_result).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/cutlass_gemm_sm90.hpp"

namespace tensoracle::cuda {
namespace {

using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels

// The epilogue activations, as the CPU reference's apply_epilogue (backends/cpu/kernels/epilogue.hpp) names them.
enum class Act : int { kNone, kRelu, kGeluTanh, kGeluErf };

Act activation_of(const std::string& name) {
  if (name == "relu") return Act::kRelu;
  if (name == "gelu_tanh") return Act::kGeluTanh;
  if (name == "gelu_erf") return Act::kGeluErf;
  return Act::kNone;
}

__device__ __forceinline__ float activate(float v, Act act) {
  switch (act) {
    case Act::kRelu: return v < 0.0F ? 0.0F : v;
    case Act::kGeluTanh: return 0.5F * v * (1.0F + tanhf(0.7978845608F * (v + 0.044715F * v * v * v)));
    case Act::kGeluErf: return 0.5F * v * (1.0F + erff(v * 0.70710678118F));
    default: return v;
  }
}

// i8 operands multiply and sum in i32 (exact); f8e4m3 ones in f32 (each product exact).
__device__ __forceinline__ std::int32_t operand(std::int8_t v) { return v; }
__device__ __forceinline__ float operand(F8E4M3 v) { return to_compute(v); }

// The result of one output element: the epilogue value rounded to Out, or quantized by the output scale.
template <typename Out>
__device__ __forceinline__ Out store_value(float v, float reciprocal_scale) {
  if constexpr (std::is_same_v<Out, std::int8_t> || std::is_same_v<Out, F8E4M3>) {
    return quantize_result<Out>(v, reciprocal_scale);
  } else {
    return from_compute<Out>(v);
  }
}

constexpr int kTile = 16;

// One 16x16 tile of the output per block, K in steps of 16 through shared memory: simple, any alignment and size.
// Blocks run along m in x (up to 2^31 - 1) and along n in y (up to 65535 tiles). Epi is the bias's and residual's type
// (`to`); Out is Epi, or i8 / F8E4M3 for a quantized result (output_scale then given).
template <typename In, typename Epi, typename Out>
__global__ void quantized_linear_tiled(const In* __restrict__ x, const In* __restrict__ w,
                                       const float* __restrict__ scale, const Epi* __restrict__ bias,
                                       const Epi* __restrict__ residual, const float* __restrict__ output_scale,
                                       Out* __restrict__ out, std::int64_t m, std::int64_t n, std::int64_t k, Act act) {
  using Acc = decltype(operand(In{}));
  __shared__ Acc xs[kTile][kTile + 1];
  __shared__ Acc ws[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  Acc acc = 0;
  for (std::int64_t k0 = 0; k0 < k; k0 += kTile) {
    const std::int64_t kk = k0 + tx;
    xs[ty][tx] = row0 + ty < m && kk < k ? operand(x[(row0 + ty) * k + kk]) : Acc(0);
    ws[ty][tx] = col0 + ty < n && kk < k ? operand(w[(col0 + ty) * k + kk]) : Acc(0);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc += xs[ty][j] * ws[tx][j];
    __syncthreads();
  }
  const std::int64_t row = row0 + ty, col = col0 + tx;
  if (row >= m || col >= n) return;
  float v = static_cast<float>(acc) * scale[col];
  if (bias != nullptr) v += to_compute_arith(bias[col]);
  if (residual != nullptr) v += to_compute_arith(residual[row * n + col]);
  out[row * n + col] = store_value<Out>(activate(v, act), output_scale != nullptr ? __frcp_rn(*output_scale) : 1.0F);
}

struct TiledPlan {
  using RunFn = void (*)(const StepLaunch& launch, const TiledPlan& plan);
  RunFn run = nullptr;  // nullptr: an empty output, nothing to launch
  std::int64_t m = 0, n = 0, k = 0;
  bool bias = false, residual = false, quantized_output = false;
  Act act = Act::kNone;
};

template <typename In, typename Epi, typename Out>
void run_tiled(const StepLaunch& launch, const TiledPlan& p) {
  const dim3 grid(static_cast<unsigned>((p.m + kTile - 1) / kTile), static_cast<unsigned>((p.n + kTile - 1) / kTile));
  quantized_linear_tiled<In, Epi, Out><<<grid, dim3(kTile, kTile), 0, launch.stream>>>(
      static_cast<const In*>(launch.inputs[0].data), static_cast<const In*>(launch.inputs[1].data),
      static_cast<const float*>(launch.inputs[2].data),
      p.bias ? static_cast<const Epi*>(launch.inputs[3].data) : nullptr,
      p.residual ? static_cast<const Epi*>(launch.inputs[4].data) : nullptr,
      p.quantized_output ? static_cast<const float*>(launch.inputs[5].data) : nullptr,
      static_cast<Out*>(launch.outputs[0].data), p.m, p.n, p.k, p.act);
  check_launch(launch);
}

// The result in Epi itself, or quantized to `out`.
template <typename In, typename Epi>
TiledPlan::RunFn tiled_for(DataType out) {
  switch (out) {
    case DataType::kI8: return run_tiled<In, Epi, std::int8_t>;
    case DataType::kF8E4M3: return run_tiled<In, Epi, F8E4M3>;
    default: return run_tiled<In, Epi, Epi>;
  }
}

// Epi: the bias's and residual's type (`to`).
template <typename In>
TiledPlan::RunFn tiled_for(DataType epilogue, DataType out) {
  switch (epilogue) {
    case DataType::kF16: return tiled_for<In, F16>(out);
    case DataType::kBF16: return tiled_for<In, BF16>(out);
    default: return tiled_for<In, float>(out);
  }
}

TiledPlan prepare_tiled(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  const DeviceTensor& out = launch.outputs.at(0);
  TiledPlan plan;
  plan.n = weight.shape[0];
  plan.k = weight.shape[1];
  plan.m = volume(x.shape, 0, x.shape.rank() - 1);
  plan.bias = present(launch, 3);
  plan.residual = present(launch, 4);
  plan.quantized_output = present(launch, 5);
  plan.act = activation_of(launch.attrs->get_string("activation", "none"));
  if (plan.m == 0 || plan.n == 0) return plan;
  if ((plan.m + kTile - 1) / kTile > std::numeric_limits<std::int32_t>::max() || (plan.n + kTile - 1) / kTile > 65535) {
    launch.attrs->fail(fmt::format("a {}x{} output is too large for the tiled quantized product", plan.m, plan.n));
  }
  // 128 · 128 · k must stay within i32 for i8 operands.
  if (x.dtype == DataType::kI8 && plan.k > (std::int64_t{1} << 17)) {
    launch.attrs->fail(fmt::format("an i8 product over {} > 131072 terms could overflow its i32 sum", plan.k));
  }
  const DataType epilogue = launch.attrs->get_dtype("to", DataType::kF32);
  plan.run =
      x.dtype == DataType::kI8 ? tiled_for<std::int8_t>(epilogue, out.dtype) : tiled_for<F8E4M3>(epilogue, out.dtype);
  return plan;
}

void launch_tiled(const StepLaunch& launch, const TiledPlan& plan) {
  if (plan.run != nullptr) plan.run(launch, plan);
}

// ---- on Hopper through CUTLASS ----

// kConfig's quantized product (cutlass_gemm_sm90.hpp). As linear's CUTLASS entries (linear_algebra.cu), a step bound
// to caller buffers plans again at each enqueue and runs the tiled kernel for buffers that are not 16-byte aligned.
struct CutlassPlan {
  std::unique_ptr<sm90::FusedGemm> gemm;  // nullptr: an empty output, which `fallback` does
  sm90::GemmProblem problem;
  bool rebind = false;
  TiledPlan fallback;
};

template <sm90::GemmConfig kConfig>
CutlassPlan prepare_cutlass(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  const DeviceTensor& scale = launch.inputs.at(2);
  const DeviceTensor* bias = present(launch, 3) ? &launch.inputs[3] : nullptr;
  const DeviceTensor* residual = present(launch, 4) ? &launch.inputs[4] : nullptr;
  const DeviceTensor* output_scale = present(launch, 5) ? &launch.inputs[5] : nullptr;
  const DeviceTensor& out = launch.outputs.at(0);
  CutlassPlan plan;
  plan.fallback = prepare_tiled(launch);
  const sm90::DeviceInfo gpu = sm90::current_device(layer_name(launch));
  if (gpu.sm_count == 0) {
    launch.attrs->fail(
        fmt::format("the CUTLASS sm_90 products run on compute capability 9.0 GPUs, not {}.{}", gpu.major, gpu.minor));
  }
  sm90::GemmProblem& p = plan.problem;
  p.m = plan.fallback.m;
  p.n = plan.fallback.n;
  p.k = plan.fallback.k;
  if (p.m == 0 || p.n == 0) return plan;
  if (p.k == 0) launch.attrs->fail("the CUTLASS sm_90 product has no empty sum (weight with 0 columns)");
  const sm90::Activation activation =
      plan.fallback.act == Act::kGeluErf ? sm90::Activation::kGeluErf : sm90::Activation::kNone;
  plan.gemm = sm90::make_quantized_gemm(kConfig, x.dtype, activation, plan.fallback.quantized_output,
                                        residual != nullptr, gpu.device, gpu.sm_count);
  if (plan.gemm == nullptr) launch.attrs->fail("this build has no CUTLASS sm_90 quantized product for the dtype");
  p.a = x.data;
  p.b = weight.data;
  p.scale = static_cast<const float*>(scale.data);
  p.bias = bias != nullptr ? bias->data : nullptr;
  p.c = residual != nullptr ? residual->data : nullptr;
  p.output_scale = output_scale != nullptr ? static_cast<const float*>(output_scale->data) : nullptr;
  p.d = out.data;
  if (!plan.gemm->can_implement(p)) {
    launch.attrs->fail(
        fmt::format("CUTLASS's sm_90 quantized product does not take a {}x{}x{} problem", p.m, p.n, p.k));
  }
  if (plan.gemm->workspace_bytes(p) > launch.workspace_bytes) {
    launch.attrs->fail("CUTLASS's sm_90 product needs scratch that the step does not have");
  }
  plan.rebind = x.caller_buffer || weight.caller_buffer || scale.caller_buffer ||
                (bias != nullptr && bias->caller_buffer) || (residual != nullptr && residual->caller_buffer) ||
                (output_scale != nullptr && output_scale->caller_buffer) || out.caller_buffer;
  if (plan.rebind) return plan;
  if (!sm90::aligned_for_tma(p)) launch.attrs->fail("an operand of the CUTLASS sm_90 product is not 16-byte aligned");
  plan.gemm->plan(p, launch.workspace, layer_name(launch).c_str());
  return plan;
}

void launch_cutlass(const StepLaunch& launch, const CutlassPlan& plan) {
  if (plan.gemm == nullptr) {
    launch_tiled(launch, plan.fallback);
    return;
  }
  if (plan.rebind) {
    sm90::GemmProblem p = plan.problem;
    p.a = launch.inputs[0].data;
    p.b = launch.inputs[1].data;
    p.scale = static_cast<const float*>(launch.inputs[2].data);
    if (plan.fallback.bias) p.bias = launch.inputs[3].data;
    if (plan.fallback.residual) p.c = launch.inputs[4].data;
    if (plan.fallback.quantized_output) p.output_scale = static_cast<const float*>(launch.inputs[5].data);
    p.d = launch.outputs[0].data;
    if (!sm90::aligned_for_tma(p)) {
      launch_tiled(launch, plan.fallback);
      return;
    }
    plan.gemm->plan(p, launch.workspace, layer_name(launch).c_str());
  }
  plan.gemm->run(launch.stream, layer_name(launch).c_str());
}

// ---- supports ----

bool quantized_operands(const graph::Graph& graph, const graph::Layer& layer) {
  if (!has_tensor(layer, 0) || !has_tensor(layer, 1) || !has_tensor(layer, 2)) return false;
  const DataType in = input_dtype(graph, layer, 0);
  return (in == DataType::kI8 || in == DataType::kF8E4M3) && input_dtype(graph, layer, 1) == in;
}

bool supports_tiled(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return quantized_operands(graph, layer);
}

// The CUTLASS products: kOperands, an f16 result (or with kQuantizedOut one quantized to kOperands, bias and residual
// f16), activation none or gelu_erf, a constant weight [n, k] with k a multiple of 16 and n of 16 bytes' result
// elements (16-byte rows for the bulk tensor copy engine).
template <DataType kOperands, bool kQuantizedOut = false>
bool supports_cutlass(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (!quantized_operands(graph, layer) || input_dtype(graph, layer, 0) != kOperands) return false;
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  if (output_dtype(graph, layer, 0) != (kQuantizedOut ? kOperands : DataType::kF16)) return false;
  if (kQuantizedOut && (!has_tensor(layer, 5) || attrs.get_dtype("to", DataType::kF32) != DataType::kF16)) return false;
  const std::string activation = attrs.get_string("activation", "none");
  if (activation != "none" && activation != "gelu_erf") return false;
  const Dims weight = graph.static_dims(layer.inputs[1]);
  const std::int64_t n_alignment = kQuantizedOut ? 16 : 8;
  return weight.rank() == 2 && weight[0] > 0 && weight[1] > 0 && weight[0] % n_alignment == 0 && weight[1] % 16 == 0;
}

}  // namespace

void register_quantized_linear_kernels(std::vector<KernelEntry>& kernels) {
  // The tiled kernel first: what --no-timing builds take, and what runs anywhere.
  kernels.push_back(
      prepared_kernel<prepare_tiled, launch_tiled>("quantized_linear_any_tiled", "quantized_linear", supports_tiled));
  if (!sm90::kFusedGemmBuilt) return;
  using sm90::GemmConfig;
  const std::vector<KernelEntry> cutlass = {
      prepared_kernel<prepare_cutlass<GemmConfig::kCooperative128x256>, launch_cutlass>(
          "quantized_linear_f8e4m3_f16_cutlass_sm90_coop128x256", "quantized_linear",
          supports_cutlass<DataType::kF8E4M3>),
      prepared_kernel<prepare_cutlass<GemmConfig::kCooperative128x128>, launch_cutlass>(
          "quantized_linear_f8e4m3_f16_cutlass_sm90_coop128x128", "quantized_linear",
          supports_cutlass<DataType::kF8E4M3>),
      prepared_kernel<prepare_cutlass<GemmConfig::kCooperative128x256>, launch_cutlass>(
          "quantized_linear_i8_f16_cutlass_sm90_coop128x256", "quantized_linear", supports_cutlass<DataType::kI8>),
      prepared_kernel<prepare_cutlass<GemmConfig::kPingpong128x128>, launch_cutlass>(
          "quantized_linear_i8_f16_cutlass_sm90_pingpong128x128", "quantized_linear", supports_cutlass<DataType::kI8>),
      // Results quantized again (fuse_quantized_outputs).
      prepared_kernel<prepare_cutlass<GemmConfig::kCooperative128x128>, launch_cutlass>(
          "quantized_linear_f8e4m3_f8e4m3_cutlass_sm90_coop128x128", "quantized_linear",
          supports_cutlass<DataType::kF8E4M3, true>),
      prepared_kernel<prepare_cutlass<GemmConfig::kCooperative128x256>, launch_cutlass>(
          "quantized_linear_i8_i8_cutlass_sm90_coop128x256", "quantized_linear", supports_cutlass<DataType::kI8, true>),
      prepared_kernel<prepare_cutlass<GemmConfig::kPingpong128x128>, launch_cutlass>(
          "quantized_linear_i8_i8_cutlass_sm90_pingpong128x128", "quantized_linear",
          supports_cutlass<DataType::kI8, true>),
  };
  kernels.insert(kernels.end(), cutlass.begin(), cutlass.end());
}

}  // namespace tensoracle::cuda
