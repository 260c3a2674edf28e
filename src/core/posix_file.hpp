// PosixFile: an owned file descriptor with checked open, size, positional read and write; errors name the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace tensoracle {

class PosixFile {
 public:
  PosixFile() = default;
  ~PosixFile();
  PosixFile(PosixFile&& other) noexcept;
  PosixFile& operator=(PosixFile&& other) noexcept;
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  // Opens an existing regular file for reading; IoError naming the path otherwise.
  static PosixFile open_read(const std::filesystem::path& path);
  // Creates a new file (O_EXCL) with the given mode for writing.
  static PosixFile create_exclusive(const std::filesystem::path& path, unsigned mode);

  int fd() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }
  std::uint64_t size() const;
  // Reads up to `size` bytes at `offset`; returns 0 only at end of file. Retries EINTR.
  std::size_t read_some(void* destination, std::size_t size, std::uint64_t offset) const;
  // Reads exactly `size` bytes at `offset` or throws (a short file is an IoError).
  void read_exact(void* destination, std::size_t size, std::uint64_t offset) const;
  // Writes all bytes at the current position.
  void write_all(const void* data, std::size_t size);
  void sync();
  void close();

 private:
  int fd_ = -1;
  std::string path_;
};

// Writes a file atomically through `write`, which receives the open temporary file, or writes
// `size` bytes. Either way: temporary file in the same directory, fsync, rename,
// fsync of the directory. Readers see the old file or the complete new one, never a mix.
void write_file_atomically(const std::filesystem::path& path, const std::function<void(PosixFile&)>& write,
                           unsigned mode = 0644);
void write_file_atomically(const std::filesystem::path& path, const void* data, std::size_t size, unsigned mode = 0644);

// "strerror(errno)" for messages.
std::string errno_message(int error_number);

}  // namespace tensoracle
