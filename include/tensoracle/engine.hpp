// Engine and ExecutionContext: a deserialized, immutable engine and the per-caller state that runs it on caller
// buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensoracle/builder.hpp"
#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"

struct CUstream_st;  // cudaStream_t without the CUDA headers

namespace tensoracle {

namespace backends {
struct EngineState;
}  // namespace backends
namespace runtime {
struct ContextState;
}  // namespace runtime

// An engine input or output as the engine declares it: dims hold -1 where they vary within the
// profile. Inputs carry their profile (min == opt == max == dims for fixed inputs).
struct EngineTensor {
  std::string name;
  DataType dtype = DataType::kF32;
  Dims dims;
  ShapeProfile profile;  // inputs only
};

class ExecutionContext;

// A deserialized engine. Immutable and safe to share between threads: its weights are uploaded to
// the target once, at deserialization, and freed with the last reference (contexts hold one).
class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Validates and loads engine bytes (docs/engine-format.md). Every offset, size and count is
  // checked before use: damaged bytes are a FormatError naming `display_name`, never a crash. An
  // engine for another target (another GPU model, a CUDA engine on a machine without that GPU, or a
  // newer format) is an UnsupportedError; a failed upload is a CudaError.
  static std::shared_ptr<const Engine> deserialize(std::vector<std::byte> bytes,
                                                   const std::string& display_name = "engine bytes");
  static std::shared_ptr<const Engine> deserialize(const void* data, std::size_t size,
                                                   const std::string& display_name = "engine bytes");
  // Reads and deserializes a file; IoError when it can't be read.
  static std::shared_ptr<const Engine> load(const std::filesystem::path& path);
  // Validates engine bytes exactly as deserialize() does, without loading them onto the target, and
  // returns the manifest as pretty-printed JSON (works for CUDA engines on machines without the GPU).
  static std::string inspect(const std::vector<std::byte>& bytes, const std::string& display_name = "engine bytes");

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const std::vector<EngineTensor>& inputs() const noexcept;
  const std::vector<EngineTensor>& outputs() const noexcept;
  Target target() const noexcept;
  Precision precision() const noexcept;
  // The manifest as pretty-printed JSON (what `tensoracle inspect` prints).
  std::string manifest_json() const;
  // Bytes of weights held on the target, and of activation + scratch memory each context allocates.
  std::size_t weight_bytes() const noexcept;
  std::size_t context_memory_bytes() const noexcept;

  // A new context with its own activation memory. Contexts may be used concurrently from different
  // threads (one thread per context at a time).
  std::unique_ptr<ExecutionContext> create_execution_context() const;

 private:
  friend class ExecutionContext;
  explicit Engine(std::unique_ptr<backends::EngineState> state);
  const backends::EngineState& state() const noexcept { return *state_; }

  std::unique_ptr<backends::EngineState> state_;
};

// Runs an engine: set shapes → query outputs → bind addresses → enqueue. Used by one thread at a
// time; owns its activation and scratch memory (allocated at creation for the largest profile
// shapes) and a reference to its Engine.
//
// Fixed inputs (and single-point profiles) are set when the context is created. Ranged inputs must
// be set with set_input_shapes before the first enqueue. After a failed set_input_shapes the
// context refuses shape queries and enqueue until a complete setting succeeds.
class ExecutionContext {
 public:
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  const Engine& engine() const noexcept { return *engine_; }

  // Sets the shapes of all ranged inputs together (fixed inputs may be listed with their dims).
  // Throws InvalidArgumentError naming the input for an unknown name, a missing ranged input, a
  // wrong rank, or a dim outside the profile; the context is then unusable until a setting succeeds. Setting the
  // shapes the context is prepared for already does no planning again (a fixed-shape engine's context is prepared when
  // it is made).
  void set_input_shapes(const std::map<std::string, Dims>& shapes);
  // True when every input has a concrete shape.
  bool shapes_ready() const noexcept;

  // Concrete shape and dtype of an input or output for the current input shapes. Throws
  // InvalidArgumentError for an unknown name or when shapes are not set.
  Dims tensor_shape(const std::string& name) const;
  DataType tensor_dtype(const std::string& name) const;

  // Binds an input or output to caller memory: a device address for CUDA engines, a host address
  // for CPU engines. The memory must hold tensor_shape(name).volume() elements when enqueued.
  void set_tensor_address(const std::string& name, void* address);
  void* tensor_address(const std::string& name) const;

  // Runs the engine. CUDA engines: launches every step on `stream` (nullptr: the legacy default
  // stream) and returns without synchronizing; nothing is allocated, so one enqueue can be captured
  // in a CUDA graph and replayed. CPU engines: runs on the calling thread and returns when done
  // (`stream` must be nullptr). Throws InvalidArgumentError when shapes are not set or an address is
  // missing, CudaError when a launch fails.
  void enqueue(CUstream_st* stream = nullptr);

  // Milliseconds each step took in the last enqueue_profiled() (CUDA events per step; CPU: wall clock).
  struct StepTiming {
    std::string layer;
    std::string kernel;
    double milliseconds = 0;
  };
  // Enqueues with an event around each step, synchronizes, and returns the per-step times.
  std::vector<StepTiming> enqueue_profiled(CUstream_st* stream = nullptr);

  // Graph mode (off by default; CUDA engines, no effect on the CPU). While it is on, enqueue captures the engine's
  // work into a CUDA graph (on a stream of the context's own, so the caller's stream is not touched) the first time
  // and afterwards launches that graph on `stream`, which removes the host's per-kernel launch cost. It captures
  // again (updating the instantiated graph where CUDA can) when set_input_shapes changed a shape or a bound address
  // differs from the captured ones. Results are bit-identical to plain enqueue. When `stream` is itself being
  // captured by the caller, enqueue launches the steps plainly (the caller's capture records them). Each graph keeps
  // its own launch order: two enqueues of one context must not overlap on different streams (as without graph mode).
  void set_graph_mode(bool enabled);
  bool graph_mode() const noexcept;
  // How many times graph mode captured the engine since the context was created (a steady count means replays).
  std::size_t graph_captures() const noexcept;

 private:
  friend class Engine;  // contexts are made by Engine::create_execution_context
  explicit ExecutionContext(std::shared_ptr<const Engine> engine);

  std::shared_ptr<const Engine> engine_;
  std::unique_ptr<runtime::ContextState> state_;
};

}  // namespace tensoracle
