// The zip reader of the checkpoint converter: stored entries, ZIP64, and every damaged structure refused.
#include <gtest/gtest.h>

#include <string>

#include "convert/byte_source.hpp"
#include "convert/zip_archive.hpp"
#include "convert_test_util.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {
namespace {

using convert::MemorySource;
using convert::ZipArchive;
using convert_test::make_zip;

TEST(ConvertZip, Crc32MatchesTheStandardCheckValue) {
  EXPECT_EQ(convert::crc32_update(0, "123456789", 9), 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(convert::crc32_update(0, "", 0), 0u);
}

TEST(ConvertZip, ReadsStoredEntriesInPlaceWithAndWithoutZip64) {
  for (bool zip64 : {false, true}) {
    const std::string zip =
        make_zip({{"archive/data.pkl", "pickle"}, {"archive/data/0", std::string(100, 'x')}}, zip64);
    MemorySource source(zip.data(), zip.size(), "t.pt");
    ZipArchive archive(source);
    ASSERT_EQ(archive.entries().size(), 2u);
    const convert::ZipEntry* e = archive.find("archive/data/0");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->size, 100u);
    EXPECT_EQ(zip.substr(e->data_offset, 100), std::string(100, 'x'));
    EXPECT_EQ(archive.read_small(*archive.find("archive/data.pkl"), 100), "pickle");
    EXPECT_EQ(archive.find("nope"), nullptr);
  }
}

void expect_error(const std::string& zip, const std::string& needle) {
  MemorySource source(zip.data(), zip.size(), "bad.pt");
  try {
    ZipArchive archive(source);
    for (const auto& e : archive.entries()) archive.read_small(e, 1 << 20);
    ADD_FAILURE() << "accepted; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.pt"), std::string::npos) << e.what();
  }
}

TEST(ConvertZip, RefusesDamagedArchives) {
  const std::string good = make_zip({{"a/data.pkl", "abc"}, {"a/data/0", "0123456789"}});
  expect_error("", "too short");
  expect_error(std::string(100, 'z'), "no end of central directory");
  expect_error(make_zip({{"a/x", "abc"}}, false, 8), "compressed (method 8)");
  // Every truncation fails cleanly.
  for (std::size_t n = 0; n < good.size(); ++n) {
    std::string cut = good.substr(0, n);
    MemorySource source(cut.data(), cut.size(), "cut.pt");
    EXPECT_THROW(ZipArchive{source}, FormatError) << n;
  }
  // A damaged CRC, a local header moved away, an entry given twice.
  std::string crc = good;
  crc[good.find("abc")] = 'x';
  expect_error(crc, "CRC-32");
  std::string local = good;
  local[good.find("0123456789") - 8 - 30] = 'Q';  // the second entry's local signature
  expect_error(local, "no local header");
  expect_error(make_zip({{"a", "1"}, {"a", "2"}}), "appears twice");
  // Central directory offsets beyond the file.
  std::string far = good;
  far[far.size() - 6] = '\x7f';
  expect_error(far, "central directory");
}

TEST(ConvertZip, ByteFlipsNeverCrash) {
  const std::string good = make_zip({{"a/data.pkl", "abc"}, {"a/data/0", "0123456789"}}, true);
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (int flip : {0x01, 0x80, 0xFF}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      MemorySource source(bad.data(), bad.size(), "flip.pt");
      try {
        ZipArchive archive(source);
        for (const auto& e : archive.entries()) {
          EXPECT_TRUE(source.contains(e.data_offset, e.size));
          (void)archive.read_small(e, 1 << 20);
        }
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace tensoracle
