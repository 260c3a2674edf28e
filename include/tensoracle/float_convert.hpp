// Host conversions between f32 and f16, bf16, f8 e4m3fn and f8 e5m2, rounding to nearest even
// and treating NaN, infinities, subnormals and overflow as PyTorch does.
#pragma once

#include <cstdint>

namespace tensoracle {

// Narrowing (f32_to_*) rounds to nearest, ties to even, including into and out of the subnormal
// range and to zero, with the results of PyTorch's c10::Half, c10::BFloat16,
// c10::Float8_e4m3fn and c10::Float8_e5m2. Widening (*_to_f32) is exact for every finite value
// and infinity; a NaN keeps its sign and payload.

// IEEE binary16. Overflow gives infinity (65520, the tie with 65504, already does). A NaN becomes
// the quiet NaN 0x7E00 with its sign (payload dropped). Widening sets a NaN's quiet bit.
std::uint16_t f32_to_f16_bits(float value) noexcept;
float f16_bits_to_f32(std::uint16_t bits) noexcept;

// bfloat16. Overflow gives infinity. NaN becomes the canonical quiet NaN 0x7FC0 whatever its sign,
// as in PyTorch. Widening is a 16-bit shift (NaN bits kept as they are).
std::uint16_t f32_to_bf16_bits(float value) noexcept;
float bf16_bits_to_f32(std::uint16_t bits) noexcept;

// float8 e4m3fn (no infinities, max 448, NaN = S.1111.111). Like PyTorch there is no saturation:
// NaN, infinities and values whose magnitude is above 464 become NaN (0x7F with the sign); 464
// itself is a tie between 448 and the NaN code and rounds to 448 (even). Widening a NaN gives
// the quiet NaN 0x7FF00000 with its sign.
std::uint8_t f32_to_f8e4m3_bits(float value) noexcept;
float f8e4m3_bits_to_f32(std::uint8_t bits) noexcept;

// float8 e5m2 (IEEE-like: infinities, max 57344). Overflow gives infinity (61440, the tie with
// 57344, already does). A NaN becomes 0x7F with its sign, as in PyTorch. Widening sets a NaN's
// quiet bit.
std::uint8_t f32_to_f8e5m2_bits(float value) noexcept;
float f8e5m2_bits_to_f32(std::uint8_t bits) noexcept;

}  // namespace tensoracle
