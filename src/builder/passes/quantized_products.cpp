// Builder passes: a linear or conv between dequantizes (explicit quantization's pattern) becomes one quantized_linear
// or quantized_conv (a linear whose weight alone is dequantized, a weight-only quantized_linear), and a quantize after
// one of those, a layer_norm, an rms_norm or a max_pool2d becomes part of that layer (its result stays quantized for
// the next product; an i8 quantize after a quantized_conv's max pool moves before the pool).
#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/numeric.hpp"
#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "builder/passes/conv_attrs.hpp"
#include "builder/passes/passes.hpp"
#include "builder/passes/tensor_uses.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "graph/quantize_to.hpp"

namespace tensoracle::builder {

namespace {

bool is_quantized(DataType dtype) { return dtype == DataType::kI8 || dtype == DataType::kF8E4M3; }

// The dequantize layer that produces `id`, when one does.
const graph::Layer* dequantize_of(const graph::Graph& g, std::int32_t id) { return producer_of(g, id, "dequantize"); }

// A dequantize's scale values when its scale is a constant: one (per tensor) or one per channel along `axis`.
struct Scale {
  std::vector<double> values;
  std::int64_t axis = 0;  // normalized; meaningful with several values
};

std::optional<Scale> constant_scale(const graph::Graph& g, const graph::Layer& dq) {
  const std::int32_t id = dq.inputs[1];
  if (!is_constant(g, id)) return std::nullopt;
  HostTensor t = constant_tensor(g, id);
  Scale s;
  s.values = cpu::to_f64(t);
  if (t.shape.rank() == 1) {
    const auto rank = static_cast<std::int64_t>(g.tensor(dq.inputs[0]).shape.size());
    s.axis = graph::AttrReader(dq.attrs, dq.name, dq.op).get_int("axis", 0);
    if (s.axis < 0) s.axis += rank;
  }
  return s;
}

// A conv with fewer input channels (an image's 3: a CNN's stem) stays a float conv on its dequantized operands: with so
// few channels per tap, cuDNN's i8 kernels were 5.8x slower than its f16 ones on the H200 (ResNet-50's stem at batch
// 256: 7.10 ms against 1.23 ms).
constexpr std::int64_t kMinQuantizedConvChannels = 16;

// ... except an i8 stem that the CUDA target runs in its blocked form (builder::to_channels_last: a 3x3 convolution of
// the 4x4 space-to-depth input over 64 channels, 271 µs for ResNet-50's stem at batch 256 against 325 µs in f16,
// bench/quantized_conv_probe.cpp): groups 1, stride 2, dilation 1, a 5x5 to 7x7 kernel, even result extents, and its
// result read only by a max_pool2d, directly or through one relu (which the quantize after the pool then moves in
// front of: fuse_quantized_outputs).
bool is_blocked_i8_stem(const graph::Graph& g, const TensorUses& uses, const graph::Layer& conv, DataType type) {
  if (type != DataType::kI8) return false;
  const Conv2dAttrs attrs = conv2d_attrs(conv);
  if (attrs.groups != 1 || !attrs.stride2_undilated()) return false;
  const Dims w = g.static_dims(conv.inputs[1]), y = g.static_dims(conv.outputs[0]);
  if (w.rank() != 4 || w[2] < 5 || w[2] > 7 || w[3] < 5 || w[3] > 7) return false;
  if (y.rank() != 4 || y[2] <= 0 || y[3] <= 0 || y[2] % 2 != 0 || y[3] % 2 != 0) return false;
  const TensorUse* use = uses.only_reader(conv.outputs[0]);
  if (use != nullptr && g.layers[use->layer].op == "relu") use = uses.only_reader(g.layers[use->layer].outputs[0]);
  return use != nullptr && use->position == 0 && g.layers[use->layer].op == "max_pool2d";
}

// A weight's scale per output feature (channel) times `factor`: its one value for every feature, or its own per feature
// (axis 0); nullopt for a scale along another axis, which can't leave the sum.
std::optional<std::vector<double>> per_feature(const Scale& weight_scale, std::size_t features, double factor) {
  if (weight_scale.values.size() != 1 && weight_scale.axis != 0) return std::nullopt;
  std::vector<double> scale(features);
  for (std::size_t n = 0; n < features; ++n) {
    scale[n] = factor * weight_scale.values[weight_scale.values.size() == 1 ? 0 : n];
  }
  return scale;
}

// What replaces one linear or conv: its quantized operands and the combined scale per output feature (channel).
struct Lowering {
  std::int32_t x = -1;  // the quantized activation (the dequantize's input)
  std::int32_t weight = -1;
  std::vector<double> scale;  // x's scale times the weight's, per output feature
};

// A linear or conv (any epilogue) whose x and weight are dequantizes of the same quantized type: x's with one scale,
// the weight's a constant ([out, in], or conv's [out, in/groups, k...]) with one scale or one per output feature
// (axis 0); both scales constant.
std::optional<Lowering> lowering_of(const graph::Graph& g, const TensorUses& uses, const graph::Layer& product) {
  const graph::Layer* dx = dequantize_of(g, product.inputs[0]);
  const graph::Layer* dw = dequantize_of(g, product.inputs[1]);
  if (dx == nullptr || dw == nullptr) return std::nullopt;
  const DataType type = g.tensor(dx->inputs[0]).dtype;
  if (!is_quantized(type) || g.tensor(dw->inputs[0]).dtype != type || !is_constant(g, dw->inputs[0])) {
    return std::nullopt;
  }
  const std::optional<Scale> sx = constant_scale(g, *dx);
  const std::optional<Scale> sw = constant_scale(g, *dw);
  if (!sx || !sw || sx->values.size() != 1) return std::nullopt;
  const Dims wdims = g.static_dims(dw->inputs[0]);
  if (wdims.rank() != (product.op == "linear" ? 2 : 4)) return std::nullopt;  // conv: 2D only
  if (product.op == "conv" && g.static_dims(product.inputs[0])[1] < kMinQuantizedConvChannels &&
      !is_blocked_i8_stem(g, uses, product, type)) {
    return std::nullopt;
  }
  std::optional<std::vector<double>> scale = per_feature(*sw, static_cast<std::size_t>(wdims[0]), sx->values[0]);
  if (!scale) return std::nullopt;
  return Lowering{dx->inputs[0], dw->inputs[0], std::move(*scale)};
}

// A linear whose weight alone is a dequantize (weight-only quantization: x is a float activation, not a dequantize)
// of a constant i8 or f8e4m3 weight [out, in] with a constant scale per tensor or per output feature, that no other
// layer reads (a weight shared with another layer, such as a tied embedding's, stays a float constant, stored once).
// The product reads the quantized weight and scales its sums: weight-only products (engine sizes drop by the
// weight's bytes; docs/precision.md).
std::optional<Lowering> weight_only_lowering_of(const graph::Graph& g, const TensorUses& uses,
                                                const graph::Layer& product) {
  if (product.op != "linear" || dequantize_of(g, product.inputs[0]) != nullptr ||
      g.tensor(product.outputs[0]).dtype == DataType::kF64) {  // quantized_linear's results are f32, f16 or bf16
    return std::nullopt;
  }
  const graph::Layer* dw = dequantize_of(g, product.inputs[1]);
  if (dw == nullptr || !is_quantized(g.tensor(dw->inputs[0]).dtype) || !is_constant(g, dw->inputs[0]) ||
      uses.only_reader(dw->outputs[0]) == nullptr) {
    return std::nullopt;
  }
  const std::optional<Scale> sw = constant_scale(g, *dw);
  const Dims wdims = g.static_dims(dw->inputs[0]);
  if (!sw || wdims.rank() != 2) return std::nullopt;
  std::optional<std::vector<double>> scale = per_feature(*sw, static_cast<std::size_t>(wdims[0]), 1.0);
  if (!scale) return std::nullopt;
  return Lowering{product.inputs[0], dw->inputs[0], std::move(*scale)};
}

}  // namespace

Network lower_quantized_products(const Network& network, WeightPool& pool) {
  const graph::Graph& g = graph::graph_of(network);
  const TensorUses uses(g);
  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  for (const auto& layer : g.layers) {
    const bool product = layer.op == "linear" || layer.op == "conv";
    std::optional<Lowering> lowering = product ? lowering_of(g, uses, layer) : std::optional<Lowering>{};
    if (product && !lowering) lowering = weight_only_lowering_of(g, uses, layer);
    if (!lowering) {
      rewriter.copy_layer(layer);
      continue;
    }
    const std::string name = layer.name + "/quantized_scale";
    HostTensor scale(DataType::kF32, Dims{static_cast<std::int64_t>(lowering->scale.size())});
    cpu::from_f64(scale, lowering->scale);
    std::vector<Tensor> inputs = {
        rewriter.get(lowering->x), rewriter.get(lowering->weight),
        net.add_constant(pool.add(name, DataType::kF32, scale.shape, std::move(scale.bytes)), name)};
    for (std::size_t i = 2; i < layer.inputs.size(); ++i) inputs.push_back(rewriter.get(layer.inputs[i]));
    while (!inputs.back().valid()) inputs.pop_back();
    Attributes attrs = layer.attrs;
    attrs["to"] = std::string(to_string(g.tensor(layer.outputs[0]).dtype));
    rewriter.add_named_layer(layer, layer.op == "linear" ? "quantized_linear" : "quantized_conv", inputs, attrs);
  }
  return remove_dead_layers(rewriter.finish());
}

namespace {

// The quantize a layer can take into its epilogue, when there is one: for a quantized_linear, quantized_conv or
// max_pool2d the only reader of its float result (quantizing a maximum is the maximum of the quantized values: the
// rounding is monotonic); for a layer_norm or rms_norm the first per-tensor quantize among the readers of its result
// (the others keep reading the float result, which the layer still writes).
const graph::Layer* output_quantize(const graph::Graph& g, const TensorUses& uses, const graph::Layer& layer) {
  const bool product = (layer.op == "quantized_linear" || layer.op == "quantized_conv") &&
                       is_quantized(g.tensor(layer.inputs[0]).dtype);      // a weight-only product's result stays float
  const bool pool = layer.op == "max_pool2d" && layer.inputs.size() == 1;  // max_pool2d: a CNN's stem before its blocks
  if ((product && !(layer.inputs.size() > 5 && layer.inputs[5] >= 0)) || pool) {  // input 5: already quantized
    const TensorUse* use = uses.only_reader(layer.outputs[0]);
    if (use == nullptr || use->position != 0 || !quantizes_per_tensor(g, g.layers[use->layer])) return nullptr;
    return &g.layers[use->layer];
  }
  if ((layer.op == "layer_norm" && layer.inputs.size() <= 3) || (layer.op == "rms_norm" && layer.inputs.size() <= 2)) {
    for (const TensorUse& use : uses.readers[static_cast<std::size_t>(layer.outputs[0])]) {
      if (use.position == 0 && quantizes_per_tensor(g, g.layers[use.layer])) return &g.layers[use.layer];
    }
  }
  return nullptr;
}

// A quantized_conv (no quantize_to yet) whose only reader is a max_pool2d (x alone, channels first) whose only reader
// is a quantize to i8 by one positive constant scale: a CNN's quantized stem before its pool. Rounding by a positive
// scale is monotonic, so the maximum of the quantized values is the quantized maximum: the quantize moves before the
// pool, into the convolution's epilogue, and the pool reads i8 (a quarter of the bytes of f16 it would read otherwise).
// Only a NaN in a window differs: quantized first it is 0 and the pool takes the window's largest other value; pooled
// first it wins the window and quantizes to 0.
struct QuantizedPool {
  std::size_t pool = 0;
  const graph::Layer* quantize = nullptr;
};

std::optional<QuantizedPool> quantize_after_pool(const graph::Graph& g, const TensorUses& uses,
                                                 const graph::Layer& conv) {
  if (conv.op != "quantized_conv" || (conv.inputs.size() > 5 && conv.inputs[5] >= 0)) return std::nullopt;
  const TensorUse* pool = uses.only_reader(conv.outputs[0]);
  if (pool == nullptr || pool->position != 0) return std::nullopt;
  const graph::Layer& p = g.layers[pool->layer];
  if (p.op != "max_pool2d" || p.inputs.size() != 1 ||
      graph::AttrReader(p.attrs, p.name, p.op).get_string("layout", "nchw") != "nchw") {
    return std::nullopt;
  }
  const TensorUse* use = uses.only_reader(p.outputs[0]);
  if (use == nullptr || use->position != 0) return std::nullopt;
  const graph::Layer& quantize = g.layers[use->layer];
  if (!quantizes_per_tensor(g, quantize) || g.tensor(quantize.outputs[0]).dtype != DataType::kI8) return std::nullopt;
  const std::optional<Scale> scale = constant_scale(g, quantize);
  if (!scale || scale->values.size() != 1 || !(scale->values[0] > 0.0)) return std::nullopt;
  return QuantizedPool{pool->layer, &quantize};
}

}  // namespace

Network fuse_quantized_outputs(const Network& network) {
  const graph::Graph& g = graph::graph_of(network);
  const TensorUses uses(g);
  std::vector<std::int32_t> quantize_of(g.layers.size(), -1);  // layer -> the quantize layer it absorbs
  std::vector<bool> absorbed(g.layers.size(), false);
  std::vector<std::int32_t> pooled(g.layers.size(), -1);  // a quantize moved before its pool -> that pool
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const graph::Layer* quantize = nullptr;
    if (const std::optional<QuantizedPool> moved = quantize_after_pool(g, uses, g.layers[l])) {
      quantize = moved->quantize;
      pooled[static_cast<std::size_t>(g.tensor(quantize->outputs[0]).producer)] =
          static_cast<std::int32_t>(moved->pool);
    } else {
      quantize = output_quantize(g, uses, g.layers[l]);
      // The pool whose quantize moved before it (its convolution comes first) keeps a plain i8 maximum.
      if (quantize != nullptr && pooled[static_cast<std::size_t>(g.tensor(quantize->outputs[0]).producer)] >= 0) {
        quantize = nullptr;
      }
    }
    if (quantize == nullptr) continue;
    quantize_of[l] = g.tensor(quantize->outputs[0]).producer;
    absorbed[static_cast<std::size_t>(quantize_of[l])] = true;
  }
  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const graph::Layer& layer = g.layers[l];
    if (pooled[l] >= 0) {  // a quantize moved before its pool: the pool's i8 result stands for its result
      rewriter.set(layer.outputs[0], rewriter.get(g.layers[static_cast<std::size_t>(pooled[l])].outputs[0]));
      continue;
    }
    if (absorbed[l]) continue;  // made with its producer (earlier: it reads nothing but that and a constant)
    if (quantize_of[l] < 0) {
      rewriter.copy_layer(layer);
      continue;
    }
    const graph::Layer& quantize = g.layers[static_cast<std::size_t>(quantize_of[l])];
    // The scale goes after the layer's optional inputs: the quantized products' bias and residual, a norm's weight (and
    // layer_norm's bias).
    const bool norm = layer.op == "layer_norm" || layer.op == "rms_norm";
    const std::optional<std::size_t> scale = graph::quantize_to_scale_input(layer.op);
    if (!scale) throw std::logic_error("fuse_quantized_outputs: " + layer.op + " takes no output scale");
    const std::size_t scale_input = *scale;
    std::vector<Tensor> inputs;
    for (std::size_t i = 0; i < scale_input; ++i) {
      inputs.push_back(i < layer.inputs.size() ? rewriter.get(layer.inputs[i]) : Tensor{});
    }
    inputs.push_back(rewriter.get(quantize.inputs[1]));
    for (std::size_t i = scale_input + 1; i < layer.inputs.size(); ++i) {  // quantized_conv's residual_scale
      inputs.push_back(layer.inputs[i] >= 0 ? rewriter.get(layer.inputs[i]) : Tensor{});
    }
    Attributes attrs = layer.attrs;
    attrs["quantize_to"] = std::string(to_string(g.tensor(quantize.outputs[0]).dtype));
    std::vector<Tensor> outs = net.add_layer(layer.op, inputs, attrs, layer.name);
    if (norm) {  // the float result first, then the quantized one
      net.rename_tensor(outs[0], g.tensor(layer.outputs[0]).name);
      rewriter.set(layer.outputs[0], outs[0]);
    }
    if (pooled[static_cast<std::size_t>(quantize_of[l])] >= 0) {  // the pool after it reads its i8 result
      net.rename_tensor(outs.back(), g.tensor(layer.outputs[0]).name);
      rewriter.set(layer.outputs[0], outs.back());
      continue;
    }
    net.rename_tensor(outs.back(), g.tensor(quantize.outputs[0]).name);
    rewriter.set(quantize.outputs[0], outs.back());
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
