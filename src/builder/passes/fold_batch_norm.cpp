// Builder pass: folds inference batch normalization into the convolution that feeds it (into its weight, or into the
// scales of a quantized weight's dequantize).
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/numeric.hpp"
#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "builder/passes/passes.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::builder {

namespace {

std::vector<double> constant_values(const graph::Graph& g, std::int32_t id) {
  HostTensor h = constant_tensor(g, id);
  return cpu::to_f64(h);
}

bool is_float(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16 || t == DataType::kF64;
}

// A convolution weight that explicit quantization wrote (what tensoracle calibrate writes): a dequantize of a constant
// with a constant scale, one per tensor or one per output channel (axis 0). The batch norm folds into that scale, and
// the quantized values stay as they are. The dequantize, or nullptr.
const graph::Layer* dequantized_weight(const graph::Graph& g, std::int32_t id) {
  const auto& t = g.tensor(id);
  if (t.kind != graph::TensorKind::kLayerOutput) return nullptr;
  const auto& dq = g.layers[static_cast<std::size_t>(t.producer)];
  if (dq.op != "dequantize" || !is_constant(g, dq.inputs[0]) || !is_constant(g, dq.inputs[1])) return nullptr;
  const std::size_t scale_rank = g.tensor(dq.inputs[1]).shape.size();
  if (scale_rank == 0) return &dq;
  const auto rank = static_cast<std::int64_t>(t.shape.size());
  const std::int64_t axis = graph::AttrReader(dq.attrs, dq.name, dq.op).get_int("axis", 0);
  return scale_rank == 1 && (axis == 0 || axis == -rank) ? &dq : nullptr;
}

}  // namespace

Network fold_batch_norm(const Network& network, WeightPool& pool) {
  const graph::Graph& g = graph::graph_of(network);
  std::vector<int> readers(g.tensors.size(), 0);
  for (const auto& layer : g.layers) {
    for (auto id : layer.inputs) {
      if (id >= 0) ++readers[static_cast<std::size_t>(id)];
    }
  }
  for (auto id : g.outputs) ++readers[static_cast<std::size_t>(id)];

  // conv layer index -> the batch_norm layer folded into it.
  std::vector<std::int32_t> folded_into(g.layers.size(), -1);
  std::vector<bool> skip(g.layers.size(), false);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& bn = g.layers[l];
    if (bn.op != "batch_norm") continue;
    const auto x = bn.inputs[0];
    const auto& xt = g.tensor(x);
    if (xt.kind != graph::TensorKind::kLayerOutput || readers[static_cast<std::size_t>(x)] != 1) continue;
    const auto conv_index = static_cast<std::size_t>(xt.producer);
    const auto& conv = g.layers[conv_index];
    if (conv.op != "conv" || (!is_constant(g, conv.inputs[1]) && dequantized_weight(g, conv.inputs[1]) == nullptr) ||
        (conv.inputs.size() > 2 && conv.inputs[2] >= 0 && !is_constant(g, conv.inputs[2])) || !is_float(xt.dtype))
      continue;
    bool params_constant = true;
    for (std::size_t i = 1; i < bn.inputs.size(); ++i) {
      params_constant = params_constant && (bn.inputs[i] < 0 || is_constant(g, bn.inputs[i]));
    }
    if (!params_constant) continue;
    folded_into[conv_index] = static_cast<std::int32_t>(l);
    skip[l] = true;
  }

  GraphRewriter rewriter(g);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    if (skip[l]) continue;
    const auto& layer = g.layers[l];
    if (folded_into[l] < 0) {
      rewriter.copy_layer(layer);
      continue;
    }
    const auto& bn = g.layers[static_cast<std::size_t>(folded_into[l])];
    const auto weight_id = layer.inputs[1];
    const auto& weight = g.tensor(weight_id);
    const Dims wshape = g.static_dims(weight_id);
    const auto out_channels = static_cast<std::size_t>(wshape[0]);
    const graph::Layer* dequantize = is_constant(g, weight_id) ? nullptr : dequantized_weight(g, weight_id);
    std::vector<double> w = dequantize != nullptr ? std::vector<double>{} : constant_values(g, weight_id);
    std::vector<double> bias(out_channels, 0.0);
    if (layer.inputs.size() > 2 && layer.inputs[2] >= 0) bias = constant_values(g, layer.inputs[2]);
    const std::vector<double> mean = constant_values(g, bn.inputs[1]);
    const std::vector<double> var = constant_values(g, bn.inputs[2]);
    std::vector<double> gamma(out_channels, 1.0), beta(out_channels, 0.0);
    if (bn.inputs.size() > 3 && bn.inputs[3] >= 0) gamma = constant_values(g, bn.inputs[3]);
    if (bn.inputs.size() > 4 && bn.inputs[4] >= 0) beta = constant_values(g, bn.inputs[4]);
    double eps = 1e-5;
    if (auto it = bn.attrs.find("epsilon"); it != bn.attrs.end()) {
      if (const double* d = std::get_if<double>(&it->second)) eps = *d;
      if (const std::int64_t* i = std::get_if<std::int64_t>(&it->second)) eps = static_cast<double>(*i);
    }
    const std::size_t per_channel = w.size() / out_channels;
    std::vector<double> factor(out_channels), new_bias(out_channels);
    for (std::size_t o = 0; o < out_channels; ++o) {
      factor[o] = gamma[o] / std::sqrt(var[o] + eps);
      for (std::size_t k = 0; k < per_channel; ++k) w[o * per_channel + k] *= factor[o];
      new_bias[o] = (bias[o] - mean[o]) * factor[o] + beta[o];
    }
    HostTensor bt(weight.dtype, Dims{static_cast<std::int64_t>(out_channels)});
    cpu::from_f64(bt, new_bias);
    const std::string wname = layer.name + "/folded_weight";
    const std::string bname = layer.name + "/folded_bias";
    Network& net = rewriter.network();
    Tensor new_w;
    if (dequantize != nullptr) {
      // The quantized weight's scale times the factor, per output channel.
      const std::vector<double> scale = constant_values(g, dequantize->inputs[1]);
      std::vector<double> folded(out_channels);
      for (std::size_t o = 0; o < out_channels; ++o) folded[o] = scale[scale.size() == 1 ? 0 : o] * factor[o];
      HostTensor st(DataType::kF32, Dims{static_cast<std::int64_t>(out_channels)});
      cpu::from_f64(st, folded);
      const std::string sname = layer.name + "/folded_weight_scale";
      Attributes attrs = dequantize->attrs;
      attrs["axis"] = std::int64_t{0};
      new_w = net.add_layer("dequantize",
                            {rewriter.get(dequantize->inputs[0]),
                             net.add_constant(pool.add(sname, st.dtype, st.shape, std::move(st.bytes)), sname)},
                            attrs, wname)[0];
    } else {
      HostTensor wt(weight.dtype, wshape);
      cpu::from_f64(wt, w);
      new_w = net.add_constant(pool.add(wname, wt.dtype, wt.shape, std::move(wt.bytes)), wname);
    }
    Tensor new_b = net.add_constant(pool.add(bname, bt.dtype, bt.shape, std::move(bt.bytes)), bname);
    std::vector<Tensor> outs =
        net.add_layer(layer.op, {rewriter.get(layer.inputs[0]), new_w, new_b}, layer.attrs, layer.name);
    // The convolution now produces what the batch norm produced.
    net.rename_tensor(outs[0], g.tensor(bn.outputs[0]).name);
    rewriter.set(bn.outputs[0], outs[0]);
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
