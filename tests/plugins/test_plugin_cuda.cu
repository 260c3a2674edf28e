// The test plugin's CUDA kernels: scale-and-bias (f32, f16; the bias staged through the workspace), outer product with
// concatenation, and a copy, launched on the caller's stream.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "test_plugin_cuda.hpp"

namespace test_plugin_cuda {

namespace {

template <typename T>
__device__ float load(const T* p, std::int64_t i) {
  return static_cast<float>(p[i]);
}
template <>
__device__ float load<__half>(const __half* p, std::int64_t i) {
  return __half2float(p[i]);
}
template <typename T>
__device__ void store(T* p, std::int64_t i, float v) {
  p[i] = v;
}
template <>
__device__ void store<__half>(__half* p, std::int64_t i, float v) {
  p[i] = __float2half_rn(v);
}

template <typename T>
__global__ void stage_bias(const T* b, float* staged, std::int64_t channels) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c < channels) staged[c] = load(b, c);
}

template <typename T>
__global__ void scale_bias_kernel(const T* x, const float* staged, T* y, std::int64_t n, std::int64_t channels,
                                  float alpha) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) store(y, i, alpha * load(x, i) + staged[i % channels]);
}

__global__ void outer_kernel(const float* x, const float* y, float* outer, float* joined, std::int64_t n,
                             std::int64_t m) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i < n * m) outer[i] = x[i / m] * y[i % m];
  if (i < n) joined[i] = x[i];
  if (i < m) joined[n + i] = y[i];
}

unsigned blocks(std::int64_t n) { return static_cast<unsigned>((n + 255) / 256 > 0 ? (n + 255) / 256 : 1); }

const char* status(cudaError_t e) { return e == cudaSuccess ? nullptr : cudaGetErrorString(e); }

template <typename T>
const char* scale_bias_typed(const void* x, const void* b, void* y, std::int64_t n, std::int64_t channels, float alpha,
                             void* workspace, cudaStream_t s) {
  auto* staged = static_cast<float*>(workspace);
  stage_bias<<<blocks(channels), 256, 0, s>>>(static_cast<const T*>(b), staged, channels);
  scale_bias_kernel<<<blocks(n), 256, 0, s>>>(static_cast<const T*>(x), staged, static_cast<T*>(y), n, channels, alpha);
  return status(cudaGetLastError());
}

}  // namespace

bool built() { return true; }

const char* scale_bias(bool f16, const void* x, const void* b, void* y, std::int64_t n, std::int64_t channels,
                       float alpha, void* workspace, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  return f16 ? scale_bias_typed<__half>(x, b, y, n, channels, alpha, workspace, s)
             : scale_bias_typed<float>(x, b, y, n, channels, alpha, workspace, s);
}

const char* outer(const void* x, const void* y, void* outer, void* joined, std::int64_t n, std::int64_t m,
                  void* stream) {
  const std::int64_t total = n * m > n + m ? n * m : n + m;
  outer_kernel<<<blocks(total), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float*>(x), static_cast<const float*>(y), static_cast<float*>(outer),
      static_cast<float*>(joined), n, m);
  return status(cudaGetLastError());
}

const char* copy(void* destination, const void* source, std::size_t bytes, void* stream) {
  return status(
      cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)));
}

}  // namespace test_plugin_cuda
