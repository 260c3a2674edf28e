// Device memory, streams and events for TargetBuffer/TargetStream/TargetTimer (CUDA builds; stubs throw otherwise).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

struct CUstream_st;

namespace tensoracle::cuda {

void* device_malloc(int device, std::size_t bytes);
void device_free(int device, void* pointer) noexcept;
void copy_to_device(int device, void* destination, const void* source, std::size_t bytes);
void copy_to_host(int device, void* destination, const void* source, std::size_t bytes);
void device_memset(int device, void* pointer, unsigned char value, std::size_t bytes);
CUstream_st* stream_create(int device);
void stream_destroy(int device, CUstream_st* stream) noexcept;
void stream_synchronize(int device, CUstream_st* stream);
void* event_create(int device);
void event_destroy(int device, void* event) noexcept;
void event_record(int device, void* event, CUstream_st* stream);
// Milliseconds between two recorded events (synchronizes on `stop`).
float event_elapsed_ms(int device, void* start, void* stop);
// A CUDA graph of what `enqueue` puts on `stream` (captured in the thread-local mode), instantiated; launch and
// destroy it.
void* graph_capture(int device, CUstream_st* stream, const std::function<void()>& enqueue);
// Captures what `enqueue` puts on `stream` likewise and makes `exec` (an instantiated graph, or null) run it: updated
// in place when CUDA takes the new graph as an update of the old one (same topology, other kernel parameters), else
// instantiated anew. `what` names the work in the errors. After an exception `exec` is the old graph or null.
void graph_capture_into(int device, CUstream_st* stream, void*& exec, const std::function<void()>& enqueue,
                        const std::string& what);
void graph_launch(int device, void* graph, CUstream_st* stream);
void graph_destroy(int device, void* graph) noexcept;

}  // namespace tensoracle::cuda
