// Builder pass: evaluates layers whose inputs are all constants at build time (CPU reference kernels).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"
#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "builder/passes/passes.hpp"
#include "graph/graph.hpp"

namespace tensoracle::builder {

Network fold_constants(const Network& network, WeightPool& pool, std::size_t max_bytes,
                       const std::vector<std::string>& keep_ops) {
  const graph::Graph& g = graph::graph_of(network);
  std::vector<bool> is_output(g.tensors.size(), false);
  for (auto id : g.outputs) is_output[static_cast<std::size_t>(id)] = true;
  // Values of folded layer outputs (constants of the source are read when needed).
  std::vector<std::optional<HostTensor>> folded(g.tensors.size());
  auto is_constant = [&](std::int32_t id) {
    return id < 0 || g.tensor(id).kind == graph::TensorKind::kConstant || folded[static_cast<std::size_t>(id)];
  };

  GraphRewriter rewriter(g);
  for (const auto& layer : g.layers) {
    // Plugin layers are never folded: the plugin decides where it runs, and its host code may differ from its kernels.
    bool foldable = layer.op != "plugin" && std::find(keep_ops.begin(), keep_ops.end(), layer.op) == keep_ops.end() &&
                    !layer.inputs.empty() && std::all_of(layer.inputs.begin(), layer.inputs.end(), is_constant);
    for (auto id : layer.outputs) {
      const Dims dims = g.static_dims(id);
      foldable = foldable && !is_output[static_cast<std::size_t>(id)] && dims.is_static() &&
                 static_cast<std::size_t>(dims.volume()) * element_size(g.tensor(id).dtype) <= max_bytes;
    }
    cpu::Kernel kernel = foldable ? cpu::find_kernel(layer.op) : nullptr;
    if (kernel == nullptr) {
      rewriter.copy_layer(layer);
      continue;
    }
    std::vector<HostTensor> in_values;
    in_values.reserve(layer.inputs.size());
    for (auto id : layer.inputs) {
      if (id < 0) {
        in_values.emplace_back();
      } else if (folded[static_cast<std::size_t>(id)]) {
        in_values.push_back(*folded[static_cast<std::size_t>(id)]);
      } else {
        in_values.push_back(constant_tensor(g, id));
      }
    }
    std::vector<cpu::TensorRef> in_refs(in_values.begin(), in_values.end());
    std::vector<const cpu::TensorRef*> ins;
    for (std::size_t i = 0; i < layer.inputs.size(); ++i) ins.push_back(layer.inputs[i] < 0 ? nullptr : &in_refs[i]);
    std::vector<HostTensor> out_values;
    out_values.reserve(layer.outputs.size());
    for (auto id : layer.outputs) out_values.emplace_back(g.tensor(id).dtype, g.static_dims(id));
    std::vector<cpu::TensorRef> out_refs(out_values.begin(), out_values.end());
    std::vector<const cpu::TensorRef*> outs;
    for (auto& r : out_refs) outs.push_back(&r);
    cpu::KernelContext ctx(layer, std::move(ins), std::move(outs));
    kernel(ctx);
    for (std::size_t i = 0; i < layer.outputs.size(); ++i) {
      const auto id = layer.outputs[i];
      const auto& t = g.tensor(id);
      HostTensor& value = out_values[i];
      TensorView view = pool.add(t.name, value.dtype, value.shape, value.bytes);
      rewriter.set(id, rewriter.network().add_constant(view, t.name));
      folded[static_cast<std::size_t>(id)] = std::move(value);
    }
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
