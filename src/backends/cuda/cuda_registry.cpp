// The CUDA kernel registry: every family's kernels in one explicit list; names and candidates for the builder.
#include <algorithm>
#include <string>

#include "backends/cuda/codegen/elementwise_codegen.hpp"
#include "backends/cuda/codegen/nvrtc_compiler.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_step.hpp"

namespace tensoracle::cuda {

const std::vector<KernelEntry>& kernel_registry() {
  static const std::vector<KernelEntry> kernels = [] {
    std::vector<KernelEntry> all;
    register_elementwise_kernels(all);
    register_linear_algebra_kernels(all);
    register_normalization_kernels(all);
    register_data_movement_kernels(all);
    register_reduction_kernels(all);
    register_transformer_kernels(all);
    register_convolution_kernels(all);
    register_pointwise_convolution_kernels(all);  // after cuDNN's: --no-timing builds keep cuDNN
    register_pooling_kernels(all);
    register_resize_kernels(all);
    register_quantization_kernels(all);
    register_quantized_linear_kernels(all);
    register_quantized_convolution_kernels(all);
    register_fused_elementwise_kernels(all);
    register_plugin_kernels(all);
    std::stable_sort(all.begin(), all.end(),
                     [](const KernelEntry& a, const KernelEntry& b) { return std::string(a.op) < std::string(b.op); });
    return all;
  }();
  return kernels;
}

const KernelEntry* find_kernel_entry(const std::string& name) {
  for (const auto& k : kernel_registry()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

bool backend_built() { return true; }

bool has_kernel(const std::string& kernel, const std::string& op) {
  const KernelEntry* k = find_kernel_entry(kernel);
  return k != nullptr && op == k->op;
}

std::vector<std::string> kernel_candidates(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  std::vector<std::string> names;
  for (const auto& k : kernel_registry()) {
    if (layer.op == k.op && k.supports(graph, layer, precision)) names.emplace_back(k.name);
  }
  return names;
}

std::optional<backends::GeneratedKernel> generate_step_kernel(const graph::Graph& graph, const graph::Layer& layer,
                                                              const std::string& kernel) {
  if (generated_entry_count(kernel) == 0) return std::nullopt;
  codegen::GeneratedSource generated = codegen::generate_fused_elementwise(graph, layer);
  return backends::GeneratedKernel{std::move(generated.source), std::move(generated.entries)};
}

std::vector<std::byte> compile_generated_kernel(const std::string& source, int cc_major, int cc_minor,
                                                const std::string& what) {
  return codegen::compile_to_cubin(source, cc_major, cc_minor, what);
}

}  // namespace tensoracle::cuda
