// Stable kernel names recorded in engines, and which names this build can run, per target.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "tensoracle/builder.hpp"

namespace tensoracle::runtime {

// The CPU target runs every op with its reference kernel: "<op>_cpu_reference".
std::string cpu_kernel_name(std::string_view op);

// True when this build has a kernel of that name for the op on the target.
bool is_known_kernel(TargetKind target, const std::string& kernel, const std::string& op);

// Kernels generated and compiled for each step at build time carry a binary in the engine's "kernels" section with
// this many entry points; 0 for every other kernel (hand-written and CPU ones). Known in every build, so engines can
// be validated and inspected where the CUDA backend is absent.
std::size_t generated_kernel_entry_count(std::string_view kernel);

}  // namespace tensoracle::runtime
