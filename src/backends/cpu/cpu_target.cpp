// The CPU target of the runtime: runs each step's reference kernel on host memory (arena, weights, caller buffers).
#include <fmt/format.h>

#include <chrono>
#include <new>

#include "backends/cpu/kernel_context.hpp"
#include "runtime/engine_state.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::runtime {

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

 private:
  const EngineState& engine_;
  std::size_t weight_bytes_ = 0;
};

}  // namespace

std::unique_ptr<TargetEngine> create_cpu_target(const EngineState& engine) {
  return std::make_unique<CpuEngine>(engine);
}

}  // namespace tensoracle::runtime
