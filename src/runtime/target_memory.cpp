// TargetBuffer, TargetStream and TargetTimer: host memory and the steady clock for the CPU, the CUDA backend otherwise.
#include "tensoracle/target_memory.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <new>

#include "backends/cuda/cuda_memory.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {

namespace {

bool is_cpu(const Target& t) { return t.kind == TargetKind::kCpu; }

double now_ns() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace

TargetBuffer::TargetBuffer(Target target, std::size_t bytes) : target_(target), size_(bytes) {
  if (bytes == 0) return;
  if (is_cpu(target_)) {
    data_ = ::operator new (bytes, std::align_val_t{256}, std::nothrow);
    if (data_ == nullptr) throw Error(fmt::format("can't allocate {} bytes of host memory", bytes));
  } else {
    data_ = cuda::device_malloc(target_.device, bytes);
  }
}

TargetBuffer::~TargetBuffer() {
  if (data_ == nullptr) return;
  if (is_cpu(target_)) {
    ::operator delete (data_, std::align_val_t{256});
  } else {
    cuda::device_free(target_.device, data_);
  }
}

TargetBuffer::TargetBuffer(TargetBuffer&& other) noexcept
    : target_(other.target_), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

TargetBuffer& TargetBuffer::operator=(TargetBuffer&& other) noexcept {
  if (this != &other) {
    this->~TargetBuffer();
    new (this) TargetBuffer(std::move(other));
  }
  return *this;
}

void TargetBuffer::copy_from_host(const void* source, std::size_t bytes) {
  if (bytes > size_) throw InvalidArgumentError(fmt::format("copy of {} bytes into a {}-byte buffer", bytes, size_));
  if (bytes == 0) return;
  if (is_cpu(target_)) {
    std::memcpy(data_, source, bytes);
  } else {
    cuda::copy_to_device(target_.device, data_, source, bytes);
  }
}

void TargetBuffer::copy_to_host(void* destination, std::size_t bytes) const {
  if (bytes > size_) throw InvalidArgumentError(fmt::format("copy of {} bytes out of a {}-byte buffer", bytes, size_));
  if (bytes == 0) return;
  if (is_cpu(target_)) {
    std::memcpy(destination, data_, bytes);
  } else {
    cuda::copy_to_host(target_.device, destination, data_, bytes);
  }
}

void TargetBuffer::fill(unsigned char value) {
  if (size_ == 0) return;
  if (is_cpu(target_)) {
    std::memset(data_, value, size_);
  } else {
    cuda::device_memset(target_.device, data_, value, size_);
  }
}

TargetStream::TargetStream(Target target) : target_(target) {
  if (!is_cpu(target_)) stream_ = cuda::stream_create(target_.device);
}

TargetStream::~TargetStream() {
  if (stream_ != nullptr) cuda::stream_destroy(target_.device, stream_);
}

void TargetStream::synchronize() const {
  if (stream_ != nullptr) cuda::stream_synchronize(target_.device, stream_);
}

TargetTimer::TargetTimer(Target target, CUstream_st* stream) : target_(target), stream_(stream) {
  if (!is_cpu(target_)) {
    start_event_ = cuda::event_create(target_.device);
    stop_event_ = cuda::event_create(target_.device);
  }
}

TargetTimer::~TargetTimer() {
  if (start_event_ != nullptr) cuda::event_destroy(target_.device, start_event_);
  if (stop_event_ != nullptr) cuda::event_destroy(target_.device, stop_event_);
}

void TargetTimer::start() {
  if (is_cpu(target_)) {
    start_ns_ = now_ns();
  } else {
    cuda::event_record(target_.device, start_event_, stream_);
  }
}

void TargetTimer::stop() {
  if (is_cpu(target_)) {
    stop_ns_ = now_ns();
  } else {
    cuda::event_record(target_.device, stop_event_, stream_);
  }
}

double TargetTimer::elapsed_ms() const {
  if (is_cpu(target_)) return (stop_ns_ - start_ns_) / 1e6;
  return cuda::event_elapsed_ms(target_.device, start_event_, stop_event_);
}

TargetGraph::TargetGraph(Target target, CUstream_st* stream, std::function<void()> enqueue)
    : target_(target), stream_(stream), enqueue_(std::move(enqueue)) {
  if (!is_cpu(target_)) graph_ = cuda::graph_capture(target_.device, stream_, enqueue_);
}

TargetGraph::~TargetGraph() {
  if (graph_ != nullptr) cuda::graph_destroy(target_.device, graph_);
}

void TargetGraph::launch() {
  if (is_cpu(target_)) return enqueue_();
  cuda::graph_launch(target_.device, graph_, stream_);
}

}  // namespace tensoracle
