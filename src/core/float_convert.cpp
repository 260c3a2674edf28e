// Host conversions between f32 and the small float formats f16, bf16, f8 e4m3fn and f8 e5m2.
#include "tensoracle/float_convert.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>

namespace tensoracle {
namespace {

// f32 layout: 1 sign bit, 8 exponent bits (bias 127), 23 mantissa bits.
constexpr int kF32ManBits = 23;
constexpr int kF32Bias = 127;
constexpr std::uint32_t kF32SignMask = 0x80000000U;
constexpr std::uint32_t kF32InfBits = 0x7F800000U;
constexpr std::uint32_t kF32QuietBit = 0x00400000U;
constexpr std::uint32_t kF32ImplicitBit = 0x00800000U;
constexpr std::uint32_t kF32ManMask = 0x007FFFFFU;

// A small binary float format: 1 sign bit, exp_bits exponent bits, man_bits mantissa bits.
struct SmallFloatFormat {
  int exp_bits;
  int man_bits;
  // true: IEEE-like, the all-ones exponent holds infinity (mantissa 0) and NaNs.
  // false ("fn" formats): no infinity; only the all-ones magnitude is NaN and the rest of the
  // top binade holds finite numbers.
  bool has_inf;
  // Magnitude bits produced for a NaN input, and whether the input's sign is kept.
  std::uint32_t nan_bits;
  bool nan_keeps_sign;

  constexpr int bias() const { return (1 << (exp_bits - 1)) - 1; }
  constexpr int width() const { return exp_bits + man_bits; }  // without the sign bit
  constexpr std::uint32_t magnitude_mask() const { return (1U << width()) - 1U; }
  constexpr std::uint32_t man_mask() const { return (1U << man_bits) - 1U; }
  constexpr std::uint32_t inf_bits() const { return magnitude_mask() & ~man_mask(); }
  constexpr std::uint32_t max_finite_bits() const { return has_inf ? inf_bits() - 1U : magnitude_mask() - 1U; }
  // What a value beyond the finite range becomes: infinity, or NaN when there is none.
  constexpr std::uint32_t overflow_bits() const { return has_inf ? inf_bits() : magnitude_mask(); }
  constexpr bool is_nan(std::uint32_t magnitude) const {
    return has_inf ? magnitude > inf_bits() : magnitude == magnitude_mask();
  }
};

// NaN encodings follow PyTorch: c10::Half gives 0x7E00 with the sign, c10::BFloat16 always
// 0x7FC0, and both c10 float8 types all ones with the sign.
constexpr SmallFloatFormat kF16{5, 10, true, 0x7E00U, true};
constexpr SmallFloatFormat kBF16{8, 7, true, 0x7FC0U, false};
constexpr SmallFloatFormat kF8E4M3FN{4, 3, false, 0x7FU, true};
constexpr SmallFloatFormat kF8E5M2{5, 2, true, 0x7FU, true};

// value / 2^shift rounded to nearest, ties to even. Needs value < 2^31 and shift >= 1.
constexpr std::uint32_t shift_right_round_even(std::uint32_t value, int shift) {
  if (shift > 31) {
    return 0;  // value is below half of the smallest step
  }
  // Add just under half a step, plus one more when the kept part is odd: an exact half then
  // rounds up only to an even result.
  const std::uint32_t half_minus_one = (1U << (shift - 1)) - 1U;
  const std::uint32_t kept_is_odd = (value >> shift) & 1U;
  return (value + half_minus_one + kept_is_odd) >> shift;
}

// f32 -> F, rounding to nearest even. Returns F's bit pattern (sign in bit F.width()).
template <SmallFloatFormat F>
std::uint32_t narrow_from_f32(float value) noexcept {
  static_assert(F.man_bits < kF32ManBits && F.bias() <= kF32Bias, "F must be narrower than f32");
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 31) << F.width();
  const std::uint32_t magnitude = bits & ~kF32SignMask;

  if (magnitude > kF32InfBits) {
    return (F.nan_keeps_sign ? sign : 0U) | F.nan_bits;
  }
  if (magnitude == kF32InfBits) {
    return sign | F.overflow_bits();
  }

  // value = significand * 2^(f32_exp - kF32Bias - 23); f32 subnormals have no implicit bit and
  // the exponent of the smallest normal.
  const int f32_exp = static_cast<int>(magnitude >> kF32ManBits);
  const std::uint32_t significand = (magnitude & kF32ManMask) | (f32_exp != 0 ? kF32ImplicitBit : 0U);
  const int exp = std::max(f32_exp, 1) - kF32Bias + F.bias();  // the same exponent, biased for F

  std::uint32_t result = 0;
  if (exp >= 1) {
    // Normal in F (or too large): put the exponent above the 23 mantissa bits (the implicit bit
    // adds its last 1) and round away the extra mantissa bits. A carry out of the mantissa bumps
    // the exponent, as it should. exp <= 254, so this stays below 2^31.
    const std::uint32_t fixed = (static_cast<std::uint32_t>(exp - 1) << kF32ManBits) + significand;
    result = shift_right_round_even(fixed, kF32ManBits - F.man_bits);
  } else {
    // Subnormal in F (exponent field 0): shift further right by the exponent's shortfall.
    // Rounding up to the smallest normal yields its encoding.
    result = shift_right_round_even(significand, kF32ManBits - F.man_bits + (1 - exp));
  }
  if (result > F.max_finite_bits()) {
    result = F.overflow_bits();
  }
  return sign | result;
}

// F -> f32, exact for every finite value and infinity. A NaN keeps its sign and payload and gets
// the quiet bit set, as PyTorch's c10 conversions do.
template <SmallFloatFormat F>
float widen_to_f32(std::uint32_t bits) noexcept {
  // F's smallest subnormal, 2^(1 - bias - man_bits), must be an f32 normal (not true for bf16).
  static_assert(1 - F.bias() - F.man_bits >= 1 - kF32Bias, "F's subnormals must be f32 normals");
  constexpr int kManShift = kF32ManBits - F.man_bits;
  const std::uint32_t sign = ((bits >> F.width()) & 1U) << 31;
  const std::uint32_t magnitude = bits & F.magnitude_mask();
  const std::uint32_t mantissa = magnitude & F.man_mask();

  if (F.is_nan(magnitude)) {
    return std::bit_cast<float>(sign | kF32InfBits | kF32QuietBit | (mantissa << kManShift));
  }
  if (F.has_inf && magnitude == F.inf_bits()) {
    return std::bit_cast<float>(sign | kF32InfBits);
  }
  if (magnitude == 0) {
    return std::bit_cast<float>(sign);
  }

  // value = significand * 2^(exp - kF32Bias - 23), with exp biased for f32 and the significand
  // aligned to f32's 23 mantissa bits; F's subnormals have no implicit bit.
  const int exp_field = static_cast<int>(magnitude >> F.man_bits);
  std::uint32_t significand = (mantissa | (exp_field != 0 ? 1U << F.man_bits : 0U)) << kManShift;
  int exp = std::max(exp_field, 1) - F.bias() + kF32Bias;
  // Normalise F's subnormals: move the leading 1 up to the implicit bit position.
  const int shift = std::countl_zero(significand) - (31 - kF32ManBits);
  significand <<= shift;
  exp -= shift;
  // The implicit bit adds the final 1 to the exponent field.
  return std::bit_cast<float>(sign | ((static_cast<std::uint32_t>(exp - 1) << kF32ManBits) + significand));
}

}  // namespace

std::uint16_t f32_to_f16_bits(float value) noexcept { return static_cast<std::uint16_t>(narrow_from_f32<kF16>(value)); }

float f16_bits_to_f32(std::uint16_t bits) noexcept { return widen_to_f32<kF16>(bits); }

std::uint16_t f32_to_bf16_bits(float value) noexcept {
  return static_cast<std::uint16_t>(narrow_from_f32<kBF16>(value));
}

// bf16 is the top half of an f32, so widening is a shift. It keeps NaN payloads unchanged (even
// signalling ones), as c10::BFloat16 does.
float bf16_bits_to_f32(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint8_t f32_to_f8e4m3_bits(float value) noexcept {
  return static_cast<std::uint8_t>(narrow_from_f32<kF8E4M3FN>(value));
}

float f8e4m3_bits_to_f32(std::uint8_t bits) noexcept { return widen_to_f32<kF8E4M3FN>(bits); }

std::uint8_t f32_to_f8e5m2_bits(float value) noexcept {
  return static_cast<std::uint8_t>(narrow_from_f32<kF8E5M2>(value));
}

float f8e5m2_bits_to_f32(std::uint8_t bits) noexcept { return widen_to_f32<kF8E5M2>(bits); }

}  // namespace tensoracle
