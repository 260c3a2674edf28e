// Dims: a tensor shape whose dimensions may be dynamic (-1) until concrete shapes are known.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tensoracle {

class Dims {
 public:
  static constexpr std::int64_t kDynamic = -1;

  Dims() = default;
  Dims(std::initializer_list<std::int64_t> dims);
  explicit Dims(std::vector<std::int64_t> dims);

  // Number of dimensions; 0 for a scalar.
  int rank() const noexcept { return static_cast<int>(dims_.size()); }
  std::int64_t operator[](int i) const { return dims_.at(static_cast<std::size_t>(i)); }
  std::int64_t& operator[](int i) { return dims_.at(static_cast<std::size_t>(i)); }
  const std::vector<std::int64_t>& values() const noexcept { return dims_; }
  auto begin() const noexcept { return dims_.begin(); }
  auto end() const noexcept { return dims_.end(); }

  // True when no dimension is dynamic.
  bool is_static() const noexcept;
  // Product of the dimensions (1 for a scalar). Throws InvalidArgumentError when a dimension is
  // dynamic or the product overflows int64.
  std::int64_t volume() const;
  // "[2,-1,768]"
  std::string to_string() const;

  friend bool operator==(const Dims& a, const Dims& b) noexcept { return a.dims_ == b.dims_; }
  friend bool operator!=(const Dims& a, const Dims& b) noexcept { return !(a == b); }

 private:
  std::vector<std::int64_t> dims_;
};

}  // namespace tensoracle
