// Builder and BuilderConfig: turn a Network into serialized engine bytes for one target, precision and set of shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensoracle/dims.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle {

// Where an engine runs. The CUDA target names a device of this machine by index; the engine is
// built for (and records) that device's model and properties.
enum class TargetKind : std::uint8_t { kCpu, kCuda };

struct Target {
  TargetKind kind = TargetKind::kCpu;
  int device = 0;  // CUDA device index, for kCuda

  static Target cpu() { return Target{}; }
  static Target cuda(int device_index = 0) { return Target{TargetKind::kCuda, device_index}; }
  // "cpu" or "cuda:N".
  std::string to_string() const;
  // Parses "cpu", "cuda", "cuda:N" or "auto" (the first CUDA device when one is usable, else the CPU).
  // Throws InvalidArgumentError for anything else.
  static Target parse(const std::string& text);
};

// The precision an engine computes in.
//   kFp32: the graph's own tensor types; f32 matrix products and convolutions use full f32 math
//          (TF32 off). f16/bf16 tensors of the graph stay f16/bf16.
//   kTf32: as kFp32, but f32 matrix products and convolutions may use TF32 tensor cores.
//   kFp16 / kBf16: f32 tensors of the graph are lowered to f16 / bf16 (weights converted at build
//          time); products accumulate in f32, softmax and normalization statistics are computed in
//          f32, and inputs and outputs keep their declared types (casts are inserted).
#define TENSORACLE_PRECISIONS(X) \
  X(kFp32, "fp32")               \
  X(kTf32, "tf32")               \
  X(kFp16, "fp16")               \
  X(kBf16, "bf16")

enum class Precision : std::uint8_t {
#define TENSORACLE_PRECISION_ENUM(name, text) name,
  TENSORACLE_PRECISIONS(TENSORACLE_PRECISION_ENUM)
#undef TENSORACLE_PRECISION_ENUM
};

const char* to_string(Precision precision) noexcept;
// Throws InvalidArgumentError listing the valid names.
Precision parse_precision(const std::string& text);

// The range of shapes an input accepts. min == opt == max means the input is fixed.
struct ShapeProfile {
  Dims min;
  Dims opt;
  Dims max;
};

// Everything a build depends on besides the network and its weights.
// Where a build is, for BuilderConfig::progress: `stage` is "kernels" (choosing each layer's kernel, timing the
// candidates on a GPU) or "compile" (generating kernels and compiling them with NVRTC); `done` of `total` layers,
// the last one being `item`.
struct BuildProgress {
  std::string stage;
  std::size_t done = 0;
  std::size_t total = 0;
  std::string item;
};

struct BuilderConfig {
  Target target;
  Precision precision = Precision::kFp32;
  // One profile per input with dynamic (-1) dims, by input name. Inputs without -1 dims need none
  // (a profile for them must equal their dims).
  std::map<std::string, ShapeProfile> profiles;
  // Upper bound on the per-context scratch (workspace) memory a kernel may use, in bytes.
  std::size_t max_scratch_bytes = std::size_t{256} << 20;
  // When several kernels can run a step, time each on the target and keep the fastest; when false,
  // take the first that fits (deterministic builds, faster to build).
  bool time_kernels = true;
  // A timing cache file (empty: none; `tensoracle build --timing-cache FILE`). The kernels that problems it knows
  // chose are taken from it instead of timing them again, and the build adds its own choices (the file is written
  // atomically after the kernels are chosen). Shareable between builds and machines with the same GPU model, library
  // versions and tensoracle version; a file that is damaged or was written for other ones is ignored with a warning
  // and rewritten (docs/building.md). Not a build condition: it is not part of to_json(). Within one build, identical
  // problems (a model's repeated layers) are timed once either way.
  std::filesystem::path timing_cache;
  // Plugin libraries to load (load_plugin_library, plugin_registry.hpp) before the network's plugin layers are
  // resolved; libraries loaded earlier in the process count too. Not a build condition: it is not part of to_json()
  // (open_engine's conditions hold the libraries' SHA-256s, and every engine records each plugin's library digest).
  std::vector<std::filesystem::path> plugin_libraries;
  // Called on the building thread as the build advances (e.g. to draw a progress bar); may be empty. Not a build
  // condition: it is not part of to_json().
  std::function<void(const BuildProgress&)> progress;

  void add_profile(const std::string& input, const Dims& min, const Dims& opt, const Dims& max) {
    profiles[input] = ShapeProfile{min, opt, max};
  }
  // Canonical JSON of every setting (sorted keys), for cache identities.
  std::string to_json() const;
};

// Builds engines. A Builder holds only its configuration: build() may be called from several
// threads at once on different networks.
class Builder {
 public:
  explicit Builder(BuilderConfig config);

  // Verifies the network, checks the profiles, optimizes the graph, chooses a kernel for each step
  // (timing candidates on the target), plans memory, packs weights and returns the serialized
  // engine (docs/engine-format.md). Progress is reported through the logging callback.
  // Throws GraphError for an invalid network, InvalidArgumentError for profiles that do not fit
  // the inputs, UnsupportedError when the target has no kernel for a layer (naming it), and
  // CudaError when the target device can't be used.
  std::vector<std::byte> build(const Network& network) const;

  const BuilderConfig& config() const noexcept { return config_; }

 private:
  BuilderConfig config_;
};

}  // namespace tensoracle
