// The engine cache: its errors, directory, engine file container, weight digest records, and list/prune.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensoracle/builder.hpp"
#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {

// ---- errors (docs/cache.md "Errors") ----

// A saved engine cannot be used for this request. The caller decides whether to rebuild
// (open_engine with force_rebuild, or deleting the file) after one of these.
class EngineCacheError : public Error {
 public:
  using Error::Error;
};

// A saved engine file is incomplete or damaged: wrong magic, truncated, an invalid header, a plan
// whose SHA-256 differs from the header's, or a plan the runtime cannot deserialize.
class CorruptEngineError : public EngineCacheError {
 public:
  using EngineCacheError::EngineCacheError;
};

// A saved engine's header records other build conditions than the ones asked for.
class EngineConditionError : public EngineCacheError {
 public:
  using EngineCacheError::EngineCacheError;
};

// An engine's inputs or outputs differ from the declaration it was opened with.
class EngineIOError : public EngineCacheError {
 public:
  using EngineCacheError::EngineCacheError;
};

// ---- cache directory ----

// $XDG_CACHE_HOME/tensoracle when XDG_CACHE_HOME is set and not empty, else $HOME/.cache/tensoracle
// (the password database's home directory when HOME is unset). Never creates anything.
std::filesystem::path default_cache_directory();

// Creates `directory` (and missing parents) with mode 0700 when it does not exist; IoError naming
// the directory when that fails or when it exists and is not a directory.
void ensure_cache_directory(const std::filesystem::path& directory);

// ---- engine file container (docs/cache.md "Engine files") ----
//
//   "TENSORACLE\x01"            11 bytes of magic
//   header length               8 bytes, unsigned big-endian, > 0
//   header                      canonical UTF-8 JSON object: {"conditions": {...}, "plan_sha256": "<hex>",
//                               "shape_tensor_outputs": [...]}
//   plan                        the engine bytes, at least one byte; SHA-256 in plan_sha256

inline constexpr char kEngineFileMagic[] = "TENSORACLE\x01";
inline constexpr std::size_t kEngineFileMagicSize = sizeof(kEngineFileMagic) - 1;
// Headers longer than this are reported as invalid instead of being read into memory.
inline constexpr std::uint64_t kMaxEngineHeaderBytes = std::uint64_t{64} << 20;

// Serializes a JSON value exactly as Python's json.dumps(value, sort_keys=True,
// separators=(",", ":")) does (ensure_ascii escaping, float repr). `json_text` is any JSON text;
// InvalidArgumentError when it does not parse.
std::string canonical_json(const std::string& json_text);

// What an engine file's header says.
struct EngineHeader {
  std::string conditions_json;             // the "conditions" object, canonical JSON
  std::optional<std::string> plan_sha256;  // absent when the header has no string "plan_sha256"
  std::vector<std::string> shape_tensor_outputs;
  std::uint64_t file_size = 0;
  std::uint64_t plan_offset = 0;  // magic + 8 + header length
  std::uint64_t plan_size() const noexcept { return file_size - plan_offset; }
};

// Reads and checks only the magic, the header length and the header (never the plan).
// CorruptEngineError naming the file: "incomplete engine file" (missing magic, shorter than magic +
// length) or "invalid engine header" (zero length, header reaching the end of the file, bad JSON,
// wrong types); IoError when the file can't be opened or read.
EngineHeader read_engine_header(const std::filesystem::path& path);

struct EngineFileContents {
  EngineHeader header;
  std::vector<std::byte> plan;
};

// Reads a whole engine file and checks, in order: magic and lengths, header JSON, that the header's
// conditions equal `expected_conditions_json` (compared as JSON values; EngineConditionError), and
// the plan's SHA-256 (CorruptEngineError "checksum differs").
EngineFileContents read_engine_file(const std::filesystem::path& path, const std::string& expected_conditions_json);

// Writes an engine file atomically (temporary file in the same directory, fsync, rename) with mode
// 0600. `conditions_json` must be a JSON object; `plan` must not be empty (InvalidArgumentError).
void write_engine_file(const std::filesystem::path& path, const std::string& conditions_json, const void* plan,
                       std::size_t plan_size, const std::vector<std::string>& shape_tensor_outputs = {});

// The canonical header bytes write_engine_file writes (without magic and length).
std::string engine_header_json(const std::string& conditions_json, const std::string& plan_sha256,
                               const std::vector<std::string>& shape_tensor_outputs);

// ---- weight digest records (docs/cache.md "Weight digest records") ----
//
// weight-<SHA-256 hex of the absolute path's bytes>.json in the cache directory, canonical JSON:
//   {"checksum": ..., "device": N, "inode": N, "mtime_ns": N, "path": "/abs/path", "sha256": "<hex>",
//    "size": N, "version": 1}
// where checksum is the SHA-256 hex of the canonical JSON of the record without "checksum".

inline constexpr int kWeightRecordVersion = 1;

// A weight file's identity, from stat() of its absolute (not symlink-resolved) path.
struct WeightFileIdentity {
  std::string path;  // absolute, lexically normalized
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;

  friend bool operator==(const WeightFileIdentity& a, const WeightFileIdentity& b) {
    return a.path == b.path && a.size == b.size && a.mtime_ns == b.mtime_ns && a.device == b.device &&
           a.inode == b.inode;
  }
  friend bool operator!=(const WeightFileIdentity& a, const WeightFileIdentity& b) { return !(a == b); }
};

struct WeightRecord {
  WeightFileIdentity identity;
  std::string sha256;
};

// stat() of `weight_file` made absolute; IoError naming the file when it can't be stat'ed.
WeightFileIdentity weight_file_identity(const std::filesystem::path& weight_file);
// Where the record of an absolute path lives.
std::filesystem::path weight_record_path(const std::filesystem::path& cache_directory,
                                         const std::string& absolute_path);
// The record in `record_file` when it is valid: a JSON object with exactly the fields above,
// version 1, integer identity fields, a 64-digit lower-case hex sha256 and a matching checksum.
// std::nullopt for anything else, including a file that can't be read.
std::optional<WeightRecord> read_weight_record(const std::filesystem::path& record_file);
// The canonical bytes of a record.
std::string weight_record_json(const WeightRecord& record);

// The SHA-256 of a weight file, taken from its record when the record is valid and every identity
// field matches the file now; otherwise (or with `force_rehash`) the file is hashed again and the
// record rewritten atomically (mode 0600; a failure to write it is logged, not thrown). Hashing a
// file of 256 MiB or more reports progress through the logging callback at kInfo.
// `cache_directory` must exist. IoError when the weight file can't be read.
std::string weight_file_sha256(const std::filesystem::path& weight_file, const std::filesystem::path& cache_directory,
                               bool force_rehash = false);

// ---- cache management: list and prune (docs/cache.md "Managing the cache") ----
//
// These read only directory entries, stat() results, engine headers and weight records: never a
// plan body, a weight file or a GPU. They never change a file's contents or times, except that
// execute_prune removes the selected files.

enum class CacheEntryStatus : std::uint8_t {
  kRecognized,          // "recognized": the header is valid
  kBuildingOrLeftover,  // "building or leftover": an empty file (a build in progress, or a crashed one)
  kUnrecognized,        // "unrecognized": unreadable or invalid header; `reason` says why
};
const char* to_string(CacheEntryStatus status) noexcept;

struct CacheWeightPaths {
  std::string sha256;
  std::vector<std::string> paths;  // from valid weight records with this sha256; empty: unknown
};

// One `*.engine` file of the cache directory.
struct CacheEntry {
  std::string file;  // file name within the directory
  std::uint64_t size_bytes = 0;
  std::int64_t recorded_at_ns = 0;  // the file's modification time, ns since the Unix epoch
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  CacheEntryStatus status = CacheEntryStatus::kUnrecognized;
  std::string reason;                          // kUnrecognized only
  std::string conditions_json;                 // kRecognized only: the header's conditions, in the file's key order
  std::vector<CacheWeightPaths> weight_paths;  // kRecognized only
};

struct CacheListing {
  std::filesystem::path directory;
  bool directory_exists = false;
  std::vector<CacheEntry> entries;  // sorted by file name
  std::uint64_t total_size_bytes = 0;
};

// Lists the `*.engine` files of `directory`. A directory that does not exist lists as empty;
// IoError when it exists but can't be read.
CacheListing list_cache(const std::filesystem::path& directory);

// "YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ" (UTC).
std::string format_utc_ns(std::int64_t ns_since_epoch);

struct PruneCriteria {
  enum class Mode : std::uint8_t { kUnusedFor, kMaxSize };
  Mode mode = Mode::kUnusedFor;
  double unused_for_days = 0;        // kUnusedFor: finite, >= 0
  std::uint64_t max_size_bytes = 0;  // kMaxSize
  std::int64_t now_ns = 0;           // the time the cutoff is measured from
};

// Parses --unused-for: a finite non-negative decimal number of 24-hour days. InvalidArgumentError
// saying what is accepted.
double parse_prune_days(const std::string& text);
// Parses --max-size: a non-negative decimal number, optionally followed by B, KiB, MiB, GiB or TiB
// (case-insensitive, powers of 1024); the byte count is rounded down. InvalidArgumentError.
std::uint64_t parse_prune_size(const std::string& text);

struct PrunePlan {
  CacheListing listing;
  PruneCriteria criteria;
  std::int64_t cutoff_ns = 0;        // kUnusedFor: entries recorded strictly before it are selected
  std::vector<CacheEntry> selected;  // oldest recorded first, ties by file name
  std::vector<CacheEntry> excluded;  // empty and unrecognized files: never deleted
  std::uint64_t selected_size_bytes = 0;
  std::uint64_t projected_total_size_bytes = 0;  // total minus selected
  bool size_limit_attainable = true;             // kMaxSize: projected total <= max_size_bytes
};

// Chooses what to remove; changes nothing.
PrunePlan plan_prune(CacheListing listing, const PruneCriteria& criteria);

struct PruneFailure {
  CacheEntry entry;
  std::string reason;
};

struct PruneResult {
  bool dry_run = false;
  std::vector<CacheEntry> removed;
  std::vector<CacheEntry> excluded;
  std::vector<PruneFailure> failed;
  std::vector<CacheEntry> missing;  // vanished before removal
  std::uint64_t removed_size_bytes = 0;
  std::uint64_t remaining_total_size_bytes = 0;  // after removal (dry run: the current total)
  std::uint64_t projected_total_size_bytes = 0;  // dry run only
  bool size_limit_attainable = true;
};

// Removes the plan's selected files (nothing with `dry_run`). A selected file that no longer exists
// is `missing`; one whose size, modification time, device or inode changed since the listing, or
// that can't be removed, is `failed` with a reason and left in place. IoError when the directory
// can't be read again to compute the remaining total.
PruneResult execute_prune(const PrunePlan& plan, bool dry_run);

// The JSON documents `tensoracle cache list|prune` print (docs/cache.md), indented by 2 spaces.
std::string to_json(const CacheListing& listing);
std::string to_json(const PrunePlan& plan, bool dry_run);
std::string to_json(const PruneResult& result);

// ---- open_engine: build once, then reuse (docs/cache.md "Opening engines") ----

// An input or output the engine must have: dims hold -1 where they vary.
struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kF32;
  Dims dims;
};

// Everything besides the weights that decides what engine a model package wants.
struct EngineDeclaration {
  std::string name;                // the engine's name: the start of its file name
  std::int64_t graph_version = 0;  // raise it when the graph function (or anything it depends on) changes
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  BuilderConfig builder;  // target, precision, shape profiles, limits
  // Plugin libraries the engine's plugin layers come from: loaded (load_plugin_library) before anything else, and
  // their SHA-256s are part of the conditions, so a changed library gives a new engine.
  std::vector<std::filesystem::path> plugin_libraries;
};

// Defines the network from the opened weight files. Called only when no saved engine can be used.
using GraphFunction = std::function<Network(const WeightStore& weights)>;

struct OpenEngineOptions {
  std::filesystem::path cache_dir;  // empty: default_cache_directory()
  // Build and save again even when a valid engine is saved, and hash the weight files again
  // instead of trusting their records.
  bool force_rebuild = false;
};

// What open_engine returns: the shared, immutable engine and where it is saved. Copyable; safe to
// share between threads like the Engine itself.
struct EngineHandle {
  std::shared_ptr<const Engine> engine;
  std::filesystem::path path;  // the .engine file
  bool built = false;          // true when this call built the engine, false when it was reused
  std::string conditions_json;

  std::unique_ptr<ExecutionContext> create_execution_context() const { return engine->create_execution_context(); }
};

// The build conditions of a declaration as canonical JSON (docs/cache.md "Conditions"): the
// SHA-256 of every weight file (through the weight digest records of `cache_directory`, which must
// exist), name, graph_version, inputs and outputs, builder settings, plugin library digests, the
// target's properties, OS, CPU architecture, library, engine format and CUDA runtime versions.
// CudaError when a CUDA target's device can't be queried; IoError when a file can't be read.
std::string engine_conditions_json(const EngineDeclaration& declaration,
                                   const std::vector<std::filesystem::path>& weight_files,
                                   const std::filesystem::path& cache_directory, bool rehash_weights = false);

// "<name>-<SHA-256 hex of the canonical conditions>.engine"; characters of the name other than
// letters, digits, '.', '_' and '-' become '_' (at most 64 bytes of it are kept).
std::string engine_file_name(const std::string& engine_name, const std::string& conditions_json);

// Opens the engine the declaration describes: reuses the saved one when its conditions match
// (without calling `graph`), else calls `graph`, builds, checks and saves atomically.
//
// Concurrency: processes and threads that open the same missing engine at once build it once; the
// others wait for that build and reuse its file. A build that crashed leaves an empty file (status
// "building or leftover") that the next open rebuilds. After a successful reuse the file's
// modification time is set to now (failures ignored).
//
// Errors: CorruptEngineError (damaged file, or a plan the runtime can't deserialize: check
// plugin_libraries), EngineConditionError (the saved header has other conditions), EngineIOError
// (the engine's inputs or outputs differ from the declaration), IoError (files, cache directory),
// and whatever `graph` or the Builder throw. The caller decides whether to rebuild after an error.
EngineHandle open_engine(const EngineDeclaration& declaration, const std::vector<std::filesystem::path>& weight_files,
                         const GraphFunction& graph, const OpenEngineOptions& options = {});

}  // namespace tensoracle
