// The CPU reference's rounding onto the quantized grids (i8, f8e4m3), shared by quantize and by the layers that
// quantize their own result (quantized_linear, layer_norm with `quantize_to`).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensoracle/data_type.hpp"

namespace tensoracle::cpu {

// Half to even without depending on the floating-point environment's rounding mode.
inline double round_half_even(double v) {
  if (std::fabs(v - std::trunc(v)) == 0.5) return 2.0 * std::round(v / 2.0);
  return std::round(v);
}

// i8: NaN has no integer to go to, so it becomes 0 (as a float -> int cast does).
inline double round_to_i8(double v) {
  if (std::isnan(v)) return 0.0;
  return std::clamp(round_half_even(v), -128.0, 127.0);
}

// e4m3fn: 3 mantissa bits; the smallest normal binade is 2^-6 and subnormals continue its step of
// 2^-9. Quantization saturates: anything beyond ±448 (infinities too) becomes ±448, unlike a cast,
// which would give NaN. NaN stays NaN. Rounding the double directly avoids rounding twice through f32.
inline double round_to_e4m3_saturating(double v) {
  const double magnitude = std::fabs(v);
  if (std::isnan(v) || magnitude == 0.0) return v;
  if (magnitude >= 448.0) return std::copysign(448.0, v);
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent with m in [0.5, 1)
  const double step = std::ldexp(1.0, std::max(exponent - 1, -6) - 3);
  // magnitude / step is exact (a power-of-two scaling); rounding up may carry into the next binade,
  // which e4m3 represents exactly, and never past 448.
  return std::copysign(round_half_even(magnitude / step) * step, v);
}

// Every value divided by `scale` (in double) and rounded onto the grid of `to` (i8 or f8e4m3).
inline void quantize_in_place(std::vector<double>& values, double scale, DataType to) {
  const auto round = to == DataType::kI8 ? round_to_i8 : round_to_e4m3_saturating;
  for (double& v : values) v = round(v / scale);
}

}  // namespace tensoracle::cpu
