// The CUDA backend's functions behind its Backend (cuda_backend.cpp); stubs in builds without CUDA
// (cuda_unavailable.cpp).
#pragma once

#include <cstddef>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/target.hpp"
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

// The generated source of `kernel` for the layer (fused_elementwise_nvrtc); nullopt for hand-written kernels.
std::optional<backends::GeneratedKernel> generate_step_kernel(const graph::Graph& graph, const graph::Layer& layer,
                                                              const std::string& kernel);

// Compiles a generated source with NVRTC for compute capability major.minor and returns the CUBIN. `what` names the
// layer in errors: UnsupportedError when NVRTC can't be loaded, CudaError with NVRTC's log when compilation fails.
std::vector<std::byte> compile_generated_kernel(const std::string& source, int cc_major, int cc_minor,
                                                const std::string& what);

// Entry points of a kernel generated at build time (fused_elementwise_nvrtc: 3); 0 for the hand-written ones.
std::size_t generated_entry_count(const std::string& kernel);

// A deserialized CUDA engine's target state: weights uploaded to the matching GPU, generated kernels loaded
// (cuda_target.cu). UnsupportedError when this build has no CUDA backend or the machine no such GPU.
std::unique_ptr<backends::TargetEngine> load_engine(const backends::EngineState& engine);
// Backend::start_device: the device load_engine would pick for an engine of that manifest "target", started (its
// primary context made current) on another thread; errors dropped.
std::future<void> start_device(const nlohmann::json& target_description);

}  // namespace tensoracle::cuda
