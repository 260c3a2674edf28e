// Helpers of the convolution, pooling and resize kernels (CUDA sources only): element types, layout, cuDNN calls.
//
// Besides cuDNN's status checks, version check and descriptors, this holds what the three files share that is not
// cuDNN: the family's element types (load / store on CUDA's __half and __nv_bfloat16), the layout attributes and the
// dtype check of the supports functions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "tensoracle/error.hpp"

namespace tensoracle::cuda {

// The cuDNN library's version as it reports it at run time (major * 10000 + minor * 100 + patch for cuDNN 9); defined
// in convolution.cu.
int cudnn_runtime_version();

namespace conv_family {

// ---- element types: storage (float, __half, __nv_bfloat16, double) and accumulation (float; double for f64) ----
// The storage types are CUDA's rather than common.cuh's F16 / BF16 because of the f16 load: cvt.f32.f16 (what
// __half2float compiles to) turns every f16 NaN into the f32 NaN 0x7FFFFFFF, where common.cuh's to_compute keeps the
// sign and payload, so a NaN that max pooling or nearest resize copies would come out with another sign.

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

// Stores round to nearest even with common.cuh's NaN encodings. f16: overflow to infinity, NaN becomes 0x7E00 with its
// sign (c10::Half); bf16: NaN becomes 0x7FC0 (c10::BFloat16), as the CPU reference's conversions.
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(double* p, std::int64_t i, double v) { p[i] = v; }
__device__ __forceinline__ void store(__half* p, std::int64_t i, float v) {
  p[i] = __ushort_as_half(kernels::f16_from_float(v).bits);
}
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) {
  p[i] = __ushort_as_bfloat16(kernels::bf16_from_float(v).bits);
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

// ---- attributes (prepare functions) ----

// The i-th value of a per-spatial-dim attribute list; `fallback` when the list is absent or empty.
inline std::int64_t list_value(const StepLaunch& launch, const char* name, std::size_t i, std::int64_t fallback) {
  const std::vector<std::int64_t> values = launch.attrs->get_ints(name, std::vector<std::int64_t>{});
  return values.empty() ? fallback : values.at(i);
}

// Channels last (the builder's "layout": "nhwc"): x [N, H, W, C] (conv: weight [O, kh, kw, C/g], y [N, OH, OW, O]).
inline bool channels_last(const StepLaunch& launch) { return launch.attrs->get_string("layout", "nchw") == "nhwc"; }

inline Dims channels_first_dims(const Dims& d) { return Dims{d[0], d[3], d[1], d[2]}; }

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

inline ConvShape conv_shape(const StepLaunch& launch) {
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

// Whether every data pointer of the launch is 16-byte aligned (what the graph plans are built for; the builder's
// arena and weights always are, a caller's binding may not be). When the step is prepared, a caller's buffer is
// nullptr: what this tests then is the pointers known already.
inline bool graph_aligned(const StepLaunch& launch) {
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  for (const DeviceTensor& t : launch.inputs) {
    if (!aligned(t.data)) return false;
  }
  return aligned(launch.outputs.at(0).data);
}

// Whether a launch binds a caller's buffer (whose alignment is only known then).
inline bool binds_caller_buffer(const StepLaunch& launch) {
  for (const DeviceTensor& t : launch.inputs) {
    if (t.caller_buffer) return true;
  }
  return launch.outputs.at(0).caller_buffer;
}

// ---- supports ----

// Every present input and the output have dtype kDtype; x (input 0) has a rank in [min_rank, max_rank].
template <DataType kDtype>
bool all_dtype(const graph::Graph& graph, const graph::Layer& layer, int min_rank, int max_rank) {
  if (!kernels::has_tensor(layer, 0) || layer.outputs.size() != 1) return false;
  for (std::size_t i = 0; i < layer.inputs.size(); ++i) {
    if (kernels::has_tensor(layer, i) && graph.tensor(layer.inputs[i]).dtype != kDtype) return false;
  }
  if (graph.tensor(layer.outputs[0]).dtype != kDtype) return false;
  const auto rank = static_cast<int>(graph.tensor(layer.inputs[0]).shape.size());
  return rank >= min_rank && rank <= max_rank;
}

// ---- cuDNN ----

inline void check_cudnn(cudnnStatus_t status, const char* call, const StepLaunch& launch) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw CudaError(kernels::layer_name(launch) + ": " + call + " failed: " + cudnnGetErrorString(status) + " (" +
                    std::to_string(static_cast<int>(status)) + ")");
  }
}

// Statuses that say cuDNN cannot run this problem (as opposed to a failure while running it).
inline bool is_refusal(cudnnStatus_t status) {
  const int category = static_cast<int>(status) / 1000 * 1000;
  return category == CUDNN_STATUS_BAD_PARAM || category == CUDNN_STATUS_NOT_SUPPORTED;
}

inline void require_cudnn9(const StepLaunch& launch) {
  const int version = cudnn_runtime_version();
  if (version < 90000) {
    throw CudaError(kernels::layer_name(launch) +
                    ": the CUDA convolution kernels need cuDNN 9.0 or newer, but the cuDNN " +
                    "library loaded reports version " + std::to_string(version));
  }
}

// One cuDNN descriptor, destroyed with its owner (movable, so that plans can hold it).
template <typename Handle, cudnnStatus_t (*kDestroy)(Handle)>
struct CudnnDesc {
  Handle d = nullptr;
  CudnnDesc() = default;
  CudnnDesc(CudnnDesc&& other) noexcept : d(std::exchange(other.d, nullptr)) {}
  CudnnDesc& operator=(CudnnDesc&& other) noexcept {
    std::swap(d, other.d);
    return *this;
  }
  ~CudnnDesc() {
    if (d != nullptr) kDestroy(d);
  }
};
using TensorDesc = CudnnDesc<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = CudnnDesc<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = CudnnDesc<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using ActivationDesc = CudnnDesc<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;
using PoolingDesc = CudnnDesc<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;

inline cudnnDataType_t cudnn_type(DataType dtype) {
  switch (dtype) {
    case DataType::kF16: return CUDNN_DATA_HALF;
    case DataType::kBF16: return CUDNN_DATA_BFLOAT16;
    case DataType::kF64: return CUDNN_DATA_DOUBLE;
    default: return CUDNN_DATA_FLOAT;
  }
}

}  // namespace conv_family
}  // namespace tensoracle::cuda

// Entries of an op for the four float dtypes; the tags name the arithmetic of f32 and of f16/bf16 ("" or "f64math_").
#define TENSORACLE_CONV_ENTRIES(OP, F32_TAG, NARROW_TAG, VARIANT, SUPPORTS, PREPARE, LAUNCH, WORKSPACE, WORKSPACE_FOR) \
  prepared_kernel<PREPARE, LAUNCH>(OP "_f32_" F32_TAG VARIANT, OP, SUPPORTS<DataType::kF32>, WORKSPACE,                \
                                   WORKSPACE_FOR),                                                                     \
      prepared_kernel<PREPARE, LAUNCH>(OP "_f16_" NARROW_TAG VARIANT, OP, SUPPORTS<DataType::kF16>, WORKSPACE,         \
                                       WORKSPACE_FOR),                                                                 \
      prepared_kernel<PREPARE, LAUNCH>(OP "_bf16_" NARROW_TAG VARIANT, OP, SUPPORTS<DataType::kBF16>, WORKSPACE,       \
                                       WORKSPACE_FOR),                                                                 \
      prepared_kernel<PREPARE, LAUNCH>(OP "_f64_" VARIANT, OP, SUPPORTS<DataType::kF64>, WORKSPACE, WORKSPACE_FOR)
