// WeightPool: weights the builder creates (folded constants, converted precisions), kept alive while a build runs.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "tensoracle/safetensors.hpp"

namespace tensoracle::builder {

class WeightPool {
 public:
  // Stores `bytes` (shape.volume() elements of dtype) and returns a view of them that stays valid
  // for the life of the pool.
  TensorView add(std::string name, DataType dtype, const Dims& shape, std::vector<std::byte> bytes) {
    Owned& owned = owned_.emplace_back();
    owned.info.name = std::move(name);
    owned.info.dtype = dtype;
    owned.info.shape = shape;
    owned.info.data_begin = 0;
    owned.info.data_end = bytes.size();
    owned.bytes = std::move(bytes);
    return TensorView{&owned.info, owned.bytes.data(), nullptr};
  }

 private:
  struct Owned {
    TensorInfo info;
    std::vector<std::byte> bytes;
  };
  std::deque<Owned> owned_;  // a deque: views keep pointing at stable elements
};

}  // namespace tensoracle::builder
