// The CUDA target of the runtime: weights uploaded once per engine; per context an arena, scratch and cuBLASLt handle.
#include <fmt/format.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <random>

#include "backends/cuda/check.hpp"
#include "backends/cuda/codegen/elementwise_codegen.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "graph/op_def.hpp"
#include "runtime/engine_state.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle {

namespace cuda {

namespace {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TENSORACLE_CUDA_CHECK(cudaGetDevice(&previous_), "selecting the engine's device");
    if (previous_ != device) TENSORACLE_CUDA_CHECK(cudaSetDevice(device), "selecting the engine's device");
  }
  ~DeviceGuard() {
    int current = 0;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

void* device_malloc(int device, std::size_t bytes) {
  DeviceGuard guard(device);
  void* p = nullptr;
  TENSORACLE_CUDA_CHECK(cudaMalloc(&p, bytes), fmt::format("allocating {} bytes on GPU {}", bytes, device));
  return p;
}

void device_free(int device, void* pointer) noexcept {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  cudaFree(pointer);
  cudaSetDevice(previous);
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
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  cudaStreamDestroy(stream);
  cudaSetDevice(previous);
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
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
  cudaSetDevice(previous);
}

void event_record(int device, void* event, CUstream_st* stream) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), stream), "recording an event");
}

void* graph_capture(int device, CUstream_st* stream, const std::function<void()>& enqueue) {
  DeviceGuard guard(device);
  TENSORACLE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capturing a CUDA graph");
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);  // ends the capture; the partial graph is dropped
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  TENSORACLE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph), "capturing a CUDA graph");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TENSORACLE_CUDA_CHECK(status, "instantiating a CUDA graph");
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

std::size_t kernel_workspace_bytes(const std::string& kernel) {
  const KernelEntry* k = find_kernel_entry(kernel);
  return k == nullptr ? 0 : k->workspace_bytes;
}

std::size_t kernel_workspace_for(const std::string& kernel, const graph::Graph& graph, const graph::Layer& layer,
                                 const std::vector<Dims>& shapes, Precision precision, int device) {
  const KernelEntry* k = find_kernel_entry(kernel);
  if (k == nullptr) return 0;
  if (k->workspace_for == nullptr || k->workspace_bytes == 0) return k->workspace_bytes;
  DeviceGuard guard(device);
  return std::min(k->workspace_bytes, k->workspace_for(graph, layer, shapes, precision));
}

namespace {

// Random bytes that are valid values of the dtype (small floats, small non-negative integers: safe as indices).
void fill_random(void* device_pointer, DataType dtype, std::size_t count, std::mt19937& rng) {
  std::vector<unsigned char> host(count * element_size(dtype));
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (std::size_t i = 0; i < count; ++i) {
    const float v = dist(rng);
    unsigned char* p = host.data() + i * element_size(dtype);
    switch (dtype) {
      case DataType::kF32: std::memcpy(p, &v, 4); break;
      case DataType::kF64: {
        const double d = v;
        std::memcpy(p, &d, 8);
        break;
      }
      case DataType::kF16: {
        const __half h = __float2half(v);
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBF16: {
        const __nv_bfloat16 h = __float2bfloat16(v);
        std::memcpy(p, &h, 2);
        break;
      }
      default:
        std::memset(p, 0, element_size(dtype));  // zero: a valid index and a valid integer
        break;
    }
  }
  if (!host.empty())
    TENSORACLE_CUDA_CHECK(cudaMemcpy(device_pointer, host.data(), host.size(), cudaMemcpyHostToDevice),
                          "preparing timing inputs");
}

}  // namespace

std::size_t time_candidates(const graph::Graph& graph, const graph::Layer& layer, const std::vector<Dims>& shapes,
                            const std::vector<std::string>& candidates, Precision precision, int device) {
  if (candidates.size() < 2) return 0;
  DeviceGuard guard(device);
  std::mt19937 rng(7);
  std::vector<void*> allocations;
  auto cleanup = [&] {
    for (void* p : allocations) cudaFree(p);
  };
  try {
    auto make = [&](std::int32_t id) {
      DeviceTensor t;
      t.dtype = graph.tensor(id).dtype;
      t.shape = shapes[static_cast<std::size_t>(id)];
      const std::size_t count = static_cast<std::size_t>(t.shape.volume());
      const std::size_t bytes = std::max<std::size_t>(count * element_size(t.dtype), 1);
      TENSORACLE_CUDA_CHECK(cudaMalloc(&t.data, bytes), "allocating timing buffers");
      allocations.push_back(t.data);
      fill_random(t.data, t.dtype, count, rng);
      return t;
    };
    graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
    StepLaunch launch;
    launch.layer = &layer;
    launch.attrs = &attrs;
    launch.precision = precision;
    for (auto id : layer.inputs) launch.inputs.push_back(id < 0 ? DeviceTensor{} : make(id));
    for (auto id : layer.outputs) launch.outputs.push_back(make(id));
    std::size_t workspace = 0;
    for (const auto& name : candidates) workspace = std::max(workspace, kernel_workspace_bytes(name));
    if (workspace != 0) {
      TENSORACLE_CUDA_CHECK(cudaMalloc(&launch.workspace, workspace), "allocating timing scratch");
      allocations.push_back(launch.workspace);
    }
    LibraryHandles handles;
    TENSORACLE_CUBLAS_CHECK(cublasLtCreate(&handles.cublaslt), "timing kernels");
    cudaStream_t stream = nullptr;
    TENSORACLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "timing kernels");
    cudaEvent_t start = nullptr, stop = nullptr;
    TENSORACLE_CUDA_CHECK(cudaEventCreate(&start), "timing kernels");
    TENSORACLE_CUDA_CHECK(cudaEventCreate(&stop), "timing kernels");
    launch.handles = &handles;
    launch.stream = stream;
    // The median of up to 10 timed runs after warm-up runs. A candidate whose first timed run is far slower than the
    // best so far is dropped at once (a direct kernel can be 100x slower than cuDNN at large batches), and one whose
    // launch fails (a library that refuses the problem) is skipped; if every candidate fails, the last error is thrown.
    std::size_t best = candidates.size();
    float best_ms = 0;
    std::exception_ptr last_error;
    auto time_once = [&](const KernelEntry* k) {
      TENSORACLE_CUDA_CHECK(cudaEventRecord(start, stream), "timing kernels");
      k->launch(launch);
      TENSORACLE_CUDA_CHECK(cudaEventRecord(stop, stream), "timing kernels");
      TENSORACLE_CUDA_CHECK(cudaEventSynchronize(stop), "timing kernels");
      float ms = 0;
      TENSORACLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), "timing kernels");
      return ms;
    };
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      const KernelEntry* k = find_kernel_entry(candidates[c]);
      launch.workspace_bytes = k->workspace_bytes;
      try {
        time_once(k);  // warm-up: caches, library plans and heuristics
        float first = time_once(k);
        if (best < candidates.size() && first > 4.0F * best_ms + 0.05F) continue;
        const int runs = first > 20.0F ? 3 : 10;
        std::vector<float> times{first};
        for (int i = 1; i < runs; ++i) times.push_back(time_once(k));
        std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
        const float median = times[times.size() / 2];
        if (best == candidates.size() || median < best_ms) {
          best = c;
          best_ms = median;
        }
      } catch (const Error&) {
        last_error = std::current_exception();
        cudaStreamSynchronize(stream);
        cudaGetLastError();  // a launch that failed to start leaves its error here
      }
    }
    if (best == candidates.size()) std::rethrow_exception(last_error);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
    cublasLtDestroy(handles.cublaslt);
    cleanup();
    return best;
  } catch (...) {
    cleanup();
    throw;
  }
}

}  // namespace cuda

namespace runtime {

namespace {

// Finds the device this machine offers for an engine built for a GPU model.
int matching_device(const EngineState& engine) {
  const auto& target = engine.manifest.at("target");
  const std::string name = target.value("device_name", std::string());
  const std::string cc = target.value("compute_capability", std::string());
  const SystemInfo sys = system_info();
  std::vector<std::string> seen;
  for (const auto& d : sys.cuda_devices) {
    const std::string dcc = fmt::format("{}.{}", d.compute_capability_major, d.compute_capability_minor);
    if (d.name == name && dcc == cc) return d.index;
    seen.push_back(fmt::format("{} (sm_{}{})", d.name, d.compute_capability_major, d.compute_capability_minor));
  }
  throw UnsupportedError(fmt::format(
      "{}: the engine was built for {} (compute capability {}); this machine has {}. Build the engine on this machine",
      engine.display_name, name, cc,
      seen.empty() ? fmt::format("no usable GPU ({})", sys.cuda_unavailable_reason)
                   : fmt::format("{}", fmt::join(seen, ", "))));
}

class CudaContext;

class CudaEngine final : public TargetEngine {
 public:
  explicit CudaEngine(const EngineState& engine) : engine_(engine), device_(matching_device(engine)) {
    const graph::Graph& g = engine.graph();
    // One allocation for every constant, each at a 256-byte aligned offset; one copy per constant.
    std::vector<std::size_t> offsets(g.tensors.size(), 0);
    std::size_t total = 0;
    for (std::size_t id = 0; id < g.tensors.size(); ++id) {
      if (engine.storage[id] != Storage::kConstant) continue;
      offsets[id] = total;
      const std::size_t bytes = static_cast<std::size_t>(g.static_dims(static_cast<std::int32_t>(id)).volume()) *
                                element_size(g.tensors[id].dtype);
      total += (bytes + 255) / 256 * 256;
    }
    weight_bytes_ = total;
    cuda::DeviceGuard guard(device_);
    if (total != 0) {
      TENSORACLE_CUDA_CHECK(cudaMalloc(&weights_, total),
                            fmt::format("{}: uploading {} bytes of weights", engine.display_name, total));
    }
    constants_.assign(g.tensors.size(), nullptr);
    try {
      for (std::size_t id = 0; id < g.tensors.size(); ++id) {
        if (engine.storage[id] != Storage::kConstant) continue;
        const std::size_t bytes = static_cast<std::size_t>(g.static_dims(static_cast<std::int32_t>(id)).volume()) *
                                  element_size(g.tensors[id].dtype);
        constants_[id] = static_cast<std::byte*>(weights_) + offsets[id];
        if (bytes != 0) {
          TENSORACLE_CUDA_CHECK(cudaMemcpy(constants_[id], engine.constant_host[id], bytes, cudaMemcpyHostToDevice),
                                fmt::format("{}: uploading weights", engine.display_name));
        }
      }
      load_generated_kernels();
    } catch (...) {
      release();
      throw;
    }
    for (const auto& step : engine.steps) entries_.push_back(cuda::find_kernel_entry(step.kernel));
  }
  ~CudaEngine() override { release(); }

  std::unique_ptr<TargetContext> create_context() const override;
  std::size_t weight_bytes() const override { return weight_bytes_; }

  const EngineState& engine_;
  int device_ = 0;
  void* weights_ = nullptr;
  std::size_t weight_bytes_ = 0;
  std::vector<void*> constants_;  // device address per tensor id (constants)
  std::vector<const cuda::KernelEntry*> entries_;
  // Generated kernels: one library per distinct binary (by offset in the kernels section), the entry points per step.
  std::map<std::uint64_t, cudaLibrary_t> libraries_;
  std::vector<std::vector<const void*>> compiled_;

 private:
  // Loads each binary of the kernels section once (on the current device, the engine's) and finds every step's entry
  // points; cudaFuncGetAttributes loads them into the device's context now, so no enqueue (or graph capture) loads
  // modules lazily.
  void load_generated_kernels() {
    const graph::Graph& g = engine_.graph();
    compiled_.resize(engine_.steps.size());
    for (std::size_t i = 0; i < engine_.steps.size(); ++i) {
      const StepPlan& step = engine_.steps[i];
      if (step.binary == nullptr) continue;
      const std::string what = fmt::format("{}: loading the generated kernel of layer '{}'", engine_.display_name,
                                           g.layers[step.layer].name);
      auto it = libraries_.find(step.binary_offset);
      if (it == libraries_.end()) {
        cudaLibrary_t library = nullptr;
        TENSORACLE_CUDA_CHECK(cudaLibraryLoadData(&library, step.binary, nullptr, nullptr, 0, nullptr, nullptr, 0),
                              what);
        it = libraries_.emplace(step.binary_offset, library).first;
      }
      for (const auto& name : step.entries) {
        cudaKernel_t kernel = nullptr;
        TENSORACLE_CUDA_CHECK(cudaLibraryGetKernel(&kernel, it->second, name.c_str()), what + " (" + name + ")");
        const void* function = reinterpret_cast<const void*>(kernel);
        cudaFuncAttributes attributes{};
        TENSORACLE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, function), what + " (" + name + ")");
        if (attributes.maxThreadsPerBlock < cuda::codegen::kThreads)
          throw CudaError(fmt::format("{} ({}): it runs at most {} threads per block, the launch uses {}", what, name,
                                      attributes.maxThreadsPerBlock, cuda::codegen::kThreads));
        compiled_[i].push_back(function);
      }
    }
  }

  void release() noexcept {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device_);
    for (const auto& [offset, library] : libraries_) cudaLibraryUnload(library);
    libraries_.clear();
    if (weights_ != nullptr) cudaFree(weights_);
    weights_ = nullptr;
    cudaSetDevice(previous);
  }
};

class CudaContext final : public TargetContext {
 public:
  explicit CudaContext(const CudaEngine& engine) : engine_(engine) {
    const EngineState& e = engine.engine_;
    cuda::DeviceGuard guard(engine.device_);
    try {
      if (e.arena_size != 0)
        TENSORACLE_CUDA_CHECK(cudaMalloc(&arena_, e.arena_size),
                              fmt::format("{}: allocating the {}-byte activation arena", e.display_name, e.arena_size));
      if (e.scratch_size != 0)
        TENSORACLE_CUDA_CHECK(cudaMalloc(&scratch_, e.scratch_size),
                              fmt::format("{}: allocating {} bytes of scratch", e.display_name, e.scratch_size));
      TENSORACLE_CUBLAS_CHECK(cublasLtCreate(&handles_.cublaslt), e.display_name);
    } catch (...) {
      release();
      throw;
    }
    const graph::Graph& g = e.graph();
    for (const auto& step : e.steps) {
      const graph::Layer& layer = g.layers[step.layer];
      attrs_.emplace_back(layer.attrs, layer.name, layer.op);
    }
  }
  ~CudaContext() override { release(); }

  void prepare(const std::vector<Dims>& shapes) override {
    const EngineState& e = engine_.engine_;
    const graph::Graph& g = e.graph();
    launches_.clear();
    io_slots_.clear();
    for (std::size_t i = 0; i < e.steps.size(); ++i) {
      const auto& step = e.steps[i];
      const graph::Layer& layer = g.layers[step.layer];
      cuda::StepLaunch launch;
      launch.layer = &layer;
      launch.attrs = &attrs_[i];
      launch.workspace = scratch_;
      launch.workspace_bytes = static_cast<std::size_t>(step.workspace_bytes);  // what the builder sized for the step
      launch.handles = &handles_;
      launch.precision = e.precision;
      launch.compiled = engine_.compiled_[i].empty() ? nullptr : &engine_.compiled_[i];
      auto tensor = [&](std::int32_t id, bool output, std::size_t position) {
        cuda::DeviceTensor t;
        if (id < 0) return t;
        const auto uid = static_cast<std::size_t>(id);
        t.dtype = g.tensors[uid].dtype;
        t.shape = shapes[uid];
        switch (e.storage[uid]) {
          case Storage::kConstant: t.data = engine_.constants_[uid]; break;
          case Storage::kArena: t.data = static_cast<std::byte*>(arena_) + e.arena_offset[uid]; break;
          case Storage::kInput:
          case Storage::kOutput:
            for (std::size_t k = 0; k < e.io_ids.size(); ++k) {
              if (e.io_ids[k] == id) io_slots_.push_back(IoSlot{i, output, position, k});
            }
            break;
        }
        return t;
      };
      for (std::size_t k = 0; k < layer.inputs.size(); ++k) launch.inputs.push_back(tensor(layer.inputs[k], false, k));
      for (std::size_t k = 0; k < layer.outputs.size(); ++k)
        launch.outputs.push_back(tensor(layer.outputs[k], true, k));
      launches_.push_back(std::move(launch));
    }
  }

  void run(const std::vector<void*>& io, CUstream_st* stream) override {
    bind(io, stream);
    cuda::DeviceGuard guard(engine_.device_);
    for (std::size_t i = 0; i < launches_.size(); ++i) engine_.entries_[i]->launch(launches_[i]);
  }

  std::vector<ExecutionContext::StepTiming> run_profiled(const std::vector<void*>& io, CUstream_st* stream) override {
    bind(io, stream);
    const EngineState& e = engine_.engine_;
    cuda::DeviceGuard guard(engine_.device_);
    std::vector<cudaEvent_t> events(launches_.size() + 1, nullptr);
    std::vector<ExecutionContext::StepTiming> timings;
    try {
      for (auto& ev : events) TENSORACLE_CUDA_CHECK(cudaEventCreate(&ev), "profiling an enqueue");
      TENSORACLE_CUDA_CHECK(cudaEventRecord(events[0], stream), "profiling an enqueue");
      for (std::size_t i = 0; i < launches_.size(); ++i) {
        engine_.entries_[i]->launch(launches_[i]);
        TENSORACLE_CUDA_CHECK(cudaEventRecord(events[i + 1], stream), "profiling an enqueue");
      }
      TENSORACLE_CUDA_CHECK(cudaEventSynchronize(events.back()), "profiling an enqueue");
      for (std::size_t i = 0; i < launches_.size(); ++i) {
        float ms = 0;
        TENSORACLE_CUDA_CHECK(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "profiling an enqueue");
        timings.push_back({e.graph().layers[e.steps[i].layer].name, e.steps[i].kernel, ms});
      }
    } catch (...) {
      for (auto ev : events) {
        if (ev) cudaEventDestroy(ev);
      }
      throw;
    }
    for (auto ev : events) cudaEventDestroy(ev);
    return timings;
  }

 private:
  struct IoSlot {
    std::size_t step;
    bool output;
    std::size_t position;
    std::size_t io_index;
  };

  void bind(const std::vector<void*>& io, CUstream_st* stream) {
    for (const auto& slot : io_slots_) {
      auto& launch = launches_[slot.step];
      (slot.output ? launch.outputs : launch.inputs)[slot.position].data = io[slot.io_index];
    }
    for (auto& launch : launches_) launch.stream = stream;
  }

  void release() noexcept {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(engine_.device_);
    if (handles_.cublaslt) cublasLtDestroy(handles_.cublaslt);
    if (arena_) cudaFree(arena_);
    if (scratch_) cudaFree(scratch_);
    handles_.cublaslt = nullptr;
    arena_ = scratch_ = nullptr;
    cudaSetDevice(previous);
  }

  const CudaEngine& engine_;
  void* arena_ = nullptr;
  void* scratch_ = nullptr;
  cuda::LibraryHandles handles_;
  std::vector<graph::AttrReader> attrs_;
  std::vector<cuda::StepLaunch> launches_;
  std::vector<IoSlot> io_slots_;
};

std::unique_ptr<TargetContext> CudaEngine::create_context() const { return std::make_unique<CudaContext>(*this); }

}  // namespace

std::unique_ptr<TargetEngine> create_cuda_target(const EngineState& engine) {
  for (const auto& step : engine.steps) {
    if (cuda::find_kernel_entry(step.kernel) == nullptr)
      throw FormatError(fmt::format("{}: unknown CUDA kernel '{}'", engine.display_name, step.kernel));
  }
  return std::make_unique<CudaEngine>(engine);
}

}  // namespace runtime

}  // namespace tensoracle
