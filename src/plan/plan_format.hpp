// The engine (plan) byte format: a fixed header, a JSON manifest and aligned binary sections (docs/engine-format.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tensoracle::plan {

inline constexpr char kPlanMagic[8] = {'T', 'S', 'R', 'P', 'L', 'A', 'N', '\0'};
// Written by this build; it reads every version from 1 up to it (docs/engine-format.md: version policy).
// 2: steps may carry a generated kernel binary in the "kernels" section.
inline constexpr std::uint32_t kPlanFormatVersion = 2;
inline constexpr std::size_t kPlanHeaderSize = 32;
inline constexpr std::size_t kSectionAlignment = 256;
// Bounds that keep a damaged engine from asking for absurd work before it is rejected.
inline constexpr std::uint64_t kMaxManifestSize = std::uint64_t{1} << 30;

struct SectionData {
  std::string name;
  std::span<const std::byte> bytes;
};

// Serializes: header, manifest (with a "sections" table added: name, offset and size relative to
// the start of the data area), padding, then each section at a kSectionAlignment-aligned offset.
std::vector<std::byte> write_plan(nlohmann::json manifest, const std::vector<SectionData>& sections);

struct ParsedPlan {
  std::uint32_t format_version = 0;
  nlohmann::json manifest;
  std::vector<SectionData> sections;  // views into the bytes given to parse_plan

  // The section of that name; FormatError (naming `display_name`) when absent.
  std::span<const std::byte> section(const std::string& name, const std::string& display_name) const;
};

// Validates the header, parses the manifest and checks the section table (every offset aligned,
// inside the bytes, no overlaps). Throws FormatError naming `display_name` for damaged bytes and
// UnsupportedError for a format version this build can't read.
ParsedPlan parse_plan(std::span<const std::byte> bytes, const std::string& display_name);

// The bytes an engine's header and manifest take (header_bytes: at least its first kPlanHeaderSize bytes), or 0 when
// they are not a plausible engine header (parse_plan then says what is wrong).
std::uint64_t manifest_end(std::span<const std::byte> header_bytes);
// The manifest's "target" object from an engine's first manifest_end() bytes; nullopt where they do not hold one.
// For starting the target's device while the rest is read: no validation beyond that (parse_plan does it).
std::optional<nlohmann::json> peek_target(std::span<const std::byte> head);

// Typed manifest access that throws FormatError naming the engine and the JSON path.
class ManifestReader {
 public:
  explicit ManifestReader(std::string display_name) : name_(std::move(display_name)) {}
  const nlohmann::json& field(const nlohmann::json& object, const char* key, const std::string& where) const;
  std::string string(const nlohmann::json& object, const char* key, const std::string& where) const;
  std::uint64_t uint(const nlohmann::json& object, const char* key, const std::string& where) const;
  std::int64_t integer(const nlohmann::json& object, const char* key, const std::string& where) const;
  const nlohmann::json& array(const nlohmann::json& object, const char* key, const std::string& where) const;
  std::vector<std::int64_t> dims(const nlohmann::json& object, const char* key, const std::string& where) const;
  [[noreturn]] void fail(const std::string& where, const std::string& what) const;

 private:
  std::string name_;
};

}  // namespace tensoracle::plan
