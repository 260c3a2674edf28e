// `tensoracle build` and `tensoracle inspect`: build an engine from a JSON network, print an engine's manifest.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <sys/ioctl.h>

#include "commands.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::cli {

Dims parse_dims(const std::string& text, const std::string& what) {
  std::vector<std::int64_t> dims;
  if (text.empty() || text == "scalar") return Dims(dims);
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('x', start), text.size());
    const std::string part = text.substr(start, end - start);
    if (part.empty() || part.size() > 18 || part.find_first_not_of("0123456789") != std::string::npos)
      throw InvalidArgumentError(fmt::format("{}: '{}' is not a shape like 8x128", what, text));
    dims.push_back(std::stoll(part));
    start = end + 1;
  }
  return Dims(dims);
}

namespace {

struct BuildOptions {
  std::string network;
  std::vector<std::string> weights;
  std::string output;
  std::string target = "auto";
  std::string precision = "fp32";
  std::vector<std::string> profiles;
  bool no_timing = false;
  std::string timing_cache;
  std::size_t max_scratch = std::size_t{256} << 20;
  bool quiet = false;
  bool verbose = false;
  std::vector<std::string> plugins;
};

// "choosing kernels [#########.........] 120/218 encoder.layer.5.attention", fitted to the terminal's width.
void draw_progress(const BuildProgress& p) {
  winsize size{};
  const int columns = ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0 ? size.ws_col : 80;
  constexpr std::size_t kBar = 24;
  const std::size_t filled = p.total == 0 ? kBar : p.done * kBar / p.total;
  std::string line = fmt::format("{} [{}{}] {}/{} {}", p.stage == "compile" ? "compiling kernels" : "choosing kernels",
                                 std::string(filled, '#'), std::string(kBar - filled, '.'), p.done, p.total, p.item);
  if (line.size() >= static_cast<std::size_t>(columns)) line.resize(static_cast<std::size_t>(columns) - 1);
  std::cerr << "\r\033[K" << line << std::flush;
}

int build(const BuildOptions& o) {
  load_plugins(o.plugins);
  BuilderConfig config;
  config.target = Target::parse(o.target);
  config.precision = parse_precision(o.precision);
  config.time_kernels = !o.no_timing;
  config.timing_cache = o.timing_cache;
  config.max_scratch_bytes = o.max_scratch;
  for (const auto& p : o.profiles) {
    const auto eq = p.find('=');
    if (eq == std::string::npos)
      throw InvalidArgumentError(fmt::format("--profile '{}': expected NAME=MIN:OPT:MAX", p));
    const std::string name = p.substr(0, eq);
    const std::string rest = p.substr(eq + 1);
    const auto c1 = rest.find(':');
    const auto c2 = c1 == std::string::npos ? std::string::npos : rest.find(':', c1 + 1);
    if (c2 == std::string::npos) {
      const Dims fixed = parse_dims(rest, "--profile " + name);
      config.add_profile(name, fixed, fixed, fixed);
    } else {
      config.add_profile(name, parse_dims(rest.substr(0, c1), "--profile " + name),
                         parse_dims(rest.substr(c1 + 1, c2 - c1 - 1), "--profile " + name),
                         parse_dims(rest.substr(c2 + 1), "--profile " + name));
    }
  }
  // On a terminal: a progress bar on stderr's last line, redrawn in place, instead of a log line per timed step.
  const bool bar = !o.quiet && isatty(STDERR_FILENO) != 0;
  if (!o.quiet) {
    set_log_level(o.verbose ? LogSeverity::kVerbose : LogSeverity::kInfo);
    set_log_callback([bar](LogSeverity severity, std::string_view message) {
      if (bar && message.rfind("build: step ", 0) == 0) return;  // the bar shows it
      std::cerr << (bar ? "\r\033[K" : "")
                << "tensoracle build: " << (severity <= LogSeverity::kWarning ? "warning: " : "") << message << "\n";
    });
  }
  if (bar) config.progress = draw_progress;
  Network network = o.weights.empty()
                        ? Network::from_json_file(o.network)
                        : Network::from_json_file(o.network, WeightStore::open({o.weights.begin(), o.weights.end()}));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::byte> bytes;
  try {
    bytes = Builder(config).build(network);
  } catch (...) {
    if (bar) std::cerr << "\r\033[K" << std::flush;
    throw;
  }
  if (bar) std::cerr << "\r\033[K" << std::flush;
  if (config.target.kind == TargetKind::kCuda) note_gpu_started();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_file_atomically(o.output, bytes.data(), bytes.size(), 0644);
  std::cout << fmt::format(
      "{{\"engine\":\"{}\",\"bytes\":{},\"target\":\"{}\",\"precision\":\"{}\",\"build_seconds\":{:.3f}}}\n", o.output,
      bytes.size(), config.target.to_string(), to_string(config.precision), seconds);
  return kExitOk;
}

}  // namespace

void add_build_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<BuildOptions>();
  CLI::App* cmd = app.add_subcommand(
      "build",
      "Build an engine from a network JSON (docs/network-json.md) for one target and precision and write it to a file "
      "(docs/engine-format.md). Inputs with dynamic (-1) dims need a --profile.");
  cmd->add_option("NETWORK", o->network, "network JSON file")->required();
  cmd->add_option("--output,-o", o->output, "engine file to write")->required();
  cmd->add_option("--weights,-w", o->weights, "weight files; default: the files the JSON names, relative to it");
  cmd->add_option("--target,-t", o->target, "cpu, cuda, cuda:N or auto (a GPU when one is usable)")
      ->capture_default_str();
  cmd->add_option("--precision,-p", o->precision,
                  "fp32 (TF32 off), tf32, fp16 or bf16 (f32 tensors lowered, f32 accumulation)")
      ->capture_default_str();
  cmd->add_option(
      "--profile", o->profiles,
      "NAME=MIN:OPT:MAX shapes (e.g. x=1x128:8x128:32x128) or NAME=SHAPE for a fixed shape; repeat per input");
  cmd->add_flag("--no-timing", o->no_timing, "take the first kernel that fits instead of timing candidates");
  cmd->add_option("--timing-cache", o->timing_cache,
                  "timing cache FILE: reuse the kernel choices it holds instead of timing those problems again, and "
                  "add this build's (created when missing; shareable between machines with the same GPU model and "
                  "library versions; one written for others is ignored with a warning and rewritten)");
  cmd->add_option("--max-scratch", o->max_scratch, "largest scratch memory per context, in bytes")
      ->capture_default_str();
  cmd->add_flag("--quiet,-q", o->quiet, "no progress messages");
  cmd->add_flag("--verbose,-v", o->verbose,
                "more messages: each timed layer's candidates with their median times (or why one was dropped)");
  add_plugin_option(cmd, o->plugins);
  cmd->footer(
      "Prints one JSON line describing the engine. Exit status: 0 built; 1 invalid network, profile or "
      "unsupported layer (the message names it); 2 invalid usage.");
  cmd->callback([&action, o] { action = [o] { return build(*o); }; });
}

void add_inspect_command(CLI::App& app, Action& action) {
  auto path = std::make_shared<std::string>();
  auto plugins = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Print an engine's manifest as JSON: target, precision, inputs with profiles, outputs, every step (layer, op, "
      "chosen kernel, output dtypes and shapes), the weights table and the memory plan. The engine is validated "
      "but not loaded onto a GPU.");
  cmd->add_option("ENGINE", *path, "engine file")->required();
  add_plugin_option(cmd, *plugins);
  cmd->footer(
      "An engine with plugin layers needs its plugin libraries (--plugin; the manifest's \"plugins\" lists them). "
      "Exit status: 0 printed; 1 unreadable or invalid engine, or a plugin library missing; 2 invalid usage.");
  cmd->callback([&action, path, plugins] {
    action = [path, plugins] {
      load_plugins(*plugins);
      std::cout << read_engine_manifest(*path);
      return kExitOk;
    };
  });
}

}  // namespace tensoracle::cli
