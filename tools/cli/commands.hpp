// The `tensoracle` command's subcommands: each registers itself on the CLI11 app and runs when chosen.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tensoracle/engine.hpp"
#include "tensoracle/host_tensor.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::cli {

// Exit statuses shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a file can't be read, is invalid, or the work failed
inline constexpr int kExitUsage = 2;    // the command line is wrong

// A subcommand's action, run after parsing; returns the exit status.
using Action = std::function<int()>;

// `tensoracle safetensors ...`; sets `action` when one of its subcommands is chosen.
void add_safetensors_command(CLI::App& app, Action& action);
// `tensoracle run ...`
void add_run_command(CLI::App& app, Action& action);
// `tensoracle compare CANDIDATE REFERENCE`
void add_compare_command(CLI::App& app, Action& action);
// `tensoracle cache list|prune`
void add_cache_command(CLI::App& app, Action& action);
// `tensoracle convert CHECKPOINT OUTPUT` (convert_command.cpp)
void add_convert_command(CLI::App& app, Action& action);
// `tensoracle calibrate NETWORK --batch FILE... -o QUANTIZED` (calibrate_command.cpp)
void add_calibrate_command(CLI::App& app, Action& action);
// `tensoracle bundle compile|inspect|inspect-library` (bundle_command.cpp)
void add_bundle_command(CLI::App& app, Action& action);

// `tensoracle build ...` and `tensoracle inspect ...` (engine_commands.cpp)
void add_build_command(CLI::App& app, Action& action);
void add_inspect_command(CLI::App& app, Action& action);
// `tensoracle bench ...` (bench_command.cpp)
void add_bench_command(CLI::App& app, Action& action);

// The end of the process (process_exit.cpp). A command that started the GPU says so (load_engine does for a CUDA
// engine); main then returns its status through end_process, which ends such a process without CUDA's teardown at
// exit unless TENSORACLE_EXIT_TEARDOWN=1 or a CUDA profiler or compute-sanitizer is attached (CUDA_INJECTION64_PATH).
void note_gpu_started();
int end_process(int status);

// Engine files (engine_files.cpp): plain engines, or cache entries.
std::vector<std::byte> read_engine_bytes(const std::string& path);
std::string read_engine_manifest(const std::string& path);
std::shared_ptr<const Engine> load_engine(const std::string& path);
// `--plugin LIB` (repeatable) on `cmd`: plugin libraries (docs/plugins.md) that load_plugins loads before an engine or
// a network with plugin layers is read.
void add_plugin_option(CLI::App* cmd, std::vector<std::string>& libraries);
void load_plugins(const std::vector<std::string>& libraries);
// The inputs of a network JSON from a safetensors file (one tensor per input, by name, with the declared dtype; no
// other tensors), as `tensoracle run --inputs` and `tensoracle calibrate --batch` read them. InvalidArgumentError
// naming the file and input otherwise; an empty path is allowed only for a network without inputs.
std::map<std::string, HostTensor> read_network_inputs(const Network& network, const std::string& path);
// True when the file starts like an engine or a cache entry (else: a network JSON).
bool looks_like_engine(const std::string& path);
// "8x128" → Dims; "scalar" or "" → rank 0. InvalidArgumentError naming `what` otherwise.
Dims parse_dims(const std::string& text, const std::string& what);

}  // namespace tensoracle::cli
