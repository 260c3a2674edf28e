// The fused epilogue of the CPU reference's products (linear, quantized_linear): what the builder's fuse_epilogues
// puts after the sum, computed in double before the one rounding to the output dtype.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"

namespace tensoracle::cpu {

// y [rows, features] += bias[features] (input `bias_input`) and the residual (input `residual_input`), each when given,
// then the "activation" attribute ("none", "relu", "gelu_tanh", "gelu_erf") as the relu and gelu kernels compute it.
inline void apply_epilogue(const KernelContext& ctx, std::vector<double>& y, std::size_t bias_input,
                           std::size_t residual_input) {
  if (ctx.has_input(bias_input)) {
    const std::vector<double> bias = to_f64(ctx.input(bias_input));
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += bias[i % bias.size()];
  }
  if (ctx.has_input(residual_input)) {
    const std::vector<double> residual = to_f64(ctx.input(residual_input));
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += residual[i];
  }
  const std::string activation = ctx.get_string("activation", "none");
  if (activation == "relu") {
    for (double& v : y) v = v < 0.0 ? 0.0 : v;
  } else if (activation == "gelu_tanh") {
    constexpr double kSqrt2_Pi = 0.79788456080286535588;  // sqrt(2/pi), as the gelu kernel
    for (double& v : y) v = 0.5 * v * (1.0 + std::tanh(kSqrt2_Pi * (v + 0.044715 * v * v * v)));
  } else if (activation == "gelu_erf") {
    constexpr double kSqrt1_2 = 0.70710678118654752440;  // 1/sqrt(2), as the gelu kernel
    for (double& v : y) v = 0.5 * v * (1.0 + std::erf(v * kSqrt1_2));
  }
}

}  // namespace tensoracle::cpu
