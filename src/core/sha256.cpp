// SHA-256 through OpenSSL's EVP interface, for buffers and whole files.
#include "tensoracle/sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/posix_file.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
  bool finished = false;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (state_->ctx == nullptr || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1) {
    if (state_->ctx) EVP_MD_CTX_free(state_->ctx);
    throw Error("SHA-256: OpenSSL could not initialise a digest context");
  }
}

Sha256::~Sha256() {
  if (state_ && state_->ctx) EVP_MD_CTX_free(state_->ctx);
}

void Sha256::update(const void* data, std::size_t size) {
  if (state_->finished) throw Error("SHA-256: update() after finish()");
  if (size != 0 && EVP_DigestUpdate(state_->ctx, data, size) != 1) throw Error("SHA-256: EVP_DigestUpdate failed");
}

std::array<std::uint8_t, 32> Sha256::finish() {
  if (state_->finished) throw Error("SHA-256: finish() called twice");
  std::array<std::uint8_t, 32> digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(state_->ctx, digest.data(), &length) != 1 || length != digest.size()) {
    throw Error("SHA-256: EVP_DigestFinal_ex failed");
  }
  state_->finished = true;
  return digest;
}

std::string Sha256::finish_hex() {
  auto digest = finish();
  return to_hex(digest.data(), digest.size());
}

std::string to_hex(const std::uint8_t* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(size * 2, '0');
  for (std::size_t i = 0; i < size; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xF];
  }
  return out;
}

std::string sha256_hex(const void* data, std::size_t size) {
  Sha256 hasher;
  hasher.update(data, size);
  return hasher.finish_hex();
}

std::string sha256_file_hex(const std::filesystem::path& path, const ProgressCallback& progress) {
  PosixFile file = PosixFile::open_read(path);
  const std::uint64_t total = file.size();
  Sha256 hasher;
  std::vector<std::byte> buffer(std::size_t{4} << 20);
  std::uint64_t done = 0;
  for (;;) {
    std::size_t got = file.read_some(buffer.data(), buffer.size(), done);
    if (got == 0) break;
    hasher.update(buffer.data(), got);
    done += got;
    if (progress) progress(done, total);
  }
  return hasher.finish_hex();
}

}  // namespace tensoracle
