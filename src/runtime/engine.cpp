// Engine: reads engine bytes (plan/engine_manifest) and hands them to the target's backend to load.
#include <fmt/format.h>

#include "backends/target.hpp"
#include "core/bytes.hpp"
#include "core/posix_file.hpp"
#include "plan/engine_manifest.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {

Engine::Engine(std::unique_ptr<backends::EngineState> state) : state_(std::move(state)) {}
Engine::~Engine() = default;

std::shared_ptr<const Engine> Engine::deserialize(std::vector<std::byte> bytes, const std::string& display_name) {
  std::unique_ptr<backends::EngineState> s = plan::read_engine(std::move(bytes), display_name);
  s->target_engine = backends::backend_for(s->target.kind).load(*s);
  if (!s->target_engine->keeps_host_weights()) plan::release_host_weights(*s);
  return std::shared_ptr<const Engine>(new Engine(std::move(s)));
}

std::string Engine::inspect(const std::vector<std::byte>& bytes, const std::string& display_name) {
  return plan::read_engine(bytes, display_name)->manifest.dump(2) + "\n";
}

std::shared_ptr<const Engine> Engine::deserialize(const void* data, std::size_t size, const std::string& display_name) {
  if (data == nullptr && size != 0) throw InvalidArgumentError("Engine::deserialize: null data");
  std::vector<std::byte> bytes(size);
  copy_bytes(bytes.data(), data, size);
  return deserialize(std::move(bytes), display_name);
}

std::shared_ptr<const Engine> Engine::load(const std::filesystem::path& path) {
  PosixFile file = PosixFile::open_read(path);
  const std::uint64_t size = file.size();
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  if (size != 0) file.read_exact(bytes.data(), bytes.size(), 0);
  return deserialize(std::move(bytes), path.string());
}

const std::vector<EngineTensor>& Engine::inputs() const noexcept { return state_->inputs; }
const std::vector<EngineTensor>& Engine::outputs() const noexcept { return state_->outputs; }
Target Engine::target() const noexcept { return state_->target; }
Precision Engine::precision() const noexcept { return state_->precision; }
std::string Engine::manifest_json() const { return state_->manifest.dump(2) + "\n"; }
std::size_t Engine::weight_bytes() const noexcept { return state_->target_engine->weight_bytes(); }
std::size_t Engine::context_memory_bytes() const noexcept {
  return static_cast<std::size_t>(state_->arena_size + state_->scratch_size);
}

std::unique_ptr<ExecutionContext> Engine::create_execution_context() const {
  return std::unique_ptr<ExecutionContext>(new ExecutionContext(shared_from_this()));
}

}  // namespace tensoracle
