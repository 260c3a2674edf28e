// CUDA kernels of quantized_linear (x · Wᵀ of i8 or f8e4m3 operands, scaled per output feature, with bias, residual
// and activation, the result in a float type or quantized again): CUTLASS's Hopper products on sm_90 (f16 results, or
// results quantized to the operands' type), and a tiled kernel for every GPU, dtype and epilogue that is their
// fallback; and the weight-only form's direct kernels (a float x times the quantized weight: on CUDA cores for few
// rows, and on tensor cores). A quantized result is the f32 epilogue value times the f32 reciprocal of the output
// scale, rounded once as the hardware conversions do (kernels::quantize_result).
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
#include "backends/cuda/kernels/mma_sm80.cuh"

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
  wait_for_preceding_steps();
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

// A product's geometry and epilogue, as every kernel here plans it: out [m, n] = x [m, k] · weight [n, k]ᵀ, with the
// bias (input 3), residual (input 4) and activation.
struct ProductShape {
  std::int64_t m = 0, n = 0, k = 0;
  bool bias = false, residual = false;
  Act act = Act::kNone;
};

ProductShape product_shape(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  ProductShape p;
  p.n = weight.shape[0];
  p.k = weight.shape[1];
  p.m = volume(x.shape, 0, x.shape.rank() - 1);
  p.bias = present(launch, 3);
  p.residual = present(launch, 4);
  p.act = activation_of(launch.attrs->get_string("activation", "none"));
  return p;
}

struct TiledPlan : ProductShape {
  using RunFn = void (*)(const StepLaunch& launch, const TiledPlan& plan);
  RunFn run = nullptr;  // nullptr: an empty output, nothing to launch
  bool quantized_output = false;
};

template <typename In, typename Epi, typename Out>
void run_tiled(const StepLaunch& launch, const TiledPlan& p) {
  const dim3 grid(static_cast<unsigned>((p.m + kTile - 1) / kTile), static_cast<unsigned>((p.n + kTile - 1) / kTile));
  launch_kernel(launch, quantized_linear_tiled<In, Epi, Out>, grid, dim3(kTile, kTile), 0,
                static_cast<const In*>(launch.inputs[0].data), static_cast<const In*>(launch.inputs[1].data),
                static_cast<const float*>(launch.inputs[2].data),
                p.bias ? static_cast<const Epi*>(launch.inputs[3].data) : nullptr,
                p.residual ? static_cast<const Epi*>(launch.inputs[4].data) : nullptr,
                p.quantized_output ? static_cast<const float*>(launch.inputs[5].data) : nullptr,
                static_cast<Out*>(launch.outputs[0].data), p.m, p.n, p.k, p.act);
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
  const DeviceTensor& out = launch.outputs.at(0);
  TiledPlan plan;
  static_cast<ProductShape&>(plan) = product_shape(launch);
  plan.quantized_output = present(launch, 5);
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
  plan.gemm->run(launch.stream, launch.programmatic, layer_name(launch).c_str());
}

// ---- weight-only: a float x times the quantized weight, read as it is ----

// Each warp computes kFeatures consecutive output features for a group of up to kRows rows of x. Lane l takes the
// weight's elements 8l..8l+7 of every 256 (an 8-byte word per feature row: the warp's loads are 256 contiguous bytes),
// converts them to f32 once for the group's rows, and multiplies each row's 8 matching x values (one or two 16-byte
// words) into f32 sums; the warp then sums its lanes and lane r writes row r's results with the scale, bias, residual
// and activation. The weight is read once per group of rows: for a decoding step's few rows the work streams the
// weight's quantized bytes, half of f16's. K is a multiple of 8 (supports); kVectorX: x's rows are 16-byte aligned
// and read as 16-byte words (else element by element).
constexpr int kRowsWarps = 4;     // warps per block
constexpr int kRowsFeatures = 4;  // output features per warp
constexpr int kRowsChunk = 8;     // weight elements per lane and step

// Eight i8 weights (an 8-byte word) as f32: each byte placed under the exponent of 2^23 (2^23 + b + 128, exact) and
// the offset subtracted, two byte permutes' worth of work per value instead of an integer conversion.
__device__ __forceinline__ void widen8(uint2 word, const std::int8_t* /*type*/, float (&v)[kRowsChunk]) {
  const unsigned parts[2] = {word.x ^ 0x80808080U, word.y ^ 0x80808080U};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[h * 4 + i] = __int_as_float(static_cast<int>(__byte_perm(parts[h], 0x4B000000U, 0x7440U + i))) - 8388736.0F;
    }
  }
}

// Eight e4m3 weights as f32, through the hardware's paired conversion to f16 (sm_89 and later; emulated before).
__device__ __forceinline__ void widen8(uint2 word, const F8E4M3* /*type*/, float (&v)[kRowsChunk]) {
  const unsigned parts[2] = {word.x, word.y};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(parts[h] >> (16 * i));
      const __half2 wide = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));
      const float2 f = __half22float2(wide);
      v[h * 4 + i * 2] = f.x;
      v[h * 4 + i * 2 + 1] = f.y;
    }
  }
}

// Eight consecutive values of a row of x as f32.
template <typename T, bool kVectorX>
__device__ __forceinline__ void load8(const T* p, float (&v)[kRowsChunk]) {
  if constexpr (kVectorX && sizeof(T) == 2) {
    const uint4 word = *reinterpret_cast<const uint4*>(p);
    const unsigned parts[4] = {word.x, word.y, word.z, word.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f;
      if constexpr (std::is_same_v<T, F16>) {
        f = __half22float2(*reinterpret_cast<const __half2*>(&parts[i]));
      } else {
        f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&parts[i]));
      }
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  } else if constexpr (kVectorX) {  // f32: two 16-byte words
    const float4 a = *reinterpret_cast<const float4*>(p);
    const float4 b = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < kRowsChunk; ++i) v[i] = to_compute_arith(p[i]);
  }
}

template <typename T, typename Q, int kRows, bool kVectorX>
__global__ void __launch_bounds__(kRowsWarps * 32)
    weight_only_rows_kernel(const T* __restrict__ x, const Q* __restrict__ w, const float* __restrict__ scale,
                            const T* __restrict__ bias, const T* __restrict__ residual, T* __restrict__ out,
                            std::int64_t m, std::int64_t n, std::int64_t k, Act act) {
  wait_for_preceding_steps();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const std::int64_t feature0 =
      (static_cast<std::int64_t>(blockIdx.x) * kRowsWarps + (threadIdx.x >> 5)) * kRowsFeatures;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * kRows;
  if (feature0 >= n) return;
  const int rows = static_cast<int>(m - row0 < kRows ? m - row0 : kRows);
  float acc[kRows][kRowsFeatures] = {};
#pragma unroll 2
  for (std::int64_t c = static_cast<std::int64_t>(lane) * kRowsChunk; c < k; c += 32 * kRowsChunk) {
    float wv[kRowsFeatures][kRowsChunk];
#pragma unroll
    for (int f = 0; f < kRowsFeatures; ++f) {
      const std::int64_t feature = feature0 + f < n ? feature0 + f : n - 1;  // a partial group repeats the last
      widen8(__ldg(reinterpret_cast<const uint2*>(w + feature * k + c)), static_cast<const Q*>(nullptr), wv[f]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= rows) break;
      float xv[kRowsChunk];
      load8<T, kVectorX>(x + (row0 + r) * k + c, xv);
#pragma unroll
      for (int f = 0; f < kRowsFeatures; ++f) {
#pragma unroll
        for (int i = 0; i < kRowsChunk; ++i) acc[r][f] = fmaf(xv[i], wv[f][i], acc[r][f]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int f = 0; f < kRowsFeatures; ++f) {
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) acc[r][f] += __shfl_xor_sync(0xFFFFFFFFU, acc[r][f], offset);
    }
  }
  if (lane >= rows) return;
  float sums[kRowsFeatures];  // lane r writes row r: its copy of the sums, picked without dynamic indexing
#pragma unroll
  for (int f = 0; f < kRowsFeatures; ++f) sums[f] = acc[0][f];
#pragma unroll
  for (int r = 1; r < kRows; ++r) {
    if (lane == r) {
#pragma unroll
      for (int f = 0; f < kRowsFeatures; ++f) sums[f] = acc[r][f];
    }
  }
#pragma unroll
  for (int f = 0; f < kRowsFeatures; ++f) {
    const std::int64_t feature = feature0 + f;
    if (feature >= n) break;
    const std::int64_t o = (row0 + lane) * n + feature;
    float v = sums[f] * scale[feature];
    if (bias != nullptr) v += to_compute_arith(bias[feature]);
    if (residual != nullptr) v += to_compute_arith(residual[o]);
    out[o] = from_compute<T>(activate(v, act));
  }
}

struct RowsPlan : ProductShape {
  using RunFn = void (*)(const StepLaunch& launch, const RowsPlan& plan, bool vector_x);
  RunFn run = nullptr;  // nullptr: an empty output
  int rows = 1;         // rows per group: 1, 4 or 8
  bool vector_x = false, rebind_x = false;
};

template <typename T, typename Q, int kRows, bool kVectorX>
void run_rows_as(const StepLaunch& launch, const RowsPlan& p) {
  constexpr std::int64_t kBlockFeatures = kRowsWarps * kRowsFeatures;
  const dim3 grid(static_cast<unsigned>((p.n + kBlockFeatures - 1) / kBlockFeatures),
                  static_cast<unsigned>((p.m + kRows - 1) / kRows));
  launch_kernel(launch, weight_only_rows_kernel<T, Q, kRows, kVectorX>, grid, kRowsWarps * 32, 0,
                static_cast<const T*>(launch.inputs[0].data), static_cast<const Q*>(launch.inputs[1].data),
                static_cast<const float*>(launch.inputs[2].data),
                p.bias ? static_cast<const T*>(launch.inputs[3].data) : nullptr,
                p.residual ? static_cast<const T*>(launch.inputs[4].data) : nullptr,
                static_cast<T*>(launch.outputs[0].data), p.m, p.n, p.k, p.act);
}

template <typename T, typename Q>
void run_rows(const StepLaunch& launch, const RowsPlan& p, bool vector_x) {
  switch (p.rows) {
    case 1: (vector_x ? run_rows_as<T, Q, 1, true> : run_rows_as<T, Q, 1, false>)(launch, p); return;
    case 4: (vector_x ? run_rows_as<T, Q, 4, true> : run_rows_as<T, Q, 4, false>)(launch, p); return;
    default: (vector_x ? run_rows_as<T, Q, 8, true> : run_rows_as<T, Q, 8, false>)(launch, p); return;
  }
}

template <typename Q>
RowsPlan::RunFn rows_for(DataType x) {
  switch (x) {
    case DataType::kF16: return run_rows<F16, Q>;
    case DataType::kBF16: return run_rows<BF16, Q>;
    default: return run_rows<float, Q>;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

RowsPlan prepare_rows(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  RowsPlan plan;
  static_cast<ProductShape&>(plan) = product_shape(launch);
  if (plan.m == 0 || plan.n == 0) return plan;
  if (plan.k % kRowsChunk != 0 || reinterpret_cast<std::uintptr_t>(weight.data) % kRowsChunk != 0) {
    launch.attrs->fail("the weight-only rows kernel reads the weight's rows as 8-byte words (K a multiple of 8)");
  }
  plan.rows = plan.m == 1 ? 1 : plan.m <= 4 ? 4 : 8;
  if ((plan.m + plan.rows - 1) / plan.rows > 65535) {
    launch.attrs->fail(fmt::format("{} rows are too many for the weight-only rows kernel", plan.m));
  }
  // x's rows start at multiples of K·sizeof(T) (of 16 bytes): 16-byte words when x's own address is 16-byte aligned,
  // known here for an arena tensor, tested at each enqueue for a caller buffer.
  plan.rebind_x = x.caller_buffer;
  plan.vector_x = !x.caller_buffer && aligned16(x.data);
  plan.run = weight.dtype == DataType::kI8 ? rows_for<std::int8_t>(x.dtype) : rows_for<F8E4M3>(x.dtype);
  return plan;
}

void launch_rows(const StepLaunch& launch, const RowsPlan& plan) {
  if (plan.run == nullptr) return;
  plan.run(launch, plan, plan.rebind_x ? aligned16(launch.inputs[0].data) : plan.vector_x);
}

// ---- weight-only on tensor cores: mma.sync over the weight converted in registers ----

// D^T = W · x^T, m16n8k16 tiles: A is 16 features x 16 of K (the weight's own row-major layout), B 16 of K x 8 rows
// of x (x's own layout), the sums in f32. A block's four warps take the same 16 features and every fourth 64-wide
// chunk of K (a split of the sum, added through shared memory at the end); each warp covers kTiles tiles of 8 rows.
// The sum over K is order-free, so each lane reads whole 16-byte words: of a 64-wide chunk, lane (g, t) reads
// elements 16t..16t+15 of weight rows g and g + 8 and of x row g, and k-step s of the chunk takes elements
// 16t + 4s + {0, 1} for the fragment's K columns 2t, 2t + 1 and 16t + 4s + {2, 3} for 2t + 8, 2t + 9 (the same for A
// and B, so the product is unchanged). i8 weights become f16 exactly by placing each byte under the exponent of
// 1024 and subtracting 1152; e4m3 ones through the hardware's paired conversion; bf16 ones from those through f32.
// K a multiple of 64, x 16-byte aligned (else the rows kernel runs), f16 or bf16.
constexpr int kMmaWarps = 4;
constexpr int kMmaChunk = 64;

// Two quantized weights (bytes 2h, 2h + 1 of `word`) as a packed pair of T.
template <typename T, typename Q>
__device__ __forceinline__ unsigned widen_pair(unsigned word, int h) {
  __half2 pair;
  if constexpr (std::is_same_v<Q, std::int8_t>) {
    const unsigned biased = __byte_perm(word ^ 0x80808080U, 0x64646464U, h == 0 ? 0x5150U : 0x5352U);
    pair = __hsub2(*reinterpret_cast<const __half2*>(&biased), __half2(__float2half(1152.0F), __float2half(1152.0F)));
  } else {
    pair = __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * h)), __NV_E4M3));
  }
  if constexpr (std::is_same_v<T, BF16>) {
    const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(pair));
    return *reinterpret_cast<const unsigned*>(&b);
  } else {
    return *reinterpret_cast<const unsigned*>(&pair);
  }
}

template <typename T, typename Q, int kTiles>
__global__ void __launch_bounds__(kMmaWarps * 32)
    weight_only_mma_kernel(const T* __restrict__ x, const Q* __restrict__ w, const float* __restrict__ scale,
                           const T* __restrict__ bias, const T* __restrict__ residual, T* __restrict__ out,
                           std::int64_t m, std::int64_t n, std::int64_t k, Act act) {
  wait_for_preceding_steps();
  __shared__ float partial[kMmaWarps][kTiles][4][32];
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int g = lane >> 2, t = lane & 3;
  const std::int64_t feature0 = static_cast<std::int64_t>(blockIdx.x) * 16;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * 8 * kTiles;
  // Rows past the end read the last row (their sums are dropped).
  const Q* w_lo = w + ::min(feature0 + g, n - 1) * k + 16 * t;
  const Q* w_hi = w + ::min(feature0 + g + 8, n - 1) * k + 16 * t;
  const T* x_rows[kTiles];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) x_rows[i] = x + ::min(row0 + 8 * i + g, m - 1) * k + 16 * t;
  float acc[kTiles][4] = {};
#pragma unroll 2
  for (std::int64_t c = static_cast<std::int64_t>(warp) * kMmaChunk; c < k; c += kMmaWarps * kMmaChunk) {
    const uint4 lo = __ldg(reinterpret_cast<const uint4*>(w_lo + c));
    const uint4 hi = __ldg(reinterpret_cast<const uint4*>(w_hi + c));
    const unsigned lo_words[4] = {lo.x, lo.y, lo.z, lo.w}, hi_words[4] = {hi.x, hi.y, hi.z, hi.w};
    uint4 xw[kTiles][2];
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      xw[i][0] = *reinterpret_cast<const uint4*>(x_rows[i] + c);
      xw[i][1] = *reinterpret_cast<const uint4*>(x_rows[i] + c + 8);
    }
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const unsigned a[4] = {widen_pair<T, Q>(lo_words[step], 0), widen_pair<T, Q>(hi_words[step], 0),
                             widen_pair<T, Q>(lo_words[step], 1), widen_pair<T, Q>(hi_words[step], 1)};
#pragma unroll
      for (int i = 0; i < kTiles; ++i) {
        const unsigned words[8] = {xw[i][0].x, xw[i][0].y, xw[i][0].z, xw[i][0].w,
                                   xw[i][1].x, xw[i][1].y, xw[i][1].z, xw[i][1].w};
        kernels::mma_16816<std::is_same_v<T, BF16>>(acc[i], a, words[2 * step], words[2 * step + 1]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[warp][i][j][lane] = acc[i][j];
  }
  __syncthreads();
  // Warp i % 4 finishes tile i: the four partial sums, then scale, bias, residual and activation. Fragment value j
  // is feature g (+ 8 for j >= 2), row 2t (+ 1 for odd j).
  for (int i = warp; i < kTiles; i += kMmaWarps) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float sum = 0.0F;
#pragma unroll
      for (int p = 0; p < kMmaWarps; ++p) sum += partial[p][i][j][lane];
      const std::int64_t feature = feature0 + g + (j >= 2 ? 8 : 0);
      const std::int64_t row = row0 + 8 * i + 2 * t + (j & 1);
      if (feature >= n || row >= m) continue;
      const std::int64_t o = row * n + feature;
      float v = sum * scale[feature];
      if (bias != nullptr) v += to_compute_arith(bias[feature]);
      if (residual != nullptr) v += to_compute_arith(residual[o]);
      out[o] = from_compute<T>(activate(v, act));
    }
  }
}

// The rows kernel's plan holds the product's geometry and epilogue, and runs an x that is not 16-byte aligned.
struct MmaPlan {
  using RunFn = void (*)(const StepLaunch& launch, const MmaPlan& plan);
  RunFn run = nullptr;  // nullptr: an empty output
  int tiles = 1;        // tiles of 8 rows per block: 1, 2 or 4
  RowsPlan rows;
};

template <typename T, typename Q, int kTiles>
void run_mma_as(const StepLaunch& launch, const MmaPlan& plan) {
  const RowsPlan& p = plan.rows;
  const dim3 grid(static_cast<unsigned>((p.n + 15) / 16), static_cast<unsigned>((p.m + 8 * kTiles - 1) / (8 * kTiles)));
  launch_kernel(launch, weight_only_mma_kernel<T, Q, kTiles>, grid, kMmaWarps * 32, 0,
                static_cast<const T*>(launch.inputs[0].data), static_cast<const Q*>(launch.inputs[1].data),
                static_cast<const float*>(launch.inputs[2].data),
                p.bias ? static_cast<const T*>(launch.inputs[3].data) : nullptr,
                p.residual ? static_cast<const T*>(launch.inputs[4].data) : nullptr,
                static_cast<T*>(launch.outputs[0].data), p.m, p.n, p.k, p.act);
}

template <typename T, typename Q>
void run_mma(const StepLaunch& launch, const MmaPlan& p) {
  switch (p.tiles) {
    case 1: run_mma_as<T, Q, 1>(launch, p); return;
    case 2: run_mma_as<T, Q, 2>(launch, p); return;
    default: run_mma_as<T, Q, 4>(launch, p); return;
  }
}

template <typename T>
MmaPlan::RunFn mma_for(DataType weight) {
  return weight == DataType::kI8 ? run_mma<T, std::int8_t> : run_mma<T, F8E4M3>;
}

// kMaxTiles: tiles of 8 rows per block at most (4: up to 32 rows share each read of the weight; 1: 8 rows a block, for
// more blocks when a product has few features and many rows, e.g. BERT's output projections at batch 1).
template <int kMaxTiles>
MmaPlan prepare_mma(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  MmaPlan plan;
  plan.rows = prepare_rows(launch);
  const RowsPlan& p = plan.rows;
  if (p.m == 0 || p.n == 0) return plan;
  if (p.k % kMmaChunk != 0 || !aligned16(weight.data)) {
    launch.attrs->fail("the weight-only tensor-core kernel reads the weight in 64-wide chunks (K a multiple of 64)");
  }
  if ((p.n + 15) / 16 > 0x7FFFFFFF) {
    launch.attrs->fail(fmt::format("a {}x{} output is too large for the weight-only tensor-core kernel", p.m, p.n));
  }
  plan.tiles = std::min(kMaxTiles, p.m <= 8 ? 1 : p.m <= 16 ? 2 : 4);
  if ((p.m + 8 * plan.tiles - 1) / (8 * plan.tiles) > 65535) {
    launch.attrs->fail(fmt::format("{} rows are too many for the weight-only tensor-core kernel", p.m));
  }
  if (!x.caller_buffer && !aligned16(x.data)) {
    launch.attrs->fail("the weight-only tensor-core kernel reads x in 16-byte words");
  }
  plan.run = x.dtype == DataType::kBF16 ? mma_for<BF16>(weight.dtype) : mma_for<F16>(weight.dtype);
  return plan;
}

// A caller's x (the rows plan's rebind_x) has its alignment tested at each enqueue.
void launch_mma(const StepLaunch& launch, const MmaPlan& plan) {
  if (plan.run == nullptr) return;
  if (plan.rows.rebind_x && !aligned16(launch.inputs[0].data)) {
    launch_rows(launch, plan.rows);
    return;
  }
  plan.run(launch, plan);
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

// The weight-only form (a float x of the result's type, an i8 or f8e4m3 weight, no quantized result) with a constant
// weight [n, k] (its alignment is planned for), k a multiple of 8.
bool supports_rows(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (!is_weight_only_product(graph, layer)) return false;
  if (graph.tensor(layer.inputs[1]).kind != graph::TensorKind::kConstant) return false;  // its address known at prepare
  const Dims weight = graph.static_dims(layer.inputs[1]);
  return weight.rank() == 2 && weight[1] % kRowsChunk == 0;
}

// The tensor-core form: f16 or bf16 x and K a multiple of 64 (mma.sync: every GPU this library is built for).
bool supports_mma(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  if (!supports_rows(graph, layer, precision)) return false;
  const DataType x = input_dtype(graph, layer, 0);
  return (x == DataType::kF16 || x == DataType::kBF16) && graph.static_dims(layer.inputs[1])[1] % kMmaChunk == 0;
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
  // The weight-only form's direct kernel, after linear_algebra.cu's dequantized products.
  kernels.push_back(prepared_kernel<prepare_rows, launch_rows>("quantized_linear_weight_only_rows", "quantized_linear",
                                                               supports_rows));
  kernels.push_back(prepared_kernel<prepare_mma<4>, launch_mma>("quantized_linear_weight_only_mma", "quantized_linear",
                                                                supports_mma));
  kernels.push_back(prepared_kernel<prepare_mma<1>, launch_mma>("quantized_linear_weight_only_mma_rows8",
                                                                "quantized_linear", supports_mma));
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
