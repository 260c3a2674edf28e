// The CPU kernel registry: one explicit list built from every family's registration function.
#include <algorithm>

#include "backends/cpu/kernel_context.hpp"

namespace tensoracle::cpu {

Kernel find_kernel(std::string_view op) {
  static const std::vector<KernelEntry> kernels = [] {
    std::vector<KernelEntry> all;
    register_elementwise_kernels(all);
    register_linear_algebra_kernels(all);
    register_convolution_kernels(all);
    register_normalization_kernels(all);
    register_reduction_kernels(all);
    register_data_movement_kernels(all);
    register_transformer_kernels(all);
    register_quantization_kernels(all);
    register_plugin_kernels(all);
    std::sort(all.begin(), all.end(), [](const KernelEntry& a, const KernelEntry& b) { return a.op < b.op; });
    return all;
  }();
  auto it = std::lower_bound(kernels.begin(), kernels.end(), op,
                             [](const KernelEntry& e, std::string_view n) { return e.op < n; });
  return (it != kernels.end() && it->op == op) ? it->kernel : nullptr;
}

}  // namespace tensoracle::cpu
