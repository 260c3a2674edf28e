// KernelContext: what a CPU reference kernel receives (attributes, input tensors, allocated outputs), and the kernel
// registry.
#pragma once

#include <string_view>
#include <vector>

#include "backends/cpu/tensor_ref.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::cpu {

class KernelContext : public graph::AttrReader {
 public:
  // inputs[i] is nullptr for an absent optional input.
  KernelContext(const graph::Layer& layer, std::vector<const TensorRef*> inputs, std::vector<const TensorRef*> outputs)
      : graph::AttrReader(layer.attrs, layer.name, layer.op),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)) {}

  std::size_t num_inputs() const { return inputs_.size(); }
  bool has_input(std::size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  const TensorRef& input(std::size_t i) const {
    if (!has_input(i)) fail("a required input is missing");
    return *inputs_[i];
  }
  std::size_t num_outputs() const { return outputs_.size(); }
  // Sized for the inferred dtype and concrete shape; the reference executor poisons it (0xFF bytes) beforehand.
  const TensorRef& output(std::size_t i) const { return *outputs_.at(i); }

 private:
  std::vector<const TensorRef*> inputs_;
  std::vector<const TensorRef*> outputs_;
};

using Kernel = void (*)(KernelContext& ctx);

// The kernel for an op; nullptr when the CPU backend has none.
Kernel find_kernel(std::string_view op);

struct KernelEntry {
  std::string_view op;
  Kernel kernel;
};

// Each family lists its kernels; called once by the registry (no static initializers).
void register_elementwise_kernels(std::vector<KernelEntry>& kernels);     // kernels/elementwise.cpp
void register_linear_algebra_kernels(std::vector<KernelEntry>& kernels);  // kernels/linear_algebra.cpp
void register_convolution_kernels(std::vector<KernelEntry>& kernels);     // kernels/convolution.cpp
void register_normalization_kernels(std::vector<KernelEntry>& kernels);   // kernels/normalization.cpp
void register_reduction_kernels(std::vector<KernelEntry>& kernels);       // kernels/reduction.cpp
void register_data_movement_kernels(std::vector<KernelEntry>& kernels);   // kernels/data_movement.cpp
void register_transformer_kernels(std::vector<KernelEntry>& kernels);     // kernels/transformer.cpp
void register_quantization_kernels(std::vector<KernelEntry>& kernels);    // kernels/quantization.cpp
void register_plugin_kernels(std::vector<KernelEntry>& kernels);          // kernels/plugin.cpp

}  // namespace tensoracle::cpu
