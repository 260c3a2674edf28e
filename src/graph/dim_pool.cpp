// DimPool: construction with simplification, evaluation for concrete shapes, and printing.
#include "graph/dim_pool.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace tensoracle::graph {
namespace {

std::int64_t floor_div_values(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::int64_t ceil_div_values(std::int64_t a, std::int64_t b) { return -floor_div_values(-a, b); }

}  // namespace

DimId DimPool::make(DimOp op, std::int64_t value, std::int32_t a, std::int32_t b) {
  // Commutative operations are stored with ordered operands so equal expressions share an id.
  if ((op == DimOp::kAdd || op == DimOp::kMul || op == DimOp::kMax || op == DimOp::kMin || op == DimOp::kBroadcast) &&
      a > b) {
    std::swap(a, b);
  }
  auto key = std::make_tuple(static_cast<int>(op), value, a, b);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  DimId id = static_cast<DimId>(nodes_.size());
  nodes_.push_back(DimNode{op, value, a, b});
  index_.emplace(key, id);
  return id;
}

DimId DimPool::constant(std::int64_t value) { return make(DimOp::kConst, value, -1, -1); }
DimId DimPool::symbol(int input_index, int axis) { return make(DimOp::kSymbol, 0, input_index, axis); }

std::optional<std::int64_t> DimPool::value(DimId id) const {
  const DimNode& n = node(id);
  if (n.op == DimOp::kConst) return n.value;
  return std::nullopt;
}

DimId DimPool::add(DimId a, DimId b) {
  auto va = value(a), vb = value(b);
  if (va && vb) return constant(*va + *vb);
  if (va == 0) return b;
  if (vb == 0) return a;
  return make(DimOp::kAdd, 0, a, b);
}

DimId DimPool::sub(DimId a, DimId b) {
  auto va = value(a), vb = value(b);
  if (va && vb) return constant(*va - *vb);
  if (vb == 0) return a;
  if (a == b) return constant(0);
  return make(DimOp::kSub, 0, a, b);
}

DimId DimPool::mul(DimId a, DimId b) {
  auto va = value(a), vb = value(b);
  if (va && vb) return constant(*va * *vb);
  if (va == 1) return b;
  if (vb == 1) return a;
  if (va == 0 || vb == 0) return constant(0);
  return make(DimOp::kMul, 0, a, b);
}

DimId DimPool::floor_div(DimId a, DimId b) {
  auto va = value(a), vb = value(b);
  if (va && vb && *vb != 0) return constant(floor_div_values(*va, *vb));
  if (vb == 1) return a;
  if (a == b) return constant(1);
  return make(DimOp::kFloorDiv, 0, a, b);
}

DimId DimPool::ceil_div(DimId a, DimId b) {
  auto va = value(a), vb = value(b);
  if (va && vb && *vb != 0) return constant(ceil_div_values(*va, *vb));
  if (vb == 1) return a;
  return make(DimOp::kCeilDiv, 0, a, b);
}

DimId DimPool::max(DimId a, DimId b) {
  auto va = value(a), vb = value(b);
  if (va && vb) return constant(std::max(*va, *vb));
  if (a == b) return a;
  return make(DimOp::kMax, 0, a, b);
}

DimId DimPool::min(DimId a, DimId b) {
  auto va = value(a), vb = value(b);
  if (va && vb) return constant(std::min(*va, *vb));
  if (a == b) return a;
  return make(DimOp::kMin, 0, a, b);
}

std::optional<DimId> DimPool::broadcast(DimId a, DimId b) {
  auto va = value(a), vb = value(b);
  if (a == b) return a;
  if (va == 1) return b;
  if (vb == 1) return a;
  if (va && vb) return std::nullopt;  // two different constants, neither 1
  return make(DimOp::kBroadcast, 0, a, b);
}

std::int64_t DimPool::evaluate(DimId id, const std::vector<Dims>& input_shapes) const {
  const DimNode& n = node(id);
  switch (n.op) {
    case DimOp::kConst: return n.value;
    case DimOp::kSymbol: {
      if (n.a < 0 || static_cast<std::size_t>(n.a) >= input_shapes.size() || n.b >= input_shapes[n.a].rank()) {
        throw DimEvaluationError{fmt::format("dimension {} of input {} is not given", n.b, n.a)};
      }
      return input_shapes[static_cast<std::size_t>(n.a)][n.b];
    }
    default: break;
  }
  const std::int64_t a = evaluate(n.a, input_shapes);
  const std::int64_t b = evaluate(n.b, input_shapes);
  switch (n.op) {
    case DimOp::kAdd: return a + b;
    case DimOp::kSub: return a - b;
    case DimOp::kMul: return a * b;
    case DimOp::kFloorDiv:
      if (b == 0) throw DimEvaluationError{"division by zero in a shape expression"};
      return floor_div_values(a, b);
    case DimOp::kCeilDiv:
      if (b == 0) throw DimEvaluationError{"division by zero in a shape expression"};
      return ceil_div_values(a, b);
    case DimOp::kMax: return std::max(a, b);
    case DimOp::kMin: return std::min(a, b);
    case DimOp::kBroadcast:
      if (a == b || b == 1) return a;
      if (a == 1) return b;
      throw DimEvaluationError{fmt::format("sizes {} and {} can't be broadcast together", a, b)};
    default: return 0;
  }
}

std::string DimPool::to_string(DimId id, const std::vector<std::string>& input_names) const {
  const DimNode& n = node(id);
  auto sub_expr = [&](DimId x) {
    const DimNode& c = node(x);
    std::string s = to_string(x, input_names);
    return (c.op == DimOp::kConst || c.op == DimOp::kSymbol || c.op == DimOp::kMax || c.op == DimOp::kMin ||
            c.op == DimOp::kBroadcast)
               ? s
               : "(" + s + ")";
  };
  switch (n.op) {
    case DimOp::kConst: return std::to_string(n.value);
    case DimOp::kSymbol: {
      std::string input = static_cast<std::size_t>(n.a) < input_names.size()
                              ? input_names[static_cast<std::size_t>(n.a)]
                              : fmt::format("in{}", n.a);
      return fmt::format("{}.{}", input, n.b);
    }
    case DimOp::kAdd: return fmt::format("{} + {}", sub_expr(n.a), sub_expr(n.b));
    case DimOp::kSub: return fmt::format("{} - {}", sub_expr(n.a), sub_expr(n.b));
    case DimOp::kMul: return fmt::format("{} * {}", sub_expr(n.a), sub_expr(n.b));
    case DimOp::kFloorDiv: return fmt::format("{} // {}", sub_expr(n.a), sub_expr(n.b));
    case DimOp::kCeilDiv: return fmt::format("ceil({} / {})", to_string(n.a, input_names), to_string(n.b, input_names));
    case DimOp::kMax: return fmt::format("max({}, {})", to_string(n.a, input_names), to_string(n.b, input_names));
    case DimOp::kMin: return fmt::format("min({}, {})", to_string(n.a, input_names), to_string(n.b, input_names));
    case DimOp::kBroadcast:
      return fmt::format("broadcast({}, {})", to_string(n.a, input_names), to_string(n.b, input_names));
  }
  return "?";
}

}  // namespace tensoracle::graph
