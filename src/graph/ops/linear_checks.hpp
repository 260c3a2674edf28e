// Shape and attribute checks shared by the definitions of the linear products (linear in linear_algebra.cpp,
// quantized_linear in quantization.cpp).
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "graph/op_def.hpp"

namespace tensoracle::graph {

// x [..., in] and weight [out, in]: the output's shape, x's with its last dim made `out`.
inline std::vector<DimId> linear_output_shape(InferContext& ctx, const TensorType& x, const TensorType& weight) {
  if (x.rank() < 1) ctx.fail(fmt::format("x '{}' must have rank >= 1, but is a scalar", x.name));
  ctx.require_rank(weight, 2, "weight");
  ctx.require_equal(
      weight.shape[1], x.shape.back(),
      fmt::format("weight '{}' has shape {} but x '{}' has shape {} (weight's dim 1 must equal x's last dim)",
                  weight.name, ctx.shape_string(weight.shape), x.name, ctx.shape_string(x.shape)));
  std::vector<DimId> shape = x.shape;
  shape.back() = weight.shape[0];
  return shape;
}

// A vector of one value per output feature (a bias or a scale): rank 1, weight's dim 0 long.
inline void require_per_feature(InferContext& ctx, const TensorType& v, const char* role, const TensorType& weight) {
  ctx.require_rank(v, 1, role);
  ctx.require_equal(
      v.shape[0], weight.shape[0],
      fmt::format("{} '{}' has shape {} but weight '{}' has shape {} ({}'s size must equal weight's dim "
                  "0)",
                  role, v.name, ctx.shape_string(v.shape), weight.name, ctx.shape_string(weight.shape), role));
}

// The fused epilogue the builder makes: the residual (input `residual_input`, when given) has the output's shape, and
// the "activation" attribute names one the kernels have.
inline void check_linear_epilogue(InferContext& ctx, std::size_t residual_input, const std::vector<DimId>& shape) {
  const std::string activation = ctx.get_string("activation", "none");
  if (activation != "none" && activation != "relu" && activation != "gelu_tanh" && activation != "gelu_erf") {
    ctx.fail(fmt::format("attribute 'activation' must be \"none\", \"relu\", \"gelu_tanh\" or \"gelu_erf\", not \"{}\"",
                         activation));
  }
  if (!ctx.has_input(residual_input)) return;
  const TensorType& residual = ctx.input(residual_input, "residual");
  const std::string what = fmt::format("residual '{}' has shape {} but the output has shape {}", residual.name,
                                       ctx.shape_string(residual.shape), ctx.shape_string(shape));
  if (residual.rank() != static_cast<int>(shape.size())) ctx.fail(what);
  for (std::size_t i = 0; i < shape.size(); ++i) ctx.require_equal(residual.shape[i], shape[i], what);
}

}  // namespace tensoracle::graph
