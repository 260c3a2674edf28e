// Who reads each tensor of a graph (layer and input position) and which tensors are network outputs: what the
// builder's fusion passes ask before they absorb a layer into another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "graph/graph.hpp"

namespace tensoracle::builder {

struct TensorUse {
  std::size_t layer;
  std::size_t position;
};

struct TensorUses {
  std::vector<std::vector<TensorUse>> readers;  // per tensor, in layer order
  std::vector<bool> output;                     // per tensor: a network output

  explicit TensorUses(const graph::Graph& g) : readers(g.tensors.size()), output(g.tensors.size(), false) {
    for (std::size_t l = 0; l < g.layers.size(); ++l) {
      const auto& inputs = g.layers[l].inputs;
      for (std::size_t p = 0; p < inputs.size(); ++p) {
        if (inputs[p] >= 0) readers[static_cast<std::size_t>(inputs[p])].push_back({l, p});
      }
    }
    for (auto id : g.outputs) output[static_cast<std::size_t>(id)] = true;
  }

  // The one layer that reads `id`, when exactly one does (once) and it is not a network output.
  const TensorUse* only_reader(std::int32_t id) const {
    const auto& r = readers[static_cast<std::size_t>(id)];
    if (r.size() != 1 || output[static_cast<std::size_t>(id)]) return nullptr;
    return &r[0];
  }
  // Whether exactly `layer` reads `id`, once, and it is not a network output.
  bool only_read_by(std::int32_t id, std::size_t layer) const {
    const TensorUse* use = only_reader(id);
    return use != nullptr && use->layer == layer;
  }
};

// The layer of op `op` that produces `id`, when one does.
inline const graph::Layer* producer_of(const graph::Graph& g, std::int32_t id, std::string_view op) {
  if (id < 0 || g.tensor(id).kind != graph::TensorKind::kLayerOutput) return nullptr;
  const graph::Layer& layer = g.layers[static_cast<std::size_t>(g.tensor(id).producer)];
  return layer.op == op ? &layer : nullptr;
}

}  // namespace tensoracle::builder
