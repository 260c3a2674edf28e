// CUDA kernels of max_pool2d / avg_pool2d (cudnnPoolingForward and direct kernels; max_pool2d of i8 in the direct ones)
// and global_avg_pool.
//
// Semantics follow the CPU reference kernels (src/backends/cpu/kernels/convolution.cpp): f16/bf16 compute in f32, f64
// in f64; the direct kernels' pooling averages and the global average compute in f64 as the reference does, then
// round once through f32 to the output dtype (cuDNN's averages: f32, f64 for f64). cuDNN's pooling candidates run on
// the execution context's handle (StepLaunch::handles), their descriptors made when the step is prepared; cuDNN 9.0 or
// newer is required at run time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/cudnn_util.hpp"
#include "backends/cuda/kernels/quantize_rounding.cuh"

namespace tensoracle::cuda {
namespace {

using conv_family::Accum;
using conv_family::all_dtype;
using conv_family::channels_first_dims;
using conv_family::channels_last;
using conv_family::check_cudnn;
using conv_family::cudnn_type;
using conv_family::is_refusal;
using conv_family::list_value;
using conv_family::load;
using conv_family::PoolingDesc;
using conv_family::require_cudnn9;
using conv_family::store;
using conv_family::store_from_double;
using conv_family::TensorDesc;
using kernels::dispatch_float;
using kernels::grid_for;
using kernels::kMaxGridBlocks;
using kernels::kMaxIndex32;
using kernels::kThreads;
using kernels::launch_kernel;
using kernels::layer_name;
using kernels::wait_for_preceding_steps;

// ---- pooling ----

struct PoolShape {
  std::int64_t planes = 1, h = 1, w = 1, oh = 1, ow = 1;
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  std::int64_t channels = 1;  // channels last: planes = N · channels
  std::int64_t block = 1;     // max_pool2d's input_block_size: channels-last x in block x block cells
  bool count_include_pad = true;
};

PoolShape pool_shape(const StepLaunch& launch) {
  const bool last = channels_last(launch);
  Dims x = last ? channels_first_dims(launch.inputs.at(0).shape) : launch.inputs.at(0).shape;
  const Dims y = last ? channels_first_dims(launch.outputs.at(0).shape) : launch.outputs.at(0).shape;
  const std::vector<std::int64_t> kernel = launch.attrs->get_ints("kernel");
  PoolShape s;
  if (last && launch.layer != nullptr && launch.layer->op == "max_pool2d") {
    s.block = launch.attrs->get_int("input_block_size", 1);
    x = Dims{x[0], x[1] / (s.block * s.block), x[2] * s.block, x[3] * s.block};
  }
  s.channels = x[1];
  s.planes = x[0] * x[1];
  s.h = x[2];
  s.w = x[3];
  s.oh = y[2];
  s.ow = y[3];
  s.kh = kernel.at(0);
  s.kw = kernel.at(1);
  s.sh = list_value(launch, "stride", 0, s.kh);
  s.sw = list_value(launch, "stride", 1, s.kw);
  s.ph = list_value(launch, "padding", 0, 0);
  s.pw = list_value(launch, "padding", 1, 0);
  if (launch.layer != nullptr && launch.layer->op == "avg_pool2d") {
    s.count_include_pad = launch.attrs->get_bool("count_include_pad", true);
  }
  return s;
}

// i8 x (max_pool2d only): its integers compared in f32 (exact) and stored back.
__device__ __forceinline__ float load(const std::int8_t* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ void store(std::int8_t* p, std::int64_t i, float v) {
  p[i] = static_cast<std::int8_t>(static_cast<int>(v));
}

// Index arithmetic in I: int32 when every index of the launch fits below kMaxIndex32 (integer division is much
// cheaper), else int64.
template <typename I>
__device__ __forceinline__ I min_i(I a, I b) {
  return a < b ? a : b;
}
template <typename I>
__device__ __forceinline__ I max_i(I a, I b) {
  return a > b ? a : b;
}

// Channels last, the position of input element (ih, iw) of an image w wide, in units of its channels: row-major, or
// with input_block_size b > 1 inside b x b cells (w / b cells a row, each cell's b·b elements in a row). The row's
// part and the column's part add up. ih, iw >= 0; b = 2 (a blocked stem's cells) by shifts.
template <typename I>
__device__ __forceinline__ I row_position(I ih, I w, I b) {
  if (b == 1) return ih * w;
  if (b == 2) return (ih >> 1) * w * 2 + (ih & 1) * 2;
  return ih / b * w * b + ih % b * b;
}
template <typename I>
__device__ __forceinline__ I column_position(I iw, I b) {
  if (b == 1) return iw;
  if (b == 2) return ((iw >> 1) << 2) + (iw & 1);
  return iw / b * b * b + iw % b;
}

// What a max pool writes: its result as is (kNone), or quantized by one f32 scale to i8 or e4m3 (`quantize_to`), the
// maximum rounded as the quantize kernels round it (f64 inputs in f64, the others through the f32 path, the same
// bytes).
enum class PoolOut : int { kNone, kI8, kE4M3 };

template <typename T, PoolOut kOut>
using PoolStore = std::conditional_t<kOut == PoolOut::kNone, T, std::uint8_t>;

template <typename T, PoolOut kOut>
__device__ __forceinline__ PoolStore<T, kOut> pool_result(Accum<T> best, float scale) {
  T v;
  store(&v, 0, best);  // exact: the maximum is one of x's values
  if constexpr (kOut == PoolOut::kNone) {
    return v;
  } else if constexpr (std::is_same_v<T, double>) {
    return quantize_rounding::quantize_one<T, kOut == PoolOut::kE4M3>(v, scale);
  } else {
    return quantize_rounding::quantize_one_f32<T, kOut == PoolOut::kE4M3>(v, scale);
  }
}

// Element i of y [N, OH, OW, C] channels last, or of y [N·C, OH, OW] (NCHW, each plane an image of one channel: the
// launch passes s.channels = 1): the window of output (oy, ox) clipped to the input (the shape rules leave at least one
// input in every window). Padding never wins; NaN propagates (the last NaN seen is kept), as the CPU reference.
template <typename T, typename I, PoolOut kOut>
__global__ void max_pool_direct_kernel(const T* __restrict__ x, PoolStore<T, kOut>* __restrict__ y, PoolShape s,
                                       const float* __restrict__ scale) {
  wait_for_preceding_steps();
  using A = Accum<T>;
  const float q = kOut == PoolOut::kNone ? 1.0F : *scale;
  const I total = static_cast<I>(s.planes * s.oh * s.ow);
  const I h = static_cast<I>(s.h), w = static_cast<I>(s.w), oh = static_cast<I>(s.oh), ow = static_cast<I>(s.ow);
  const I kh = static_cast<I>(s.kh), kw = static_cast<I>(s.kw), sh = static_cast<I>(s.sh), sw = static_cast<I>(s.sw);
  const I ph = static_cast<I>(s.ph), pw = static_cast<I>(s.pw), channels = static_cast<I>(s.channels);
  const I b = static_cast<I>(s.block);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I c = i % channels;
    I t = i / channels;
    const I ox = t % ow;
    t /= ow;
    const I oy = t % oh;
    const I n = t / oh;
    const I h0 = oy * sh - ph, w0 = ox * sw - pw;
    const I hb = max_i<I>(h0, 0), he = min_i<I>(h0 + kh, h);
    const I wb = max_i<I>(w0, 0), we = min_i<I>(w0 + kw, w);
    const T* xp = x + n * h * w * channels + c;
    A best = -kernels::math::infinity<A>();
    for (I ih = hb; ih < he; ++ih) {
      const I row = row_position(ih, w, b);
      for (I iw = wb; iw < we; ++iw) {
        const A v = load(xp, (row + column_position(iw, b)) * channels);
        if (v > best || v != v) best = v;
      }
    }
    y[i] = pool_result<T, kOut>(best, q);
  }
}

// Channels last with whole 16-byte words of channels (8 f16/bf16, 4 f32, 2 f64; the addresses are 16-byte aligned):
// each thread takes one word of one output position, so the window's loads and the store are 16 bytes wide and the
// index arithmetic is shared by the word's channels (a quantized result: kVec bytes, one store). The same window rule
// and NaN handling.
// The word a thread stores: its 16 bytes of x's channels as the result type (16 bytes, or 8/4/2 quantized).
template <typename T, PoolOut kOut>
using PoolWord = typename kernels::Word<static_cast<int>(sizeof(uint4) / sizeof(T) * sizeof(PoolStore<T, kOut>))>::type;

template <typename T, typename I, PoolOut kOut>
__global__ void max_pool_nhwc_words_kernel(const uint4* __restrict__ x, PoolWord<T, kOut>* __restrict__ y, PoolShape s,
                                           const float* __restrict__ scale) {
  wait_for_preceding_steps();
  using A = Accum<T>;
  constexpr int kVec = static_cast<int>(sizeof(uint4) / sizeof(T));
  const I words = static_cast<I>(s.channels / kVec);
  const I total = static_cast<I>(s.planes / s.channels * s.oh * s.ow) * words;
  const I h = static_cast<I>(s.h), w = static_cast<I>(s.w), oh = static_cast<I>(s.oh), ow = static_cast<I>(s.ow);
  const I kh = static_cast<I>(s.kh), kw = static_cast<I>(s.kw), sh = static_cast<I>(s.sh), sw = static_cast<I>(s.sw);
  const I ph = static_cast<I>(s.ph), pw = static_cast<I>(s.pw), b = static_cast<I>(s.block);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I c = i % words;
    I t = i / words;
    const I ox = t % ow;
    t /= ow;
    const I oy = t % oh;
    const I n = t / oh;
    const I h0 = oy * sh - ph, w0 = ox * sw - pw;
    const uint4* xp = x + n * h * w * words + c;
    // Calls take(word) for the window's words inside x, row by row.
    auto for_window = [&](auto&& take) {
      if (kh == 3 && kw == 3) {
        // A 3x3 window (a CNN's stem pool): its words inside x are all loaded before any is compared, so that the
        // loads are in flight together; then taken in the same order as below.
        uint4 window[9];
        bool inside[9];
#pragma unroll
        for (int r = 0; r < 3; ++r) {
          const I ih = h0 + r;
          const bool row_inside = ih >= 0 && ih < h;
          const I row = row_inside ? row_position(ih, w, b) : 0;
#pragma unroll
          for (int k = 0; k < 3; ++k) {
            const I iw = w0 + k;
            inside[r * 3 + k] = row_inside && iw >= 0 && iw < w;
            window[r * 3 + k] =
                inside[r * 3 + k] ? xp[(row + column_position(iw, b)) * words] : make_uint4(0U, 0U, 0U, 0U);
          }
        }
#pragma unroll
        for (int j = 0; j < 9; ++j) {
          if (inside[j]) take(window[j]);
        }
      } else {
        const I hb = max_i<I>(h0, 0), he = min_i<I>(h0 + kh, h);
        const I wb = max_i<I>(w0, 0), we = min_i<I>(w0 + kw, w);
        for (I ih = hb; ih < he; ++ih) {
          const I row = row_position(ih, w, b);
          for (I iw = wb; iw < we; ++iw) take(xp[(row + column_position(iw, b)) * words]);
        }
      }
    };
    if constexpr (std::is_same_v<T, std::int8_t>) {
      // i8: 16 channels a word, compared four to a 32-bit lane (signed bytewise maximum).
      uint4 best = make_uint4(0x80808080U, 0x80808080U, 0x80808080U, 0x80808080U);
      for_window([&](const uint4& word) {
        best.x = __vmaxs4(best.x, word.x);
        best.y = __vmaxs4(best.y, word.y);
        best.z = __vmaxs4(best.z, word.z);
        best.w = __vmaxs4(best.w, word.w);
      });
      y[i] = best;
    } else {
      const float q = kOut == PoolOut::kNone ? 1.0F : *scale;
      A best[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) best[e] = -kernels::math::infinity<A>();
      for_window([&](const uint4& word) {
        T v[kVec];
        memcpy(v, &word, sizeof word);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const A a = load(v, e);
          if (a > best[e] || a != a) best[e] = a;
        }
      });
      PoolStore<T, kOut> out[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) out[e] = pool_result<T, kOut>(best[e], q);
      PoolWord<T, kOut> word;
      memcpy(&word, out, sizeof word);
      y[i] = word;
    }
  }
}

// Sum in f64; the divisor is PyTorch's: with count_include_pad the window clipped to the padded input (a ceil_mode
// window may reach past it), otherwise the window clipped to the input.
template <typename T, typename I>
__global__ void avg_pool_kernel(const T* __restrict__ x, T* __restrict__ y, PoolShape s) {
  wait_for_preceding_steps();
  const I total = static_cast<I>(s.planes * s.oh * s.ow);
  const I h = static_cast<I>(s.h), w = static_cast<I>(s.w), oh = static_cast<I>(s.oh), ow = static_cast<I>(s.ow);
  const I kh = static_cast<I>(s.kh), kw = static_cast<I>(s.kw), sh = static_cast<I>(s.sh), sw = static_cast<I>(s.sw);
  const I ph = static_cast<I>(s.ph), pw = static_cast<I>(s.pw);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I ox = i % ow;
    const I t = i / ow;
    const I oy = t % oh;
    const I p = t / oh;
    const I h0 = oy * sh - ph, w0 = ox * sw - pw;
    const I h1 = min_i<I>(h0 + kh, h + ph), w1 = min_i<I>(w0 + kw, w + pw);
    const I hb = max_i<I>(h0, 0), wb = max_i<I>(w0, 0);
    const I he = min_i<I>(h1, h), we = min_i<I>(w1, w);
    const T* xp = x + p * h * w;
    double sum = 0.0;
    for (I ih = hb; ih < he; ++ih) {
      for (I iw = wb; iw < we; ++iw) sum += static_cast<double>(load(xp, ih * w + iw));
    }
    const I count = s.count_include_pad ? (h1 - h0) * (w1 - w0) : (he - hb) * (we - wb);
    store_from_double(y, i, sum / static_cast<double>(count));
  }
}

enum class PoolKernel { kMaxNchw, kMaxNhwc, kMaxNhwcWords, kAvg };

// The direct kernels' plan: the geometry and the kernel of the dtype, layout and index width.
struct PoolPlan {
  PoolShape s;
  unsigned grid = 1;
  unsigned words_grid = 1;                                    // kMaxNhwcWords: a thread per 16-byte word of the output
  void (*run)(const StepLaunch&, const PoolPlan&) = nullptr;  // nullptr: no output elements
};

template <typename T, typename I, PoolKernel kKernel, PoolOut kOut>
void launch_pool_typed(const StepLaunch& launch, const PoolPlan& plan) {
  const T* x = static_cast<const T*>(launch.inputs.at(0).data);
  auto* y = static_cast<PoolStore<T, kOut>*>(launch.outputs.at(0).data);
  // `quantize_to`: the output scale (input 1), read on the device.
  const float* scale = kOut == PoolOut::kNone ? nullptr : static_cast<const float*>(launch.inputs.at(1).data);
  if constexpr (kKernel == PoolKernel::kMaxNchw) {
    PoolShape planes = plan.s;  // each of the N·C planes an image of one channel
    planes.channels = 1;
    launch_kernel(launch, max_pool_direct_kernel<T, I, kOut>, plan.grid, kThreads, 0, x, y, planes, scale);
  } else if constexpr (kKernel == PoolKernel::kMaxNhwc) {
    launch_kernel(launch, max_pool_direct_kernel<T, I, kOut>, plan.grid, kThreads, 0, x, y, plan.s, scale);
  } else if constexpr (kKernel == PoolKernel::kMaxNhwcWords) {
    using Word = PoolWord<T, kOut>;
    if (kernels::pointer_alignment(x, 16) < 16 || kernels::pointer_alignment(y, sizeof(Word)) < sizeof(Word)) {
      launch_kernel(launch, max_pool_direct_kernel<T, I, kOut>, plan.grid, kThreads, 0, x, y, plan.s, scale);
    } else {
      launch_kernel(launch, max_pool_nhwc_words_kernel<T, I, kOut>, plan.words_grid, kThreads, 0,
                    reinterpret_cast<const uint4*>(x), reinterpret_cast<Word*>(y), plan.s, scale);
    }
  } else {
    launch_kernel(launch, avg_pool_kernel<T, I>, plan.grid, kThreads, 0, x, y, plan.s);
  }
}

using PoolLauncher = void (*)(const StepLaunch&, const PoolPlan&);

template <typename T, PoolKernel kKernel, PoolOut kOut = PoolOut::kNone>
PoolLauncher pool_launcher(bool index32) {
  return index32 ? &launch_pool_typed<T, std::int32_t, kKernel, kOut>
                 : &launch_pool_typed<T, std::int64_t, kKernel, kOut>;
}

template <typename T, PoolOut kOut>
PoolLauncher max_pool_launcher(const StepLaunch& launch, bool words, bool index32) {
  return !channels_last(launch) ? pool_launcher<T, PoolKernel::kMaxNchw, kOut>(index32)
         : words                ? pool_launcher<T, PoolKernel::kMaxNhwcWords, kOut>(index32)
                                : pool_launcher<T, PoolKernel::kMaxNhwc, kOut>(index32);
}

template <bool kMax>
PoolPlan prepare_pool(const StepLaunch& launch) {
  PoolPlan plan;
  plan.s = pool_shape(launch);
  const PoolShape& s = plan.s;
  const std::int64_t total = s.planes * s.oh * s.ow;
  if (total == 0) return plan;
  plan.grid = grid_for(total);
  const bool index32 =
      total <= kMaxIndex32 && s.planes * (s.h + 2 * s.ph + s.kh) * (s.w + 2 * s.pw + s.kw) <= kMaxIndex32;
  const DataType out = launch.outputs.at(0).dtype;
  const auto for_input = [&](auto&& f) {  // max_pool2d also takes i8
    if constexpr (kMax) {
      if (launch.inputs.at(0).dtype == DataType::kI8) return f(std::int8_t{}), true;
    }
    return dispatch_float(launch.inputs.at(0).dtype, f);
  };
  const bool handled = for_input([&](auto tag) {
    using T = decltype(tag);
    if constexpr (kMax) {
      const bool words = (s.channels * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
      plan.words_grid = grid_for(total / std::max<std::int64_t>(1, 16 / static_cast<std::int64_t>(sizeof(T))));
      if constexpr (std::is_same_v<T, std::int8_t>) {
        plan.run = max_pool_launcher<T, PoolOut::kNone>(launch, words, index32);
      } else {
        plan.run = out == DataType::kI8       ? max_pool_launcher<T, PoolOut::kI8>(launch, words, index32)
                   : out == DataType::kF8E4M3 ? max_pool_launcher<T, PoolOut::kE4M3>(launch, words, index32)
                                              : max_pool_launcher<T, PoolOut::kNone>(launch, words, index32);
      }
    } else {
      plan.run = pool_launcher<T, PoolKernel::kAvg>(index32);
    }
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA pooling kernel");
  return plan;
}

void launch_pool(const StepLaunch& launch, const PoolPlan& plan) {
  if (plan.run == nullptr) return;
  plan.run(launch, plan);
}

// cudnnPoolingForward, timed by the builder against the direct kernels. cuDNN computes floor-mode windows only, so a
// ceil_mode layer whose output is larger (or a problem beyond its int descriptors) runs the direct kernel. Max pooling
// propagates NaN; averages divide by the whole window (count_include_pad) or by its part inside the input, which is
// the reference's rule whenever windows stay within the padded input (floor mode). f16/bf16 accumulate in f32.
struct CudnnPoolPlan {
  PoolPlan direct;  // what cuDNN does not run: when prepared, or when cudnnPoolingForward returns a refusal
  bool use_cudnn = false;
  bool f64 = false;
  cudnnHandle_t handle = nullptr;
  TensorDesc in, out;
  PoolingDesc pooling;
};

template <bool kMax>
CudnnPoolPlan prepare_pool_cudnn(const StepLaunch& launch) {
  require_cudnn9(launch);
  CudnnPoolPlan plan;
  plan.direct = prepare_pool<kMax>(launch);
  const PoolShape& s = plan.direct.s;
  if (s.planes * s.oh * s.ow == 0) return plan;
  const bool floor_mode = (s.h + 2 * s.ph - s.kh) / s.sh + 1 == s.oh && (s.w + 2 * s.pw - s.kw) / s.sw + 1 == s.ow;
  const std::int64_t n = s.planes / s.channels;
  const std::array<std::int64_t, 11> dims = {n, s.channels, s.h, s.w, s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.planes};
  bool fits = n * s.channels * s.h * s.w <= INT_MAX;
  for (std::int64_t v : dims) fits = fits && v >= 0 && v <= INT_MAX;
  if (!floor_mode || !fits) return plan;

  plan.handle = launch.handles->cudnn(layer_name(launch));
  const DataType dtype = launch.inputs.at(0).dtype;
  plan.f64 = dtype == DataType::kF64;
  auto i = [](std::int64_t v) { return static_cast<int>(v); };
  const cudnnTensorFormat_t format = channels_last(launch) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const cudnnDataType_t type = cudnn_type(dtype);
  const cudnnPoolingMode_t mode = kMax                  ? CUDNN_POOLING_MAX_DETERMINISTIC
                                  : s.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                        : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  check_cudnn(cudnnCreateTensorDescriptor(&plan.in.d), "cudnnCreateTensorDescriptor", launch);
  check_cudnn(cudnnCreateTensorDescriptor(&plan.out.d), "cudnnCreateTensorDescriptor", launch);
  check_cudnn(cudnnCreatePoolingDescriptor(&plan.pooling.d), "cudnnCreatePoolingDescriptor", launch);
  const cudnnStatus_t status[3] = {
      cudnnSetTensor4dDescriptor(plan.in.d, format, type, i(n), i(s.channels), i(s.h), i(s.w)),
      cudnnSetTensor4dDescriptor(plan.out.d, format, type, i(n), i(s.channels), i(s.oh), i(s.ow)),
      cudnnSetPooling2dDescriptor(plan.pooling.d, mode, CUDNN_PROPAGATE_NAN, i(s.kh), i(s.kw), i(s.ph), i(s.pw),
                                  i(s.sh), i(s.sw))};
  plan.use_cudnn = true;
  for (cudnnStatus_t st : status) {
    if (is_refusal(st))
      plan.use_cudnn = false;
    else
      check_cudnn(st, "cudnnSetTensor4dDescriptor/cudnnSetPooling2dDescriptor", launch);
  }
  return plan;
}

void launch_pool_cudnn(const StepLaunch& launch, const CudnnPoolPlan& plan) {
  if (!plan.use_cudnn) return launch_pool(launch, plan.direct);
  check_cudnn(cudnnSetStream(plan.handle, launch.stream), "cudnnSetStream", launch);
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0F, zero_f = 0.0F;
  const void* alpha = plan.f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta = plan.f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  const cudnnStatus_t status =
      cudnnPoolingForward(plan.handle, plan.pooling.d, alpha, plan.in.d, launch.inputs.at(0).data, beta, plan.out.d,
                          launch.outputs.at(0).data);
  // A refusal now: the direct kernel runs (the plan keeps use_cudnn, so a later launch asks cuDNN again).
  if (is_refusal(status)) return launch_pool(launch, plan.direct);
  check_cudnn(status, "cudnnPoolingForward", launch);
}

// ---- global_avg_pool: the mean of each [N, C] plane, summed in f64; an empty plane gives NaN (0/0) ----

__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xFFFFFFFFU, v, offset);
  return v;
}

// One warp per plane (short planes).
template <typename T>
__global__ void global_avg_pool_warp_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t planes,
                                            std::int64_t plane) {
  wait_for_preceding_steps();
  const int lane = static_cast<int>(threadIdx.x & 31U);
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; p < planes;
       p += warps) {
    const T* xp = x + p * plane;
    double sum = 0.0;
    for (std::int64_t j = lane; j < plane; j += 32) sum += static_cast<double>(load(xp, j));
    sum = warp_sum(sum);
    if (lane == 0) store_from_double(y, p, sum / static_cast<double>(plane));  // 0/0 is NaN
  }
}

// One block per plane (long planes).
template <typename T>
__global__ void global_avg_pool_block_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t planes,
                                             std::int64_t plane) {
  wait_for_preceding_steps();
  __shared__ double partial[32];
  const int lane = static_cast<int>(threadIdx.x & 31U);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  for (std::int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const T* xp = x + p * plane;
    double sum = 0.0;
    for (std::int64_t j = threadIdx.x; j < plane; j += blockDim.x) sum += static_cast<double>(load(xp, j));
    sum = warp_sum(sum);
    if (lane == 0) partial[warp] = sum;
    __syncthreads();
    if (warp == 0) {
      sum = lane < warps ? partial[lane] : 0.0;
      sum = warp_sum(sum);
      if (lane == 0) store_from_double(y, p, sum / static_cast<double>(plane));
    }
    __syncthreads();
  }
}

// Channels last: one thread per (n, c), summing its plane with stride C (neighbouring threads read neighbouring
// channels).
template <typename T>
__global__ void global_avg_pool_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t planes,
                                            std::int64_t plane, std::int64_t channels) {
  wait_for_preceding_steps();
  for (std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < planes;
       p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t n = p / channels, c = p % channels;
    const T* xp = x + n * plane * channels + c;
    double sum = 0.0;
    for (std::int64_t j = 0; j < plane; ++j) sum += static_cast<double>(load(xp, j * channels));
    store_from_double(y, p, sum / static_cast<double>(plane));  // 0/0 is NaN
  }
}

// global_avg_pool's plan: the planes and the kernel of the dtype and plane length (and layout).
struct GlobalAvgPoolPlan {
  std::int64_t planes = 0, plane = 1, channels = 1;
  unsigned blocks = 1;
  void (*run)(const StepLaunch&, const GlobalAvgPoolPlan&) = nullptr;  // nullptr: no planes
};

enum class GlobalAvgPoolKernel { kNhwc, kWarp, kBlock };

template <typename T, GlobalAvgPoolKernel kKernel>
void launch_global_avg_pool_typed(const StepLaunch& launch, const GlobalAvgPoolPlan& plan) {
  const T* x = static_cast<const T*>(launch.inputs.at(0).data);
  T* y = static_cast<T*>(launch.outputs.at(0).data);
  if constexpr (kKernel == GlobalAvgPoolKernel::kNhwc) {
    launch_kernel(launch, global_avg_pool_nhwc_kernel<T>, plan.blocks, kThreads, 0, x, y, plan.planes, plan.plane,
                  plan.channels);
  } else if constexpr (kKernel == GlobalAvgPoolKernel::kWarp) {
    launch_kernel(launch, global_avg_pool_warp_kernel<T>, plan.blocks, kThreads, 0, x, y, plan.planes, plan.plane);
  } else {
    launch_kernel(launch, global_avg_pool_block_kernel<T>, plan.blocks, kThreads, 0, x, y, plan.planes, plan.plane);
  }
}

GlobalAvgPoolPlan prepare_global_avg_pool(const StepLaunch& launch) {
  GlobalAvgPoolPlan plan;
  const Dims& x = launch.inputs.at(0).shape;
  if (channels_last(launch)) {  // x [N, H, W, C] -> y [N, C, 1, 1]
    plan.planes = x[0] * x[3];
    plan.plane = x[1] * x[2];
    plan.channels = x[3];
    if (plan.planes == 0) return plan;
    plan.blocks = grid_for(plan.planes);
    const bool handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
      plan.run = &launch_global_avg_pool_typed<decltype(tag), GlobalAvgPoolKernel::kNhwc>;
    });
    if (!handled) launch.attrs->fail("unsupported dtype for the CUDA global_avg_pool kernel");
    return plan;
  }
  plan.planes = x[0] * x[1];
  if (plan.planes == 0) return plan;
  plan.plane = kernels::volume(x, 2, x.rank());
  if (plan.plane <= 2048) {
    constexpr int kWarpsPerBlock = kThreads / 32;
    plan.blocks = static_cast<unsigned>(
        std::clamp<std::int64_t>((plan.planes + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, kMaxGridBlocks));
  } else {
    plan.blocks = static_cast<unsigned>(std::clamp<std::int64_t>(plan.planes, 1, kMaxGridBlocks));
  }
  const bool handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    plan.run = plan.plane <= 2048 ? &launch_global_avg_pool_typed<T, GlobalAvgPoolKernel::kWarp>
                                  : &launch_global_avg_pool_typed<T, GlobalAvgPoolKernel::kBlock>;
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA global_avg_pool kernel");
  return plan;
}

void launch_global_avg_pool(const StepLaunch& launch, const GlobalAvgPoolPlan& plan) {
  if (plan.run == nullptr) return;
  plan.run(launch, plan);
}

// ---- supports ----

template <DataType kDtype>
bool supports_pool(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return all_dtype<kDtype>(graph, layer, 4, 4);
}

// cuDNN's pooling: no input_block_size (an input in cells runs the direct kernels).
template <DataType kDtype>
bool supports_cudnn_pool(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return supports_pool<kDtype>(graph, layer, precision) &&
         graph::AttrReader(layer.attrs, layer.name, layer.op).get_int("input_block_size", 1) == 1;
}

// max_pool2d with `quantize_to`: x of kDtype, its f32 output scale, an i8 or e4m3 result (the direct kernels only).
template <DataType kDtype>
bool supports_quantized_max_pool(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer.inputs.size() != 2 || !kernels::has_tensor(layer, 0) || !kernels::has_tensor(layer, 1)) return false;
  if (layer.outputs.size() != 1 || graph.tensor(layer.inputs[0]).dtype != kDtype) return false;
  if (graph.tensor(layer.inputs[1]).dtype != DataType::kF32) return false;
  const DataType out = graph.tensor(layer.outputs[0]).dtype;
  return (out == DataType::kI8 || out == DataType::kF8E4M3) && graph.tensor(layer.inputs[0]).shape.size() == 4;
}

template <DataType kDtype>
bool supports_global_avg_pool(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return all_dtype<kDtype>(graph, layer, 3, INT_MAX);
}

}  // namespace

void register_pooling_kernels(std::vector<KernelEntry>& kernels) {
  const std::vector<KernelEntry> entries = {
      // cuDNN and the direct kernels, timed against each other
      TENSORACLE_CONV_ENTRIES("max_pool2d", "", "", "cudnn", supports_cudnn_pool, prepare_pool_cudnn<true>,
                              launch_pool_cudnn, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("max_pool2d", "", "", "direct", supports_pool, prepare_pool<true>, launch_pool, 0,
                              nullptr),
      prepared_kernel<prepare_pool<true>, launch_pool>("max_pool2d_i8_direct", "max_pool2d",
                                                       supports_pool<DataType::kI8>, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("max_pool2d", "", "", "quantized_direct", supports_quantized_max_pool, prepare_pool<true>,
                              launch_pool, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("avg_pool2d", "", "f32math_", "cudnn", supports_pool, prepare_pool_cudnn<false>,
                              launch_pool_cudnn, 0, nullptr),
      // averages are computed in f64, as the CPU reference does
      TENSORACLE_CONV_ENTRIES("avg_pool2d", "f64math_", "f64math_", "direct", supports_pool, prepare_pool<false>,
                              launch_pool, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("global_avg_pool", "f64math_", "f64math_", "direct", supports_global_avg_pool,
                              prepare_global_avg_pool, launch_global_avg_pool, 0, nullptr),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

}  // namespace tensoracle::cuda
