// The CPU backend: its builder queries (one reference kernel per op) and its runtime target, which runs each step's
// reference kernel on host memory (arena, weights, caller buffers).
#include <fmt/format.h>
#include <sys/utsname.h>

#include <chrono>
#include <cstring>
#include <new>

#include "backends/cpu/kernel_context.hpp"
#include "backends/target.hpp"
#include "graph/plugin_layer.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::backends {

namespace {

class CpuContext final : public TargetContext {
 public:
  explicit CpuContext(const EngineState& engine) : engine_(engine) {
    try {
      arena_.resize(static_cast<std::size_t>(engine.arena_size));
    } catch (const std::bad_alloc&) {
      throw Error(fmt::format("{}: can't allocate the {}-byte activation arena of a context", engine.display_name,
                              engine.arena_size));
    }
    const auto& g = engine.graph();
    for (const auto& step : engine.steps) kernels_.push_back(cpu::find_kernel(g.layers[step.layer].op));
  }

  void prepare(const std::vector<Dims>& shapes) override { shapes_ = shapes; }

  void run(const std::vector<void*>& io, CUstream_st* stream) override {
    check_stream(stream);
    for (std::size_t i = 0; i < engine_.steps.size(); ++i) run_step(i, io);
  }

  std::vector<ExecutionContext::StepTiming> run_profiled(const std::vector<void*>& io, CUstream_st* stream) override {
    check_stream(stream);
    std::vector<ExecutionContext::StepTiming> timings;
    for (std::size_t i = 0; i < engine_.steps.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      run_step(i, io);
      const std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - start;
      timings.push_back({engine_.graph().layers[engine_.steps[i].layer].name, engine_.steps[i].kernel, ms.count()});
    }
    return timings;
  }

  // The CPU runs every step on the calling thread: there is nothing to capture.
  void set_graph_mode(bool /*enabled*/) override {}
  std::size_t graph_captures() const override { return 0; }

 private:
  void check_stream(CUstream_st* stream) const {
    if (stream != nullptr)
      throw InvalidArgumentError(
          fmt::format("{}: a CPU engine runs on the calling thread; pass no stream", engine_.display_name));
  }

  std::byte* address(std::int32_t id, const std::vector<void*>& io) {
    const auto uid = static_cast<std::size_t>(id);
    switch (engine_.storage[uid]) {
      case Storage::kConstant:
        return const_cast<std::byte*>(engine_.constant_host[uid]);  // kernels never write their inputs
      case Storage::kArena: return arena_.data() + engine_.arena_offset[uid];
      case Storage::kInput:
      case Storage::kOutput:
        for (std::size_t i = 0; i < engine_.io_ids.size(); ++i) {
          if (engine_.io_ids[i] == id) return static_cast<std::byte*>(io[i]);
        }
        break;
    }
    throw Error("internal error: a tensor has no storage");
  }

  void run_step(std::size_t index, const std::vector<void*>& io) {
    const auto& g = engine_.graph();
    const graph::Layer& layer = g.layers[engine_.steps[index].layer];
    std::vector<cpu::TensorRef> refs;
    refs.reserve(layer.inputs.size() + layer.outputs.size());
    std::vector<const cpu::TensorRef*> ins, outs;
    for (auto id : layer.inputs) {
      if (id < 0) {
        ins.push_back(nullptr);
        continue;
      }
      refs.emplace_back(g.tensor(id).dtype, shapes_[static_cast<std::size_t>(id)], address(id, io));
      ins.push_back(&refs.back());
    }
    for (auto id : layer.outputs) {
      refs.emplace_back(g.tensor(id).dtype, shapes_[static_cast<std::size_t>(id)], address(id, io));
      outs.push_back(&refs.back());
    }
    cpu::KernelContext ctx(layer, std::move(ins), std::move(outs));
    kernels_[index](ctx);
  }

  const EngineState& engine_;
  std::vector<std::byte> arena_;
  std::vector<cpu::Kernel> kernels_;
  std::vector<Dims> shapes_;
};

class CpuEngine final : public TargetEngine {
 public:
  explicit CpuEngine(const EngineState& engine) : engine_(engine) {
    for (std::size_t id = 0; id < engine.graph().tensors.size(); ++id) {
      if (engine.storage[id] == Storage::kConstant) {
        weight_bytes_ += static_cast<std::size_t>(engine.graph().static_dims(static_cast<std::int32_t>(id)).volume()) *
                         element_size(engine.graph().tensors[id].dtype);
      }
    }
  }
  std::unique_ptr<TargetContext> create_context() const override { return std::make_unique<CpuContext>(engine_); }
  std::size_t weight_bytes() const override { return weight_bytes_; }
  bool keeps_host_weights() const override { return true; }  // the kernels read them in place

 private:
  const EngineState& engine_;
  std::size_t weight_bytes_ = 0;
};

// The instruction-set extensions the library (and so the CPU engine's kernels) was compiled to use.
std::vector<std::string> compiled_isa_features() {
  std::vector<std::string> features;
#ifdef __SSE2__
  features.emplace_back("sse2");
#endif
#ifdef __SSE3__
  features.emplace_back("sse3");
#endif
#ifdef __SSSE3__
  features.emplace_back("ssse3");
#endif
#ifdef __SSE4_1__
  features.emplace_back("sse4.1");
#endif
#ifdef __SSE4_2__
  features.emplace_back("sse4.2");
#endif
#ifdef __AVX__
  features.emplace_back("avx");
#endif
#ifdef __AVX2__
  features.emplace_back("avx2");
#endif
#ifdef __FMA__
  features.emplace_back("fma");
#endif
#ifdef __F16C__
  features.emplace_back("f16c");
#endif
#ifdef __AVX512F__
  features.emplace_back("avx512f");
#endif
#ifdef __AVX512BW__
  features.emplace_back("avx512bw");
#endif
#ifdef __AVX512VL__
  features.emplace_back("avx512vl");
#endif
#ifdef __ARM_NEON
  features.emplace_back("neon");
#endif
#ifdef __ARM_FEATURE_FMA
  features.emplace_back("arm-fma");
#endif
#ifdef __ARM_FEATURE_SVE
  features.emplace_back("sve");
#endif
  return features;
}

std::string machine_name() {
  utsname u{};
  if (::uname(&u) != 0) return "unknown";
  return u.machine;
}

// The CPU target runs every op with its reference kernel: "<op>_cpu_reference".
std::string kernel_name(const std::string& op) { return op + "_cpu_reference"; }

double now_ns() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Host memory; no streams; the steady clock; "captured" work is the function itself, called again.
class CpuMemory final : public TargetMemory {
 public:
  void* allocate(int /*device*/, std::size_t bytes) const override {
    void* p = ::operator new (bytes, std::align_val_t{256}, std::nothrow);
    if (p == nullptr) throw Error(fmt::format("can't allocate {} bytes of host memory", bytes));
    return p;
  }
  void release(int /*device*/, void* pointer) const noexcept override {
    ::operator delete (pointer, std::align_val_t{256});
  }
  void copy_from_host(int /*device*/, void* destination, const void* source, std::size_t bytes) const override {
    std::memcpy(destination, source, bytes);
  }
  void copy_to_host(int /*device*/, void* destination, const void* source, std::size_t bytes) const override {
    std::memcpy(destination, source, bytes);
  }
  void fill(int /*device*/, void* pointer, unsigned char value, std::size_t bytes) const override {
    std::memset(pointer, value, bytes);
  }
  CUstream_st* create_stream(int /*device*/) const override { return nullptr; }
  void destroy_stream(int /*device*/, CUstream_st* /*stream*/) const noexcept override {}
  void synchronize(int /*device*/, CUstream_st* /*stream*/) const override {}
  void* create_mark(int /*device*/) const override { return new double(0); }
  void destroy_mark(int /*device*/, void* mark) const noexcept override { delete static_cast<double*>(mark); }
  void record_mark(int /*device*/, void* mark, CUstream_st* /*stream*/) const override {
    *static_cast<double*>(mark) = now_ns();
  }
  double elapsed_ms(int /*device*/, void* start, void* stop) const override {
    return (*static_cast<double*>(stop) - *static_cast<double*>(start)) / 1e6;
  }
  void* capture(int /*device*/, CUstream_st* /*stream*/, const std::function<void()>& /*enqueue*/) const override {
    return nullptr;
  }
  void replay(int /*device*/, void* /*captured*/, CUstream_st* /*stream*/) const override {}
  void destroy_capture(int /*device*/, void* /*captured*/) const noexcept override {}
};

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "the CPU target"; }
  bool built() const override { return true; }

  nlohmann::json describe_target(const Target& /*target*/) const override {
    return nlohmann::json{{"kind", "cpu"}, {"arch", machine_name()}};
  }
  nlohmann::json cache_conditions(const Target& /*target*/) const override {
    return nlohmann::json{{"kind", "cpu"}, {"architecture", machine_name()}, {"isa", compiled_isa_features()}};
  }
  bool device_graph_passes() const override { return false; }

  std::vector<std::string> kernel_candidates(const graph::Graph& graph, const graph::Layer& layer,
                                             Precision /*precision*/) const override {
    if (cpu::find_kernel(layer.op) == nullptr) return {};
    if (layer.op == "plugin" && !graph::plugin_supports(graph, layer, plugin::Device::kHost))
      throw UnsupportedError(graph::plugin_unsupported_message(graph, layer, "host (CPU)"));
    return {kernel_name(layer.op)};
  }
  std::size_t kernel_workspace_bytes(const std::string& /*kernel*/) const override { return 0; }
  std::size_t kernel_workspace_for(const std::string& /*kernel*/, const graph::Graph& /*graph*/,
                                   const graph::Layer& /*layer*/, const std::vector<Dims>& /*shapes*/,
                                   Precision /*precision*/, const Target& /*target*/) const override {
    return 0;
  }
  std::size_t time_candidates(const graph::Graph& /*graph*/, const graph::Layer& /*layer*/,
                              const std::vector<Dims>& /*shapes*/, const std::vector<std::string>& /*candidates*/,
                              Precision /*precision*/, const Target& /*target*/) const override {
    return 0;  // one candidate per op
  }
  std::optional<GeneratedKernel> generate_step_kernel(const graph::Graph& /*graph*/, const graph::Layer& /*layer*/,
                                                      const std::string& /*kernel*/) const override {
    return std::nullopt;
  }
  std::vector<std::byte> compile_generated_kernel(const std::string& /*source*/,
                                                  const nlohmann::json& /*target_description*/,
                                                  const std::string& what) const override {
    throw UnsupportedError(fmt::format("{}: the CPU target has no generated kernels", what));
  }
  std::string kernel_compiler() const override { throw UnsupportedError("the CPU target has no generated kernels"); }

  bool is_known_kernel(const std::string& kernel, const std::string& op) const override {
    return cpu::find_kernel(op) != nullptr && kernel == kernel_name(op);
  }
  std::size_t generated_entry_count(const std::string& /*kernel*/) const override { return 0; }
  std::future<void> start_device(const nlohmann::json& /*target_description*/) const override { return {}; }
  std::unique_ptr<TargetEngine> load(const EngineState& engine) const override {
    return std::make_unique<CpuEngine>(engine);
  }
  const TargetMemory& memory() const override { return memory_; }

 private:
  CpuMemory memory_;
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace tensoracle::backends
