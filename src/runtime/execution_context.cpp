// ExecutionContext: shape setting and validation against the profile, output shape queries, bindings and enqueue.
#include <fmt/format.h>

#include "backends/target.hpp"
#include "graph/shape_eval.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {

namespace runtime {

struct ContextState {
  std::vector<Dims> input_shapes;  // per engine input; empty Dims until set
  std::vector<Dims> shapes;        // per tensor id, valid when `ready`
  bool ready = false;
  bool failed = false;  // the last set_input_shapes failed
  bool graph_mode = false;
  std::vector<void*> addresses;  // per io tensor (EngineState::io_ids order)
  std::unique_ptr<backends::TargetContext> target;
};

}  // namespace runtime

namespace {

bool is_fixed(const EngineTensor& t) { return t.profile.min == t.profile.max; }

}  // namespace

ExecutionContext::ExecutionContext(std::shared_ptr<const Engine> engine)
    : engine_(std::move(engine)), state_(std::make_unique<runtime::ContextState>()) {
  const backends::EngineState& e = engine_->state();
  state_->target = e.target_engine->create_context();
  state_->addresses.assign(e.io_ids.size(), nullptr);
  state_->input_shapes.resize(e.inputs.size());
  bool all_fixed = true;
  for (const auto& in : e.inputs) all_fixed = all_fixed && is_fixed(in);
  if (all_fixed) {
    std::map<std::string, Dims> shapes;
    for (const auto& in : e.inputs) shapes.emplace(in.name, in.profile.min);
    set_input_shapes(shapes);
  } else {
    for (std::size_t i = 0; i < e.inputs.size(); ++i) {
      if (is_fixed(e.inputs[i])) state_->input_shapes[i] = e.inputs[i].profile.min;
    }
  }
}

ExecutionContext::~ExecutionContext() = default;

void ExecutionContext::set_input_shapes(const std::map<std::string, Dims>& shapes) {
  const backends::EngineState& e = engine_->state();
  const bool was_ready = state_->ready;
  state_->ready = false;
  state_->failed = true;  // until this call completes
  for (const auto& [name, dims] : shapes) {
    bool known = false;
    for (const auto& in : e.inputs) known = known || in.name == name;
    if (!known) throw InvalidArgumentError(fmt::format("set_input_shapes: '{}' is not an input of the engine", name));
  }
  std::vector<Dims> chosen(e.inputs.size());
  for (std::size_t i = 0; i < e.inputs.size(); ++i) {
    const EngineTensor& in = e.inputs[i];
    auto it = shapes.find(in.name);
    if (it == shapes.end()) {
      if (!is_fixed(in)) {
        throw InvalidArgumentError(fmt::format(
            "set_input_shapes: ranged input '{}' (profile min {} max {}) is missing; set all ranged inputs together",
            in.name, in.profile.min.to_string(), in.profile.max.to_string()));
      }
      chosen[i] = in.profile.min;
      continue;
    }
    const Dims& d = it->second;
    bool fits = d.rank() == in.dims.rank();
    for (int k = 0; fits && k < d.rank(); ++k) fits = d[k] >= in.profile.min[k] && d[k] <= in.profile.max[k];
    if (!fits) {
      throw InvalidArgumentError(
          fmt::format("set_input_shapes: input '{}' shape {} is outside its profile (min {}, max {})", in.name,
                      d.to_string(), in.profile.min.to_string(), in.profile.max.to_string()));
    }
    chosen[i] = d;
  }
  std::vector<Dims> all;
  try {
    all = graph::evaluate_shapes(e.graph(), chosen);
  } catch (const GraphError& err) {
    throw InvalidArgumentError(
        fmt::format("set_input_shapes: these input shapes don't fit the network: {}", err.what()));
  }
  for (std::size_t id = 0; id < all.size(); ++id) {
    if (e.storage[id] != backends::Storage::kArena) continue;
    const std::uint64_t need = static_cast<std::uint64_t>(all[id].volume()) * element_size(e.graph().tensors[id].dtype);
    if (need > e.arena_bytes[id]) {
      throw InvalidArgumentError(fmt::format(
          "set_input_shapes: tensor '{}' would need {} bytes but the engine planned {} for its profile shapes; rebuild "
          "the engine with a profile that covers these shapes",
          e.graph().tensors[id].name, need, e.arena_bytes[id]));
    }
  }
  // The shapes prepared already (a fixed-shape engine's context is prepared when it is made): nothing to plan again.
  if (!was_ready || all != state_->shapes) state_->target->prepare(all);
  state_->input_shapes = std::move(chosen);
  state_->shapes = std::move(all);
  state_->failed = false;
  state_->ready = true;
}

bool ExecutionContext::shapes_ready() const noexcept { return state_->ready; }

namespace {

std::int32_t io_id(const backends::EngineState& e, const std::string& name, std::size_t* index) {
  for (std::size_t i = 0; i < e.io_ids.size(); ++i) {
    if (e.graph().tensor(e.io_ids[i]).name == name) {
      if (index) *index = i;
      return e.io_ids[i];
    }
  }
  throw InvalidArgumentError(fmt::format("'{}' is not an input or output of the engine", name));
}

}  // namespace

Dims ExecutionContext::tensor_shape(const std::string& name) const {
  const auto id = io_id(engine_->state(), name, nullptr);
  if (!state_->ready) {
    throw InvalidArgumentError(
        fmt::format("tensor_shape('{}'): {}", name,
                    state_->failed ? "the last set_input_shapes failed; set all ranged input shapes again"
                                   : "the input shapes are not set; call set_input_shapes with every ranged input"));
  }
  return state_->shapes[static_cast<std::size_t>(id)];
}

DataType ExecutionContext::tensor_dtype(const std::string& name) const {
  return engine_->state().graph().tensor(io_id(engine_->state(), name, nullptr)).dtype;
}

void ExecutionContext::set_tensor_address(const std::string& name, void* address) {
  std::size_t index = 0;
  io_id(engine_->state(), name, &index);
  state_->addresses[index] = address;
}

void* ExecutionContext::tensor_address(const std::string& name) const {
  std::size_t index = 0;
  io_id(engine_->state(), name, &index);
  return state_->addresses[index];
}

namespace {

void check_ready(const backends::EngineState& e, const runtime::ContextState& s) {
  if (!s.ready) {
    throw InvalidArgumentError(
        s.failed ? "enqueue: the last set_input_shapes failed; set all ranged input shapes again before enqueue"
                 : "enqueue: the input shapes are not set; call set_input_shapes with every ranged input");
  }
  for (std::size_t i = 0; i < e.io_ids.size(); ++i) {
    const auto id = static_cast<std::size_t>(e.io_ids[i]);
    if (s.addresses[i] == nullptr && s.shapes[id].volume() != 0) {
      throw InvalidArgumentError(
          fmt::format("enqueue: no address is bound for '{}'; call set_tensor_address", e.graph().tensors[id].name));
    }
  }
}

}  // namespace

void ExecutionContext::enqueue(CUstream_st* stream) {
  check_ready(engine_->state(), *state_);
  state_->target->run(state_->addresses, stream);
}

std::vector<ExecutionContext::StepTiming> ExecutionContext::enqueue_profiled(CUstream_st* stream) {
  check_ready(engine_->state(), *state_);
  return state_->target->run_profiled(state_->addresses, stream);
}

void ExecutionContext::set_graph_mode(bool enabled) {
  state_->target->set_graph_mode(enabled);
  state_->graph_mode = enabled;
}

bool ExecutionContext::graph_mode() const noexcept { return state_->graph_mode; }

std::size_t ExecutionContext::graph_captures() const noexcept { return state_->target->graph_captures(); }

}  // namespace tensoracle
