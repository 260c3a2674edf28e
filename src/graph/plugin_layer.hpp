// Plugin layers in the graph: their fields in the plugin interface's form, their creator, and what the builder and
// the backends ask of it (supported dtypes, workspace) with the layer's tensors described for the plugin.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "plugins/registry.hpp"
#include "tensoracle/dims.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/plugin.hpp"

namespace tensoracle::graph {

// The attribute prefix of a field and the attribute listing the fields' names in their order.
inline constexpr std::string_view kPluginFieldPrefix = "f:";
inline constexpr std::string_view kPluginFieldOrder = "field_names";

// A plugin layer's attributes from its type, version and fields; GraphError for invalid names or repeated fields.
Attributes plugin_attributes(const std::string& type, const std::string& version,
                             const std::vector<PluginField>& fields);

// The fields of a plugin layer in their order, as plugin::Fields. It points into `attrs`, which must outlive it.
class PluginFieldSet {
 public:
  explicit PluginFieldSet(const Attributes& attrs);
  plugin::Fields fields() const noexcept {
    return plugin::Fields{items_.data(), static_cast<std::int32_t>(items_.size())};
  }

 private:
  std::vector<std::string> names_;
  std::vector<plugin::Field> items_;
};

// The plugin a layer names (its type and version attributes, read through `attrs`: a layer's, or a shape function's
// or a CPU kernel's context); GraphError naming the layer when no loaded library provides it.
const plugins::RegisteredPlugin& plugin_of(const AttrReader& attrs);
const plugins::RegisteredPlugin& plugin_of(const Layer& layer);

// A tensor as the plugin sees it: dtype, linear format, dims (at most plugin::kMaxRank of them).
plugin::TensorDesc plugin_tensor_desc(DataType dtype, const Dims& dims);

// Owns a plugin's runtime object: destroy() frees it in the library that made it.
struct PluginKernelDeleter {
  void operator()(plugin::PluginKernel* kernel) const noexcept { kernel->destroy(); }
};

// Descriptors of tensors for the plugin: the graph's static dims (-1 where symbolic), or the given concrete shapes
// (indexed by tensor id). Absent optional inputs (id -1) get rank -1.
std::vector<plugin::TensorDesc> plugin_tensor_descs(const Graph& graph, const std::vector<std::int32_t>& ids,
                                                    const std::vector<Dims>* shapes = nullptr);

// Whether the layer's plugin runs its inputs and outputs, as the graph types them, on `device`.
bool plugin_supports(const Graph& graph, const Layer& layer, plugin::Device device);

// Whether the layer's plugin would run on `device` with inputs of `input_dtypes` (ranks as in the graph), and the
// output dtypes it would then give; nullopt when its creator refuses those inputs or doesn't support the combination.
std::optional<std::vector<DataType>> plugin_supports_dtypes(const Graph& graph, const Layer& layer,
                                                            const std::vector<DataType>& input_dtypes,
                                                            plugin::Device device);

// "layer 'L': plugin 'T' version 'V' has no DEVICE implementation for inputs (f32, f16) and outputs (f32); ..."
std::string plugin_unsupported_message(const Graph& graph, const Layer& layer, const std::string& device);

// Scratch bytes the plugin needs at these concrete shapes.
std::size_t plugin_workspace_bytes(const Graph& graph, const Layer& layer, const std::vector<Dims>& shapes,
                                   plugin::Device device);

// Collects a plugin's refusal message (plugin::ErrorSink).
class PluginErrorSink final : public plugin::ErrorSink {
 public:
  void set(const char* message) noexcept override;
  const std::string& message() const noexcept { return message_; }
  // "MESSAGE" or "(the plugin gave no reason)".
  std::string text() const;

 private:
  std::string message_;
};

}  // namespace tensoracle::graph
