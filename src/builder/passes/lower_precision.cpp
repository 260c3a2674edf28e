// Builder pass: lowers an f32 network to f16 or bf16 (weights converted, casts at the inputs and outputs; an input that
// only quantizes read keeps f32).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "backends/cpu/kernels/numeric.hpp"
#include "builder/graph_rewriter.hpp"
#include "builder/passes/passes.hpp"
#include "core/bytes.hpp"
#include "graph/graph.hpp"
#include "graph/plugin_layer.hpp"
#include "graph/quantize_to.hpp"

namespace tensoracle::builder {

namespace {

// A plugin layer gets the lowered dtypes when its plugin supports them on the device; otherwise it keeps the dtypes
// the network gave it, with casts from and back to the lowered ones around it.
void lower_plugin_layer(GraphRewriter& rewriter, const graph::Layer& layer, DataType low, plugin::Device device) {
  const graph::Graph& g = rewriter.source();
  Network& net = rewriter.network();
  std::vector<Tensor> inputs;
  std::vector<DataType> dtypes;
  for (auto id : layer.inputs) {
    inputs.push_back(rewriter.get(id));
    dtypes.push_back(net.dtype(inputs.back()));
  }
  if (graph::plugin_supports_dtypes(g, layer, dtypes, device)) {
    rewriter.add_named_layer(layer, layer.op, inputs, layer.attrs);
    return;
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const DataType original = g.tensor(layer.inputs[i]).dtype;
    if (dtypes[i] == original) continue;
    inputs[i] = net.add_layer("cast", {inputs[i]}, {{"to", std::string(to_string(original))}},
                              fmt::format("{}/input{}/{}", layer.name, i, to_string(original)))[0];
  }
  const std::vector<Tensor> outputs = rewriter.add_named_layer(layer, layer.op, inputs, layer.attrs);
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    const std::int32_t id = layer.outputs[o];
    const bool network_output = std::find(g.outputs.begin(), g.outputs.end(), id) != g.outputs.end();
    if (net.dtype(outputs[o]) != DataType::kF32 || network_output) continue;
    rewriter.set(id, net.add_layer("cast", {outputs[o]}, {{"to", std::string(to_string(low))}},
                                   fmt::format("{}/{}", g.tensor(id).name, to_string(low)))[0]);
  }
}

// Whether input `i` of an `op` layer is a quantization scale.
bool is_scale_input(const std::string& op, std::size_t i) {
  if (op == "quantize" || op == "dequantize") return i == 1;
  if ((op == "quantized_linear" || op == "quantized_conv") && i == 2) return true;     // the product's scale
  if (op == "quantized_conv" && i == 6) return true;                                   // the residual's
  const std::optional<std::size_t> output_scale = graph::quantize_to_scale_input(op);  // `quantize_to`'s
  return output_scale && i == *output_scale;
}

// Per tensor: whether every reader reads it as a quantization scale (which must stay f32).
std::vector<bool> read_only_as_scale(const graph::Graph& g) {
  std::vector<int> scale_reads(g.tensors.size(), 0), reads(g.tensors.size(), 0);
  for (const auto& layer : g.layers) {
    for (std::size_t i = 0; i < layer.inputs.size(); ++i) {
      if (layer.inputs[i] < 0) continue;
      const auto id = static_cast<std::size_t>(layer.inputs[i]);
      ++reads[id];
      if (is_scale_input(layer.op, i)) ++scale_reads[id];
    }
  }
  std::vector<bool> only(g.tensors.size(), false);
  for (std::size_t id = 0; id < g.tensors.size(); ++id) only[id] = reads[id] > 0 && scale_reads[id] == reads[id];
  return only;
}

}  // namespace

Network lower_precision(const Network& network, DataType low, WeightPool& pool, plugin::Device device) {
  const graph::Graph& g = graph::graph_of(network);
  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  const std::string suffix = fmt::format("/{}", to_string(low));

  // An f32 input that only quantizes read (a quantized CNN's image) stays f32: they quantize its values as the network
  // gives them, with no cast step (and no f16 rounding) before.
  std::vector<bool> only_quantized(g.tensors.size(), true);
  for (auto id : g.outputs) only_quantized[static_cast<std::size_t>(id)] = false;
  for (const auto& layer : g.layers) {
    for (std::size_t i = 0; i < layer.inputs.size(); ++i) {
      if (layer.inputs[i] >= 0 && (layer.op != "quantize" || i != 0)) {
        only_quantized[static_cast<std::size_t>(layer.inputs[i])] = false;
      }
    }
  }
  for (auto id : g.inputs) {
    const auto& t = g.tensor(id);
    if (t.dtype != DataType::kF32 || only_quantized[static_cast<std::size_t>(id)]) continue;
    Tensor cast = net.add_layer("cast", {rewriter.get(id)}, {{"to", std::string(to_string(low))}}, t.name + suffix)[0];
    net.rename_tensor(cast, t.name + suffix);
    rewriter.set(id, cast);
  }
  const std::vector<bool> scale = read_only_as_scale(g);
  for (std::size_t id = 0; id < g.tensors.size(); ++id) {
    const auto& t = g.tensors[id];
    if (t.kind != graph::TensorKind::kConstant || t.dtype != DataType::kF32 || scale[id]) continue;
    const auto sid = static_cast<std::int32_t>(id);
    const Dims dims = g.static_dims(sid);
    if (t.inline_constant) {
      rewriter.set(sid, net.add_small_constant(t.values, low, dims, t.name));
      continue;
    }
    HostTensor f32(DataType::kF32, dims);
    copy_bytes(f32.bytes.data(), t.weight->data, f32.bytes.size());
    HostTensor converted(low, dims);
    cpu::from_f32(converted, cpu::to_f32(f32));
    rewriter.set(sid, net.add_constant(pool.add(t.name, low, dims, std::move(converted.bytes)), t.name));
  }
  for (const auto& layer : g.layers) {
    if (layer.op == "plugin") {
      lower_plugin_layer(rewriter, layer, low, device);
      continue;
    }
    Attributes attrs = layer.attrs;
    if (layer.op == "cast" || layer.op == "dequantize" || layer.op == "quantized_linear" ||
        layer.op == "quantized_conv") {
      auto it = attrs.find("to");
      const bool to_f32 = it == attrs.end() ? layer.op != "cast"
                                            : std::holds_alternative<std::string>(it->second) &&
                                                  std::get<std::string>(it->second) == to_string(DataType::kF32);
      if (to_f32) attrs["to"] = std::string(to_string(low));
    }
    std::vector<Tensor> inputs;
    for (auto id : layer.inputs) inputs.push_back(rewriter.get(id));
    rewriter.add_named_layer(layer, layer.op, inputs, attrs);
  }
  // Outputs keep their declared f32 type: cast back, the cast taking the output's name.
  for (auto id : g.outputs) {
    const auto& t = g.tensor(id);
    if (t.dtype != DataType::kF32) continue;
    Tensor lowered = rewriter.get(id);
    net.rename_tensor(lowered, t.name + suffix);
    rewriter.set(id, net.add_layer("cast", {lowered}, {{"to", std::string("f32")}}, t.name + "/to_f32")[0]);
  }
  return rewriter.finish();
}

}  // namespace tensoracle::builder
