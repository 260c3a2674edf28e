// Inspecting bundles: inspect_bundle (bundle.json, every cubin's file, digest and SM) and inspect_library (which
// cubins a plugin library embeds), with their JSON reports.
#include <algorithm>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/posix_file.hpp"
#include "tensoracle/bundle.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle::bundle {
namespace {

using ordered_json = nlohmann::ordered_json;

std::vector<std::uint8_t> read_whole_file(const std::filesystem::path& path) {
  PosixFile file = PosixFile::open_read(path);
  const std::uint64_t size = file.size();
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (size != 0) file.read_exact(bytes.data(), bytes.size(), 0);
  return bytes;
}

// True when `inner` (resolved) is below `outer` (resolved).
bool is_inside(const std::filesystem::path& outer, const std::filesystem::path& inner) {
  auto o = outer.begin();
  auto i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *o != *i) return false;
  }
  return i != inner.end();
}

ordered_json cubin_report(const CubinRecord& c) {
  return {{"sm", c.sm}, {"path", c.path}, {"size", c.size}, {"sha256", c.sha256}, {"shared_bytes", c.shared_bytes}};
}

}  // namespace

BundleReport inspect_bundle(const std::filesystem::path& directory, const std::vector<int>& allowed) {
  const std::filesystem::path json_path = directory / "bundle.json";
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) {
    throw BundleError(
        fmt::format("bundle {}: not a directory; give the directory that holds bundle.json", directory.string()));
  }
  if (!std::filesystem::is_regular_file(json_path, ec)) {
    throw BundleError(
        fmt::format("bundle {}: no bundle.json in it; produce the bundle with `tensoracle bundle "
                    "compile` or tensoracle.producer.compile_bundle",
                    directory.string()));
  }
  const std::vector<std::uint8_t> text = read_whole_file(json_path);
  BundleReport report;
  report.directory = directory;
  report.manifest =
      parse_manifest(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), json_path.string());
  const Manifest& m = report.manifest;
  for (int sm : m.architectures) {
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), sm) == allowed.end()) {
      std::vector<std::string> names;
      for (int a : allowed) names.push_back(architecture_name(a));
      throw CubinArchitectureError(fmt::format("bundle {}: holds {} cubins; only {} are allowed here",
                                               directory.string(), architecture_name(sm), fmt::join(names, ", ")));
    }
  }
  const std::filesystem::path root = std::filesystem::canonical(directory);
  for (const KernelRecord& k : m.kernels) {
    for (const CubinRecord& c : k.cubins) {
      const std::filesystem::path file = directory / c.path;
      const std::string where = fmt::format("bundle {}: kernel '{}' cubin {}", directory.string(), k.name, c.path);
      if (!std::filesystem::exists(std::filesystem::symlink_status(file, ec))) {
        throw BundleError(fmt::format("{}: the file is missing; copy the whole bundle directory", where));
      }
      const std::filesystem::path resolved = std::filesystem::weakly_canonical(file, ec);
      if (ec || !is_inside(root, resolved)) {
        throw BundleError(
            fmt::format("{}: resolves to {}, outside the bundle (a symbolic link?)", where, resolved.string()));
      }
      if (!std::filesystem::is_regular_file(resolved, ec)) {
        throw BundleError(fmt::format("{}: not a regular file", where));
      }
      const std::vector<std::uint8_t> bytes = read_whole_file(resolved);
      if (bytes.size() != c.size) {
        throw BundleError(
            fmt::format("{}: {} bytes, bundle.json records {}: the file was changed or truncated; "
                        "produce the bundle again",
                        where, bytes.size(), c.size));
      }
      const std::string sha = sha256_hex(bytes.data(), bytes.size());
      if (sha != c.sha256) {
        throw BundleError(
            fmt::format("{}: SHA-256 {} but bundle.json records {}: the file was changed; produce the "
                        "bundle again",
                        where, sha, c.sha256));
      }
      const int sm = cubin_sm(bytes.data(), bytes.size(), where);
      if (sm != c.sm) {
        throw CubinArchitectureError(
            fmt::format("{}: its ELF header says {}, but it is recorded and stored as {}; "
                        "a cubin of another architecture was put in its place",
                        where, architecture_name(sm), architecture_name(c.sm)));
      }
    }
  }
  return report;
}

std::string BundleReport::to_json() const {
  ordered_json out;
  out["bundle"] = directory.string();
  out["digest"] = manifest.digest;
  out["format_version"] = manifest.format_version;
  out["architectures"] = ordered_json::array();
  for (int sm : manifest.architectures) out["architectures"].push_back(architecture_name(sm));
  out["tools"] = manifest.tools;
  out["kernels"] = ordered_json::array();
  for (const KernelRecord& k : manifest.kernels) {
    ordered_json kernel;
    kernel["name"] = k.name;
    kernel["entry"] = k.entry;
    kernel["kind"] = kernel_kind_name(k.kind);
    kernel["threads"] = k.threads;
    kernel["scratch_pointers"] = k.scratch_pointers;
    kernel["args"] = ordered_json::array();
    for (const Arg& a : k.args) {
      kernel["args"].push_back(
          {{"name", a.name}, {"type", arg_type_name(a.type)}, {"count", a.count}, {"divisibility", a.divisibility}});
    }
    kernel["constants"] = ordered_json::object();
    for (const ConstantValue& c : k.constants) kernel["constants"][c.name] = c.value;
    kernel["source"] = k.source;
    kernel["source_sha256"] = k.source_sha256;
    kernel["cubins"] = ordered_json::array();
    for (const CubinRecord& c : k.cubins) kernel["cubins"].push_back(cubin_report(c));
    out["kernels"].push_back(kernel);
  }
  return out.dump(2, ' ', false, ordered_json::error_handler_t::replace);
}

LibraryReport inspect_library(const std::filesystem::path& library, const std::filesystem::path& bundle_directory) {
  const BundleReport bundle = inspect_bundle(bundle_directory);
  LibraryReport report;
  report.library = library;
  report.bundle = bundle_directory;
  report.digest = bundle.manifest.digest;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(library, ec)) {
    throw IoError(fmt::format("plugin library {}: not a readable file", library.string()));
  }
  const std::vector<std::uint8_t> bytes = read_whole_file(library);
  const std::string& digest = bundle.manifest.digest;
  report.digest_present = std::search(bytes.begin(), bytes.end(), digest.begin(), digest.end()) != bytes.end();
  std::vector<EmbeddedCubin> embedded = find_embedded_cubins(bytes.data(), bytes.size());
  report.embedded = embedded.size();
  std::vector<bool> used(embedded.size(), false);
  for (const KernelRecord& k : bundle.manifest.kernels) {
    for (const CubinRecord& c : k.cubins) {
      bool found = false;
      for (std::size_t i = 0; i < embedded.size(); ++i) {
        if (embedded[i].sha256 == c.sha256) {
          used[i] = true;
          found = true;
        }
      }
      if (found) {
        report.matched.push_back(c);
      } else {
        report.missing.emplace_back(k.name, c);
      }
    }
  }
  for (std::size_t i = 0; i < embedded.size(); ++i) {
    if (!used[i]) report.extra.push_back(embedded[i]);
  }
  return report;
}

std::string LibraryReport::to_json() const {
  ordered_json out;
  out["ok"] = ok();
  out["library"] = library.string();
  out["bundle"] = bundle.string();
  out["digest"] = digest;
  out["digest_present"] = digest_present;
  out["embedded_cubins"] = embedded;
  out["matched"] = ordered_json::array();
  for (const CubinRecord& c : matched) out["matched"].push_back(cubin_report(c));
  out["missing"] = ordered_json::array();
  for (const auto& [kernel, c] : missing) {
    ordered_json item = cubin_report(c);
    item["kernel"] = kernel;
    out["missing"].push_back(item);
  }
  out["extra"] = ordered_json::array();
  for (const EmbeddedCubin& e : extra) {
    out["extra"].push_back({{"offset", e.offset},
                            {"size", e.size},
                            {"sha256", e.sha256},
                            {"sm", e.sm == 0 ? ordered_json(nullptr) : ordered_json(architecture_name(e.sm))}});
  }
  return out.dump(2, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace tensoracle::bundle
