// TorchCheckpoint: a torch.save file (zip archive or legacy format) read as an object tree whose tensors point at
// byte ranges of the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "convert/byte_source.hpp"
#include "convert/pickle_reader.hpp"

namespace tensoracle::convert {

// Where a storage's bytes lie in the checkpoint file.
struct StorageBytes {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

class TorchCheckpoint {
 public:
  // Largest data.pkl (or legacy pickle) accepted: pickles hold structure, the tensors' bytes are elsewhere.
  static constexpr std::uint64_t kMaxPickleSize = std::uint64_t{1} << 30;

  // Reads a checkpoint from a source that outlives the checkpoint. The pickle is read completely (and refused if it
  // holds anything but data), every storage is located and its size checked against what the tensors need.
  static std::unique_ptr<TorchCheckpoint> read(const ByteSource& source);

  const ByteSource& source() const noexcept { return source_; }
  const char* format() const noexcept { return zip_ ? "zip" : "legacy"; }
  bool big_endian() const noexcept { return big_endian_; }
  const PickleObjects& objects() const noexcept { return objects_; }
  Ref root() const noexcept { return root_; }
  // The bytes of a tensor's storage (the root storage of a legacy view, the view offset applied).
  StorageBytes storage_bytes(const StorageRef& storage) const;

 private:
  explicit TorchCheckpoint(const ByteSource& source) : source_(source) {}
  void read_zip();
  void read_legacy();
  void check_tensors() const;

  const ByteSource& source_;
  bool zip_ = false;
  bool big_endian_ = false;
  PickleObjects objects_;
  Ref root_ = 0;
  std::map<std::string, StorageBytes, std::less<>> storages_;  // by key
};

}  // namespace tensoracle::convert
