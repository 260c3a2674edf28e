// open_engine: cache conditions, file naming, reuse of saved engines, and building once under a lock when none fits.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <future>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backends/target.hpp"
#include "cache/engine_file.hpp"
#include "cache/python_json.hpp"
#include "core/posix_file.hpp"
#include "plan/plan_format.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/plugin_registry.hpp"
#include "tensoracle/sha256.hpp"
#include "tensoracle/system_info.hpp"
#include "tensoracle/version.hpp"

namespace tensoracle {
namespace {

// Raised when the layout of the conditions changes, so that older engines are rebuilt once.
constexpr int kConditionsVersion = 1;
constexpr std::size_t kMaxNameBytes = 64;

struct Uname {
  std::string system;
  std::string machine;
};

Uname uname_info() {
  utsname u{};
  if (::uname(&u) != 0) return {"unknown", "unknown"};
  return {u.sysname, u.machine};
}

nlohmann::json tensor_specs_json(const std::vector<TensorSpec>& specs) {
  nlohmann::json out = nlohmann::json::array();
  for (const TensorSpec& spec : specs) {
    out.push_back({{"name", spec.name}, {"dtype", std::string(to_string(spec.dtype))}, {"dims", spec.dims.values()}});
  }
  return out;
}

// The files whose contents enter the conditions for one weight path: the file itself, plus the
// shards an index JSON names (sorted, each once).
std::vector<std::filesystem::path> files_to_hash(const std::filesystem::path& weight_path) {
  std::vector<std::filesystem::path> out{weight_path};
  const std::string name = weight_path.filename().string();
  constexpr std::string_view kIndexSuffix = ".index.json";
  if (name.size() <= kIndexSuffix.size() ||
      name.compare(name.size() - kIndexSuffix.size(), kIndexSuffix.size(), kIndexSuffix) != 0) {
    return out;
  }
  const PosixFile file = PosixFile::open_read(weight_path);
  std::string text(static_cast<std::size_t>(file.size()), '\0');
  file.read_exact(text.data(), text.size(), 0);
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: invalid safetensors index JSON: {}", weight_path.string(), e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw FormatError(fmt::format("{}: the safetensors index has no \"weight_map\" object", weight_path.string()));
  std::set<std::string> shards;
  for (const auto& item : index["weight_map"].items()) {
    if (!item.value().is_string())
      throw FormatError(fmt::format("{}: weight_map entry '{}' is not a file name", weight_path.string(), item.key()));
    shards.insert(item.value().get<std::string>());
  }
  for (const std::string& shard : shards) out.push_back(weight_path.parent_path() / shard);
  return out;
}

std::string describe(const DataType dtype, const Dims& dims) {
  return fmt::format("{} [{}]", to_string(dtype), fmt::join(dims.values(), ", "));
}

void check_io(const Engine& engine, const EngineDeclaration& declaration, const std::string& path) {
  const auto check = [&](const char* kind, const std::vector<TensorSpec>& declared,
                         const std::vector<EngineTensor>& actual) {
    std::vector<std::string> problems;
    for (const TensorSpec& spec : declared) {
      const auto found =
          std::find_if(actual.begin(), actual.end(), [&](const EngineTensor& t) { return t.name == spec.name; });
      if (found == actual.end()) {
        problems.push_back(fmt::format("{} '{}' is declared but the engine has none", kind, spec.name));
      } else if (found->dtype != spec.dtype || found->dims != spec.dims) {
        problems.push_back(fmt::format("{} '{}' is {} in the engine but {} in the declaration", kind, spec.name,
                                       describe(found->dtype, found->dims), describe(spec.dtype, spec.dims)));
      }
    }
    for (const EngineTensor& tensor : actual) {
      const bool declared_too = std::any_of(declared.begin(), declared.end(),
                                            [&](const TensorSpec& spec) { return spec.name == tensor.name; });
      if (!declared_too) problems.push_back(fmt::format("the engine has an undeclared {} '{}'", kind, tensor.name));
    }
    if (!problems.empty()) {
      throw EngineIOError(fmt::format(
          "the engine's input or output signature differs from the declaration: {}: {}. Make the declaration and the "
          "graph function agree, raise graph_version, and open it again.",
          path, fmt::join(problems, "; ")));
    }
  };
  check("input", declaration.inputs, engine.inputs());
  check("output", declaration.outputs, engine.outputs());
}

std::shared_ptr<const Engine> deserialize_checked(std::vector<std::byte> plan, const std::string& path) {
  try {
    return Engine::deserialize(std::move(plan), path);
  } catch (const FormatError& e) {
    throw CorruptEngineError(
        fmt::format("the engine plan cannot be deserialized: {}: {}. Check that plugin_libraries lists every library "
                    "the engine needs; otherwise delete the file or open it with force_rebuild.",
                    path, e.what()));
  } catch (const UnsupportedError& e) {
    throw CorruptEngineError(
        fmt::format("the engine plan cannot be deserialized: {}: {}. Check that plugin_libraries lists every library "
                    "the engine needs; otherwise delete the file or open it with force_rebuild.",
                    path, e.what()));
  }
}

// An open file descriptor, closed (and so unlocked) when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Removes temporary files of earlier writes of `path` whose writers died (only the lock holder writes them).
void remove_stale_temporaries(const std::filesystem::path& path) {
  const std::string prefix = "." + path.filename().string() + ".tmp-";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path(), error)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) == 0) {
      std::error_code ignored;
      std::filesystem::remove(entry.path(), ignored);
      log(LogSeverity::kInfo, fmt::format("engine cache: removed {} left by an interrupted build", name));
    }
  }
}

// Backend::start_device for the configured target; none where it has no such device (the load or build says so).
std::future<void> start_device(const Target& target) {
  const backends::Backend& backend = backends::backend_for(target.kind);
  try {
    return backend.start_device(backend.describe_target(target));
  } catch (const Error&) {
    return {};
  }
}

EngineHandle reuse(int fd, std::uint64_t size, const std::filesystem::path& path, const nlohmann::json& expected,
                   const std::string& conditions_json, const EngineDeclaration& declaration, bool holding_lock) {
  EngineFileContents contents = cache_detail::read_engine_fd(fd, size, path.string(), expected);
  EngineHandle handle;
  handle.engine = deserialize_checked(std::move(contents.plan), path.string());
  check_io(*handle.engine, declaration, path.string());
  // Record the successful read in the file's modification time. Through the descriptor: a file
  // that was removed meanwhile is not recreated. Failures (a read-only cache) don't matter.
  (void)::futimens(fd, nullptr);
  // A rebuild killed while writing (force_rebuild) leaves a temporary file beside a complete engine;
  // remove it when nobody holds the build lock, that is when no build of this file is running.
  // (The lock only counts while the name still refers to the locked file.)
  if (holding_lock) {
    remove_stale_temporaries(path);
  } else if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    struct stat locked {};
    struct stat named {};
    if (::fstat(fd, &locked) == 0 && ::lstat(path.c_str(), &named) == 0 && locked.st_ino == named.st_ino &&
        locked.st_dev == named.st_dev) {
      remove_stale_temporaries(path);
    }
    ::flock(fd, LOCK_UN);
  }
  handle.path = path;
  handle.conditions_json = conditions_json;
  log(LogSeverity::kInfo, fmt::format("engine cache: reusing {}", path.string()));
  return handle;
}

EngineHandle build_and_save(const std::filesystem::path& path, const std::string& conditions_json,
                            const EngineDeclaration& declaration,
                            const std::vector<std::filesystem::path>& weight_files, const GraphFunction& graph) {
  log(LogSeverity::kInfo, fmt::format("engine cache: building {}", path.string()));
  remove_stale_temporaries(path);
  std::vector<std::byte> bytes;
  {
    const WeightStore weights = WeightStore::open(weight_files);
    const Network network = graph(weights);
    bytes = Builder(declaration.builder).build(network);
  }
  EngineHandle handle;
  handle.engine = Engine::deserialize(bytes.data(), bytes.size(), path.string());
  // A graph that does not match its declaration is reported before anything is saved.
  check_io(*handle.engine, declaration, path.string());
  write_engine_file(path, conditions_json, bytes.data(), bytes.size());
  handle.path = path;
  handle.built = true;
  handle.conditions_json = conditions_json;
  return handle;
}

}  // namespace

std::string engine_file_name(const std::string& engine_name, const std::string& conditions_json) {
  std::string name;
  for (const char c : engine_name.substr(0, kMaxNameBytes)) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    name += keep ? c : '_';
  }
  if (name.empty()) name = "engine";
  if (name.front() == '.') name.front() = '_';  // never a hidden file
  const std::string canonical = canonical_json(conditions_json);
  return name + "-" + sha256_hex(canonical.data(), canonical.size()) + ".engine";
}

std::string engine_conditions_json(const EngineDeclaration& declaration,
                                   const std::vector<std::filesystem::path>& weight_files,
                                   const std::filesystem::path& cache_directory, bool rehash_weights) {
  const Uname host = uname_info();
  nlohmann::json conditions;
  conditions["conditions_version"] = kConditionsVersion;
  conditions["name"] = declaration.name;
  conditions["graph_version"] = declaration.graph_version;
  nlohmann::json weights = nlohmann::json::array();
  for (const auto& path : weight_files) {
    for (const auto& file : files_to_hash(path))
      weights.push_back(weight_file_sha256(file, cache_directory, rehash_weights));
  }
  conditions["weights"] = std::move(weights);
  conditions["declaration"] = {{"inputs", tensor_specs_json(declaration.inputs)},
                               {"outputs", tensor_specs_json(declaration.outputs)}};
  nlohmann::json builder = nlohmann::json::parse(declaration.builder.to_json());
  // The device index is not an identity: the target's properties below are.
  builder["target"] = declaration.builder.target.kind == TargetKind::kCpu ? "cpu" : "cuda";
  conditions["builder"] = std::move(builder);
  nlohmann::json plugins = nlohmann::json::array();
  for (const auto& library : declaration.plugin_libraries)
    plugins.push_back(weight_file_sha256(library, cache_directory, rehash_weights));
  conditions["plugins"] = std::move(plugins);
  conditions["target"] =
      backends::backend_for(declaration.builder.target.kind).cache_conditions(declaration.builder.target);
  conditions["os"] = host.system;
  conditions["cpu_architecture"] = host.machine;
  conditions["library_version"] = TENSORACLE_VERSION_STRING;
  conditions["engine_format_version"] = plan::kPlanFormatVersion;
  return cache_json::dumps_canonical(conditions);
}

EngineHandle open_engine(const EngineDeclaration& declaration, const std::vector<std::filesystem::path>& weight_files,
                         const GraphFunction& graph, const OpenEngineOptions& options) {
  if (!graph) throw InvalidArgumentError(fmt::format("open_engine '{}': no graph function", declaration.name));
  // Before the conditions: their digests are of these files, and a saved engine's plugins must be loaded to read it.
  for (const auto& library : declaration.plugin_libraries) load_plugin_library(library);
  const std::filesystem::path directory =
      options.cache_dir.empty() ? default_cache_directory() : std::filesystem::path(options.cache_dir);
  ensure_cache_directory(directory);
  const std::string conditions_json =
      engine_conditions_json(declaration, weight_files, directory, options.force_rebuild);
  const nlohmann::json expected = cache_json::parse(conditions_json);
  const std::filesystem::path path = directory / engine_file_name(declaration.name, conditions_json);
  // The GPU starts while the saved engine is read and checked (or the network built); joined when this returns.
  const std::future<void> device_start = start_device(declaration.builder.target);

  for (;;) {
    struct stat st {};
    if (!options.force_rebuild) {
      // A non-empty .engine file is always complete: every write renames a finished file into place.
      Fd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
      if (file.get() >= 0) {
        if (::fstat(file.get(), &st) != 0)
          throw IoError(fmt::format("{}: cannot stat: {}", path.string(), errno_message(errno)));
        if (!S_ISREG(st.st_mode))
          throw IoError(fmt::format("{}: the saved engine is not a regular file", path.string()));
        if (st.st_size > 0)
          return reuse(file.get(), static_cast<std::uint64_t>(st.st_size), path, expected, conditions_json, declaration,
                       /*holding_lock=*/false);
      } else if (errno != ENOENT) {
        throw IoError(fmt::format("{}: cannot open the saved engine: {}", path.string(), errno_message(errno)));
      }
    }

    // No complete engine: take the build lock, an flock on the (empty) .engine file itself, which
    // the reference also creates to mark a build in progress.
    Fd marker(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600));
    if (marker.get() < 0) {
      throw IoError(
          fmt::format("{}: cannot create the engine file to build '{}' into: {}. Make the cache directory "
                      "writable or choose another one with cache_dir",
                      path.string(), declaration.name, errno_message(errno)));
    }
    if (::flock(marker.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) throw IoError(fmt::format("{}: cannot lock: {}", path.string(), errno_message(errno)));
      log(LogSeverity::kInfo, fmt::format("engine cache: waiting for another build of {}", path.string()));
      while (::flock(marker.get(), LOCK_EX) != 0) {
        if (errno != EINTR) throw IoError(fmt::format("{}: cannot lock: {}", path.string(), errno_message(errno)));
      }
    }
    // The lock is only ours if the name still refers to the file we locked; a finished build
    // renamed another file over it (reuse that), or a failed one removed it (start over).
    struct stat locked {};
    struct stat named {};
    if (::fstat(marker.get(), &locked) != 0)
      throw IoError(fmt::format("{}: cannot stat: {}", path.string(), errno_message(errno)));
    if (::lstat(path.c_str(), &named) != 0 || named.st_ino != locked.st_ino || named.st_dev != locked.st_dev) continue;
    if (locked.st_size > 0 && !options.force_rebuild) {
      return reuse(marker.get(), static_cast<std::uint64_t>(locked.st_size), path, expected, conditions_json,
                   declaration, /*holding_lock=*/true);
    }
    // Ours to build: an empty file is a build that never finished (its builder no longer holds the lock).
    try {
      return build_and_save(path, conditions_json, declaration, weight_files, graph);
    } catch (...) {
      // Leave no empty marker behind for a build that failed; a saved engine (force_rebuild) stays.
      struct stat now {};
      if (::lstat(path.c_str(), &now) == 0 && now.st_ino == locked.st_ino && now.st_dev == locked.st_dev &&
          now.st_size == 0) {
        ::unlink(path.c_str());
      }
      throw;
    }
  }
}

}  // namespace tensoracle
