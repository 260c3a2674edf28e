// SHA-256 of buffers and files (through OpenSSL), as lower-case hex strings.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

namespace tensoracle {

// Incremental hasher. Not thread-safe; one per thread.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t size);
  // Finishes and returns the digest; the hasher can't be updated afterwards.
  std::array<std::uint8_t, 32> finish();
  std::string finish_hex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string to_hex(const std::uint8_t* data, std::size_t size);
std::string sha256_hex(const void* data, std::size_t size);

// Called while a file is hashed with (bytes done, bytes total); may be empty.
using ProgressCallback = std::function<void(std::uint64_t done, std::uint64_t total)>;

// Hashes a whole file; throws IoError naming the file when it can't be read.
std::string sha256_file_hex(const std::filesystem::path& path, const ProgressCallback& progress = {});

}  // namespace tensoracle
