// Stable kernel names recorded in engines, and which names this build can run, per target.
#pragma once

#include <string>
#include <string_view>

#include "tensoracle/builder.hpp"

namespace tensoracle::runtime {

// The CPU target runs every op with its reference kernel: "<op>_cpu_reference".
std::string cpu_kernel_name(std::string_view op);

// True when this build has a kernel of that name for the op on the target.
bool is_known_kernel(TargetKind target, const std::string& kernel, const std::string& op);

}  // namespace tensoracle::runtime
