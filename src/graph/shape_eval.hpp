// Concrete shapes of every tensor of a graph for given input shapes (re-running each layer's checks).
#pragma once

#include <vector>

#include "graph/graph.hpp"

namespace tensoracle::graph {

// input_shapes is indexed like graph.inputs. Returns the shape of every tensor, indexed by tensor
// id. Throws GraphError naming the input or layer that does not fit.
std::vector<Dims> evaluate_shapes(const Graph& graph, const std::vector<Dims>& input_shapes);

}  // namespace tensoracle::graph
