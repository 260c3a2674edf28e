// A graph's constants for builder passes: which tensors are constants, and host copies of them for passes that rewrite
// weights (transposes, reshapes).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.hpp"
#include "tensoracle/host_tensor.hpp"

namespace tensoracle::builder {

// Whether tensor `id` is a constant (an absent optional input, id < 0, is not).
inline bool is_constant(const graph::Graph& g, std::int32_t id) {
  return id >= 0 && g.tensor(id).kind == graph::TensorKind::kConstant;
}

// A quantize by one constant scale (a scalar).
inline bool quantizes_per_tensor(const graph::Graph& g, const graph::Layer& layer) {
  return layer.op == "quantize" && is_constant(g, layer.inputs[1]) && g.tensor(layer.inputs[1]).shape.empty();
}

// The constant `id` (a weight view or inline values) as a host tensor of its dtype and static shape.
HostTensor constant_tensor(const graph::Graph& g, std::int32_t id);

// out[i_perm[0], ..., i_perm[r-1]] = t[i_0, ..., i_{r-1}]: out's axis k is t's axis perm[k] (numpy.transpose).
HostTensor permute(const HostTensor& t, const std::vector<int>& perm);

}  // namespace tensoracle::builder
