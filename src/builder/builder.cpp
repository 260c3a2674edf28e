// Builder::build: verify → check profiles → passes → shapes over the profile → kernel choice → memory plan → write.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "backends/target.hpp"
#include "builder/memory_plan.hpp"
#include "builder/passes/passes.hpp"
#include "builder/timing_cache.hpp"
#include "builder/weight_pool.hpp"
#include "core/bytes.hpp"
#include "core/stopwatch.hpp"
#include "graph/graph.hpp"
#include "graph/plugin_layer.hpp"
#include "graph/shape_eval.hpp"
#include "plan/engine_manifest.hpp"
#include "plan/plan_format.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/plugin_registry.hpp"
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

}  // namespace

Builder::Builder(BuilderConfig config) : config_(std::move(config)) {}

std::vector<std::byte> Builder::build(const Network& network) const {
  Stopwatch build_watch;
  for (const auto& library : config_.plugin_libraries) load_plugin_library(library);
  network.verify();
  const backends::Backend& backend = backends::backend_for(config_.target.kind);
  const std::vector<ShapeProfile> profiles = resolve_profiles(graph::graph_of(network), config_);
  plan::EngineContents engine;
  engine.target = backend.describe_target(config_.target);
  engine.precision = config_.precision;
  engine.builder_config = Json::parse(config_.to_json());
  engine.profiles = profiles;
  info(fmt::format("build: {} layers for {} at {}", graph::graph_of(network).layers.size(), config_.target.to_string(),
                   to_string(config_.precision)));

  builder::WeightPool pool;
  Network net = builder::remove_dead_layers(network);
  net = builder::fold_batch_norm(net, pool);
  // Quantized products are found between folding the rest (a weight quantized in the network becomes its quantized
  // constant) and folding the dequantizes, which would turn a quantized weight back into a float constant.
  net = builder::fold_constants(net, pool, kMaxFoldedBytes, {"dequantize"});
  net = builder::lower_quantized_products(net, pool);
  net = builder::fold_constants(net, pool, kMaxFoldedBytes);
  if (config_.precision == Precision::kFp16 || config_.precision == Precision::kBf16) {
    net = builder::lower_precision(
        net, config_.precision == Precision::kFp16 ? DataType::kF16 : DataType::kBF16, pool,
        config_.target.kind == TargetKind::kCuda ? plugin::Device::kCuda : plugin::Device::kHost);
  }
  net = builder::remove_dead_layers(net);
  if (backend.device_graph_passes()) {
    net = builder::device_layout_passes(net, pool);
    // Elementwise chains become generated kernels when their compiler (NVRTC) can be loaded; without it they keep the
    // precompiled kernels (slower: one step per op), and the build says so.
    try {
      backend.kernel_compiler();
      net = builder::fuse_elementwise(net);
    } catch (const UnsupportedError& e) {
      log(LogSeverity::kWarning, fmt::format("build: elementwise layers are not fused: {}", e.what()));
    }
  }
  const graph::Graph& g = graph::graph_of(net);
  engine.network = &net;
  for (const auto& layer : g.layers) {  // the plugins the engine needs, with their libraries' digests
    if (layer.op != "plugin") continue;
    const LoadedPlugin& plugin = graph::plugin_of(layer).info;
    const bool known = std::any_of(engine.plugins.begin(), engine.plugins.end(), [&](const LoadedPlugin& p) {
      return p.type == plugin.type && p.version == plugin.version;
    });
    if (!known) engine.plugins.push_back(plugin);
  }
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
  engine.opt_shapes = shapes[1];

  // Kernel choice: the backend's candidates within the scratch limit, timed on the target when there are several
  // (once per distinct problem; with a timing cache file, not again for problems it knows).
  builder::TimingCache timing(engine.target);
  if (!config_.timing_cache.empty() && config_.time_kernels) timing.load(config_.timing_cache);
  std::size_t timed = 0, reused = 0, from_file = 0;
  Stopwatch kernels_watch;
  double scratch_query_ms = 0;                         // the chosen kernels' scratch queries (plans made to ask)
  std::map<std::string, std::uint64_t> scratch_known;  // problem key with the chosen kernel -> its scratch
  std::size_t scratch = 0;
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    const auto& layer = g.layers[l];
    std::vector<std::string> candidates;
    for (auto& name : backend.kernel_candidates(g, layer, config_.precision)) {
      if (backend.kernel_workspace_bytes(name) <= config_.max_scratch_bytes) candidates.push_back(std::move(name));
    }
    if (candidates.empty()) {
      std::vector<std::string> dtypes;
      for (auto id : layer.inputs) dtypes.emplace_back(id < 0 ? "-" : to_string(g.tensor(id).dtype));
      throw UnsupportedError(fmt::format("layer '{}': {} has no kernel for op '{}' with inputs ({})", layer.name,
                                         backend.name(), layer.op, fmt::join(dtypes, ", ")));
    }
    std::size_t chosen = 0;
    if (config_.time_kernels && candidates.size() > 1) {
      const std::string key = builder::TimingCache::problem_key(g, layer, shapes[1], candidates, config_.precision);
      const auto known = timing.find(key);
      const auto cached = known ? std::find(candidates.begin(), candidates.end(), known->kernel) : candidates.end();
      if (cached != candidates.end()) {
        chosen = static_cast<std::size_t>(cached - candidates.begin());
        ++reused;
        if (known->from_file) ++from_file;
      } else {
        Stopwatch timing_watch;
        chosen = backend.time_candidates(g, layer, shapes[1], candidates, config_.precision, config_.target);
        const double timing_ms = timing_watch.lap_ms();
        timing.insert(key, candidates[chosen]);
        ++timed;
        info(fmt::format("build: step {}/{} '{}': {} fastest of {} (timed in {:.2f} s)", l + 1, g.layers.size(),
                         layer.name, candidates[chosen], candidates.size(), timing_ms / 1e3));
      }
    }
    plan::StepRecord step;
    step.kernel = candidates[chosen];
    // What the kernel needs at the largest of the profile's shapes, asked once per distinct problem (a query can
    // build the kernel's plan: cuDNN's finalization compiles some; repeated blocks and fixed shapes ask once).
    Stopwatch query_watch;
    for (const auto& point : shapes) {
      const std::string key = builder::TimingCache::problem_key(g, layer, point, {step.kernel}, config_.precision);
      auto known = scratch_known.find(key);
      if (known == scratch_known.end()) {
        known = scratch_known
                    .emplace(key, backend.kernel_workspace_for(step.kernel, g, layer, point, config_.precision,
                                                               config_.target))
                    .first;
      }
      step.workspace_bytes = std::max<std::uint64_t>(step.workspace_bytes, known->second);
    }
    scratch_query_ms += query_watch.lap_ms();
    if (step.workspace_bytes > config_.max_scratch_bytes) {
      throw UnsupportedError(
          fmt::format("layer '{}': kernel {} needs {} bytes of scratch, more than max_scratch_bytes "
                      "({}); raise the limit",
                      layer.name, step.kernel, step.workspace_bytes, config_.max_scratch_bytes));
    }
    scratch = std::max<std::size_t>(scratch, static_cast<std::size_t>(step.workspace_bytes));
    engine.steps.push_back(std::move(step));
    if (config_.progress) config_.progress(BuildProgress{"kernels", l + 1, g.layers.size(), layer.name});
  }

  if (timed + reused != 0) {
    const double seconds = kernels_watch.lap_ms() / 1e3;
    info(
        fmt::format("build: kernels chosen in {:.2f} s: {} problems timed, {} choices reused ({} from the timing "
                    "cache file); the chosen kernels' scratch queried in {:.2f} s",
                    seconds, timed, reused, from_file, scratch_query_ms / 1e3));
  }
  if (!config_.timing_cache.empty() && config_.time_kernels) timing.save(config_.timing_cache);

  // Kernels generated for their step (fused elementwise chains), compiled for the target into the "kernels" section;
  // identical sources (repeated blocks of a model) share one binary.
  Stopwatch compile_watch;
  std::map<std::string, plan::KernelBinary> compiled;  // source -> its binary
  std::size_t generated = 0;
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    std::optional<backends::GeneratedKernel> kernel =
        backend.generate_step_kernel(g, g.layers[l], engine.steps[l].kernel);
    if (!kernel) continue;
    ++generated;
    if (config_.progress) config_.progress(BuildProgress{"compile", l + 1, g.layers.size(), g.layers[l].name});
    auto it = compiled.find(kernel->source);
    if (it == compiled.end()) {
      const std::vector<std::byte> binary =
          backend.compile_generated_kernel(kernel->source, engine.target, fmt::format("layer '{}'", g.layers[l].name));
      const std::size_t offset =
          (engine.kernels.size() + plan::kSectionAlignment - 1) / plan::kSectionAlignment * plan::kSectionAlignment;
      engine.kernels.resize(offset + binary.size());
      std::memcpy(engine.kernels.data() + offset, binary.data(), binary.size());
      it = compiled.emplace(kernel->source, plan::KernelBinary{offset, binary.size(), kernel->entries}).first;
    }
    engine.steps[l].binary = it->second;
  }
  if (generated != 0) {
    const double compile_seconds = compile_watch.lap_ms() / 1e3;
    info(fmt::format("build: {} generated kernels ({} distinct, {} bytes) compiled with {} in {:.2f} s", generated,
                     compiled.size(), engine.kernels.size(), backend.kernel_compiler(), compile_seconds));
  }

  const builder::MemoryPlan memory = builder::plan_memory(g, shapes, backend.device_graph_passes());
  engine.arena_alignment = builder::kArenaAlignment;
  engine.arena_bytes = memory.arena_bytes;
  engine.scratch_bytes = scratch;
  engine.arena_offset = memory.offset;
  engine.arena_tensor_bytes.assign(memory.bytes.begin(), memory.bytes.end());

  const double seconds = build_watch.lap_ms() / 1e3;
  engine.build_seconds = seconds;
  plan::WrittenEngine written = plan::write_engine(engine);
  info(fmt::format("build: done in {:.2f} s; engine {} bytes, weights {} bytes, activation arena {} bytes", seconds,
                   written.bytes.size(), written.weight_bytes, memory.arena_bytes));
  return std::move(written.bytes);
}

}  // namespace tensoracle
