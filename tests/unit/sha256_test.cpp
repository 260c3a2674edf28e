// Tests for SHA-256 against the FIPS 180-2 test vectors, incremental hashing and file hashing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tensoracle/error.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle {
namespace {

TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  const std::string million(1'000'000, 'a');
  Sha256 hasher;
  for (std::size_t i = 0; i < million.size(); i += 999)
    hasher.update(million.data() + i, std::min<std::size_t>(999, million.size() - i));
  EXPECT_EQ(hasher.finish_hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_THROW(hasher.update("x", 1), Error);
}

TEST(Sha256, FileHashMatchesBufferAndReportsProgress) {
  auto path = std::filesystem::temp_directory_path() / ("tensoracle_sha256_" + std::to_string(::getpid()));
  std::string content(9 << 20, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>((i * 2654435761u) >> 13);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  std::uint64_t last_done = 0, last_total = 0;
  int calls = 0;
  std::string digest = sha256_file_hex(path, [&](std::uint64_t done, std::uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
    ++calls;
  });
  EXPECT_EQ(digest, sha256_hex(content.data(), content.size()));
  EXPECT_GE(calls, 2);
  EXPECT_EQ(last_done, content.size());
  EXPECT_EQ(last_total, content.size());
  std::filesystem::remove(path);
}

TEST(Sha256, MissingFileIsIoErrorNamingThePath) {
  try {
    sha256_file_hex("/nonexistent/tensoracle/weights.safetensors");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tensoracle/weights.safetensors"), std::string::npos);
  }
}

}  // namespace
}  // namespace tensoracle
