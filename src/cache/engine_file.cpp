// The engine file container: magic, big-endian header length, canonical JSON header, plan; checked reads and atomic
// writes.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/engine_file.hpp"
#include "cache/python_json.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle {
namespace cache_detail {

namespace {

constexpr std::uint64_t kPrefixSize = kEngineFileMagicSize + 8;
constexpr const char* kAdvice = "Delete the file, or open the engine with force_rebuild to build it again.";

}  // namespace

std::string header_problem_message(const HeaderProblem& problem, const std::string& path) {
  return fmt::format("{}: {}: {}. {}", problem.incomplete ? "incomplete engine file" : "invalid engine header", path,
                     problem.detail, kAdvice);
}

std::string first_differing_key(const nlohmann::json& a, const nlohmann::json& b) {
  if (!a.is_object() || !b.is_object()) return "";
  std::set<std::string> keys;
  for (const auto& item : a.items()) keys.insert(item.key());
  for (const auto& item : b.items()) keys.insert(item.key());
  for (const std::string& key : keys) {
    const bool in_a = a.contains(key);
    const bool in_b = b.contains(key);
    if (in_a != in_b || (in_a && a.at(key) != b.at(key))) return key;
  }
  return "";
}

std::size_t read_at(int fd, void* destination, std::size_t size, std::uint64_t offset, const std::string& path) {
  auto* out = static_cast<unsigned char*>(destination);
  std::size_t done = 0;
  while (done < size) {
    const std::size_t chunk = std::min<std::size_t>(size - done, std::size_t{1} << 30);
    const ssize_t got = ::pread(fd, out + done, chunk, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("{}: read failed at offset {}: {}", path, offset + done, errno_message(errno)));
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return done;
}

namespace {

void read_exactly(int fd, void* destination, std::size_t size, std::uint64_t offset, const std::string& path) {
  if (read_at(fd, destination, size, offset, path) != size) {
    throw IoError(
        fmt::format("{}: the file ended before offset {}; it was truncated while being read", path, offset + size));
  }
}

}  // namespace

ParsedHeader read_header(int fd, std::uint64_t file_size, const std::string& path) {
  // The same checks, in the same order, as the reference's reader.
  std::array<unsigned char, kPrefixSize> prefix{};
  if (file_size < kPrefixSize) {
    const std::size_t got = read_at(fd, prefix.data(), static_cast<std::size_t>(file_size), 0, path);
    const bool magic_prefix_ok = std::memcmp(prefix.data(), kEngineFileMagic, std::min(got, kEngineFileMagicSize)) == 0;
    throw HeaderProblem{true, magic_prefix_ok ? fmt::format("the file has {} bytes, fewer than the {} bytes of magic "
                                                            "and header length (a build may have been interrupted)",
                                                            file_size, kPrefixSize)
                                              : "the file does not start with the tensoracle engine magic"};
  }
  read_exactly(fd, prefix.data(), prefix.size(), 0, path);
  if (std::memcmp(prefix.data(), kEngineFileMagic, kEngineFileMagicSize) != 0)
    throw HeaderProblem{true, "the file does not start with the tensoracle engine magic"};
  std::uint64_t header_size = 0;
  for (std::size_t i = 0; i < 8; ++i) header_size = (header_size << 8) | prefix[kEngineFileMagicSize + i];
  if (header_size == 0) throw HeaderProblem{false, "the header length is 0"};
  if (header_size >= file_size - kPrefixSize) {
    throw HeaderProblem{
        false, fmt::format("the header length {} leaves no plan in a file of {} bytes", header_size, file_size)};
  }
  if (header_size > kMaxEngineHeaderBytes) {
    throw HeaderProblem{false, fmt::format("the header length {} is more than the {} bytes this version reads",
                                           header_size, kMaxEngineHeaderBytes)};
  }
  std::string text(static_cast<std::size_t>(header_size), '\0');
  read_exactly(fd, text.data(), text.size(), kPrefixSize, path);

  ParsedHeader parsed;
  nlohmann::ordered_json header;
  try {
    header = cache_json::parse_ordered(text);
  } catch (const nlohmann::json::exception& e) {
    throw HeaderProblem{false, fmt::format("the header is not valid UTF-8 JSON ({})", e.what())};
  }
  if (!header.is_object()) throw HeaderProblem{false, "the header is not a JSON object"};
  const auto conditions = header.find("conditions");
  if (conditions == header.end() || !conditions->is_object())
    throw HeaderProblem{false, "the header has no \"conditions\" object"};
  const auto shape_outputs = header.find("shape_tensor_outputs");
  if (shape_outputs != header.end()) {
    if (!shape_outputs->is_array()) throw HeaderProblem{false, "\"shape_tensor_outputs\" is not a list of strings"};
    for (const auto& name : *shape_outputs) {
      if (!name.is_string()) throw HeaderProblem{false, "\"shape_tensor_outputs\" is not a list of strings"};
      parsed.header.shape_tensor_outputs.push_back(name.get<std::string>());
    }
  }
  const auto plan_sha256 = header.find("plan_sha256");
  if (plan_sha256 != header.end() && plan_sha256->is_string())
    parsed.header.plan_sha256 = plan_sha256->get<std::string>();
  parsed.conditions_in_order = *conditions;
  parsed.conditions = nlohmann::json(*conditions);
  parsed.header.conditions_json = cache_json::dumps_canonical(parsed.conditions);
  parsed.header.file_size = file_size;
  parsed.header.plan_offset = kPrefixSize + header_size;
  return parsed;
}

EngineFileContents read_engine_fd(int fd, std::uint64_t file_size, const std::string& path,
                                  const nlohmann::json& expected_conditions) {
  ParsedHeader parsed;
  try {
    parsed = read_header(fd, file_size, path);
  } catch (const HeaderProblem& problem) {
    throw CorruptEngineError(header_problem_message(problem, path));
  }
  if (parsed.conditions != expected_conditions) {
    const std::string key = first_differing_key(parsed.conditions, expected_conditions);
    throw EngineConditionError(fmt::format(
        "engine conditions differ: {}: the file was built for other conditions{}. Open it with the conditions it was "
        "built for, or rebuild it with force_rebuild.",
        path, key.empty() ? "" : fmt::format(" (first difference: \"{}\")", key)));
  }
  EngineFileContents contents;
  contents.header = std::move(parsed.header);
  const std::uint64_t plan_size = contents.header.plan_size();
  contents.plan.resize(static_cast<std::size_t>(plan_size));
  // Hash each chunk right after reading it, while it is still in the CPU caches.
  Sha256 hasher;
  constexpr std::uint64_t kChunk = std::uint64_t{8} << 20;
  for (std::uint64_t done = 0; done < plan_size;) {
    const std::uint64_t n = std::min(kChunk, plan_size - done);
    read_exactly(fd, contents.plan.data() + done, static_cast<std::size_t>(n), contents.header.plan_offset + done,
                 path);
    hasher.update(contents.plan.data() + done, static_cast<std::size_t>(n));
    done += n;
  }
  const std::string actual = hasher.finish_hex();
  if (contents.header.plan_sha256 != actual) {
    throw CorruptEngineError(fmt::format(
        "engine checksum differs: {}: the plan's SHA-256 is {}, the header records {}; the file is damaged. {}", path,
        actual, contents.header.plan_sha256 ? *contents.header.plan_sha256 : std::string("none"), kAdvice));
  }
  return contents;
}

}  // namespace cache_detail

std::string canonical_json(const std::string& json_text) {
  try {
    return cache_json::dumps_canonical(cache_json::parse(json_text));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError(fmt::format("not valid JSON: {}", e.what()));
  }
}

EngineHeader read_engine_header(const std::filesystem::path& path) {
  const PosixFile file = PosixFile::open_read(path);
  try {
    return cache_detail::read_header(file.fd(), file.size(), path.string()).header;
  } catch (const cache_detail::HeaderProblem& problem) {
    throw CorruptEngineError(cache_detail::header_problem_message(problem, path.string()));
  }
}

EngineFileContents read_engine_file(const std::filesystem::path& path, const std::string& expected_conditions_json) {
  nlohmann::json expected;
  try {
    expected = cache_json::parse(expected_conditions_json);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError(fmt::format("the expected conditions are not valid JSON: {}", e.what()));
  }
  const PosixFile file = PosixFile::open_read(path);
  return cache_detail::read_engine_fd(file.fd(), file.size(), path.string(), expected);
}

std::string engine_header_json(const std::string& conditions_json, const std::string& plan_sha256,
                               const std::vector<std::string>& shape_tensor_outputs) {
  nlohmann::json conditions;
  try {
    conditions = cache_json::parse(conditions_json);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError(fmt::format("engine conditions are not valid JSON: {}", e.what()));
  }
  if (!conditions.is_object()) throw InvalidArgumentError("engine conditions must be a JSON object");
  nlohmann::json header;
  header["conditions"] = std::move(conditions);
  header["plan_sha256"] = plan_sha256;
  header["shape_tensor_outputs"] = shape_tensor_outputs;
  return cache_json::dumps_canonical(header);
}

void write_engine_file(const std::filesystem::path& path, const std::string& conditions_json, const void* plan,
                       std::size_t plan_size, const std::vector<std::string>& shape_tensor_outputs) {
  if (plan_size == 0)
    throw InvalidArgumentError(fmt::format("{}: an engine file needs a non-empty plan", path.string()));
  const std::string header = engine_header_json(conditions_json, sha256_hex(plan, plan_size), shape_tensor_outputs);
  std::array<unsigned char, 8> length{};
  for (std::size_t i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * (7 - i)));
  write_file_atomically(
      path,
      [&](PosixFile& file) {
        file.write_all(kEngineFileMagic, kEngineFileMagicSize);
        file.write_all(length.data(), length.size());
        file.write_all(header.data(), header.size());
        file.write_all(plan, plan_size);
      },
      0600);
}

}  // namespace tensoracle
