// linear's erf-GELU products (128-row tiles) of cutlass_gemm_sm90.hpp for f16 operands with a residual C, and the
// dispatch by dtype and C (compiled for sm_90a only).
#include "backends/cuda/kernels/cutlass_gemm_sm90.cuh"

namespace tensoracle::cuda::sm90 {

std::unique_ptr<FusedGemm> make_f16_fused_gemm(GemmConfig config, int device, int sm_count) {
  return make_large_tile_gelu_gemm<cutlass::half_t, cutlass::half_t>(config, device, sm_count);
}

std::unique_ptr<FusedGemm> make_fused_gemm(GemmConfig config, DataType dtype, Activation activation, bool residual,
                                           int device, int sm_count) {
  if (small_tiles(config)) {
    switch (dtype) {
      case DataType::kF16: return make_f16_small_tile_gemm(config, activation, residual, device, sm_count);
      case DataType::kBF16: return make_bf16_small_tile_gemm(config, activation, residual, device, sm_count);
      default: return nullptr;
    }
  }
  if (activation == Activation::kNone) {
    switch (dtype) {
      case DataType::kF16: return make_f16_plain_gemm(config, residual, device, sm_count);
      case DataType::kBF16: return make_bf16_plain_gemm(config, residual, device, sm_count);
      default: return nullptr;
    }
  }
  if (activation != Activation::kGeluErf) return nullptr;
  switch (dtype) {
    case DataType::kF16:
      return residual ? make_f16_fused_gemm(config, device, sm_count)
                      : make_f16_fused_gemm_no_c(config, device, sm_count);
    case DataType::kBF16:
      return residual ? make_bf16_fused_gemm(config, device, sm_count)
                      : make_bf16_fused_gemm_no_c(config, device, sm_count);
    default: return nullptr;
  }
}

std::unique_ptr<FusedGemm> make_quantized_gemm(GemmConfig config, DataType operands, Activation activation,
                                               bool quantized_output, bool residual, int device, int sm_count) {
  switch (operands) {
    case DataType::kF8E4M3:
      return quantized_output ? make_f8e4m3_requantized_gemm(config, activation, device, sm_count)
                              : make_f8e4m3_quantized_gemm(config, activation, device, sm_count);
    case DataType::kI8:
      return quantized_output ? make_i8_requantized_gemm(config, activation, residual, device, sm_count)
                              : make_i8_quantized_gemm(config, activation, residual, device, sm_count);
    default: return nullptr;
  }
}

std::unique_ptr<FusedGemm> make_quantized_residual_gemm(GemmConfig config, DataType operands, ResidualC residual,
                                                        Activation activation, int device, int sm_count) {
  if (operands != DataType::kI8 || activation != Activation::kRelu) return nullptr;
  return make_i8_residual_gemm(config, residual, device, sm_count);
}

}  // namespace tensoracle::cuda::sm90
