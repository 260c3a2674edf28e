// Engine files as the builder writes them and the runtime reads them back: the manifest writer beside its reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/target.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/plugin_registry.hpp"

namespace tensoracle::plan {

// A generated kernel's binary in the engine's "kernels" section.
struct KernelBinary {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::vector<std::string> entries;  // its entry points, in launch order
};

// The builder's choice for one layer of the optimized network.
struct StepRecord {
  std::string kernel;
  std::uint64_t workspace_bytes = 0;
  std::optional<KernelBinary> binary;
};

// Everything an engine file records (docs/engine-format.md).
struct EngineContents {
  nlohmann::json target;  // Backend::describe_target
  Precision precision = Precision::kFp32;
  nlohmann::json builder_config;       // BuilderConfig::to_json
  const Network* network = nullptr;    // the optimized network
  std::vector<ShapeProfile> profiles;  // per network input
  std::vector<Dims> opt_shapes;        // per tensor id, at the profiles' opt point
  std::vector<StepRecord> steps;       // per layer
  std::uint64_t arena_alignment = 0;
  std::uint64_t arena_bytes = 0;
  std::uint64_t scratch_bytes = 0;
  std::vector<std::int64_t> arena_offset;         // per tensor id; -1 for tensors outside the arena
  std::vector<std::uint64_t> arena_tensor_bytes;  // per tensor id
  std::vector<std::byte> kernels;                 // the "kernels" section (generated kernels' binaries)
  std::vector<LoadedPlugin> plugins;              // the plugins of the network's plugin layers
  double build_seconds = 0;
};

struct WrittenEngine {
  std::vector<std::byte> bytes;
  std::size_t weight_bytes = 0;  // of the "weights" section
};

// Serializes an engine: the manifest, the weights section (each weight at an aligned offset) and the kernels section.
WrittenEngine write_engine(const EngineContents& contents);

// Validates and reads engine bytes into what the backends load: every offset, size and count is checked before use
// (FormatError naming `display_name`; UnsupportedError for a newer format). The target state is not made here.
std::unique_ptr<backends::EngineState> read_engine(std::vector<std::byte> bytes, const std::string& display_name);

// Drops the host copy of the weights (the engine bytes, materialized constants) once a target holds them on its own
// memory: the network's weight views and constant_host become nullptr.
void release_host_weights(backends::EngineState& engine);

}  // namespace tensoracle::plan
