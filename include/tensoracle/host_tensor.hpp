// HostTensor: a tensor in host memory (dtype, shape, owned little-endian bytes).
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {

struct HostTensor {
  DataType dtype = DataType::kF32;
  Dims shape;
  std::vector<std::byte> bytes;

  HostTensor() = default;
  // Zero-filled tensor of a static shape.
  HostTensor(DataType type, const Dims& dims)
      : dtype(type), shape(dims), bytes(static_cast<std::size_t>(dims.volume()) * element_size(type)) {}

  // A copy of a safetensors tensor.
  static HostTensor from_view(const TensorView& view) {
    HostTensor t(view.dtype(), view.shape());
    if (!t.bytes.empty()) std::memcpy(t.bytes.data(), view.data, t.bytes.size());
    return t;
  }

  std::size_t size() const { return static_cast<std::size_t>(shape.volume()); }
  // Typed access; T must match the element size of dtype (uint16_t for f16/bf16, uint8_t for f8).
  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  TensorToWrite to_write(const std::string& name) const { return TensorToWrite{name, dtype, shape, bytes.data()}; }
};

}  // namespace tensoracle
