// Which input of a layer that quantizes its own result (attribute `quantize_to`) holds that result's scale: one table
// for the op definitions' checks and the builder passes that add or keep such scales.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace tensoracle::graph {

// The index of the output-scale input of an op that can take attribute `quantize_to` (after the op's optional inputs:
// the quantized products' bias and residual, a norm's weight and layer_norm's bias); nullopt for other ops.
inline std::optional<std::size_t> quantize_to_scale_input(std::string_view op) {
  if (op == "quantized_linear" || op == "quantized_conv") return 5;
  if (op == "layer_norm") return 3;
  if (op == "rms_norm") return 2;
  if (op == "max_pool2d" || op == "space_to_depth") return 1;
  return std::nullopt;
}

}  // namespace tensoracle::graph
