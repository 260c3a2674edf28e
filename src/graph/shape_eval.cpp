// evaluate_shapes: runs every layer's shape function on constant dims, and cross-checks the symbolic expressions.
#include "graph/shape_eval.hpp"

#include <fmt/format.h>

#include "graph/op_def.hpp"

namespace tensoracle::graph {

std::vector<Dims> evaluate_shapes(const Graph& graph, const std::vector<Dims>& input_shapes) {
  if (input_shapes.size() != graph.inputs.size()) {
    throw GraphError(
        fmt::format("{} input shapes given, the network has {} inputs", input_shapes.size(), graph.inputs.size()));
  }
  DimPool scratch;
  std::vector<std::vector<DimId>> concrete(graph.tensors.size());
  std::vector<Dims> result(graph.tensors.size());
  auto set = [&](std::int32_t id, const Dims& dims) {
    result[static_cast<std::size_t>(id)] = dims;
    auto& c = concrete[static_cast<std::size_t>(id)];
    c.clear();
    for (auto d : dims) c.push_back(scratch.constant(d));
  };
  for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
    const TensorData& t = graph.tensor(graph.inputs[i]);
    const Dims& given = input_shapes[i];
    if (given.rank() != t.declared_dims.rank()) {
      throw GraphError(fmt::format("input '{}': shape {} has rank {}, the network declares {} (rank {})", t.name,
                                   given.to_string(), given.rank(), t.declared_dims.to_string(),
                                   t.declared_dims.rank()));
    }
    for (int a = 0; a < given.rank(); ++a) {
      if (given[a] < 0)
        throw GraphError(fmt::format("input '{}': shape {} has a negative dimension", t.name, given.to_string()));
      if (t.declared_dims[a] >= 0 && t.declared_dims[a] != given[a]) {
        throw GraphError(fmt::format("input '{}': shape {} does not match the declared {} at axis {}", t.name,
                                     given.to_string(), t.declared_dims.to_string(), a));
      }
    }
    set(graph.inputs[i], given);
  }
  for (std::size_t id = 0; id < graph.tensors.size(); ++id) {
    if (graph.tensors[id].kind == TensorKind::kConstant)
      set(static_cast<std::int32_t>(id), graph.static_dims(static_cast<std::int32_t>(id)));
  }
  for (const Layer& layer : graph.layers) {
    std::vector<std::optional<TensorType>> inputs;
    for (auto id : layer.inputs) {
      if (id < 0) {
        inputs.emplace_back(std::nullopt);
      } else {
        const TensorData& t = graph.tensor(id);
        inputs.emplace_back(TensorType{t.name, t.dtype, concrete[static_cast<std::size_t>(id)]});
      }
    }
    InferContext ctx(layer.attrs, layer.name, layer.op, std::move(inputs), scratch);
    std::vector<OutputType> outputs = layer.def->infer(ctx);
    if (outputs.size() != layer.outputs.size()) {
      throw Error(fmt::format("internal error: layer '{}' ({}) produced {} outputs for concrete shapes, {} when built",
                              layer.name, layer.op, outputs.size(), layer.outputs.size()));
    }
    for (std::size_t o = 0; o < outputs.size(); ++o) {
      std::vector<std::int64_t> dims;
      for (DimId d : outputs[o].shape) {
        auto v = scratch.value(d);
        if (!v)
          throw Error(
              fmt::format("internal error: layer '{}' ({}) made a symbolic dim from constants", layer.name, layer.op));
        if (*v < 0) ctx.fail(fmt::format("output {} would have a negative dimension {}", o, *v));
        dims.push_back(*v);
      }
      const std::int32_t out_id = layer.outputs[o];
      const TensorData& symbolic = graph.tensor(out_id);
      // The symbolic expression must agree with the concrete shape function.
      if (symbolic.shape.size() != dims.size()) {
        throw Error(fmt::format("internal error: layer '{}' ({}) output rank differs between build and evaluation",
                                layer.name, layer.op));
      }
      for (std::size_t a = 0; a < dims.size(); ++a) {
        std::int64_t expected = 0;
        try {
          expected = graph.dims.evaluate(symbolic.shape[a], input_shapes);
        } catch (const DimEvaluationError& e) {
          ctx.fail(e.message);
        }
        if (expected != dims[a]) {
          throw Error(fmt::format(
              "internal error: layer '{}' ({}) output {} axis {}: expression {} = {} but shape function gives {}",
              layer.name, layer.op, o, a, graph.dims.to_string(symbolic.shape[a], graph.input_names()), expected,
              dims[a]));
        }
      }
      set(out_id, Dims(std::move(dims)));
    }
  }
  return result;
}

}  // namespace tensoracle::graph
