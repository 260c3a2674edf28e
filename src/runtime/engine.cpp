// Engine: reads engine bytes (plan/engine_manifest) and hands them to the target's backend to load.
#include <fmt/format.h>

#include "backends/target.hpp"
#include "core/bytes.hpp"
#include "core/posix_file.hpp"
#include "core/stopwatch.hpp"
#include "plan/engine_manifest.hpp"
#include "plan/plan_format.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/logging.hpp"

namespace tensoracle {

Engine::Engine(std::unique_ptr<backends::EngineState> state) : state_(std::move(state)) {}
Engine::~Engine() = default;

std::shared_ptr<const Engine> Engine::deserialize(std::vector<std::byte> bytes, const std::string& display_name) {
  Stopwatch watch;
  std::unique_ptr<backends::EngineState> s = plan::read_engine(std::move(bytes), display_name);
  const double read_ms = watch.lap_ms();
  s->target_engine = backends::backend_for(s->target.kind).load(*s);
  const double load_ms = watch.lap_ms();
  if (!s->target_engine->keeps_host_weights()) plan::release_host_weights(*s);
  if (log_enabled(LogSeverity::kVerbose)) {
    log(LogSeverity::kVerbose, fmt::format("{}: deserialized: plan checked in {:.1f} ms, loaded on {} in {:.1f} ms, "
                                           "host copy released in {:.1f} ms",
                                           display_name, read_ms, s->target.to_string(), load_ms, watch.lap_ms()));
  }
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

namespace {

// Reads the header and the manifest first and starts the target's device from it (Backend::start_device), then
// allocates and reads the whole file: the GPU starts while the weights are read (and their buffer's pages are first
// touched). `device_start` is ready once that start has ended.
std::vector<std::byte> read_starting_device(const PosixFile& file, std::future<void>& device_start) {
  const std::uint64_t size = file.size();
  if (size >= plan::kPlanHeaderSize) {
    std::vector<std::byte> head(plan::kPlanHeaderSize);
    file.read_exact(head.data(), head.size(), 0);
    const std::uint64_t end = plan::manifest_end(head);
    if (end != 0 && end <= size) {
      head.resize(static_cast<std::size_t>(end));
      file.read_exact(head.data() + plan::kPlanHeaderSize, head.size() - plan::kPlanHeaderSize, plan::kPlanHeaderSize);
      const std::optional<nlohmann::json> target = plan::peek_target(head);
      const std::string kind = target ? target->value("kind", std::string()) : std::string();
      if (kind == "cuda") device_start = backends::backend_for(TargetKind::kCuda).start_device(*target);
    }
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  if (size != 0) file.read_exact(bytes.data(), bytes.size(), 0);
  return bytes;
}

}  // namespace

std::shared_ptr<const Engine> Engine::load(const std::filesystem::path& path) {
  Stopwatch watch;
  PosixFile file = PosixFile::open_read(path);
  std::future<void> device_start;  // joined when this returns (after deserialize, which needed the device anyway)
  std::vector<std::byte> bytes = read_starting_device(file, device_start);
  if (log_enabled(LogSeverity::kVerbose)) {
    log(LogSeverity::kVerbose, fmt::format("{}: {:.1f} MiB read in {:.1f} ms", path.string(),
                                           static_cast<double>(bytes.size()) / (1 << 20), watch.lap_ms()));
  }
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
