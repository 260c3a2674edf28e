// Checks shared by the bundle reader, the writer and the producer, and running a tool as a child process.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/bundle.hpp"

namespace tensoracle::bundle {

// BundleError naming `what` unless `name` is a C identifier.
void check_identifier(const std::string& name, std::string_view what);
void check_kernel_name(const std::string& name, std::string_view where);
void check_entry_name(const std::string& entry, std::string_view where);
void check_constant_value(const std::string& value, std::string_view where);
void check_unique_sorted_constants(const std::vector<ConstantValue>& constants, std::string_view where);
// 0 for CUDA C++, 2 for Triton.
void check_scratch_pointers(KernelKind kind, int scratch_pointers, std::string_view where);
// CubinArchitectureError unless `sm` is in known_architectures().
void check_known_architecture(int sm, std::string_view where);
// Each cubin at cubins/sm<NN>/<name>.cubin, one per architecture, in the architectures' order.
void check_cubin_records(const KernelRecord& kernel, const std::vector<int>& architectures, std::string_view where);

// What a child process printed (stdout and stderr together) and its exit status.
struct ToolResult {
  int exit_status = -1;  // -1: killed by a signal
  std::string output;
};

// Runs `argv` (argv[0] a path; no shell) and waits for it. IoError when it cannot be started.
ToolResult run_tool(const std::vector<std::string>& argv);

// "cmd arg 'arg with space'" for messages.
std::string command_text(const std::vector<std::string>& argv);

}  // namespace tensoracle::bundle
