// CPU kernel of plugin layers: the plugin's host implementation, made, configured and run for each call.
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "backends/cpu/kernel_context.hpp"
#include "graph/plugin_layer.hpp"

namespace tensoracle::cpu {
namespace {

// The reference backend keeps no state between calls, so the plugin's runtime object lives for one call: it is
// created, configured for these shapes, run on the calling thread and destroyed.
void plugin_layer(KernelContext& ctx) {
  const plugins::RegisteredPlugin& plugin = graph::plugin_of(ctx);
  const graph::PluginFieldSet fields(ctx.attrs());
  std::vector<plugin::TensorDesc> ins, outs;
  std::vector<const void*> in_data;
  std::vector<void*> out_data;
  for (std::size_t i = 0; i < ctx.num_inputs(); ++i) {
    ins.push_back(graph::plugin_tensor_desc(ctx.input(i).dtype, ctx.input(i).shape));
    in_data.push_back(ctx.input(i).bytes.data());
  }
  for (std::size_t o = 0; o < ctx.num_outputs(); ++o) {
    outs.push_back(graph::plugin_tensor_desc(ctx.output(o).dtype, ctx.output(o).shape));
    out_data.push_back(ctx.output(o).bytes.data());
  }
  const auto nin = static_cast<std::int32_t>(ins.size());
  const auto nout = static_cast<std::int32_t>(outs.size());
  const auto what = [&] { return fmt::format("plugin '{}' version '{}'", plugin.info.type, plugin.info.version); };
  graph::PluginErrorSink error;
  std::unique_ptr<plugin::PluginKernel, graph::PluginKernelDeleter> kernel(
      plugin.creator->create(fields.fields(), plugin::Device::kHost, error));
  if (!kernel) ctx.fail(fmt::format("{} could not create its host kernel: {}", what(), error.text()));
  if (!kernel->configure(ins.data(), nin, outs.data(), nout, error))
    ctx.fail(fmt::format("{} refused the shapes: {}", what(), error.text()));
  std::vector<std::byte> workspace(
      plugin.creator->workspace_bytes(fields.fields(), plugin::Device::kHost, ins.data(), nin, outs.data(), nout));
  if (!kernel->enqueue(ins.data(), in_data.data(), nin, outs.data(), out_data.data(), nout, workspace.data(),
                       workspace.size(), nullptr, error))
    ctx.fail(fmt::format("{} failed: {}", what(), error.text()));
}

}  // namespace

void register_plugin_kernels(std::vector<KernelEntry>& kernels) { kernels.push_back({"plugin", plugin_layer}); }

}  // namespace tensoracle::cpu
