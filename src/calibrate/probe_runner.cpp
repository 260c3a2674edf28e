// ProbeRunner: a calibration probe run on the CPU reference, or as an fp32 engine on a CUDA device (probe_runner.hpp).
#include "calibrate/probe_runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "graph/graph.hpp"
#include "graph/input_check.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/reference_executor.hpp"
#include "tensoracle/target_memory.hpp"

namespace tensoracle::calibrate {

// The engine of the current input shapes, its context, and the device buffers of its inputs and outputs.
struct ProbeRunner::Device {
  std::map<std::string, Dims> shapes;
  std::shared_ptr<const Engine> engine;
  std::unique_ptr<ExecutionContext> context;
  std::map<std::string, TargetBuffer> buffers;  // by input / output name
};

ProbeRunner::ProbeRunner(const Network& probe, Target target) : probe_(probe), target_(target) { probe_.verify(); }

ProbeRunner::~ProbeRunner() = default;

std::map<std::string, HostTensor> ProbeRunner::run(const std::map<std::string, HostTensor>& inputs) {
  if (target_.kind == TargetKind::kCpu) return run_reference(probe_, inputs);
  const graph::Graph& g = graph::graph_of(probe_);
  const std::vector<Dims> all_shapes = graph::checked_shapes(g, inputs);  // run_reference's checks and messages
  std::map<std::string, Dims> shapes;
  for (auto id : g.inputs) shapes[g.tensor(id).name] = all_shapes[static_cast<std::size_t>(id)];

  if (!device_ || device_->shapes != shapes) {
    device_.reset();  // the previous engine's memory goes before the next one is built
    BuilderConfig config;
    config.target = target_;
    config.precision = Precision::kFp32;
    config.time_kernels = false;
    for (auto id : g.inputs) {
      if (!g.static_dims(id).is_static()) {
        const Dims& d = shapes.at(g.tensor(id).name);
        config.add_profile(g.tensor(id).name, d, d, d);
      }
    }
    if (log_enabled(LogSeverity::kInfo)) {
      std::string text;
      for (const auto& [name, d] : shapes)
        text += fmt::format("{}{} {}", text.empty() ? "" : ", ", name, d.to_string());
      log(LogSeverity::kInfo,
          fmt::format("calibration: building the fp32 probe engine for {} (inputs {})", target_.to_string(), text));
    }
    auto device = std::make_unique<Device>();
    device->engine = Engine::deserialize(Builder(config).build(probe_), "calibration probe engine");
    device->context = device->engine->create_execution_context();
    device->context->set_input_shapes(shapes);
    for (const auto* list : {&device->engine->inputs(), &device->engine->outputs()}) {
      for (const EngineTensor& t : *list) {
        const std::size_t bytes = static_cast<std::size_t>(device->context->tensor_shape(t.name).volume()) *
                                  element_size(device->context->tensor_dtype(t.name));
        TargetBuffer& buffer =
            device->buffers.emplace(t.name, TargetBuffer(target_, std::max<std::size_t>(bytes, 1))).first->second;
        device->context->set_tensor_address(t.name, buffer.data());
      }
    }
    device->shapes = shapes;
    device_ = std::move(device);
  }
  Device& d = *device_;
  for (const EngineTensor& t : d.engine->inputs()) {
    const HostTensor& given = inputs.at(t.name);
    d.buffers.at(t.name).copy_from_host(given.bytes.data(), given.bytes.size());
  }
  TargetStream stream(target_);
  d.context->enqueue(stream.get());
  stream.synchronize();
  std::map<std::string, HostTensor> outputs;
  for (const EngineTensor& t : d.engine->outputs()) {
    HostTensor result(d.context->tensor_dtype(t.name), d.context->tensor_shape(t.name));
    d.buffers.at(t.name).copy_to_host(result.bytes.data(), result.bytes.size());
    outputs.emplace(t.name, std::move(result));
  }
  return outputs;
}

}  // namespace tensoracle::calibrate
