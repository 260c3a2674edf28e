// Zip central-directory reader: end record, ZIP64 end record and locator, central entries, local headers.
#include "convert/zip_archive.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "tensoracle/error.hpp"

namespace tensoracle::convert {
namespace {

constexpr std::uint32_t kEndSignature = 0x06054b50;
constexpr std::uint32_t kZip64EndSignature = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr std::uint32_t kCentralSignature = 0x02014b50;
constexpr std::uint32_t kLocalSignature = 0x04034b50;
constexpr std::size_t kEndSize = 22;
constexpr std::size_t kMaxComment = 0xFFFF;

std::uint16_t u16(const unsigned char* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t u32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
std::uint64_t u64(const unsigned char* p) {
  return static_cast<std::uint64_t>(u32(p)) | (static_cast<std::uint64_t>(u32(p + 4)) << 32);
}

struct CrcTable {
  std::array<std::uint32_t, 256> values{};
  CrcTable() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      values[i] = c;
    }
  }
};

}  // namespace

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size) noexcept {
  static const CrcTable table;
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < size; ++i) crc = table.values[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

ZipArchive::ZipArchive(const ByteSource& source) : source_(source) {
  const std::string& file = source.name();
  const std::uint64_t file_size = source.size();
  if (file_size < kEndSize) throw FormatError(fmt::format("{}: not a zip archive (too short)", file));

  // The end record is the last 22 bytes plus a comment of up to 64 KiB: search backwards for its signature.
  const std::uint64_t tail_size = std::min<std::uint64_t>(file_size, kEndSize + kMaxComment);
  std::vector<unsigned char> tail(tail_size);
  source.read(tail.data(), tail.size(), file_size - tail_size, "end of central directory");
  std::uint64_t end_pos = 0;
  bool found = false;
  for (std::uint64_t i = tail_size - kEndSize + 1; i-- > 0;) {
    if (u32(&tail[i]) == kEndSignature && u16(&tail[i + 20]) == tail_size - i - kEndSize) {
      end_pos = i;
      found = true;
      break;
    }
  }
  if (!found) throw FormatError(fmt::format("{}: not a zip archive (no end of central directory record)", file));
  const unsigned char* end = &tail[end_pos];
  const std::uint64_t end_offset = file_size - tail_size + end_pos;
  std::uint64_t disk = u16(end + 4), cd_disk = u16(end + 6);
  std::uint64_t count = u16(end + 10), cd_size = u32(end + 12), cd_offset = u32(end + 16);
  const std::uint64_t disk_count = u16(end + 8);

  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF || disk_count == 0xFFFF) {
    // ZIP64: a locator just before the end record points at the ZIP64 end record.
    if (end_offset < 20) throw FormatError(fmt::format("{}: ZIP64 end locator missing", file));
    unsigned char locator[20];
    source.read(locator, sizeof locator, end_offset - 20, "ZIP64 end locator");
    if (u32(locator) != kZip64LocatorSignature) throw FormatError(fmt::format("{}: ZIP64 end locator missing", file));
    const std::uint64_t record_offset = u64(locator + 8);
    unsigned char record[56];
    source.read(record, sizeof record, record_offset, "ZIP64 end record");
    if (u32(record) != kZip64EndSignature) {
      throw FormatError(fmt::format("{}: no ZIP64 end record at offset {}", file, record_offset));
    }
    disk = u32(record + 16);
    cd_disk = u32(record + 20);
    count = u64(record + 32);
    cd_size = u64(record + 40);
    cd_offset = u64(record + 48);
    if (u64(record + 24) != count)
      throw UnsupportedError(fmt::format("{}: multi-disk zip archives are not supported", file));
  } else if (disk_count != count) {
    throw UnsupportedError(fmt::format("{}: multi-disk zip archives are not supported", file));
  }
  if (disk != 0 || cd_disk != 0)
    throw UnsupportedError(fmt::format("{}: multi-disk zip archives are not supported", file));
  if (count > kMaxEntries) throw FormatError(fmt::format("{}: {} zip entries is more than accepted", file, count));
  if (!source.contains(cd_offset, cd_size) || cd_offset + cd_size > end_offset) {
    throw FormatError(
        fmt::format("{}: central directory ({} bytes at offset {}) lies outside the file", file, cd_size, cd_offset));
  }
  if (count * 46 > cd_size) {
    throw FormatError(fmt::format("{}: central directory of {} bytes can't hold {} entries", file, cd_size, count));
  }
  std::vector<unsigned char> cd(cd_size);
  source.read(cd.data(), cd.size(), cd_offset, "central directory");

  std::size_t pos = 0;
  entries_.reserve(count);
  for (std::uint64_t n = 0; n < count; ++n) {
    if (cd.size() - pos < 46 || u32(&cd[pos]) != kCentralSignature) {
      throw FormatError(fmt::format("{}: central directory entry {} is damaged", file, n));
    }
    const unsigned char* h = &cd[pos];
    const std::uint16_t flags = u16(h + 8), method = u16(h + 10);
    const std::uint32_t crc = u32(h + 16);
    std::uint64_t compressed = u32(h + 20), uncompressed = u32(h + 24);
    const std::size_t name_len = u16(h + 28), extra_len = u16(h + 30), comment_len = u16(h + 32);
    std::uint64_t disk_start = u16(h + 34);
    std::uint64_t local_offset = u32(h + 42);
    if (cd.size() - pos - 46 < name_len + extra_len + comment_len) {
      throw FormatError(fmt::format("{}: central directory entry {} runs past the directory", file, n));
    }
    ZipEntry entry;
    entry.name.assign(reinterpret_cast<const char*>(h + 46), name_len);
    entry.crc32 = crc;
    // ZIP64 extended information: 64-bit values for the fields set to all ones, in this order.
    const unsigned char* extra = h + 46 + name_len;
    for (std::size_t e = 0; e + 4 <= extra_len;) {
      const std::uint16_t id = u16(extra + e), len = u16(extra + e + 2);
      if (e + 4 + len > extra_len)
        throw FormatError(fmt::format("{}: zip entry '{}': damaged extra field", file, entry.name));
      if (id == 0x0001) {
        const unsigned char* z = extra + e + 4;
        std::size_t left = len;
        auto take = [&](std::uint64_t& field) {
          if (left < 8) throw FormatError(fmt::format("{}: zip entry '{}': short ZIP64 field", file, entry.name));
          field = u64(z);
          z += 8;
          left -= 8;
        };
        if (uncompressed == 0xFFFFFFFF) take(uncompressed);
        if (compressed == 0xFFFFFFFF) take(compressed);
        if (local_offset == 0xFFFFFFFF) take(local_offset);
        if (disk_start == 0xFFFF && left >= 4) disk_start = u32(z);
      }
      e += 4 + len;
    }
    pos += 46 + name_len + extra_len + comment_len;
    if (flags & 0x1) throw UnsupportedError(fmt::format("{}: zip entry '{}' is encrypted", file, entry.name));
    if (method != 0) {
      throw UnsupportedError(fmt::format(
          "{}: zip entry '{}' is compressed (method {}); torch.save writes stored entries only: load and save the "
          "checkpoint again with torch.save, or unzip and re-zip it without compression (zip -0)",
          file, entry.name, method));
    }
    if (compressed != uncompressed) {
      throw FormatError(fmt::format("{}: stored zip entry '{}' has a compressed size {} unlike its size {}", file,
                                    entry.name, compressed, uncompressed));
    }
    if (disk_start != 0) throw UnsupportedError(fmt::format("{}: multi-disk zip archives are not supported", file));
    // The local header repeats the name and has its own extra field; the bytes follow it.
    unsigned char local[30];
    source.read(local, sizeof local, local_offset, "zip local header");
    if (u32(local) != kLocalSignature) {
      throw FormatError(
          fmt::format("{}: zip entry '{}': no local header at offset {}", file, entry.name, local_offset));
    }
    entry.data_offset = local_offset + 30 + u16(local + 26) + u16(local + 28);
    entry.size = uncompressed;
    if (!source.contains(entry.data_offset, entry.size) || entry.data_offset + entry.size > cd_offset) {
      throw FormatError(fmt::format("{}: zip entry '{}' ({} bytes at offset {}) lies outside the file's data", file,
                                    entry.name, entry.size, entry.data_offset));
    }
    if (!index_.emplace(entry.name, entries_.size()).second) {
      throw FormatError(fmt::format("{}: zip entry '{}' appears twice", file, entry.name));
    }
    entries_.push_back(std::move(entry));
  }
}

const ZipEntry* ZipArchive::find(std::string_view name) const noexcept {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::string ZipArchive::read_small(const ZipEntry& entry, std::uint64_t limit) const {
  if (entry.size > limit) {
    throw FormatError(fmt::format("{}: zip entry '{}' has {} bytes, more than the {} accepted", source_.name(),
                                  entry.name, entry.size, limit));
  }
  std::string bytes(entry.size, '\0');
  source_.read(bytes.data(), bytes.size(), entry.data_offset, "zip entry");
  if (crc32_update(0, bytes.data(), bytes.size()) != entry.crc32) {
    throw FormatError(fmt::format("{}: zip entry '{}' is damaged (CRC-32 mismatch)", source_.name(), entry.name));
  }
  return bytes;
}

}  // namespace tensoracle::convert
