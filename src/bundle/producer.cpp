// The producer for CUDA C++ kernels: the kernel spec file, finding nvcc and ptxas, compiling each kernel for each
// architecture (nvcc --ptx, then ptxas) and writing the bundle; also running a tool as a child process.
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bundle/bundle_internal.hpp"
#include "core/posix_file.hpp"
#include "tensoracle/bundle.hpp"
#include "tensoracle/sha256.hpp"

extern char** environ;

namespace tensoracle::bundle {
namespace {

using nlohmann::json;

// The PyPI wheel that carries nvcc and ptxas for CUDA 13, and where it puts them inside site-packages.
constexpr const char* kToolPackage = "nvidia-cuda-nvcc";
constexpr const char* kWheelBin = "nvidia/cu13/bin";
// The most tool output a message quotes.
constexpr std::size_t kQuotedOutput = 4000;

[[noreturn]] void fail(std::string_view where, const std::string& what) {
  throw BundleError(fmt::format("{}: {}", where, what));
}

std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path) {
  PosixFile file = PosixFile::open_read(path);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(file.size()));
  if (!bytes.empty()) file.read_exact(bytes.data(), bytes.size(), 0);
  return bytes;
}

bool is_executable_file(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

std::string tail(const std::string& text) {
  if (text.size() <= kQuotedOutput) return text;
  return "..." + text.substr(text.size() - kQuotedOutput);
}

std::string constant_text(const json& value, std::string_view where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "1" : "0";
  if (value.is_number_integer()) return value.dump();
  fail(where, "a constant's value must be a string, an integer or a boolean");
}

std::vector<std::string> string_list(const json& object, const char* key, std::string_view where) {
  std::vector<std::string> out;
  const auto it = object.find(key);
  if (it == object.end()) return out;
  if (!it->is_array()) fail(where, fmt::format("'{}' must be a list of strings", key));
  for (const json& item : *it) {
    if (!item.is_string()) fail(where, fmt::format("'{}' must be a list of strings", key));
    out.push_back(item.get<std::string>());
  }
  return out;
}

struct TemporaryWorkDirectory {
  std::filesystem::path path;
  TemporaryWorkDirectory() {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string pattern = (base / "tensoracle-producer-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw IoError(
          fmt::format("producer: cannot create a temporary directory in {}: {}", base.string(), errno_message(errno)));
    }
    path = pattern;
  }
  ~TemporaryWorkDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TemporaryWorkDirectory(const TemporaryWorkDirectory&) = delete;
  TemporaryWorkDirectory& operator=(const TemporaryWorkDirectory&) = delete;
};

void run_checked(const std::vector<std::string>& argv, std::string_view where) {
  const ToolResult result = run_tool(argv);
  if (result.exit_status != 0) {
    throw BundleError(fmt::format(
        "{}: {} failed ({}):\n{}\ncommand: {}", where, std::filesystem::path(argv[0]).filename().string(),
        result.exit_status < 0 ? std::string("killed by a signal") : fmt::format("exit status {}", result.exit_status),
        tail(result.output), command_text(argv)));
  }
}

}  // namespace

// ---- child processes ----

ToolResult run_tool(const std::vector<std::string>& argv) {
  if (argv.empty()) throw InvalidArgumentError("run_tool: no command");
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw IoError(fmt::format("cannot create a pipe: {}", errno_message(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (spawned != 0) {
    ::close(pipe_fds[0]);
    throw IoError(fmt::format("cannot run {}: {}", argv[0], errno_message(spawned)));
  }
  ToolResult result;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_=./,:+@%", c) != nullptr;
    });
    out += plain ? a : "'" + a + "'";
  }
  return out;
}

// ---- tools ----

std::filesystem::path find_tool(const std::string& name, const std::filesystem::path& explicit_path,
                                const std::vector<std::filesystem::path>& site_packages) {
  if (!explicit_path.empty()) {
    if (!is_executable_file(explicit_path)) {
      throw NotFoundError(
          fmt::format("{} {}: not an executable file; pass the path of {} (from the PyPI package {} "
                      "or a CUDA toolkit), or leave it out to search for it",
                      name, explicit_path.string(), name, kToolPackage));
    }
    return std::filesystem::absolute(explicit_path);
  }
  std::vector<std::filesystem::path> searched;
  for (const auto& site : site_packages) searched.push_back(site / kWheelBin / name);
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest(path);
    while (!rest.empty()) {
      const std::size_t colon = std::min(rest.find(':'), rest.size());
      const std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) searched.push_back(std::filesystem::path(std::string(dir)) / name);
      rest.remove_prefix(std::min(colon + 1, rest.size()));
    }
  }
  searched.push_back(std::filesystem::path("/usr/local/cuda/bin") / name);
  // PATH often names a directory twice: each is searched (and named in the message) once.
  std::vector<std::filesystem::path> unique;
  for (const auto& candidate : searched) {
    if (std::find(unique.begin(), unique.end(), candidate) == unique.end()) unique.push_back(candidate);
  }
  searched = std::move(unique);
  for (const auto& candidate : searched) {
    if (is_executable_file(candidate)) return std::filesystem::absolute(candidate);
  }
  std::vector<std::string> where;
  for (const auto& s : searched) where.push_back(s.string());
  throw NotFoundError(
      fmt::format("{} not found: install the PyPI package {} (`pip install {}`, which puts it in "
                  "site-packages/{}/) or a CUDA toolkit, or pass the tool's path; searched: {}",
                  name, kToolPackage, kToolPackage, kWheelBin, fmt::join(where, ", ")));
}

std::string cuda_tool_version(const std::filesystem::path& tool) {
  const ToolResult result = run_tool({tool.string(), "--version"});
  static const std::regex version(R"(release [0-9]+\.[0-9]+, V([0-9]+\.[0-9]+\.[0-9]+))");
  std::smatch match;
  if (result.exit_status != 0 || !std::regex_search(result.output, match, version)) {
    throw BundleError(fmt::format("{} --version printed no CUDA release (exit status {}): {}; is it a CUDA tool?",
                                  tool.string(), result.exit_status, tail(result.output)));
  }
  return match[1].str();
}

// ---- the kernel spec ----

KernelSpecFile parse_kernel_spec(std::string_view json_text, std::string_view where) {
  json doc;
  try {
    doc = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    fail(where, fmt::format("not valid JSON ({})", e.what()));
  }
  if (!doc.is_object()) fail(where, "must be a JSON object with a \"kernels\" list");
  for (const auto& item : doc.items()) {
    if (item.key() != "kernels" && item.key() != "architectures") {
      fail(where, fmt::format("unknown field '{}' (a kernel spec has: kernels, architectures)", item.key()));
    }
  }
  KernelSpecFile spec;
  if (const auto it = doc.find("architectures"); it != doc.end()) {
    if (!it->is_array() || it->empty()) fail(where, "'architectures' must be a non-empty list such as [\"sm86\"]");
    for (const json& a : *it) {
      if (!a.is_string()) fail(where, "'architectures' must list names such as \"sm86\"");
      spec.architectures.push_back(parse_architecture(a.get<std::string>(), fmt::format("{}: architecture", where)));
    }
    std::sort(spec.architectures.begin(), spec.architectures.end());
    spec.architectures.erase(std::unique(spec.architectures.begin(), spec.architectures.end()),
                             spec.architectures.end());
  }
  const auto kernels = doc.find("kernels");
  if (kernels == doc.end() || !kernels->is_array() || kernels->empty()) {
    fail(where, "'kernels' must be a non-empty list of kernels");
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < kernels->size(); ++i) {
    const json& k = (*kernels)[i];
    std::string w = fmt::format("{}: kernel {}", where, i);
    if (!k.is_object() || !k.contains("name") || !k["name"].is_string()) fail(w, "must be an object with a \"name\"");
    KernelSpec kernel;
    kernel.name = k["name"].get<std::string>();
    w = fmt::format("{} '{}'", w, kernel.name);
    check_kernel_name(kernel.name, w);
    if (!names.insert(kernel.name).second) fail(where, fmt::format("two kernels are named '{}'", kernel.name));
    for (const auto& item : k.items()) {
      static const std::set<std::string> known = {"name",      "source",  "entry",        "kind",       "args",
                                                  "constants", "threads", "shared_bytes", "nvcc_flags", "ptxas_flags"};
      if (known.count(item.key()) == 0) {
        fail(w, fmt::format("unknown field '{}' (a kernel has: name, source, entry, args, constants, threads, "
                            "shared_bytes, nvcc_flags, ptxas_flags, kind)",
                            item.key()));
      }
    }
    if (k.contains("kind") && k["kind"] != "cuda") {
      fail(w,
           "this producer compiles CUDA C++ kernels (kind \"cuda\"); compile Triton kernels with "
           "tensoracle.producer.compile_bundle in Python");
    }
    if (!k.contains("source") || !k["source"].is_string()) fail(w, "'source' (the .cu file) is missing");
    kernel.source = k["source"].get<std::string>();
    check_relative_path(kernel.source, w + ": source");
    kernel.entry = kernel.name;
    if (k.contains("entry")) {
      if (!k["entry"].is_string()) fail(w, "'entry' must be a string");
      kernel.entry = k["entry"].get<std::string>();
    }
    check_entry_name(kernel.entry, w);
    if (!k.contains("args") || !k["args"].is_array()) fail(w, "'args' (the kernel's parameters, in order) is missing");
    for (std::size_t j = 0; j < k["args"].size(); ++j) {
      const json& a = k["args"][j];
      const std::string aw = fmt::format("{} arg {}", w, j);
      if (!a.is_object()) fail(aw, "must be an object {\"name\", \"type\"[, \"count\", \"divisibility\"]}");
      for (const auto& item : a.items()) {
        if (item.key() != "name" && item.key() != "type" && item.key() != "count" && item.key() != "divisibility") {
          fail(aw, fmt::format("unknown field '{}' (an arg has: name, type, count, divisibility)", item.key()));
        }
      }
      Arg arg;
      if (!a.contains("name") || !a["name"].is_string()) fail(aw, "'name' is missing");
      arg.name = a["name"].get<std::string>();
      if (!a.contains("type") || !a["type"].is_string()) fail(aw, "'type' is missing");
      const auto type = arg_type_from_name(a["type"].get<std::string>());
      if (!type) {
        fail(aw, fmt::format("unknown type '{}': use pointer, i32, i64, u32, u64, f32 or f64",
                             a["type"].get<std::string>()));
      }
      arg.type = *type;
      for (const char* key : {"count", "divisibility"}) {
        if (!a.contains(key)) continue;
        if (!a[key].is_number_integer() || a[key].get<std::int64_t>() < 1 || a[key].get<std::int64_t>() > 65536) {
          fail(aw, fmt::format("'{}' must be an integer from 1 to 65536", key));
        }
        (std::string_view(key) == "count" ? arg.count : arg.divisibility) = a[key].get<int>();
      }
      kernel.args.push_back(std::move(arg));
    }
    if (k.contains("constants")) {
      if (!k["constants"].is_object()) fail(w, "'constants' must be an object {\"NAME\": value}");
      for (const auto& item : k["constants"].items()) {
        check_identifier(item.key(), w + ": constant");
        kernel.constants.push_back({item.key(), constant_text(item.value(), w)});
        check_constant_value(kernel.constants.back().value, w);
      }
    }
    for (const char* key : {"threads", "shared_bytes"}) {
      if (!k.contains(key)) continue;
      const std::int64_t high = std::string_view(key) == "threads" ? 1024 : 0xffffffffLL;
      if (!k[key].is_number_integer() || k[key].get<std::int64_t>() < 0 || k[key].get<std::int64_t>() > high) {
        fail(w, fmt::format("'{}' must be an integer from 0 to {}", key, high));
      }
      if (std::string_view(key) == "threads") {
        kernel.threads = k[key].get<int>();
      } else {
        kernel.shared_bytes = k[key].get<std::uint32_t>();
      }
    }
    kernel.nvcc_flags = string_list(k, "nvcc_flags", w);
    kernel.ptxas_flags = string_list(k, "ptxas_flags", w);
    spec.kernels.push_back(std::move(kernel));
  }
  return spec;
}

// ---- compiling ----

CompiledKernels compile_cuda_kernels(const KernelSpecFile& spec, const std::filesystem::path& source_root,
                                     const ProducerOptions& options) {
  CompiledKernels out;
  out.architectures = options.architectures;
  if (out.architectures.empty()) out.architectures = spec.architectures;
  if (out.architectures.empty()) out.architectures = default_architectures();
  for (int sm : out.architectures) check_known_architecture(sm, "producer architectures");
  std::sort(out.architectures.begin(), out.architectures.end());
  out.architectures.erase(std::unique(out.architectures.begin(), out.architectures.end()), out.architectures.end());
  if (spec.kernels.empty()) return out;

  const std::filesystem::path nvcc = find_tool("nvcc", options.nvcc, options.site_packages);
  const std::filesystem::path ptxas = find_tool("ptxas", options.ptxas, options.site_packages);
  out.tools = {{"nvcc", cuda_tool_version(nvcc)}, {"ptxas", cuda_tool_version(ptxas)}};

  const std::filesystem::path base = source_root.empty() ? "." : source_root;
  TemporaryWorkDirectory work;
  for (const KernelSpec& k : spec.kernels) {
    check_relative_path(k.source, fmt::format("kernel '{}': source", k.name));
    const std::filesystem::path source = base / k.source;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(source, ec)) {
      throw BundleError(fmt::format("kernel '{}': source {} is not a file (sources are relative to {})", k.name,
                                    source.string(), base.string()));
    }
    const std::vector<std::uint8_t> source_bytes = read_bytes(source);
    CompiledKernel compiled;
    KernelRecord& r = compiled.record;
    r.name = k.name;
    r.entry = k.entry.empty() ? k.name : k.entry;
    r.kind = KernelKind::kCuda;
    r.args = k.args;
    r.constants = k.constants;
    r.threads = k.threads;
    r.scratch_pointers = 0;
    r.source = k.source;
    r.source_sha256 = sha256_hex(source_bytes.data(), source_bytes.size());
    for (int sm : out.architectures) {
      const std::string where = fmt::format("kernel '{}' ({}, {})", k.name, architecture_name(sm), source.string());
      const std::filesystem::path ptx = work.path / fmt::format("{}.sm{}.ptx", k.name, sm);
      const std::filesystem::path cubin = work.path / fmt::format("{}.sm{}.cubin", k.name, sm);
      std::vector<std::string> nvcc_argv = {nvcc.string(), "--ptx", fmt::format("-arch=compute_{}", sm), "-std=c++17",
                                            "-O3"};
      for (const ConstantValue& c : k.constants) nvcc_argv.push_back(fmt::format("-D{}={}", c.name, c.value));
      nvcc_argv.insert(nvcc_argv.end(), k.nvcc_flags.begin(), k.nvcc_flags.end());
      nvcc_argv.insert(nvcc_argv.end(), {"-o", ptx.string(), source.string()});
      run_checked(nvcc_argv, where);
      std::vector<std::string> ptxas_argv = {ptxas.string(), fmt::format("-arch=sm_{}", sm)};
      ptxas_argv.insert(ptxas_argv.end(), k.ptxas_flags.begin(), k.ptxas_flags.end());
      ptxas_argv.insert(ptxas_argv.end(), {"-o", cubin.string(), ptx.string()});
      run_checked(ptxas_argv, where);
      CompiledCubin c;
      c.sm = sm;
      c.bytes = read_bytes(cubin);
      c.shared_bytes = k.shared_bytes;
      compiled.cubins.push_back(std::move(c));
    }
    out.kernels.push_back(std::move(compiled));
  }
  return out;
}

Manifest compile_bundle(const std::filesystem::path& spec_file, const std::filesystem::path& out_directory,
                        const ProducerOptions& options) {
  const std::vector<std::uint8_t> spec_bytes = read_bytes(spec_file);
  const KernelSpecFile spec = parse_kernel_spec(
      std::string_view(reinterpret_cast<const char*>(spec_bytes.data()), spec_bytes.size()), spec_file.string());
  CompiledKernels compiled = compile_cuda_kernels(spec, spec_file.parent_path(), options);
  return write_bundle(std::move(compiled.kernels), compiled.architectures, compiled.tools, out_directory);
}

}  // namespace tensoracle::bundle
