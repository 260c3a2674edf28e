// safetensors files: a validating, memory-mapped reader with zero-copy tensor views, and a writer
// whose output is byte-identical to the official `safetensors` package's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"

namespace tensoracle {

class SafetensorsFile;

// One tensor's entry in a safetensors header. Offsets are relative to the start of the data
// section, as in the file.
struct TensorInfo {
  std::string name;
  DataType dtype = DataType::kF32;
  Dims shape;
  std::uint64_t data_begin = 0;
  std::uint64_t data_end = 0;

  std::uint64_t byte_size() const noexcept { return data_end - data_begin; }
};

// A zero-copy view of one tensor's bytes inside a mapped file. The view keeps the file mapped
// for as long as it (or a copy of it) lives. The bytes are little-endian and may be unaligned for
// the element type: copy before typed access, or use SafetensorsFile::read.
struct TensorView {
  const TensorInfo* info = nullptr;
  const std::byte* data = nullptr;
  std::shared_ptr<const SafetensorsFile> file;

  const std::string& name() const { return info->name; }
  DataType dtype() const { return info->dtype; }
  const Dims& shape() const { return info->shape; }
  std::uint64_t byte_size() const { return info->byte_size(); }
};

// A validated safetensors file. Immutable after open and safe to share between threads.
// Validation is strict: every rule of the format is checked before any view is handed out, and a
// violation is a FormatError naming the file (and the tensor).
class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Largest header accepted, as in the official library.
  static constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

  // Maps and validates a file. Throws IoError when it can't be opened or mapped and FormatError
  // when its contents are invalid.
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);
  // Validates a file held in memory. The caller keeps `data` alive and unchanged for the life
  // of the returned object; `display_name` names the bytes in error messages.
  static std::shared_ptr<const SafetensorsFile> from_bytes(const void* data, std::size_t size,
                                                           std::string display_name);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // The path given to open(), or the display name given to from_bytes().
  const std::string& path() const noexcept { return path_; }
  std::uint64_t file_size() const noexcept { return size_; }
  // Length of the JSON header (the 8-byte length prefix not included).
  std::uint64_t header_size() const noexcept { return header_size_; }
  // Offset of the data section in the file: 8 + header_size().
  std::uint64_t data_start() const noexcept { return 8 + header_size_; }

  // Tensors in file order (by data offset, then name).
  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  // The `__metadata__` map; empty when absent (has_metadata() tells the two apart).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  bool has_metadata() const noexcept { return has_metadata_; }

  // nullptr when no tensor has this name.
  const TensorInfo* find(std::string_view name) const noexcept;
  // Throws NotFoundError naming the file when no tensor has this name.
  TensorView get(std::string_view name) const;
  TensorView view(const TensorInfo& info) const;
  // Copies a tensor's bytes into `destination` (byte_size() bytes) with plain reads rather than
  // page faults on the mapping: the fast way to load a tensor into a host buffer.
  void read(const TensorInfo& info, void* destination) const;

 private:
  SafetensorsFile() = default;
  void parse_header();

  std::string path_;
  int fd_ = -1;
  const std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  bool mapped_ = false;
  std::uint64_t header_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  bool has_metadata_ = false;
};

// A tensor to write: `data` points at shape.volume() * element_size(dtype) little-endian bytes.
struct TensorToWrite {
  std::string name;
  DataType dtype = DataType::kF32;
  Dims shape;
  const void* data = nullptr;
};

// The complete bytes of a safetensors file, identical to what the official `safetensors`
// package's save() produces for the same tensors and metadata (tensors ordered by dtype, then
// name; header padded with spaces to a multiple of 8). The official writer emits metadata keys
// in an unspecified order; ours sorts them, so with two or more metadata entries the files are
// equal up to that order. Passing no metadata omits `__metadata__`;
// passing an empty map writes an empty one, as the official package does. Throws
// InvalidArgumentError for duplicate or invalid names, dynamic shapes or null data.
std::vector<std::byte> serialize_safetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::optional<std::map<std::string, std::string>>& metadata = std::nullopt);

// Writes serialize_safetensors() output to `path` atomically: a temporary file in the same
// directory is written, flushed to disk and renamed into place, so readers never see a partial
// file. Throws IoError naming the path on failure.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::optional<std::map<std::string, std::string>>& metadata = std::nullopt);

// Several safetensors files opened as one collection of named tensors: plain files, and sharded
// checkpoints described by a `*.safetensors.index.json` (its `weight_map` names each tensor's
// shard, relative to the index file). Immutable after open; safe to share between threads.
class WeightStore {
 public:
  // Each path is a .safetensors file or an index JSON. A tensor name found in two files or an
  // index entry whose tensor is not in its shard is a FormatError; a shard that can't be opened
  // is an IoError.
  static WeightStore open(const std::vector<std::filesystem::path>& paths);

  bool contains(std::string_view name) const noexcept;
  // Throws NotFoundError naming the files searched.
  TensorView get(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const noexcept { return files_; }

 private:
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, std::pair<std::size_t, const TensorInfo*>, std::less<>> index_;
};

}  // namespace tensoracle
