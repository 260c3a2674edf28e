// The Calibrator: activation ranges over caller batches (on the CPU reference or a CUDA engine), weight scales, and the
// network with quantize/dequantize layers inserted (calibrate.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/numeric.hpp"
#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "calibrate/abs_histogram.hpp"
#include "calibrate/probe_runner.hpp"
#include "core/posix_file.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/calibrate.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/reference_executor.hpp"

namespace tensoracle {

std::string_view to_string(CalibrationMethod method) noexcept {
  switch (method) {
    case CalibrationMethod::kMax: return "max";
    case CalibrationMethod::kPercentile: return "percentile";
    case CalibrationMethod::kEntropy: return "entropy";
    case CalibrationMethod::kMse: return "mse";
  }
  return "max";
}

CalibrationMethod parse_calibration_method(std::string_view text) {
  for (auto m : {CalibrationMethod::kMax, CalibrationMethod::kPercentile, CalibrationMethod::kEntropy,
                 CalibrationMethod::kMse}) {
    if (text == to_string(m)) return m;
  }
  throw InvalidArgumentError(
      fmt::format("calibration method '{}': expected max, percentile, entropy or mse", std::string(text)));
}

namespace {

bool is_float(DataType t) { return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16; }

// Whether position `p` of `layer` is a quantized operand: the layer's op is among options.ops, it is not skipped, and
// p is its x or weight (linear, conv) or either factor (matmul).
bool quantized_operand(const CalibrationOptions& options, const graph::Layer& layer, std::size_t p) {
  const auto& ops = options.ops;
  const auto& skip = options.skip_layers;
  return p <= 1 && p < layer.inputs.size() && layer.inputs[p] >= 0 &&
         std::find(ops.begin(), ops.end(), layer.op) != ops.end() &&
         std::find(skip.begin(), skip.end(), layer.name) == skip.end() &&
         (p == 0 || layer.op == "linear" || layer.op == "conv" || layer.op == "matmul");
}

// Whether `id` is the result of a quantized product (a layer among options.ops), directly or through a batch_norm (a
// CNN's conv → batch_norm, which the builder folds into the conv).
bool from_product(const CalibrationOptions& options, const graph::Graph& g, std::int32_t id) {
  for (int depth = 0; depth < 2 && id >= 0 && g.tensor(id).kind == graph::TensorKind::kLayerOutput; ++depth) {
    const graph::Layer& producer = g.layers[static_cast<std::size_t>(g.tensor(id).producer)];
    if (std::find(options.ops.begin(), options.ops.end(), producer.op) != options.ops.end()) return true;
    if (producer.op != "batch_norm") return false;
    id = producer.inputs[0];
  }
  return false;
}

// With options.quantize_residuals: whether position `p` of `layer` is the residual of a residual add, the input of an
// `add` of two same-shaped activations that is not a quantized product's result while the other one is (TensorRT's
// placement for CNN blocks: the quantized convolution then reads its residual quantized and its own result can stay
// quantized for the next block).
bool residual_operand(const CalibrationOptions& options, const graph::Graph& g, const graph::Layer& layer,
                      std::size_t p) {
  if (!options.quantize_residuals || layer.op != "add" || layer.inputs.size() != 2 || p > 1) return false;
  if (std::find(options.skip_layers.begin(), options.skip_layers.end(), layer.name) != options.skip_layers.end()) {
    return false;
  }
  const std::int32_t residual = layer.inputs[p], branch = layer.inputs[1 - p];
  if (residual < 0 || branch < 0 || g.tensor(residual).kind == graph::TensorKind::kConstant ||
      g.tensor(residual).shape != g.tensor(branch).shape) {
    return false;
  }
  return from_product(options, g, branch) && !from_product(options, g, residual);
}

// One quantized weight input: the constant, the layer that reads it, and its channel axis (-1: one scale).
struct WeightUse {
  std::int32_t tensor;
  std::size_t layer;
  std::int64_t axis;
};

}  // namespace

struct Calibrator::State {
  const graph::Graph& g;
  CalibrationOptions options;
  std::vector<std::int32_t> activations;                     // calibrated tensors, in the order of their first reader
  std::map<std::int32_t, std::vector<std::string>> readers;  // activation -> the quantized layers that read it
  std::vector<WeightUse> weights;
  std::vector<calibrate::AbsHistogram> histograms;  // per activation
  Network probe;                                    // the network with every activation also an output
  std::vector<std::string> probe_names;             // each activation's name among the probe's outputs
  std::unique_ptr<calibrate::ProbeRunner> runner;   // runs the probe on options.target
  std::size_t batches = 0;

  State(const Network& net, CalibrationOptions opts) : g(graph::graph_of(net)), options(std::move(opts)) {}

  // The channel axis of a constant operand's per-channel scales: the output channels (linear's and conv's dim 0,
  // matmul's N of a 2D B); -1 for one scale.
  std::int64_t channel_axis(const graph::Layer& layer, std::size_t position) const {
    if (!options.per_channel_weights || position != 1) return -1;
    const auto rank = static_cast<std::int64_t>(g.tensor(layer.inputs[1]).shape.size());
    if (layer.op == "linear" || layer.op == "conv") return 0;
    if (layer.op == "matmul" && rank == 2) {
      return graph::AttrReader(layer.attrs, layer.name, layer.op).get_bool("transpose_b", false) ? 0 : 1;
    }
    return -1;
  }
};

Calibrator::Calibrator(const Network& network, CalibrationOptions options)
    : state_(std::make_unique<State>(network, std::move(options))) {
  State& s = *state_;
  const CalibrationOptions& o = s.options;
  if (o.quantized != DataType::kI8 && o.quantized != DataType::kF8E4M3) {
    throw InvalidArgumentError(
        fmt::format("calibration: quantized type {}; give i8 or f8e4m3", std::string(to_string(o.quantized))));
  }
  if (o.method == CalibrationMethod::kEntropy && o.quantized != DataType::kI8) {
    throw InvalidArgumentError(
        "calibration: the entropy method chooses int8 thresholds; use max, percentile or mse "
        "for f8e4m3");
  }
  if (!(o.percentile > 0 && o.percentile <= 100)) {
    throw InvalidArgumentError(fmt::format("calibration: percentile {} is not in (0, 100]", o.percentile));
  }
  calibrate::AbsHistogram check(o.histogram_bins);  // validates the bin count
  (void)check;
  network.verify();
  const graph::Graph& g = s.g;
  std::set<std::int32_t> seen_weights;
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const graph::Layer& layer = g.layers[l];
    for (std::size_t p = 0; p < 2; ++p) {
      if (!quantized_operand(o, layer, p) && !residual_operand(o, g, layer, p)) continue;
      const std::int32_t id = layer.inputs[p];
      if (!is_float(g.tensor(id).dtype)) continue;
      if (g.tensor(id).kind == graph::TensorKind::kConstant) {
        if (seen_weights.insert(id).second) s.weights.push_back({id, l, s.channel_axis(layer, p)});
        continue;
      }
      if (!o.activations) continue;
      auto [it, added] = s.readers.try_emplace(id);
      if (added) s.activations.push_back(id);
      it->second.push_back(layer.name);
    }
  }
  if (s.activations.empty() && s.weights.empty()) {
    throw InvalidArgumentError(
        fmt::format("calibration: the network has no float {} layer to quantize", fmt::join(o.ops, ", ")));
  }
  // The probe: the same network with every calibrated activation also an output.
  builder::GraphRewriter rewriter(g);
  for (const auto& layer : g.layers) rewriter.copy_layer(layer);
  std::vector<Tensor> handles;
  for (auto id : s.activations) handles.push_back(rewriter.get(id));
  s.probe = rewriter.finish();
  std::set<std::int32_t> outputs(g.outputs.begin(), g.outputs.end());
  for (std::size_t a = 0; a < s.activations.size(); ++a) {
    const std::int32_t id = s.activations[a];
    if (outputs.count(id) != 0 || g.tensor(id).kind == graph::TensorKind::kInput) {
      s.probe_names.push_back(g.tensor(id).name);  // already an output, or an input the caller gives
    } else {
      s.probe_names.push_back(fmt::format("tensoracle.calibration.{}", a));
      s.probe.mark_output(handles[a], s.probe_names.back());
    }
    s.histograms.emplace_back(o.histogram_bins);
  }
  s.runner = std::make_unique<calibrate::ProbeRunner>(s.probe, o.target);
}

Calibrator::~Calibrator() = default;

void Calibrator::add_batch(const std::map<std::string, HostTensor>& inputs) {
  State& s = *state_;
  if (s.activations.empty()) {
    ++s.batches;
    return;
  }
  std::map<std::string, HostTensor> outputs = s.runner->run(inputs);
  for (std::size_t a = 0; a < s.activations.size(); ++a) {
    const std::string& name = s.probe_names[a];
    auto it = outputs.find(name);
    if (it == outputs.end()) {  // a network input that quantized layers read: the caller's values
      auto in = inputs.find(name);
      if (in == inputs.end()) throw InvalidArgumentError(fmt::format("calibration: no values for '{}'", name));
      it = outputs.emplace(name, in->second).first;
    }
    const std::vector<float> values = cpu::to_f32(it->second);
    s.histograms[a].add(values.data(), values.size(), s.g.tensor(s.activations[a]).name.c_str());
  }
  ++s.batches;
}

std::size_t Calibrator::batches() const noexcept { return state_->batches; }

const CalibrationOptions& Calibrator::options() const noexcept { return state_->options; }

std::vector<ActivationRange> Calibrator::activation_ranges() const {
  const State& s = *state_;
  if (!s.activations.empty() && s.batches == 0) {
    throw InvalidArgumentError("calibration: no batch was added yet (Calibrator::add_batch)");
  }
  const double qmax = calibrate::quantized_max(s.options.quantized);
  std::vector<ActivationRange> ranges;
  for (std::size_t a = 0; a < s.activations.size(); ++a) {
    const auto& h = s.histograms[a];
    ActivationRange r;
    r.tensor = s.g.tensor(s.activations[a]).name;
    r.layers = s.readers.at(s.activations[a]);
    r.max_abs = h.max_abs();
    r.amax = calibrate::choose_amax(h, s.options.method, s.options.percentile, s.options.quantized);
    r.scale = r.amax > 0 ? r.amax / qmax : 1.0;
    r.values = h.total();
    ranges.push_back(std::move(r));
  }
  return ranges;
}

std::vector<WeightScales> Calibrator::weight_scales() const {
  const State& s = *state_;
  const double qmax = calibrate::quantized_max(s.options.quantized);
  std::vector<WeightScales> all;
  for (const WeightUse& w : s.weights) {
    const auto& t = s.g.tensor(w.tensor);
    const Dims dims = s.g.static_dims(w.tensor);
    HostTensor weight = builder::constant_tensor(s.g, w.tensor);
    const std::vector<float> values = cpu::to_f32(weight);
    WeightScales ws;
    ws.tensor = t.name;
    ws.layer = s.g.layers[w.layer].name;
    ws.axis = w.axis;
    const std::int64_t channels = w.axis < 0 ? 1 : dims[static_cast<int>(w.axis)];
    std::int64_t inner = 1;  // elements after the channel axis
    for (int d = static_cast<int>(w.axis) + 1; w.axis >= 0 && d < dims.rank(); ++d) inner *= dims[d];
    std::vector<double> amax(static_cast<std::size_t>(channels), 0.0);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto c = w.axis < 0 ? 0 : static_cast<std::size_t>((static_cast<std::int64_t>(i) / inner) % channels);
      if (std::isfinite(values[i])) amax[c] = std::max(amax[c], static_cast<double>(std::fabs(values[i])));
    }
    for (double a : amax) ws.scales.push_back(a > 0 ? a / qmax : 1.0);
    all.push_back(std::move(ws));
  }
  return all;
}

namespace {

// The constants a quantized network made: name -> tensor (written beside its JSON form).
using MadeConstants = std::vector<std::pair<std::string, HostTensor>>;

// The f32 scales as a host tensor: [] for one, [C] per channel.
HostTensor scale_tensor(const std::vector<double>& scales, bool per_channel) {
  HostTensor t(DataType::kF32, per_channel ? Dims{static_cast<std::int64_t>(scales.size())} : Dims{});
  for (std::size_t i = 0; i < scales.size(); ++i) t.data<float>()[i] = static_cast<float>(scales[i]);
  return t;
}

// The weight quantized as the quantize op does it (the CPU reference kernel, on a network of that one layer), so that
// the stored values are exactly what quantize(weight, scale) gives.
HostTensor quantize_weight(const HostTensor& weight, const HostTensor& scale, DataType to, std::int64_t axis) {
  Network net;
  Tensor w = net.add_constant_copy(weight.dtype, weight.shape, weight.bytes.data(), "w");
  Tensor s = net.add_constant_copy(DataType::kF32, scale.shape, scale.bytes.data(), "s");
  net.mark_output(net.add_quantize(w, s, to, axis < 0 ? 0 : axis), "q");
  return run_reference(net, {}).at("q");
}

Network build_quantized(const Calibrator& calibrator, const graph::Graph& g, MadeConstants& made) {
  const CalibrationOptions& o = calibrator.options();
  std::map<std::string, const ActivationRange*> by_tensor;
  const std::vector<ActivationRange> ranges =
      o.activations ? calibrator.activation_ranges() : std::vector<ActivationRange>{};
  for (const auto& r : ranges) by_tensor[r.tensor] = &r;
  const std::vector<WeightScales> weights = calibrator.weight_scales();
  std::map<std::string, const WeightScales*> weight_of;
  for (const auto& w : weights) weight_of[w.tensor] = &w;

  builder::GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  std::map<std::int32_t, Tensor> dequantized;  // source tensor -> its quantize-dequantize (or dequantized weight)
  auto activation = [&](std::int32_t id) {
    auto it = dequantized.find(id);
    if (it != dequantized.end()) return it->second;
    const auto& t = g.tensor(id);
    const ActivationRange& r = *by_tensor.at(t.name);
    Tensor scale = net.add_scalar(static_cast<float>(r.scale), DataType::kF32, t.name + ".scale");
    Tensor q = net.add_layer("quantize", {rewriter.get(id), scale},
                             Attributes{{"to", std::string(to_string(o.quantized))}}, t.name + ".quantize")[0];
    net.rename_tensor(q, t.name + ".quantized");
    Tensor dq = net.add_layer("dequantize", {q, scale}, Attributes{{"to", std::string(to_string(t.dtype))}},
                              t.name + ".dequantize")[0];
    net.rename_tensor(dq, t.name + ".dequantized");
    return dequantized[id] = dq;
  };
  auto weight = [&](std::int32_t id) {
    auto it = dequantized.find(id);
    if (it != dequantized.end()) return it->second;
    const auto& t = g.tensor(id);
    const WeightScales& w = *weight_of.at(t.name);
    HostTensor scale = scale_tensor(w.scales, w.axis >= 0);
    HostTensor q = quantize_weight(builder::constant_tensor(g, id), scale, o.quantized, w.axis);
    Tensor qc = net.add_constant_copy(q.dtype, q.shape, q.bytes.data(), t.name + ".quantized");
    Tensor sc = net.add_constant_copy(DataType::kF32, scale.shape, scale.bytes.data(), t.name + ".scale");
    made.emplace_back(t.name + ".quantized", std::move(q));
    made.emplace_back(t.name + ".scale", std::move(scale));
    Attributes attrs{{"to", std::string(to_string(t.dtype))}};
    if (w.axis >= 0) attrs["axis"] = w.axis;
    Tensor dq = net.add_layer("dequantize", {qc, sc}, attrs, t.name + ".dequantize")[0];
    net.rename_tensor(dq, t.name + ".dequantized");
    return dequantized[id] = dq;
  };
  for (const auto& layer : g.layers) {
    bool changed = false;
    std::vector<Tensor> inputs;
    for (std::size_t p = 0; p < layer.inputs.size(); ++p) {
      const std::int32_t id = layer.inputs[p];
      if (id < 0) {
        inputs.emplace_back();
        continue;
      }
      const auto& t = g.tensor(id);
      const bool quantized = quantized_operand(o, layer, p) || residual_operand(o, g, layer, p);
      if (quantized && t.kind == graph::TensorKind::kConstant && weight_of.count(t.name) != 0) {
        inputs.push_back(weight(id));
        changed = true;
      } else if (quantized && by_tensor.count(t.name) != 0) {
        inputs.push_back(activation(id));
        changed = true;
      } else {
        inputs.push_back(rewriter.get(id));
      }
    }
    if (changed) {
      rewriter.add_named_layer(layer, layer.op, inputs, layer.attrs);
    } else {
      rewriter.copy_layer(layer);
    }
  }
  return rewriter.finish();
}

}  // namespace

Network Calibrator::quantized_network() const {
  MadeConstants made;
  return build_quantized(*this, state_->g, made);
}

std::filesystem::path Calibrator::write_quantized_network(const std::filesystem::path& json,
                                                          const std::filesystem::path& source) const {
  MadeConstants made;
  const Network net = build_quantized(*this, state_->g, made);
  std::filesystem::path side = json;
  side.replace_extension(".safetensors");
  std::vector<TensorToWrite> tensors;
  std::set<std::string> ours;
  for (const auto& [name, t] : made) {
    tensors.push_back(t.to_write(name));
    ours.insert(name);
  }
  nlohmann::json doc = nlohmann::json::parse(net.to_json());
  const graph::Graph& g = graph::graph_of(net);
  const std::filesystem::path folder = std::filesystem::absolute(json).parent_path();
  std::vector<HostTensor> kept;  // constants of no file on disk (made in memory), written to the side file too
  kept.reserve(doc["constants"].size());
  for (auto& c : doc["constants"]) {
    if (!c.contains("weight")) continue;  // inline values
    const std::string name = c["name"].get<std::string>();
    if (ours.count(name) != 0) {
      c["file"] = side.filename().string();
      continue;
    }
    std::filesystem::path file = c.value("file", std::string());
    if (file.is_relative() && !source.empty()) file = std::filesystem::absolute(source).parent_path() / file;
    if (!file.empty() && std::filesystem::is_regular_file(file)) {
      c["file"] = std::filesystem::relative(std::filesystem::absolute(file), folder).generic_string();
      continue;
    }
    kept.push_back(builder::constant_tensor(g, g.tensor_by_name.at(name)));
    tensors.push_back(kept.back().to_write(c["weight"].get<std::string>()));
    c["file"] = side.filename().string();
  }
  write_safetensors(side, tensors);
  const std::string text = doc.dump(2) + "\n";
  write_file_atomically(json, text.data(), text.size());
  return side;
}

}  // namespace tensoracle
