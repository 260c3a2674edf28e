// The checks of a layer that quantizes its own result (quantized_linear's, quantized_conv's and layer_norm's attribute
// `quantize_to` with an output scale input), shared by their definitions (quantization.cpp, convolution.cpp,
// normalization.cpp).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <optional>

#include "graph/op_def.hpp"

namespace tensoracle::graph {

// Without `quantize_to`: nullopt (and input `scale_input` must be absent). With it: its type (i8 or f8e4m3), after
// checking that input `scale_input` is an f32 scalar.
inline std::optional<DataType> quantized_output_type(InferContext& ctx, std::size_t scale_input) {
  if (!ctx.has("quantize_to")) {
    if (ctx.has_input(scale_input)) {
      ctx.fail(fmt::format("output_scale (input {}) is given but attribute 'quantize_to' is not", scale_input));
    }
    return std::nullopt;
  }
  const DataType quantized = ctx.get_dtype("quantize_to");
  if (quantized != DataType::kI8 && quantized != DataType::kF8E4M3) {
    ctx.fail(fmt::format("attribute 'quantize_to' must be i8 or f8e4m3, not {}", to_string(quantized)));
  }
  const TensorType& output_scale = ctx.input(scale_input, "output_scale (needed with 'quantize_to')");
  ctx.require_dtype(output_scale, {DataType::kF32}, "output_scale");
  if (output_scale.rank() != 0) {
    ctx.fail(fmt::format("output_scale '{}' must be a scalar (one scale for the output), but has shape {}",
                         output_scale.name, ctx.shape_string(output_scale.shape)));
  }
  return quantized;
}

}  // namespace tensoracle::graph
