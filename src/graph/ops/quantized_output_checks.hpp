// The checks of a layer that quantizes its own result (attribute `quantize_to` with an output scale input, at the index
// graph/quantize_to.hpp gives for its op), shared by their definitions (quantization.cpp, convolution.cpp,
// normalization.cpp, data_movement.cpp).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <optional>

#include "graph/op_def.hpp"
#include "graph/quantize_to.hpp"

namespace tensoracle::graph {

// Without `quantize_to`: nullopt (and the output-scale input must be absent). With it: its type (i8 or f8e4m3), after
// checking that the output-scale input is an f32 scalar.
inline std::optional<DataType> quantized_output_type(InferContext& ctx) {
  const std::optional<std::size_t> scale = quantize_to_scale_input(ctx.op());
  if (!ctx.has("quantize_to")) {
    if (scale && ctx.has_input(*scale)) {
      ctx.fail(fmt::format("output_scale (input {}) is given but attribute 'quantize_to' is not", *scale));
    }
    return std::nullopt;
  }
  if (!scale) ctx.fail("op '" + ctx.op() + "' does not take attribute 'quantize_to'");
  const std::size_t scale_input = *scale;
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
