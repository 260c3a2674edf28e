// Writing a bundle: every kernel's cubins checked (SM, entry, parameter ABI, scratch), then bundle.json, the cubins
// and the generated bundle.cpp written into a temporary directory that is renamed into place.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "bundle/bundle_internal.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/bundle.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle::bundle {
namespace {

std::string sizes_text(const std::vector<std::uint32_t>& sizes) {
  return sizes.empty() ? std::string("no parameters") : fmt::format("sizes [{}] bytes", fmt::join(sizes, ", "));
}

// The parameter sizes the declared args and scratch pointers make, in order.
std::vector<std::uint32_t> declared_sizes(const KernelRecord& k) {
  std::vector<std::uint32_t> sizes;
  for (const Arg& a : k.args) {
    for (int i = 0; i < a.count; ++i) sizes.push_back(static_cast<std::uint32_t>(arg_type_size(a.type)));
  }
  for (int i = 0; i < k.scratch_pointers; ++i) sizes.push_back(8);
  return sizes;
}

void check_abi(const KernelRecord& k, const CompiledCubin& c, std::string_view where) {
  const std::vector<CubinParam> params = cubin_kernel_params(c.bytes.data(), c.bytes.size(), k.entry, where);
  std::vector<std::uint32_t> actual;
  for (const CubinParam& p : params) actual.push_back(p.size);
  const std::vector<std::uint32_t> expected = declared_sizes(k);
  if (actual == expected) return;
  std::vector<std::string> declared;
  for (const Arg& a : k.args) {
    declared.push_back(a.count == 1 ? fmt::format("{}: {}", a.name, arg_type_name(a.type))
                                    : fmt::format("{}: {}[{}]", a.name, arg_type_name(a.type), a.count));
  }
  throw BundleError(fmt::format(
      "{}: the parameter ABI of entry '{}' differs from the declared args: the cubin's entry takes {} parameters of "
      "{}, but args [{}]{} make {} of {}; declare the args as the kernel's parameter list has them",
      where, k.entry, actual.size(), sizes_text(actual), fmt::join(declared, ", "),
      k.scratch_pointers ? fmt::format(" plus {} scratch pointers", k.scratch_pointers) : std::string(),
      expected.size(), sizes_text(expected)));
}

// A C++ string literal for any bytes (octal escapes for everything outside printable ASCII and for '?', so that no
// trigraph or escape can form).
std::string cpp_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f || c == '?') {
      out += fmt::format("\\{:03o}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string arg_type_enumerator(cubin::ArgType type) {
  switch (type) {
    case cubin::ArgType::kPointer: return "kPointer";
    case cubin::ArgType::kI32: return "kI32";
    case cubin::ArgType::kI64: return "kI64";
    case cubin::ArgType::kU32: return "kU32";
    case cubin::ArgType::kU64: return "kU64";
    case cubin::ArgType::kF32: return "kF32";
    case cubin::ArgType::kF64: return "kF64";
  }
  return "kPointer";
}

void write_file(const std::filesystem::path& path, const void* data, std::size_t size) {
  PosixFile file = PosixFile::create_exclusive(path, 0644);
  file.write_all(data, size);
  file.sync();
  file.close();
}

void sync_directory(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the files themselves are synced
  ::fsync(fd);
  ::close(fd);
}

// Removes a temporary directory unless it was moved into place.
struct TemporaryDirectory {
  std::filesystem::path path;
  bool keep = false;
  ~TemporaryDirectory() {
    if (!keep && !path.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
};

std::filesystem::path make_temporary_directory(const std::filesystem::path& parent, const std::string& stem) {
  std::string pattern = (parent / ("." + stem + ".tmp-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw IoError(
        fmt::format("bundle: cannot create a temporary directory in {}: {}", parent.string(), errno_message(errno)));
  }
  return pattern;
}

// True when `to` exists; BundleError when it exists but is neither an empty directory nor a bundle.
bool check_replaceable(const std::filesystem::path& to) {
  std::error_code ec;
  const auto status = std::filesystem::symlink_status(to, ec);
  if (!std::filesystem::exists(status)) return false;
  if (!std::filesystem::is_directory(status) ||
      (!std::filesystem::is_empty(to, ec) && !std::filesystem::exists(to / "bundle.json", ec))) {
    throw BundleError(
        fmt::format("bundle: {} exists and is not a bundle directory (no bundle.json); choose another "
                    "output directory or remove it",
                    to.string()));
  }
  return true;
}

// Moves the finished directory `from` to `to`, replacing an empty directory or an older bundle there.
void replace_directory(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  if (!check_replaceable(to)) {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      throw IoError(
          fmt::format("bundle: cannot rename {} to {}: {}", from.string(), to.string(), errno_message(errno)));
    }
    return;
  }
  // Swap atomically where the kernel can (readers see the old bundle or the new one), else move the old one aside.
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    std::filesystem::remove_all(from, ec);
    return;
  }
  const std::filesystem::path old = from.string() + ".old";
  if (::rename(to.c_str(), old.c_str()) != 0) {
    throw IoError(fmt::format("bundle: cannot move the old bundle {} aside: {}", to.string(), errno_message(errno)));
  }
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int error = errno;
    ::rename(old.c_str(), to.c_str());
    throw IoError(fmt::format("bundle: cannot rename {} to {}: {}", from.string(), to.string(), errno_message(error)));
  }
  std::filesystem::remove_all(old, ec);
}

}  // namespace

std::string generate_bundle_cpp(const Manifest& manifest,
                                const std::vector<std::vector<std::vector<std::uint8_t>>>& cubins) {
  std::string out;
  out += fmt::format(
      "// The cubins of bundle {} for a plugin library, generated by tensoracle's bundle producer from bundle.json: do "
      "not edit.\n#include \"tensoracle/cubin_bundle.hpp\"\n\nnamespace tensoracle::cubin {{\nnamespace {{\n\n",
      manifest.digest);
  for (std::size_t k = 0; k < manifest.kernels.size(); ++k) {
    const KernelRecord& kernel = manifest.kernels[k];
    out += fmt::format("// kernel {}: {}\n", k, kernel.name);
    for (std::size_t i = 0; i < kernel.cubins.size(); ++i) {
      const std::vector<std::uint8_t>& bytes = cubins.at(k).at(i);
      out += fmt::format("alignas(64) const unsigned char kCubin{}_{}[{}] = {{  // {}\n", k, i, bytes.size(),
                         kernel.cubins[i].path);
      for (std::size_t b = 0; b < bytes.size(); ++b) {
        out += fmt::format("{}0x{:02x},", b % 16 == 0 ? "  " : " ", bytes[b]);
        if (b % 16 == 15 || b + 1 == bytes.size()) out += '\n';
      }
      out += "};\n";
    }
    if (!kernel.args.empty()) {
      out += fmt::format("const ArgSpec kArgs{}[] = {{\n", k);
      for (const Arg& a : kernel.args) {
        out += fmt::format("  {{{}, ArgType::{}, {}, {}}},\n", cpp_string(a.name), arg_type_enumerator(a.type), a.count,
                           a.divisibility);
      }
      out += "};\n";
    }
    if (!kernel.constants.empty()) {
      out += fmt::format("const Constant kConstants{}[] = {{\n", k);
      for (const ConstantValue& c : kernel.constants) {
        out += fmt::format("  {{{}, {}}},\n", cpp_string(c.name), cpp_string(c.value));
      }
      out += "};\n";
    }
    out += fmt::format("const Image kImages{}[] = {{\n", k);
    for (std::size_t i = 0; i < kernel.cubins.size(); ++i) {
      const CubinRecord& c = kernel.cubins[i];
      out += fmt::format("  {{{}, kCubin{}_{}, sizeof(kCubin{}_{}), {}, {}u}},\n", c.sm, k, i, k, i,
                         cpp_string(c.sha256), c.shared_bytes);
    }
    out += "};\n\n";
  }
  out += "const KernelRecord kKernels[] = {\n";
  for (std::size_t k = 0; k < manifest.kernels.size(); ++k) {
    const KernelRecord& kernel = manifest.kernels[k];
    out += fmt::format("  {{{}, {}, {}, {}, {}, {}, {}, {}, kImages{}, {}, {}}},\n", cpp_string(kernel.name),
                       cpp_string(kernel.entry), kernel.args.empty() ? "nullptr" : fmt::format("kArgs{}", k),
                       kernel.args.size(), kernel.scratch_pointers, kernel.threads,
                       kernel.constants.empty() ? "nullptr" : fmt::format("kConstants{}", k), kernel.constants.size(),
                       k, kernel.cubins.size(), cpp_string(kernel.source_sha256));
  }
  out += "};\n\n";
  out += fmt::format("const Bundle kBundle = {{{}, kKernels, {}}};\n\n}}  // namespace\n\n",
                     cpp_string(manifest.digest), manifest.kernels.size());
  out += "const Bundle& embedded_bundle() noexcept { return kBundle; }\n\n}  // namespace tensoracle::cubin\n";
  return out;
}

Manifest write_bundle(std::vector<CompiledKernel> kernels, const std::vector<int>& architectures_in,
                      const std::map<std::string, std::string>& tools, const std::filesystem::path& out_directory) {
  // ---- check everything before writing anything ----
  std::vector<int> architectures = architectures_in;
  std::sort(architectures.begin(), architectures.end());
  architectures.erase(std::unique(architectures.begin(), architectures.end()), architectures.end());
  if (architectures.empty()) throw CubinArchitectureError("bundle: no architectures; name at least one (e.g. sm86)");
  for (int sm : architectures) check_known_architecture(sm, "bundle architectures");
  if (kernels.empty()) throw BundleError("bundle: no kernels; a bundle holds at least one");
  for (const auto& [tool, version] : tools) {
    if (tool.empty() || version.empty()) throw BundleError("bundle: a tool version record has an empty name or value");
  }
  Manifest manifest;
  manifest.architectures = architectures;
  manifest.tools = tools;
  std::set<std::string> names;
  std::vector<std::vector<std::vector<std::uint8_t>>> cubin_bytes;
  for (CompiledKernel& compiled : kernels) {
    KernelRecord& k = compiled.record;
    const std::string where = fmt::format("bundle kernel '{}'", k.name);
    check_kernel_name(k.name, "bundle");
    if (!names.insert(k.name).second) throw BundleError(fmt::format("bundle: two kernels are named '{}'", k.name));
    check_entry_name(k.entry, where);
    std::set<std::string> arg_names;
    for (const Arg& a : k.args) {
      check_identifier(a.name, where + ": argument name");
      if (!arg_names.insert(a.name).second)
        throw BundleError(fmt::format("{}: two args are named '{}'", where, a.name));
      if (a.count < 1 || a.divisibility < 1) {
        throw BundleError(fmt::format("{}: arg '{}' needs count >= 1 and divisibility >= 1", where, a.name));
      }
    }
    std::sort(k.constants.begin(), k.constants.end(),
              [](const ConstantValue& a, const ConstantValue& b) { return a.name < b.name; });
    for (const ConstantValue& c : k.constants) {
      check_identifier(c.name, where + ": constant name");
      check_constant_value(c.value, where);
    }
    check_unique_sorted_constants(k.constants, where);
    if (k.threads < 0 || k.threads > 1024) {
      throw BundleError(fmt::format("{}: threads {}; use 1..1024, or 0 to let the caller choose", where, k.threads));
    }
    check_scratch_pointers(k.kind, k.scratch_pointers, where);
    check_relative_path(k.source, where + ": source path");
    if (k.source_sha256.size() != 64) throw BundleError(fmt::format("{}: source_sha256 is not a SHA-256", where));
    std::sort(compiled.cubins.begin(), compiled.cubins.end(),
              [](const CompiledCubin& a, const CompiledCubin& b) { return a.sm < b.sm; });
    std::vector<int> sms;
    for (const CompiledCubin& c : compiled.cubins) sms.push_back(c.sm);
    if (sms != architectures) {
      std::vector<std::string> have, want;
      for (int sm : sms) have.push_back(architecture_name(sm));
      for (int sm : architectures) want.push_back(architecture_name(sm));
      throw CubinArchitectureError(fmt::format("{}: has cubins for [{}]; the bundle needs one for each of [{}]", where,
                                               fmt::join(have, ", "), fmt::join(want, ", ")));
    }
    k.cubins.clear();
    std::vector<std::vector<std::uint8_t>> bytes_of_kernel;
    for (CompiledCubin& c : compiled.cubins) {
      const std::string cubin_where = fmt::format("{} ({})", where, architecture_name(c.sm));
      const int sm = cubin_sm(c.bytes.data(), c.bytes.size(), cubin_where);
      if (sm != c.sm) {
        throw CubinArchitectureError(
            fmt::format("{}: the cubin's ELF header says {}; it was compiled for another "
                        "architecture",
                        cubin_where, architecture_name(sm)));
      }
      if (c.scratch_bytes != 0) {
        throw BundleError(
            fmt::format("{}: needs {} bytes of global/profile scratch memory per launch; bundle kernels "
                        "must need none (the launcher passes null scratch pointers): change the kernel "
                        "so that it needs no scratch",
                        cubin_where, c.scratch_bytes));
      }
      check_abi(k, c, cubin_where);
      CubinRecord record;
      record.sm = c.sm;
      record.path = fmt::format("cubins/{}/{}.cubin", architecture_name(c.sm), k.name);
      record.sha256 = sha256_hex(c.bytes.data(), c.bytes.size());
      record.size = c.bytes.size();
      record.shared_bytes = c.shared_bytes;
      k.cubins.push_back(record);
      bytes_of_kernel.push_back(std::move(c.bytes));
    }
    check_cubin_records(k, architectures, "bundle");
    manifest.kernels.push_back(k);
    cubin_bytes.push_back(std::move(bytes_of_kernel));
  }
  manifest.digest = compute_digest(manifest);
  const std::string json_text = manifest_json(manifest);
  const std::string cpp_text = generate_bundle_cpp(manifest, cubin_bytes);

  // ---- write: a temporary directory beside the output, then one rename ----
  std::filesystem::path out = out_directory.lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  if (out.empty()) throw BundleError("bundle: no output directory given");
  check_replaceable(out);
  std::filesystem::path parent = out.parent_path();
  if (parent.empty()) parent = ".";
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) throw IoError(fmt::format("bundle: cannot create {}: {}", parent.string(), ec.message()));
  TemporaryDirectory temporary{make_temporary_directory(parent, out.filename().string())};
  ::chmod(temporary.path.c_str(), 0755);  // mkdtemp made it private; a bundle is an ordinary directory
  for (int sm : architectures) {
    std::filesystem::create_directories(temporary.path / "cubins" / architecture_name(sm), ec);
    if (ec) throw IoError(fmt::format("bundle: cannot create {}: {}", temporary.path.string(), ec.message()));
  }
  for (std::size_t k = 0; k < manifest.kernels.size(); ++k) {
    for (std::size_t i = 0; i < manifest.kernels[k].cubins.size(); ++i) {
      const auto& bytes = cubin_bytes[k][i];
      write_file(temporary.path / manifest.kernels[k].cubins[i].path, bytes.data(), bytes.size());
    }
  }
  write_file(temporary.path / "bundle.cpp", cpp_text.data(), cpp_text.size());
  write_file(temporary.path / "bundle.json", json_text.data(), json_text.size());
  for (int sm : architectures) sync_directory(temporary.path / "cubins" / architecture_name(sm));
  sync_directory(temporary.path / "cubins");
  sync_directory(temporary.path);
  replace_directory(temporary.path, out);
  temporary.keep = true;
  sync_directory(parent);
  return manifest;
}

}  // namespace tensoracle::bundle
