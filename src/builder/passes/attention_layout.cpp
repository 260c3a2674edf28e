// Builder pass for the CUDA target: attention reads its heads where the projections wrote them. The head transposes
// around an attention ([B, S, H, D] <-> [B, H, S, D]) go (layout "bshd"), and when q, k and v are the three parts of
// one split of a QKV product, the split goes too (layout "packed": the attention reads the product itself).
#include <array>
#include <string>
#include <vector>

#include "builder/graph_rewriter.hpp"
#include "builder/passes/passes.hpp"
#include "builder/passes/tensor_uses.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::builder {

namespace {

const graph::Layer* producer(const graph::Graph& g, std::int32_t id) {
  const auto p = g.tensor(id).producer;
  return p >= 0 ? &g.layers[static_cast<std::size_t>(p)] : nullptr;
}

bool is_head_transpose(const graph::Layer& layer) {
  if (layer.op != "transpose") return false;
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  return attrs.has("perm") && attrs.get_ints("perm") == std::vector<std::int64_t>{0, 2, 1, 3};
}

std::int64_t producer_index(const graph::Graph& g, std::int32_t id) {
  if (id < 0) return -1;
  const auto p = g.tensor(id).producer;
  if (p < 0) return -1;
  const auto& outs = g.layers[static_cast<std::size_t>(p)].outputs;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (outs[i] == id) return static_cast<std::int64_t>(i);
  }
  return -1;
}

struct Rewrite {
  std::array<std::int32_t, 3> inputs{};  // the new q, k, v
  std::string layout;
  std::int64_t heads = 0, kv_heads = 0;
  std::size_t out_transpose = 0;  // the transpose after the attention (its output becomes the attention's)
};

// q, k and v ([B, S, H, D], before their head transposes) as reshapes of outputs 0, 1, 2 of one split along the last
// axis of a [B, S, (Hq + 2 Hkv)·D] tensor: that tensor, with the head counts; -1 otherwise.
std::int32_t packed_source(const graph::Graph& g, const TensorUses& uses, const std::array<std::int32_t, 3>& heads,
                           std::int64_t& hq, std::int64_t& hkv) {
  const graph::Layer* split = nullptr;
  std::array<std::int64_t, 3> h{};
  std::int64_t d = -1;
  for (std::size_t i = 0; i < 3; ++i) {
    const graph::Layer* reshape = producer(g, heads[i]);
    if (reshape == nullptr || reshape->op != "reshape" || reshape->inputs.empty()) return -1;
    const std::int32_t part = reshape->inputs[0];
    const graph::Layer* s = producer(g, part);
    if (s == nullptr || s->op != "split" || (split != nullptr && s != split)) return -1;
    split = s;
    if (producer_index(g, part) != static_cast<std::int64_t>(i)) return -1;
    const auto reshape_layer = static_cast<std::size_t>(g.tensor(heads[i]).producer);
    if (!uses.only_read_by(part, reshape_layer)) return -1;
    // [B, S, E] -> [B, S, H, D] keeping B and S.
    const auto& in = g.tensor(part).shape;
    const auto& out = g.tensor(heads[i]).shape;
    if (in.size() != 3 || out.size() != 4 || in[0] != out[0] || in[1] != out[1]) return -1;
    const Dims dims = g.static_dims(heads[i]);
    if (dims[2] <= 0 || dims[3] <= 0 || (d >= 0 && dims[3] != d)) return -1;
    d = dims[3];
    h[i] = dims[2];
  }
  if (split == nullptr || split->outputs.size() != 3 || h[1] != h[2]) return -1;
  const std::int32_t x = split->inputs[0];
  const auto& xs = g.tensor(x).shape;
  if (xs.size() != 3) return -1;
  const graph::AttrReader attrs(split->attrs, split->name, split->op);
  const std::int64_t axis = attrs.get_int("axis", 0);
  if (axis != 2 && axis != -1) return -1;
  const Dims xd = g.static_dims(x);
  if (xd[2] != (h[0] + 2 * h[1]) * d) return -1;
  hq = h[0];
  hkv = h[1];
  return x;
}

}  // namespace

Network fuse_attention_layout(const Network& network) {
  const graph::Graph& g = graph::graph_of(network);
  const TensorUses uses(g);
  std::vector<bool> dropped(g.layers.size(), false);
  std::vector<int> rewrite_of(g.layers.size(), -1);
  std::vector<Rewrite> rewrites;
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    if (layer.op != "attention" || layer.inputs.size() < 3 || layer.outputs.size() != 1) continue;
    if (graph::AttrReader(layer.attrs, layer.name, layer.op).get_string("layout", "bhsd") != "bhsd") continue;
    Rewrite r;
    std::array<std::size_t, 3> in_transposes{};
    bool ok = true;
    for (std::size_t i = 0; i < 3 && ok; ++i) {
      const std::int32_t t = layer.inputs[i];
      const graph::Layer* p = t >= 0 ? producer(g, t) : nullptr;
      ok = p != nullptr && is_head_transpose(*p) && uses.only_read_by(t, l);
      if (ok) {
        r.inputs[i] = p->inputs[0];
        in_transposes[i] = static_cast<std::size_t>(g.tensor(t).producer);
      }
    }
    const TensorUse* out_use = uses.only_reader(layer.outputs[0]);
    ok = ok && out_use != nullptr && is_head_transpose(g.layers[out_use->layer]);
    if (!ok) continue;
    r.layout = "bshd";
    r.out_transpose = out_use->layer;
    std::int64_t hq = 0, hkv = 0;
    const std::int32_t packed = packed_source(g, uses, r.inputs, hq, hkv);
    // Each [B, S, H, D] head tensor must feed only its transpose for the split to go.
    bool sole = packed >= 0;
    for (std::size_t i = 0; i < 3 && sole; ++i) sole = uses.only_read_by(r.inputs[i], in_transposes[i]);
    if (sole) {
      r.inputs = {packed, packed, packed};
      r.layout = "packed";
      r.heads = hq;
      r.kv_heads = hkv;
    }
    for (auto t : in_transposes) dropped[t] = true;
    dropped[r.out_transpose] = true;
    rewrite_of[l] = static_cast<int>(rewrites.size());
    rewrites.push_back(r);
  }
  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    if (dropped[l]) continue;
    if (rewrite_of[l] < 0) {
      rewriter.copy_layer(layer);
      continue;
    }
    const Rewrite& r = rewrites[static_cast<std::size_t>(rewrite_of[l])];
    std::vector<Tensor> inputs;
    for (auto id : r.inputs) inputs.push_back(rewriter.get(id));
    if (layer.inputs.size() > 3 && layer.inputs[3] >= 0) inputs.push_back(rewriter.get(layer.inputs[3]));
    Attributes attrs = layer.attrs;
    attrs["layout"] = r.layout;
    if (r.layout == "packed") {
      attrs["heads"] = r.heads;
      attrs["kv_heads"] = r.kv_heads;
    }
    std::vector<Tensor> outs = net.add_layer("attention", inputs, attrs, layer.name);
    const std::int32_t merged = g.layers[r.out_transpose].outputs[0];
    net.rename_tensor(outs[0], g.tensor(merged).name);
    rewriter.set(merged, outs[0]);
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
