// CUDA step of plugin layers: the plugin's CUDA kernel object, created and configured when the context's shapes are
// set, enqueued on the context's stream with the step's device addresses and scratch.
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "graph/plugin_layer.hpp"

namespace tensoracle::cuda {

void register_plugin_kernels(std::vector<KernelEntry>& kernels);

namespace {

struct PluginPlan {
  std::shared_ptr<plugin::PluginKernel> kernel;  // shared: plans are values
  std::vector<plugin::TensorDesc> inputs, outputs;
  std::string what;  // "layer 'L': plugin 'T' version 'V'"
};

bool supports_plugin(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (!graph::plugin_supports(graph, layer, plugin::Device::kCuda))
    throw UnsupportedError(graph::plugin_unsupported_message(graph, layer, "CUDA"));
  return true;
}

std::size_t plugin_workspace(const graph::Graph& graph, const graph::Layer& layer, const std::vector<Dims>& shapes,
                             Precision /*precision*/) {
  return graph::plugin_workspace_bytes(graph, layer, shapes, plugin::Device::kCuda);
}

PluginPlan prepare_plugin(const StepLaunch& launch) {
  const plugins::RegisteredPlugin& plugin = graph::plugin_of(*launch.layer);
  PluginPlan plan;
  plan.what =
      fmt::format("layer '{}': plugin '{}' version '{}'", launch.layer->name, plugin.info.type, plugin.info.version);
  for (const auto& t : launch.inputs) plan.inputs.push_back(graph::plugin_tensor_desc(t.dtype, t.shape));
  for (const auto& t : launch.outputs) plan.outputs.push_back(graph::plugin_tensor_desc(t.dtype, t.shape));
  const graph::PluginFieldSet fields(launch.layer->attrs);
  graph::PluginErrorSink error;
  plugin::PluginKernel* kernel = plugin.creator->create(fields.fields(), plugin::Device::kCuda, error);
  if (kernel == nullptr) throw Error(fmt::format("{} could not create its CUDA kernel: {}", plan.what, error.text()));
  plan.kernel = std::shared_ptr<plugin::PluginKernel>(kernel, graph::PluginKernelDeleter{});
  if (!kernel->configure(plan.inputs.data(), static_cast<std::int32_t>(plan.inputs.size()), plan.outputs.data(),
                         static_cast<std::int32_t>(plan.outputs.size()), error))
    throw Error(fmt::format("{} refused the shapes: {}", plan.what, error.text()));
  return plan;
}

void launch_plugin(const StepLaunch& launch, const PluginPlan& plan) {
  // Fixed-size arrays: a launch function does not allocate.
  const void* inputs[64] = {};
  void* outputs[plugin::kMaxOutputs] = {};
  if (launch.inputs.size() > 64) throw Error(fmt::format("{}: more than 64 inputs", plan.what));
  for (std::size_t i = 0; i < launch.inputs.size(); ++i) inputs[i] = launch.inputs[i].data;
  for (std::size_t o = 0; o < launch.outputs.size() && o < plugin::kMaxOutputs; ++o)
    outputs[o] = launch.outputs[o].data;
  graph::PluginErrorSink error;
  if (!plan.kernel->enqueue(plan.inputs.data(), inputs, static_cast<std::int32_t>(plan.inputs.size()),
                            plan.outputs.data(), outputs, static_cast<std::int32_t>(plan.outputs.size()),
                            launch.workspace, launch.workspace_bytes, launch.stream, error))
    throw CudaError(fmt::format("{} failed to enqueue: {}", plan.what, error.text()));
}

}  // namespace

void register_plugin_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back(
      prepared_kernel<prepare_plugin, launch_plugin>("plugin_cuda", "plugin", supports_plugin, 0, plugin_workspace));
}

}  // namespace tensoracle::cuda
