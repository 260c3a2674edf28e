// The builder's questions to the CUDA kernels on the target GPU: each candidate's scratch, and which is fastest.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/device_guard.hpp"
#include "core/stopwatch.hpp"
#include "tensoracle/logging.hpp"

namespace tensoracle::cuda {

std::size_t kernel_workspace_bytes(const std::string& kernel) {
  const KernelEntry* k = find_kernel_entry(kernel);
  return k == nullptr ? 0 : k->workspace_bytes;
}

std::size_t kernel_workspace_for(const std::string& kernel, const graph::Graph& graph, const graph::Layer& layer,
                                 const std::vector<Dims>& shapes, Precision precision, int device) {
  const KernelEntry* k = find_kernel_entry(kernel);
  if (k == nullptr) return 0;
  if (k->workspace_for == nullptr) return k->workspace_bytes;
  DeviceGuard guard(device);
  const std::size_t needed = k->workspace_for(graph, layer, shapes, precision);
  return k->workspace_bytes == 0 ? needed : std::min(k->workspace_bytes, needed);  // 0: no fixed bound (plugins)
}

namespace {

// Uniform values in [-1, 1) from a hash of the element's index and the tensor's seed: the same values on every
// run, made on the GPU (a host generator took seconds for a ResNet-50 convolution's 200 M-element tensors at batch
// 256, most of that build's time).
__device__ float uniform_from_index(std::uint64_t i, std::uint32_t seed) {
  std::uint64_t z = i + 0x9E3779B97F4A7C15ULL * (seed + 1ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0F / 16777216.0F) - 1.0F;  // 24 random bits
}

__device__ void store(float* p, float v) { *p = v; }
__device__ void store(double* p, float v) { *p = v; }
__device__ void store(__half* p, float v) { *p = __float2half(v); }
__device__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

template <typename T>
__global__ void fill_uniform(T* out, std::size_t count, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    store(out + i, uniform_from_index(i, seed));
  }
}

// Fills a timing buffer: floating-point types with uniform values in [-1, 1), others (indices, integers, 8-bit
// quantized values) with zeros, a valid index and a valid integer. On the legacy default stream; the caller
// synchronizes before timing on its own stream.
void fill_random(void* device_pointer, DataType dtype, std::size_t count, std::mt19937& rng) {
  if (count == 0) return;
  const std::uint32_t seed = static_cast<std::uint32_t>(rng());
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((count + kThreads - 1) / kThreads, 4096));
  switch (dtype) {
    case DataType::kF32: fill_uniform<<<blocks, kThreads>>>(static_cast<float*>(device_pointer), count, seed); break;
    case DataType::kF64: fill_uniform<<<blocks, kThreads>>>(static_cast<double*>(device_pointer), count, seed); break;
    case DataType::kF16: fill_uniform<<<blocks, kThreads>>>(static_cast<__half*>(device_pointer), count, seed); break;
    case DataType::kBF16:
      fill_uniform<<<blocks, kThreads>>>(static_cast<__nv_bfloat16*>(device_pointer), count, seed);
      break;
    default:
      TENSORACLE_CUDA_CHECK(cudaMemset(device_pointer, 0, count * element_size(dtype)), "preparing timing inputs");
      return;
  }
  TENSORACLE_CUDA_CHECK(cudaGetLastError(), "preparing timing inputs");
}

// A candidate prepared for timing: its state, the library handles it was prepared with (its launches use them too),
// and the host time the preparation took, or the error it threw.
struct PreparedCandidate {
  LibraryHandles* handles = nullptr;
  std::unique_ptr<StepState> state;
  std::exception_ptr error;
  double ms = 0;
};

// At most this many host threads prepare one layer's candidates at once.
constexpr std::size_t kMaxPrepareThreads = 8;

// Prepares every candidate before any is timed, on up to kMaxPrepareThreads host threads: finalizing a cuDNN
// runtime-fusion plan compiles its kernel (tenths of a second of one core), and a convolution has several such
// candidates. Each thread has its own library handles (a cuDNN handle is not for two threads at once), kept in
// `handle_sets`, which must outlive the states. A plugin's prepare is the plugin's own code, not known to be
// thread-safe: its candidates are prepared on this thread.
std::vector<PreparedCandidate> prepare_candidates(const StepLaunch& launch, const std::vector<std::string>& candidates,
                                                  const std::vector<std::size_t>& scratch, int device,
                                                  std::vector<std::unique_ptr<LibraryHandles>>& handle_sets) {
  std::vector<PreparedCandidate> prepared(candidates.size());
  const bool parallel = launch.layer->op != "plugin";
  const std::size_t threads =
      parallel ? std::min({candidates.size(), kMaxPrepareThreads,
                           static_cast<std::size_t>(std::max(1U, std::thread::hardware_concurrency()))})
               : 1;
  handle_sets.resize(threads);
  std::atomic<std::size_t> next{0};
  auto work = [&](std::size_t t) {
    for (std::size_t c = next.fetch_add(1); c < candidates.size(); c = next.fetch_add(1)) {
      PreparedCandidate& p = prepared[c];
      try {
        DeviceGuard guard(device);  // also makes the device's context current on a pool thread, for cuBLASLt's handle
        if (handle_sets[t] == nullptr) handle_sets[t] = std::make_unique<LibraryHandles>();
        StepLaunch own = launch;
        own.handles = handle_sets[t].get();
        own.workspace_bytes = scratch[c];
        own.stream = nullptr;  // as in an execution context: prepared before any stream is known
        Stopwatch watch;
        p.state = find_kernel_entry(candidates[c])->prepare(own);
        p.ms = watch.lap_ms();
        p.handles = own.handles;
      } catch (...) {
        p.error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& thread : pool) thread.join();
  return prepared;
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
    TENSORACLE_CUDA_CHECK(cudaDeviceSynchronize(), "preparing timing inputs");  // filled before the timing stream runs
    // Each candidate's scratch: its fixed bound, or without one (0) what it needs for this problem (plugins, the
    // weight-only products' dequantized weight).
    std::vector<std::size_t> scratch;
    for (const auto& name : candidates) {
      const std::size_t bound = kernel_workspace_bytes(name);
      scratch.push_back(bound != 0 ? bound : kernel_workspace_for(name, graph, layer, shapes, precision, device));
    }
    const std::size_t workspace = *std::max_element(scratch.begin(), scratch.end());
    if (workspace != 0) {
      TENSORACLE_CUDA_CHECK(cudaMalloc(&launch.workspace, workspace), "allocating timing scratch");
      allocations.push_back(launch.workspace);
    }
    std::vector<std::unique_ptr<LibraryHandles>> handle_sets;  // declared before the states: destroyed after them
    Stopwatch prepare_watch;
    std::vector<PreparedCandidate> prepared = prepare_candidates(launch, candidates, scratch, device, handle_sets);
    const double prepare_all_ms = prepare_watch.lap_ms();
    cudaStream_t stream = nullptr;
    TENSORACLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "timing kernels");
    cudaEvent_t start = nullptr, stop = nullptr;
    TENSORACLE_CUDA_CHECK(cudaEventCreate(&start), "timing kernels");
    TENSORACLE_CUDA_CHECK(cudaEventCreate(&stop), "timing kernels");
    launch.stream = stream;
    // Each candidate's launches are timed as the engine's graph mode runs them: back to back in a captured CUDA graph,
    // programmatically where the execution context launches so (timing plain launches adds the host's launch cost,
    // which misjudges kernels of a few microseconds). After a plain warm-up run (caches; modules loaded) and one plain
    // timed run, kGraphSpanMs of launches (1 to kMaxGraphLaunches) are captured into one graph; the median of up to 10
    // of its replays, divided by the launches, is the candidate's time. A candidate whose plain run is far slower than
    // the best so far is dropped at once (a direct kernel can be 100x slower than cuDNN at large batches), and one
    // whose launch fails (a library that refuses the problem) is skipped; if every candidate fails, the last error is
    // thrown. One whose launch can't be captured is timed with plain launches instead.
    constexpr float kGraphSpanMs = 0.2F;
    constexpr int kMaxGraphLaunches = 20;
    launch.programmatic = programmatic_launch_wanted(device);
    std::size_t best = candidates.size();
    float best_ms = 0;
    std::exception_ptr last_error;
    std::vector<std::string> report;  // each candidate's result, logged at verbose level
    // The time between events around `enqueue` on the stream.
    auto time_once = [&](const std::function<void()>& enqueue) {
      TENSORACLE_CUDA_CHECK(cudaEventRecord(start, stream), "timing kernels");
      enqueue();
      TENSORACLE_CUDA_CHECK(cudaEventRecord(stop, stream), "timing kernels");
      TENSORACLE_CUDA_CHECK(cudaEventSynchronize(stop), "timing kernels");
      float ms = 0;
      TENSORACLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), "timing kernels");
      return ms;
    };
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      const KernelEntry* k = find_kernel_entry(candidates[c]);
      launch.workspace_bytes = scratch[c];
      std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)> graph(nullptr, &cudaGraphExecDestroy);
      try {
        if (prepared[c].error) std::rethrow_exception(prepared[c].error);
        const std::unique_ptr<StepState> state = std::move(prepared[c].state);  // released once it is timed
        launch.handles = prepared[c].handles;
        Stopwatch watch;
        const auto plain = [&] { k->launch(launch, *state); };
        time_once(plain);  // warm-up: caches, and the kernels' modules loaded before any capture
        const double warm_up_ms = watch.lap_ms();
        // Where the build's time goes besides the timed runs, for the verbose log.
        const std::string setup = fmt::format("prepared in {:.1f} ms, warm-up {:.1f} ms", prepared[c].ms, warm_up_ms);
        const float first = time_once(plain);
        if (best < candidates.size() && first > 4.0F * best_ms + 0.05F) {
          report.push_back(fmt::format("{} dropped ({:.4f} ms once; {})", candidates[c], first, setup));
          continue;
        }
        const int launches = static_cast<int>(
            std::clamp(kGraphSpanMs / std::max(first, 1e-4F), 1.0F, static_cast<float>(kMaxGraphLaunches)));
        std::string how = fmt::format("in a graph of {} launch{}", launches, launches == 1 ? "" : "es");
        try {
          graph.reset(static_cast<cudaGraphExec_t>(graph_capture(device, stream, [&] {
            for (int i = 0; i < launches; ++i) plain();
          })));
        } catch (const Error& e) {
          cudaGetLastError();
          how = fmt::format("launched plainly, not capturable: {}", e.what());
        }
        const auto replay = [&] { TENSORACLE_CUDA_CHECK(cudaGraphLaunch(graph.get(), stream), "timing kernels"); };
        const float per_run = graph != nullptr ? static_cast<float>(launches) : 1.0F;
        if (graph != nullptr) time_once(replay);  // the graph's first launch uploads it
        const int runs = first > 20.0F ? 3 : 10;
        std::vector<float> times;
        for (int i = 0; i < runs; ++i)
          times.push_back((graph != nullptr ? time_once(replay) : time_once(plain)) / per_run);
        std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
        const float median = times[times.size() / 2];
        report.push_back(fmt::format("{} {:.4f} ms ({}; {})", candidates[c], median, how, setup));
        if (best == candidates.size() || median < best_ms) {
          best = c;
          best_ms = median;
        }
      } catch (const Error& e) {
        report.push_back(fmt::format("{} failed: {}", candidates[c], e.what()));
        last_error = std::current_exception();
        cudaStreamSynchronize(stream);
        cudaGetLastError();  // a launch that failed to start leaves its error here
      }
    }
    log(LogSeverity::kVerbose,
        fmt::format("build: timed '{}' (candidates prepared on {} thread{} in {:.1f} ms): {}", layer.name,
                    handle_sets.size(), handle_sets.size() == 1 ? "" : "s", prepare_all_ms, fmt::join(report, "; ")));
    if (best == candidates.size()) std::rethrow_exception(last_error);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
    cleanup();
    return best;
  } catch (...) {
    cleanup();
    throw;
  }
}

}  // namespace tensoracle::cuda
