// Network: inputs, constants, generic layers with immediate shape inference, outputs, queries and verification.
#include "tensoracle/network.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <set>
#include <vector>

#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "graph/shape_eval.hpp"

namespace tensoracle {

using graph::DimId;
using graph::Graph;
using graph::TensorData;
using graph::TensorKind;

Network::Network() : graph_(std::make_unique<Graph>()) {}
Network::~Network() = default;
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;

namespace {

constexpr std::size_t kMaxInlineElements = 4096;

void check_tensor_name(const Graph& g, const std::string& name, const char* what) {
  if (name.empty()) throw GraphError(fmt::format("{} needs a non-empty name", what));
  if (g.tensor_by_name.count(name) != 0) {
    throw GraphError(fmt::format("{} '{}': a tensor of that name already exists; names must be unique", what, name));
  }
}

const TensorData& checked(const Graph& g, Tensor t, const char* what) {
  if (t.id < 0 || static_cast<std::size_t>(t.id) >= g.tensors.size()) {
    throw GraphError(fmt::format("{}: the tensor handle is invalid or from another network", what));
  }
  return g.tensor(t.id);
}

std::int32_t add_tensor(Graph& g, TensorData data) {
  auto id = static_cast<std::int32_t>(g.tensors.size());
  g.tensor_by_name.emplace(data.name, id);
  g.tensors.push_back(std::move(data));
  return id;
}

std::string default_name(Graph& g, const std::string& prefix) {
  for (;;) {
    std::string name = fmt::format("{}_{}", prefix, g.op_counters[prefix]++);
    if (g.tensor_by_name.count(name) == 0 && g.layer_by_name.count(name) == 0) return name;
  }
}

}  // namespace

Tensor Network::add_input(const std::string& name, DataType dtype, const Dims& dims) {
  Graph& g = *graph_;
  check_tensor_name(g, name, "input");
  TensorData t;
  t.name = name;
  t.dtype = dtype;
  t.kind = TensorKind::kInput;
  t.input_index = static_cast<std::int32_t>(g.inputs.size());
  t.declared_dims = dims;
  for (int a = 0; a < dims.rank(); ++a) {
    if (dims[a] < -1)
      throw GraphError(fmt::format("input '{}': dimension {} is {}; use -1 for dynamic", name, a, dims[a]));
    t.shape.push_back(dims[a] == Dims::kDynamic ? g.dims.symbol(t.input_index, a) : g.dims.constant(dims[a]));
  }
  auto id = add_tensor(g, std::move(t));
  g.inputs.push_back(id);
  return Tensor{id};
}

Tensor Network::add_constant(const TensorView& weight, const std::string& name) {
  if (weight.info == nullptr || (weight.data == nullptr && weight.byte_size() != 0))
    throw GraphError("add_constant: the weight view is empty");
  Graph& g = *graph_;
  TensorData t;
  t.name = name.empty() ? weight.name() : name;
  check_tensor_name(g, t.name, "constant");
  t.dtype = weight.dtype();
  t.kind = TensorKind::kConstant;
  for (auto d : weight.shape()) t.shape.push_back(g.dims.constant(d));
  t.weight = weight;
  t.weight_name = weight.name();
  t.weight_file = weight.file ? weight.file->path() : std::string();  // engine-owned weights have no file
  return Tensor{add_tensor(g, std::move(t))};
}

namespace {

// A copied constant's bytes in safetensors form, with the file that validates and views them. The view handed to
// the graph shares ownership of this object (shared_ptr aliasing), so the bytes live as long as the network needs
// them.
struct OwnedSafetensors {
  std::vector<std::byte> bytes;
  std::shared_ptr<const SafetensorsFile> file;
};

}  // namespace

Tensor Network::add_constant_copy(DataType dtype, const Dims& dims, const void* data, const std::string& name) {
  Graph& g = *graph_;
  const std::string tensor_name = name.empty() ? default_name(g, "const") : name;
  check_tensor_name(g, tensor_name, "constant");
  if (!dims.is_static() || dims.volume() < 0)
    throw GraphError(fmt::format("constant '{}': shape {} must be static", tensor_name, dims.to_string()));
  if (data == nullptr && dims.volume() != 0)
    throw GraphError(fmt::format("constant '{}': no data for shape {}", tensor_name, dims.to_string()));
  auto owned = std::make_shared<OwnedSafetensors>();
  owned->bytes = serialize_safetensors({TensorToWrite{tensor_name, dtype, dims, data}});
  owned->file =
      SafetensorsFile::from_bytes(owned->bytes.data(), owned->bytes.size(), "in-memory constant " + tensor_name);
  TensorView view = owned->file->get(tensor_name);
  view.file = std::shared_ptr<const SafetensorsFile>(owned, owned->file.get());
  return add_constant(view, tensor_name);
}

Tensor Network::add_scalar(double value, DataType dtype, const std::string& name) {
  return add_small_constant({value}, dtype, Dims{}, name);
}

Tensor Network::add_small_constant(const std::vector<double>& values, DataType dtype, const Dims& dims,
                                   const std::string& name) {
  Graph& g = *graph_;
  std::string tensor_name = name.empty() ? default_name(g, "const") : name;
  check_tensor_name(g, tensor_name, "constant");
  if (!dims.is_static())
    throw GraphError(fmt::format("constant '{}': shape {} must be static", tensor_name, dims.to_string()));
  if (static_cast<std::size_t>(dims.volume()) != values.size()) {
    throw GraphError(
        fmt::format("constant '{}': {} values given for shape {}", tensor_name, values.size(), dims.to_string()));
  }
  if (values.size() > kMaxInlineElements) {
    throw GraphError(fmt::format(
        "constant '{}': {} elements is too many for an inline constant (at most {}); store it in a weight file",
        tensor_name, values.size(), kMaxInlineElements));
  }
  TensorData t;
  t.name = tensor_name;
  t.dtype = dtype;
  t.kind = TensorKind::kConstant;
  for (auto d : dims) t.shape.push_back(g.dims.constant(d));
  t.values = values;
  t.inline_constant = true;
  return Tensor{add_tensor(g, std::move(t))};
}

void Network::mark_output(Tensor tensor, const std::string& name) {
  Graph& g = *graph_;
  checked(g, tensor, "mark_output");
  TensorData& t = g.tensor(tensor.id);
  if (t.kind != TensorKind::kLayerOutput) {
    throw GraphError(fmt::format("mark_output '{}': tensor '{}' is a network {}, not a layer output", name, t.name,
                                 t.kind == TensorKind::kInput ? "input" : "constant"));
  }
  if (std::find(g.outputs.begin(), g.outputs.end(), tensor.id) != g.outputs.end()) {
    throw GraphError(fmt::format("mark_output '{}': tensor '{}' is already an output", name, t.name));
  }
  if (name != t.name) {
    check_tensor_name(g, name, "output");
    g.tensor_by_name.erase(t.name);
    t.name = name;
    g.tensor_by_name.emplace(name, tensor.id);
  }
  g.outputs.push_back(tensor.id);
}

void Network::rename_tensor(Tensor tensor, const std::string& name) {
  Graph& g = *graph_;
  checked(g, tensor, "rename_tensor");
  TensorData& t = g.tensor(tensor.id);
  if (t.kind != TensorKind::kLayerOutput) {
    throw GraphError(fmt::format("rename_tensor '{}': tensor '{}' is a network {}, not a layer output", name, t.name,
                                 t.kind == TensorKind::kInput ? "input" : "constant"));
  }
  if (name == t.name) return;
  check_tensor_name(g, name, "tensor");
  g.tensor_by_name.erase(t.name);
  t.name = name;
  g.tensor_by_name.emplace(name, tensor.id);
}

std::vector<Tensor> Network::add_layer(const std::string& op, const std::vector<Tensor>& inputs,
                                       const Attributes& attrs, const std::string& name) {
  Graph& g = *graph_;
  const graph::OpDef* def = graph::find_op(op);
  std::string layer_name = name.empty() ? default_name(g, op) : name;
  if (def == nullptr)
    throw GraphError(fmt::format("layer '{}': unknown op '{}' (docs/network-json.md lists the ops)", layer_name, op));
  if (g.layer_by_name.count(layer_name) != 0)
    throw GraphError(fmt::format("layer '{}': a layer of that name already exists", layer_name));
  const auto n = static_cast<int>(inputs.size());
  if (n < def->min_inputs || (def->max_inputs >= 0 && n > def->max_inputs)) {
    throw GraphError(fmt::format("layer '{}' ({}): takes {} inputs, {} given", layer_name, op,
                                 def->max_inputs < 0 ? fmt::format("at least {}", def->min_inputs)
                                 : def->min_inputs == def->max_inputs
                                     ? std::to_string(def->min_inputs)
                                     : fmt::format("{} to {}", def->min_inputs, def->max_inputs),
                                 n));
  }
  for (const auto& [key, value] : attrs) {
    if (!graph::allows_attribute(*def, key)) {
      throw GraphError(fmt::format(
          "layer '{}' ({}): unknown attribute '{}' (allowed: {})", layer_name, op, key,
          def->attributes.empty() ? std::string("none") : fmt::format("{}", fmt::join(def->attributes, ", "))));
    }
  }
  std::vector<std::optional<graph::TensorType>> types;
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].valid()) {
      types.emplace_back(std::nullopt);
      ids.push_back(-1);
      continue;
    }
    const TensorData& t = checked(g, inputs[i], "add_layer");
    types.emplace_back(graph::TensorType{t.name, t.dtype, t.shape});
    ids.push_back(inputs[i].id);
  }
  graph::InferContext ctx(attrs, layer_name, op, std::move(types), g.dims);
  std::vector<graph::OutputType> outputs = def->infer(ctx);

  // Everything checked: commit the layer and its outputs.
  graph::Layer layer;
  layer.name = layer_name;
  layer.op = op;
  layer.def = def;
  layer.inputs = std::move(ids);
  layer.attrs = attrs;
  const auto layer_index = static_cast<std::int32_t>(g.layers.size());
  std::vector<std::string> out_names;
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    std::string out_name = outputs.size() == 1 ? layer_name : fmt::format("{}:{}", layer_name, o);
    if (g.tensor_by_name.count(out_name) != 0) {
      throw GraphError(
          fmt::format("layer '{}' ({}): its output would be named '{}', which another tensor already has; name the "
                      "layer differently",
                      layer_name, op, out_name));
    }
    out_names.push_back(std::move(out_name));
  }
  std::vector<Tensor> result;
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    TensorData t;
    t.name = out_names[o];
    t.dtype = outputs[o].dtype;
    t.shape = std::move(outputs[o].shape);
    t.kind = TensorKind::kLayerOutput;
    t.producer = layer_index;
    auto id = add_tensor(g, std::move(t));
    layer.outputs.push_back(id);
    result.push_back(Tensor{id});
  }
  g.layer_by_name.emplace(layer_name, layer_index);
  g.layers.push_back(std::move(layer));
  return result;
}

// ---- queries ----

std::string Network::name(Tensor t) const { return checked(*graph_, t, "name").name; }
DataType Network::dtype(Tensor t) const { return checked(*graph_, t, "dtype").dtype; }
Dims Network::shape(Tensor t) const {
  checked(*graph_, t, "shape");
  return graph_->static_dims(t.id);
}
std::string Network::dim_expression(Tensor t, int axis) const {
  const TensorData& data = checked(*graph_, t, "dim_expression");
  if (axis < 0 || static_cast<std::size_t>(axis) >= data.shape.size()) {
    throw InvalidArgumentError(fmt::format("dim_expression: axis {} is out of range for '{}'", axis, data.name));
  }
  return graph_->dims.to_string(data.shape[static_cast<std::size_t>(axis)], graph_->input_names());
}
Tensor Network::find(const std::string& tensor_name) const {
  auto it = graph_->tensor_by_name.find(tensor_name);
  return it == graph_->tensor_by_name.end() ? Tensor{} : Tensor{it->second};
}
std::vector<Tensor> Network::inputs() const {
  std::vector<Tensor> out;
  for (auto id : graph_->inputs) out.push_back(Tensor{id});
  return out;
}
std::vector<Tensor> Network::outputs() const {
  std::vector<Tensor> out;
  for (auto id : graph_->outputs) out.push_back(Tensor{id});
  return out;
}
std::size_t Network::num_layers() const { return graph_->layers.size(); }

void Network::verify() const {
  const Graph& g = *graph_;
  if (g.outputs.empty()) throw GraphError("the network has no outputs; mark at least one with mark_output");
  std::set<std::int32_t> used;
  for (const auto& layer : g.layers) used.insert(layer.inputs.begin(), layer.inputs.end());
  for (auto id : g.inputs) {
    if (used.count(id) == 0)
      throw GraphError(fmt::format("input '{}' is not used by any layer; remove it", g.tensor(id).name));
  }
}

std::map<std::string, Dims> Network::infer_shapes(const std::map<std::string, Dims>& input_shapes) const {
  const Graph& g = *graph_;
  std::vector<Dims> ordered;
  for (auto id : g.inputs) {
    auto it = input_shapes.find(g.tensor(id).name);
    if (it == input_shapes.end())
      throw GraphError(fmt::format("input '{}' has no shape; every input must be given", g.tensor(id).name));
    ordered.push_back(it->second);
  }
  for (const auto& [name, dims] : input_shapes) {
    auto it = g.tensor_by_name.find(name);
    if (it == g.tensor_by_name.end() || g.tensor(it->second).kind != TensorKind::kInput) {
      throw GraphError(fmt::format("'{}' is not an input of the network", name));
    }
  }
  std::vector<Dims> shapes = graph::evaluate_shapes(g, ordered);
  std::map<std::string, Dims> out;
  for (std::size_t i = 0; i < g.tensors.size(); ++i) out.emplace(g.tensors[i].name, shapes[i]);
  return out;
}

}  // namespace tensoracle
