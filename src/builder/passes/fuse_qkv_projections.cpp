// Builder pass for the CUDA target: an attention's q, k and v projections that read one input become one product and
// a split (which fuse_attention_layout then removes: the attention reads the product packed).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "builder/passes/passes.hpp"
#include "builder/passes/tensor_uses.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::builder {

namespace {

bool has_input(const graph::Layer& layer, std::size_t i) { return i < layer.inputs.size() && layer.inputs[i] >= 0; }

// The input positions of a product's bias and residual: linear (x, weight, bias, residual) and quantized_linear (x,
// weight, scale, bias, residual, whose scale per output feature concatenates along N as the weight does).
std::size_t bias_input(const std::string& op) { return op == "quantized_linear" ? 3 : 2; }

// A plain product x · Wᵀ (+ b) with constant weight, bias (and scale): no residual and no epilogue yet.
bool is_plain_constant_product(const graph::Graph& g, const graph::Layer& layer) {
  if (layer.op != "linear" && layer.op != "quantized_linear") return false;
  const std::size_t bias = bias_input(layer.op);
  if (layer.outputs.size() != 1 || has_input(layer, bias + 1)) return false;
  if (graph::AttrReader(layer.attrs, layer.name, layer.op).get_string("activation", "none") != "none") return false;
  if (!is_constant(g, layer.inputs[1]) || g.tensor(layer.inputs[1]).shape.size() != 2) return false;
  if (layer.op == "quantized_linear" && !is_constant(g, layer.inputs[2])) return false;
  return !has_input(layer, bias) || is_constant(g, layer.inputs[bias]);
}

// What the members of a group share: the op, the input, the weight's dtype and K, the output's dtype and whether they
// have a bias.
using GroupKey = std::tuple<std::string, std::int32_t, DataType, std::int64_t, DataType, bool>;

GroupKey key_of(const graph::Graph& g, const graph::Layer& layer) {
  const std::int32_t w = layer.inputs[1];
  return {layer.op,
          layer.inputs[0],
          g.tensor(w).dtype,
          g.static_dims(w)[1],
          g.tensor(layer.outputs[0]).dtype,
          has_input(layer, bias_input(layer.op))};
}

// The attention input (0 = q, 1 = k, 2 = v) that a product's output becomes through a head reshape and a head
// transpose ([B, S, H·D] -> [B, S, H, D] -> [B, H, S, D]), and that attention's layer; -1 when it is not one.
std::pair<std::int64_t, std::int64_t> attention_role(const graph::Graph& g, const TensorUses& uses,
                                                     std::int32_t product) {
  const TensorUse* r = uses.only_reader(product);
  if (r == nullptr || g.layers[r->layer].op != "reshape") return {-1, -1};
  const TensorUse* t = uses.only_reader(g.layers[r->layer].outputs[0]);
  if (t == nullptr || g.layers[t->layer].op != "transpose") return {-1, -1};
  const TensorUse* a = uses.only_reader(g.layers[t->layer].outputs[0]);
  if (a == nullptr || g.layers[a->layer].op != "attention" || a->position > 2) return {-1, -1};
  return {static_cast<std::int64_t>(a->position), static_cast<std::int64_t>(a->layer)};
}

// "encoder.attention.query", "encoder.attention.key" -> "encoder.attention.query+key": the common prefix up to a
// '.' or '/' once, then each name's rest.
std::string fused_name(const graph::Graph& g, const std::vector<std::size_t>& members) {
  const std::string& first = g.layers[members[0]].name;
  std::size_t prefix = first.size();
  for (auto m : members) {
    const std::string& name = g.layers[m].name;
    std::size_t i = 0;
    while (i < prefix && i < name.size() && name[i] == first[i]) ++i;
    prefix = i;
  }
  const std::size_t cut = first.find_last_of("./", prefix == 0 ? std::string::npos : prefix - 1);
  prefix = cut == std::string::npos || prefix == 0 ? 0 : cut + 1;
  std::string name = first.substr(0, prefix);
  for (std::size_t i = 0; i < members.size(); ++i) {
    name += (i == 0 ? "" : "+") + g.layers[members[i]].name.substr(prefix);
  }
  return name;
}

// `base`, or `base` with a counter, such that neither graph has a tensor or layer of that name (nor of the names of
// its first `outputs` outputs, "<name>:<i>").
std::string unused_name(const graph::Graph& source, const graph::Graph& target, const std::string& base,
                        std::size_t outputs = 0) {
  auto taken = [&](const std::string& n) {
    for (const graph::Graph* g : {&source, &target}) {
      if (g->tensor_by_name.count(n) != 0 || g->layer_by_name.count(n) != 0) return true;
    }
    return false;
  };
  for (int k = 0;; ++k) {
    const std::string name = k == 0 ? base : fmt::format("{}#{}", base, k);
    bool free = !taken(name);
    for (std::size_t i = 0; free && i < outputs; ++i) free = !taken(fmt::format("{}:{}", name, i));
    if (free) return name;
  }
}

// The constants' bytes one after another (row-major [N, K] weights and [N] biases concatenate along N so).
std::vector<std::byte> concatenated(const graph::Graph& g, const std::vector<std::size_t>& members, std::size_t input) {
  std::vector<std::byte> bytes;
  for (auto m : members) {
    const HostTensor t = constant_tensor(g, g.layers[m].inputs[input]);
    bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
  }
  return bytes;
}

}  // namespace

Network fuse_qkv_projections(const Network& network, WeightPool& pool) {
  const graph::Graph& g = graph::graph_of(network);
  const TensorUses uses(g);
  // The q, k and v projections of one attention (each through a head reshape and transpose) that can be one product:
  // the attention then reads that product packed (fuse_attention_layout) and the split goes. Other products that
  // share an input stay apart: their split would be a copy of the whole product.
  std::map<std::size_t, std::array<std::int64_t, 3>> by_attention;  // attention layer -> q, k, v products
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    if (!is_plain_constant_product(g, g.layers[l])) continue;
    const auto [role, attention] = attention_role(g, uses, g.layers[l].outputs[0]);
    if (role < 0) continue;
    auto [it, added] =
        by_attention.try_emplace(static_cast<std::size_t>(attention), std::array<std::int64_t, 3>{-1, -1, -1});
    it->second[static_cast<std::size_t>(role)] = static_cast<std::int64_t>(l);
  }
  std::vector<std::vector<std::size_t>> groups;
  std::vector<int> group_of(g.layers.size(), -1);
  for (const auto& [attention, qkv] : by_attention) {
    if (std::find(qkv.begin(), qkv.end(), -1) != qkv.end()) continue;
    const GroupKey key = key_of(g, g.layers[static_cast<std::size_t>(qkv[0])]);
    bool same = true;
    for (auto m : qkv) same = same && key_of(g, g.layers[static_cast<std::size_t>(m)]) == key;
    if (!same) continue;
    std::vector<std::size_t> members(qkv.begin(), qkv.end());
    // Made where the earliest member was: its input and constants exist there, and every member's readers come later.
    const std::size_t first = *std::min_element(members.begin(), members.end());
    for (auto m : members) group_of[m] = static_cast<int>(groups.size());
    members.insert(members.begin(), first);  // members[0]: where the product goes; then q, k, v
    groups.push_back(std::move(members));
  }

  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  const graph::Graph& out = graph::graph_of(net);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    if (group_of[l] < 0) {
      rewriter.copy_layer(layer);
      continue;
    }
    std::vector<std::size_t> members = groups[static_cast<std::size_t>(group_of[l])];
    if (members[0] != l) continue;
    members.erase(members.begin());  // q, k, v
    const std::int32_t w0 = layer.inputs[1];
    const std::int64_t k = g.static_dims(w0)[1];
    std::vector<std::int64_t> sizes;
    for (auto m : members) sizes.push_back(g.static_dims(g.layers[m].inputs[1])[0]);
    std::int64_t n = 0;
    for (auto s : sizes) n += s;

    const std::string name = unused_name(g, out, fused_name(g, members));
    const std::string wname = unused_name(g, out, name + "/weight");
    std::vector<Tensor> inputs{
        rewriter.get(layer.inputs[0]),
        net.add_constant(pool.add(wname, g.tensor(w0).dtype, Dims{n, k}, concatenated(g, members, 1)), wname)};
    const std::size_t bias = bias_input(layer.op);
    if (layer.op == "quantized_linear") {
      const std::string sname = unused_name(g, out, name + "/scale");
      inputs.push_back(net.add_constant(
          pool.add(sname, g.tensor(layer.inputs[2]).dtype, Dims{n}, concatenated(g, members, 2)), sname));
    }
    if (has_input(layer, bias)) {
      const std::string bname = unused_name(g, out, name + "/bias");
      inputs.push_back(net.add_constant(
          pool.add(bname, g.tensor(layer.inputs[bias]).dtype, Dims{n}, concatenated(g, members, bias)), bname));
    }
    const Tensor product = net.add_layer(layer.op, inputs, layer.attrs, name)[0];
    const std::string split_name = unused_name(g, out, name + "/split", members.size());
    const std::vector<Tensor> parts =
        net.add_layer("split", {product}, {{"sizes", sizes}, {"axis", std::int64_t{-1}}}, split_name);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const std::int32_t original = g.layers[members[i]].outputs[0];
      net.rename_tensor(parts[i], g.tensor(original).name);
      rewriter.set(original, parts[i]);
    }
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
