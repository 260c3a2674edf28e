// The JSON form of a Network: writing, and rebuilding with cycle and reference checks (docs/network-json.md).
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "graph/graph.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle {
namespace {

using Json = nlohmann::ordered_json;
constexpr const char* kFormat = "tensoracle-network";
constexpr int kVersion = 1;

Json number_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::optional<double> number_from_json(const Json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
  }
  return std::nullopt;
}

Json attr_json(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> Json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, double>) {
          return number_json(v);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          Json list = Json::array();
          for (double d : v) list.push_back(number_json(d));
          return list;
        } else {
          return v;
        }
      },
      value);
}

AttrValue attr_from_json(const Json& j, const std::string& where) {
  if (j.is_boolean()) return static_cast<std::int64_t>(j.get<bool>() ? 1 : 0);
  if (j.is_number_integer()) return j.get<std::int64_t>();
  if (j.is_number_float()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array()) {
    bool all_int = true;
    for (const auto& e : j) {
      if (!e.is_number_integer()) all_int = false;
    }
    if (all_int) return j.get<std::vector<std::int64_t>>();
    std::vector<double> values;
    for (const auto& e : j) {
      auto d = number_from_json(e);
      if (!d) throw GraphError(fmt::format("network JSON: {}: list elements must be numbers", where));
      values.push_back(*d);
    }
    return values;
  }
  throw GraphError(
      fmt::format("network JSON: {}: attribute values must be numbers, strings or lists of numbers", where));
}

const Json& field(const Json& object, const char* key, const std::string& where) {
  if (!object.is_object() || !object.contains(key))
    throw GraphError(fmt::format("network JSON: {}: missing '{}'", where, key));
  return object[key];
}

std::string string_field(const Json& object, const char* key, const std::string& where) {
  const Json& v = field(object, key, where);
  if (!v.is_string()) throw GraphError(fmt::format("network JSON: {}: '{}' must be a string", where, key));
  return v.get<std::string>();
}

DataType dtype_field(const Json& object, const std::string& where) {
  std::string name = string_field(object, "dtype", where);
  auto type = data_type_from_string(name);
  if (!type) throw GraphError(fmt::format("network JSON: {}: unknown dtype '{}'", where, name));
  return *type;
}

Dims shape_field(const Json& object, const std::string& where) {
  const Json& v = field(object, "shape", where);
  if (!v.is_array()) throw GraphError(fmt::format("network JSON: {}: 'shape' must be a list of integers", where));
  std::vector<std::int64_t> dims;
  for (const auto& d : v) {
    if (!d.is_number_integer())
      throw GraphError(fmt::format("network JSON: {}: 'shape' must be a list of integers", where));
    dims.push_back(d.get<std::int64_t>());
  }
  return Dims(std::move(dims));
}

}  // namespace

std::string Network::to_json() const {
  const graph::Graph& g = *graph_;
  Json out;
  out["format"] = kFormat;
  out["version"] = kVersion;
  Json inputs = Json::array();
  for (auto id : g.inputs) {
    const auto& t = g.tensor(id);
    inputs.push_back(Json{
        {"name", t.name}, {"dtype", std::string(tensoracle::to_string(t.dtype))}, {"shape", t.declared_dims.values()}});
  }
  out["inputs"] = std::move(inputs);
  Json constants = Json::array();
  for (const auto& t : g.tensors) {
    if (t.kind != graph::TensorKind::kConstant) continue;
    if (t.inline_constant) {
      Json values = Json::array();
      for (double v : t.values) values.push_back(number_json(v));
      constants.push_back(Json{{"name", t.name},
                               {"dtype", std::string(tensoracle::to_string(t.dtype))},
                               {"shape", g.static_dims(g.tensor_by_name.at(t.name)).values()},
                               {"values", std::move(values)}});
    } else {
      constants.push_back(Json{{"name", t.name}, {"weight", t.weight_name}, {"file", t.weight_file}});
    }
  }
  out["constants"] = std::move(constants);
  Json layers = Json::array();
  for (const auto& layer : g.layers) {
    Json l;
    l["name"] = layer.name;
    l["op"] = layer.op;
    Json ins = Json::array();
    for (auto id : layer.inputs) ins.push_back(id < 0 ? Json(nullptr) : Json(g.tensor(id).name));
    l["inputs"] = std::move(ins);
    Json outs = Json::array();
    for (auto id : layer.outputs) outs.push_back(g.tensor(id).name);
    l["outputs"] = std::move(outs);
    Json attrs = Json::object();
    for (const auto& [key, value] : layer.attrs) attrs[key] = attr_json(value);
    l["attrs"] = std::move(attrs);
    layers.push_back(std::move(l));
  }
  out["layers"] = std::move(layers);
  Json outputs = Json::array();
  for (auto id : g.outputs) outputs.push_back(g.tensor(id).name);
  out["outputs"] = std::move(outputs);
  return out.dump(2) + "\n";
}

Network Network::from_json(std::string_view text, const WeightStore& weights) {
  return from_json(text, [&weights](const std::string& weight, const std::string&) -> std::optional<TensorView> {
    if (!weights.contains(weight)) return std::nullopt;
    return weights.get(weight);
  });
}

// Every field is checked before use; a JSON value of a type no check foresaw is still a GraphError, never a crash
// (the function-try-block below).
Network Network::from_json(std::string_view text, const WeightResolver& resolve_weight) try {
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    throw GraphError(fmt::format("network JSON is not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) throw GraphError("network JSON must be an object");
  if (!doc.contains("format") || !doc["format"].is_string() || doc["format"].get<std::string>() != kFormat)
    throw GraphError(fmt::format("network JSON: 'format' must be \"{}\"", kFormat));
  if (!doc.contains("version") || doc["version"] != kVersion) {
    throw GraphError(fmt::format("network JSON: unsupported 'version' (this build reads version {})", kVersion));
  }
  for (const char* key : {"inputs", "constants", "layers", "outputs"}) {
    if (!doc.contains(key) || !doc[key].is_array())
      throw GraphError(fmt::format("network JSON: '{}' must be a list", key));
  }
  Network net;
  for (const auto& in : doc["inputs"]) {
    std::string where = "input";
    std::string name = string_field(in, "name", where);
    where = fmt::format("input '{}'", name);
    net.add_input(name, dtype_field(in, where), shape_field(in, where));
  }
  for (const auto& c : doc["constants"]) {
    std::string name = string_field(c, "name", "constant");
    std::string where = fmt::format("constant '{}'", name);
    if (c.contains("values")) {
      std::vector<double> values;
      if (!c["values"].is_array()) throw GraphError(fmt::format("network JSON: {}: 'values' must be a list", where));
      for (const auto& v : c["values"]) {
        auto d = number_from_json(v);
        if (!d) throw GraphError(fmt::format("network JSON: {}: 'values' must hold numbers", where));
        values.push_back(*d);
      }
      net.add_small_constant(values, dtype_field(c, where), shape_field(c, where), name);
    } else {
      std::string weight = string_field(c, "weight", where);
      std::string file = c.contains("file") && c["file"].is_string() ? c["file"].get<std::string>() : std::string();
      std::optional<TensorView> view = resolve_weight(weight, file);
      if (!view) {
        throw NotFoundError(fmt::format("network JSON: {}: weight '{}'{} is not in the weight files given", where,
                                        weight, file.empty() ? std::string() : fmt::format(" (recorded in {})", file)));
      }
      Tensor t = net.add_constant(*view, name);
      net.graph_->tensor(t.id).weight_file = file.empty() ? net.graph_->tensor(t.id).weight_file : file;
    }
  }

  // Layers may be listed in any order: sort them by their dependencies, reporting cycles.
  const Json& layers = doc["layers"];
  std::map<std::string, std::size_t> producer;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Json& l = layers[i];
    std::string where = fmt::format("layer {}", i);
    std::string name = string_field(l, "name", where);
    const Json& outs = field(l, "outputs", fmt::format("layer '{}'", name));
    if (!outs.is_array()) throw GraphError(fmt::format("network JSON: layer '{}': 'outputs' must be a list", name));
    for (const auto& o : outs) {
      if (!o.is_string()) throw GraphError(fmt::format("network JSON: layer '{}': output names must be strings", name));
      if (!producer.emplace(o.get<std::string>(), i).second || net.find(o.get<std::string>()).valid()) {
        throw GraphError(
            fmt::format("network JSON: layer '{}': tensor name '{}' is used twice", name, o.get<std::string>()));
      }
    }
  }
  std::vector<std::vector<std::size_t>> dependents(layers.size());
  std::vector<int> pending(layers.size(), 0);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Json& l = layers[i];
    std::string name = l["name"].get<std::string>();
    const Json& ins = field(l, "inputs", fmt::format("layer '{}'", name));
    if (!ins.is_array()) throw GraphError(fmt::format("network JSON: layer '{}': 'inputs' must be a list", name));
    std::set<std::size_t> deps;
    for (const auto& in : ins) {
      if (in.is_null()) continue;
      if (!in.is_string())
        throw GraphError(fmt::format("network JSON: layer '{}': input names must be strings or null", name));
      const std::string input = in.get<std::string>();
      auto it = producer.find(input);
      if (it != producer.end()) {
        deps.insert(it->second);
      } else if (!net.find(input).valid()) {
        throw GraphError(fmt::format(
            "network JSON: layer '{}': input '{}' is not a network input, a constant or a layer output", name, input));
      }
    }
    for (auto d : deps) {
      dependents[d].push_back(i);
      ++pending[i];
    }
  }
  std::vector<std::size_t> order, ready;
  for (std::size_t i = layers.size(); i-- > 0;) {
    if (pending[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    // Lowest index first keeps the listed order whenever it is already valid.
    auto it = std::min_element(ready.begin(), ready.end());
    std::size_t i = *it;
    ready.erase(it);
    order.push_back(i);
    for (auto d : dependents[i]) {
      if (--pending[d] == 0) ready.push_back(d);
    }
  }
  if (order.size() != layers.size()) {
    std::vector<std::string> stuck;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      if (pending[i] > 0) stuck.push_back(layers[i]["name"].get<std::string>());
    }
    throw GraphError(
        fmt::format("network JSON: the layers {} form a cycle (each needs another's output)", fmt::join(stuck, ", ")));
  }
  for (std::size_t i : order) {
    const Json& l = layers[i];
    std::string name = l["name"].get<std::string>();
    std::string where = fmt::format("layer '{}'", name);
    std::string op = string_field(l, "op", where);
    std::vector<Tensor> inputs;
    for (const auto& in : l["inputs"]) inputs.push_back(in.is_null() ? Tensor{} : net.find(in.get<std::string>()));
    Attributes attrs;
    if (l.contains("attrs")) {
      if (!l["attrs"].is_object()) throw GraphError(fmt::format("network JSON: {}: 'attrs' must be an object", where));
      for (auto a = l["attrs"].begin(); a != l["attrs"].end(); ++a) {
        attrs.emplace(a.key(), attr_from_json(a.value(), fmt::format("{} attribute '{}'", where, a.key())));
      }
    }
    std::vector<Tensor> outs = net.add_layer(op, inputs, attrs, name);
    const Json& names = l["outputs"];
    if (names.size() != outs.size()) {
      throw GraphError(
          fmt::format("network JSON: {}: lists {} outputs, the op produces {}", where, names.size(), outs.size()));
    }
    for (std::size_t o = 0; o < outs.size(); ++o) {
      const std::string wanted = names[o].get<std::string>();
      if (net.graph_->tensor(outs[o].id).name != wanted && net.graph_->tensor_by_name.count(wanted) != 0)
        throw GraphError(fmt::format("network JSON: {}: tensor name '{}' is used twice", where, wanted));
      net.rename_tensor(outs[o], wanted);
    }
  }
  for (const auto& o : doc["outputs"]) {
    if (!o.is_string()) throw GraphError("network JSON: 'outputs' must list tensor names");
    Tensor t = net.find(o.get<std::string>());
    if (!t.valid())
      throw GraphError(fmt::format("network JSON: output '{}' is not a tensor of the network", o.get<std::string>()));
    net.mark_output(t, o.get<std::string>());
  }
  net.verify();
  return net;
} catch (const Json::exception& e) {
  throw GraphError(fmt::format("network JSON: unexpected value: {}", e.what()));
}

namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open the network JSON", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Network Network::from_json_file(const std::filesystem::path& path, const WeightStore& weights) {
  try {
    return from_json(read_text(path), weights);
  } catch (const GraphError& e) {
    throw GraphError(fmt::format("{}: {}", path.string(), e.what()));
  }
}

Network Network::from_json_file(const std::filesystem::path& path) {
  std::string text = read_text(path);
  std::vector<std::filesystem::path> files;
  try {
    Json doc = Json::parse(text);
    if (doc.is_object() && doc.contains("constants") && doc["constants"].is_array()) {
      for (const auto& c : doc["constants"]) {
        if (!c.is_object() || !c.contains("file") || !c["file"].is_string()) continue;
        std::filesystem::path file = c["file"].get<std::string>();
        if (file.is_relative()) file = path.parent_path() / file;
        if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
      }
    }
  } catch (const Json::exception& e) {
    throw GraphError(fmt::format("{}: network JSON is not valid JSON: {}", path.string(), e.what()));
  }
  WeightStore weights = WeightStore::open(files);
  return from_json_file(path, weights);
}

}  // namespace tensoracle
