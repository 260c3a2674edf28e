// The plugin op: a layer whose outputs a loaded plugin library's creator defines (dtypes and shapes as expressions of
// the inputs' dims), its fields in the plugin interface's form, and the builder's and backends' questions to it.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "graph/op_def.hpp"
#include "graph/plugin_layer.hpp"

namespace tensoracle::graph {

#define TENSORACLE_X(e, name, st, size) \
  static_assert(static_cast<int>(DataType::e) == static_cast<int>(plugin::DType::e), "plugin::DType numbering");
TENSORACLE_DATA_TYPES(TENSORACLE_X)
#undef TENSORACLE_X

namespace {

plugin::DType to_plugin(DataType t) { return static_cast<plugin::DType>(static_cast<int>(t)); }

std::optional<DataType> from_plugin(plugin::DType t) {
  const int v = static_cast<int>(t);
  if (v < 0 || v >= kNumDataTypes) return std::nullopt;
  return static_cast<DataType>(v);
}

// The creator's view of the inputs and its dimension expressions, over one DimPool.
class PoolShapeBuilder final : public plugin::ShapeBuilder {
 public:
  PoolShapeBuilder(DimPool& pool, const std::vector<TensorType>& inputs) : pool_(pool), inputs_(inputs) {}

  std::int32_t input_count() const noexcept override { return static_cast<std::int32_t>(inputs_.size()); }
  std::int32_t input_rank(std::int32_t input) const noexcept override {
    return in_range(input) ? inputs_[static_cast<std::size_t>(input)].rank() : -1;
  }
  plugin::DType input_dtype(std::int32_t input) const noexcept override {
    return in_range(input) ? to_plugin(inputs_[static_cast<std::size_t>(input)].dtype) : plugin::DType::kF32;
  }
  plugin::DimExpr input_dim(std::int32_t input, std::int32_t axis) noexcept override {
    if (!in_range(input) || axis < 0 || axis >= input_rank(input)) return -1;
    return inputs_[static_cast<std::size_t>(input)].shape[static_cast<std::size_t>(axis)];
  }
  plugin::DimExpr constant(std::int64_t value) noexcept override {
    try {
      return pool_.constant(value);
    } catch (...) {
      return -1;
    }
  }
  plugin::DimExpr operation(plugin::DimOperation op, plugin::DimExpr a, plugin::DimExpr b) noexcept override {
    if (!valid(a) || !valid(b)) return -1;
    try {
      switch (op) {
        case plugin::DimOperation::kAdd: return pool_.add(a, b);
        case plugin::DimOperation::kSub: return pool_.sub(a, b);
        case plugin::DimOperation::kMul: return pool_.mul(a, b);
        case plugin::DimOperation::kFloorDiv: return pool_.floor_div(a, b);
        case plugin::DimOperation::kCeilDiv: return pool_.ceil_div(a, b);
        case plugin::DimOperation::kMax: return pool_.max(a, b);
        case plugin::DimOperation::kMin: return pool_.min(a, b);
      }
    } catch (...) {
    }
    return -1;
  }
  bool constant_value(plugin::DimExpr expr, std::int64_t* value) const noexcept override {
    if (!valid(expr) || value == nullptr) return false;
    const auto v = pool_.value(expr);
    if (v) *value = *v;
    return v.has_value();
  }
  bool valid(plugin::DimExpr e) const noexcept { return e >= 0 && static_cast<std::size_t>(e) < pool_.size(); }

 private:
  bool in_range(std::int32_t input) const noexcept {
    return input >= 0 && static_cast<std::size_t>(input) < inputs_.size();
  }
  DimPool& pool_;
  const std::vector<TensorType>& inputs_;
};

// The creator's outputs for these inputs, checked; `fail` reports a problem (and does not return).
template <typename Fail>
std::vector<OutputType> creator_outputs(const plugins::RegisteredPlugin& plugin, const Attributes& attrs, DimPool& pool,
                                        const std::vector<TensorType>& inputs, const Fail& fail) {
  for (const auto& t : inputs) {
    if (t.rank() > plugin::kMaxRank)
      fail(fmt::format("input '{}' has rank {}; plugin layers take at most rank {}", t.name, t.rank(),
                       plugin::kMaxRank));
  }
  const PluginFieldSet fields(attrs);
  PoolShapeBuilder shapes(pool, inputs);
  plugin::OutputDesc outs[plugin::kMaxOutputs] = {};
  std::int32_t count = 0;
  PluginErrorSink error;
  if (!plugin.creator->infer_outputs(fields.fields(), shapes, outs, plugin::kMaxOutputs, &count, error))
    fail(fmt::format("plugin '{}' version '{}' refuses the layer: {}", plugin.info.type, plugin.info.version,
                     error.text()));
  if (count < 1 || count > plugin::kMaxOutputs)
    fail(fmt::format("plugin '{}' version '{}' declared {} outputs (1 to {} allowed)", plugin.info.type,
                     plugin.info.version, count, plugin::kMaxOutputs));
  std::vector<OutputType> result;
  for (std::int32_t o = 0; o < count; ++o) {
    const plugin::OutputDesc& d = outs[o];
    const auto dtype = from_plugin(d.dtype);
    if (!dtype || d.rank < 0 || d.rank > plugin::kMaxRank)
      fail(fmt::format("plugin '{}' version '{}' declared output {} with an invalid dtype ({}) or rank ({})",
                       plugin.info.type, plugin.info.version, o, static_cast<int>(d.dtype), d.rank));
    OutputType out{*dtype, {}};
    for (std::int32_t k = 0; k < d.rank; ++k) {
      if (!shapes.valid(d.dims[k]))
        fail(fmt::format("plugin '{}' version '{}' declared dim {} of output {} with an invalid expression",
                         plugin.info.type, plugin.info.version, k, o));
      const auto value = pool.value(d.dims[k]);
      if (value && *value < 0)
        fail(fmt::format("plugin '{}' version '{}' declared dim {} of output {} as {}, which is negative",
                         plugin.info.type, plugin.info.version, k, o, *value));
      out.shape.push_back(d.dims[k]);
    }
    result.push_back(std::move(out));
  }
  return result;
}

std::vector<OutputType> infer_plugin(InferContext& ctx) {
  const plugins::RegisteredPlugin& plugin = plugin_of(ctx);
  std::vector<TensorType> inputs;
  for (std::size_t i = 0; i < ctx.num_inputs(); ++i) inputs.push_back(ctx.input(i, "plugin input"));
  return creator_outputs(plugin, ctx.attrs(), ctx.dims(), inputs,
                         [&](const std::string& message) { ctx.fail(message); });
}

}  // namespace

Attributes plugin_attributes(const std::string& type, const std::string& version,
                             const std::vector<PluginField>& fields) {
  Attributes attrs{{"type", type}, {"version", version}};
  std::string order;
  std::set<std::string> seen;
  for (const auto& f : fields) {
    if (!plugins::valid_plugin_name(f.name))
      throw GraphError(
          fmt::format("plugin '{}' field '{}': field names are letters, digits, '_', '.' and '-'", type, f.name));
    if (!seen.insert(f.name).second)
      throw GraphError(fmt::format("plugin '{}': field '{}' is given twice", type, f.name));
    if (!order.empty()) order += ',';
    order += f.name;
    attrs[std::string(kPluginFieldPrefix) + f.name] = f.value;
  }
  attrs[std::string(kPluginFieldOrder)] = order;
  return attrs;
}

PluginFieldSet::PluginFieldSet(const Attributes& attrs) {
  auto order = attrs.find(std::string(kPluginFieldOrder));
  std::vector<std::string> names;
  if (order != attrs.end() && std::holds_alternative<std::string>(order->second)) {
    const std::string& list = std::get<std::string>(order->second);
    std::size_t start = 0;
    while (start < list.size()) {
      std::size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      names.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  // Fields the order doesn't list (a hand-written JSON form) follow in name order.
  for (const auto& [key, value] : attrs) {
    if (key.rfind(kPluginFieldPrefix, 0) != 0) continue;
    std::string name = key.substr(kPluginFieldPrefix.size());
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  }
  names_.reserve(names.size());
  for (auto& name : names) {
    auto it = attrs.find(std::string(kPluginFieldPrefix) + name);
    if (it == attrs.end()) continue;
    names_.push_back(std::move(name));
    plugin::Field f{names_.back().c_str(), plugin::FieldType::kInt64, nullptr, 1};
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::int64_t>) {
            f = {f.name, plugin::FieldType::kInt64, &v, 1};
          } else if constexpr (std::is_same_v<V, double>) {
            f = {f.name, plugin::FieldType::kFloat64, &v, 1};
          } else if constexpr (std::is_same_v<V, std::string>) {
            f = {f.name, plugin::FieldType::kString, v.c_str(), static_cast<std::int64_t>(v.size())};
          } else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>) {
            f = {f.name, plugin::FieldType::kInt64s, v.data(), static_cast<std::int64_t>(v.size())};
          } else {
            f = {f.name, plugin::FieldType::kFloat64s, v.data(), static_cast<std::int64_t>(v.size())};
          }
        },
        it->second);
    items_.push_back(f);
  }
}

void PluginErrorSink::set(const char* message) noexcept {
  try {
    message_ = message != nullptr ? message : "";
  } catch (...) {
  }
}

std::string PluginErrorSink::text() const {
  return message_.empty() ? std::string("(the plugin gave no reason)") : message_;
}

const plugins::RegisteredPlugin& plugin_of(const AttrReader& attrs) {
  const std::string type = attrs.get_string("type");
  const std::string version = attrs.get_string("version");
  const plugins::RegisteredPlugin* plugin = plugins::find_plugin(type, version);
  if (plugin == nullptr) {
    attrs.fail(fmt::format(
        "no loaded plugin library provides plugin '{}' version '{}' (loaded: {}); load the library that does "
        "(BuilderConfig::plugin_libraries, open_engine's plugin_libraries, load_plugin_library, --plugin LIB)",
        type, version, plugins::loaded_plugins_summary()));
  }
  return *plugin;
}

const plugins::RegisteredPlugin& plugin_of(const Layer& layer) {
  return plugin_of(AttrReader(layer.attrs, layer.name, layer.op));
}

plugin::TensorDesc plugin_tensor_desc(DataType dtype, const Dims& dims) {
  plugin::TensorDesc d{};
  d.dtype = to_plugin(dtype);
  d.format = plugin::Format::kLinear;
  d.rank = std::min<std::int32_t>(dims.rank(), plugin::kMaxRank);
  for (std::int32_t k = 0; k < d.rank; ++k) d.dims[k] = dims[k];
  return d;
}

std::vector<plugin::TensorDesc> plugin_tensor_descs(const Graph& graph, const std::vector<std::int32_t>& ids,
                                                    const std::vector<Dims>* shapes) {
  std::vector<plugin::TensorDesc> descs;
  for (auto id : ids) {
    plugin::TensorDesc d{};
    d.format = plugin::Format::kLinear;
    if (id < 0) {
      d.rank = -1;
      descs.push_back(d);
      continue;
    }
    descs.push_back(plugin_tensor_desc(
        graph.tensor(id).dtype, shapes != nullptr ? (*shapes)[static_cast<std::size_t>(id)] : graph.static_dims(id)));
  }
  return descs;
}

bool plugin_supports(const Graph& graph, const Layer& layer, plugin::Device device) {
  const plugins::RegisteredPlugin& plugin = plugin_of(layer);
  const PluginFieldSet fields(layer.attrs);
  const auto ins = plugin_tensor_descs(graph, layer.inputs);
  const auto outs = plugin_tensor_descs(graph, layer.outputs);
  return plugin.creator->supports(fields.fields(), device, ins.data(), static_cast<std::int32_t>(ins.size()),
                                  outs.data(), static_cast<std::int32_t>(outs.size()));
}

std::optional<std::vector<DataType>> plugin_supports_dtypes(const Graph& graph, const Layer& layer,
                                                            const std::vector<DataType>& input_dtypes,
                                                            plugin::Device device) {
  const plugins::RegisteredPlugin& plugin = plugin_of(layer);
  DimPool pool = graph.dims;  // a copy: expressions made here stay out of the graph
  std::vector<TensorType> inputs;
  for (std::size_t i = 0; i < layer.inputs.size(); ++i) {
    const TensorData& t = graph.tensor(layer.inputs[i]);
    inputs.push_back(TensorType{t.name, input_dtypes.at(i), t.shape});
  }
  struct Refused {};
  std::vector<OutputType> outputs;
  try {
    outputs = creator_outputs(plugin, layer.attrs, pool, inputs, [](const std::string&) { throw Refused{}; });
  } catch (const Refused&) {
    return std::nullopt;
  }
  auto describe = [&](DataType dtype, const std::vector<DimId>& shape) {
    plugin::TensorDesc d{};
    d.dtype = to_plugin(dtype);
    d.format = plugin::Format::kLinear;
    d.rank = static_cast<std::int32_t>(shape.size());
    for (std::size_t k = 0; k < shape.size(); ++k) d.dims[k] = pool.value(shape[k]).value_or(-1);
    return d;
  };
  std::vector<plugin::TensorDesc> ins, outs;
  std::vector<DataType> out_dtypes;
  for (const auto& t : inputs) ins.push_back(describe(t.dtype, t.shape));
  for (const auto& o : outputs) {
    outs.push_back(describe(o.dtype, o.shape));
    out_dtypes.push_back(o.dtype);
  }
  const PluginFieldSet fields(layer.attrs);
  if (!plugin.creator->supports(fields.fields(), device, ins.data(), static_cast<std::int32_t>(ins.size()), outs.data(),
                                static_cast<std::int32_t>(outs.size())))
    return std::nullopt;
  return out_dtypes;
}

std::string plugin_unsupported_message(const Graph& graph, const Layer& layer, const std::string& device) {
  const plugins::RegisteredPlugin& plugin = plugin_of(layer);
  auto dtypes = [&](const std::vector<std::int32_t>& ids) {
    std::vector<std::string> names;
    for (auto id : ids) names.emplace_back(id < 0 ? "-" : to_string(graph.tensor(id).dtype));
    return fmt::format("{}", fmt::join(names, ", "));
  };
  return fmt::format(
      "layer '{}': plugin '{}' version '{}' (library {}) has no {} implementation for inputs ({}) and outputs ({}); "
      "build for a target the plugin supports, or give the layer dtypes it takes",
      layer.name, plugin.info.type, plugin.info.version, plugin.info.library.string(), device, dtypes(layer.inputs),
      dtypes(layer.outputs));
}

std::size_t plugin_workspace_bytes(const Graph& graph, const Layer& layer, const std::vector<Dims>& shapes,
                                   plugin::Device device) {
  const plugins::RegisteredPlugin& plugin = plugin_of(layer);
  const PluginFieldSet fields(layer.attrs);
  const auto ins = plugin_tensor_descs(graph, layer.inputs, &shapes);
  const auto outs = plugin_tensor_descs(graph, layer.outputs, &shapes);
  return plugin.creator->workspace_bytes(fields.fields(), device, ins.data(), static_cast<std::int32_t>(ins.size()),
                                         outs.data(), static_cast<std::int32_t>(outs.size()));
}

bool allows_attribute(const OpDef& def, std::string_view key) {
  if (def.name == "plugin" && key.size() > kPluginFieldPrefix.size() &&
      key.substr(0, kPluginFieldPrefix.size()) == kPluginFieldPrefix)
    return true;
  return std::find(def.attributes.begin(), def.attributes.end(), key) != def.attributes.end();
}

void register_plugin_ops(std::vector<OpDef>& ops) {
  ops.push_back(OpDef{"plugin",
                      0,
                      -1,
                      {"type", "version", "field_names"},
                      infer_plugin,
                      "a layer computed by a loaded plugin library (type, version, fields f:NAME)"});
}

}  // namespace tensoracle::graph
