// CUDA kernels of the quantization family: symmetric (zero point 0) quantize to i8 / f8e4m3 and dequantize from them,
// with an f32 scale per tensor (scalar) or per channel (rank 1, along `axis`). As the CPU reference
// (src/backends/cpu/kernels/quantization.cpp) everything is computed in f64: quantize rounds x / scale half to even
// onto the i8 grid (saturating, NaN -> 0) or the e4m3fn grid (saturating at ±448, infinities too; NaN stays NaN);
// dequantize forms x * scale exactly in f64 and rounds it once through f32 to the output dtype. NaN results carry the
// sign and payload the reference's x86 arithmetic gives them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quantize_rounding.cuh"

namespace tensoracle::cuda {

void register_quantization_kernels(std::vector<KernelEntry>& kernels);

namespace {

// The shared helpers: launch sizes and checks, the e4m3 widening and the f16/bf16 rounding of f32. The storage types
// here are cuda_fp16.h's and cuda_bf16.h's, with this file's own conversions to and from f64 (the reference's).
using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels
using namespace quantize_rounding;  // NOLINT(google-build-using-namespace): the rounding onto the quantized grids

// ---- NaN as x86 SSE arithmetic (the reference's) produces it ----

constexpr std::uint64_t kDoubleQuietBit = 0x0008000000000000ULL;
constexpr std::uint64_t kDefaultNan = 0xFFF8000000000000ULL;  // x86's "real indefinite" (0/0, 0·inf, inf/inf)

// float -> double keeping a NaN's sign and payload (quieted), as cvtss2sd.
__device__ __forceinline__ double widen_nan(float v) {
  const std::uint64_t bits = __float_as_uint(v);
  return __longlong_as_double(static_cast<long long>(((bits >> 31) << 63) | 0x7FF0000000000000ULL | kDoubleQuietBit |
                                                     ((bits & 0x007FFFFFULL) << 29)));
}

// double -> float keeping a NaN's sign and the top of its payload (quieted), as cvtsd2ss.
__device__ __forceinline__ float narrow_nan(double v) {
  const auto bits = static_cast<std::uint64_t>(__double_as_longlong(v));
  return __uint_as_float(
      static_cast<std::uint32_t>(((bits >> 63) << 31) | 0x7FC00000ULL | ((bits >> 29) & 0x007FFFFFULL)));
}

// double -> float as the reference's from_f64 narrows: to nearest even, overflow to infinity, NaN as cvtsd2ss.
__device__ __forceinline__ float narrow_double(double v) { return v != v ? narrow_nan(v) : __double2float_rn(v); }

// Stores a double as the reference's from_f64: f64 as is; otherwise narrowed to f32, then rounded to f16 or bf16 by
// common.cuh's f16_from_float (NaN -> 0x7E00 with its sign) and bf16_from_float (NaN -> 0x7FC0): to nearest even,
// overflow to infinity.
__device__ __forceinline__ void store_double(double* p, std::int64_t i, double v) { p[i] = v; }
__device__ __forceinline__ void store_double(float* p, std::int64_t i, double v) { p[i] = narrow_double(v); }
__device__ __forceinline__ void store_double(__half* p, std::int64_t i, double v) {
  p[i] = __ushort_as_half(f16_from_float(narrow_double(v)).bits);
}
__device__ __forceinline__ void store_double(__nv_bfloat16* p, std::int64_t i, double v) {
  p[i] = __ushort_as_bfloat16(bf16_from_float(narrow_double(v)).bits);
}

// ---- kernels ----

// Which scale applies to element i: scale[0] per tensor (channels == 1), else its index along the axis.
struct ChannelMap {
  std::int64_t inner = 1;     // elements per step along the axis
  std::int64_t channels = 1;  // scale values
};

__device__ __forceinline__ std::int64_t channel_of(const ChannelMap& m, std::int64_t i) {
  return m.channels == 1 ? 0 : (i / m.inner) % m.channels;
}

template <typename TIn, bool kE4M3>
__global__ void quantize_kernel(const TIn* __restrict__ x, const float* __restrict__ scale, void* __restrict__ y,
                                std::int64_t count, ChannelMap map) {
  wait_for_preceding_steps();
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    static_cast<std::uint8_t*>(y)[i] = quantize_one<TIn, kE4M3>(x[i], scale[channel_of(map, i)]);
  }
}

// One scale for the whole tensor, 16 elements a thread and iteration: two 16-byte loads (f16/bf16), both issued before
// any arithmetic so that more bytes are in flight, and one 16-byte store; the math in f32 with the f64 quotient on
// rounding midpoints (quantize_one_f32), bit for bit the element kernel's result. i8 multiplies by the scale's
// reciprocal instead of dividing, the division deciding near midpoints (quantize_i8_by_reciprocal: the same bytes,
// about half the instructions; the division made the kernel issue-bound at 40% of the copy limit on the H200).
constexpr int kVector = 16;
template <typename TIn, bool kE4M3>
__global__ void __launch_bounds__(kThreads)
    quantize_vector_kernel(const TIn* __restrict__ x, const float* __restrict__ scale, void* __restrict__ y,
                           std::int64_t groups) {
  wait_for_preceding_steps();
  const float s = scale[0];
  const float reciprocal = kE4M3 ? 0.0F : i8_reciprocal(s);
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < groups;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const uint4* in = reinterpret_cast<const uint4*>(x) + 2 * i;
    const uint4 raw[2] = {__ldcs(in), __ldcs(in + 1)};  // read once: streaming loads
    TIn v[kVector];
    memcpy(v, raw, sizeof raw);
    std::uint8_t q[kVector];
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      if constexpr (kE4M3) {
        q[j] = quantize_one_f32<TIn, true>(v[j], s);
      } else {
        q[j] = quantize_i8_by_reciprocal<TIn>(v[j], s, reciprocal);
      }
    }
    uint4 bits;
    memcpy(&bits, q, sizeof bits);
    reinterpret_cast<uint4*>(y)[i] = bits;
  }
}

template <bool kE4M3, typename TOut>
__global__ void dequantize_kernel(const void* __restrict__ x, const float* __restrict__ scale, TOut* __restrict__ y,
                                  std::int64_t count, ChannelMap map) {
  wait_for_preceding_steps();
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float s = scale[channel_of(map, i)];
    float xv = 0.0F;
    if constexpr (kE4M3) {
      // Exact (common.cuh's F8E4M3Format::widen); a NaN becomes the quiet NaN 0x7FF00000 with its sign, as the CPU
      // reference's widening.
      xv = to_compute(F8E4M3{static_cast<const std::uint8_t*>(x)[i]});
    } else {
      xv = static_cast<float>(static_cast<const std::int8_t*>(x)[i]);
    }
    // Exact in f64: at most 4 (e4m3) or 8 (i8) significant bits times 24.
    double r = static_cast<double>(xv) * static_cast<double>(s);
    if (r != r)
      r = xv != xv ? widen_nan(xv)
                   : (s != s ? widen_nan(s) : __longlong_as_double(static_cast<long long>(kDefaultNan)));
    store_double(y, i, r);
  }
}

ChannelMap channel_map(const StepLaunch& launch) {
  const Dims& x = launch.inputs.at(0).shape;
  const Dims& scale = launch.inputs.at(1).shape;
  ChannelMap map;
  if (scale.rank() == 0) return map;
  std::int64_t axis = launch.attrs->get_int("axis", 0);
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis >= x.rank()) launch.attrs->fail("attribute 'axis' is out of range for x");
  const int a = static_cast<int>(axis);
  map.channels = x[a];
  for (int i = a + 1; i < x.rank(); ++i) map.inner *= x[i];
  if (scale[0] != map.channels) launch.attrs->fail("the per-channel scale must have one value per channel of x");
  if (map.inner == 0) map.channels = 1;  // x is empty; never indexed
  return map;
}

// A quantize or dequantize step at one set of shapes: x's element count, which scale each element takes, and the
// kernel instantiation for the dtypes.
struct ScalePlan {
  using RunFn = void (*)(const StepLaunch& launch, const ScalePlan& plan);
  RunFn run = nullptr;  // nullptr: x is empty, nothing to launch
  std::int64_t count = 0;
  ChannelMap map;
  unsigned grid = 1;
};

template <typename T, bool kE4M3>
void run_quantize(const StepLaunch& launch, const ScalePlan& plan) {
  launch_kernel(launch, quantize_kernel<T, kE4M3>, plan.grid, kThreads, 0, static_cast<const T*>(launch.inputs[0].data),
                static_cast<const float*>(launch.inputs[1].data), launch.outputs[0].data, plan.count, plan.map);
}

// The vector kernel where x and y are aligned for its loads and stores (caller buffers may not be), else the
// element kernel.
template <typename T, bool kE4M3>
void run_quantize_vector(const StepLaunch& launch, const ScalePlan& plan) {
  const void* x = launch.inputs[0].data;
  void* y = launch.outputs[0].data;
  if (reinterpret_cast<std::uintptr_t>(x) % sizeof(uint4) != 0 ||
      reinterpret_cast<std::uintptr_t>(y) % sizeof(uint4) != 0) {
    run_quantize<T, kE4M3>(launch, plan);
    return;
  }
  const std::int64_t groups = plan.count / kVector;
  launch_kernel(launch, quantize_vector_kernel<T, kE4M3>, grid_for(groups), kThreads, 0, static_cast<const T*>(x),
                static_cast<const float*>(launch.inputs[1].data), y, groups);
}

template <bool kE4M3, typename T>
void run_dequantize(const StepLaunch& launch, const ScalePlan& plan) {
  launch_kernel(launch, dequantize_kernel<kE4M3, T>, plan.grid, kThreads, 0, launch.inputs[0].data,
                static_cast<const float*>(launch.inputs[1].data), static_cast<T*>(launch.outputs[0].data), plan.count,
                plan.map);
}

ScalePlan prepare_quantize(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  ScalePlan plan;
  plan.count = volume(x.shape);
  if (plan.count == 0) return plan;
  plan.map = channel_map(launch);
  plan.grid = grid_for(plan.count);
  const bool e4m3 = out.dtype == DataType::kF8E4M3;
  if (!e4m3 && out.dtype != DataType::kI8) launch.attrs->fail("unsupported output dtype for the CUDA quantize kernel");
  const bool handled = dispatch_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    plan.run = e4m3 ? &run_quantize<T, true> : &run_quantize<T, false>;
  });
  if (!handled) launch.attrs->fail("unsupported input dtype for the CUDA quantize kernel");
  return plan;
}

// The vector kernel: f16/bf16 x with one scale (its supports function checks the dtypes and the scale); a count that
// is not a multiple of 16 (known only here, shapes may be dynamic) runs the element kernel.
ScalePlan prepare_quantize_vector(const StepLaunch& launch) {
  ScalePlan plan = prepare_quantize(launch);
  if (plan.run == nullptr || plan.count % kVector != 0) return plan;
  const bool e4m3 = launch.outputs[0].dtype == DataType::kF8E4M3;
  if (launch.inputs[0].dtype == DataType::kF16) {
    plan.run = e4m3 ? &run_quantize_vector<__half, true> : &run_quantize_vector<__half, false>;
  } else {
    plan.run = e4m3 ? &run_quantize_vector<__nv_bfloat16, true> : &run_quantize_vector<__nv_bfloat16, false>;
  }
  return plan;
}

ScalePlan prepare_dequantize(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  ScalePlan plan;
  plan.count = volume(x.shape);
  if (plan.count == 0) return plan;
  plan.map = channel_map(launch);
  plan.grid = grid_for(plan.count);
  const bool e4m3 = x.dtype == DataType::kF8E4M3;
  if (!e4m3 && x.dtype != DataType::kI8) launch.attrs->fail("unsupported input dtype for the CUDA dequantize kernel");
  const bool handled = dispatch_float(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    plan.run = e4m3 ? &run_dequantize<true, T> : &run_dequantize<false, T>;
  });
  if (!handled) launch.attrs->fail("unsupported output dtype for the CUDA dequantize kernel");
  return plan;
}

// Both ops' launch: the instantiation prepare chose, or nothing for an empty x.
void launch_scaled(const StepLaunch& launch, const ScalePlan& plan) {
  if (plan.run != nullptr) plan.run(launch, plan);
}

// ---- supports ----

// x has kIn, the scale f32 (a scalar or rank 1), the output kOut.
template <DataType kIn, DataType kOut>
bool supports_scaled(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (!has_tensor(layer, 0) || !has_tensor(layer, 1) || layer.outputs.size() != 1) return false;
  const auto& scale = graph.tensor(layer.inputs[1]);
  return graph.tensor(layer.inputs[0]).dtype == kIn && scale.dtype == DataType::kF32 && scale.shape.size() <= 1 &&
         graph.tensor(layer.outputs[0]).dtype == kOut;
}

// The vector kernel's layers: one scale (a scalar), x f16 or bf16.
template <DataType kIn, DataType kOut>
bool supports_vector(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return supports_scaled<kIn, kOut>(graph, layer, precision) && graph.tensor(layer.inputs[1]).shape.empty();
}

}  // namespace

void register_quantization_kernels(std::vector<KernelEntry>& kernels) {
  constexpr DataType kF32 = DataType::kF32, kF16 = DataType::kF16, kBF16 = DataType::kBF16, kF64 = DataType::kF64;
  constexpr DataType kI8 = DataType::kI8, kE4M3 = DataType::kF8E4M3;
  const std::vector<KernelEntry> entries = {
      // x / scale in f64, rounded half to even onto the grid, saturating
      prepared_kernel<prepare_quantize, launch_scaled>("quantize_f32_i8_f64math_elementwise", "quantize",
                                                       supports_scaled<kF32, kI8>, 0),
      prepared_kernel<prepare_quantize, launch_scaled>("quantize_f16_i8_f64math_elementwise", "quantize",
                                                       supports_scaled<kF16, kI8>, 0),
      prepared_kernel<prepare_quantize, launch_scaled>("quantize_bf16_i8_f64math_elementwise", "quantize",
                                                       supports_scaled<kBF16, kI8>, 0),
      prepared_kernel<prepare_quantize, launch_scaled>("quantize_f64_i8_f64math_elementwise", "quantize",
                                                       supports_scaled<kF64, kI8>, 0),
      prepared_kernel<prepare_quantize, launch_scaled>("quantize_f32_f8e4m3_f64math_elementwise", "quantize",
                                                       supports_scaled<kF32, kE4M3>, 0),
      prepared_kernel<prepare_quantize, launch_scaled>("quantize_f16_f8e4m3_f64math_elementwise", "quantize",
                                                       supports_scaled<kF16, kE4M3>, 0),
      prepared_kernel<prepare_quantize, launch_scaled>("quantize_bf16_f8e4m3_f64math_elementwise", "quantize",
                                                       supports_scaled<kBF16, kE4M3>, 0),
      prepared_kernel<prepare_quantize, launch_scaled>("quantize_f64_f8e4m3_f64math_elementwise", "quantize",
                                                       supports_scaled<kF64, kE4M3>, 0),
      // The same result, 16 elements a thread for f16/bf16 x with one scale, in f32 but for rounding midpoints (timed
      // against the elementwise kernels)
      prepared_kernel<prepare_quantize_vector, launch_scaled>("quantize_f16_i8_f32math_vector16", "quantize",
                                                              supports_vector<kF16, kI8>, 0),
      prepared_kernel<prepare_quantize_vector, launch_scaled>("quantize_bf16_i8_f32math_vector16", "quantize",
                                                              supports_vector<kBF16, kI8>, 0),
      prepared_kernel<prepare_quantize_vector, launch_scaled>("quantize_f16_f8e4m3_f32math_vector16", "quantize",
                                                              supports_vector<kF16, kE4M3>, 0),
      prepared_kernel<prepare_quantize_vector, launch_scaled>("quantize_bf16_f8e4m3_f32math_vector16", "quantize",
                                                              supports_vector<kBF16, kE4M3>, 0),
      // x * scale exactly in f64, rounded once (through f32) to the output dtype
      prepared_kernel<prepare_dequantize, launch_scaled>("dequantize_i8_f32_f64math_elementwise", "dequantize",
                                                         supports_scaled<kI8, kF32>, 0),
      prepared_kernel<prepare_dequantize, launch_scaled>("dequantize_i8_f16_f64math_elementwise", "dequantize",
                                                         supports_scaled<kI8, kF16>, 0),
      prepared_kernel<prepare_dequantize, launch_scaled>("dequantize_i8_bf16_f64math_elementwise", "dequantize",
                                                         supports_scaled<kI8, kBF16>, 0),
      prepared_kernel<prepare_dequantize, launch_scaled>("dequantize_i8_f64_f64math_elementwise", "dequantize",
                                                         supports_scaled<kI8, kF64>, 0),
      prepared_kernel<prepare_dequantize, launch_scaled>("dequantize_f8e4m3_f32_f64math_elementwise", "dequantize",
                                                         supports_scaled<kE4M3, kF32>, 0),
      prepared_kernel<prepare_dequantize, launch_scaled>("dequantize_f8e4m3_f16_f64math_elementwise", "dequantize",
                                                         supports_scaled<kE4M3, kF16>, 0),
      prepared_kernel<prepare_dequantize, launch_scaled>("dequantize_f8e4m3_bf16_f64math_elementwise", "dequantize",
                                                         supports_scaled<kE4M3, kBF16>, 0),
      prepared_kernel<prepare_dequantize, launch_scaled>("dequantize_f8e4m3_f64_f64math_elementwise", "dequantize",
                                                         supports_scaled<kE4M3, kF64>, 0),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

}  // namespace tensoracle::cuda
