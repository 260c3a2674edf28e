// Stable kernel names recorded in engines, and which names this build can run, per target.
#include "runtime/kernel_names.hpp"

#include "backends/cpu/kernel_context.hpp"
#include "backends/cuda/cuda_kernels.hpp"

namespace tensoracle::runtime {

std::string cpu_kernel_name(std::string_view op) { return std::string(op) + "_cpu_reference"; }

std::size_t generated_kernel_entry_count(std::string_view kernel) {
  // fused_elementwise_nvrtc: contiguous, broadcast with int32 and with int64 indices (backends/cuda/codegen).
  return kernel == "fused_elementwise_nvrtc" ? 3 : 0;
}

bool is_known_kernel(TargetKind target, const std::string& kernel, const std::string& op) {
  if (target == TargetKind::kCpu) return cpu::find_kernel(op) != nullptr && kernel == cpu_kernel_name(op);
  return cuda::has_kernel(kernel, op);
}

}  // namespace tensoracle::runtime
