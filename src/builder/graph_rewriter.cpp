// GraphRewriter: replays a graph into a new Network, mapping tensors from the source to the copy.
#include "builder/graph_rewriter.hpp"

#include <fmt/format.h>

namespace tensoracle::builder {

GraphRewriter::GraphRewriter(const graph::Graph& source) : source_(source), map_(source.tensors.size()) {
  for (auto id : source_.inputs) {
    const auto& t = source_.tensor(id);
    map_[static_cast<std::size_t>(id)] = out_.add_input(t.name, t.dtype, t.declared_dims);
  }
}

Tensor GraphRewriter::get(std::int32_t source_id) {
  if (source_id < 0) return Tensor{};
  Tensor& slot = map_.at(static_cast<std::size_t>(source_id));
  if (slot.valid()) return slot;
  const auto& t = source_.tensor(source_id);
  if (t.kind != graph::TensorKind::kConstant) {
    throw Error(fmt::format("internal error: tensor '{}' is used before the layer that makes it", t.name));
  }
  if (t.inline_constant) {
    slot = out_.add_small_constant(t.values, t.dtype, source_.static_dims(source_id), t.name);
  } else {
    slot = out_.add_constant(*t.weight, t.name);
  }
  return slot;
}

void GraphRewriter::set(std::int32_t source_id, Tensor replacement) {
  map_.at(static_cast<std::size_t>(source_id)) = replacement;
}

std::vector<Tensor> GraphRewriter::copy_layer(const graph::Layer& layer) {
  std::vector<Tensor> inputs;
  inputs.reserve(layer.inputs.size());
  for (auto id : layer.inputs) inputs.push_back(get(id));
  return add_named_layer(layer, layer.op, inputs, layer.attrs);
}

std::vector<Tensor> GraphRewriter::add_named_layer(const graph::Layer& like, const std::string& op,
                                                   const std::vector<Tensor>& inputs, const Attributes& attrs) {
  std::vector<Tensor> outs = out_.add_layer(op, inputs, attrs, like.name);
  if (outs.size() != like.outputs.size()) {
    throw Error(fmt::format("internal error: layer '{}' replaced by an op with another number of outputs", like.name));
  }
  for (std::size_t i = 0; i < outs.size(); ++i) {
    out_.rename_tensor(outs[i], source_.tensor(like.outputs[i]).name);
    map_[static_cast<std::size_t>(like.outputs[i])] = outs[i];
  }
  return outs;
}

Network GraphRewriter::finish() {
  for (auto id : source_.outputs) {
    Tensor t = get(id);
    out_.mark_output(t, source_.tensor(id).name);
  }
  return std::move(out_);
}

}  // namespace tensoracle::builder
