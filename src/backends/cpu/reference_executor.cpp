// run_reference: evaluates shapes, then runs each layer's CPU kernel in order, freeing tensors after their last use.
#include "tensoracle/reference_executor.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"
#include "graph/graph.hpp"
#include "graph/input_check.hpp"

namespace tensoracle {

std::map<std::string, HostTensor> run_reference(const Network& network,
                                                const std::map<std::string, HostTensor>& inputs) {
  network.verify();
  const graph::Graph& g = graph::graph_of(network);
  const std::vector<Dims> shapes = graph::checked_shapes(g, inputs);

  // Last layer that reads each tensor, so intermediates can be freed.
  std::vector<std::int64_t> last_use(g.tensors.size(), -1);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    for (auto id : g.layers[l].inputs) {
      if (id >= 0) last_use[static_cast<std::size_t>(id)] = static_cast<std::int64_t>(l);
    }
  }
  for (auto id : g.outputs) last_use[static_cast<std::size_t>(id)] = static_cast<std::int64_t>(g.layers.size());

  std::vector<std::optional<HostTensor>> values(g.tensors.size());
  for (auto id : g.inputs) values[static_cast<std::size_t>(id)] = inputs.at(g.tensor(id).name);
  for (std::size_t id = 0; id < g.tensors.size(); ++id) {
    const auto& t = g.tensors[id];
    if (t.kind != graph::TensorKind::kConstant) continue;
    if (t.inline_constant) {
      HostTensor h(t.dtype, shapes[id]);
      cpu::from_f64(h, t.values);
      values[id] = std::move(h);
    } else {
      values[id] = HostTensor::from_view(*t.weight);
    }
  }

  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const graph::Layer& layer = g.layers[l];
    cpu::Kernel kernel = cpu::find_kernel(layer.op);
    if (kernel == nullptr)
      throw UnsupportedError(
          fmt::format("layer '{}': the CPU backend has no kernel for op '{}'", layer.name, layer.op));
    std::vector<cpu::TensorRef> in_refs;
    in_refs.reserve(layer.inputs.size());
    for (auto id : layer.inputs) {
      in_refs.push_back(id < 0 ? cpu::TensorRef() : cpu::TensorRef(*values[static_cast<std::size_t>(id)]));
    }
    std::vector<const cpu::TensorRef*> ins;
    for (std::size_t i = 0; i < layer.inputs.size(); ++i) ins.push_back(layer.inputs[i] < 0 ? nullptr : &in_refs[i]);
    std::vector<cpu::TensorRef> out_refs;
    out_refs.reserve(layer.outputs.size());
    for (auto id : layer.outputs) {
      auto& slot = values[static_cast<std::size_t>(id)];
      slot = HostTensor(g.tensor(id).dtype, shapes[static_cast<std::size_t>(id)]);
      std::fill(slot->bytes.begin(), slot->bytes.end(), std::byte{0xFF});  // poison: unwritten elements show
      out_refs.emplace_back(*slot);
    }
    std::vector<const cpu::TensorRef*> outs;
    for (auto& r : out_refs) outs.push_back(&r);
    cpu::KernelContext ctx(layer, std::move(ins), std::move(outs));
    kernel(ctx);
    for (auto id : layer.inputs) {
      if (id >= 0 && last_use[static_cast<std::size_t>(id)] == static_cast<std::int64_t>(l) &&
          g.tensor(id).kind == graph::TensorKind::kLayerOutput) {
        values[static_cast<std::size_t>(id)].reset();
      }
    }
  }
  std::map<std::string, HostTensor> result;
  for (auto id : g.outputs) result.emplace(g.tensor(id).name, std::move(*values[static_cast<std::size_t>(id)]));
  return result;
}

}  // namespace tensoracle
