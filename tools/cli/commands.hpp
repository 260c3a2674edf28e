// The `tensoracle` command's subcommands: each registers itself on the CLI11 app and runs when chosen.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

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

}  // namespace tensoracle::cli
