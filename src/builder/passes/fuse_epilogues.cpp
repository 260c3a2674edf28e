// Builder passes for the CUDA target: matmul + bias as linear, and epilogues (residual add, relu/gelu) fused into
// the linear or conv before them, as cuBLASLt, CUTLASS and cuDNN can apply them (a quantized conv's residual read
// quantized where it is a dequantize).
#include <fmt/format.h>

#include <string>
#include <vector>

#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "builder/passes/passes.hpp"
#include "builder/passes/tensor_uses.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::builder {

namespace {

std::string string_attr(const graph::Layer& layer, const char* name, const std::string& fallback) {
  return graph::AttrReader(layer.attrs, layer.name, layer.op).get_string(name, fallback);
}

bool bool_attr(const graph::Layer& layer, const char* name) {
  return graph::AttrReader(layer.attrs, layer.name, layer.op).get_bool(name, false);
}

// The inputs an epilogue-fusable layer has before its residual: x, weight, bias (linear, conv); x, weight, scale, bias
// (quantized_linear, quantized_conv).
std::size_t inputs_before_residual(const std::string& op) {
  return op == "quantized_linear" || op == "quantized_conv" ? 4 : 3;
}

bool same_shape(const graph::Graph& g, std::int32_t a, std::int32_t b) {
  return g.tensor(a).shape == g.tensor(b).shape && g.tensor(a).dtype == g.tensor(b).dtype;
}

// A residual that a quantized_conv can read quantized: a dequantize of an i8 or f8e4m3 tensor by one constant scale
// (a scalar), as a calibrated network's quantized residual add has it. The conv then adds the quantized values times
// that scale (input 6) and no dequantize step runs.
const graph::Layer* quantized_residual(const graph::Graph& g, const graph::Layer& conv, std::int32_t residual) {
  if (conv.op != "quantized_conv") return nullptr;
  const graph::Layer* dq = producer_of(g, residual, "dequantize");
  if (dq == nullptr) return nullptr;
  const DataType type = g.tensor(dq->inputs[0]).dtype;
  if (type != DataType::kI8 && type != DataType::kF8E4M3) return nullptr;
  const std::int32_t scale = dq->inputs[1];
  const bool scalar = is_constant(g, scale) && g.tensor(scale).shape.empty() && g.tensor(scale).dtype == DataType::kF32;
  return scalar ? dq : nullptr;
}

}  // namespace

Network fuse_matmul_bias(const Network& network, WeightPool& pool) {
  const graph::Graph& g = graph::graph_of(network);
  const TensorUses uses(g);
  // matmul layer -> the add layer that adds a bias row to it.
  std::vector<std::int32_t> bias_add(g.layers.size(), -1);
  std::vector<bool> absorbed(g.layers.size(), false);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& mm = g.layers[l];
    if (mm.op != "matmul" || bool_attr(mm, "transpose_a") || !is_constant(g, mm.inputs[1])) continue;
    const auto w = mm.inputs[1];
    if (g.tensor(w).shape.size() != 2 || g.tensor(mm.inputs[0]).shape.size() < 2) continue;
    const TensorUse* use = uses.only_reader(mm.outputs[0]);
    if (use == nullptr) continue;
    const auto& add = g.layers[use->layer];
    if (add.op != "add") continue;
    const auto bias = add.inputs[1 - use->position];
    if (!is_constant(g, bias) || g.tensor(bias).dtype != g.tensor(w).dtype) continue;
    // The bias is a row: [N] or [1, ..., 1, N], no longer than the product's rank.
    const Dims bdims = g.static_dims(bias);
    const Dims wdims = g.static_dims(w);
    const std::int64_t n = bool_attr(mm, "transpose_b") ? wdims[0] : wdims[1];
    bool row = bdims.rank() >= 1 && bdims.rank() <= static_cast<int>(g.tensor(mm.outputs[0]).shape.size()) &&
               bdims[bdims.rank() - 1] == n;
    for (int k = 0; row && k + 1 < bdims.rank(); ++k) row = bdims[k] == 1;
    if (!row || g.tensor(add.outputs[0]).shape != g.tensor(mm.outputs[0]).shape) continue;
    bias_add[l] = static_cast<std::int32_t>(use->layer);
    absorbed[use->layer] = true;
  }

  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    if (absorbed[l]) continue;
    if (bias_add[l] < 0) {
      rewriter.copy_layer(layer);
      continue;
    }
    const auto& add = g.layers[static_cast<std::size_t>(bias_add[l])];
    const auto w = layer.inputs[1];
    const auto bias = add.inputs[add.inputs[0] == layer.outputs[0] ? 1 : 0];
    // linear wants weight [out, in]: matmul's b [in, out] is transposed here, once.
    Tensor weight = rewriter.get(w);
    if (!bool_attr(layer, "transpose_b")) {
      HostTensor t = permute(constant_tensor(g, w), {1, 0});
      const std::string name = layer.name + "/weight_t";
      weight = net.add_constant(pool.add(name, t.dtype, t.shape, std::move(t.bytes)), name);
    }
    HostTensor b = constant_tensor(g, bias);
    const std::int64_t n = b.shape.volume();
    const std::string bname = layer.name + "/bias";
    Tensor bias_row = net.add_constant(pool.add(bname, b.dtype, Dims{n}, std::move(b.bytes)), bname);
    std::vector<Tensor> outs =
        net.add_layer("linear", {rewriter.get(layer.inputs[0]), weight, bias_row}, {}, layer.name);
    net.rename_tensor(outs[0], g.tensor(add.outputs[0]).name);
    rewriter.set(add.outputs[0], outs[0]);
  }
  return rewriter.finish();
}

Network fuse_epilogues(const Network& network) {
  const graph::Graph& g = graph::graph_of(network);
  const TensorUses uses(g);
  struct Fusion {
    std::int32_t residual = -1;
    std::int32_t residual_scale = -1;  // quantized_conv reading its residual quantized
    std::string activation = "none";
    std::size_t last = 0;  // the last absorbed layer: the fused layer is made where it was
  };
  std::vector<std::int32_t> fused_into(g.layers.size(), -1);  // absorbed layer -> its anchor
  std::vector<Fusion> fusion(g.layers.size());
  std::vector<bool> anchor(g.layers.size(), false);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    const bool linear = layer.op == "linear" || layer.op == "quantized_linear";
    const std::size_t bias = inputs_before_residual(layer.op) - 1;
    const bool conv = (layer.op == "conv" || layer.op == "quantized_conv") &&
                      g.tensor(layer.inputs[0]).shape.size() == 4 && layer.inputs.size() > bias &&
                      layer.inputs[bias] >= 0;  // cuDNN's fused form needs a bias
    if ((!linear && !conv) || layer.inputs.size() > inputs_before_residual(layer.op) ||
        string_attr(layer, "activation", "none") != "none") {
      continue;
    }
    Fusion f;
    std::int32_t value = layer.outputs[0];
    const TensorUse* use = uses.only_reader(value);
    auto activation_of = [&](const graph::Layer& next) -> std::string {
      if (next.op == "relu") return "relu";
      if (linear && next.op == "gelu")
        return string_attr(next, "approximate", "none") == "tanh" ? "gelu_tanh" : "gelu_erf";
      return {};
    };
    std::vector<std::size_t> absorbed;
    if (use != nullptr && fused_into[use->layer] >= 0) continue;  // add(linear, linear): the first one takes it
    if (use != nullptr && g.layers[use->layer].op == "add") {
      const auto& add = g.layers[use->layer];
      const auto other = add.inputs[1 - use->position];
      if (other != value && same_shape(g, other, value) && same_shape(g, add.outputs[0], value)) {
        const TensorUse* after = uses.only_reader(add.outputs[0]);
        const bool activation_follows = after != nullptr && !activation_of(g.layers[after->layer]).empty();
        // cuDNN fuses a residual only together with an activation.
        if (linear || activation_follows) {
          f.residual = other;
          if (const graph::Layer* dq = quantized_residual(g, layer, other)) {
            f.residual = dq->inputs[0];
            f.residual_scale = dq->inputs[1];
          }
          absorbed.push_back(use->layer);
          value = add.outputs[0];
          use = after;
        }
      }
    }
    if (use != nullptr) {
      const std::string activation = activation_of(g.layers[use->layer]);
      if (!activation.empty() && same_shape(g, g.layers[use->layer].outputs[0], value)) {
        f.activation = activation;
        absorbed.push_back(use->layer);
      }
    }
    if (absorbed.empty()) continue;
    f.last = absorbed.back();
    for (auto a : absorbed) fused_into[a] = static_cast<std::int32_t>(l);
    anchor[l] = true;
    fusion[l] = f;
  }

  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    if (anchor[l]) continue;  // made where its last absorbed layer was
    if (fused_into[l] < 0) {
      rewriter.copy_layer(layer);
      continue;
    }
    const auto a = static_cast<std::size_t>(fused_into[l]);
    if (fusion[a].last != l) continue;
    const auto& base = g.layers[a];
    std::vector<Tensor> inputs;
    for (std::size_t i = 0; i < inputs_before_residual(base.op); ++i)
      inputs.push_back(i < base.inputs.size() ? rewriter.get(base.inputs[i]) : Tensor{});
    inputs.push_back(rewriter.get(fusion[a].residual));
    if (fusion[a].residual_scale >= 0) {
      inputs.emplace_back();  // quantized_conv's output_scale: none yet (fuse_quantized_outputs may add it)
      inputs.push_back(rewriter.get(fusion[a].residual_scale));
    }
    while (!inputs.back().valid()) inputs.pop_back();
    Attributes attrs = base.attrs;
    if (fusion[a].activation != "none") attrs["activation"] = fusion[a].activation;
    std::vector<Tensor> outs = net.add_layer(base.op, inputs, attrs, base.name);
    net.rename_tensor(outs[0], g.tensor(layer.outputs[0]).name);
    rewriter.set(layer.outputs[0], outs[0]);
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
