// ZipArchive: the central directory of a zip file (ZIP64 included), for the stored entries torch.save writes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "convert/byte_source.hpp"

namespace tensoracle::convert {

// One entry: where its bytes lie in the file. Only stored (uncompressed) entries are accepted, so an entry's bytes
// are a plain range of the file and can be streamed from there with pread or copy_file_range.
struct ZipEntry {
  std::string name;
  std::uint64_t data_offset = 0;  // of the entry's bytes in the file
  std::uint64_t size = 0;
  std::uint32_t crc32 = 0;
};

// Written by hand rather than with libzip: torch's archives need only stored entries, the central directory and
// ZIP64, and reading them in place keeps tensors streamable at file offsets and the parser fuzzable over memory
// (docs/convert.md). Every offset and size is checked against the file before use.
class ZipArchive {
 public:
  // Reads and checks the central directory and every entry's local header. FormatError naming the file for a
  // damaged archive; UnsupportedError for compressed or encrypted entries and multi-disk archives.
  explicit ZipArchive(const ByteSource& source);

  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  // nullptr when no entry has this name.
  const ZipEntry* find(std::string_view name) const noexcept;
  // An entry's bytes in memory, checked against its CRC-32 (for the small entries: data.pkl, byteorder).
  std::string read_small(const ZipEntry& entry, std::uint64_t limit) const;

  // Largest number of entries accepted (torch writes one per storage, plus a few).
  static constexpr std::uint64_t kMaxEntries = 10'000'000;

 private:
  const ByteSource& source_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

// CRC-32 (the zip polynomial), updated over `size` bytes.
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size) noexcept;

}  // namespace tensoracle::convert
