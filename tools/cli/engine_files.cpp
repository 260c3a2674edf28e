// Reading engine files for the command: plain engines and cache entries (the engine after the cache header).
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/host_tensor.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/plugin_registry.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle::cli {

// A cache entry's engine: after the header, checked against the header's plan_sha256 (conditions are
// not compared: the command is not opening it for a declaration).
std::vector<std::byte> read_cache_entry_plan(const std::string& path) {
  const EngineHeader header = read_engine_header(path);
  PosixFile file = PosixFile::open_read(path);
  std::vector<std::byte> plan(static_cast<std::size_t>(header.plan_size()));
  if (!plan.empty()) file.read_exact(plan.data(), plan.size(), header.plan_offset);
  if (!header.plan_sha256 || sha256_hex(plan.data(), plan.size()) != *header.plan_sha256) {
    throw CorruptEngineError(
        fmt::format("{}: corrupt engine file: checksum differs from the header's plan_sha256", path));
  }
  return plan;
}

// Whether the file is an engine cache entry (a header of build conditions before the plan).
bool is_cache_entry(const std::string& path) {
  PosixFile file = PosixFile::open_read(path);
  char head[kEngineFileMagicSize] = {};
  if (file.size() >= kEngineFileMagicSize) file.read_exact(head, sizeof head, 0);
  return std::memcmp(head, kEngineFileMagic, kEngineFileMagicSize) == 0;
}

std::vector<std::byte> read_engine_bytes(const std::string& path) {
  if (is_cache_entry(path)) return read_cache_entry_plan(path);
  PosixFile file = PosixFile::open_read(path);
  std::vector<std::byte> bytes(static_cast<std::size_t>(file.size()));
  if (!bytes.empty()) file.read_exact(bytes.data(), bytes.size(), 0);
  return bytes;
}

std::map<std::string, HostTensor> read_network_inputs(const Network& network, const std::string& path) {
  std::map<std::string, HostTensor> inputs;
  std::vector<Tensor> declared = network.inputs();
  if (declared.empty() && path.empty()) return inputs;
  if (path.empty()) throw InvalidArgumentError("the network has inputs; give them with --inputs FILE.safetensors");
  auto file = SafetensorsFile::open(path);
  for (Tensor t : declared) {
    const std::string name = network.name(t);
    const TensorInfo* info = file->find(name);
    if (info == nullptr) {
      throw InvalidArgumentError(fmt::format("{}: input '{}' ({} {}) is missing", path, name,
                                             to_string(network.dtype(t)), network.shape(t).to_string()));
    }
    if (info->dtype != network.dtype(t)) {
      throw InvalidArgumentError(fmt::format("{}: input '{}' is {}, the network expects {}", path, name,
                                             safetensors_name(info->dtype), to_string(network.dtype(t))));
    }
    inputs.emplace(name, HostTensor::from_view(file->view(*info)));
  }
  for (const TensorInfo& info : file->tensors()) {
    Tensor t = network.find(info.name);
    bool is_input = false;
    for (Tensor d : declared) is_input = is_input || d == t;
    if (!is_input) throw InvalidArgumentError(fmt::format("{}: '{}' is not an input of the network", path, info.name));
  }
  return inputs;
}

std::string read_engine_manifest(const std::string& path) { return Engine::inspect(read_engine_bytes(path), path); }

std::shared_ptr<const Engine> load_engine(const std::string& path) {
  // A plain engine file: Engine::load starts the GPU while it reads the weights.
  std::shared_ptr<const Engine> engine =
      is_cache_entry(path) ? Engine::deserialize(read_cache_entry_plan(path), path) : Engine::load(path);
  if (engine->target().kind == TargetKind::kCuda) note_gpu_started();
  return engine;
}

void add_plugin_option(CLI::App* cmd, std::vector<std::string>& libraries) {
  cmd->add_option("--plugin", libraries,
                  "plugin library to load first (a shared library exporting tensoracle_get_plugin_creators; "
                  "docs/plugins.md); repeat for several. Engines with plugin layers need their libraries loaded");
}

void load_plugins(const std::vector<std::string>& libraries) {
  for (const auto& library : libraries) load_plugin_library(library);
}

bool looks_like_engine(const std::string& path) {
  PosixFile file = PosixFile::open_read(path);
  char head[11] = {};
  const std::size_t n = file.size() < sizeof head ? static_cast<std::size_t>(file.size()) : sizeof head;
  if (n != 0) file.read_exact(head, n, 0);
  return (n >= 8 && std::memcmp(head, "TSRPLAN", 8) == 0) || (n >= 11 && std::memcmp(head, "TENSORACLE\x01", 11) == 0);
}

}  // namespace tensoracle::cli
