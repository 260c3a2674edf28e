// Weight digest records: weight-<sha256 of the absolute path>.json holding a weight file's identity and SHA-256.
#include "cache/weight_record.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/engine_file.hpp"
#include "cache/python_json.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle {
namespace cache_detail {
namespace {

// Records are a few hundred bytes; anything much larger is not one of ours.
constexpr std::uint64_t kMaxRecordBytes = std::uint64_t{1} << 20;

std::string normpath(const std::string& path) {
  if (path.empty()) return ".";
  std::size_t initial_slashes = 0;
  if (path[0] == '/')
    initial_slashes = (path.size() > 1 && path[1] == '/' && (path.size() == 2 || path[2] != '/')) ? 2 : 1;
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(start, end - start);
    start = end + 1;
    if (part.empty() || part == ".") continue;
    if (part != ".." || (initial_slashes == 0 && parts.empty()) || (!parts.empty() && parts.back() == "..")) {
      parts.push_back(std::move(part));
    } else if (!parts.empty()) {
      parts.pop_back();
    }
  }
  std::string out(initial_slashes, '/');
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i != 0) out += '/';
    out += parts[i];
  }
  return out.empty() ? "." : out;
}

bool is_lower_hex_digest(const std::string& text) {
  if (text.size() != 64) return false;
  for (const char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// JSON integers only (a float such as 1.0, or a bool, is not one).
bool get_unsigned(const nlohmann::json& value, std::uint64_t& out) {
  if (value.is_number_unsigned()) {
    out = value.get<std::uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(value.get<std::int64_t>());
    return true;
  }
  return false;
}

bool get_signed(const nlohmann::json& value, std::int64_t& out) {
  if (value.is_number_unsigned()) {
    const std::uint64_t v = value.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(INT64_MAX)) return false;
    out = static_cast<std::int64_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    out = value.get<std::int64_t>();
    return true;
  }
  return false;
}

nlohmann::json record_without_checksum(const WeightRecord& record) {
  nlohmann::json json;
  json["version"] = kWeightRecordVersion;
  json["path"] = record.identity.path;
  json["size"] = record.identity.size;
  json["mtime_ns"] = record.identity.mtime_ns;
  json["device"] = record.identity.device;
  json["inode"] = record.identity.inode;
  json["sha256"] = record.sha256;
  return json;
}

}  // namespace

std::string python_abspath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return normpath(path);
  std::vector<char> buffer(4096);
  while (::getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE)
      throw IoError(fmt::format("{}: cannot make the path absolute: {}", path, errno_message(errno)));
    buffer.resize(buffer.size() * 2);
  }
  std::string joined(buffer.data());
  if (!path.empty()) {
    if (joined.empty() || joined.back() != '/') joined += '/';
    joined += path;
  }
  return normpath(joined);
}

std::string weight_file_sha256(const std::filesystem::path& weight_file, const std::filesystem::path& cache_directory,
                               bool force_rehash, std::uint64_t progress_threshold) {
  WeightFileIdentity identity = weight_file_identity(weight_file);
  const std::filesystem::path record_file = weight_record_path(cache_directory, identity.path);
  if (!force_rehash) {
    const std::optional<WeightRecord> record = read_weight_record(record_file);
    if (record && record->identity == identity) return record->sha256;
  }
  // Hash, then check that the file did not change meanwhile; a file being rewritten is hashed again.
  std::string digest;
  for (int attempt = 0;; ++attempt) {
    int last_decile = -1;
    ProgressCallback progress;
    if (identity.size >= progress_threshold && log_enabled(LogSeverity::kInfo)) {
      progress = [&](std::uint64_t done, std::uint64_t total) {
        const int decile = total == 0 ? 10 : static_cast<int>(done * 10 / total);
        if (decile == last_decile) return;
        last_decile = decile;
        log(LogSeverity::kInfo, fmt::format("hashing weight file {}: {}% of {:.1f} MiB", identity.path, decile * 10,
                                            static_cast<double>(total) / (1024.0 * 1024.0)));
      };
      log(LogSeverity::kInfo, fmt::format("hashing weight file {} ({:.1f} MiB); its SHA-256 is recorded for next time",
                                          identity.path, static_cast<double>(identity.size) / (1024.0 * 1024.0)));
    }
    digest = sha256_file_hex(identity.path, progress);
    const WeightFileIdentity after = weight_file_identity(identity.path);
    if (after == identity) break;
    if (attempt == 2) {
      throw IoError(
          fmt::format("{}: the weight file kept changing while it was hashed; open the engine again once it "
                      "is completely written",
                      identity.path));
    }
    identity = after;
  }
  const std::string json = weight_record_json(WeightRecord{identity, digest});
  try {
    write_file_atomically(record_file, json.data(), json.size(), 0600);
  } catch (const Error& e) {
    log(LogSeverity::kWarning,
        fmt::format("cannot save the SHA-256 of weight file {} (it will be hashed again next time): {}", identity.path,
                    e.what()));
  }
  return digest;
}

}  // namespace cache_detail

WeightFileIdentity weight_file_identity(const std::filesystem::path& weight_file) {
  WeightFileIdentity identity;
  identity.path = cache_detail::python_abspath(weight_file.string());
  struct stat st {};
  if (::stat(identity.path.c_str(), &st) != 0)
    throw IoError(fmt::format("{}: cannot read the weight file: {}", identity.path, errno_message(errno)));
  if (!S_ISREG(st.st_mode)) throw IoError(fmt::format("{}: the weight file is not a regular file", identity.path));
  identity.size = static_cast<std::uint64_t>(st.st_size);
  identity.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  identity.device = static_cast<std::uint64_t>(st.st_dev);
  identity.inode = static_cast<std::uint64_t>(st.st_ino);
  return identity;
}

std::filesystem::path weight_record_path(const std::filesystem::path& cache_directory,
                                         const std::string& absolute_path) {
  return cache_directory / ("weight-" + sha256_hex(absolute_path.data(), absolute_path.size()) + ".json");
}

std::string weight_record_json(const WeightRecord& record) {
  nlohmann::json json = cache_detail::record_without_checksum(record);
  const std::string body = cache_json::dumps_canonical(json);
  json["checksum"] = sha256_hex(body.data(), body.size());
  return cache_json::dumps_canonical(json);
}

std::optional<WeightRecord> read_weight_record(const std::filesystem::path& record_file) {
  std::string text;
  {
    // O_NONBLOCK: a FIFO planted under a record's name must not hang the reader.
    const int fd = ::open(record_file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return std::nullopt;
    struct stat st {};
    bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              static_cast<std::uint64_t>(st.st_size) <= cache_detail::kMaxRecordBytes;
    if (ok) {
      text.resize(static_cast<std::size_t>(st.st_size));
      try {
        ok = cache_detail::read_at(fd, text.data(), text.size(), 0, record_file.string()) == text.size();
      } catch (const Error&) {
        ok = false;
      }
    }
    ::close(fd);
    if (!ok) return std::nullopt;
  }
  nlohmann::json json;
  try {
    json = cache_json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  static const char* const kKeys[] = {"checksum", "device", "inode", "mtime_ns", "path", "sha256", "size", "version"};
  if (!json.is_object() || json.size() != std::size(kKeys)) return std::nullopt;
  for (const char* key : kKeys) {
    if (!json.contains(key)) return std::nullopt;
  }
  const nlohmann::json& version = json["version"];
  if (!(version.is_number_integer() || version.is_number_unsigned()) ||
      version.get<std::int64_t>() != kWeightRecordVersion)
    return std::nullopt;
  WeightRecord record;
  if (!json["path"].is_string() || !json["sha256"].is_string() || !json["checksum"].is_string()) return std::nullopt;
  record.identity.path = json["path"].get<std::string>();
  record.sha256 = json["sha256"].get<std::string>();
  if (!cache_detail::is_lower_hex_digest(record.sha256)) return std::nullopt;
  if (!cache_detail::get_unsigned(json["size"], record.identity.size) ||
      !cache_detail::get_signed(json["mtime_ns"], record.identity.mtime_ns) ||
      !cache_detail::get_unsigned(json["device"], record.identity.device) ||
      !cache_detail::get_unsigned(json["inode"], record.identity.inode)) {
    return std::nullopt;
  }
  nlohmann::json body = json;
  body.erase("checksum");
  const std::string canonical = cache_json::dumps_canonical(body);
  if (json["checksum"].get<std::string>() != sha256_hex(canonical.data(), canonical.size())) return std::nullopt;
  return record;
}

std::string weight_file_sha256(const std::filesystem::path& weight_file, const std::filesystem::path& cache_directory,
                               bool force_rehash) {
  return cache_detail::weight_file_sha256(weight_file, cache_directory, force_rehash,
                                          cache_detail::kHashProgressThreshold);
}

}  // namespace tensoracle
