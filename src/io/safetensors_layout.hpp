// The layout the official safetensors writer gives a set of tensors (order, header, offsets), for writers that
// stream each tensor's bytes from elsewhere instead of holding them all in memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"

namespace tensoracle::io {

struct LayoutTensor {
  const std::string& name;
  DataType dtype;
  const Dims& shape;
};

struct SafetensorsLayout {
  std::string header;                // the JSON header, padded with spaces to a multiple of 8
  std::vector<std::size_t> order;    // indices into the tensors given, in file order
  std::vector<std::uint64_t> sizes;  // byte size of each tensor, in file order
  std::uint64_t data_size = 0;
};

// The same checks and order as serialize_safetensors (dtype rank, then name); InvalidArgumentError for duplicate
// or invalid names and dynamic shapes. A file is the 8-byte length prefix, the header, then the tensors' bytes in
// `order`.
SafetensorsLayout safetensors_layout(const std::vector<LayoutTensor>& tensors,
                                     const std::optional<std::map<std::string, std::string>>& metadata);
std::array<std::byte, 8> safetensors_length_prefix(std::uint64_t header_size);

}  // namespace tensoracle::io
