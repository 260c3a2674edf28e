// Builders for the convert unit tests: pickles opcode by opcode and stored zip archives (optionally ZIP64).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "convert/zip_archive.hpp"

namespace tensoracle::convert_test {

// A pickle written opcode by opcode (protocol 2 unless PROTO says otherwise).
class PickleBuilder {
 public:
  PickleBuilder& op(char c) { return raw(std::string(1, c)); }
  PickleBuilder& raw(const std::string& s) {
    bytes += s;
    return *this;
  }
  PickleBuilder& proto(int p = 2) { return raw(std::string{'\x80', static_cast<char>(p)}); }
  PickleBuilder& str(const std::string& s) { return op('X').le(s.size(), 4).raw(s); }
  PickleBuilder& integer(std::int32_t i) { return op('J').le(static_cast<std::uint32_t>(i), 4); }
  PickleBuilder& global(const std::string& module, const std::string& name) {
    return op('c').raw(module + "\n" + name + "\n");
  }
  PickleBuilder& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  PickleBuilder& int_tuple(const std::vector<std::int64_t>& values) {
    op('(');
    for (auto v : values) integer(static_cast<std::int32_t>(v));
    return op('t');
  }
  // _rebuild_tensor_v2(persistent storage, offset, size, stride, False, OrderedDict()).
  PickleBuilder& tensor(const std::string& storage_type, const std::string& key, std::int64_t numel,
                        std::int64_t offset, const std::vector<std::int64_t>& size,
                        const std::vector<std::int64_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').str("storage").global("torch", storage_type).str(key).str("cpu").integer(static_cast<std::int32_t>(numel));
    op('t').op('Q');
    integer(static_cast<std::int32_t>(offset)).int_tuple(size).int_tuple(stride).raw("\x89");
    global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
  PickleBuilder& stop() { return op('.'); }
  std::string bytes;
};

// A zip archive of stored entries, as torch.save writes them; with zip64 every size and offset goes through the
// ZIP64 extra fields and end records.
inline std::string make_zip(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64 = false,
                            std::uint16_t method = 0) {
  std::string out, central;
  auto le = [](std::string& s, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  for (const auto& [name, data] : entries) {
    const std::uint64_t offset = out.size();
    const std::uint32_t crc = convert::crc32_update(0, data.data(), data.size());
    std::string extra;
    if (zip64) {
      le(extra, 0x0001, 2), le(extra, 24, 2), le(extra, data.size(), 8), le(extra, data.size(), 8),
          le(extra, offset, 8);
    }
    const std::uint64_t size32 = zip64 ? 0xFFFFFFFF : data.size();
    le(out, 0x04034b50, 4), le(out, 20, 2), le(out, 0, 2), le(out, method, 2), le(out, 0, 4), le(out, crc, 4);
    le(out, size32, 4), le(out, size32, 4), le(out, name.size(), 2), le(out, 0, 2);
    out += name;
    out += data;
    le(central, 0x02014b50, 4), le(central, 20, 2), le(central, 20, 2), le(central, 0, 2), le(central, method, 2);
    le(central, 0, 4), le(central, crc, 4), le(central, size32, 4), le(central, size32, 4), le(central, name.size(), 2);
    le(central, extra.size(), 2), le(central, 0, 2), le(central, 0, 2), le(central, 0, 2), le(central, 0, 4);
    le(central, zip64 ? 0xFFFFFFFF : offset, 4);
    central += name;
    central += extra;
  }
  const std::uint64_t cd_offset = out.size();
  out += central;
  if (zip64) {
    const std::uint64_t record = out.size();
    le(out, 0x06064b50, 4), le(out, 44, 8), le(out, 45, 2), le(out, 45, 2), le(out, 0, 4), le(out, 0, 4);
    le(out, entries.size(), 8), le(out, entries.size(), 8), le(out, central.size(), 8), le(out, cd_offset, 8);
    le(out, 0x07064b50, 4), le(out, 0, 4), le(out, record, 8), le(out, 1, 4);
  }
  le(out, 0x06054b50, 4), le(out, 0, 2), le(out, 0, 2);
  le(out, zip64 ? 0xFFFF : entries.size(), 2), le(out, zip64 ? 0xFFFF : entries.size(), 2);
  le(out, zip64 ? 0xFFFFFFFF : central.size(), 4), le(out, zip64 ? 0xFFFFFFFF : cd_offset, 4), le(out, 0, 2);
  return out;
}

}  // namespace tensoracle::convert_test
