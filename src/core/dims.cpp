// Dims: shapes with dynamic dimensions, their volume and printing.
#include "tensoracle/dims.hpp"

#include <fmt/format.h>

#include "tensoracle/error.hpp"

namespace tensoracle {

Dims::Dims(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
Dims::Dims(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

bool Dims::is_static() const noexcept {
  for (auto d : dims_) {
    if (d < 0) return false;
  }
  return true;
}

std::int64_t Dims::volume() const {
  for (auto d : dims_) {
    if (d == 0) return 0;  // an empty tensor, however large its other dims
  }
  std::int64_t v = 1;
  for (auto d : dims_) {
    if (d < 0)
      throw InvalidArgumentError(fmt::format("shape {} has a dynamic dimension; its volume is unknown", to_string()));
    if (__builtin_mul_overflow(v, d, &v))
      throw InvalidArgumentError(fmt::format("shape {} has more elements than int64 can count", to_string()));
  }
  return v;
}

std::string Dims::to_string() const { return fmt::format("[{}]", fmt::join(dims_, ",")); }

}  // namespace tensoracle
