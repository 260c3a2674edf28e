// EngineState and ContextState: what a deserialized engine and an execution context hold, shared by the runtime and
// backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/graph.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::runtime {

// Where a tensor's bytes live while an engine runs.
enum class Storage : std::uint8_t { kInput, kOutput, kConstant, kArena };

struct StepPlan {
  std::size_t layer = 0;  // index in network.graph().layers
  std::string kernel;     // stable kernel name recorded by the builder
  std::size_t workspace_bytes = 0;
  // Kernels generated at build time: the compiled binary (a view into the "kernels" section, at binary_offset in it;
  // steps with the same offset share one binary) and its entry points. Empty for every other kernel.
  // (Pointer and size rather than std::span: this header is also compiled as CUDA C++17.)
  const std::byte* binary = nullptr;
  std::size_t binary_size = 0;
  std::uint64_t binary_offset = 0;
  std::vector<std::string> entries;
};

class TargetContext;

// What a target (CPU or CUDA) keeps per engine: weights in target memory and loaded kernels.
class TargetEngine {
 public:
  virtual ~TargetEngine() = default;
  virtual std::unique_ptr<TargetContext> create_context() const = 0;
  virtual std::size_t weight_bytes() const = 0;
};

// What a target keeps per context: its arena and the per-shape launch state.
class TargetContext {
 public:
  virtual ~TargetContext() = default;
  // Called after every successful set_input_shapes with every tensor's concrete shape.
  virtual void prepare(const std::vector<Dims>& shapes) = 0;
  // Runs every step. io[i] is the caller address of tensor id io_ids[i] (EngineState::io_ids).
  virtual void run(const std::vector<void*>& io, CUstream_st* stream) = 0;
  virtual std::vector<ExecutionContext::StepTiming> run_profiled(const std::vector<void*>& io, CUstream_st* stream) = 0;
};

struct EngineState {
  std::string display_name;
  // The engine bytes; weights and kernels are views into them.
  std::vector<std::byte> bytes;
  nlohmann::json manifest;
  Target target;
  Precision precision = Precision::kFp32;
  std::deque<TensorInfo> weight_infos;  // stable addresses for the TensorViews of the network
  std::unique_ptr<Network> network;     // the optimized graph, rebuilt from the manifest
  std::vector<EngineTensor> inputs, outputs;
  std::vector<std::int32_t> io_ids;         // tensor ids of inputs then outputs
  std::vector<Storage> storage;             // per tensor id
  std::vector<std::uint64_t> arena_offset;  // per tensor id (kArena)
  std::vector<std::uint64_t> arena_bytes;   // per tensor id (kArena): reserved bytes
  std::uint64_t arena_size = 0;
  std::uint64_t scratch_size = 0;
  // Host bytes of every constant (weights section, or materialized inline constants), per tensor id.
  std::vector<const std::byte*> constant_host;
  std::deque<std::vector<std::byte>> materialized;
  std::vector<StepPlan> steps;
  std::unique_ptr<TargetEngine> target_engine;

  const graph::Graph& graph() const { return network->graph(); }
};

// Creates the CPU target's per-engine state (backends/cpu/cpu_target.cpp).
std::unique_ptr<TargetEngine> create_cpu_target(const EngineState& engine);
// Creates the CUDA target's per-engine state: uploads weights, loads kernels (backends/cuda/cuda_target.cu).
// Throws UnsupportedError when this build has no CUDA backend.
std::unique_ptr<TargetEngine> create_cuda_target(const EngineState& engine);

}  // namespace tensoracle::runtime
