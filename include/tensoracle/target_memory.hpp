// TargetBuffer, TargetStream and TargetTimer: memory, streams and timing on an engine's target (a CUDA device or the
// CPU).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "tensoracle/builder.hpp"

struct CUstream_st;

namespace tensoracle {

// Memory an engine's inputs and outputs can live in: device memory (cudaMalloc, never managed
// memory) for CUDA targets, host memory for the CPU. Owned, movable, not copyable. Copies are
// synchronous. Throws CudaError naming the call when CUDA fails, UnsupportedError for a CUDA target
// in a build without the CUDA backend.
class TargetBuffer {
 public:
  TargetBuffer() = default;
  TargetBuffer(Target target, std::size_t bytes);
  ~TargetBuffer();
  TargetBuffer(TargetBuffer&& other) noexcept;
  TargetBuffer& operator=(TargetBuffer&& other) noexcept;
  TargetBuffer(const TargetBuffer&) = delete;
  TargetBuffer& operator=(const TargetBuffer&) = delete;

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  void copy_from_host(const void* source, std::size_t bytes);
  void copy_to_host(void* destination, std::size_t bytes) const;
  // Fills every byte with `value` (poisoning outputs in tests).
  void fill(unsigned char value);

 private:
  Target target_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// A CUDA stream on the target's device (non-blocking), or nothing for the CPU (get() is nullptr).
class TargetStream {
 public:
  explicit TargetStream(Target target);
  ~TargetStream();
  TargetStream(const TargetStream&) = delete;
  TargetStream& operator=(const TargetStream&) = delete;
  CUstream_st* get() const noexcept { return stream_; }
  void synchronize() const;

 private:
  Target target_;
  CUstream_st* stream_ = nullptr;
};

// Measures target time between start() and stop(): CUDA events recorded on the stream for CUDA
// targets, the steady clock for the CPU. elapsed_ms() synchronizes on the stop event.
class TargetTimer {
 public:
  TargetTimer(Target target, CUstream_st* stream);
  ~TargetTimer();
  TargetTimer(const TargetTimer&) = delete;
  TargetTimer& operator=(const TargetTimer&) = delete;
  void start();
  void stop();
  double elapsed_ms() const;

 private:
  Target target_;
  CUstream_st* stream_;
  void* start_ = nullptr;  // the target's time marks (CUDA events; host clock readings on the CPU)
  void* stop_ = nullptr;
};

// The work one call enqueues on a stream, captured once as a CUDA graph and launched as a whole (CUDA targets), which
// removes the host's per-kernel launch cost (what trtexec's --useCudaGraph measures). The captured work must be
// capturable (ExecutionContext::enqueue is, from the first enqueue after set_input_shapes). On the CPU launch() calls
// the function again.
class TargetGraph {
 public:
  TargetGraph(Target target, CUstream_st* stream, std::function<void()> enqueue);
  ~TargetGraph();
  TargetGraph(const TargetGraph&) = delete;
  TargetGraph& operator=(const TargetGraph&) = delete;
  void launch();

 private:
  Target target_;
  CUstream_st* stream_;
  std::function<void()> enqueue_;
  void* graph_ = nullptr;  // the instantiated graph (cudaGraphExec_t)
};

}  // namespace tensoracle
