// Device memory, streams, events and CUDA graphs on a given device, for TargetBuffer/TargetStream/TargetTimer.
#include <fmt/format.h>

#include <cuda_runtime_api.h>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/device_guard.hpp"
#include "tensoracle/pointer_location.hpp"

namespace tensoracle {

PointerLocation locate_pointer(const void* address) noexcept {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, address) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it, so that the caller's next check does not see it
    return {};
  }
  switch (attributes.type) {
    case cudaMemoryTypeUnregistered: return {MemoryKind::kHost, -1};
    case cudaMemoryTypeHost: return {MemoryKind::kPinnedHost, -1};
    case cudaMemoryTypeDevice: return {MemoryKind::kDevice, attributes.device};
    case cudaMemoryTypeManaged: return {MemoryKind::kManaged, attributes.device};
  }
  return {};
}

}  // namespace tensoracle

namespace tensoracle::cuda {

void* device_malloc(int device, std::size_t bytes) {
  DeviceGuard guard(device);
  void* p = nullptr;
  TENSORACLE_CUDA_CHECK(cudaMalloc(&p, bytes), fmt::format("allocating {} bytes on GPU {}", bytes, device));
  return p;
}

void device_free(int device, void* pointer) noexcept {
  const DeviceGuard guard(device, std::nothrow);
  cudaFree(pointer);
}

void copy_to_device(int device, void* destination, const void* source, std::size_t bytes) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaMemcpy(destination, source, bytes, cudaMemcpyHostToDevice), "copying to the GPU");
}

void copy_to_host(int device, void* destination, const void* source, std::size_t bytes) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaMemcpy(destination, source, bytes, cudaMemcpyDeviceToHost), "copying from the GPU");
}

void device_memset(int device, void* pointer, unsigned char value, std::size_t bytes) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaMemset(pointer, value, bytes), "filling GPU memory");
}

CUstream_st* stream_create(int device) {
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  TENSORACLE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a stream");
  return s;
}

void stream_destroy(int device, CUstream_st* stream) noexcept {
  const DeviceGuard guard(device, std::nothrow);
  cudaStreamDestroy(stream);
}

void stream_synchronize(int device, CUstream_st* stream) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaStreamSynchronize(stream), "waiting for the stream");
}

void* event_create(int device) {
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  TENSORACLE_CUDA_CHECK(cudaEventCreate(&e), "creating an event");
  return e;
}

void event_destroy(int device, void* event) noexcept {
  const DeviceGuard guard(device, std::nothrow);
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void event_record(int device, void* event, CUstream_st* stream) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream), "recording an event");
}

void graph_capture_into(int device, CUstream_st* stream, void*& exec, const std::function<void()>& enqueue,
                        const std::string& what) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), what);
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);  // ends the capture; the partial graph is dropped
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  TENSORACLE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph), fmt::format("{} (a step is not capturable)", what));
  auto current = static_cast<cudaGraphExec_t>(exec);
  cudaError_t status = cudaErrorUnknown;
  if (current != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    status = cudaGraphExecUpdate(current, graph, &info);
    if (status != cudaSuccess) {
      cudaGetLastError();  // a refused update is no error: instantiate instead
      cudaGraphExecDestroy(current);
      current = nullptr;
    }
  }
  if (current == nullptr) status = cudaGraphInstantiate(&current, graph, 0);
  cudaGraphDestroy(graph);
  exec = status == cudaSuccess ? current : nullptr;
  TENSORACLE_CUDA_CHECK(status, fmt::format("{}: instantiating the CUDA graph", what));
}

void* graph_capture(int device, CUstream_st* stream, const std::function<void()>& enqueue) {
  void* exec = nullptr;
  graph_capture_into(device, stream, exec, enqueue, "capturing a CUDA graph");
  return exec;
}

void graph_launch(int device, void* graph, CUstream_st* stream) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream), "launching a CUDA graph");
}

void graph_destroy(int /*device*/, void* graph) noexcept { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)); }

float event_elapsed_ms(int device, void* start, void* stop) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop)), "waiting for an event");
  float ms = 0;
  TENSORACLE_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)),
                        "reading an event time");
  return ms;
}

}  // namespace tensoracle::cuda
