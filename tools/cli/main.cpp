// Entry point of the `tensoracle` command: parses the command line and dispatches to a subcommand.
#include <cstdio>
#include <exception>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/system_info.hpp"
#include "tensoracle/version.hpp"

namespace {

std::string version_text() {
  const tensoracle::SystemInfo info = tensoracle::system_info();
  std::string text = fmt::format("tensoracle {}\n", info.library_version);
  if (!info.cuda_backend_built) {
    text += "CUDA backend: not built\n";
  } else {
    text += fmt::format("CUDA backend: built (CUDA runtime {}.{}), driver: ", info.cuda_runtime_version / 1000,
                        (info.cuda_runtime_version % 1000) / 10);
    text += info.cuda_driver_version
                ? fmt::format("CUDA {}.{}\n", info.cuda_driver_version / 1000, (info.cuda_driver_version % 1000) / 10)
                : std::string("none\n");
    text += fmt::format("cuBLASLt {}, cuDNN {}\n", info.cublaslt_version, info.cudnn_version);
  }
  for (const auto& d : info.cuda_devices) {
    text += fmt::format("GPU {}: {} (sm_{}{}, {} SMs, {:.1f} GiB)\n", d.index, d.name, d.compute_capability_major,
                        d.compute_capability_minor, d.multiprocessor_count,
                        static_cast<double>(d.total_memory_bytes) / (1024.0 * 1024.0 * 1024.0));
  }
  if (info.cuda_devices.empty())
    text += fmt::format("GPU: none usable ({}); the CPU target is used\n", info.cuda_unavailable_reason);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tensoracle: turns safetensors weights into cached, optimized inference engines.\n"
      "Run 'tensoracle COMMAND --help' for the options of each command.",
      "tensoracle"};
  app.set_help_all_flag("--help-all", "Print help for every command and exit");
  app.require_subcommand(1);
  app.fallthrough(false);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version, the CUDA runtime and the GPUs found, and exit");
  app.footer(
      "Exit status: 0 success, 1 a file could not be read or was invalid (or the work failed), 2 invalid usage.");

  tensoracle::cli::Action action;
  tensoracle::cli::add_safetensors_command(app, action);
  tensoracle::cli::add_build_command(app, action);
  tensoracle::cli::add_run_command(app, action);
  tensoracle::cli::add_inspect_command(app, action);
  tensoracle::cli::add_bench_command(app, action);
  tensoracle::cli::add_compare_command(app, action);
  tensoracle::cli::add_cache_command(app, action);
  tensoracle::cli::add_convert_command(app, action);
  tensoracle::cli::add_bundle_command(app, action);
  tensoracle::cli::add_calibrate_command(app, action);

  // --version works without a subcommand.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--version") {
      std::fputs(version_text().c_str(), stdout);
      return tensoracle::cli::kExitOk;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "tensoracle: " << tensoracle::escape_unprintable(e.what()) << "\nRun 'tensoracle --help' for usage.\n";
    return tensoracle::cli::kExitUsage;
  }
  if (!action) {
    std::cerr << "tensoracle: choose a command; run 'tensoracle --help' for the list\n";
    return tensoracle::cli::kExitUsage;
  }
  try {
    return tensoracle::cli::end_process(action());
  } catch (const tensoracle::Error& e) {
    std::cerr << "tensoracle: " << e.what() << "\n";
    return tensoracle::cli::kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "tensoracle: unexpected error: " << tensoracle::escape_unprintable(e.what()) << "\n";
    return tensoracle::cli::kExitFailure;
  }
}
