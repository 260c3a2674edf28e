// Engine files: write_engine turns the builder's results into manifest and sections; read_engine checks and reads them.
#include "plan/engine_manifest.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <set>
#include <span>

#include "backends/cpu/kernels/numeric.hpp"
#include "core/bytes.hpp"
#include "plan/plan_format.hpp"
#include "plugins/registry.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/version.hpp"

namespace tensoracle::plan {

namespace {

using Json = nlohmann::json;
using backends::EngineState;
using backends::Storage;

DataType dtype_of(const ManifestReader& r, const Json& object, const std::string& where) {
  const std::string text = r.string(object, "dtype", where);
  auto dtype = data_type_from_string(text);
  if (!dtype) r.fail(where, fmt::format("unknown dtype '{}'", text));
  return *dtype;
}

// Every plugin the engine's layers need must be loaded now, from a library with the digest the build recorded
// (UnsupportedError otherwise, which open_engine reports as a CorruptEngineError that says to check the libraries).
void check_plugins(const ManifestReader& r, const Json& plugins) {
  for (std::size_t i = 0; i < plugins.size(); ++i) {
    const std::string where = fmt::format("plugins[{}]", i);
    if (!plugins[i].is_object()) r.fail(where, "is not an object");
    const std::string type = r.string(plugins[i], "type", where);
    const std::string version = r.string(plugins[i], "version", where);
    const std::string library = r.string(plugins[i], "library", where);
    const std::string digest = r.string(plugins[i], "sha256", where);
    const tensoracle::plugins::RegisteredPlugin* loaded = tensoracle::plugins::find_plugin(type, version);
    if (loaded == nullptr) {
      throw UnsupportedError(fmt::format(
          "the engine needs plugin '{}' version '{}' (built with library {}, SHA-256 {}), which no loaded plugin "
          "library provides (loaded: {}); check the plugin libraries (open_engine's plugin_libraries, "
          "load_plugin_library, --plugin LIB)",
          type, version, library, digest, tensoracle::plugins::loaded_plugins_summary()));
    }
    if (loaded->info.library_sha256 != digest) {
      throw UnsupportedError(fmt::format(
          "the engine needs plugin '{}' version '{}' from the library it was built with ({}, SHA-256 {}); the loaded "
          "one is {} with SHA-256 {}; check the plugin libraries, or rebuild the engine with this library",
          type, version, library, digest, loaded->info.library.string(), loaded->info.library_sha256));
    }
  }
}

void read_target(const ManifestReader& r, EngineState& s) {
  const Json& target = r.field(s.manifest, "target", "manifest");
  const std::string kind = r.string(target, "kind", "target");
  if (kind == "cpu") {
    s.target = Target::cpu();
  } else if (kind == "cuda") {
    s.target = Target::cuda(0);  // the device is chosen by model when the weights are uploaded
    r.string(target, "device_name", "target");
    r.string(target, "compute_capability", "target");
  } else {
    r.fail("target", fmt::format("unknown kind '{}'", kind));
  }
  const std::string precision = r.string(s.manifest, "precision", "manifest");
  try {
    s.precision = parse_precision(precision);
  } catch (const InvalidArgumentError&) {
    r.fail("manifest", fmt::format("unknown precision '{}'", precision));
  }
}

// The weights table: each entry a view into the weights section, checked against its dtype and shape.
std::map<std::string, TensorView> read_weights(const ManifestReader& r, EngineState& s,
                                               std::span<const std::byte> section) {
  std::map<std::string, TensorView> views;
  const Json& table = r.array(s.manifest, "weights", "manifest");
  for (std::size_t i = 0; i < table.size(); ++i) {
    std::string where = fmt::format("weights[{}]", i);
    const std::string name = r.string(table[i], "tensor", where);
    where = fmt::format("weight '{}'", name);
    TensorInfo& info = s.weight_infos.emplace_back();
    info.name = name;
    info.dtype = dtype_of(r, table[i], where);
    const auto dims = r.dims(table[i], "shape", where);
    info.shape = Dims(dims);
    if (!info.shape.is_static()) r.fail(where, "the shape has a dynamic dim");
    std::uint64_t volume = 0;
    try {
      volume = static_cast<std::uint64_t>(info.shape.volume());
    } catch (const Error&) {
      r.fail(where, "the shape's element count overflows");
    }
    const std::uint64_t offset = r.uint(table[i], "offset", where);
    const std::uint64_t size = r.uint(table[i], "size", where);
    if (volume > UINT64_MAX / element_size(info.dtype) || volume * element_size(info.dtype) != size)
      r.fail(where,
             fmt::format("{} bytes do not hold shape {} of {}", size, info.shape.to_string(), to_string(info.dtype)));
    if (offset % kSectionAlignment != 0) r.fail(where, "the offset is not aligned");
    if (offset > section.size() || size > section.size() - offset)
      r.fail(where,
             fmt::format("{} bytes at {} run past the weights section ({} bytes)", size, offset, section.size()));
    info.data_begin = offset;
    info.data_end = offset + size;
    if (!views.emplace(name, TensorView{&info, section.data() + offset, nullptr}).second) r.fail(where, "listed twice");
  }
  return views;
}

void read_io(const ManifestReader& r, EngineState& s) {
  const graph::Graph& g = s.graph();
  const Json& inputs = r.array(s.manifest, "inputs", "manifest");
  if (inputs.size() != g.inputs.size()) r.fail("inputs", "the list does not match the network's inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto id = g.inputs[i];
    const auto& t = g.tensor(id);
    const std::string where = fmt::format("input '{}'", t.name);
    if (r.string(inputs[i], "name", where) != t.name) r.fail(where, "the name does not match the network");
    EngineTensor e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.dims = t.declared_dims;
    if (dtype_of(r, inputs[i], where) != t.dtype || Dims(r.dims(inputs[i], "dims", where)) != t.declared_dims)
      r.fail(where, "dtype or dims do not match the network");
    const Json& p = r.field(inputs[i], "profile", where);
    e.profile.min = Dims(r.dims(p, "min", where + " profile"));
    e.profile.opt = Dims(r.dims(p, "opt", where + " profile"));
    e.profile.max = Dims(r.dims(p, "max", where + " profile"));
    for (const Dims* d : {&e.profile.min, &e.profile.opt, &e.profile.max}) {
      if (d->rank() != e.dims.rank() || !d->is_static()) r.fail(where, "the profile does not fit the dims");
      for (int k = 0; k < d->rank(); ++k) {
        if (e.dims[k] != Dims::kDynamic && (*d)[k] != e.dims[k]) r.fail(where, "the profile does not fit the dims");
      }
    }
    for (int k = 0; k < e.dims.rank(); ++k) {
      if (e.profile.min[k] > e.profile.opt[k] || e.profile.opt[k] > e.profile.max[k])
        r.fail(where, "the profile is not ordered min <= opt <= max");
    }
    s.inputs.push_back(std::move(e));
    s.io_ids.push_back(id);
  }
  const Json& outputs = r.array(s.manifest, "outputs", "manifest");
  if (outputs.size() != g.outputs.size()) r.fail("outputs", "the list does not match the network's outputs");
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto id = g.outputs[i];
    const auto& t = g.tensor(id);
    const std::string where = fmt::format("output '{}'", t.name);
    if (r.string(outputs[i], "name", where) != t.name || dtype_of(r, outputs[i], where) != t.dtype)
      r.fail(where, "the name or dtype does not match the network");
    s.outputs.push_back(EngineTensor{t.name, t.dtype, g.static_dims(id), {}});
    s.io_ids.push_back(id);
  }
}

// A generated kernel's binary: a CUBIN (ELF image) inside the "kernels" section at an aligned offset, with exactly the
// entry points the kernel defines.
void read_binary(const ManifestReader& r, const backends::Backend& backend, const Json& object,
                 const std::string& where, const std::optional<std::span<const std::byte>>& section,
                 backends::StepPlan& step) {
  const std::size_t expected = backend.generated_entry_count(step.kernel);
  const bool present = object.contains("binary");
  if (expected == 0) {
    if (present)
      r.fail(where, fmt::format("kernel '{}' is not generated at build time but has a 'binary'", step.kernel));
    return;
  }
  if (!present)
    r.fail(where, fmt::format("kernel '{}' is generated at build time: its 'binary' is missing", step.kernel));
  if (!section) r.fail(where, "the step has a binary but the engine has no 'kernels' section");
  const Json& binary = object["binary"];
  const std::string at = where + " binary";
  if (!binary.is_object()) r.fail(at, "is not an object");
  for (auto it = binary.begin(); it != binary.end(); ++it) {
    if (it.key() != "offset" && it.key() != "size" && it.key() != "entries")
      r.fail(at, fmt::format("unknown key '{}'", it.key()));
  }
  const std::uint64_t offset = r.uint(binary, "offset", at);
  const std::uint64_t size = r.uint(binary, "size", at);
  if (offset % kSectionAlignment != 0) r.fail(at, fmt::format("offset {} is not aligned", offset));
  if (size < 4 || offset > section->size() || size > section->size() - offset)
    r.fail(at, fmt::format("{} bytes at {} do not fit the {}-byte kernels section", size, offset, section->size()));
  step.binary = section->data() + offset;
  step.binary_size = static_cast<std::size_t>(size);
  step.binary_offset = offset;
  constexpr unsigned char kElfMagic[4] = {0x7F, 'E', 'L', 'F'};
  if (std::memcmp(step.binary, kElfMagic, sizeof kElfMagic) != 0) r.fail(at, "is not a CUBIN (ELF) image");
  const Json& entries = r.array(binary, "entries", at);
  if (entries.size() != expected)
    r.fail(at,
           fmt::format("kernel '{}' has {} entry points, the step lists {}", step.kernel, expected, entries.size()));
  for (const auto& e : entries) {
    const bool valid = e.is_string() && !e.get_ref<const std::string&>().empty() &&
                       e.get_ref<const std::string&>().size() <= 128 &&
                       std::all_of(e.get_ref<const std::string&>().begin(), e.get_ref<const std::string&>().end(),
                                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; });
    if (!valid) r.fail(at, "entry points must be identifiers of at most 128 characters");
    step.entries.push_back(e.get<std::string>());
  }
}

void read_steps_and_memory(const ManifestReader& r, EngineState& s,
                           const std::optional<std::span<const std::byte>>& kernels) {
  const graph::Graph& g = s.graph();
  const backends::Backend& backend = backends::backend_for(s.target.kind);
  const Json& steps = r.array(s.manifest, "steps", "manifest");
  if (steps.size() != g.layers.size()) r.fail("steps", "there must be one step per layer of the network");
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& layer = g.layers[i];
    const std::string where = fmt::format("step {} ('{}')", i, layer.name);
    if (r.string(steps[i], "layer", where) != layer.name || r.string(steps[i], "op", where) != layer.op)
      r.fail(where, "does not match the network's layer");
    backends::StepPlan step;
    step.layer = i;
    step.kernel = r.string(steps[i], "kernel", where);
    // Engines for a backend this build lacks (CUDA) can still be inspected; loading them fails later, clearly.
    if (backend.built() && !backend.is_known_kernel(step.kernel, layer.op)) {
      r.fail(where, fmt::format("kernel '{}' is not one this build of tensoracle has for op '{}' on {}", step.kernel,
                                layer.op, backend.name()));
    }
    step.workspace_bytes = r.uint(steps[i], "workspace_bytes", where);
    read_binary(r, backend, steps[i], where, kernels, step);
    s.steps.push_back(std::move(step));
  }

  const std::size_t n = g.tensors.size();
  s.storage.assign(n, Storage::kArena);
  s.arena_offset.assign(n, 0);
  s.arena_bytes.assign(n, 0);
  for (auto id : g.inputs) s.storage[static_cast<std::size_t>(id)] = Storage::kInput;
  for (auto id : g.outputs) s.storage[static_cast<std::size_t>(id)] = Storage::kOutput;
  for (std::size_t id = 0; id < n; ++id) {
    if (g.tensors[id].kind == graph::TensorKind::kConstant) s.storage[id] = Storage::kConstant;
  }
  const Json& memory = r.field(s.manifest, "memory", "manifest");
  s.arena_size = r.uint(memory, "arena_bytes", "memory");
  s.scratch_size = r.uint(memory, "scratch_bytes", "memory");
  constexpr std::uint64_t kMaxContextBytes = std::uint64_t{1} << 42;  // 4 TiB: beyond any device
  if (s.arena_size > kMaxContextBytes || s.scratch_size > kMaxContextBytes)
    r.fail("memory", "the arena or scratch size is beyond any device");
  for (const auto& step : s.steps) {
    if (step.workspace_bytes > s.scratch_size) r.fail("memory", "a step's workspace exceeds the scratch size");
  }
  const Json& tensors = r.array(memory, "tensors", "memory");
  std::vector<bool> planned(n, false);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string where = fmt::format("memory.tensors[{}]", i);
    const std::string name = r.string(tensors[i], "name", where);
    auto it = g.tensor_by_name.find(name);
    if (it == g.tensor_by_name.end()) r.fail(where, fmt::format("unknown tensor '{}'", name));
    const auto id = static_cast<std::size_t>(it->second);
    if (s.storage[id] != Storage::kArena || planned[id])
      r.fail(where, fmt::format("tensor '{}' is not an arena tensor or is listed twice", name));
    const std::uint64_t offset = r.uint(tensors[i], "offset", where);
    const std::uint64_t bytes = r.uint(tensors[i], "bytes", where);
    if (offset % kSectionAlignment != 0 || offset > s.arena_size || bytes > s.arena_size - offset)
      r.fail(where, fmt::format("tensor '{}' ({} bytes at {}) does not fit the {}-byte arena", name, bytes, offset,
                                s.arena_size));
    s.arena_offset[id] = offset;
    s.arena_bytes[id] = bytes;
    planned[id] = true;
  }
  for (std::size_t id = 0; id < n; ++id) {
    if (s.storage[id] == Storage::kArena && !planned[id])
      r.fail("memory", fmt::format("tensor '{}' has no place in the arena", g.tensors[id].name));
  }
}

void materialize_constants(EngineState& s) {
  const graph::Graph& g = s.graph();
  s.constant_host.assign(g.tensors.size(), nullptr);
  for (std::size_t id = 0; id < g.tensors.size(); ++id) {
    const auto& t = g.tensors[id];
    if (t.kind != graph::TensorKind::kConstant) continue;
    if (t.inline_constant) {
      HostTensor h(t.dtype, g.static_dims(static_cast<std::int32_t>(id)));
      cpu::from_f64(h, t.values);
      auto& bytes = s.materialized.emplace_back(std::move(h.bytes));
      s.constant_host[id] = bytes.data();
    } else {
      s.constant_host[id] = t.weight->data;
    }
  }
}

// Everything read_engine() checks and builds.
std::unique_ptr<EngineState> parse_engine_checked(std::vector<std::byte> bytes, const std::string& display_name);

// Every field is checked before use; a JSON value of a type no check foresaw is still a FormatError, never a crash.
std::unique_ptr<EngineState> parse_engine(std::vector<std::byte> bytes, const std::string& display_name) {
  try {
    return parse_engine_checked(std::move(bytes), display_name);
  } catch (const Json::exception& e) {
    throw FormatError(fmt::format("{}: damaged engine manifest: {}", display_name, e.what()));
  }
}

std::unique_ptr<EngineState> parse_engine_checked(std::vector<std::byte> bytes, const std::string& display_name) {
  auto s = std::make_unique<EngineState>();
  s->display_name = display_name;
  s->bytes = std::move(bytes);
  const ParsedPlan plan = parse_plan(s->bytes, display_name);
  s->manifest = plan.manifest;
  ManifestReader r(display_name);
  if (r.string(s->manifest, "format", "manifest") != "tensoracle-engine") r.fail("manifest", "'format' is wrong");
  static const std::set<std::string> kKnownKeys{
      "format",  "library_version", "target", "precision", "builder_config", "inputs",        "outputs",
      "network", "weights",         "steps",  "memory",    "sections",       "build_seconds", "plugins"};
  for (auto it = s->manifest.begin(); it != s->manifest.end(); ++it) {
    if (kKnownKeys.count(it.key()) == 0) r.fail("manifest", fmt::format("unknown key '{}'", it.key()));
  }
  std::optional<std::span<const std::byte>> kernels;
  for (const auto& section : plan.sections) {
    if (section.name == "kernels") {  // copied: the engine bytes may be released once the weights are loaded
      s->kernel_binaries.assign(section.bytes.begin(), section.bytes.end());
      kernels = std::span<const std::byte>(s->kernel_binaries);
    } else if (section.name != "weights") {
      r.fail("sections", fmt::format("unknown section '{}'", section.name));
    }
  }
  read_target(r, *s);
  if (s->manifest.contains("plugins")) check_plugins(r, r.array(s->manifest, "plugins", "manifest"));
  const auto weight_views = read_weights(r, *s, plan.section("weights", display_name));
  const Json& network = r.field(s->manifest, "network", "manifest");
  try {
    s->network = std::make_unique<Network>(Network::from_json(
        network.dump(), [&](const std::string& weight, const std::string&) -> std::optional<TensorView> {
          auto it = weight_views.find(weight);
          if (it == weight_views.end()) return std::nullopt;
          return it->second;
        }));
  } catch (const Error& e) {
    r.fail("network", e.what());
  }
  read_io(r, *s);
  read_steps_and_memory(r, *s, kernels);
  materialize_constants(*s);
  return s;
}

// ---- writing ----

Json dims_json(const Dims& d) { return d.values(); }

Json step_json(const graph::Graph& g, const graph::Layer& layer, const StepRecord& step,
               const std::vector<Dims>& opt_shapes) {
  Json outs = Json::array();
  for (auto id : layer.outputs) {
    outs.push_back(Json{{"name", g.tensor(id).name},
                        {"dtype", std::string(to_string(g.tensor(id).dtype))},
                        {"dims", dims_json(g.static_dims(id))},
                        {"opt_shape", dims_json(opt_shapes[static_cast<std::size_t>(id)])}});
  }
  Json ins = Json::array();
  for (auto id : layer.inputs) ins.push_back(id < 0 ? Json(nullptr) : Json(g.tensor(id).name));
  Json json{{"layer", layer.name},      {"op", layer.op},
            {"kernel", step.kernel},    {"workspace_bytes", step.workspace_bytes},
            {"inputs", std::move(ins)}, {"outputs", std::move(outs)}};
  // The type a quantized product's operands are multiplied in (what `tensoracle inspect` shows as int8/fp8 steps); a
  // weight-only product (a float x) holds its weight in that type and multiplies in x's.
  if (layer.op == "quantized_linear" || layer.op == "quantized_conv") {
    const DataType x = g.tensor(layer.inputs[0]).dtype, weight = g.tensor(layer.inputs[1]).dtype;
    json["quantized"] = std::string(to_string(weight));
    if (x != weight) json["weight_only"] = true;
  }
  if (step.binary) {
    json["binary"] =
        Json{{"offset", step.binary->offset}, {"size", step.binary->size}, {"entries", step.binary->entries}};
  }
  return json;
}

}  // namespace

WrittenEngine write_engine(const EngineContents& c) {
  const graph::Graph& g = graph::graph_of(*c.network);
  Json steps = Json::array();
  for (std::size_t l = 0; l < g.layers.size(); ++l)
    steps.push_back(step_json(g, g.layers[l], c.steps[l], c.opt_shapes));

  Json memory_tensors = Json::array();
  for (std::size_t id = 0; id < g.tensors.size(); ++id) {
    if (c.arena_offset[id] < 0) continue;
    memory_tensors.push_back(
        Json{{"name", g.tensors[id].name}, {"offset", c.arena_offset[id]}, {"bytes", c.arena_tensor_bytes[id]}});
  }

  // Weights: each non-inline constant at an aligned offset of the weights section.
  Json weights = Json::array();
  std::vector<std::byte> weight_bytes;
  Json network_json = Json::parse(c.network->to_json());
  for (auto& constant : network_json["constants"]) {
    if (!constant.contains("weight")) continue;
    const std::string name = constant["name"].get<std::string>();
    const auto& t = g.tensor(g.tensor_by_name.at(name));
    const std::size_t offset = (weight_bytes.size() + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment;
    const std::size_t size = t.weight->byte_size();
    weight_bytes.resize(offset + size);
    copy_bytes(weight_bytes.data() + offset, t.weight->data, size);
    weights.push_back(Json{{"tensor", name},
                           {"dtype", std::string(to_string(t.dtype))},
                           {"shape", dims_json(t.weight->shape())},
                           {"offset", offset},
                           {"size", size}});
    constant["weight"] = name;  // the engine's weights are found by tensor name, in the engine itself
    constant["file"] = "";
  }

  Json inputs = Json::array();
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const auto& t = g.tensor(g.inputs[i]);
    inputs.push_back(Json{{"name", t.name},
                          {"dtype", std::string(to_string(t.dtype))},
                          {"dims", dims_json(t.declared_dims)},
                          {"profile",
                           {{"min", dims_json(c.profiles[i].min)},
                            {"opt", dims_json(c.profiles[i].opt)},
                            {"max", dims_json(c.profiles[i].max)}}}});
  }
  Json outputs = Json::array();
  for (auto id : g.outputs) {
    outputs.push_back(Json{{"name", g.tensor(id).name},
                           {"dtype", std::string(to_string(g.tensor(id).dtype))},
                           {"dims", dims_json(g.static_dims(id))}});
  }

  Json manifest{{"format", "tensoracle-engine"},
                {"library_version", TENSORACLE_VERSION_STRING},
                {"target", c.target},
                {"precision", to_string(c.precision)},
                {"builder_config", c.builder_config},
                {"inputs", std::move(inputs)},
                {"outputs", std::move(outputs)},
                {"network", std::move(network_json)},
                {"weights", std::move(weights)},
                {"steps", std::move(steps)},
                {"memory",
                 {{"alignment", c.arena_alignment},
                  {"arena_bytes", c.arena_bytes},
                  {"scratch_bytes", c.scratch_bytes},
                  {"weights_bytes", weight_bytes.size()},
                  {"tensors", std::move(memory_tensors)}}},
                {"build_seconds", c.build_seconds}};
  if (!c.plugins.empty()) {
    Json plugins = Json::array();
    for (const auto& p : c.plugins) {
      plugins.push_back(Json{{"type", p.type},
                             {"version", p.version},
                             {"library", p.library.filename().string()},
                             {"sha256", p.library_sha256}});
    }
    manifest["plugins"] = std::move(plugins);
  }
  std::vector<SectionData> sections{{"weights", weight_bytes}};
  if (!c.kernels.empty()) sections.push_back({"kernels", c.kernels});
  WrittenEngine written;
  written.weight_bytes = weight_bytes.size();
  written.bytes = write_plan(std::move(manifest), sections);
  return written;
}

std::unique_ptr<backends::EngineState> read_engine(std::vector<std::byte> bytes, const std::string& display_name) {
  return parse_engine(std::move(bytes), display_name);
}

void release_host_weights(backends::EngineState& engine) {
  graph::Graph& g = graph::NetworkAccess::mutable_graph(*engine.network);
  for (auto& t : g.tensors) {
    if (t.weight) t.weight->data = nullptr;
  }
  engine.constant_host.assign(engine.constant_host.size(), nullptr);
  engine.materialized.clear();
  std::vector<std::byte>().swap(engine.bytes);
}

}  // namespace tensoracle::plan
