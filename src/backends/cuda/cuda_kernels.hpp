// The CUDA backend's kernel list as the builder and runtime see it (names, candidates per layer).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "tensoracle/builder.hpp"

namespace tensoracle::cuda {

// True in builds with the CUDA backend.
bool backend_built();

// True when this build's CUDA backend has a kernel of that name for the op.
bool has_kernel(const std::string& kernel, const std::string& op);

// Names of the kernels that can run `layer` (with the graph's dtypes and attributes) at this
// precision, preferred first; empty when the CUDA backend has none (or is not built).
std::vector<std::string> kernel_candidates(const graph::Graph& graph, const graph::Layer& layer, Precision precision);

// Scratch bytes the kernel needs (0 for unknown names).
std::size_t kernel_workspace_bytes(const std::string& kernel);

// Scratch bytes the kernel needs for this layer at these shapes (every tensor id of the graph) on `device`: the
// library's own answer where the kernel has one (cuDNN and cuBLASLt heuristics), else kernel_workspace_bytes.
std::size_t kernel_workspace_for(const std::string& kernel, const graph::Graph& graph, const graph::Layer& layer,
                                 const std::vector<Dims>& shapes, Precision precision, int device);

// Runs each candidate on `device` for the layer at the given concrete shapes (every tensor id of
// the graph) on random inputs and returns the index of the fastest (median of several runs).
std::size_t time_candidates(const graph::Graph& graph, const graph::Layer& layer, const std::vector<Dims>& shapes,
                            const std::vector<std::string>& candidates, Precision precision, int device);

// A kernel generated for one step at build time: CUDA C++ and the entry points it defines, in manifest order.
struct GeneratedKernel {
  std::string source;
  std::vector<std::string> entries;
};

// The generated source of `kernel` for the layer (fused_elementwise_nvrtc); nullopt for hand-written kernels.
std::optional<GeneratedKernel> generate_step_kernel(const graph::Graph& graph, const graph::Layer& layer,
                                                    const std::string& kernel);

// Compiles a generated source with NVRTC for compute capability major.minor and returns the CUBIN. `what` names the
// layer in errors: UnsupportedError when NVRTC can't be loaded, CudaError with NVRTC's log when compilation fails.
std::vector<std::byte> compile_generated_kernel(const std::string& source, int cc_major, int cc_minor,
                                                const std::string& what);

}  // namespace tensoracle::cuda
