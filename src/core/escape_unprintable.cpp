// escape_unprintable: the bytes of an error message that are not printable UTF-8, written as \xNN escapes.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {
namespace {

void append_escape(std::string& out, unsigned char byte) {
  constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[byte >> 4];
  out += kHex[byte & 0xF];
}

}  // namespace

std::string escape_unprintable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7F) {
        append_escape(out, byte);
      } else {
        out += static_cast<char>(byte);
      }
      ++i;
      continue;
    }
    std::uint32_t code_point = 0;
    const std::size_t length = decode_utf8(text, i, code_point);
    // U+0080..U+009F are the C1 controls: terminals act on some of them (CSI is U+009B).
    const bool c1_control = length != 0 && code_point <= 0x9F;
    if (length == 0 || c1_control) {
      const std::size_t count = length == 0 ? 1 : length;
      for (std::size_t k = 0; k < count; ++k) append_escape(out, static_cast<unsigned char>(text[i + k]));
      i += count;
      continue;
    }
    out.append(text, i, length);
    i += length;
  }
  return out;
}

}  // namespace tensoracle
