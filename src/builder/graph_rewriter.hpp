// GraphRewriter: replays a graph into a new Network layer by layer, so each builder pass can drop, replace or add
// layers.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::builder {

// Inputs are copied up front; constants are copied on first use (unused ones disappear); layers
// keep their names and output names; finish() marks the source's outputs under their names.
class GraphRewriter {
 public:
  explicit GraphRewriter(const graph::Graph& source);

  const graph::Graph& source() const noexcept { return source_; }
  Network& network() noexcept { return out_; }

  // The new network's tensor for a source tensor (copying a constant on first use).
  Tensor get(std::int32_t source_id);
  // Makes a source tensor stand for `replacement` in every later use.
  void set(std::int32_t source_id, Tensor replacement);

  // Copies a layer with its inputs mapped and records its outputs.
  std::vector<Tensor> copy_layer(const graph::Layer& layer);
  // Adds a layer whose outputs take the source layer's output names (for replacements).
  std::vector<Tensor> add_named_layer(const graph::Layer& like, const std::string& op,
                                      const std::vector<Tensor>& inputs, const Attributes& attrs);

  // Marks every source output (under its name) and returns the network.
  Network finish();

 private:
  const graph::Graph& source_;
  Network out_;
  std::vector<Tensor> map_;
};

}  // namespace tensoracle::builder
