// Builder pass (CUDA targets): groups connected elementwise layers into fused_elementwise layers for generated kernels.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "backends/cuda/codegen/elementwise_codegen.hpp"
#include "builder/graph_rewriter.hpp"
#include "builder/passes/passes.hpp"
#include "builder/passes/tensor_uses.hpp"
#include "graph/elementwise_program.hpp"
#include "graph/graph.hpp"

namespace tensoracle::builder {

namespace {

// Larger groups only lengthen compilation; chains in real networks are far shorter.
constexpr std::size_t kMaxGroupLayers = 64;

struct Group {
  std::int32_t root = -1;             // the layer whose output leaves the group
  std::set<std::int32_t> inputs;      // tensors read by members and made outside the group
  std::vector<std::int32_t> members;  // layer indices, collected from the root backwards
};

}  // namespace

Network fuse_elementwise(const Network& network) {
  const graph::Graph& g = graph::graph_of(network);
  const TensorUses uses(g);

  // Consumers before producers: a layer joins the group of its readers when every reader is in that one group and
  // its output is not a network output. Only a group's root is read outside it, so every member is an ancestor of the
  // root and no path leaves the group and comes back: the group can run as one layer where its root was.
  std::vector<std::int32_t> group_of(g.layers.size(), -1);
  std::vector<Group> groups;
  for (std::size_t l = g.layers.size(); l-- > 0;) {
    const graph::Layer& layer = g.layers[l];
    if (!cuda::codegen::supports_layer(g, layer)) continue;
    const auto out = static_cast<std::size_t>(layer.outputs[0]);
    std::int32_t joined = -1;
    const auto& readers = uses.readers[out];
    if (!uses.output[out] && !readers.empty()) {
      const std::int32_t candidate = group_of[readers[0].layer];
      bool one_group = candidate >= 0;
      for (const TensorUse& r : readers) one_group = one_group && group_of[r.layer] == candidate;
      if (one_group) {
        Group& grp = groups[static_cast<std::size_t>(candidate)];
        std::set<std::int32_t> inputs = grp.inputs;
        inputs.erase(layer.outputs[0]);
        inputs.insert(layer.inputs.begin(), layer.inputs.end());
        if (inputs.size() <= static_cast<std::size_t>(cuda::codegen::kMaxInputs) &&
            grp.members.size() < kMaxGroupLayers) {
          grp.inputs = std::move(inputs);
          grp.members.push_back(static_cast<std::int32_t>(l));
          joined = candidate;
        }
      }
    }
    if (joined < 0) {
      const std::set<std::int32_t> inputs(layer.inputs.begin(), layer.inputs.end());
      // A single layer has at most 3 inputs, always within the kernel's limit.
      groups.push_back(Group{static_cast<std::int32_t>(l), inputs, {static_cast<std::int32_t>(l)}});
      joined = static_cast<std::int32_t>(groups.size() - 1);
    }
    group_of[l] = joined;
  }

  GraphRewriter rewriter(g);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const graph::Layer& layer = g.layers[l];
    if (group_of[l] < 0) {
      rewriter.copy_layer(layer);
      continue;
    }
    Group& grp = groups[static_cast<std::size_t>(group_of[l])];
    if (grp.root != static_cast<std::int32_t>(l)) continue;  // emitted with its root
    std::sort(grp.members.begin(), grp.members.end());
    // Values: the external inputs in the order the members first read them, then each member's result.
    std::vector<std::int32_t> inputs;
    std::map<std::int32_t, std::int32_t> value_of;  // tensor id -> program value index (results added below)
    for (auto m : grp.members) {
      for (auto id : g.layers[static_cast<std::size_t>(m)].inputs) {
        if (grp.inputs.count(id) != 0 && value_of.count(id) == 0) {
          value_of[id] = static_cast<std::int32_t>(inputs.size());
          inputs.push_back(id);
        }
      }
    }
    graph::ElementwiseProgram program;
    for (auto m : grp.members) {
      const graph::Layer& member = g.layers[static_cast<std::size_t>(m)];
      graph::ProgramInstruction ins;
      ins.op = member.op;
      ins.attrs = member.attrs;
      ins.dtype = g.tensor(member.outputs[0]).dtype;
      for (auto id : member.inputs) ins.args.push_back(value_of.at(id));
      value_of[member.outputs[0]] = static_cast<std::int32_t>(inputs.size() + program.instructions.size());
      program.instructions.push_back(std::move(ins));
    }
    std::vector<Tensor> mapped;
    for (auto id : inputs) mapped.push_back(rewriter.get(id));
    rewriter.add_named_layer(layer, std::string(graph::kFusedElementwiseOp), mapped,
                             {{std::string(graph::kProgramAttr), program.to_json()}});
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
