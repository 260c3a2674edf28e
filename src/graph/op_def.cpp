// Attribute reading, shape-function helpers and the op registry.
#include "graph/op_def.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <mutex>

namespace tensoracle::graph {

// ---- AttrReader ----

const AttrValue* AttrReader::find(std::string_view name) const {
  auto it = attrs_->find(std::string(name));
  return it == attrs_->end() ? nullptr : &it->second;
}

void AttrReader::fail(const std::string& message) const {
  throw GraphError(fmt::format("layer '{}' ({}): {}", layer_, op_, message));
}

std::int64_t AttrReader::get_int(std::string_view name, std::optional<std::int64_t> fallback) const {
  const AttrValue* v = find(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(fmt::format("attribute '{}' is required", name));
  }
  if (const auto* i = std::get_if<std::int64_t>(v)) return *i;
  fail(fmt::format("attribute '{}' must be an integer", name));
}

bool AttrReader::get_bool(std::string_view name, std::optional<bool> fallback) const {
  std::int64_t v = get_int(name, fallback ? std::optional<std::int64_t>(*fallback ? 1 : 0) : std::nullopt);
  if (v != 0 && v != 1) fail(fmt::format("attribute '{}' must be a boolean (0 or 1), not {}", name, v));
  return v == 1;
}

double AttrReader::get_float(std::string_view name, std::optional<double> fallback) const {
  const AttrValue* v = find(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(fmt::format("attribute '{}' is required", name));
  }
  if (const auto* d = std::get_if<double>(v)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(v)) return static_cast<double>(*i);
  // The JSON form writes non-finite numbers as these strings.
  if (const auto* t = std::get_if<std::string>(v)) {
    if (*t == "inf") return std::numeric_limits<double>::infinity();
    if (*t == "-inf") return -std::numeric_limits<double>::infinity();
    if (*t == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  fail(fmt::format("attribute '{}' must be a number", name));
}

std::string AttrReader::get_string(std::string_view name, std::optional<std::string> fallback) const {
  const AttrValue* v = find(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(fmt::format("attribute '{}' is required", name));
  }
  if (const auto* s = std::get_if<std::string>(v)) return *s;
  fail(fmt::format("attribute '{}' must be a string", name));
}

std::vector<std::int64_t> AttrReader::get_ints(std::string_view name,
                                               std::optional<std::vector<std::int64_t>> fallback) const {
  const AttrValue* v = find(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(fmt::format("attribute '{}' is required", name));
  }
  if (const auto* l = std::get_if<std::vector<std::int64_t>>(v)) return *l;
  // An empty list parsed from JSON may arrive as a float list.
  if (const auto* f = std::get_if<std::vector<double>>(v); f && f->empty()) return {};
  fail(fmt::format("attribute '{}' must be a list of integers", name));
}

std::vector<double> AttrReader::get_floats(std::string_view name, std::optional<std::vector<double>> fallback) const {
  const AttrValue* v = find(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(fmt::format("attribute '{}' is required", name));
  }
  if (const auto* l = std::get_if<std::vector<double>>(v)) return *l;
  if (const auto* l = std::get_if<std::vector<std::int64_t>>(v)) return {l->begin(), l->end()};
  fail(fmt::format("attribute '{}' must be a list of numbers", name));
}

DataType AttrReader::get_dtype(std::string_view name, std::optional<DataType> fallback) const {
  const AttrValue* v = find(name);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail(fmt::format("attribute '{}' is required", name));
  }
  const auto* s = std::get_if<std::string>(v);
  auto type = s ? data_type_from_string(*s) : std::nullopt;
  if (!type) fail(fmt::format("attribute '{}' must name a data type (f32, f16, bf16, i8, ...)", name));
  return *type;
}

// ---- InferContext ----

const TensorType& InferContext::input(std::size_t i, std::string_view role) const {
  if (!has_input(i)) fail(fmt::format("{} (input {}) is required", role, i));
  return *inputs_[i];
}

std::string InferContext::shape_string(const std::vector<DimId>& shape) const {
  std::vector<std::string> parts;
  for (DimId d : shape) parts.push_back(dims_->to_string(d));
  return fmt::format("[{}]", fmt::join(parts, ","));
}

std::int64_t InferContext::normalize_axis(std::int64_t axis, int rank, const TensorType& tensor) const {
  if (axis < -rank || axis >= std::max(rank, 1)) {
    fail(fmt::format("axis {} is out of range for tensor '{}' of rank {}", axis, tensor.name, rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<DimId> InferContext::broadcast_shapes(const std::vector<const TensorType*>& tensors) {
  int rank = 0;
  for (const auto* t : tensors) rank = std::max(rank, t->rank());
  std::vector<DimId> out(static_cast<std::size_t>(rank), constant(1));
  for (const auto* t : tensors) {
    for (int i = 0; i < t->rank(); ++i) {
      auto& slot = out[static_cast<std::size_t>(rank - t->rank() + i)];
      auto merged = dims_->broadcast(slot, t->shape[static_cast<std::size_t>(i)]);
      if (!merged) {
        std::vector<std::string> shapes;
        for (const auto* u : tensors) shapes.push_back(fmt::format("'{}' {}", u->name, shape_string(u->shape)));
        fail(fmt::format("shapes can't be broadcast together: {}", fmt::join(shapes, ", ")));
      }
      slot = *merged;
    }
  }
  return out;
}

void InferContext::require_equal(DimId a, DimId b, const std::string& what) {
  auto va = value(a), vb = value(b);
  if (va && vb && *va != *vb) fail(fmt::format("{}: {} != {}", what, *va, *vb));
}

void InferContext::require_dtype(const TensorType& t, std::initializer_list<DataType> allowed, std::string_view role) {
  if (std::find(allowed.begin(), allowed.end(), t.dtype) != allowed.end()) return;
  std::vector<std::string_view> names;
  for (DataType d : allowed) names.push_back(to_string(d));
  fail(fmt::format("{} '{}' has dtype {}, expected one of {}", role, t.name, to_string(t.dtype),
                   fmt::join(names, ", ")));
}

void InferContext::require_rank(const TensorType& t, int rank, std::string_view role) {
  if (t.rank() != rank) {
    fail(fmt::format("{} '{}' must have rank {}, but has shape {}", role, t.name, rank, shape_string(t.shape)));
  }
}

void InferContext::require_same_dtype(const TensorType& a, const TensorType& b) {
  if (a.dtype != b.dtype) {
    fail(fmt::format("inputs '{}' ({}) and '{}' ({}) must have the same dtype; add a cast", a.name, to_string(a.dtype),
                     b.name, to_string(b.dtype)));
  }
}

// ---- registry ----

namespace {

const std::vector<OpDef>& registry() {
  static const std::vector<OpDef> ops = [] {
    std::vector<OpDef> all;
    register_elementwise_ops(all);
    register_linear_algebra_ops(all);
    register_convolution_ops(all);
    register_normalization_ops(all);
    register_reduction_ops(all);
    register_data_movement_ops(all);
    register_transformer_ops(all);
    register_quantization_ops(all);
    register_plugin_ops(all);
    std::sort(all.begin(), all.end(), [](const OpDef& a, const OpDef& b) { return a.name < b.name; });
    return all;
  }();
  return ops;
}

}  // namespace

const OpDef* find_op(std::string_view name) {
  const auto& ops = registry();
  auto it =
      std::lower_bound(ops.begin(), ops.end(), name, [](const OpDef& d, std::string_view n) { return d.name < n; });
  return (it != ops.end() && it->name == name) ? &*it : nullptr;
}

std::vector<const OpDef*> all_ops() {
  std::vector<const OpDef*> out;
  for (const auto& d : registry()) out.push_back(&d);
  return out;
}

}  // namespace tensoracle::graph
