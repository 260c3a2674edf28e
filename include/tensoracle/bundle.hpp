// Cubin bundles (docs/cubin-bundles.md): the bundle.json format, reading a cubin's SM, inspecting a bundle and a
// plugin library that embeds one, and the producer that compiles CUDA C++ kernels into a bundle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/cubin_bundle.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {

// A bundle, a kernel spec or a cubin is invalid, or a bundle check failed (a digest, a path, a parameter ABI, a
// scratch requirement, a tool's output). The message names the file and the kernel and says what to do.
class BundleError : public Error {
 public:
  using Error::Error;
};

// A cubin's architecture is wrong (not the SM its directory or record says), unknown (an SM or an ELF ABI version this
// library does not know) or not allowed (not among the bundle's or the caller's architectures).
class CubinArchitectureError : public BundleError {
 public:
  using BundleError::BundleError;
};

namespace bundle {

// The bundle.json format version this library writes and reads.
inline constexpr int kFormatVersion = 1;
// bundle.json's "format" value.
inline constexpr const char* kFormatName = "tensoracle.cubin-bundle";

// ---- architectures: an SM is 10 * major + minor (86, 90, 120) ----

// sm80, sm86, sm89, sm90, sm120: what the producer compiles for when the caller names none.
std::vector<int> default_architectures();
// Every SM a bundle may hold (sm75 to sm121).
const std::vector<int>& known_architectures();
// "sm86", "sm_86" or "86" → 86; CubinArchitectureError naming `what` for anything else or an unknown SM.
int parse_architecture(std::string_view text, std::string_view what = "architecture");
// "sm80,sm86" → {80, 86} (sorted, duplicates removed); CubinArchitectureError for an empty list or a bad entry.
std::vector<int> parse_architectures(std::string_view comma_list, std::string_view what = "architectures");
// 86 → "sm86".
std::string architecture_name(int sm);

// ---- cubins ----

// The SM a cubin was compiled for, from its ELF header: e_flags' low byte for ELF ABI version 7 (ptxas up to 12.x),
// e_flags bits 8-15 for ABI version 8 (ptxas 13.x, and 12.9 for some SMs). BundleError when the bytes are shorter
// than an ELF header or not a 64-bit little-endian CUDA ELF (e_machine 190); CubinArchitectureError for another ABI
// version or an unknown SM. `where` names the bytes in messages.
int cubin_sm(const void* data, std::size_t size, std::string_view where = "cubin");
int cubin_sm_file(const std::filesystem::path& path);

// One parameter of a kernel entry as the cubin's .nv.info.<entry> section (EIATTR_KPARAM_INFO) records it.
struct CubinParam {
  int ordinal = 0;
  std::uint32_t offset = 0;  // in the parameter constant bank
  std::uint32_t size = 0;    // bytes
};

// The parameters of `entry` in a cubin, in ordinal order. BundleError when the cubin has no such entry or its
// parameter records are inconsistent (a gap in the ordinals, overlapping offsets, a size that disagrees with
// EIATTR_PARAM_CBANK / EIATTR_CBANK_PARAM_SIZE).
std::vector<CubinParam> cubin_kernel_params(const void* data, std::size_t size, const std::string& entry,
                                            std::string_view where = "cubin");
// The kernel entries a cubin defines (the names of its .text.<entry> sections), sorted.
std::vector<std::string> cubin_entries(const void* data, std::size_t size, std::string_view where = "cubin");

// ---- the records of bundle.json ----

enum class KernelKind { kCuda, kTriton };
std::string_view kernel_kind_name(KernelKind kind);  // "cuda", "triton"
std::optional<KernelKind> kernel_kind_from_name(std::string_view name);

std::string_view arg_type_name(cubin::ArgType type);  // "pointer", "i32", "i64", "u32", "u64", "f32", "f64"
std::optional<cubin::ArgType> arg_type_from_name(std::string_view name);
std::size_t arg_type_size(cubin::ArgType type);  // bytes of one kernel parameter of the type

// One public argument of a kernel: `count` consecutive parameters of `type`.
struct Arg {
  std::string name;
  cubin::ArgType type = cubin::ArgType::kPointer;
  int count = 1;
  int divisibility = 1;  // the values (addresses, for pointers) are multiples of it; 1: no rule
};

// A compile-time constant: a -D define for CUDA C++, a tl.constexpr for Triton.
struct ConstantValue {
  std::string name;
  std::string value;
};

// One kernel's cubin for one architecture, as bundle.json records it.
struct CubinRecord {
  int sm = 0;
  std::string path;  // relative to the bundle: cubins/sm<NN>/<kernel>.cubin
  std::string sha256;
  std::uint64_t size = 0;
  std::uint32_t shared_bytes = 0;  // dynamic shared memory a launch needs
};

struct KernelRecord {
  std::string name;   // [A-Za-z0-9_.-]+, not starting with '.': also the cubins' file name
  std::string entry;  // the function in the cubins
  KernelKind kind = KernelKind::kCuda;
  std::vector<Arg> args;
  std::vector<ConstantValue> constants;  // sorted by name
  int threads = 0;                       // threads per block it was compiled for; 0: the caller chooses
  int scratch_pointers = 0;              // 0 (CUDA C++) or 2 (Triton: global and profile scratch)
  std::string source;                    // relative path of the source file (to the kernel spec or the caller)
  std::string source_sha256;
  std::vector<CubinRecord> cubins;  // one per architecture, by SM
};

// bundle.json.
struct Manifest {
  int format_version = kFormatVersion;
  std::vector<int> architectures;            // sorted
  std::map<std::string, std::string> tools;  // "nvcc", "ptxas", "triton": version strings
  std::vector<KernelRecord> kernels;         // in the producer's order
  std::string digest;                        // SHA-256 of the canonical serialization of everything else
};

// The canonical serialization the digest covers (everything but "digest": object keys sorted, no whitespace; what
// Python's json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False) writes).
std::string canonical_json(const Manifest& manifest);
// SHA-256 (lower-case hex) of canonical_json(manifest).
std::string compute_digest(const Manifest& manifest);
// bundle.json as the producer writes it (indented, with the digest).
std::string manifest_json(const Manifest& manifest);
// Parses and validates bundle.json text: strict schema (no unknown or duplicate keys, exact types), safe relative
// paths, names, architectures, and the digest. BundleError / CubinArchitectureError naming `where` otherwise.
Manifest parse_manifest(std::string_view json_text, std::string_view where = "bundle.json");

// BundleError naming `what` unless `path` is a relative, '/'-separated path that stays inside its root: not empty,
// not absolute (POSIX "/x"), no Windows drive ("C:") or root ("\x"), no backslash, no "..", "." or empty component.
void check_relative_path(std::string_view path, std::string_view what);

// ---- inspection ----

// What inspect_bundle found: the manifest of a bundle whose every check passed.
struct BundleReport {
  std::filesystem::path directory;
  Manifest manifest;
  std::string to_json() const;  // {"bundle", "digest", "format_version", "architectures", "tools", "kernels": [...]}
};

// Checks a bundle directory: bundle.json (schema, digest), and for every cubin that its path is safe and inside the
// directory, the file exists, its size and SHA-256 match, its ELF SM equals its record's and its directory's
// (sm<NN>), and the SM is one of the bundle's architectures (and of `allowed` when that is not empty). Throws
// BundleError / CubinArchitectureError / IoError for the first failure.
BundleReport inspect_bundle(const std::filesystem::path& directory, const std::vector<int>& allowed = {});

// A CUDA ELF image found inside another file.
struct EmbeddedCubin {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::string sha256;
  int sm = 0;  // 0 when its header names no SM this library knows
};

// Every CUDA ELF image (magic \x7fELF, e_machine 190) inside `data`, its size taken from the furthest end of its
// section and program header tables and of the sections and segments they describe.
std::vector<EmbeddedCubin> find_embedded_cubins(const void* data, std::size_t size);

// Whether a plugin library embeds exactly one bundle's cubins.
struct LibraryReport {
  std::filesystem::path library;
  std::filesystem::path bundle;
  std::string digest;
  bool digest_present = false;  // the bundle's digest string occurs in the library
  std::vector<CubinRecord> matched;
  std::vector<std::pair<std::string, CubinRecord>> missing;  // (kernel, cubin) of the bundle not in the library
  std::vector<EmbeddedCubin> extra;                          // CUDA images in the library not in the bundle
  std::size_t embedded = 0;                                  // CUDA images found in the library
  bool ok() const { return digest_present && missing.empty() && extra.empty(); }
  std::string to_json() const;
};

// inspect_bundle(bundle_directory), then scans the library file for embedded cubins and compares their SHA-256 with
// the bundle's. A mismatch is reported (ok() false), not thrown; an invalid bundle or unreadable library throws.
LibraryReport inspect_library(const std::filesystem::path& library, const std::filesystem::path& bundle_directory);

// ---- writing a bundle ----

// A cubin compiled by a producer, with what its compiler reported.
struct CompiledCubin {
  int sm = 0;
  std::vector<std::uint8_t> bytes;
  std::uint32_t shared_bytes = 0;
  std::uint64_t scratch_bytes = 0;  // global + profile scratch a launch would need (Triton); must be 0
};

// One kernel of a bundle to write: its record (cubins are filled in by write_bundle) and its compiled cubins.
struct CompiledKernel {
  KernelRecord record;
  std::vector<CompiledCubin> cubins;
};

// Writes a bundle atomically: checks every kernel first (names, one cubin per architecture, each cubin's SM, its
// entry, its parameter ABI against args + scratch_pointers, zero scratch), then writes bundle.json,
// cubins/sm<NN>/<name>.cubin and bundle.cpp into a temporary directory beside `out_directory` and renames it into
// place. An existing `out_directory` is replaced only when it is empty or a bundle (holds bundle.json). Returns the
// manifest written.
Manifest write_bundle(std::vector<CompiledKernel> kernels, const std::vector<int>& architectures,
                      const std::map<std::string, std::string>& tools, const std::filesystem::path& out_directory);

// The C++ translation unit (bundle.cpp) defining cubin::embedded_bundle() for a manifest and its cubins' bytes
// (`cubins[k][i]` for manifest.kernels[k].cubins[i]). It needs only tensoracle/cubin_bundle.hpp and C++17.
std::string generate_bundle_cpp(const Manifest& manifest,
                                const std::vector<std::vector<std::vector<std::uint8_t>>>& cubins);

// ---- the producer for CUDA C++ kernels ----

// One kernel of a kernel spec file (JSON, docs/cubin-bundles.md): source is relative to the spec file's directory.
struct KernelSpec {
  std::string name;
  std::string source;
  std::string entry;  // the extern "C" name (default: name)
  std::vector<Arg> args;
  std::vector<ConstantValue> constants;  // passed as -DNAME=VALUE
  int threads = 0;
  std::uint32_t shared_bytes = 0;
  std::vector<std::string> nvcc_flags;   // extra flags for nvcc --ptx (e.g. "--use_fast_math")
  std::vector<std::string> ptxas_flags;  // extra flags for ptxas (e.g. "--maxrregcount=64")
};

struct KernelSpecFile {
  std::vector<KernelSpec> kernels;
  std::vector<int> architectures;  // empty: the options' or the default
};

// Parses and validates a kernel spec file's text. BundleError naming `where` otherwise.
KernelSpecFile parse_kernel_spec(std::string_view json_text, std::string_view where = "kernel spec");

struct ProducerOptions {
  std::vector<int> architectures;  // overrides the spec's; empty: the spec's, else default_architectures()
  std::filesystem::path nvcc;      // explicit tool paths; empty: searched (find_tool)
  std::filesystem::path ptxas;
  // site-packages directories of the running Python, searched first for the nvidia-cuda-nvcc wheel's
  // nvidia/cu13/bin/ (the Python package passes its own; the command passes none).
  std::vector<std::filesystem::path> site_packages;
};

// The path of a tool: `explicit_path` when given (NotFoundError unless it is an executable file), else the first
// executable `name` in <site-packages>/nvidia/cu13/bin/ for each of `site_packages`, then in PATH, then in
// /usr/local/cuda/bin. NotFoundError naming the PyPI package (nvidia-cuda-nvcc) and every path searched otherwise.
std::filesystem::path find_tool(const std::string& name, const std::filesystem::path& explicit_path,
                                const std::vector<std::filesystem::path>& site_packages);
// "13.0.88" from a CUDA tool's --version output ("... release 13.0, V13.0.88"); BundleError when it has none.
std::string cuda_tool_version(const std::filesystem::path& tool);

// Compiled kernels ready for write_bundle, with the architectures and the tools' versions that made them.
struct CompiledKernels {
  std::vector<CompiledKernel> kernels;
  std::vector<int> architectures;
  std::map<std::string, std::string> tools;  // "nvcc", "ptxas"
};

// Compiles CUDA C++ kernels (sources relative to `source_root`) for each architecture: nvcc --ptx for compute_<NN>
// (constants as -DNAME=VALUE), then ptxas for sm_<NN>. Writes nothing but temporary files; BundleError with the
// tool's output when a compilation fails, NotFoundError when a tool is missing. Needs no GPU.
CompiledKernels compile_cuda_kernels(const KernelSpecFile& spec, const std::filesystem::path& source_root,
                                     const ProducerOptions& options = {});

// Reads a kernel spec file, compiles its kernels (compile_cuda_kernels, sources relative to the spec's directory)
// and writes the bundle (write_bundle): nothing is written unless every kernel compiles and passes its checks.
Manifest compile_bundle(const std::filesystem::path& spec_file, const std::filesystem::path& out_directory,
                        const ProducerOptions& options = {});

}  // namespace bundle
}  // namespace tensoracle
