// The CUDA target: weights uploaded once per engine; per context an arena, scratch, library handles, prepared steps.
#include <fmt/format.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <mutex>

#include "backends/cuda/check.hpp"
#include "backends/cuda/codegen/elementwise_codegen.hpp"
#include "backends/cuda/cublaslt_library.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/device_guard.hpp"
#include "backends/cuda/device_query.hpp"
#include "backends/target.hpp"
#include "core/stopwatch.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle::cuda {

namespace {

using backends::EngineState;
using backends::StepPlan;
using backends::Storage;
using backends::TargetContext;
using backends::TargetEngine;

// Finds the device this machine offers for an engine built for a GPU model (the manifest's "target" object).
int matching_device(const nlohmann::json& target, const std::string& display_name) {
  const std::string name = target.value("device_name", std::string());
  const std::string cc = target.value("compute_capability", std::string());
  SystemInfo sys;  // the devices only: picking one needs no library versions (nor waits for cuBLASLt to open)
  list_devices(sys);
  std::vector<std::string> seen;
  for (const auto& d : sys.cuda_devices) {
    const std::string dcc = fmt::format("{}.{}", d.compute_capability_major, d.compute_capability_minor);
    if (d.name == name && dcc == cc) return d.index;
    seen.push_back(fmt::format("{} (sm_{}{})", d.name, d.compute_capability_major, d.compute_capability_minor));
  }
  throw UnsupportedError(fmt::format(
      "{}: the engine was built for {} (compute capability {}); this machine has {}. Build the engine on this machine",
      display_name, name, cc,
      seen.empty() ? fmt::format("no usable GPU ({})", sys.cuda_unavailable_reason)
                   : fmt::format("{}", fmt::join(seen, ", "))));
}

class CudaContext;

class CudaEngine final : public TargetEngine {
 public:
  explicit CudaEngine(const EngineState& engine) : engine_(engine) {
    Stopwatch watch;
    device_ = matching_device(engine.manifest.at("target"), engine.display_name);
    const double query_ms = watch.lap_ms();
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
    DeviceGuard guard(device_);
    const double select_ms = watch.lap_ms();
    TENSORACLE_CUDA_CHECK(cudaFree(nullptr), fmt::format("{}: starting GPU {}", engine.display_name, device_));
    const double start_ms = watch.lap_ms();
    programmatic_launch_ = programmatic_launch_wanted(device_);
    start_library_handles();
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
      const double upload_ms = watch.lap_ms();
      load_generated_kernels();
      if (log_enabled(LogSeverity::kVerbose)) {
        log(LogSeverity::kVerbose,
            fmt::format(
                "{}: opened on GPU {}: devices queried in {:.1f} ms, the GPU selected in {:.1f} ms and started "
                "in {:.1f} ms, {:.1f} MiB of weights uploaded in {:.1f} ms, {} generated kernel binaries loaded "
                "in {:.1f} ms (done {:.1f} ms after the library was loaded); programmatic launches {}",
                engine.display_name, device_, query_ms, select_ms, start_ms, static_cast<double>(total) / (1 << 20),
                upload_ms, libraries_.size(), watch.lap_ms(), Stopwatch::since_library_load_ms(),
                programmatic_launch_ ? "on" : "off"));
      }
    } catch (...) {
      release();
      throw;
    }
    for (const auto& step : engine.steps) entries_.push_back(find_kernel_entry(step.kernel));
  }
  ~CudaEngine() override { release(); }

  std::unique_ptr<TargetContext> create_context() const override;
  // The library handles made beside the upload for the first context, or null (taken already, or their creation
  // failed: the context makes its own and raises that error).
  std::unique_ptr<LibraryHandles> take_library_handles() const {
    const std::lock_guard<std::mutex> lock(handles_mutex_);
    if (!first_handles_.valid()) return nullptr;
    try {
      return first_handles_.get();
    } catch (...) {
      return nullptr;
    }
  }
  std::size_t weight_bytes() const override { return weight_bytes_; }
  bool keeps_host_weights() const override { return false; }  // uploaded at construction

  const EngineState& engine_;
  int device_ = 0;
  void* weights_ = nullptr;
  std::size_t weight_bytes_ = 0;
  std::vector<void*> constants_;  // device address per tensor id (constants)
  std::vector<const KernelEntry*> entries_;
  // Generated kernels: one library per distinct binary (by offset in the kernels section), the entry points per step.
  struct LoadedBinary {
    cudaLibrary_t library = nullptr;
    bool waits = false;  // its kernels wait for the preceding steps (it defines codegen::kWaitsMarker)
  };
  std::map<std::uint64_t, LoadedBinary> libraries_;
  std::vector<std::vector<const void*>> compiled_;
  // Launch the steps' own kernels programmatically: an sm_90 or newer device, and TENSORACLE_PROGRAMMATIC_LAUNCH not 0.
  bool programmatic_launch_ = false;
  // Per step, StepLaunch::programmatic: programmatic_launch_, and for a step with generated kernels their binary's
  // `waits`.
  std::vector<bool> programmatic_;
  mutable std::mutex handles_mutex_;
  mutable std::future<std::unique_ptr<LibraryHandles>> first_handles_;

 private:
  // Creates the first context's library handles on another thread while this one uploads the weights: cuBLASLt's,
  // and cuDNN's when a step's kernel is a cuDNN one (each library's first handle in a process loads its kernels, tens
  // of milliseconds that would otherwise come after the upload).
  void start_library_handles() {
    const bool cudnn = std::any_of(engine_.steps.begin(), engine_.steps.end(),
                                   [](const StepPlan& step) { return step.kernel.find("cudnn") != std::string::npos; });
    first_handles_ = std::async(std::launch::async, [device = device_, cudnn, name = engine_.display_name] {
      Stopwatch watch;
      TENSORACLE_CUDA_CHECK(cudaSetDevice(device), fmt::format("{}: selecting GPU {}", name, device));
      auto handles = std::make_unique<LibraryHandles>();
      const double cublaslt_ms = watch.lap_ms();
      handles->warm_up_cublaslt();
      const double heuristic_ms = watch.lap_ms();
      if (cudnn) handles->cudnn(name);
      if (log_enabled(LogSeverity::kVerbose)) {
        log(LogSeverity::kVerbose,
            fmt::format("{}: library handles made beside the upload: cuBLASLt in {:.1f} ms, its heuristic's first "
                        "answer in {:.1f} ms{} (done {:.1f} ms after the library was loaded)",
                        name, cublaslt_ms, heuristic_ms,
                        cudnn ? fmt::format(", cuDNN in {:.1f} ms", watch.lap_ms()) : std::string(),
                        Stopwatch::since_library_load_ms()));
      }
      return handles;
    });
  }

  // Loads each binary of the kernels section once (on the current device, the engine's) and finds every step's entry
  // points; cudaFuncGetAttributes loads them into the device's context now, so no enqueue (or graph capture) loads
  // modules lazily. Decides each step's programmatic launch (programmatic_) on the way.
  void load_generated_kernels() {
    const graph::Graph& g = engine_.graph();
    compiled_.resize(engine_.steps.size());
    programmatic_.assign(engine_.steps.size(), programmatic_launch_);
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
        void* marker = nullptr;
        std::size_t marker_bytes = 0;
        const cudaError_t found = cudaLibraryGetGlobal(&marker, &marker_bytes, library, codegen::kWaitsMarker);
        if (found != cudaSuccess) cudaGetLastError();  // a binary of an older engine: its kernels launch plainly
        it = libraries_.emplace(step.binary_offset, LoadedBinary{library, found == cudaSuccess}).first;
      }
      programmatic_[i] = programmatic_launch_ && it->second.waits;
      for (const auto& name : step.entries) {
        cudaKernel_t kernel = nullptr;
        TENSORACLE_CUDA_CHECK(cudaLibraryGetKernel(&kernel, it->second.library, name.c_str()),
                              what + " (" + name + ")");
        const void* function = reinterpret_cast<const void*>(kernel);
        cudaFuncAttributes attributes{};
        TENSORACLE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, function), what + " (" + name + ")");
        if (attributes.maxThreadsPerBlock < codegen::kThreads)
          throw CudaError(fmt::format("{} ({}): it runs at most {} threads per block, the launch uses {}", what, name,
                                      attributes.maxThreadsPerBlock, codegen::kThreads));
        compiled_[i].push_back(function);
      }
    }
  }

  void release() noexcept {
    const DeviceGuard guard(device_, std::nothrow);
    for (const auto& [offset, binary] : libraries_) cudaLibraryUnload(binary.library);
    libraries_.clear();
    if (weights_ != nullptr) cudaFree(weights_);
    weights_ = nullptr;
  }
};

class CudaContext final : public TargetContext {
 public:
  explicit CudaContext(const CudaEngine& engine) : engine_(engine) {
    const EngineState& e = engine.engine_;
    DeviceGuard guard(engine.device_);
    try {
      if (e.arena_size != 0)
        TENSORACLE_CUDA_CHECK(cudaMalloc(&arena_, e.arena_size),
                              fmt::format("{}: allocating the {}-byte activation arena", e.display_name, e.arena_size));
      if (e.scratch_size != 0)
        TENSORACLE_CUDA_CHECK(cudaMalloc(&scratch_, e.scratch_size),
                              fmt::format("{}: allocating {} bytes of scratch", e.display_name, e.scratch_size));
      Stopwatch watch;
      handles_ = engine.take_library_handles();
      const bool made_beside = handles_ != nullptr;
      if (!made_beside) handles_ = std::make_unique<LibraryHandles>();
      if (log_enabled(LogSeverity::kVerbose)) {
        log(LogSeverity::kVerbose,
            fmt::format("{}: context: {} MiB of activations and {} MiB of scratch; library "
                        "handles {} in {:.1f} ms",
                        e.display_name, e.arena_size >> 20, e.scratch_size >> 20,
                        made_beside ? "(made beside the upload) waited for" : "made", watch.lap_ms()));
      }
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

  // Every step's launch description at these shapes, then each kernel's prepare function on it: everything
  // shape-dependent is planned here, so run() only binds the caller's addresses and launches. On failure the previous
  // preparation is gone too (the runtime refuses to enqueue until set_input_shapes succeeds).
  void prepare(const std::vector<Dims>& shapes) override {
    const EngineState& e = engine_.engine_;
    const graph::Graph& g = e.graph();
    launches_.clear();
    states_.clear();
    io_slots_.clear();
    std::vector<StepLaunch> launches;
    std::vector<IoSlot> io_slots;
    for (std::size_t i = 0; i < e.steps.size(); ++i) {
      const auto& step = e.steps[i];
      const graph::Layer& layer = g.layers[step.layer];
      StepLaunch launch;
      launch.layer = &layer;
      launch.attrs = &attrs_[i];
      launch.workspace = scratch_;
      launch.workspace_bytes = static_cast<std::size_t>(step.workspace_bytes);  // what the builder sized for the step
      launch.handles = handles_.get();
      launch.precision = e.precision;
      launch.compiled = engine_.compiled_[i].empty() ? nullptr : &engine_.compiled_[i];
      launch.programmatic = engine_.programmatic_[i];
      auto tensor = [&](std::int32_t id, bool output, std::size_t position) {
        DeviceTensor t;
        if (id < 0) return t;
        const auto uid = static_cast<std::size_t>(id);
        t.dtype = g.tensors[uid].dtype;
        t.shape = shapes[uid];
        switch (e.storage[uid]) {
          case Storage::kConstant: t.data = engine_.constants_[uid]; break;
          case Storage::kArena: t.data = static_cast<std::byte*>(arena_) + e.arena_offset[uid]; break;
          case Storage::kInput:
          case Storage::kOutput:
            t.caller_buffer = true;
            for (std::size_t k = 0; k < e.io_ids.size(); ++k) {
              if (e.io_ids[k] == id) io_slots.push_back(IoSlot{i, output, position, k});
            }
            break;
        }
        return t;
      };
      for (std::size_t k = 0; k < layer.inputs.size(); ++k) launch.inputs.push_back(tensor(layer.inputs[k], false, k));
      for (std::size_t k = 0; k < layer.outputs.size(); ++k)
        launch.outputs.push_back(tensor(layer.outputs[k], true, k));
      launches.push_back(std::move(launch));
    }
    DeviceGuard guard(engine_.device_);
    std::vector<std::unique_ptr<StepState>> states;
    states.reserve(launches.size());
    const bool verbose = log_enabled(LogSeverity::kVerbose);
    std::map<std::string, std::pair<int, double>> by_kernel;  // verbose: steps and milliseconds per kernel
    Stopwatch watch;
    for (std::size_t i = 0; i < launches.size(); ++i) {
      states.push_back(engine_.entries_[i]->prepare(launches[i]));
      if (verbose) {
        auto& [steps, ms] = by_kernel[e.steps[i].kernel];
        ++steps;
        ms += watch.lap_ms();
      }
    }
    if (verbose) log_prepare_times(by_kernel);
    launches_ = std::move(launches);
    states_ = std::move(states);
    io_slots_ = std::move(io_slots);
    for (auto& graph : graphs_) graph.current = false;  // the kernels' parameters changed: capture again
  }

  void run(const std::vector<void*>& io, CUstream_st* stream) override {
    DeviceGuard guard(engine_.device_);
    if (graph_mode_ && !stream_is_capturing(stream)) {
      CapturedGraph& graph = graph_for(io);
      TENSORACLE_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream),
                            fmt::format("{}: launching the engine's CUDA graph", engine_.engine_.display_name));
      return;
    }
    bind(io, stream);
    launch_steps();
  }

  void set_graph_mode(bool enabled) override {
    graph_mode_ = enabled;
    if (!enabled) release_graphs();
  }
  std::size_t graph_captures() const override { return graph_captures_; }

  std::vector<ExecutionContext::StepTiming> run_profiled(const std::vector<void*>& io, CUstream_st* stream) override {
    bind(io, stream);
    const EngineState& e = engine_.engine_;
    DeviceGuard guard(engine_.device_);
    std::vector<cudaEvent_t> events(launches_.size() + 1, nullptr);
    std::vector<ExecutionContext::StepTiming> timings;
    try {
      for (auto& ev : events) TENSORACLE_CUDA_CHECK(cudaEventCreate(&ev), "profiling an enqueue");
      TENSORACLE_CUDA_CHECK(cudaEventRecord(events[0], stream), "profiling an enqueue");
      for (std::size_t i = 0; i < launches_.size(); ++i) {
        engine_.entries_[i]->launch(launches_[i], *states_[i]);
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
  // Graph mode (ExecutionContext::set_graph_mode): one captured graph per set of caller addresses.
  struct CapturedGraph {
    std::vector<void*> io;  // the caller addresses it was captured with
    cudaGraphExec_t exec = nullptr;
    bool current = false;  // captured since the last prepare
    std::uint64_t last_use = 0;
  };
  // The verbose log's account of a prepare: its time in all, and the kernels that took the most of it.
  void log_prepare_times(const std::map<std::string, std::pair<int, double>>& by_kernel) const {
    std::vector<std::pair<double, std::string>> rows;
    double total = 0;
    for (const auto& [kernel, steps_ms] : by_kernel) {
      total += steps_ms.second;
      rows.emplace_back(steps_ms.second,
                        fmt::format("{} ({} steps) {:.1f} ms", kernel, steps_ms.first, steps_ms.second));
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> top;
    for (std::size_t i = 0; i < rows.size() && i < 5; ++i) top.push_back(rows[i].second);
    log(LogSeverity::kVerbose, fmt::format("{}: steps prepared in {:.1f} ms; the slowest kernels: {}",
                                           engine_.engine_.display_name, total, fmt::join(top, ", ")));
  }

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

  void launch_steps() {
    for (std::size_t i = 0; i < launches_.size(); ++i) engine_.entries_[i]->launch(launches_[i], *states_[i]);
  }

  static bool stream_is_capturing(CUstream_st* stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    TENSORACLE_CUDA_CHECK(cudaStreamIsCapturing(stream, &status), "asking whether the enqueue stream is capturing");
    return status != cudaStreamCaptureStatusNone;
  }

  // Graph mode: the graph captured with these caller addresses, captured now when there is none or set_input_shapes
  // was called since. Up to kMaxGraphs address sets keep a graph each (buffers used in turn don't capture each time);
  // a new set replaces the least recently used one.
  CapturedGraph& graph_for(const std::vector<void*>& io) {
    ++graph_clock_;
    CapturedGraph* slot = nullptr;
    for (auto& graph : graphs_) {
      if (graph.io == io) slot = &graph;
    }
    if (slot != nullptr && slot->current) {
      slot->last_use = graph_clock_;
      return *slot;
    }
    if (slot == nullptr) {
      if (graphs_.size() < kMaxGraphs) {
        slot = &graphs_.emplace_back();
      } else {
        slot = &*std::min_element(graphs_.begin(), graphs_.end(), [](const CapturedGraph& a, const CapturedGraph& b) {
          return a.last_use < b.last_use;
        });
      }
    }
    capture_into(*slot, io);
    slot->last_use = graph_clock_;
    return *slot;
  }

  // Records every step on the context's capture stream (the caller's stream sees only graph launches) with these
  // addresses, then updates the slot's instantiated graph in place when CUDA accepts the new graph as an update of it
  // (same topology, other kernel parameters: an address change) or instantiates it anew.
  void capture_into(CapturedGraph& slot, const std::vector<void*>& io) {
    const std::string& name = engine_.engine_.display_name;
    if (capture_stream_ == nullptr) {
      TENSORACLE_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking),
                            fmt::format("{}: creating the graph mode's capture stream", name));
    }
    slot.current = false;
    slot.io = io;
    bind(io, capture_stream_);
    void* exec = slot.exec;
    try {
      graph_capture_into(
          engine_.device_, capture_stream_, exec, [this] { launch_steps(); },
          fmt::format("{}: capturing the engine into a CUDA graph", name));
    } catch (...) {
      slot.exec = static_cast<cudaGraphExec_t>(exec);
      throw;
    }
    slot.exec = static_cast<cudaGraphExec_t>(exec);
    slot.current = true;
    ++graph_captures_;
  }

  void release_graphs() noexcept {
    for (auto& graph : graphs_) {
      if (graph.exec != nullptr) cudaGraphExecDestroy(graph.exec);
    }
    graphs_.clear();
  }

  void release() noexcept {
    const DeviceGuard guard(engine_.device_, std::nothrow);
    release_graphs();
    if (capture_stream_ != nullptr) cudaStreamDestroy(capture_stream_);
    capture_stream_ = nullptr;
    states_.clear();  // steps' descriptors and plans first: they may refer to the handles
    handles_.reset();
    if (arena_) cudaFree(arena_);
    if (scratch_) cudaFree(scratch_);
    arena_ = scratch_ = nullptr;
  }

  const CudaEngine& engine_;
  void* arena_ = nullptr;
  void* scratch_ = nullptr;
  std::unique_ptr<LibraryHandles> handles_;
  std::vector<graph::AttrReader> attrs_;
  std::vector<StepLaunch> launches_;
  std::vector<std::unique_ptr<StepState>> states_;  // per step, from its kernel's prepare function
  std::vector<IoSlot> io_slots_;
  // Graph mode (ExecutionContext::set_graph_mode).
  static constexpr std::size_t kMaxGraphs = 8;
  bool graph_mode_ = false;
  std::vector<CapturedGraph> graphs_;
  std::uint64_t graph_clock_ = 0;
  cudaStream_t capture_stream_ = nullptr;
  std::size_t graph_captures_ = 0;
};

std::unique_ptr<TargetContext> CudaEngine::create_context() const { return std::make_unique<CudaContext>(*this); }

}  // namespace

bool programmatic_launch_wanted(int device) {
  const char* setting = std::getenv("TENSORACLE_PROGRAMMATIC_LAUNCH");
  if (setting != nullptr && std::string(setting) == "0") return false;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major >= 9;
}

std::future<void> start_device(const nlohmann::json& target_description) {
  if (!target_description.is_object()) return {};
  return std::async(std::launch::async, [target = target_description] {
    try {
      Stopwatch watch;
      start_loading_cublaslt();  // on a thread of its own, beside cuInit and the context below
      const int device = matching_device(target, "");
      const double query_ms = watch.lap_ms();
      if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        cudaGetLastError();
        return;
      }
      if (log_enabled(LogSeverity::kVerbose)) {
        log(LogSeverity::kVerbose,
            fmt::format("GPU {} started beside the engine's reading: devices queried in {:.1f} ms, the GPU started in "
                        "{:.1f} ms (done {:.1f} ms after the library was loaded)",
                        device, query_ms, watch.lap_ms(), Stopwatch::since_library_load_ms()));
      }
    } catch (...) {  // load() finds the same problem and reports it
    }
  });
}

std::unique_ptr<TargetEngine> load_engine(const EngineState& engine) {
  for (const auto& step : engine.steps) {
    if (find_kernel_entry(step.kernel) == nullptr)
      throw FormatError(fmt::format("{}: unknown CUDA kernel '{}'", engine.display_name, step.kernel));
  }
  return std::make_unique<CudaEngine>(engine);
}

}  // namespace tensoracle::cuda
