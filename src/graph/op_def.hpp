// OpDef: what each op is (inputs, attributes, output dtypes and shapes), and the context its shape function sees.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/dim_pool.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::graph {

// Reads a layer's attributes with type checks; errors name the layer.
class AttrReader {
 public:
  AttrReader(const Attributes& attrs, std::string layer_name, std::string op)
      : attrs_(&attrs), layer_(std::move(layer_name)), op_(std::move(op)) {}

  bool has(std::string_view name) const { return attrs_->find(std::string(name)) != attrs_->end(); }
  std::int64_t get_int(std::string_view name, std::optional<std::int64_t> fallback = std::nullopt) const;
  bool get_bool(std::string_view name, std::optional<bool> fallback = std::nullopt) const;
  // Accepts integers too.
  double get_float(std::string_view name, std::optional<double> fallback = std::nullopt) const;
  std::string get_string(std::string_view name, std::optional<std::string> fallback = std::nullopt) const;
  std::vector<std::int64_t> get_ints(std::string_view name,
                                     std::optional<std::vector<std::int64_t>> fallback = std::nullopt) const;
  std::vector<double> get_floats(std::string_view name,
                                 std::optional<std::vector<double>> fallback = std::nullopt) const;
  DataType get_dtype(std::string_view name, std::optional<DataType> fallback = std::nullopt) const;

  // Throws GraphError "layer 'NAME' (OP): MESSAGE".
  [[noreturn]] void fail(const std::string& message) const;
  const std::string& layer_name() const { return layer_; }
  const std::string& op() const { return op_; }
  const Attributes& attrs() const { return *attrs_; }

 private:
  const AttrValue* find(std::string_view name) const;
  const Attributes* attrs_;
  std::string layer_;
  std::string op_;
};

// An input as the shape function sees it.
struct TensorType {
  std::string name;
  DataType dtype = DataType::kF32;
  std::vector<DimId> shape;
  int rank() const { return static_cast<int>(shape.size()); }
};

struct OutputType {
  DataType dtype = DataType::kF32;
  std::vector<DimId> shape;
};

// What an op's shape function works with. It runs twice: when the layer is added (input dims are
// expressions) and when concrete input shapes are evaluated (every dim is a constant), so every
// check written against constant dims is made in both.
class InferContext : public AttrReader {
 public:
  InferContext(const Attributes& attrs, std::string layer_name, std::string op,
               std::vector<std::optional<TensorType>> inputs, DimPool& dims)
      : AttrReader(attrs, std::move(layer_name), std::move(op)), inputs_(std::move(inputs)), dims_(&dims) {}

  std::size_t num_inputs() const { return inputs_.size(); }
  bool has_input(std::size_t i) const { return i < inputs_.size() && inputs_[i].has_value(); }
  // The i-th input; fails naming `role` when it is absent.
  const TensorType& input(std::size_t i, std::string_view role = "input") const;
  DimPool& dims() { return *dims_; }
  DimId constant(std::int64_t v) { return dims_->constant(v); }
  std::optional<std::int64_t> value(DimId d) const { return dims_->value(d); }
  std::string dim_string(DimId d) const { return dims_->to_string(d); }
  std::string shape_string(const std::vector<DimId>& shape) const;

  // Normalizes a possibly negative axis for a rank; fails naming the tensor when out of range.
  std::int64_t normalize_axis(std::int64_t axis, int rank, const TensorType& tensor) const;
  // NumPy broadcasting of several shapes; fails naming the tensors on a mismatch.
  std::vector<DimId> broadcast_shapes(const std::vector<const TensorType*>& tensors);
  // Fails unless the two dims may be equal (equal expressions, or a symbolic one).
  void require_equal(DimId a, DimId b, const std::string& what);
  // Fails unless dtype is one of `allowed`.
  void require_dtype(const TensorType& t, std::initializer_list<DataType> allowed, std::string_view role);
  void require_rank(const TensorType& t, int rank, std::string_view role);
  void require_same_dtype(const TensorType& a, const TensorType& b);

 private:
  std::vector<std::optional<TensorType>> inputs_;
  DimPool* dims_;
};

using InferFunction = std::vector<OutputType> (*)(InferContext& ctx);

struct OpDef {
  std::string_view name;
  int min_inputs = 1;
  int max_inputs = 1;                        // -1: any number (concat)
  std::vector<std::string_view> attributes;  // allowed attribute names; others are rejected
  InferFunction infer = nullptr;
  std::string_view summary;  // one line for docs and messages
};

// Whether an attribute name is allowed for the op: one of its `attributes`, or a plugin layer's field ("f:NAME").
bool allows_attribute(const OpDef& def, std::string_view key);

// Float dtypes the layers compute on.
inline constexpr std::initializer_list<DataType> kFloatTypes = {DataType::kF32, DataType::kF16, DataType::kBF16,
                                                                DataType::kF64};

// The op registry: every op of every family, registered explicitly (no static initializers).
const OpDef* find_op(std::string_view name);
std::vector<const OpDef*> all_ops();

// Each family registers its ops; called once by the registry.
void register_elementwise_ops(std::vector<OpDef>& ops);     // ops/elementwise.cpp
void register_linear_algebra_ops(std::vector<OpDef>& ops);  // ops/linear_algebra.cpp: matmul, linear
void register_convolution_ops(std::vector<OpDef>& ops);     // ops/convolution.cpp: conv, pooling, resize
void register_normalization_ops(std::vector<OpDef>& ops);   // ops/normalization.cpp: softmax, norms
void register_reduction_ops(std::vector<OpDef>& ops);       // ops/reduction.cpp: reduce, arg, top-k
void register_data_movement_ops(std::vector<OpDef>& ops);   // ops/data_movement.cpp
void register_transformer_ops(std::vector<OpDef>& ops);     // ops/transformer.cpp: attention, rope
void register_quantization_ops(std::vector<OpDef>& ops);    // ops/quantization.cpp
void register_plugin_ops(std::vector<OpDef>& ops);          // ops/plugin.cpp: layers a plugin library computes

}  // namespace tensoracle::graph
