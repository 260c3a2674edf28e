// `tensoracle run`: runs an engine, or a JSON network on the CPU reference executor, on safetensors inputs.
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "core/stopwatch.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"
#include "tensoracle/safetensors.hpp"
#include "tensoracle/target_memory.hpp"

namespace tensoracle::cli {
namespace {

struct RunOptions {
  std::string network;
  std::string inputs;
  std::string output;
  std::vector<std::string> weights;
  std::vector<std::string> plugins;
  bool verbose = false;
};

// Milliseconds since this process started (its start time in /proc/self/stat, in clock ticks: 10 ms resolution), or
// -1 where that is not readable: for --verbose's account of the time before main and after the work.
double process_age_ms() {
  std::ifstream stat("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const std::size_t close = text.rfind(')');  // the command name may hold spaces; the fields follow its ')'
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && fields >> field; ++i) {
  }
  unsigned long long start_ticks = 0;
  timespec now{};
  if (!(fields >> start_ticks) || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9) * 1e3 -
         static_cast<double>(start_ticks) * 1e3 / ticks_per_second;
}

// Runs an engine: inputs from the safetensors file set the shapes; outputs come back to the host.
int run_engine(const RunOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto ms_between = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  const auto t_start = Clock::now();
  if (log_enabled(LogSeverity::kVerbose)) {
    log(LogSeverity::kVerbose,
        fmt::format("opening the engine {:.1f} ms after the library was loaded, {:.0f} ms after the process started",
                    Stopwatch::since_library_load_ms(), process_age_ms()));
  }
  auto engine = load_engine(options.network);
  const auto t_loaded = Clock::now();
  auto ctx = engine->create_execution_context();
  const auto t_context = Clock::now();
  std::shared_ptr<const SafetensorsFile> file;
  if (!engine->inputs().empty()) {
    if (options.inputs.empty())
      throw InvalidArgumentError("the engine has inputs; give them with --inputs FILE.safetensors");
    file = SafetensorsFile::open(options.inputs);
  }
  std::map<std::string, Dims> shapes;
  for (const auto& in : engine->inputs()) {
    const TensorInfo* info = file->find(in.name);
    if (info == nullptr)
      throw InvalidArgumentError(fmt::format("{}: input '{}' ({} {}) is missing", options.inputs, in.name,
                                             to_string(in.dtype), in.dims.to_string()));
    if (info->dtype != in.dtype)
      throw InvalidArgumentError(fmt::format("{}: input '{}' is {}, the engine expects {}", options.inputs, in.name,
                                             safetensors_name(info->dtype), to_string(in.dtype)));
    shapes[in.name] = info->shape;
  }
  if (file) {
    for (const TensorInfo& info : file->tensors()) {
      if (shapes.count(info.name) == 0)
        throw InvalidArgumentError(fmt::format("{}: '{}' is not an input of the engine", options.inputs, info.name));
    }
  }
  ctx->set_input_shapes(shapes);
  const auto t_shapes = Clock::now();
  const Target target = engine->target();
  std::vector<TargetBuffer> buffers;
  for (const auto& in : engine->inputs()) {
    const TensorInfo* info = file->find(in.name);
    std::vector<std::byte> host(info->byte_size());
    file->read(*info, host.data());
    buffers.emplace_back(target, host.size());
    buffers.back().copy_from_host(host.data(), host.size());
    ctx->set_tensor_address(in.name, buffers.back().data());
  }
  std::vector<HostTensor> results;
  for (const auto& out : engine->outputs()) {
    results.emplace_back(ctx->tensor_dtype(out.name), ctx->tensor_shape(out.name));
    buffers.emplace_back(target, results.back().bytes.size());
    buffers.back().fill(0xFF);  // poisoned: unwritten elements show as NaN or -1
    ctx->set_tensor_address(out.name, buffers.back().data());
  }
  TargetStream stream(target);
  TargetTimer timer(target, stream.get());
  const auto t_bound = Clock::now();
  timer.start();
  ctx->enqueue(stream.get());
  timer.stop();
  stream.synchronize();
  const auto t_ran = Clock::now();
  const double first_result_age_ms = process_age_ms();  // the time to the first inference, process start included
  const double ms = timer.elapsed_ms();
  std::vector<TensorToWrite> tensors;
  for (std::size_t i = 0; i < engine->outputs().size(); ++i) {
    const TargetBuffer& b = buffers[engine->inputs().size() + i];
    b.copy_to_host(results[i].bytes.data(), results[i].bytes.size());
    tensors.push_back(results[i].to_write(engine->outputs()[i].name));
  }
  write_safetensors(options.output, tensors);
  if (log_enabled(LogSeverity::kVerbose)) {
    log(LogSeverity::kVerbose,
        fmt::format("outputs written {:.1f} ms after the library was loaded", Stopwatch::since_library_load_ms()));
  }
  std::cerr << fmt::format("tensoracle run: engine on {} ({}) in {:.3f} ms; wrote {} output(s) to {}\n",
                           target.to_string(), to_string(engine->precision()), ms, tensors.size(), options.output);
  // Where the time to the first inference went (the first CUDA call in load also starts the CUDA runtime).
  std::cerr << fmt::format(
      "tensoracle run: first inference {:.1f} ms after the engine was opened, {:.0f} ms after the process started: "
      "load (read, start the GPU, deserialize, upload) {:.1f} ms, context {:.1f} ms, set_input_shapes (prepare) {:.1f} "
      "ms, inputs and outputs {:.1f} ms, first enqueue + synchronize {:.1f} ms\n",
      ms_between(t_start, t_ran), first_result_age_ms, ms_between(t_start, t_loaded), ms_between(t_loaded, t_context),
      ms_between(t_context, t_shapes), ms_between(t_shapes, t_bound), ms_between(t_bound, t_ran));
  return kExitOk;
}

int run(const RunOptions& options) {
  if (options.verbose) set_log_level(LogSeverity::kVerbose);
  load_plugins(options.plugins);
  if (looks_like_engine(options.network)) {
    const int status = run_engine(options);
    if (log_enabled(LogSeverity::kVerbose)) {
      log(LogSeverity::kVerbose, fmt::format("engine, context and buffers released {:.1f} ms after the library was "
                                             "loaded, {:.0f} ms after the process started",
                                             Stopwatch::since_library_load_ms(), process_age_ms()));
    }
    return status;
  }
  Network network = options.weights.empty()
                        ? Network::from_json_file(options.network)
                        : Network::from_json_file(options.network,
                                                  WeightStore::open({options.weights.begin(), options.weights.end()}));
  const std::map<std::string, HostTensor> inputs = read_network_inputs(network, options.inputs);
  auto start = std::chrono::steady_clock::now();
  std::map<std::string, HostTensor> outputs = run_reference(network, inputs);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, tensor] : outputs) tensors.push_back(tensor.to_write(name));
  write_safetensors(options.output, tensors);
  std::cerr << fmt::format("tensoracle run: {} layers on cpu (reference) in {:.2f} ms; wrote {} output(s) to {}\n",
                           network.num_layers(), ms, outputs.size(), options.output);
  return kExitOk;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run an engine (from 'tensoracle build' or the engine cache) on its target, or a network described in JSON "
      "(docs/network-json.md) on the CPU reference executor. Inputs are read from a safetensors file (one tensor per "
      "input, by name, with the declared dtype; their shapes set the engine's input shapes); every output is written "
      "to the output safetensors file.");
  cmd->add_option("NETWORK", options->network, "engine file or network JSON file")->required();
  cmd->add_option("--inputs,-i", options->inputs, "safetensors file holding the inputs");
  cmd->add_option("--output,-o", options->output, "safetensors file to write the outputs to")->required();
  cmd->add_option(
      "--weights,-w", options->weights,
      "weight files (.safetensors or .safetensors.index.json); default: the files the JSON names, relative to it");
  cmd->footer(
      "Exit status: 0 success; 1 invalid network, missing or ill-shaped input, unreadable file; 2 invalid usage.");
  cmd->add_flag("--verbose,-v", options->verbose,
                "the library's verbose messages on stderr: among them how long each part of opening an engine took "
                "(starting the GPU, uploading weights, loading kernels, library handles)");
  add_plugin_option(cmd, options->plugins);
  cmd->callback([&action, options] { action = [options] { return run(*options); }; });
}

}  // namespace tensoracle::cli
