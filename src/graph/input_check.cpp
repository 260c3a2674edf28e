// checked_shapes: the input checks shared by the CPU reference and the calibration probe (input_check.hpp).
#include "graph/input_check.hpp"

#include <fmt/format.h>

#include "graph/shape_eval.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::graph {

std::vector<Dims> checked_shapes(const Graph& graph, const std::map<std::string, HostTensor>& inputs) {
  std::vector<Dims> input_shapes;
  for (auto id : graph.inputs) {
    const auto& t = graph.tensor(id);
    auto it = inputs.find(t.name);
    if (it == inputs.end())
      throw InvalidArgumentError(fmt::format("input '{}' is missing; the network needs every input", t.name));
    const HostTensor& given = it->second;
    if (given.dtype != t.dtype) {
      throw InvalidArgumentError(fmt::format("input '{}' has dtype {}, the network declares {}", t.name,
                                             to_string(given.dtype), to_string(t.dtype)));
    }
    if (given.shape.is_static() && given.bytes.size() != given.size() * element_size(given.dtype)) {
      throw InvalidArgumentError(fmt::format("input '{}' holds {} bytes, its shape {} needs {}", t.name,
                                             given.bytes.size(), given.shape.to_string(),
                                             given.size() * element_size(given.dtype)));
    }
    input_shapes.push_back(given.shape);
  }
  for (const auto& [name, tensor] : inputs) {
    bool known = false;
    for (auto id : graph.inputs) known = known || graph.tensor(id).name == name;
    if (!known) throw InvalidArgumentError(fmt::format("'{}' is not an input of the network", name));
  }
  return evaluate_shapes(graph, input_shapes);
}

}  // namespace tensoracle::graph
