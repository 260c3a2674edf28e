// The engine (plan) byte format: writing and strictly validating header, manifest and section table.
#include "plan/plan_format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/bytes.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::plan {

namespace {

using Json = nlohmann::json;

std::uint64_t align_up(std::uint64_t n) { return (n + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment; }

void put_u32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}
void put_u64(std::byte* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}
std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint32_t>(p[i]);
  return v;
}
std::uint64_t get_u64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

}  // namespace

std::vector<std::byte> write_plan(Json manifest, const std::vector<SectionData>& sections) {
  Json table = Json::array();
  std::uint64_t offset = 0;
  for (const auto& s : sections) {
    table.push_back(Json{{"name", s.name}, {"offset", offset}, {"size", s.bytes.size()}});
    offset = align_up(offset + s.bytes.size());
  }
  manifest["sections"] = std::move(table);
  const std::string text = manifest.dump();
  const std::uint64_t data_start = align_up(kPlanHeaderSize + text.size());
  const std::uint64_t total = data_start + offset;
  std::vector<std::byte> out(total, std::byte{0});
  std::memcpy(out.data(), kPlanMagic, sizeof kPlanMagic);
  put_u32(out.data() + 8, kPlanFormatVersion);
  put_u32(out.data() + 12, 0);  // flags, none defined
  put_u64(out.data() + 16, text.size());
  put_u64(out.data() + 24, total);
  copy_bytes(out.data() + kPlanHeaderSize, text.data(), text.size());
  std::uint64_t at = data_start;
  for (const auto& s : sections) {
    copy_bytes(out.data() + at, s.bytes.data(), s.bytes.size());
    at += align_up(s.bytes.size());
  }
  return out;
}

std::span<const std::byte> ParsedPlan::section(const std::string& name, const std::string& display_name) const {
  for (const auto& s : sections) {
    if (s.name == name) return s.bytes;
  }
  throw FormatError(fmt::format("{}: the engine has no '{}' section; it is damaged", display_name, name));
}

std::uint64_t manifest_end(std::span<const std::byte> header_bytes) {
  if (header_bytes.size() < kPlanHeaderSize || std::memcmp(header_bytes.data(), kPlanMagic, sizeof kPlanMagic) != 0)
    return 0;
  const std::uint64_t manifest_size = get_u64(header_bytes.data() + 16);
  if (manifest_size == 0 || manifest_size > kMaxManifestSize) return 0;
  return kPlanHeaderSize + manifest_size;
}

std::optional<nlohmann::json> peek_target(std::span<const std::byte> head) {
  const std::uint64_t end = manifest_end(head);
  if (end == 0 || end > head.size()) return std::nullopt;
  const auto* text = reinterpret_cast<const char*>(head.data() + kPlanHeaderSize);
  Json manifest = Json::parse(text, text + (end - kPlanHeaderSize), nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || !manifest.contains("target") || !manifest["target"].is_object()) return std::nullopt;
  return std::move(manifest["target"]);
}

ParsedPlan parse_plan(std::span<const std::byte> bytes, const std::string& display_name) {
  auto fail = [&](const std::string& what) -> void {
    throw FormatError(fmt::format("{}: not a valid tensoracle engine: {}", display_name, what));
  };
  if (bytes.size() < kPlanHeaderSize)
    fail(fmt::format("{} bytes is shorter than the {}-byte header", bytes.size(), kPlanHeaderSize));
  if (std::memcmp(bytes.data(), kPlanMagic, sizeof kPlanMagic) != 0) fail("the magic bytes are wrong");
  ParsedPlan plan;
  plan.format_version = get_u32(bytes.data() + 8);
  if (plan.format_version == 0) fail("format version 0");
  if (plan.format_version > kPlanFormatVersion) {
    throw UnsupportedError(fmt::format(
        "{}: engine format version {} is newer than this build of tensoracle reads ({}); rebuild the engine",
        display_name, plan.format_version, kPlanFormatVersion));
  }
  if (get_u32(bytes.data() + 12) != 0) fail("unknown flags are set");
  const std::uint64_t manifest_size = get_u64(bytes.data() + 16);
  const std::uint64_t total = get_u64(bytes.data() + 24);
  if (total != bytes.size())
    fail(fmt::format("the header records {} bytes but {} are present (truncated or padded)", total, bytes.size()));
  if (manifest_size == 0 || manifest_size > kMaxManifestSize || manifest_size > bytes.size() - kPlanHeaderSize)
    fail(fmt::format("the manifest size {} does not fit in the engine", manifest_size));
  const auto* text = reinterpret_cast<const char*>(bytes.data() + kPlanHeaderSize);
  try {
    plan.manifest = Json::parse(text, text + manifest_size);
  } catch (const Json::exception& e) {
    fail(fmt::format("the manifest is not valid JSON ({})", e.what()));
  }
  if (!plan.manifest.is_object()) fail("the manifest is not a JSON object");
  const std::uint64_t data_start = align_up(kPlanHeaderSize + manifest_size);
  if (data_start > bytes.size()) fail("the data area starts past the end");
  const std::uint64_t data_size = bytes.size() - data_start;
  ManifestReader r(display_name);
  const Json& table = r.array(plan.manifest, "sections", "manifest");
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (std::size_t i = 0; i < table.size(); ++i) {
    const std::string where = fmt::format("sections[{}]", i);
    if (!table[i].is_object()) fail(where + " is not an object");
    SectionData s;
    s.name = r.string(table[i], "name", where);
    const std::uint64_t offset = r.uint(table[i], "offset", where);
    const std::uint64_t size = r.uint(table[i], "size", where);
    if (offset % kSectionAlignment != 0) fail(fmt::format("section '{}' offset {} is not aligned", s.name, offset));
    if (offset > data_size || size > data_size - offset)
      fail(fmt::format("section '{}' ({} bytes at {}) runs past the end of the engine", s.name, size, offset));
    for (const auto& other : plan.sections) {
      if (other.name == s.name) fail(fmt::format("section '{}' is listed twice", s.name));
    }
    for (const auto& [b, e] : ranges) {
      if (offset < e && b < offset + size) fail(fmt::format("section '{}' overlaps another section", s.name));
    }
    ranges.emplace_back(offset, offset + size);
    s.bytes = bytes.subspan(static_cast<std::size_t>(data_start + offset), static_cast<std::size_t>(size));
    plan.sections.push_back(std::move(s));
  }
  return plan;
}

void ManifestReader::fail(const std::string& where, const std::string& what) const {
  throw FormatError(fmt::format("{}: not a valid tensoracle engine: {}: {}", name_, where, what));
}

const Json& ManifestReader::field(const Json& object, const char* key, const std::string& where) const {
  if (!object.is_object()) fail(where, "is not an object");
  auto it = object.find(key);
  if (it == object.end()) fail(where, fmt::format("'{}' is missing", key));
  return *it;
}

std::string ManifestReader::string(const Json& object, const char* key, const std::string& where) const {
  const Json& v = field(object, key, where);
  if (!v.is_string()) fail(where, fmt::format("'{}' must be a string", key));
  return v.get<std::string>();
}

std::uint64_t ManifestReader::uint(const Json& object, const char* key, const std::string& where) const {
  const Json& v = field(object, key, where);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    fail(where, fmt::format("'{}' must be a non-negative integer", key));
  return v.get<std::uint64_t>();
}

std::int64_t ManifestReader::integer(const Json& object, const char* key, const std::string& where) const {
  const Json& v = field(object, key, where);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
    fail(where, fmt::format("'{}' must be an integer", key));
  return v.get<std::int64_t>();
}

const Json& ManifestReader::array(const Json& object, const char* key, const std::string& where) const {
  const Json& v = field(object, key, where);
  if (!v.is_array()) fail(where, fmt::format("'{}' must be a list", key));
  return v;
}

std::vector<std::int64_t> ManifestReader::dims(const Json& object, const char* key, const std::string& where) const {
  const Json& v = array(object, key, where);
  if (v.size() > 64) fail(where, fmt::format("'{}' has more than 64 dims", key));
  std::vector<std::int64_t> out;
  for (const auto& d : v) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<std::uint64_t>() > INT64_MAX) ||
        d.get<std::int64_t>() < -1)
      fail(where, fmt::format("'{}' must hold integers >= -1", key));
    out.push_back(d.get<std::int64_t>());
  }
  return out;
}

}  // namespace tensoracle::plan
