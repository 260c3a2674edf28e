// TargetBuffer, TargetStream, TargetTimer and TargetGraph: each call goes to its target's backend (TargetMemory).
#include "tensoracle/target_memory.hpp"

#include <fmt/format.h>

#include <new>

#include "backends/target.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {

namespace {

const backends::TargetMemory& memory_of(const Target& target) { return backends::backend_for(target.kind).memory(); }

}  // namespace

TargetBuffer::TargetBuffer(Target target, std::size_t bytes) : target_(target), size_(bytes) {
  if (bytes == 0) return;
  data_ = memory_of(target_).allocate(target_.device, bytes);
}

TargetBuffer::~TargetBuffer() {
  if (data_ != nullptr) memory_of(target_).release(target_.device, data_);
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
  memory_of(target_).copy_from_host(target_.device, data_, source, bytes);
}

void TargetBuffer::copy_to_host(void* destination, std::size_t bytes) const {
  if (bytes > size_) throw InvalidArgumentError(fmt::format("copy of {} bytes out of a {}-byte buffer", bytes, size_));
  if (bytes == 0) return;
  memory_of(target_).copy_to_host(target_.device, destination, data_, bytes);
}

void TargetBuffer::fill(unsigned char value) {
  if (size_ == 0) return;
  memory_of(target_).fill(target_.device, data_, value, size_);
}

TargetStream::TargetStream(Target target) : target_(target) {
  stream_ = memory_of(target_).create_stream(target_.device);
}

TargetStream::~TargetStream() {
  if (stream_ != nullptr) memory_of(target_).destroy_stream(target_.device, stream_);
}

void TargetStream::synchronize() const {
  if (stream_ != nullptr) memory_of(target_).synchronize(target_.device, stream_);
}

TargetTimer::TargetTimer(Target target, CUstream_st* stream) : target_(target), stream_(stream) {
  const backends::TargetMemory& memory = memory_of(target_);
  start_ = memory.create_mark(target_.device);
  try {
    stop_ = memory.create_mark(target_.device);
  } catch (...) {
    memory.destroy_mark(target_.device, start_);
    throw;
  }
}

TargetTimer::~TargetTimer() {
  const backends::TargetMemory& memory = memory_of(target_);
  memory.destroy_mark(target_.device, start_);
  memory.destroy_mark(target_.device, stop_);
}

void TargetTimer::start() { memory_of(target_).record_mark(target_.device, start_, stream_); }

void TargetTimer::stop() { memory_of(target_).record_mark(target_.device, stop_, stream_); }

double TargetTimer::elapsed_ms() const { return memory_of(target_).elapsed_ms(target_.device, start_, stop_); }

TargetGraph::TargetGraph(Target target, CUstream_st* stream, std::function<void()> enqueue)
    : target_(target), stream_(stream), enqueue_(std::move(enqueue)) {
  graph_ = memory_of(target_).capture(target_.device, stream_, enqueue_);
}

TargetGraph::~TargetGraph() {
  if (graph_ != nullptr) memory_of(target_).destroy_capture(target_.device, graph_);
}

void TargetGraph::launch() {
  if (graph_ == nullptr) return enqueue_();
  memory_of(target_).replay(target_.device, graph_, stream_);
}

}  // namespace tensoracle
