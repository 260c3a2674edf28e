// ByteSource: random access to a checkpoint's bytes (a file through pread, or memory for tests and fuzzing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/posix_file.hpp"

namespace tensoracle::convert {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const noexcept = 0;
  // Reads exactly `size` bytes at `offset`; a range outside the source is a FormatError naming `what`.
  virtual void read(void* destination, std::size_t size, std::uint64_t offset, const char* what) const = 0;
  // The name used in messages (the path).
  virtual const std::string& name() const noexcept = 0;
  // The file descriptor when the source is a file (for copy_file_range), else -1.
  virtual int fd() const noexcept { return -1; }
  // True when [offset, offset + length) lies inside the source.
  bool contains(std::uint64_t offset, std::uint64_t length) const noexcept {
    return offset <= size() && length <= size() - offset;
  }
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path);
  std::uint64_t size() const noexcept override { return size_; }
  void read(void* destination, std::size_t size, std::uint64_t offset, const char* what) const override;
  const std::string& name() const noexcept override { return file_.path(); }
  int fd() const noexcept override { return file_.fd(); }

 private:
  PosixFile file_;
  std::uint64_t size_ = 0;
};

// The caller keeps the bytes alive for the life of the source.
class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* data, std::size_t size, std::string name)
      : data_(static_cast<const std::byte*>(data)), size_(size), name_(std::move(name)) {}
  std::uint64_t size() const noexcept override { return size_; }
  void read(void* destination, std::size_t size, std::uint64_t offset, const char* what) const override;
  const std::string& name() const noexcept override { return name_; }

 private:
  const std::byte* data_;
  std::size_t size_;
  std::string name_;
};

}  // namespace tensoracle::convert
