// Graph helpers: input names and static dims of tensors.
#include "graph/graph.hpp"

namespace tensoracle::graph {

std::vector<std::string> Graph::input_names() const {
  std::vector<std::string> names;
  for (auto id : inputs) names.push_back(tensor(id).name);
  return names;
}

Dims Graph::static_dims(std::int32_t id) const {
  std::vector<std::int64_t> out;
  for (DimId d : tensor(id).shape) out.push_back(dims.value(d).value_or(Dims::kDynamic));
  return Dims(std::move(out));
}

}  // namespace tensoracle::graph
