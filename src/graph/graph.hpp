// The internal graph IR behind tensoracle::Network: tensors with symbolic shapes, layers in topological order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/dim_pool.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::graph {

struct OpDef;

enum class TensorKind : std::uint8_t { kInput, kConstant, kLayerOutput };

struct TensorData {
  std::string name;
  DataType dtype = DataType::kF32;
  std::vector<DimId> shape;  // ids in Graph::dims
  TensorKind kind = TensorKind::kLayerOutput;
  std::int32_t producer = -1;     // layer index for kLayerOutput
  std::int32_t input_index = -1;  // position among the graph inputs for kInput
  Dims declared_dims;             // kInput: as declared, -1 for dynamic

  // kConstant: either a weight (zero-copy view) or small inline values.
  std::optional<TensorView> weight;
  std::string weight_name;  // name of the tensor in its file
  std::string weight_file;  // path as recorded in the JSON form
  std::vector<double> values;
  bool inline_constant = false;
};

struct Layer {
  std::string name;
  std::string op;
  const OpDef* def = nullptr;
  std::vector<std::int32_t> inputs;  // tensor ids; -1 for an absent optional input
  std::vector<std::int32_t> outputs;
  Attributes attrs;
};

struct Graph {
  DimPool dims;
  std::vector<TensorData> tensors;
  std::vector<Layer> layers;  // in the order added, which is a topological order
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> outputs;
  std::map<std::string, std::int32_t, std::less<>> tensor_by_name;
  std::map<std::string, std::int32_t, std::less<>> layer_by_name;
  std::map<std::string, int, std::less<>> op_counters;  // for default layer names

  const TensorData& tensor(std::int32_t id) const { return tensors.at(static_cast<std::size_t>(id)); }
  TensorData& tensor(std::int32_t id) { return tensors.at(static_cast<std::size_t>(id)); }
  std::vector<std::string> input_names() const;
  // Static dims (-1 where symbolic) of a tensor.
  Dims static_dims(std::int32_t id) const;
};

// The library's access to the graph a Network keeps private (the builder, the executors, the engine reader).
struct NetworkAccess {
  static const Graph& graph(const Network& network) noexcept { return *network.graph_; }
  static Graph& mutable_graph(Network& network) noexcept { return *network.graph_; }
};

// The graph of a network.
inline const Graph& graph_of(const Network& network) noexcept { return NetworkAccess::graph(network); }

}  // namespace tensoracle::graph
