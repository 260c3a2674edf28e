// Safetensors writer producing the same bytes as the official `safetensors` package.
#include <algorithm>
#include <array>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/bytes.hpp"
#include "core/posix_file.hpp"
#include "io/safetensors_layout.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {
namespace {

// The official writer orders tensors by dtype, descending in the order of its Dtype enum
// (BOOL < U8 < I8 < F8_E5M2 < F8_E4M3 < I16 < U16 < F16 < BF16 < I32 < U32 < F32 < F64 < I64
// < U64), then by name.
int official_dtype_rank(DataType type) {
  switch (type) {
    case DataType::kBool: return 0;
    case DataType::kU8: return 1;
    case DataType::kI8: return 2;
    case DataType::kF8E5M2: return 3;
    case DataType::kF8E4M3: return 4;
    case DataType::kI16: return 5;
    case DataType::kF16: return 7;
    case DataType::kBF16: return 8;
    case DataType::kI32: return 9;
    case DataType::kF32: return 11;
    case DataType::kF64: return 12;
    case DataType::kI64: return 13;
  }
  return -1;
}

// JSON string literal with the same escapes as serde_json (and nlohmann): ", \, control
// characters; UTF-8 kept as is. Invalid UTF-8 is rejected.
std::string json_string(const std::string& text, const char* what) {
  try {
    return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  } catch (const nlohmann::json::exception&) {
    throw InvalidArgumentError(fmt::format("safetensors: {} '{}' is not valid UTF-8", what, text));
  }
}

}  // namespace

namespace io {

SafetensorsLayout safetensors_layout(const std::vector<LayoutTensor>& tensors,
                                     const std::optional<std::map<std::string, std::string>>& metadata) {
  SafetensorsLayout file;
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const LayoutTensor& t = tensors[i];
    if (t.name == "__metadata__") throw InvalidArgumentError("safetensors: a tensor can't be named '__metadata__'");
    if (!names.insert(t.name).second)
      throw InvalidArgumentError(fmt::format("safetensors: tensor '{}' is given twice", t.name));
    if (!t.shape.is_static()) {
      throw InvalidArgumentError(
          fmt::format("safetensors: tensor '{}' has a dynamic shape {}", t.name, t.shape.to_string()));
    }
    file.order.push_back(i);
  }
  std::stable_sort(file.order.begin(), file.order.end(), [&](std::size_t ia, std::size_t ib) {
    const LayoutTensor& a = tensors[ia];
    const LayoutTensor& b = tensors[ib];
    int ra = official_dtype_rank(a.dtype), rb = official_dtype_rank(b.dtype);
    if (ra != rb) return ra > rb;
    return a.name < b.name;
  });

  std::string& header = file.header;
  header = "{";
  bool first = true;
  if (metadata) {
    header += "\"__metadata__\":{";
    bool first_entry = true;
    for (const auto& [key, value] : *metadata) {  // sorted (the official writer's order is unspecified)
      if (!first_entry) header += ',';
      header += json_string(key, "metadata key") + ':' + json_string(value, "metadata value");
      first_entry = false;
    }
    header += '}';
    first = false;
  }
  std::uint64_t offset = 0;
  for (std::size_t index : file.order) {
    const LayoutTensor& t = tensors[index];
    std::uint64_t bytes = static_cast<std::uint64_t>(t.shape.volume()) * element_size(t.dtype);
    if (!first) header += ',';
    first = false;
    header += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          json_string(t.name, "tensor name"), safetensors_name(t.dtype),
                          fmt::join(t.shape.values(), ","), offset, offset + bytes);
    offset += bytes;
    file.sizes.push_back(bytes);
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');
  file.data_size = offset;
  return file;
}

std::array<std::byte, 8> safetensors_length_prefix(std::uint64_t header_size) {
  std::array<std::byte, 8> out{};
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((header_size >> (8 * i)) & 0xFF);
  return out;
}

}  // namespace io

namespace {

struct PreparedFile {
  std::string header;  // padded JSON header
  std::vector<const TensorToWrite*> order;
  std::vector<std::uint64_t> sizes;
  std::uint64_t data_size = 0;
};

PreparedFile prepare(const std::vector<TensorToWrite>& tensors,
                     const std::optional<std::map<std::string, std::string>>& metadata) {
  std::vector<io::LayoutTensor> entries;
  entries.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) entries.push_back({t.name, t.dtype, t.shape});
  io::SafetensorsLayout layout = io::safetensors_layout(entries, metadata);
  PreparedFile file;
  file.header = std::move(layout.header);
  file.data_size = layout.data_size;
  for (std::size_t i = 0; i < layout.order.size(); ++i) {
    const TensorToWrite& t = tensors[layout.order[i]];
    if (layout.sizes[i] != 0 && t.data == nullptr)
      throw InvalidArgumentError(fmt::format("safetensors: tensor '{}' has no data", t.name));
    file.order.push_back(&t);
    file.sizes.push_back(layout.sizes[i]);
  }
  return file;
}

}  // namespace

std::vector<std::byte> serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                             const std::optional<std::map<std::string, std::string>>& metadata) {
  PreparedFile file = prepare(tensors, metadata);
  std::vector<std::byte> out(8 + file.header.size() + file.data_size);
  auto prefix = io::safetensors_length_prefix(file.header.size());
  std::memcpy(out.data(), prefix.data(), prefix.size());
  std::memcpy(out.data() + 8, file.header.data(), file.header.size());
  std::byte* data = out.data() + 8 + file.header.size();
  for (std::size_t i = 0; i < file.order.size(); ++i) {
    copy_bytes(data, file.order[i]->data, file.sizes[i]);
    data += file.sizes[i];
  }
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::optional<std::map<std::string, std::string>>& metadata) {
  PreparedFile file = prepare(tensors, metadata);
  write_file_atomically(path, [&](PosixFile& out) {
    auto prefix = io::safetensors_length_prefix(file.header.size());
    out.write_all(prefix.data(), prefix.size());
    out.write_all(file.header.data(), file.header.size());
    for (std::size_t i = 0; i < file.order.size(); ++i) out.write_all(file.order[i]->data, file.sizes[i]);
  });
}

}  // namespace tensoracle
