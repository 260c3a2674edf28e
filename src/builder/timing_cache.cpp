// TimingCache: problem keys, lookups, and the JSON file (format "tensoracle-timing-cache", version 2) read with
// validation and written atomically.
#include "builder/timing_cache.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <variant>

#include "core/posix_file.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/version.hpp"

namespace tensoracle::builder {

namespace {

constexpr const char* kFormat = "tensoracle-timing-cache";
// Version 2: kernels timed as captured graphs replay them (version 1's choices came from plain launches, which weigh
// the host's launch cost: its files are timed again).
constexpr int kVersion = 2;
constexpr std::uint64_t kMaxFileBytes = std::uint64_t{64} << 20;  // far above any real cache; refuses absurd files

// An attribute value written exactly (doubles as hexadecimal floats), so that keys differ when values do.
std::string attr_text(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::int64_t>) {
          return fmt::format("i{}", v);
        } else if constexpr (std::is_same_v<T, double>) {
          return fmt::format("f{:a}", v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return fmt::format("s{}:{}", v.size(), v);
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) {
          return fmt::format("I[{}]", fmt::join(v, ","));
        } else {
          std::string out = "F[";
          for (std::size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{:a}", i ? "," : "", v[i]);
          return out + "]";
        }
      },
      value);
}

}  // namespace

TimingCache::TimingCache(nlohmann::json target) : target_(std::move(target)) {}

nlohmann::json TimingCache::identity() const {
  return nlohmann::json{{"target", target_}, {"tensoracle_version", TENSORACLE_VERSION_STRING}};
}

std::string TimingCache::problem_key(const graph::Graph& graph, const graph::Layer& layer,
                                     const std::vector<Dims>& shapes, const std::vector<std::string>& candidates,
                                     Precision precision) {
  std::string key = fmt::format("{}|{}|", layer.op, to_string(precision));
  for (const auto& [name, value] : layer.attrs) key += fmt::format("{}={};", name, attr_text(value));
  auto tensors = [&](const std::vector<std::int32_t>& ids) {
    key += "|";
    for (auto id : ids) {
      if (id < 0) {
        key += "-;";
        continue;
      }
      key +=
          fmt::format("{}{};", to_string(graph.tensor(id).dtype), shapes.at(static_cast<std::size_t>(id)).to_string());
    }
  };
  tensors(layer.inputs);
  tensors(layer.outputs);
  key += fmt::format("|{}", fmt::join(candidates, ","));
  return key;
}

std::optional<TimingCache::Choice> TimingCache::find(const std::string& key) const {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void TimingCache::insert(const std::string& key, const std::string& kernel) { entries_[key] = Choice{kernel, false}; }

std::optional<std::map<std::string, std::string>> TimingCache::read_entries(const std::filesystem::path& path,
                                                                            std::string* why) const {
  std::string text;
  try {
    const PosixFile file = PosixFile::open_read(path);
    const std::uint64_t size = file.size();
    if (size > kMaxFileBytes) {
      *why = fmt::format("it holds {} bytes, more than a timing cache can ({})", size, kMaxFileBytes);
      return std::nullopt;
    }
    text.resize(static_cast<std::size_t>(size));
    file.read_exact(text.data(), text.size(), 0);
  } catch (const IoError& e) {
    *why = e.what();
    return std::nullopt;
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    *why = "it is not JSON";
    return std::nullopt;
  }
  if (j.value("format", "") != kFormat) {
    *why = fmt::format("it is not a timing cache (no \"format\": \"{}\")", kFormat);
    return std::nullopt;
  }
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() != kVersion) {
    *why = fmt::format("its version is not {}", kVersion);
    return std::nullopt;
  }
  const nlohmann::json want = identity();
  if (!j.contains("identity") || j["identity"] != want) {
    *why = fmt::format("it was written for {}, this build is for {}",
                       j.contains("identity") ? j["identity"].dump() : "?", want.dump());
    return std::nullopt;
  }
  if (!j.contains("entries") || !j["entries"].is_object()) {
    *why = "it has no \"entries\" object";
    return std::nullopt;
  }
  std::map<std::string, std::string> entries;
  for (const auto& [key, value] : j["entries"].items()) {
    if (!value.is_object() || !value.contains("kernel") || !value["kernel"].is_string()) {
      *why = fmt::format("entry '{}' has no \"kernel\" string", key);
      return std::nullopt;
    }
    entries.emplace(key, value["kernel"].get<std::string>());
  }
  return entries;
}

void TimingCache::load(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  std::string why;
  const auto entries = read_entries(path, &why);
  if (!entries) {
    log(LogSeverity::kWarning,
        fmt::format("timing cache {}: not used, because {}; kernels are timed again and the file is rewritten",
                    path.string(), why));
    return;
  }
  for (const auto& [key, kernel] : *entries) entries_.emplace(key, Choice{kernel, true});
}

void TimingCache::save(const std::filesystem::path& path) const {
  std::map<std::string, std::string> merged;
  for (const auto& [key, choice] : entries_) merged.emplace(key, choice.kernel);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::string why;
    if (const auto on_disk = read_entries(path, &why)) {
      for (const auto& [key, kernel] : *on_disk) merged.emplace(key, kernel);  // this build's choices win
    }
  }
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["identity"] = identity();
  nlohmann::json entries = nlohmann::json::object();
  for (const auto& [key, kernel] : merged) entries[key] = nlohmann::json{{"kernel", kernel}};
  j["entries"] = std::move(entries);
  const std::string text = j.dump(1) + "\n";
  write_file_atomically(path, text.data(), text.size());
}

}  // namespace tensoracle::builder
