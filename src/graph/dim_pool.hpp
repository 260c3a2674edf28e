// DimPool: hash-consed integer expressions over input dimensions, the symbolic shapes of a graph.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tensoracle/dims.hpp"

namespace tensoracle::graph {

using DimId = std::int32_t;

enum class DimOp : std::uint8_t { kConst, kSymbol, kAdd, kSub, kMul, kFloorDiv, kCeilDiv, kMax, kMin, kBroadcast };

struct DimNode {
  DimOp op = DimOp::kConst;
  std::int64_t value = 0;  // kConst: the value
  std::int32_t a = -1;     // operands; kSymbol: input index
  std::int32_t b = -1;     // kSymbol: axis
};

// A dimension failed a check while being evaluated (broadcast mismatch, division by zero,
// negative size). The caller adds the layer's name.
struct DimEvaluationError {
  std::string message;
};

// Expressions are simplified as they are made: operations on constants fold, x+0, x*1, x/1,
// max(x,x), broadcast(x,1) and broadcast(x,x) reduce to x. Equal expressions get equal ids.
class DimPool {
 public:
  DimId constant(std::int64_t value);
  DimId symbol(int input_index, int axis);
  DimId add(DimId a, DimId b);
  DimId sub(DimId a, DimId b);
  DimId mul(DimId a, DimId b);
  DimId floor_div(DimId a, DimId b);
  DimId ceil_div(DimId a, DimId b);
  DimId max(DimId a, DimId b);
  DimId min(DimId a, DimId b);
  // NumPy broadcasting of two sizes: equal, or one of them is 1. With constants the check is made
  // now (nullopt when they can't broadcast); otherwise at evaluation.
  std::optional<DimId> broadcast(DimId a, DimId b);

  const DimNode& node(DimId id) const { return nodes_.at(static_cast<std::size_t>(id)); }
  // The value when the expression is a constant.
  std::optional<std::int64_t> value(DimId id) const;
  // Evaluates with concrete input shapes (indexed like the graph's inputs). Throws
  // DimEvaluationError when a runtime check fails.
  std::int64_t evaluate(DimId id, const std::vector<Dims>& input_shapes) const;
  // "x.0 * 12", with input names given by `input_names` (falls back to "in<i>").
  std::string to_string(DimId id, const std::vector<std::string>& input_names = {}) const;
  std::size_t size() const noexcept { return nodes_.size(); }

 private:
  DimId make(DimOp op, std::int64_t value, std::int32_t a, std::int32_t b);
  std::vector<DimNode> nodes_;
  std::map<std::tuple<int, std::int64_t, std::int32_t, std::int32_t>, DimId> index_;
};

}  // namespace tensoracle::graph
