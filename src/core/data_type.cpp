// DataType names and sizes, all derived from the TENSORACLE_DATA_TYPES table.
#include "tensoracle/data_type.hpp"

#include <array>

namespace tensoracle {
namespace {

struct DataTypeEntry {
  DataType type;
  std::string_view name;
  std::string_view safetensors_name;
  std::size_t size;
};

constexpr std::array<DataTypeEntry, kNumDataTypes> kTable{{
#define TENSORACLE_X(e, name, st, size) {DataType::e, name, st, size},
    TENSORACLE_DATA_TYPES(TENSORACLE_X)
#undef TENSORACLE_X
}};

const DataTypeEntry& entry(DataType type) noexcept { return kTable[static_cast<std::size_t>(type)]; }

}  // namespace

std::size_t element_size(DataType type) noexcept { return entry(type).size; }
std::string_view to_string(DataType type) noexcept { return entry(type).name; }
std::string_view safetensors_name(DataType type) noexcept { return entry(type).safetensors_name; }

std::optional<DataType> data_type_from_string(std::string_view name) noexcept {
  for (const auto& e : kTable) {
    if (e.name == name) return e.type;
  }
  return std::nullopt;
}

std::optional<DataType> data_type_from_safetensors_name(std::string_view name) noexcept {
  for (const auto& e : kTable) {
    if (e.safetensors_name == name) return e.type;
  }
  return std::nullopt;
}

bool is_floating_point(DataType type) noexcept {
  switch (type) {
    case DataType::kF64:
    case DataType::kF32:
    case DataType::kF16:
    case DataType::kBF16:
    case DataType::kF8E4M3:
    case DataType::kF8E5M2: return true;
    default: return false;
  }
}

bool is_integer(DataType type) noexcept {
  switch (type) {
    case DataType::kI64:
    case DataType::kI32:
    case DataType::kI16:
    case DataType::kI8:
    case DataType::kU8: return true;
    default: return false;
  }
}

}  // namespace tensoracle
