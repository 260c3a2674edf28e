// Tests of error messages: escape_unprintable's rules, and that messages quoting file bytes come out printable UTF-8.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensoracle/error.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle {
namespace {

// Whether `text` is valid UTF-8 holding no control character but newline and tab (checked independently of the
// implementation: decode code points and test their values).
bool printable_utf8(const std::string& text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    std::uint32_t cp = 0;
    std::size_t n = 0;
    if (b < 0x80) {
      cp = b, n = 1;
    } else if ((b & 0xE0) == 0xC0) {
      cp = b & 0x1F, n = 2;
    } else if ((b & 0xF0) == 0xE0) {
      cp = b & 0x0F, n = 3;
    } else if ((b & 0xF8) == 0xF0) {
      cp = b & 0x07, n = 4;
    } else {
      return false;
    }
    if (i + n > text.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    if ((cp < 0x20 && cp != '\n' && cp != '\t') || (cp >= 0x7F && cp <= 0x9F)) return false;
    i += n;
  }
  return true;
}

TEST(EscapeUnprintable, KeepsPrintableUtf8AndEscapesEverythingElse) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plain ascii: 'a', [1, 2] {}\\", "plain ascii: 'a', [1, 2] {}\\"},
      {"two\nlines\tand a tab", "two\nlines\tand a tab"},
      {"cr\r esc\x1b[31m del\x7f nul", "cr\\x0d esc\\x1b[31m del\\x7f nul"},
      {std::string("nul\0byte", 8), "nul\\x00byte"},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},  // é € 😀
      {"csi \xc2\x9b and nel \xc2\x85", "csi \\xc2\\x9b and nel \\xc2\\x85"},                      // C1 controls
      {"\xc2\xa0nbsp", "\xc2\xa0nbsp"},                                                            // U+00A0 is fine
      {"bom? \xff\xfe", "bom? \\xff\\xfe"},
      {"cut \xe2\x82", "cut \\xe2\\x82"},  // a sequence cut short
      {"overlong \xc0\xaf \xe0\x80\xaf", "overlong \\xc0\\xaf \\xe0\\x80\\xaf"},
      {"surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80"},
      {"past max \xf4\x90\x80\x80", "past max \\xf4\\x90\\x80\\x80"},
      {"stray continuation \x80 then ok", "stray continuation \\x80 then ok"},
  };
  for (const auto& [input, expected] : cases) {
    const std::string escaped = escape_unprintable(input);
    EXPECT_EQ(escaped, expected);
    EXPECT_TRUE(printable_utf8(escaped)) << escaped;
    EXPECT_EQ(escape_unprintable(escaped), escaped) << "not idempotent: " << escaped;
  }
}

TEST(EscapeUnprintable, EveryErrorMessageIsStoredEscaped) {
  EXPECT_STREQ(Error("a\xff\x1b").what(), "a\\xff\\x1b");
  EXPECT_STREQ(FormatError("tensor '\xc2\x9b'").what(), "tensor '\\xc2\\x9b'");
  EXPECT_STREQ(GraphError("layer \xe2\x82").what(), "layer \\xe2\\x82");
}

// The header of a safetensors file holding the bytes FF FE (what `tensoracle safetensors info` showed raw): the
// parser's message quotes them, and the error must show them escaped.
TEST(EscapeUnprintable, MessagesQuotingAFileShowItsBytesEscaped) {
  const std::string header = "{\"a\xff\xfe\":{}}    ";
  std::string file(8, '\0');
  file[0] = static_cast<char>(header.size());
  file += header;
  try {
    SafetensorsFile::from_bytes(file.data(), file.size(), "ff-fe.safetensors");
    FAIL() << "the header was accepted";
  } catch (const FormatError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(printable_utf8(message)) << message;
    EXPECT_NE(message.find("\\xff"), std::string::npos) << message;
    EXPECT_NE(message.find("ff-fe.safetensors"), std::string::npos) << message;
  }
  try {
    Network::from_json("{\"format\": \"\x1b[2J\xff\"}",
                       [](const std::string&, const std::string&) { return std::optional<TensorView>(); });
    FAIL() << "the network JSON was accepted";
  } catch (const GraphError& e) {
    EXPECT_TRUE(printable_utf8(e.what())) << e.what();
  }
}

}  // namespace
}  // namespace tensoracle
