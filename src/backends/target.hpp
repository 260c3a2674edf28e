// The backend interface: what the builder asks a target's backend (kernels, their scratch and timing, the target's
// description) and what the runtime gets from it (per-engine and per-context state), with the loaded engine's
// description they share. Implemented by backends/cpu and backends/cuda; backend_for picks one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/graph.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::backends {

// Where a tensor's bytes live while an engine runs.
enum class Storage : std::uint8_t { kInput, kOutput, kConstant, kArena };

struct StepPlan {
  std::size_t layer = 0;  // index in the graph's layers
  std::string kernel;     // stable kernel name recorded by the builder
  std::size_t workspace_bytes = 0;
  // Kernels generated at build time: the compiled binary (a view into EngineState::kernel_binaries, a copy of the
  // "kernels" section, at binary_offset in it; steps with the same offset share one binary) and its entry points.
  // Empty for every other kernel.
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
  // Whether it runs on the host copy of the weights (the CPU). When not, the engine drops that copy once the target
  // holds the weights (plan::release_host_weights): a loaded CUDA engine keeps its manifest in host memory, not its
  // weights.
  virtual bool keeps_host_weights() const = 0;
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
  // ExecutionContext::set_graph_mode: run() then launches a captured graph (targets without graphs ignore it).
  virtual void set_graph_mode(bool enabled) = 0;
  virtual std::size_t graph_captures() const = 0;
};

struct EngineState {
  std::string display_name;
  // The engine bytes: the network's weights are views into them. Emptied after loading by a target that keeps no
  // host weights (then every weight view's data and constant_host are nullptr).
  std::vector<std::byte> bytes;
  std::vector<std::byte> kernel_binaries;  // the "kernels" section, kept for the life of the engine
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

  const graph::Graph& graph() const { return graph::graph_of(*network); }
};

// A kernel generated for one step at build time: source code and the entry points it defines, in manifest order.
struct GeneratedKernel {
  std::string source;
  std::vector<std::string> entries;
};

// Memory, streams, time marks and captured work on one kind of target: what TargetBuffer, TargetStream, TargetTimer and
// TargetGraph (runtime/target_memory.cpp) are made of. `device` is the Target's device index.
class TargetMemory {
 public:
  virtual ~TargetMemory() = default;
  virtual void* allocate(int device, std::size_t bytes) const = 0;  // 256-byte aligned
  virtual void release(int device, void* pointer) const noexcept = 0;
  virtual void copy_from_host(int device, void* destination, const void* source, std::size_t bytes) const = 0;
  virtual void copy_to_host(int device, void* destination, const void* source, std::size_t bytes) const = 0;
  virtual void fill(int device, void* pointer, unsigned char value, std::size_t bytes) const = 0;
  // A stream of its own; nullptr where work runs on the calling thread (the CPU).
  virtual CUstream_st* create_stream(int device) const = 0;
  virtual void destroy_stream(int device, CUstream_st* stream) const noexcept = 0;
  virtual void synchronize(int device, CUstream_st* stream) const = 0;
  // A time mark recorded in stream order (a CUDA event; the host clock on the CPU), and the milliseconds between two
  // (waits for `stop`).
  virtual void* create_mark(int device) const = 0;
  virtual void destroy_mark(int device, void* mark) const noexcept = 0;
  virtual void record_mark(int device, void* mark, CUstream_st* stream) const = 0;
  virtual double elapsed_ms(int device, void* start, void* stop) const = 0;
  // The work `enqueue` puts on `stream`, captured to be replayed as a whole (a CUDA graph); nullptr where replaying
  // means calling `enqueue` again (the CPU).
  virtual void* capture(int device, CUstream_st* stream, const std::function<void()>& enqueue) const = 0;
  virtual void replay(int device, void* captured, CUstream_st* stream) const = 0;
  virtual void destroy_capture(int device, void* captured) const noexcept = 0;
};

// One kind of target (the CPU, CUDA GPUs), as the builder, the engine reader, the cache and the runtime see it.
// Stateless and shared: every function may be called from several threads at once.
class Backend {
 public:
  virtual ~Backend() = default;

  // "the CPU target", "the CUDA backend": for messages.
  virtual const char* name() const = 0;
  // Whether this build can load and run engines for it (false: the CUDA backend was not compiled in). Engines for a
  // backend that is not built can still be read and inspected.
  virtual bool built() const = 0;

  // ---- builder ----
  // The manifest's "target" object for the configured target (the GPU's model, compute capability, library
  // versions); CudaError when there is no such device.
  virtual nlohmann::json describe_target(const Target& target) const = 0;
  // The properties an engine's compatibility depends on, for the cache's conditions (docs/cache.md).
  virtual nlohmann::json cache_conditions(const Target& target) const = 0;
  // Whether the builder runs the device graph passes (product epilogues, channels-last convolutions, attention
  // layouts, generated elementwise kernels) and lets reshapes alias their input in the arena.
  virtual bool device_graph_passes() const = 0;
  // Names of the kernels that can run `layer` at this precision, preferred first; empty when there is none.
  virtual std::vector<std::string> kernel_candidates(const graph::Graph& graph, const graph::Layer& layer,
                                                     Precision precision) const = 0;
  // Scratch bytes the kernel may use at most (0 for unknown names).
  virtual std::size_t kernel_workspace_bytes(const std::string& kernel) const = 0;
  // Scratch bytes the kernel needs for this layer at these shapes (every tensor id of the graph) on the target.
  virtual std::size_t kernel_workspace_for(const std::string& kernel, const graph::Graph& graph,
                                           const graph::Layer& layer, const std::vector<Dims>& shapes,
                                           Precision precision, const Target& target) const = 0;
  // Runs each candidate on the target for the layer at the given shapes and returns the index of the fastest.
  virtual std::size_t time_candidates(const graph::Graph& graph, const graph::Layer& layer,
                                      const std::vector<Dims>& shapes, const std::vector<std::string>& candidates,
                                      Precision precision, const Target& target) const = 0;
  // The source of a kernel generated for the step (none for hand-written kernels).
  virtual std::optional<GeneratedKernel> generate_step_kernel(const graph::Graph& graph, const graph::Layer& layer,
                                                              const std::string& kernel) const = 0;
  // Compiles a generated source for the target that `target_description` (describe_target's object) names; `what`
  // names the layer in errors.
  virtual std::vector<std::byte> compile_generated_kernel(const std::string& source,
                                                          const nlohmann::json& target_description,
                                                          const std::string& what) const = 0;
  // The compiler of generated kernels, for the build log; UnsupportedError when it can't be loaded (the builder then
  // keeps the hand-written kernels).
  virtual std::string kernel_compiler() const = 0;

  // ---- engine files and runtime ----
  // True when this build has a kernel of that name for the op.
  virtual bool is_known_kernel(const std::string& kernel, const std::string& op) const = 0;
  // Entry points of a kernel generated at build time (its binary is in the engine's "kernels" section); 0 for every
  // other kernel. Known in every build, so engines can be checked where the backend is not built.
  virtual std::size_t generated_entry_count(const std::string& kernel) const = 0;
  // The per-engine state of a deserialized engine: weights on the target, kernels loaded (UnsupportedError when the
  // backend is not built or the machine has no matching device).
  virtual std::unique_ptr<TargetEngine> load(const EngineState& engine) const = 0;
  // Starts on another thread what load() of an engine for this target starts first (CUDA: the driver and the device's
  // context, about 0.2 s on an H200 machine), so that it overlaps the caller reading the rest of the engine.
  // `target_description` is the manifest's "target" object; the device is chosen as load() chooses it. Errors are
  // dropped (load() reports them). The future is ready when that work has ended; invalid when there is none.
  virtual std::future<void> start_device(const nlohmann::json& target_description) const = 0;
  // Its memory, streams and timers.
  virtual const TargetMemory& memory() const = 0;
};

// The backend of a kind of target: the one place that picks one (backends/backend_for.cpp).
const Backend& backend_for(TargetKind kind);

// Each backend's instance (backends/cpu/cpu_target.cpp, backends/cuda/cuda_backend.cpp).
const Backend& cpu_backend();
const Backend& cuda_backend();

}  // namespace tensoracle::backends
