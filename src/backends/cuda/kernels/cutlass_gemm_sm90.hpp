// Hopper (sm_90a) matrix products with a fused scale + bias + residual + activation epilogue, through CUTLASS's
// warp-specialized TMA/wgmma kernels: the interface, with no CUTLASS type in it (kernels/cutlass_gemm_sm90*.cu
// implement it). f16/bf16 operands with erf-GELU for linear; i8 and f8e4m3 operands with an f16 result for
// quantized_linear; i8 operands, residual and result with relu for quantized_conv's 1x1 convolutions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/check.hpp"
#include "tensoracle/data_type.hpp"

namespace tensoracle::cuda::sm90 {

// The tile shapes and schedules offered as timed candidates (CUTLASS's names: a cooperative kernel splits one tile
// between two consumer warpgroups, a ping-pong kernel gives each its own tile and overlaps one's epilogue with the
// other's products).
enum class GemmConfig {
  kCooperative128x256,    // 128x256x64 tiles, clusters of 2x1
  kCooperative256x128,    // 256x128x64 tiles (a 128x128 half a consumer warpgroup), clusters of 1x2
  kCooperative128x128,    // 128x128x64 tiles, no cluster
  kCooperative128x192,    // 128x192x64 tiles, clusters of 2x1 (no activation only: make_typed_plain_gemm)
  kPingpong128x128,       // 128x128x64 tiles, no cluster
  kPingpong128x128Epi64,  // the same with 64x64 epilogue subtiles (CUTLASS's default: 64x32)
  // Small tiles, for products of few rows (a batch of one sequence): more tiles than 128-row ones keep more of the
  // GPU's multiprocessors busy. A ping-pong warpgroup takes a 64-row tile of its own.
  kPingpong64x128,  // 64x128x64 tiles, no cluster
  kPingpong64x64,   // 64x64x64 tiles, no cluster
};

// Whether a configuration is one of the small-tile ones (built for linear without an activation too).
constexpr bool small_tiles(GemmConfig config) {
  return config == GemmConfig::kPingpong64x128 || config == GemmConfig::kPingpong64x64;
}

// One product, row-major: D[m, n] = act(scale[n] · (A[m, k] · B[n, k]ᵀ) + bias[n] + C[m, n]), accumulated in f32 (i32
// for i8 operands) with the scale, bias, residual and activation applied to the f32 value and D rounded once. B is a
// linear layer's weight [out, in]; bias and the residual C may be nullptr (none); scale (f32) is read only by the
// quantized products, where it is required. A quantized product with a quantized result multiplies that value by the
// f32 reciprocal of *output_scale (f32, in device memory) and rounds it to the operands' type instead. A quantized
// residual (make_quantized_residual_gemm) adds C[m, n] · *c_scale (f32, in device memory) instead of C[m, n].
struct GemmProblem {
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  const float* scale = nullptr;
  const void* bias = nullptr;
  const void* c = nullptr;
  const float* c_scale = nullptr;
  const float* output_scale = nullptr;
  void* d = nullptr;
};

// Every address these kernels read or write through the bulk tensor copy engine must be 16-byte aligned.
constexpr std::uintptr_t kAddressAlignment = 16;

// Whether every address of the problem (absent ones aside) is kAddressAlignment-aligned.
inline bool aligned_for_tma(const GemmProblem& p) {
  // The residual's and output's scales are read as scalars, not through the copy engine.
  for (const void* address :
       {p.a, p.b, static_cast<const void*>(p.scale), p.bias, p.c, static_cast<const void*>(p.d)}) {
    if (address != nullptr && reinterpret_cast<std::uintptr_t>(address) % kAddressAlignment != 0) return false;
  }
  return true;
}

// The current device, and its multiprocessor count when it is a compute capability 9.0 GPU (what these kernels run
// on; 0 for another GPU, with major.minor saying which).
struct DeviceInfo {
  int device = 0, major = 0, minor = 0, sm_count = 0;
};
inline DeviceInfo current_device(const std::string& context) {
  DeviceInfo d;
  TENSORACLE_CUDA_CHECK(cudaGetDevice(&d.device), context);
  TENSORACLE_CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, d.device), context);
  TENSORACLE_CUDA_CHECK(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, d.device), context);
  if (d.major == 9 && d.minor == 0) {
    TENSORACLE_CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, d.device), context);
  }
  return d;
}

// The epilogue's activation.
enum class Activation { kNone, kRelu, kGeluErf };

// The C operand of a quantized convolution's product: none (the kernel then reserves no shared memory for it), an f16
// residual, or an i8 one scaled by its own scale.
enum class ResidualC { kNone, kF16, kI8 };

class FusedGemm {
 public:
  virtual ~FusedGemm() = default;
  // Whether the kernel takes a problem of these sizes (k and n multiples of 16 bytes' elements; sizes within int32).
  virtual bool can_implement(const GemmProblem& problem) const = 0;
  // The scratch a problem of these sizes needs.
  virtual std::size_t workspace_bytes(const GemmProblem& problem) const = 0;
  // Plans the launch for the problem's addresses (all 16-byte aligned) and sizes, before the first launch and again
  // whenever an address changes (host work only, capture safe). Throws CudaError naming `context` when CUTLASS
  // refuses.
  virtual void plan(const GemmProblem& problem, void* workspace, const char* context) = 0;
  // Launches the planned product on `stream`; `programmatic`: with programmatic dependent launch (StepLaunch::
  // programmatic: its producer warps wait for the preceding kernel before their first load, CUTLASS's grid dependency
  // control, which src/CMakeLists.txt turns on for these kernels).
  virtual void run(cudaStream_t stream, bool programmatic, const char* context) = 0;
};

#if defined(TENSORACLE_HAVE_CUTLASS_SM90)
// Whether this build has the kernels: CMake found CUTLASS and builds sm_90 (src/CMakeLists.txt).
constexpr bool kFusedGemmBuilt = true;
// linear's product of one configuration for f16 or bf16 operands on `device` (an sm_90 GPU with `sm_count`
// multiprocessors), with an erf-GELU epilogue (every configuration) or none (Activation::kNone: the small-tile ones);
// nullptr for another dtype, activation or configuration. Without a `residual` the kernel takes no C (GemmProblem::c
// must stay nullptr) and holds no shared memory for it.
std::unique_ptr<FusedGemm> make_fused_gemm(GemmConfig config, DataType dtype, Activation activation, bool residual,
                                           int device, int sm_count);
// The quantized product of one configuration: i8 or f8e4m3 operands, scale per column, f16 D (bias and C f16 too), or
// with `quantized_output` D quantized to the operands' type; nullptr for another dtype or a configuration not built for
// the operands (f16 D: i8 kCooperative128x256 and kPingpong128x128, f8e4m3 kCooperative128x256 and
// kCooperative128x128; quantized D: i8 kCooperative128x256 and kPingpong128x128, f8e4m3 kCooperative128x128). Without
// a `residual` an i8 product is one that takes no C (GemmProblem::c must stay nullptr).
std::unique_ptr<FusedGemm> make_quantized_gemm(GemmConfig config, DataType operands, Activation activation,
                                               bool quantized_output, bool residual, int device, int sm_count);
// The quantized product of a 1x1 convolution (quantized_conv): i8 operands and D, f16 bias, relu, and C of `residual`
// kind: none, f16, or i8 (scaled by *c_scale); nullptr for another dtype, activation or configuration (built:
// kCooperative128x256).
std::unique_ptr<FusedGemm> make_quantized_residual_gemm(GemmConfig config, DataType operands, ResidualC residual,
                                                        Activation activation, int device, int sm_count);
#else
constexpr bool kFusedGemmBuilt = false;
inline std::unique_ptr<FusedGemm> make_fused_gemm(GemmConfig /*config*/, DataType /*dtype*/, Activation /*activation*/,
                                                  bool /*residual*/, int /*device*/, int /*sm_count*/) {
  return nullptr;
}
inline std::unique_ptr<FusedGemm> make_quantized_gemm(GemmConfig /*config*/, DataType /*operands*/,
                                                      Activation /*activation*/, bool /*quantized_output*/,
                                                      bool /*residual*/, int /*device*/, int /*sm_count*/) {
  return nullptr;
}
inline std::unique_ptr<FusedGemm> make_quantized_residual_gemm(GemmConfig /*config*/, DataType /*operands*/,
                                                               ResidualC /*residual*/, Activation /*activation*/,
                                                               int /*device*/, int /*sm_count*/) {
  return nullptr;
}
#endif

}  // namespace tensoracle::cuda::sm90
