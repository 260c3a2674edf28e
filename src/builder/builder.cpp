// Builder::build: verify → check profiles → passes → shapes over the profile → kernel choice → memory plan → serialize.
#include <fmt/format.h>
#include <sys/utsname.h>

#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "backends/cuda/codegen/nvrtc_compiler.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "builder/memory_plan.hpp"
#include "builder/passes/passes.hpp"
#include "builder/weight_pool.hpp"
#include "core/bytes.hpp"
#include "graph/graph.hpp"
#include "graph/shape_eval.hpp"
#include "runtime/kernel_names.hpp"
#include "runtime/plan_format.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/system_info.hpp"
#include "tensoracle/version.hpp"

namespace tensoracle {

namespace {

using Json = nlohmann::json;

// Folded constants larger than this stay layers (they would only grow the engine).
constexpr std::size_t kMaxFoldedBytes = std::size_t{64} << 20;

void info(const std::string& message) { log(LogSeverity::kInfo, message); }

// The profile of every input: given ones checked against the declared dims; fixed inputs default to their dims.
std::vector<ShapeProfile> resolve_profiles(const graph::Graph& g, const BuilderConfig& config) {
  for (const auto& [name, profile] : config.profiles) {
    bool found = false;
    for (auto id : g.inputs) found = found || g.tensor(id).name == name;
    if (!found)
      throw InvalidArgumentError(fmt::format("profile for '{}': the network has no input of that name", name));
  }
  std::vector<ShapeProfile> profiles;
  for (auto id : g.inputs) {
    const auto& t = g.tensor(id);
    auto it = config.profiles.find(t.name);
    if (it == config.profiles.end()) {
      if (!t.declared_dims.is_static()) {
        throw InvalidArgumentError(fmt::format(
            "input '{}' has dynamic dims {}; give it a profile (min/opt/max) with BuilderConfig::add_profile", t.name,
            t.declared_dims.to_string()));
      }
      profiles.push_back(ShapeProfile{t.declared_dims, t.declared_dims, t.declared_dims});
      continue;
    }
    const ShapeProfile& p = it->second;
    for (const auto& [label, d] : {std::pair{"min", &p.min}, std::pair{"opt", &p.opt}, std::pair{"max", &p.max}}) {
      if (d->rank() != t.declared_dims.rank()) {
        throw InvalidArgumentError(fmt::format("profile for '{}': {} {} has rank {}, the input has rank {}", t.name,
                                               label, d->to_string(), d->rank(), t.declared_dims.rank()));
      }
      for (int k = 0; k < d->rank(); ++k) {
        if ((*d)[k] < 0 || (t.declared_dims[k] != Dims::kDynamic && (*d)[k] != t.declared_dims[k])) {
          throw InvalidArgumentError(fmt::format("profile for '{}': {} {} does not fit the declared dims {}", t.name,
                                                 label, d->to_string(), t.declared_dims.to_string()));
        }
      }
    }
    for (int k = 0; k < p.min.rank(); ++k) {
      if (p.min[k] > p.opt[k] || p.opt[k] > p.max[k]) {
        throw InvalidArgumentError(fmt::format("profile for '{}': dim {} must satisfy min <= opt <= max ({} {} {})",
                                               t.name, k, p.min[k], p.opt[k], p.max[k]));
      }
    }
    profiles.push_back(p);
  }
  return profiles;
}

Json target_json(const BuilderConfig& config) {
  if (config.target.kind == TargetKind::kCpu) {
    utsname u{};
    uname(&u);
    return Json{{"kind", "cpu"}, {"arch", u.machine}};
  }
  const SystemInfo sys = system_info();
  for (const auto& d : sys.cuda_devices) {
    if (d.index != config.target.device) continue;
    return Json{{"kind", "cuda"},
                {"device_name", d.name},
                {"compute_capability", fmt::format("{}.{}", d.compute_capability_major, d.compute_capability_minor)},
                {"multiprocessor_count", d.multiprocessor_count},
                {"total_memory_bytes", d.total_memory_bytes},
                {"cuda_runtime_version", sys.cuda_runtime_version},
                {"cublaslt_version", sys.cublaslt_version},
                {"cudnn_version", sys.cudnn_version}};
  }
  throw CudaError(
      fmt::format("target {}: no such CUDA device ({})", config.target.to_string(),
                  sys.cuda_unavailable_reason.empty() ? "index out of range" : sys.cuda_unavailable_reason));
}

Json dims_json(const Dims& d) { return d.values(); }

// "9.0" of a CUDA target's JSON as {9, 0}.
std::pair<int, int> compute_capability(const Json& target) {
  const std::string cc = target.at("compute_capability").get<std::string>();
  const auto dot = cc.find('.');
  if (dot == std::string::npos) throw Error(fmt::format("internal error: compute capability '{}'", cc));
  return {std::stoi(cc.substr(0, dot)), std::stoi(cc.substr(dot + 1))};
}

}  // namespace

Builder::Builder(BuilderConfig config) : config_(std::move(config)) {}

std::vector<std::byte> Builder::build(const Network& network) const {
  const auto start = std::chrono::steady_clock::now();
  network.verify();
  const std::vector<ShapeProfile> profiles = resolve_profiles(network.graph(), config_);
  const Json target = target_json(config_);
  info(fmt::format("build: {} layers for {} at {}", network.graph().layers.size(), config_.target.to_string(),
                   to_string(config_.precision)));

  builder::WeightPool pool;
  Network net = builder::remove_dead_layers(network);
  net = builder::fold_batch_norm(net, pool);
  net = builder::fold_constants(net, pool, kMaxFoldedBytes);
  if (config_.precision == Precision::kFp16 || config_.precision == Precision::kBf16) {
    net = builder::lower_precision(net, config_.precision == Precision::kFp16 ? DataType::kF16 : DataType::kBF16, pool);
  }
  net = builder::remove_dead_layers(net);
  if (config_.target.kind == TargetKind::kCuda) {
    net = builder::fuse_matmul_bias(net, pool);
    net = builder::fuse_epilogues(net);
    net = builder::to_channels_last(net, pool);
    net = builder::remove_dead_layers(builder::fuse_attention_layout(net));
    // Elementwise chains become generated kernels when NVRTC can be loaded; without it they keep the precompiled
    // kernels (slower: one step per op), and the build says so.
    try {
      cuda::codegen::nvrtc_description();
      net = builder::fuse_elementwise(net);
    } catch (const UnsupportedError& e) {
      log(LogSeverity::kWarning, fmt::format("build: elementwise layers are not fused: {}", e.what()));
    }
  }
  const graph::Graph& g = net.graph();
  info(fmt::format("build: {} layers after graph passes", g.layers.size()));

  // Shapes at each profile point; every check of every layer runs again for concrete shapes.
  std::vector<std::vector<Dims>> shapes;
  for (int point = 0; point < 3; ++point) {
    std::vector<Dims> input_shapes;
    for (const auto& p : profiles) input_shapes.push_back(point == 0 ? p.min : point == 1 ? p.opt : p.max);
    try {
      shapes.push_back(graph::evaluate_shapes(g, input_shapes));
    } catch (const GraphError& e) {
      throw InvalidArgumentError(fmt::format("the {} shapes of the profiles don't fit the network: {}",
                                             point == 0   ? "min"
                                             : point == 1 ? "opt"
                                                          : "max",
                                             e.what()));
    }
  }

  // Kernel choice.
  Json steps = Json::array();
  std::size_t scratch = 0;
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    std::string kernel;
    std::size_t workspace = 0;
    if (config_.target.kind == TargetKind::kCpu) {
      kernel = runtime::cpu_kernel_name(layer.op);
      if (!runtime::is_known_kernel(TargetKind::kCpu, kernel, layer.op))
        throw UnsupportedError(
            fmt::format("layer '{}': the CPU target has no kernel for op '{}'", layer.name, layer.op));
    } else {
      std::vector<std::string> candidates;
      for (auto& name : cuda::kernel_candidates(g, layer, config_.precision)) {
        if (cuda::kernel_workspace_bytes(name) <= config_.max_scratch_bytes) candidates.push_back(std::move(name));
      }
      if (candidates.empty()) {
        std::vector<std::string> dtypes;
        for (auto id : layer.inputs) dtypes.emplace_back(id < 0 ? "-" : to_string(g.tensor(id).dtype));
        throw UnsupportedError(fmt::format("layer '{}': the CUDA backend has no kernel for op '{}' with inputs ({})",
                                           layer.name, layer.op, fmt::join(dtypes, ", ")));
      }
      std::size_t chosen = 0;
      if (config_.time_kernels && candidates.size() > 1) {
        chosen = cuda::time_candidates(g, layer, shapes[1], candidates, config_.precision, config_.target.device);
        info(fmt::format("build: step {}/{} '{}': {} fastest of {}", l + 1, g.layers.size(), layer.name,
                         candidates[chosen], candidates.size()));
      }
      kernel = candidates[chosen];
      for (const auto& point : shapes) {  // what the kernel needs at the largest of the profile's shapes
        workspace = std::max(
            workspace, cuda::kernel_workspace_for(kernel, g, layer, point, config_.precision, config_.target.device));
      }
      scratch = std::max(scratch, workspace);
    }
    if (config_.progress) config_.progress(BuildProgress{"kernels", l + 1, g.layers.size(), layer.name});
    Json outs = Json::array();
    for (auto id : layer.outputs) {
      outs.push_back(Json{{"name", g.tensor(id).name},
                          {"dtype", std::string(to_string(g.tensor(id).dtype))},
                          {"dims", dims_json(g.static_dims(id))},
                          {"opt_shape", dims_json(shapes[1][static_cast<std::size_t>(id)])}});
    }
    Json ins = Json::array();
    for (auto id : layer.inputs) ins.push_back(id < 0 ? Json(nullptr) : Json(g.tensor(id).name));
    steps.push_back(Json{{"layer", layer.name},
                         {"op", layer.op},
                         {"kernel", kernel},
                         {"workspace_bytes", workspace},
                         {"inputs", std::move(ins)},
                         {"outputs", std::move(outs)}});
  }

  // Kernels generated for their step (fused elementwise chains), compiled with NVRTC for the target's GPU into the
  // "kernels" section; identical sources (repeated blocks of a model) share one binary.
  std::vector<std::byte> kernel_bytes;
  if (config_.target.kind == TargetKind::kCuda) {
    const auto compile_start = std::chrono::steady_clock::now();
    const auto [cc_major, cc_minor] = compute_capability(target);
    std::map<std::string, Json> compiled;  // source -> its "binary" entry
    std::size_t generated = 0;
    for (std::size_t l = 0; l < g.layers.size(); ++l) {
      Json& step = steps[l];
      std::optional<cuda::GeneratedKernel> kernel =
          cuda::generate_step_kernel(g, g.layers[l], step["kernel"].get<std::string>());
      if (!kernel) continue;
      ++generated;
      if (config_.progress) config_.progress(BuildProgress{"compile", l + 1, g.layers.size(), g.layers[l].name});
      auto it = compiled.find(kernel->source);
      if (it == compiled.end()) {
        const std::vector<std::byte> cubin = cuda::compile_generated_kernel(
            kernel->source, cc_major, cc_minor, fmt::format("layer '{}'", g.layers[l].name));
        const std::size_t offset = (kernel_bytes.size() + runtime::kSectionAlignment - 1) / runtime::kSectionAlignment *
                                   runtime::kSectionAlignment;
        kernel_bytes.resize(offset + cubin.size());
        std::memcpy(kernel_bytes.data() + offset, cubin.data(), cubin.size());
        it =
            compiled
                .emplace(kernel->source, Json{{"offset", offset}, {"size", cubin.size()}, {"entries", kernel->entries}})
                .first;
      }
      step["binary"] = it->second;
    }
    if (generated != 0) {
      const std::chrono::duration<double> compile_seconds = std::chrono::steady_clock::now() - compile_start;
      info(fmt::format("build: {} generated kernels ({} distinct, {} bytes) compiled with {} for sm_{}{} in {:.2f} s",
                       generated, compiled.size(), kernel_bytes.size(), cuda::codegen::nvrtc_description(), cc_major,
                       cc_minor, compile_seconds.count()));
    }
  }

  const builder::MemoryPlan memory = builder::plan_memory(g, shapes, config_.target.kind == TargetKind::kCuda);
  Json memory_tensors = Json::array();
  for (std::size_t id = 0; id < g.tensors.size(); ++id) {
    if (memory.offset[id] < 0) continue;
    memory_tensors.push_back(
        Json{{"name", g.tensors[id].name}, {"offset", memory.offset[id]}, {"bytes", memory.bytes[id]}});
  }

  // Weights: each non-inline constant at an aligned offset of the weights section.
  Json weights = Json::array();
  std::vector<std::byte> weight_bytes;
  Json network_json = Json::parse(net.to_json());
  for (auto& c : network_json["constants"]) {
    if (!c.contains("weight")) continue;
    const std::string name = c["name"].get<std::string>();
    const auto& t = g.tensor(g.tensor_by_name.at(name));
    const std::size_t offset = (weight_bytes.size() + runtime::kSectionAlignment - 1) / runtime::kSectionAlignment *
                               runtime::kSectionAlignment;
    const std::size_t size = t.weight->byte_size();
    weight_bytes.resize(offset + size);
    copy_bytes(weight_bytes.data() + offset, t.weight->data, size);
    weights.push_back(Json{{"tensor", name},
                           {"dtype", std::string(to_string(t.dtype))},
                           {"shape", dims_json(t.weight->shape())},
                           {"offset", offset},
                           {"size", size}});
    c["weight"] = name;  // the engine's weights are found by tensor name, in the engine itself
    c["file"] = "";
  }

  Json inputs = Json::array();
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    const auto& t = g.tensor(g.inputs[i]);
    inputs.push_back(Json{{"name", t.name},
                          {"dtype", std::string(to_string(t.dtype))},
                          {"dims", dims_json(t.declared_dims)},
                          {"profile",
                           {{"min", dims_json(profiles[i].min)},
                            {"opt", dims_json(profiles[i].opt)},
                            {"max", dims_json(profiles[i].max)}}}});
  }
  Json outputs = Json::array();
  for (auto id : g.outputs) {
    outputs.push_back(Json{{"name", g.tensor(id).name},
                           {"dtype", std::string(to_string(g.tensor(id).dtype))},
                           {"dims", dims_json(g.static_dims(id))}});
  }

  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  Json manifest{{"format", "tensoracle-engine"},
                {"library_version", TENSORACLE_VERSION_STRING},
                {"target", target},
                {"precision", to_string(config_.precision)},
                {"builder_config", Json::parse(config_.to_json())},
                {"inputs", std::move(inputs)},
                {"outputs", std::move(outputs)},
                {"network", std::move(network_json)},
                {"weights", std::move(weights)},
                {"steps", std::move(steps)},
                {"memory",
                 {{"alignment", builder::kArenaAlignment},
                  {"arena_bytes", memory.arena_bytes},
                  {"scratch_bytes", scratch},
                  {"weights_bytes", weight_bytes.size()},
                  {"tensors", std::move(memory_tensors)}}},
                {"build_seconds", seconds.count()}};
  std::vector<runtime::SectionData> sections{{"weights", weight_bytes}};
  if (!kernel_bytes.empty()) sections.push_back({"kernels", kernel_bytes});
  std::vector<std::byte> bytes = runtime::write_plan(std::move(manifest), sections);
  info(fmt::format("build: done in {:.2f} s; engine {} bytes, weights {} bytes, activation arena {} bytes",
                   seconds.count(), bytes.size(), weight_bytes.size(), memory.arena_bytes));
  return bytes;
}

}  // namespace tensoracle
