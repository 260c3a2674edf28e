// CUDA kernels of the convolution family: conv (1D/2D) and conv_transpose2d through cuDNN's convolution API with
// hand-written direct kernels beside them (and behind them, for problems cuDNN refuses), max_pool2d / avg_pool2d
// (cudnnPoolingForward and direct kernels, timed against each other), global_avg_pool and resize (nearest, bilinear).
// Semantics follow the CPU reference kernels (src/backends/cpu/kernels/convolution.cpp): f16/bf16 compute in f32, f64
// in f64; the direct kernels' pooling averages, the global average and bilinear resize compute in f64 as the
// reference does, then round once through f32 to the output dtype (cuDNN's averages: f32, f64 for f64).
//
// cuDNN: one cudnnHandle_t per (thread, device), created on the first cuDNN launch of that thread on that device.
// cudnnCreate is not stream-capture safe, so that first launch must not be under stream capture (a launch that would
// create a handle while its stream captures throws CudaError); every later launch only sets the handle's stream.
// f16/bf16 forward convolutions run as cuDNN graph plans (cudnn_conv_graph.hpp): the convolution and its fused bias,
// residual and relu in one operation graph whose execution plan is finalized on the first launch of a thread and
// reused, the epilogue computed in f32 and rounded once. Problems no graph engine takes, f32/f64 and conv_transpose2d
// use the legacy API below.
// Algorithms come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7: host-only, no benchmarking, no device
// allocation), the first one whose workspace fits launch.workspace_bytes (FFT algorithms and, for the data gradient,
// non-deterministic ones excluded); the choice and the descriptors are cached per thread and problem. f32 runs on FMA
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
#include <variant>
#include <vector>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/cudnn_conv_graph.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cuda {

void register_convolution_kernels(std::vector<KernelEntry>& kernels);
// The cuDNN library's version as it reports it at run time (major * 10000 + minor * 100 + patch for cuDNN 9).
int cudnn_runtime_version();

int cudnn_runtime_version() { return static_cast<int>(cudnnGetVersion()); }

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;  // grid-stride loops cover the rest
// cuDNN's scratch: what its convolution heuristics ask for at most in the common cases.
constexpr std::size_t kCudnnWorkspaceBytes = std::size_t{64} << 20;

const std::string& layer_name(const StepLaunch& launch) {
  static const std::string kUnnamed = "(unnamed layer)";
  return launch.layer != nullptr ? launch.layer->name : kUnnamed;
}

void check_launch(const StepLaunch& launch) { TENSORACLE_CUDA_CHECK(cudaGetLastError(), layer_name(launch)); }

unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, kMaxBlocks));
}

// ---- element types: storage (float, __half, __nv_bfloat16, double) and accumulation (float; double for f64) ----

template <typename T>
struct AccumOf {
  using type = float;
};
template <>
struct AccumOf<double> {
  using type = double;
};
template <typename T>
using Accum = typename AccumOf<T>::type;

__device__ __forceinline__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ double load(const double* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }

// Stores round to nearest even. f16: overflow to infinity, NaN becomes 0x7E00 with its sign (c10::Half); bf16: NaN
// becomes 0x7FC0 (c10::BFloat16), as the CPU reference's conversions.
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(double* p, std::int64_t i, double v) { p[i] = v; }
__device__ __forceinline__ void store(__half* p, std::int64_t i, float v) {
  if (v != v) {
    p[i] = __ushort_as_half(static_cast<unsigned short>(signbit(v) ? 0xFE00U : 0x7E00U));
  } else {
    p[i] = __float2half_rn(v);
  }
}
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) {
  if (v != v) {
    p[i] = __ushort_as_bfloat16(static_cast<unsigned short>(0x7FC0U));
  } else {
    p[i] = __float2bfloat16_rn(v);
  }
}

// A value computed in double, stored as the CPU reference's from_f64 stores it: f64 as is, everything else rounded to
// f32 first (beyond the f32 range to ±infinity) and then, for f16/bf16, to the dtype.
template <typename T>
__device__ __forceinline__ void store_from_double(T* p, std::int64_t i, double v) {
  if constexpr (std::is_same_v<T, double>) {
    p[i] = v;
  } else {
    store(p, i, __double2float_rn(v));
  }
}

template <typename T>
__device__ __forceinline__ Accum<T> negative_infinity() {
  if constexpr (std::is_same_v<T, double>) {
    return -__longlong_as_double(0x7FF0000000000000LL);
  } else {
    return -__int_as_float(0x7F800000);
  }
}

// Calls f(T{}) with the storage type of a float dtype; false for other dtypes.
template <typename F>
bool dispatch_float(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kF32: f(float{}); return true;
    case DataType::kF16: f(__half{}); return true;
    case DataType::kBF16: f(__nv_bfloat16{}); return true;
    case DataType::kF64: f(double{}); return true;
    default: return false;
  }
}

// ---- attributes ----

// The i-th value of a per-spatial-dim attribute list; `fallback` when the list is absent or empty.
std::int64_t list_value(const StepLaunch& launch, const char* name, std::size_t i, std::int64_t fallback) {
  const std::vector<std::int64_t> values = launch.attrs->get_ints(name, std::vector<std::int64_t>{});
  return values.empty() ? fallback : values.at(i);
}

// ---- convolution geometry ----

// conv: x [n, c, h, w], weight [o, c/groups, kh, kw], y [n, o, oh, ow].
// conv_transpose2d: x [n, c, h, w], weight [c, o/groups, kh, kw], y [n, o, oh, ow].
// A 1D layer ([N, C, L]) is the 2D one with h = kh = oh = 1. Input position of output p and tap k along an axis:
// p * stride - padding + k * dilation (conv); the same relation read the other way for conv_transpose2d.
struct ConvShape {
  std::int64_t n = 1, c = 1, h = 1, w = 1;
  std::int64_t o = 1, kh = 1, kw = 1;
  std::int64_t oh = 1, ow = 1;
  std::int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  std::int64_t groups = 1;
};

// Channels last (the builder's "layout": "nhwc"): x [N, H, W, C], weight [O, kh, kw, C/g], y [N, OH, OW, O].
bool channels_last(const StepLaunch& launch) { return launch.attrs->get_string("layout", "nchw") == "nhwc"; }

Dims channels_first_dims(const Dims& d) { return Dims{d[0], d[3], d[1], d[2]}; }

ConvShape conv_shape(const StepLaunch& launch) {
  const bool last = channels_last(launch);
  const Dims x = last ? channels_first_dims(launch.inputs.at(0).shape) : launch.inputs.at(0).shape;
  const Dims weight = last ? channels_first_dims(launch.inputs.at(1).shape) : launch.inputs.at(1).shape;
  const Dims y = last ? channels_first_dims(launch.outputs.at(0).shape) : launch.outputs.at(0).shape;
  if (x.rank() != 3 && x.rank() != 4) launch.attrs->fail("x must have rank 3 or 4 for the CUDA convolution kernels");
  ConvShape s;
  s.n = x[0];
  s.c = x[1];
  s.o = y[1];
  s.groups = launch.attrs->get_int("groups", 1);
  const int spatial = x.rank() - 2;
  std::int64_t* in[2] = {&s.h, &s.w};
  std::int64_t* kernel[2] = {&s.kh, &s.kw};
  std::int64_t* out[2] = {&s.oh, &s.ow};
  std::int64_t* stride[2] = {&s.sh, &s.sw};
  std::int64_t* padding[2] = {&s.ph, &s.pw};
  std::int64_t* dilation[2] = {&s.dh, &s.dw};
  for (int i = 0; i < spatial; ++i) {
    const auto axis = static_cast<std::size_t>(2 - spatial + i);
    const auto a = static_cast<std::size_t>(i);
    *in[axis] = x[i + 2];
    *kernel[axis] = weight[i + 2];
    *out[axis] = y[i + 2];
    *stride[axis] = list_value(launch, "stride", a, 1);
    *padding[axis] = list_value(launch, "padding", a, 0);
    *dilation[axis] = list_value(launch, "dilation", a, 1);
  }
  return s;
}

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

template <bool kTranspose>
void run_conv_direct(const StepLaunch& launch, const ConvShape& s) {
  const std::int64_t total = s.n * s.o * s.oh * s.ow;
  if (total == 0) return;
  const DeviceTensor& x = launch.inputs.at(0);
  const void* bias = launch.inputs.size() > 2 ? launch.inputs[2].data : nullptr;
  const bool handled = dispatch_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.data);
    const T* wp = static_cast<const T*>(launch.inputs.at(1).data);
    const T* bp = static_cast<const T*>(bias);
    T* yp = static_cast<T*>(launch.outputs.at(0).data);
    if constexpr (kTranspose) {
      conv_transpose_direct_kernel<T><<<grid_for(total), kThreads, 0, launch.stream>>>(xp, wp, bp, yp, s);
    } else {
      conv_direct_kernel<T><<<grid_for(total), kThreads, 0, launch.stream>>>(xp, wp, bp, yp, s);
    }
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA convolution kernel");
  check_launch(launch);
}

void launch_conv_direct(const StepLaunch& launch) { run_conv_direct<false>(launch, conv_shape(launch)); }
void launch_conv_transpose_direct(const StepLaunch& launch) { run_conv_direct<true>(launch, conv_shape(launch)); }

// ---- cuDNN ----

void check_cudnn(cudnnStatus_t status, const char* call, const StepLaunch& launch) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw CudaError(layer_name(launch) + ": " + call + " failed: " + cudnnGetErrorString(status) + " (" +
                    std::to_string(static_cast<int>(status)) + ")");
  }
}

// Statuses that say cuDNN cannot run this problem (as opposed to a failure while running it).
bool is_refusal(cudnnStatus_t status) {
  const int category = static_cast<int>(status) / 1000 * 1000;
  return category == CUDNN_STATUS_BAD_PARAM || category == CUDNN_STATUS_NOT_SUPPORTED;
}

void require_cudnn9(const StepLaunch& launch) {
  const int version = cudnn_runtime_version();
  if (version < 90000) {
    throw CudaError(layer_name(launch) + ": the CUDA convolution kernels need cuDNN 9.0 or newer, but the cuDNN " +
                    "library loaded reports version " + std::to_string(version));
  }
}

// Handles given back by threads that ended, per device; never destroyed (destroying cuDNN handles at process exit
// can run after the CUDA context is gone).
struct HandlePool {
  std::mutex mutex;
  std::map<int, std::vector<cudnnHandle_t>> free;
};

HandlePool& handle_pool() {
  static HandlePool* pool = new HandlePool;  // intentionally leaked
  return *pool;
}

struct ThreadHandles {
  std::map<int, cudnnHandle_t> by_device;
  ThreadHandles() = default;
  ThreadHandles(const ThreadHandles&) = delete;
  ThreadHandles& operator=(const ThreadHandles&) = delete;
  ~ThreadHandles() {
    HandlePool& pool = handle_pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    for (const auto& [device, handle] : by_device) pool.free[device].push_back(handle);
  }
};

// This thread's handle for the current device, bound to launch.stream; *device_out (when given) is that device.
cudnnHandle_t cudnn_handle(const StepLaunch& launch, int* device_out = nullptr) {
  thread_local ThreadHandles handles;
  int device = 0;
  TENSORACLE_CUDA_CHECK(cudaGetDevice(&device), layer_name(launch));
  cudnnHandle_t handle = nullptr;
  if (auto it = handles.by_device.find(device); it != handles.by_device.end()) {
    handle = it->second;
  } else {
    {
      HandlePool& pool = handle_pool();
      std::lock_guard<std::mutex> lock(pool.mutex);
      auto& free = pool.free[device];
      if (!free.empty()) {
        handle = free.back();
        free.pop_back();
      }
    }
    if (handle == nullptr) {
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      TENSORACLE_CUDA_CHECK(cudaStreamIsCapturing(launch.stream, &capture), layer_name(launch));
      if (capture != cudaStreamCaptureStatusNone) {
        throw CudaError(layer_name(launch) +
                        ": the first cuDNN launch of a thread on a device must not be under stream capture "
                        "(cudnnCreate is not capture safe); enqueue once without capture first");
      }
      check_cudnn(cudnnCreate(&handle), "cudnnCreate", launch);
    }
    handles.by_device[device] = handle;
  }
  check_cudnn(cudnnSetStream(handle, launch.stream), "cudnnSetStream", launch);
  if (device_out != nullptr) *device_out = device;
  return handle;
}

// One cuDNN descriptor, destroyed with its owner.
template <typename Handle, cudnnStatus_t (*kDestroy)(Handle)>
struct CudnnDesc {
  Handle d = nullptr;
  CudnnDesc() = default;
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;
  ~CudnnDesc() {
    if (d != nullptr) kDestroy(d);
  }
};
using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = CudnnDesc<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using ActivationDesc = CudnnDesc<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;
using PoolingDesc = CudnnDesc<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;

cudnnDataType_t cudnn_type(DataType dtype) {
  switch (dtype) {
    case DataType::kF16: return CUDNN_DATA_HALF;
    case DataType::kBF16: return CUDNN_DATA_BFLOAT16;
    case DataType::kF64: return CUDNN_DATA_DOUBLE;
    default: return CUDNN_DATA_FLOAT;
  }
}

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
};
// What a thread keeps per problem: the choice and, when cuDNN runs it, its descriptors (math type set), so that a
// launch after the first only binds the stream and enqueues.
struct ConvPlan {
  // f16/bf16 forward convolutions: the whole layer (bias, residual and relu included) as one cuDNN graph plan; when
  // set, nothing below is used.
  std::unique_ptr<ConvGraphPlan> graph;
  AlgoChoice choice;
  std::unique_ptr<CudnnConv> desc;
  // The fused epilogue's (relu; cudnnConvolutionBiasActivationForward): the bias [1, O, 1, 1] and the activation.
  std::unique_ptr<TensorDesc> bias;
  std::unique_ptr<ActivationDesc> activation;
};
using ProblemKey = std::array<std::int64_t, 22>;

// Whether the layer has its optional input i (at build time, when no data is bound, from the layer's inputs).
bool input_present(const StepLaunch& launch, std::size_t i) {
  if (i >= launch.inputs.size()) return false;
  if (launch.inputs[i].data != nullptr) return true;
  return launch.layer != nullptr && i < launch.layer->inputs.size() && launch.layer->inputs[i] >= 0;
}

// Whether every data pointer of the launch is 16-byte aligned (what the graph plans are built for; the builder's
// arena and weights always are, a caller's binding may not be).
bool graph_aligned(const StepLaunch& launch) {
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  for (const DeviceTensor& t : launch.inputs) {
    if (!aligned(t.data)) return false;
  }
  return aligned(launch.outputs.at(0).data);
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
  p.nhwc = channels_last(launch);
  p.bias = input_present(launch, 2);
  p.residual = input_present(launch, 3);
  p.relu = launch.attrs->get_string("activation", "none") == "relu";
  return p;
}

ProblemKey problem_key(const StepLaunch& launch, const ConvShape& s, bool transpose, int device) {
  return {transpose ? 1 : 0,
          static_cast<std::int64_t>(launch.inputs.at(0).dtype),
          launch.precision == Precision::kTf32 ? 1 : 0,
          static_cast<std::int64_t>(launch.workspace != nullptr ? launch.workspace_bytes : 0),
          device,
          s.n,
          s.c,
          s.h,
          s.w,
          s.o,
          s.kh,
          s.kw,
          s.oh,
          s.ow,
          s.sh,
          s.sw,
          s.ph,
          s.pw,
          s.dh,
          s.dw,
          s.groups,
          (channels_last(launch) ? 1 : 0) + (launch.attrs->get_string("activation", "none") == "relu" ? 2 : 0) +
              (input_present(launch, 2) ? 4 : 0) + (input_present(launch, 3) ? 8 : 0) +
              (graph_aligned(launch) ? 16 : 0)};
}

// Per thread (descriptors and handles are used by one thread at a time). Bounded: a network with dynamic shapes that
// keeps meeting new ones starts over (destroying descriptors is host-only, so safe at any time).
constexpr std::size_t kMaxPlans = 4096;
std::map<ProblemKey, ConvPlan>& plan_cache() {
  thread_local std::map<ProblemKey, ConvPlan> cache;
  return cache;
}

// FFT-based algorithms round far from the exact sum when outputs cancel; they are never chosen.
bool excluded(cudnnConvolutionFwdAlgo_t algo) {
  return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
}
// Besides the FFT ones, ALGO_0 accumulates with atomics (results vary from run to run).
bool excluded(cudnnConvolutionBwdDataAlgo_t algo) {
  return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
}

AlgoChoice choose_forward(const StepLaunch& launch, cudnnHandle_t handle, CudnnConv& d, std::size_t limit) {
  const DataType dtype = launch.inputs.at(0).dtype;
  check_cudnn(cudnnSetConvolutionMathType(d.conv.d, query_math(dtype, launch.precision)), "cudnnSetConvolutionMathType",
              launch);
  int max_count = 0;
  check_cudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count),
              "cudnnGetConvolutionForwardAlgorithmMaxCount", launch);
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
  int returned = 0;
  const cudnnStatus_t status = cudnnGetConvolutionForwardAlgorithm_v7(
      handle, d.in.d, d.filter.d, d.conv.d, d.out.d, static_cast<int>(perf.size()), &returned, perf.data());
  if (is_refusal(status)) return {};
  check_cudnn(status, "cudnnGetConvolutionForwardAlgorithm_v7", launch);
  for (int r = 0; r < returned; ++r) {
    const cudnnConvolutionFwdAlgoPerf_t& p = perf[static_cast<std::size_t>(r)];
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (p.status != CUDNN_STATUS_SUCCESS || excluded(p.algo) || !math_for(dtype, launch.precision, p.mathType, math)) {
      continue;
    }
    if (cudnnSetConvolutionMathType(d.conv.d, math) != CUDNN_STATUS_SUCCESS) continue;
    std::size_t bytes = 0;
    if (cudnnGetConvolutionForwardWorkspaceSize(handle, d.in.d, d.filter.d, d.conv.d, d.out.d, p.algo, &bytes) !=
            CUDNN_STATUS_SUCCESS ||
        bytes > limit) {
      continue;
    }
    return {true, static_cast<int>(p.algo), math};
  }
  return {};
}

AlgoChoice choose_backward_data(const StepLaunch& launch, cudnnHandle_t handle, CudnnConv& d, std::size_t limit) {
  const DataType dtype = launch.inputs.at(0).dtype;
  check_cudnn(cudnnSetConvolutionMathType(d.conv.d, query_math(dtype, launch.precision)), "cudnnSetConvolutionMathType",
              launch);
  int max_count = 0;
  check_cudnn(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count),
              "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", launch);
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(std::max(max_count, 1)));
  int returned = 0;
  const cudnnStatus_t status = cudnnGetConvolutionBackwardDataAlgorithm_v7(
      handle, d.filter.d, d.out.d, d.conv.d, d.in.d, static_cast<int>(perf.size()), &returned, perf.data());
  if (is_refusal(status)) return {};
  check_cudnn(status, "cudnnGetConvolutionBackwardDataAlgorithm_v7", launch);
  for (int r = 0; r < returned; ++r) {
    const cudnnConvolutionBwdDataAlgoPerf_t& p = perf[static_cast<std::size_t>(r)];
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (p.status != CUDNN_STATUS_SUCCESS || excluded(p.algo) || p.determinism != CUDNN_DETERMINISTIC ||
        !math_for(dtype, launch.precision, p.mathType, math)) {
      continue;
    }
    if (cudnnSetConvolutionMathType(d.conv.d, math) != CUDNN_STATUS_SUCCESS) continue;
    std::size_t bytes = 0;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(handle, d.filter.d, d.out.d, d.conv.d, d.in.d, p.algo, &bytes) !=
            CUDNN_STATUS_SUCCESS ||
        bytes > limit) {
      continue;
    }
    return {true, static_cast<int>(p.algo), math};
  }
  return {};
}

// y[n, o, ...] = bias[o]: the convolution then adds its result (beta = 1), so the sum is rounded once.
template <typename T>
__global__ void fill_bias_kernel(const T* __restrict__ bias, T* __restrict__ y, std::int64_t total, std::int64_t plane,
                                 std::int64_t channels) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    y[i] = bias[(i / plane) % channels];
  }
}

void fill_bias(const StepLaunch& launch, const void* bias, const ConvShape& s) {
  const std::int64_t total = s.n * s.o * s.oh * s.ow;
  const bool last = channels_last(launch);  // the channel is the innermost dim: plane 1
  const bool handled = dispatch_float(launch.outputs.at(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_bias_kernel<T><<<grid_for(total), kThreads, 0, launch.stream>>>(
        static_cast<const T*>(bias), static_cast<T*>(launch.outputs.at(0).data), total, last ? 1 : s.oh * s.ow, s.o);
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA convolution kernel");
  check_launch(launch);
}

// The fused epilogue after a direct convolution: y = relu(y + residual) (either part optional), in f32 (f64).
template <typename T>
__global__ void epilogue_kernel(T* __restrict__ y, const T* __restrict__ residual, std::int64_t total, bool relu) {
  using A = Accum<T>;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    A v = static_cast<A>(y[i]);
    if (residual != nullptr) v += static_cast<A>(residual[i]);
    if (relu && v < A(0)) v = A(0);
    y[i] = static_cast<T>(v);
  }
}

// What the builder fused into a conv: input 3 (residual) and the relu.
struct ConvEpilogue {
  const void* residual = nullptr;
  bool relu = false;
  bool any() const { return residual != nullptr || relu; }
};
ConvEpilogue conv_epilogue(const StepLaunch& launch) {
  ConvEpilogue e;
  e.residual = launch.inputs.size() > 3 ? launch.inputs[3].data : nullptr;
  e.relu = launch.attrs->get_string("activation", "none") == "relu";
  return e;
}

void run_epilogue(const StepLaunch& launch, const ConvEpilogue& e, const ConvShape& s) {
  const std::int64_t total = s.n * s.o * s.oh * s.ow;
  if (!e.any() || total == 0) return;
  const bool handled = dispatch_float(launch.outputs.at(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    epilogue_kernel<T><<<grid_for(total), kThreads, 0, launch.stream>>>(
        static_cast<T*>(launch.outputs.at(0).data), static_cast<const T*>(e.residual), total, e.relu);
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA convolution kernel");
  check_launch(launch);
}

// The direct kernel and then the fused epilogue; channels last has no direct kernel.
template <bool kTranspose>
void run_conv_fallback(const StepLaunch& launch, const ConvShape& s) {
  if (channels_last(launch)) {
    throw CudaError(layer_name(launch) +
                    ": cuDNN cannot run this channels-last convolution and there is no direct kernel for it");
  }
  run_conv_direct<kTranspose>(launch, s);
  if constexpr (!kTranspose) run_epilogue(launch, conv_epilogue(launch), s);
}

void run_graph(const StepLaunch& launch, ConvGraphPlan& graph, cudnnHandle_t handle, std::size_t limit) {
  if (graph.workspace_bytes() > limit) {
    throw CudaError(layer_name(launch) + ": the cuDNN plan needs " + std::to_string(graph.workspace_bytes()) +
                    " bytes of scratch but the step has " + std::to_string(limit));
  }
  const auto data = [&](std::size_t i) -> const void* {
    return i < launch.inputs.size() ? launch.inputs[i].data : nullptr;
  };
  check_cudnn(graph.execute(handle, data(0), data(1), data(2), data(3), launch.outputs.at(0).data, launch.workspace),
              "cudnnBackendExecute", launch);
}

// conv (kTranspose = false) through cudnnConvolutionForward, conv_transpose2d through cudnnConvolutionBackwardData.
// Problems cuDNN refuses (sizes beyond its int descriptors, output_padding that its geometry cannot express, no
// algorithm within the workspace) run the direct kernel, which computes the same thing.
template <bool kTranspose>
void launch_conv_cudnn(const StepLaunch& launch) {
  require_cudnn9(launch);
  const ConvShape s = conv_shape(launch);
  if (s.n * s.o * s.oh * s.ow == 0) return;
  bool geometry_ok = fits_cudnn(s);
  if (kTranspose && geometry_ok) {
    // cuDNN derives the data gradient's shape from the forward convolution of y; output_padding >= stride (allowed
    // when smaller than the dilation) gives a y that convolves to more than x's size.
    const std::int64_t fh = (s.oh + 2 * s.ph - s.dh * (s.kh - 1) - 1) / s.sh + 1;
    const std::int64_t fw = (s.ow + 2 * s.pw - s.dw * (s.kw - 1) - 1) / s.sw + 1;
    geometry_ok = fh == s.h && fw == s.w;
  }
  if (!geometry_ok) return run_conv_fallback<kTranspose>(launch, s);

  int device = 0;
  cudnnHandle_t handle = cudnn_handle(launch, &device);
  const std::size_t limit = launch.workspace != nullptr ? launch.workspace_bytes : 0;
  const ProblemKey key = problem_key(launch, s, kTranspose, device);
  auto& cache = plan_cache();
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kMaxPlans) cache.clear();
    ConvPlan plan;
    if (!kTranspose && graph_eligible(launch)) {
      plan.graph = ConvGraphPlan::build(handle, graph_problem(launch, s), limit);
    }
    if (plan.graph != nullptr) {
      it = cache.emplace(key, std::move(plan)).first;
      return run_graph(launch, *it->second.graph, handle, limit);
    }
    plan.desc = std::make_unique<CudnnConv>();
    make_cudnn_conv(launch, s, kTranspose, *plan.desc);
    plan.choice = kTranspose ? choose_backward_data(launch, handle, *plan.desc, limit)
                             : choose_forward(launch, handle, *plan.desc, limit);
    if (plan.choice.use_cudnn) {
      check_cudnn(cudnnSetConvolutionMathType(plan.desc->conv.d, plan.choice.math), "cudnnSetConvolutionMathType",
                  launch);
      if (!kTranspose && conv_epilogue(launch).relu) {
        const DataType dtype = launch.outputs.at(0).dtype;
        plan.bias = std::make_unique<TensorDesc>();
        plan.activation = std::make_unique<ActivationDesc>();
        check_cudnn(cudnnCreateTensorDescriptor(&plan.bias->d), "cudnnCreateTensorDescriptor", launch);
        check_cudnn(
            cudnnSetTensor4dDescriptor(plan.bias->d, channels_last(launch) ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                       cudnn_type(dtype), 1, static_cast<int>(s.o), 1, 1),
            "cudnnSetTensor4dDescriptor", launch);
        check_cudnn(cudnnCreateActivationDescriptor(&plan.activation->d), "cudnnCreateActivationDescriptor", launch);
        check_cudnn(cudnnSetActivationDescriptor(plan.activation->d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
                    "cudnnSetActivationDescriptor", launch);
      }
    } else {
      plan.desc.reset();
    }
    it = cache.emplace(key, std::move(plan)).first;
  }
  ConvPlan& plan = it->second;
  if (plan.graph != nullptr) return run_graph(launch, *plan.graph, handle, limit);
  if (!plan.choice.use_cudnn) return run_conv_fallback<kTranspose>(launch, s);
  const CudnnConv& d = *plan.desc;
  const AlgoChoice& choice = plan.choice;

  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& weight = launch.inputs.at(1);
  const void* bias = launch.inputs.size() > 2 ? launch.inputs[2].data : nullptr;
  void* y = launch.outputs.at(0).data;
  const ConvEpilogue epilogue = kTranspose ? ConvEpilogue{} : conv_epilogue(launch);
  if (epilogue.relu && bias != nullptr && plan.activation != nullptr) {
    // relu(conv + alpha2 · z + bias), z the residual (or y itself with alpha2 = 0); f16/bf16 accumulate in f32.
    const float one = 1.0F, zero = 0.0F;
    const void* z = epilogue.residual != nullptr ? epilogue.residual : y;
    const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
        handle, &one, d.in.d, x.data, d.filter.d, weight.data, d.conv.d,
        static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), launch.workspace, limit,
        epilogue.residual != nullptr ? &one : &zero, d.out.d, z, plan.bias->d, bias, plan.activation->d, d.out.d, y);
    if (is_refusal(status)) {
      plan.choice.use_cudnn = false;
      plan.desc.reset();
      return run_conv_fallback<kTranspose>(launch, s);
    }
    return check_cudnn(status, "cudnnConvolutionBiasActivationForward", launch);
  }
  if (bias != nullptr) fill_bias(launch, bias, s);
  const double alpha_d = 1.0, beta_d = bias != nullptr ? 1.0 : 0.0;
  const float alpha_f = 1.0F, beta_f = bias != nullptr ? 1.0F : 0.0F;
  const bool f64 = x.dtype == DataType::kF64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  const char* call = nullptr;
  if constexpr (kTranspose) {
    call = "cudnnConvolutionBackwardData";
    status = cudnnConvolutionBackwardData(handle, alpha, d.filter.d, weight.data, d.out.d, x.data, d.conv.d,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo), launch.workspace,
                                          limit, beta, d.in.d, y);
  } else {
    call = "cudnnConvolutionForward";
    status = cudnnConvolutionForward(handle, alpha, d.in.d, x.data, d.filter.d, weight.data, d.conv.d,
                                     static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), launch.workspace, limit, beta,
                                     d.out.d, y);
  }
  if (is_refusal(status)) {
    plan.choice.use_cudnn = false;  // the direct kernel writes every output element, bias included
    plan.desc.reset();
    return run_conv_fallback<kTranspose>(launch, s);
  }
  check_cudnn(status, call, launch);
  run_epilogue(launch, epilogue, s);  // an epilogue without a bias (the builder fuses only with one)
}

// The workspace of the algorithm a forward convolution will pick (the heuristic's first that fits
// kCudnnWorkspaceBytes) at these shapes; 0 when the direct kernel runs it.
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
  cudnnHandle_t handle = cudnn_handle(launch);
  if (graph_eligible(launch)) {
    const std::unique_ptr<ConvGraphPlan> graph =
        ConvGraphPlan::build(handle, graph_problem(launch, s), kCudnnWorkspaceBytes);
    if (graph != nullptr) return graph->workspace_bytes();
  }
  CudnnConv d;
  make_cudnn_conv(launch, s, false, d);
  const AlgoChoice choice = choose_forward(launch, handle, d, kCudnnWorkspaceBytes);
  if (!choice.use_cudnn) return 0;
  check_cudnn(cudnnSetConvolutionMathType(d.conv.d, choice.math), "cudnnSetConvolutionMathType", launch);
  std::size_t bytes = 0;
  check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(handle, d.in.d, d.filter.d, d.conv.d, d.out.d,
                                                      static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo), &bytes),
              "cudnnGetConvolutionForwardWorkspaceSize", launch);
  return bytes;
}

// ---- pooling ----

struct PoolShape {
  std::int64_t planes = 1, h = 1, w = 1, oh = 1, ow = 1;
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  std::int64_t channels = 1;  // channels last: planes = N · channels
  bool count_include_pad = true;
};

PoolShape pool_shape(const StepLaunch& launch) {
  const bool last = channels_last(launch);
  const Dims x = last ? channels_first_dims(launch.inputs.at(0).shape) : launch.inputs.at(0).shape;
  const Dims y = last ? channels_first_dims(launch.outputs.at(0).shape) : launch.outputs.at(0).shape;
  const std::vector<std::int64_t> kernel = launch.attrs->get_ints("kernel");
  PoolShape s;
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

// Index arithmetic in I: int32 when every index of the launch fits (integer division is much cheaper), else int64.
constexpr std::int64_t kMaxIndex32 = INT_MAX - (std::int64_t{1} << 25);  // room for one grid stride past the end

template <typename I>
__device__ __forceinline__ I min_i(I a, I b) {
  return a < b ? a : b;
}
template <typename I>
__device__ __forceinline__ I max_i(I a, I b) {
  return a > b ? a : b;
}

// The window of output (oy, ox) clipped to the input; the shape rules leave at least one input in every window.
// Padding never wins; NaN propagates (the last NaN seen is kept), as the CPU reference.
template <typename T, typename I>
__global__ void max_pool_kernel(const T* __restrict__ x, T* __restrict__ y, PoolShape s) {
  using A = Accum<T>;
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
    const I hb = max_i<I>(h0, 0), he = min_i<I>(h0 + kh, h);
    const I wb = max_i<I>(w0, 0), we = min_i<I>(w0 + kw, w);
    const T* xp = x + p * h * w;
    A best = negative_infinity<T>();
    for (I ih = hb; ih < he; ++ih) {
      for (I iw = wb; iw < we; ++iw) {
        const A v = load(xp, ih * w + iw);
        if (v > best || v != v) best = v;
      }
    }
    store(y, i, best);
  }
}

// Channels last: element i of y [N, OH, OW, C]; the same window rule and NaN handling.
template <typename T, typename I>
__global__ void max_pool_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y, PoolShape s) {
  using A = Accum<T>;
  const I total = static_cast<I>(s.planes * s.oh * s.ow);
  const I h = static_cast<I>(s.h), w = static_cast<I>(s.w), oh = static_cast<I>(s.oh), ow = static_cast<I>(s.ow);
  const I kh = static_cast<I>(s.kh), kw = static_cast<I>(s.kw), sh = static_cast<I>(s.sh), sw = static_cast<I>(s.sw);
  const I ph = static_cast<I>(s.ph), pw = static_cast<I>(s.pw), channels = static_cast<I>(s.channels);
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
    A best = negative_infinity<T>();
    for (I ih = hb; ih < he; ++ih) {
      for (I iw = wb; iw < we; ++iw) {
        const A v = load(xp, (ih * w + iw) * channels);
        if (v > best || v != v) best = v;
      }
    }
    store(y, i, best);
  }
}

// Sum in f64; the divisor is PyTorch's: with count_include_pad the window clipped to the padded input (a ceil_mode
// window may reach past it), otherwise the window clipped to the input.
template <typename T, typename I>
__global__ void avg_pool_kernel(const T* __restrict__ x, T* __restrict__ y, PoolShape s) {
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

template <bool kMax>
void launch_pool(const StepLaunch& launch) {
  const PoolShape s = pool_shape(launch);
  const std::int64_t total = s.planes * s.oh * s.ow;
  if (total == 0) return;
  const bool index32 =
      total <= kMaxIndex32 && s.planes * (s.h + 2 * s.ph + s.kh) * (s.w + 2 * s.pw + s.kw) <= kMaxIndex32;
  const bool handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(launch.inputs.at(0).data);
    T* y = static_cast<T*>(launch.outputs.at(0).data);
    if constexpr (kMax) {
      if (channels_last(launch)) {
        if (index32) {
          max_pool_nhwc_kernel<T, std::int32_t><<<grid_for(total), kThreads, 0, launch.stream>>>(x, y, s);
        } else {
          max_pool_nhwc_kernel<T, std::int64_t><<<grid_for(total), kThreads, 0, launch.stream>>>(x, y, s);
        }
      } else if (index32) {
        max_pool_kernel<T, std::int32_t><<<grid_for(total), kThreads, 0, launch.stream>>>(x, y, s);
      } else {
        max_pool_kernel<T, std::int64_t><<<grid_for(total), kThreads, 0, launch.stream>>>(x, y, s);
      }
    } else {
      if (index32) {
        avg_pool_kernel<T, std::int32_t><<<grid_for(total), kThreads, 0, launch.stream>>>(x, y, s);
      } else {
        avg_pool_kernel<T, std::int64_t><<<grid_for(total), kThreads, 0, launch.stream>>>(x, y, s);
      }
    }
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA pooling kernel");
  check_launch(launch);
}

// cudnnPoolingForward, timed by the builder against the direct kernels. cuDNN computes floor-mode windows only, so a
// ceil_mode layer whose output is larger (or a problem beyond its int descriptors) runs the direct kernel. Max pooling
// propagates NaN; averages divide by the whole window (count_include_pad) or by its part inside the input, which is
// the reference's rule whenever windows stay within the padded input (floor mode). f16/bf16 accumulate in f32.
struct PoolPlan {
  bool use_cudnn = false;
  TensorDesc in, out;
  PoolingDesc pooling;
};
using PoolKey = std::array<std::int64_t, 15>;

template <bool kMax>
void launch_pool_cudnn(const StepLaunch& launch) {
  require_cudnn9(launch);
  const PoolShape s = pool_shape(launch);
  if (s.planes * s.oh * s.ow == 0) return;
  const bool floor_mode = (s.h + 2 * s.ph - s.kh) / s.sh + 1 == s.oh && (s.w + 2 * s.pw - s.kw) / s.sw + 1 == s.ow;
  const std::int64_t n = s.planes / s.channels;
  const std::array<std::int64_t, 11> dims = {n, s.channels, s.h, s.w, s.oh, s.ow, s.kh, s.kw, s.sh, s.sw, s.planes};
  bool fits = n * s.channels * s.h * s.w <= INT_MAX;
  for (std::int64_t v : dims) fits = fits && v >= 0 && v <= INT_MAX;
  if (!floor_mode || !fits) return launch_pool<kMax>(launch);

  int device = 0;
  cudnnHandle_t handle = cudnn_handle(launch, &device);
  const DataType dtype = launch.inputs.at(0).dtype;
  const bool last = channels_last(launch);
  const PoolKey key = {kMax ? 1 : 0,
                       s.count_include_pad ? 1 : 0,
                       static_cast<std::int64_t>(dtype),
                       last ? 1 : 0,
                       device,
                       n,
                       s.channels,
                       s.h,
                       s.w,
                       s.kh,
                       s.kw,
                       s.sh,
                       s.sw,
                       s.ph,
                       s.pw};
  thread_local std::map<PoolKey, PoolPlan> cache;
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kMaxPlans) cache.clear();
    PoolPlan& plan = cache[key];
    auto i = [](std::int64_t v) { return static_cast<int>(v); };
    const cudnnTensorFormat_t format = last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
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
    it = cache.find(key);
  }
  const PoolPlan& plan = it->second;
  if (!plan.use_cudnn) return launch_pool<kMax>(launch);
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0F, zero_f = 0.0F;
  const bool f64 = dtype == DataType::kF64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  const cudnnStatus_t status = cudnnPoolingForward(handle, plan.pooling.d, alpha, plan.in.d, launch.inputs.at(0).data,
                                                   beta, plan.out.d, launch.outputs.at(0).data);
  if (is_refusal(status)) {
    it->second.use_cudnn = false;
    return launch_pool<kMax>(launch);
  }
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
  for (std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < planes;
       p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t n = p / channels, c = p % channels;
    const T* xp = x + n * plane * channels + c;
    double sum = 0.0;
    for (std::int64_t j = 0; j < plane; ++j) sum += static_cast<double>(load(xp, j * channels));
    store_from_double(y, p, sum / static_cast<double>(plane));  // 0/0 is NaN
  }
}

void launch_global_avg_pool(const StepLaunch& launch) {
  if (channels_last(launch)) {  // x [N, H, W, C] -> y [N, C, 1, 1]
    const Dims& x = launch.inputs.at(0).shape;
    const std::int64_t planes = x[0] * x[3], plane = x[1] * x[2];
    if (planes == 0) return;
    const bool handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
      using T = decltype(tag);
      global_avg_pool_nhwc_kernel<T><<<grid_for(planes), kThreads, 0, launch.stream>>>(
          static_cast<const T*>(launch.inputs.at(0).data), static_cast<T*>(launch.outputs.at(0).data), planes, plane,
          x[3]);
    });
    if (!handled) launch.attrs->fail("unsupported dtype for the CUDA global_avg_pool kernel");
    check_launch(launch);
    return;
  }
  const Dims& x = launch.inputs.at(0).shape;
  const std::int64_t planes = x[0] * x[1];
  if (planes == 0) return;
  std::int64_t plane = 1;
  for (int i = 2; i < x.rank(); ++i) plane *= x[i];
  const bool handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(launch.inputs.at(0).data);
    T* yp = static_cast<T*>(launch.outputs.at(0).data);
    if (plane <= 2048) {
      constexpr int kWarpsPerBlock = kThreads / 32;
      const auto blocks = static_cast<unsigned>(
          std::clamp<std::int64_t>((planes + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, kMaxBlocks));
      global_avg_pool_warp_kernel<T><<<blocks, kThreads, 0, launch.stream>>>(xp, yp, planes, plane);
    } else {
      const auto blocks = static_cast<unsigned>(std::clamp<std::int64_t>(planes, 1, kMaxBlocks));
      global_avg_pool_block_kernel<T><<<blocks, kThreads, 0, launch.stream>>>(xp, yp, planes, plane);
    }
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA global_avg_pool kernel");
  check_launch(launch);
}

// ---- resize (PyTorch interpolate), as the CPU reference computes source indices and weights ----

struct ResizeShape {
  std::int64_t planes = 1, h = 1, w = 1, oh = 1, ow = 1;
  bool align_corners = false;
  double scale_h = 0.0, scale_w = 0.0;  // bilinear: as the reference computes them (IEEE division, here on the host)
};

// align_corners: (in - 1) / (out - 1), 0 for a single output; half-pixel centers: in / out.
double bilinear_scale(std::int64_t in, std::int64_t out, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  return static_cast<double>(in) / static_cast<double>(out);
}

// 'nearest' (PyTorch's legacy, asymmetric one): floor(dst · in / out), exactly, without overflow (in = q·out + r).
template <typename I>
__device__ __forceinline__ I nearest_source(I dst, I in, I out) {
  return dst * (in / out) + dst * (in % out) / out;
}

template <typename I>
struct LinearTap {
  I i0, i1;
  double lambda;
};

// source = scale · dst (align_corners) or max(scale · (dst + 0.5) - 0.5, 0) (half-pixel centers) in f64, then the
// floor and the next index clamped to the input. The _rn intrinsics keep every operation rounded on its own (no fused
// multiply-add), as the reference computes it.
template <typename I>
__device__ __forceinline__ LinearTap<I> bilinear_source(I dst, I in, double scale, bool align_corners) {
  double src = 0.0;
  if (align_corners) {
    src = __dmul_rn(scale, static_cast<double>(dst));
  } else {
    src = fmax(__dadd_rn(__dmul_rn(scale, __dadd_rn(static_cast<double>(dst), 0.5)), -0.5), 0.0);
  }
  LinearTap<I> tap;
  tap.i0 = static_cast<I>(src);
  tap.i1 = tap.i0 < in - 1 ? tap.i0 + 1 : tap.i0;
  tap.lambda = fmin(fmax(__dsub_rn(src, static_cast<double>(tap.i0)), 0.0), 1.0);
  return tap;
}

template <typename T, typename I, bool kBilinear>
__global__ void resize_kernel(const T* __restrict__ x, T* __restrict__ y, ResizeShape s) {
  const I total = static_cast<I>(s.planes * s.oh * s.ow);
  const I h = static_cast<I>(s.h), w = static_cast<I>(s.w), oh = static_cast<I>(s.oh), ow = static_cast<I>(s.ow);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I ox = i % ow;
    const I t = i / ow;
    const I oy = t % oh;
    const I p = t / oh;
    const T* xp = x + p * h * w;
    if constexpr (!kBilinear) {
      store(y, i, load(xp, nearest_source<I>(oy, h, oh) * w + nearest_source<I>(ox, w, ow)));
    } else {
      const LinearTap<I> th = bilinear_source<I>(oy, h, s.scale_h, s.align_corners);
      const LinearTap<I> tw = bilinear_source<I>(ox, w, s.scale_w, s.align_corners);
      auto value = [&](I ih, I iw) { return static_cast<double>(load(xp, ih * w + iw)); };
      const double lw = __dsub_rn(1.0, tw.lambda), lh = __dsub_rn(1.0, th.lambda);
      const double top = __dadd_rn(__dmul_rn(lw, value(th.i0, tw.i0)), __dmul_rn(tw.lambda, value(th.i0, tw.i1)));
      const double bottom = __dadd_rn(__dmul_rn(lw, value(th.i1, tw.i0)), __dmul_rn(tw.lambda, value(th.i1, tw.i1)));
      store_from_double(y, i, __dadd_rn(__dmul_rn(lh, top), __dmul_rn(th.lambda, bottom)));
    }
  }
}

template <typename T, typename I>
void launch_resize_typed(const StepLaunch& launch, const ResizeShape& s, bool bilinear) {
  const T* xp = static_cast<const T*>(launch.inputs.at(0).data);
  T* yp = static_cast<T*>(launch.outputs.at(0).data);
  const std::int64_t total = s.planes * s.oh * s.ow;
  if (bilinear) {
    resize_kernel<T, I, true><<<grid_for(total), kThreads, 0, launch.stream>>>(xp, yp, s);
  } else {
    resize_kernel<T, I, false><<<grid_for(total), kThreads, 0, launch.stream>>>(xp, yp, s);
  }
}

void launch_resize(const StepLaunch& launch) {
  const Dims& x = launch.inputs.at(0).shape;
  const Dims& y = launch.outputs.at(0).shape;
  ResizeShape s;
  s.planes = x[0] * x[1];
  s.h = x[2];
  s.w = x[3];
  s.oh = y[2];
  s.ow = y[3];
  s.align_corners = launch.attrs->get_bool("align_corners", false);
  s.scale_h = bilinear_scale(s.h, s.oh, s.align_corners);
  s.scale_w = bilinear_scale(s.w, s.ow, s.align_corners);
  const bool bilinear = launch.attrs->get_string("mode") == "bilinear";
  const std::int64_t total = s.planes * s.oh * s.ow;
  if (total == 0) return;
  // nearest_source multiplies dst by in / out and in % out (each below in): products below out · in.
  const bool index32 = total <= kMaxIndex32 && s.planes * s.h * s.w <= kMaxIndex32 && s.oh * s.h <= kMaxIndex32 &&
                       s.ow * s.w <= kMaxIndex32;
  const bool handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    if (index32) {
      launch_resize_typed<T, std::int32_t>(launch, s, bilinear);
    } else {
      launch_resize_typed<T, std::int64_t>(launch, s, bilinear);
    }
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA resize kernel");
  check_launch(launch);
}

// ---- supports ----

bool has_input(const graph::Layer& layer, std::size_t i) { return i < layer.inputs.size() && layer.inputs[i] >= 0; }

// Every present input and the output have dtype kDtype; x (input 0) has a rank in [min_rank, max_rank].
template <DataType kDtype>
bool all_dtype(const graph::Graph& graph, const graph::Layer& layer, int min_rank, int max_rank) {
  if (!has_input(layer, 0) || layer.outputs.size() != 1) return false;
  for (std::size_t i = 0; i < layer.inputs.size(); ++i) {
    if (has_input(layer, i) && graph.tensor(layer.inputs[i]).dtype != kDtype) return false;
  }
  if (graph.tensor(layer.outputs[0]).dtype != kDtype) return false;
  const auto rank = static_cast<int>(graph.tensor(layer.inputs[0]).shape.size());
  return rank >= min_rank && rank <= max_rank;
}

std::string layer_string(const graph::Layer& layer, const char* name, const char* fallback) {
  return graph::AttrReader(layer.attrs, layer.name, layer.op).get_string(name, fallback);
}
bool layer_channels_last(const graph::Layer& layer) { return layer_string(layer, "layout", "nchw") == "nhwc"; }
bool layer_fused(const graph::Layer& layer) {
  return layer_string(layer, "activation", "none") != "none" || has_input(layer, 3);
}

// cuDNN runs channels first and (f16, bf16, f32) channels last, with or without a fused epilogue.
template <DataType kDtype>
bool supports_conv(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer_channels_last(layer) && (kDtype == DataType::kF64 || graph.tensor(layer.inputs[0]).shape.size() != 4)) {
    return false;
  }
  return has_input(layer, 1) && all_dtype<kDtype>(graph, layer, 3, 4);
}
// The direct kernel: channels first, no fused epilogue (it runs behind cuDNN for those).
template <DataType kDtype>
bool supports_conv_direct(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return !layer_channels_last(layer) && !layer_fused(layer) && supports_conv<kDtype>(graph, layer, precision);
}

template <DataType kDtype>
bool supports_conv_transpose(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return has_input(layer, 1) && all_dtype<kDtype>(graph, layer, 4, 4);
}

template <DataType kDtype>
bool supports_pool(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return all_dtype<kDtype>(graph, layer, 4, 4);
}

template <DataType kDtype>
bool supports_global_avg_pool(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return all_dtype<kDtype>(graph, layer, 3, INT_MAX);
}

template <DataType kDtype>
bool supports_resize(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (!all_dtype<kDtype>(graph, layer, 4, 4)) return false;
  const auto mode = layer.attrs.find("mode");
  if (mode == layer.attrs.end()) return false;
  const auto* text = std::get_if<std::string>(&mode->second);
  return text != nullptr && (*text == "nearest" || *text == "bilinear");
}

}  // namespace

// Entries of an op for the four float dtypes; the tags name the arithmetic of f32 and of f16/bf16 ("" or "f64math_").
#define TENSORACLE_CONV_ENTRIES(OP, F32_TAG, NARROW_TAG, VARIANT, SUPPORTS, LAUNCH, WORKSPACE, WORKSPACE_FOR)       \
  KernelEntry{OP "_f32_" F32_TAG VARIANT, OP, SUPPORTS<DataType::kF32>, LAUNCH, WORKSPACE, WORKSPACE_FOR},          \
      KernelEntry{OP "_f16_" NARROW_TAG VARIANT, OP, SUPPORTS<DataType::kF16>, LAUNCH, WORKSPACE, WORKSPACE_FOR},   \
      KernelEntry{OP "_bf16_" NARROW_TAG VARIANT, OP, SUPPORTS<DataType::kBF16>, LAUNCH, WORKSPACE, WORKSPACE_FOR}, \
      KernelEntry {                                                                                                 \
    OP "_f64_" VARIANT, OP, SUPPORTS<DataType::kF64>, LAUNCH, WORKSPACE, WORKSPACE_FOR                              \
  }

void register_convolution_kernels(std::vector<KernelEntry>& kernels) {
  const std::size_t ws = kCudnnWorkspaceBytes;
  const std::vector<KernelEntry> entries = {
      // conv: cuDNN first (f32 on FMA kernels unless Precision::kTf32), then the direct kernel.
      TENSORACLE_CONV_ENTRIES("conv", "", "f32math_", "cudnn", supports_conv, &launch_conv_cudnn<false>, ws,
                              conv_workspace),
      TENSORACLE_CONV_ENTRIES("conv", "", "f32math_", "direct", supports_conv_direct, &launch_conv_direct, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("conv_transpose2d", "", "f32math_", "cudnn", supports_conv_transpose,
                              &launch_conv_cudnn<true>, ws, nullptr),
      TENSORACLE_CONV_ENTRIES("conv_transpose2d", "", "f32math_", "direct", supports_conv_transpose,
                              &launch_conv_transpose_direct, 0, nullptr),
      // pooling: cuDNN and the direct kernels, timed against each other
      TENSORACLE_CONV_ENTRIES("max_pool2d", "", "", "cudnn", supports_pool, &launch_pool_cudnn<true>, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("max_pool2d", "", "", "direct", supports_pool, &launch_pool<true>, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("avg_pool2d", "", "f32math_", "cudnn", supports_pool, &launch_pool_cudnn<false>, 0,
                              nullptr),
      // averages and bilinear weights are computed in f64, as the CPU reference does
      TENSORACLE_CONV_ENTRIES("avg_pool2d", "f64math_", "f64math_", "direct", supports_pool, &launch_pool<false>, 0,
                              nullptr),
      TENSORACLE_CONV_ENTRIES("global_avg_pool", "f64math_", "f64math_", "direct", supports_global_avg_pool,
                              &launch_global_avg_pool, 0, nullptr),
      TENSORACLE_CONV_ENTRIES("resize", "f64math_", "f64math_", "direct", supports_resize, &launch_resize, 0, nullptr),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

#undef TENSORACLE_CONV_ENTRIES

}  // namespace tensoracle::cuda
