// TensorRef: a non-owning view of a tensor in host memory (dtype, shape, bytes) that CPU kernels read and write.
#pragma once

#include <cstddef>
#include <span>

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"
#include "tensoracle/host_tensor.hpp"

namespace tensoracle::cpu {

// Kernels see their inputs and outputs through views, so the same kernels run on HostTensors (the
// reference executor) and on an engine's activation arena and caller buffers (CPU engines).
struct TensorRef {
  DataType dtype = DataType::kF32;
  Dims shape;
  std::span<std::byte> bytes;

  TensorRef() = default;
  TensorRef(DataType type, Dims dims, std::byte* data)
      : dtype(type),
        shape(std::move(dims)),
        bytes(data, static_cast<std::size_t>(shape.volume()) * element_size(type)) {}
  // A view of a HostTensor (which must outlive it).
  TensorRef(HostTensor& t)  // NOLINT(google-explicit-constructor): views of host tensors are used everywhere
      : dtype(t.dtype), shape(t.shape), bytes(t.bytes.data(), t.bytes.size()) {}

  std::size_t size() const { return static_cast<std::size_t>(shape.volume()); }
  // Typed access; T must match the element size of dtype (uint16_t for f16/bf16, uint8_t for f8).
  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(bytes.data());
  }
};

}  // namespace tensoracle::cpu
