// The checks every executor makes of the input tensors a caller hands it (names, dtypes, byte counts, shapes).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "tensoracle/host_tensor.hpp"

namespace tensoracle::graph {

// The shape of every tensor for the given inputs, indexed by tensor id (evaluate_shapes), after checking that every
// input of the graph is given with its declared dtype and the bytes its shape needs and that no other name is given.
// Throws InvalidArgumentError naming the input, or GraphError naming the input or layer that does not fit (a
// negative dimension among them).
std::vector<Dims> checked_shapes(const Graph& graph, const std::map<std::string, HostTensor>& inputs);

}  // namespace tensoracle::graph
