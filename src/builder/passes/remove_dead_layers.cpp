// Builder pass: removes layers that no network output depends on.
#include <vector>

#include "builder/graph_rewriter.hpp"
#include "builder/passes/passes.hpp"
#include "graph/graph.hpp"

namespace tensoracle::builder {

Network remove_dead_layers(const Network& network) {
  const graph::Graph& g = graph::graph_of(network);
  std::vector<bool> needed(g.tensors.size(), false);
  for (auto id : g.outputs) needed[static_cast<std::size_t>(id)] = true;
  std::vector<bool> live(g.layers.size(), false);
  for (std::size_t l = g.layers.size(); l-- > 0;) {
    const auto& layer = g.layers[l];
    for (auto id : layer.outputs) live[l] = live[l] || needed[static_cast<std::size_t>(id)];
    if (!live[l]) continue;
    for (auto id : layer.inputs) {
      if (id >= 0) needed[static_cast<std::size_t>(id)] = true;
    }
  }
  GraphRewriter rewriter(g);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    if (live[l]) rewriter.copy_layer(g.layers[l]);
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
