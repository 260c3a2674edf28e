// ByteSource implementations: checked reads of a file or of memory.
#include "convert/byte_source.hpp"

#include <fmt/format.h>

#include "core/bytes.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::convert {

FileSource::FileSource(const std::string& path) : file_(PosixFile::open_read(path)), size_(file_.size()) {}

void FileSource::read(void* destination, std::size_t size, std::uint64_t offset, const char* what) const {
  if (!contains(offset, size)) {
    throw FormatError(fmt::format("{}: {} ({} bytes at offset {}) lies beyond the end of the file ({} bytes)", name(),
                                  what, size, offset, size_));
  }
  file_.read_exact(destination, size, offset);
}

void MemorySource::read(void* destination, std::size_t size, std::uint64_t offset, const char* what) const {
  if (!contains(offset, size)) {
    throw FormatError(fmt::format("{}: {} ({} bytes at offset {}) lies beyond the end of the file ({} bytes)", name(),
                                  what, size, offset, size_));
  }
  copy_bytes(destination, data_ + offset, size);
}

}  // namespace tensoracle::convert
