// bundle.json: the records' names (architectures, kinds, argument types), safe relative paths, the strict reader,
// the writer and the canonical serialization the bundle digest covers.
#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bundle/bundle_internal.hpp"
#include "tensoracle/bundle.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle::bundle {
namespace {

using nlohmann::json;

// The argument types' names, once.
constexpr std::pair<cubin::ArgType, const char*> kArgTypes[] = {
    {cubin::ArgType::kPointer, "pointer"}, {cubin::ArgType::kI32, "i32"}, {cubin::ArgType::kI64, "i64"},
    {cubin::ArgType::kU32, "u32"},         {cubin::ArgType::kU64, "u64"}, {cubin::ArgType::kF32, "f32"},
    {cubin::ArgType::kF64, "f64"},
};
constexpr std::pair<KernelKind, const char*> kKinds[] = {{KernelKind::kCuda, "cuda"}, {KernelKind::kTriton, "triton"}};

[[noreturn]] void fail(std::string_view where, const std::string& what) {
  throw BundleError(fmt::format("{}: {}", where, what));
}

// A parsed value's member, with the exact JSON type asked for.
const json& member(const json& object, const char* key, json::value_t type, std::string_view where) {
  const auto it = object.find(key);
  if (it == object.end()) fail(where, fmt::format("'{}' is missing", key));
  const bool ok = type == json::value_t::number_integer ? (it->is_number_integer()) : it->type() == type;
  if (!ok) fail(where, fmt::format("'{}' is a {}, not the expected type", key, it->type_name()));
  return *it;
}

void only_keys(const json& object, std::initializer_list<const char*> keys, std::string_view where) {
  for (const auto& item : object.items()) {
    if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return item.key() == k; }) == keys.end()) {
      fail(where, fmt::format("unknown field '{}' (a bundle of format version {} has only: {})", item.key(),
                              kFormatVersion, fmt::join(keys, ", ")));
    }
  }
}

std::int64_t integer(const json& object, const char* key, std::int64_t low, std::int64_t high, std::string_view where) {
  const json& value = member(object, key, json::value_t::number_integer, where);
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(high)) {
    fail(where, fmt::format("'{}' is {}, above {}", key, value.get<std::uint64_t>(), high));
  }
  const std::int64_t v = value.get<std::int64_t>();
  if (v < low || v > high) fail(where, fmt::format("'{}' is {}, outside {}..{}", key, v, low, high));
  return v;
}

std::string text(const json& object, const char* key, std::string_view where) {
  return member(object, key, json::value_t::string, where).get<std::string>();
}

void check_sha256(const std::string& value, std::string_view what) {
  const bool ok = value.size() == 64 && std::all_of(value.begin(), value.end(), [](char c) {
                    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                  });
  if (!ok) throw BundleError(fmt::format("{}: '{}' is not a SHA-256 (64 lower-case hex digits)", what, value));
}

// Rejects duplicate keys anywhere in the document (nlohmann keeps the last one silently).
json parse_strict(std::string_view text_in, std::string_view where) {
  std::vector<std::set<std::string>> seen;
  std::string duplicate;
  json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) seen.emplace_back();
    if (event == json::parse_event_t::object_end && !seen.empty()) seen.pop_back();
    if (event == json::parse_event_t::key && !seen.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!seen.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(text_in.begin(), text_in.end(), callback);
  } catch (const json::exception& e) {
    fail(where, fmt::format("not valid JSON ({})", e.what()));
  }
  if (!duplicate.empty()) fail(where, fmt::format("the field '{}' appears twice in one object", duplicate));
  return doc;
}

json arg_json(const Arg& a) {
  return json{{"name", a.name}, {"type", arg_type_name(a.type)}, {"count", a.count}, {"divisibility", a.divisibility}};
}

json cubin_json(const CubinRecord& c) {
  return json{{"sm", c.sm}, {"path", c.path}, {"sha256", c.sha256}, {"size", c.size}, {"shared_bytes", c.shared_bytes}};
}

json kernel_json(const KernelRecord& k) {
  json args = json::array(), constants = json::array(), cubins = json::array();
  for (const Arg& a : k.args) args.push_back(arg_json(a));
  for (const ConstantValue& c : k.constants) constants.push_back(json{{"name", c.name}, {"value", c.value}});
  for (const CubinRecord& c : k.cubins) cubins.push_back(cubin_json(c));
  return json{{"name", k.name},
              {"entry", k.entry},
              {"kind", kernel_kind_name(k.kind)},
              {"args", args},
              {"constants", constants},
              {"threads", k.threads},
              {"scratch_pointers", k.scratch_pointers},
              {"source", k.source},
              {"source_sha256", k.source_sha256},
              {"cubins", cubins}};
}

// The document without its digest (nlohmann::json keeps object keys sorted).
json manifest_body(const Manifest& m) {
  json architectures = json::array(), kernels = json::array();
  for (int sm : m.architectures) architectures.push_back(architecture_name(sm));
  for (const KernelRecord& k : m.kernels) kernels.push_back(kernel_json(k));
  return json{{"format", kFormatName},
              {"format_version", m.format_version},
              {"architectures", architectures},
              {"tools", m.tools},
              {"kernels", kernels}};
}

Arg parse_arg(const json& a, std::string_view where) {
  if (!a.is_object()) fail(where, "is not an object");
  only_keys(a, {"name", "type", "count", "divisibility"}, where);
  Arg arg;
  arg.name = text(a, "name", where);
  check_identifier(arg.name, fmt::format("{}: argument name", where));
  const std::string type = text(a, "type", where);
  const auto t = arg_type_from_name(type);
  if (!t) fail(where, fmt::format("unknown type '{}': use pointer, i32, i64, u32, u64, f32 or f64", type));
  arg.type = *t;
  arg.count = static_cast<int>(integer(a, "count", 1, 1 << 16, where));
  arg.divisibility = static_cast<int>(integer(a, "divisibility", 1, 1 << 16, where));
  return arg;
}

CubinRecord parse_cubin(const json& c, std::string_view where) {
  if (!c.is_object()) fail(where, "is not an object");
  only_keys(c, {"sm", "path", "sha256", "size", "shared_bytes"}, where);
  CubinRecord r;
  r.sm = static_cast<int>(integer(c, "sm", 0, 1000, where));
  check_known_architecture(r.sm, where);
  r.path = text(c, "path", where);
  check_relative_path(r.path, fmt::format("{}: cubin path", where));
  r.sha256 = text(c, "sha256", where);
  check_sha256(r.sha256, fmt::format("{}: sha256", where));
  r.size = static_cast<std::uint64_t>(integer(c, "size", 1, std::int64_t{1} << 40, where));
  r.shared_bytes = static_cast<std::uint32_t>(integer(c, "shared_bytes", 0, 0xffffffffLL, where));
  return r;
}

KernelRecord parse_kernel(const json& k, std::string_view where_in) {
  if (!k.is_object()) fail(where_in, "is not an object");
  KernelRecord r;
  r.name = text(k, "name", where_in);
  const std::string where = fmt::format("{} '{}'", where_in, r.name);
  check_kernel_name(r.name, where);
  only_keys(k,
            {"name", "entry", "kind", "args", "constants", "threads", "scratch_pointers", "source", "source_sha256",
             "cubins"},
            where);
  r.entry = text(k, "entry", where);
  check_entry_name(r.entry, where);
  const std::string kind = text(k, "kind", where);
  const auto parsed_kind = kernel_kind_from_name(kind);
  if (!parsed_kind) fail(where, fmt::format("unknown kind '{}': use cuda or triton", kind));
  r.kind = *parsed_kind;
  const json& args = member(k, "args", json::value_t::array, where);
  for (std::size_t i = 0; i < args.size(); ++i)
    r.args.push_back(parse_arg(args[i], fmt::format("{} arg {}", where, i)));
  const json& constants = member(k, "constants", json::value_t::array, where);
  for (std::size_t i = 0; i < constants.size(); ++i) {
    const std::string w = fmt::format("{} constant {}", where, i);
    if (!constants[i].is_object()) fail(w, "is not an object");
    only_keys(constants[i], {"name", "value"}, w);
    ConstantValue c{text(constants[i], "name", w), text(constants[i], "value", w)};
    check_identifier(c.name, w + ": name");
    check_constant_value(c.value, w);
    r.constants.push_back(std::move(c));
  }
  check_unique_sorted_constants(r.constants, where);
  r.threads = static_cast<int>(integer(k, "threads", 0, 1024, where));
  r.scratch_pointers = static_cast<int>(integer(k, "scratch_pointers", 0, 2, where));
  check_scratch_pointers(r.kind, r.scratch_pointers, where);
  r.source = text(k, "source", where);
  check_relative_path(r.source, where + ": source path");
  r.source_sha256 = text(k, "source_sha256", where);
  check_sha256(r.source_sha256, where + ": source_sha256");
  const json& cubins = member(k, "cubins", json::value_t::array, where);
  for (std::size_t i = 0; i < cubins.size(); ++i) {
    r.cubins.push_back(parse_cubin(cubins[i], fmt::format("{} cubin {}", where, i)));
  }
  return r;
}

}  // namespace

// ---- names ----

std::vector<int> default_architectures() { return {80, 86, 89, 90, 120}; }

const std::vector<int>& known_architectures() {
  static const std::vector<int> known = {75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121};
  return known;
}

int parse_architecture(std::string_view text_in, std::string_view what) {
  std::string_view t = text_in;
  if (t.rfind("sm_", 0) == 0) {
    t.remove_prefix(3);
  } else if (t.rfind("sm", 0) == 0) {
    t.remove_prefix(2);
  }
  int sm = 0;
  const bool digits =
      !t.empty() && t.size() <= 3 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) sm = std::stoi(std::string(t));
  const auto& known = known_architectures();
  if (!digits || std::find(known.begin(), known.end(), sm) == known.end()) {
    std::vector<std::string> names;
    for (int k : known) names.push_back(architecture_name(k));
    throw CubinArchitectureError(
        fmt::format("{} '{}': not a known CUDA architecture; write sm86 (or sm_86, 86), one "
                    "of {}",
                    what, text_in, fmt::join(names, ", ")));
  }
  return sm;
}

std::vector<int> parse_architectures(std::string_view comma_list, std::string_view what) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= comma_list.size()) {
    const std::size_t comma = std::min(comma_list.find(',', start), comma_list.size());
    std::string_view item = comma_list.substr(start, comma - start);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.remove_prefix(1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.remove_suffix(1);
    if (!item.empty()) out.push_back(parse_architecture(item, what));
    start = comma + 1;
  }
  if (out.empty()) throw CubinArchitectureError(fmt::format("{}: empty list; write e.g. sm86,sm89,sm120", what));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string architecture_name(int sm) { return fmt::format("sm{}", sm); }

std::string_view kernel_kind_name(KernelKind kind) {
  for (const auto& [k, name] : kKinds) {
    if (k == kind) return name;
  }
  return "unknown";
}
std::optional<KernelKind> kernel_kind_from_name(std::string_view name) {
  for (const auto& [k, n] : kKinds) {
    if (name == n) return k;
  }
  return std::nullopt;
}

std::string_view arg_type_name(cubin::ArgType type) {
  for (const auto& [t, name] : kArgTypes) {
    if (t == type) return name;
  }
  return "unknown";
}
std::optional<cubin::ArgType> arg_type_from_name(std::string_view name) {
  for (const auto& [t, n] : kArgTypes) {
    if (name == n) return t;
  }
  return std::nullopt;
}
std::size_t arg_type_size(cubin::ArgType type) {
  switch (type) {
    case cubin::ArgType::kI32:
    case cubin::ArgType::kU32:
    case cubin::ArgType::kF32: return 4;
    default: return 8;
  }
}

// ---- checks shared by the reader and the writers ----

void check_relative_path(std::string_view path, std::string_view what) {
  const auto bad = [&](const char* why) {
    throw BundleError(
        fmt::format("{} '{}': {}; paths in a bundle must be relative, '/'-separated and stay inside it "
                    "(cubins/sm86/name.cubin)",
                    what, path, why));
  };
  if (path.empty()) bad("empty");
  if (path.front() == '/') bad("an absolute POSIX path");
  if (path.front() == '\\') bad("a Windows root path");
  if (path.size() >= 2 && path[1] == ':' && std::isalpha(static_cast<unsigned char>(path[0]))) {
    bad("a Windows drive path");
  }
  if (path.find('\\') != std::string_view::npos) bad("contains a backslash");
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) bad("contains a control character");
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t slash = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, slash - start);
    if (part == "..") bad("has a '..' component");
    if (part == ".") bad("has a '.' component");
    if (part.empty()) bad("has an empty component");
    start = slash + 1;
  }
}

void check_identifier(const std::string& name, std::string_view what) {
  const bool ok = !name.empty() && name.size() <= 256 && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                  std::all_of(name.begin(), name.end(),
                              [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  if (!ok) throw BundleError(fmt::format("{} '{}': write a C identifier ([A-Za-z_][A-Za-z0-9_]*)", what, name));
}

void check_kernel_name(const std::string& name, std::string_view where) {
  const bool ok = !name.empty() && name.size() <= 200 && name[0] != '.' && name[0] != '-' &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
                  });
  if (!ok) {
    throw BundleError(
        fmt::format("{}: kernel name '{}': use letters, digits, '_', '.' and '-' (not first), as it "
                    "names the cubin files",
                    where, name));
  }
}

void check_entry_name(const std::string& entry, std::string_view where) {
  check_identifier(entry, fmt::format("{}: entry", where));
}

void check_constant_value(const std::string& value, std::string_view where) {
  for (char c : value) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      throw BundleError(fmt::format("{}: constant value '{}' contains a control character", where, value));
    }
  }
}

void check_unique_sorted_constants(const std::vector<ConstantValue>& constants, std::string_view where) {
  for (std::size_t i = 1; i < constants.size(); ++i) {
    if (!(constants[i - 1].name < constants[i].name)) {
      throw BundleError(fmt::format("{}: constants must be sorted by name and unique ('{}' after '{}')", where,
                                    constants[i].name, constants[i - 1].name));
    }
  }
}

void check_scratch_pointers(KernelKind kind, int scratch_pointers, std::string_view where) {
  const int expected = kind == KernelKind::kTriton ? 2 : 0;
  if (scratch_pointers != expected) {
    throw BundleError(fmt::format("{}: scratch_pointers {} for a {} kernel; it must be {} ({})", where,
                                  scratch_pointers, kernel_kind_name(kind), expected,
                                  kind == KernelKind::kTriton ? "Triton appends the global and profile scratch pointers"
                                                              : "CUDA C++ kernels take no scratch pointers"));
  }
}

void check_known_architecture(int sm, std::string_view where) {
  const auto& known = known_architectures();
  if (std::find(known.begin(), known.end(), sm) == known.end()) {
    throw CubinArchitectureError(fmt::format("{}: SM {} is not a CUDA architecture this library knows", where, sm));
  }
}

// ---- serialization ----

std::string canonical_json(const Manifest& manifest) {
  return manifest_body(manifest).dump(-1, ' ', false, json::error_handler_t::strict);
}

std::string compute_digest(const Manifest& manifest) {
  const std::string canonical = canonical_json(manifest);
  return sha256_hex(canonical.data(), canonical.size());
}

std::string manifest_json(const Manifest& manifest) {
  // Written with the fields in reading order; the digest does not depend on it.
  nlohmann::ordered_json out;
  const json body = manifest_body(manifest);
  out["format"] = body["format"];
  out["format_version"] = body["format_version"];
  out["digest"] = manifest.digest;
  out["architectures"] = body["architectures"];
  out["tools"] = body["tools"];
  out["kernels"] = nlohmann::ordered_json::array();
  for (const KernelRecord& k : manifest.kernels) {
    nlohmann::ordered_json kernel;
    kernel["name"] = k.name;
    kernel["entry"] = k.entry;
    kernel["kind"] = kernel_kind_name(k.kind);
    kernel["source"] = k.source;
    kernel["source_sha256"] = k.source_sha256;
    kernel["threads"] = k.threads;
    kernel["scratch_pointers"] = k.scratch_pointers;
    kernel["args"] = nlohmann::ordered_json::array();
    for (const Arg& a : k.args) {
      kernel["args"].push_back(
          {{"name", a.name}, {"type", arg_type_name(a.type)}, {"count", a.count}, {"divisibility", a.divisibility}});
    }
    kernel["constants"] = nlohmann::ordered_json::array();
    for (const ConstantValue& c : k.constants) kernel["constants"].push_back({{"name", c.name}, {"value", c.value}});
    kernel["cubins"] = nlohmann::ordered_json::array();
    for (const CubinRecord& c : k.cubins) {
      kernel["cubins"].push_back(
          {{"sm", c.sm}, {"path", c.path}, {"size", c.size}, {"sha256", c.sha256}, {"shared_bytes", c.shared_bytes}});
    }
    out["kernels"].push_back(kernel);
  }
  return out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::strict) + "\n";
}

Manifest parse_manifest(std::string_view json_text, std::string_view where) {
  const json doc = parse_strict(json_text, where);
  if (!doc.is_object()) fail(where, "is not a JSON object");
  const std::string format = text(doc, "format", where);
  if (format != kFormatName) fail(where, fmt::format("'format' is '{}', not '{}'", format, kFormatName));
  const std::int64_t version = integer(doc, "format_version", 0, 1 << 20, where);
  if (version != kFormatVersion) {
    fail(where, fmt::format("format_version {}; this library reads version {}: produce the bundle again with it",
                            version, kFormatVersion));
  }
  only_keys(doc, {"format", "format_version", "digest", "architectures", "tools", "kernels"}, where);
  Manifest m;
  m.format_version = kFormatVersion;
  m.digest = text(doc, "digest", where);
  check_sha256(m.digest, fmt::format("{}: digest", where));
  const json& architectures = member(doc, "architectures", json::value_t::array, where);
  for (const json& a : architectures) {
    if (!a.is_string()) fail(where, "'architectures' must list names such as \"sm86\"");
    const std::string name = a.get<std::string>();
    const int sm = parse_architecture(name, fmt::format("{}: architecture", where));
    if (name != architecture_name(sm)) fail(where, fmt::format("architecture '{}': write it as sm{}", name, sm));
    m.architectures.push_back(sm);
  }
  if (m.architectures.empty()) fail(where, "'architectures' is empty");
  if (!std::is_sorted(m.architectures.begin(), m.architectures.end()) ||
      std::adjacent_find(m.architectures.begin(), m.architectures.end()) != m.architectures.end()) {
    fail(where, "'architectures' must be sorted and unique");
  }
  const json& tools = member(doc, "tools", json::value_t::object, where);
  for (const auto& item : tools.items()) {
    if (!item.value().is_string()) fail(where, fmt::format("tools '{}' is not a version string", item.key()));
    m.tools[item.key()] = item.value().get<std::string>();
  }
  const json& kernels = member(doc, "kernels", json::value_t::array, where);
  if (kernels.empty()) fail(where, "'kernels' is empty");
  std::set<std::string> names;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    KernelRecord k = parse_kernel(kernels[i], fmt::format("{}: kernel {}", where, i));
    if (!names.insert(k.name).second) fail(where, fmt::format("two kernels are named '{}'", k.name));
    check_cubin_records(k, m.architectures, where);
    m.kernels.push_back(std::move(k));
  }
  const std::string expected = compute_digest(m);
  if (expected != m.digest) {
    throw BundleError(
        fmt::format("{}: digest {} does not match its contents (they hash to {}): the file was changed "
                    "after it was produced; produce the bundle again",
                    where, m.digest, expected));
  }
  return m;
}

void check_cubin_records(const KernelRecord& k, const std::vector<int>& architectures, std::string_view where) {
  std::vector<int> sms;
  for (const CubinRecord& c : k.cubins) {
    sms.push_back(c.sm);
    const std::string expected = fmt::format("cubins/{}/{}.cubin", architecture_name(c.sm), k.name);
    if (c.path != expected) {
      // The directory must name the SM; the rest of the layout is the producer's and kept exact too.
      const std::size_t slash = c.path.rfind('/');
      const std::string dir = slash == std::string::npos ? "" : c.path.substr(0, slash);
      const std::size_t dir_slash = dir.rfind('/');
      const std::string leaf = dir_slash == std::string::npos ? dir : dir.substr(dir_slash + 1);
      if (leaf != architecture_name(c.sm)) {
        throw CubinArchitectureError(fmt::format(
            "{}: kernel '{}': cubin '{}' is recorded as {} but lies in directory '{}'; cubins of {} belong in "
            "cubins/{}/",
            where, k.name, c.path, architecture_name(c.sm), leaf, architecture_name(c.sm), architecture_name(c.sm)));
      }
      throw BundleError(
          fmt::format("{}: kernel '{}': cubin path '{}' should be '{}'", where, k.name, c.path, expected));
    }
  }
  std::vector<int> sorted = sms;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != sms || std::adjacent_find(sms.begin(), sms.end()) != sms.end() || sms != architectures) {
    std::vector<std::string> have, want;
    for (int sm : sms) have.push_back(architecture_name(sm));
    for (int sm : architectures) want.push_back(architecture_name(sm));
    throw CubinArchitectureError(
        fmt::format("{}: kernel '{}' has cubins for [{}]; the bundle's architectures are [{}] "
                    "(one cubin each, in that order)",
                    where, k.name, fmt::join(have, ", "), fmt::join(want, ", ")));
  }
}

}  // namespace tensoracle::bundle
