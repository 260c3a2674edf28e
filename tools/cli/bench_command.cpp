// `tensoracle bench`: latency percentiles, throughput, target time and per-step times of an engine, as JSON.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/system_info.hpp"
#include "tensoracle/target_memory.hpp"

namespace tensoracle::cli {
namespace {

struct BenchOptions {
  std::string engine;
  std::vector<std::string> shapes;
  int warmup = 20;
  int iterations = 200;
  int input_sets = 4;
  bool per_step = false;
  bool cuda_graph = false;
  bool graph_mode = false;
  std::vector<std::string> plugins;
};

// Values a model sees: small floats, zeros for integers (valid indices) and bools.
std::vector<std::byte> random_bytes(DataType dtype, std::size_t count, std::mt19937& rng) {
  std::vector<std::byte> out(count * element_size(dtype), std::byte{0});
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (std::size_t i = 0; i < count; ++i) {
    const float v = dist(rng);
    std::byte* p = out.data() + i * element_size(dtype);
    if (dtype == DataType::kF32) {
      std::memcpy(p, &v, 4);
    } else if (dtype == DataType::kF64) {
      const double d = v;
      std::memcpy(p, &d, 8);
    } else if (dtype == DataType::kF16) {
      const std::uint16_t h = f32_to_f16_bits(v);
      std::memcpy(p, &h, 2);
    } else if (dtype == DataType::kBF16) {
      const std::uint16_t h = f32_to_bf16_bits(v);
      std::memcpy(p, &h, 2);
    }
  }
  return out;
}

nlohmann::json percentiles(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(values.size() - 1);
    const auto lo = static_cast<std::size_t>(pos);
    const std::size_t hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
  };
  double sum = 0;
  for (double v : values) sum += v;
  return {{"min", values.front()}, {"mean", sum / static_cast<double>(values.size())},
          {"p50", at(0.5)},        {"p90", at(0.9)},
          {"p99", at(0.99)},       {"max", values.back()}};
}

int bench(const BenchOptions& o) {
  if (o.iterations < 1 || o.warmup < 0 || o.input_sets < 1)
    throw InvalidArgumentError("--iterations and --input-sets must be >= 1, --warmup >= 0");
  load_plugins(o.plugins);
  auto engine = load_engine(o.engine);
  auto ctx = engine->create_execution_context();
  std::map<std::string, Dims> shapes;
  for (const auto& s : o.shapes) {
    const auto eq = s.find('=');
    if (eq == std::string::npos) throw InvalidArgumentError(fmt::format("--shape '{}': expected NAME=8x128", s));
    shapes[s.substr(0, eq)] = parse_dims(s.substr(eq + 1), "--shape " + s.substr(0, eq));
  }
  for (const auto& in : engine->inputs()) {
    if (shapes.count(in.name) == 0) shapes[in.name] = in.profile.opt;  // default: the profile's opt shape
  }
  ctx->set_input_shapes(shapes);
  const Target target = engine->target();
  std::mt19937 rng(1234);
  std::vector<std::vector<TargetBuffer>> input_sets(static_cast<std::size_t>(o.input_sets));
  for (auto& set : input_sets) {
    for (const auto& in : engine->inputs()) {
      const auto count = static_cast<std::size_t>(ctx->tensor_shape(in.name).volume());
      const auto bytes = random_bytes(in.dtype, count, rng);
      set.emplace_back(target, bytes.size());
      set.back().copy_from_host(bytes.data(), bytes.size());
    }
  }
  std::vector<TargetBuffer> outputs;
  for (const auto& out : engine->outputs()) {
    outputs.emplace_back(target,
                         static_cast<std::size_t>(ctx->tensor_shape(out.name).volume()) * element_size(out.dtype));
    ctx->set_tensor_address(out.name, outputs.back().data());
  }
  auto bind_inputs = [&](std::size_t set) {
    for (std::size_t i = 0; i < engine->inputs().size(); ++i)
      ctx->set_tensor_address(engine->inputs()[i].name, input_sets[set][i].data());
  };
  if (o.graph_mode && o.cuda_graph) throw InvalidArgumentError("--graph-mode and --cuda-graph exclude each other");
  if (o.graph_mode && target.kind != TargetKind::kCuda)
    throw InvalidArgumentError("--graph-mode needs an engine for a CUDA target");
  ctx->set_graph_mode(o.graph_mode);
  TargetStream stream(target);
  TargetTimer timer(target, stream.get());
  for (int i = 0; i < std::max(o.warmup, o.cuda_graph ? 1 : 0); ++i) {  // a graph is captured after one enqueue
    bind_inputs(static_cast<std::size_t>(i) % input_sets.size());
    ctx->enqueue(stream.get());
  }
  stream.synchronize();
  // --cuda-graph: one graph per input set (a graph keeps the addresses it was captured with).
  std::vector<std::unique_ptr<TargetGraph>> graphs;
  if (o.cuda_graph) {
    if (target.kind != TargetKind::kCuda) throw InvalidArgumentError("--cuda-graph needs an engine for a CUDA target");
    for (std::size_t set = 0; set < input_sets.size(); ++set) {
      bind_inputs(set);
      graphs.push_back(std::make_unique<TargetGraph>(target, stream.get(), [&] { ctx->enqueue(stream.get()); }));
    }
    for (int i = 0; i < o.warmup; ++i) graphs[static_cast<std::size_t>(i) % graphs.size()]->launch();
    stream.synchronize();
  }
  std::vector<double> latency, target_time, enqueue_time;
  const auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  for (int i = 0; i < o.iterations; ++i) {
    const auto set = static_cast<std::size_t>(i) % input_sets.size();
    if (!o.cuda_graph) bind_inputs(set);
    const auto start = std::chrono::steady_clock::now();
    timer.start();
    const auto enqueue_start = std::chrono::steady_clock::now();
    if (o.cuda_graph) {
      graphs[set]->launch();
    } else {
      ctx->enqueue(stream.get());
    }
    enqueue_time.push_back(ms_since(enqueue_start));
    timer.stop();
    stream.synchronize();
    latency.push_back(ms_since(start));
    target_time.push_back(timer.elapsed_ms());
  }
  nlohmann::json report;
  report["engine"] = o.engine;
  report["target"] = target.to_string();
  if (target.kind == TargetKind::kCuda) {
    for (const auto& d : system_info().cuda_devices) {
      if (d.index == target.device) report["device"] = d.name;
    }
  }
  report["precision"] = to_string(engine->precision());
  nlohmann::json shape_json = nlohmann::json::object();
  for (const auto& in : engine->inputs()) shape_json[in.name] = ctx->tensor_shape(in.name).values();
  report["shapes"] = shape_json;
  report["warmup"] = o.warmup;
  report["iterations"] = o.iterations;
  report["input_sets"] = o.input_sets;
  report["cuda_graph"] = o.cuda_graph;
  report["graph_mode"] = o.graph_mode;
  if (o.graph_mode) report["graph_captures"] = ctx->graph_captures();
  report["latency_ms"] = percentiles(latency);
  report["target_time_ms"] = percentiles(target_time);
  report["enqueue_ms"] = percentiles(enqueue_time);
  report["throughput_per_s"] = 1000.0 / report["latency_ms"]["mean"].get<double>();
  report["weights_bytes"] = engine->weight_bytes();
  report["context_memory_bytes"] = engine->context_memory_bytes();
  if (o.per_step) {
    std::vector<std::vector<double>> per_step;
    std::vector<ExecutionContext::StepTiming> names;
    for (int r = 0; r < 11; ++r) {
      auto t = ctx->enqueue_profiled(stream.get());
      if (per_step.empty()) {
        per_step.resize(t.size());
        names = t;
      }
      for (std::size_t i = 0; i < t.size(); ++i) per_step[i].push_back(t[i].milliseconds);
    }
    nlohmann::json steps = nlohmann::json::array();
    double total = 0;
    for (std::size_t i = 0; i < per_step.size(); ++i) {
      std::sort(per_step[i].begin(), per_step[i].end());
      const double median = per_step[i][per_step[i].size() / 2];
      total += median;
      steps.push_back({{"layer", names[i].layer}, {"kernel", names[i].kernel}, {"median_ms", median}});
    }
    report["steps"] = steps;
    report["steps_total_ms"] = total;
  }
  std::cout << report.dump(2) << "\n";
  return kExitOk;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure an engine like trtexec: after --warmup runs, times --iterations enqueues (each followed by a stream "
      "synchronize) on random inputs rotated among --input-sets copies so caches don't flatter the numbers. Prints "
      "JSON: latency_ms (host wall time of enqueue + synchronize), enqueue_ms (host time of the enqueue call alone, "
      "trtexec's Enqueue Time), target_time_ms (CUDA events around the enqueue; "
      "the wall clock on the CPU) as min/mean/p50/p90/p99/max, throughput_per_s (inferences per second at these "
      "shapes), memory, and with --per-step the median time of every step.");
  cmd->add_option("ENGINE", o->engine, "engine file")->required();
  cmd->add_option("--shape,-s", o->shapes, "NAME=8x128 input shape (repeat per input); default: each profile's opt");
  cmd->add_option("--warmup", o->warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--iterations,-n", o->iterations, "timed runs")->capture_default_str();
  cmd->add_option("--input-sets", o->input_sets, "copies of the inputs, used in turn")->capture_default_str();
  cmd->add_flag("--per-step", o->per_step, "also time every step (CUDA events between steps)");
  cmd->add_flag("--cuda-graph", o->cuda_graph,
                "time launches of a CUDA graph of one enqueue (captured after a plain one), as trtexec's "
                "--useCudaGraph: no per-kernel host cost");
  cmd->add_flag("--graph-mode", o->graph_mode,
                "enqueue in the execution context's graph mode (ExecutionContext::set_graph_mode): each enqueue "
                "launches the CUDA graph captured for its input set's addresses; what an application gets with that "
                "one switch");
  cmd->footer(
      "Exit status: 0 measured; 1 unreadable engine, shapes outside the profile, or a failure while running; "
      "2 invalid usage.");
  add_plugin_option(cmd, o->plugins);
  cmd->callback([&action, o] { action = [o] { return bench(*o); }; });
}

}  // namespace tensoracle::cli
