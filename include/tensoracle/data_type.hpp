// DataType: the element types tensoracle knows, with sizes and their safetensors names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tensoracle {

// X(enumerator, short name, safetensors name, size in bytes). The one table of data types:
// every name and size below is derived from it.
#define TENSORACLE_DATA_TYPES(X)     \
  X(kF64, "f64", "F64", 8)           \
  X(kF32, "f32", "F32", 4)           \
  X(kF16, "f16", "F16", 2)           \
  X(kBF16, "bf16", "BF16", 2)        \
  X(kF8E4M3, "f8e4m3", "F8_E4M3", 1) \
  X(kF8E5M2, "f8e5m2", "F8_E5M2", 1) \
  X(kI64, "i64", "I64", 8)           \
  X(kI32, "i32", "I32", 4)           \
  X(kI16, "i16", "I16", 2)           \
  X(kI8, "i8", "I8", 1)              \
  X(kU8, "u8", "U8", 1)              \
  X(kBool, "bool", "BOOL", 1)

enum class DataType : std::uint8_t {
#define TENSORACLE_X(e, name, st, size) e,
  TENSORACLE_DATA_TYPES(TENSORACLE_X)
#undef TENSORACLE_X
};

inline constexpr int kNumDataTypes = 0
#define TENSORACLE_X(e, name, st, size) +1
    TENSORACLE_DATA_TYPES(TENSORACLE_X)
#undef TENSORACLE_X
    ;

// Size of one element in bytes.
std::size_t element_size(DataType type) noexcept;
// Short lower-case name used in JSON and messages ("f32", "bf16", "f8e4m3").
std::string_view to_string(DataType type) noexcept;
// The dtype name safetensors files use ("F32", "BF16", "F8_E4M3").
std::string_view safetensors_name(DataType type) noexcept;
// Parses a short name; nullopt when unknown.
std::optional<DataType> data_type_from_string(std::string_view name) noexcept;
// Parses a safetensors dtype name; nullopt when unknown or unsupported.
std::optional<DataType> data_type_from_safetensors_name(std::string_view name) noexcept;

bool is_floating_point(DataType type) noexcept;
bool is_integer(DataType type) noexcept;

}  // namespace tensoracle
