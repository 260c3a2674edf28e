// decode_utf8: one strictly valid UTF-8 sequence (RFC 3629), shared by the message escaper and the cache's JSON writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tensoracle {

// Decodes the UTF-8 sequence at s[i] (no overlong forms, no surrogates, at most U+10FFFF): returns its length and
// sets `code_point`, or returns 0 (code_point untouched) when the bytes there are not one.
inline std::size_t decode_utf8(std::string_view s, std::size_t i, std::uint32_t& code_point) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  std::uint32_t cp = 0;
  std::uint32_t minimum = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, cp = lead & 0x1Fu, minimum = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, cp = lead & 0x0Fu, minimum = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, cp = lead & 0x07u, minimum = 0x10000;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    const unsigned char c = byte(i + k);
    if ((c & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (c & 0x3Fu);
  }
  if (cp < minimum || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  code_point = cp;
  return length;
}

}  // namespace tensoracle
