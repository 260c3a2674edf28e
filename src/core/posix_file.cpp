// PosixFile and atomic file writes: checked POSIX I/O whose errors name the file.
#include "core/posix_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "tensoracle/error.hpp"

namespace tensoracle {

std::string errno_message(int error_number) { return std::strerror(error_number); }

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);
}

PosixFile::PosixFile(PosixFile&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

PosixFile& PosixFile::operator=(PosixFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

PosixFile PosixFile::open_read(const std::filesystem::path& path) {
  PosixFile file;
  file.path_ = path.string();
  file.fd_ = ::open(file.path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd_ < 0) throw IoError(fmt::format("{}: cannot open: {}", file.path_, errno_message(errno)));
  struct stat st {};
  if (::fstat(file.fd_, &st) != 0) throw IoError(fmt::format("{}: cannot stat: {}", file.path_, errno_message(errno)));
  if (S_ISDIR(st.st_mode)) throw IoError(fmt::format("{}: is a directory, not a file", file.path_));
  if (!S_ISREG(st.st_mode)) throw IoError(fmt::format("{}: is not a regular file", file.path_));
  return file;
}

PosixFile PosixFile::create_exclusive(const std::filesystem::path& path, unsigned mode) {
  PosixFile file;
  file.path_ = path.string();
  file.fd_ = ::open(file.path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (file.fd_ < 0) throw IoError(fmt::format("{}: cannot create: {}", file.path_, errno_message(errno)));
  return file;
}

std::uint64_t PosixFile::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw IoError(fmt::format("{}: cannot stat: {}", path_, errno_message(errno)));
  return static_cast<std::uint64_t>(st.st_size);
}

std::size_t PosixFile::read_some(void* destination, std::size_t size, std::uint64_t offset) const {
  for (;;) {
    ssize_t got = ::pread(fd_, destination, size, static_cast<off_t>(offset));
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno != EINTR)
      throw IoError(fmt::format("{}: read failed at offset {}: {}", path_, offset, errno_message(errno)));
  }
}

void PosixFile::read_exact(void* destination, std::size_t size, std::uint64_t offset) const {
  auto* out = static_cast<std::byte*>(destination);
  std::size_t done = 0;
  while (done < size) {
    // Large reads are split so that one call never exceeds what pread transfers at once (2 GiB).
    std::size_t chunk = std::min<std::size_t>(size - done, std::size_t{1} << 30);
    std::size_t got = read_some(out + done, chunk, offset + done);
    if (got == 0)
      throw IoError(fmt::format("{}: file ended at offset {} while reading {} bytes", path_, offset + done, size));
    done += got;
  }
}

void PosixFile::write_all(const void* data, std::size_t size) {
  const auto* in = static_cast<const std::byte*>(data);
  while (size > 0) {
    ssize_t put = ::write(fd_, in, std::min<std::size_t>(size, std::size_t{1} << 30));
    if (put < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("{}: write failed: {}", path_, errno_message(errno)));
    }
    in += put;
    size -= static_cast<std::size_t>(put);
  }
}

void PosixFile::sync() {
  if (::fsync(fd_) != 0) throw IoError(fmt::format("{}: fsync failed: {}", path_, errno_message(errno)));
}

void PosixFile::close() {
  if (fd_ >= 0) {
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) throw IoError(fmt::format("{}: close failed: {}", path_, errno_message(errno)));
  }
}

void write_file_atomically(const std::filesystem::path& path, const void* data, std::size_t size, unsigned mode) {
  write_file_atomically(
      path, [&](PosixFile& file) { file.write_all(data, size); }, mode);
}

void write_file_atomically(const std::filesystem::path& path, const std::function<void(PosixFile&)>& write,
                           unsigned mode) {
  std::filesystem::path directory = path.parent_path();
  if (directory.empty()) directory = ".";
  std::random_device random;
  std::filesystem::path temporary =
      directory / fmt::format(".{}.tmp-{}-{:08x}", path.filename().string(), ::getpid(), random());
  try {
    PosixFile file = PosixFile::create_exclusive(temporary, mode);
    write(file);
    file.sync();
    file.close();
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      throw IoError(
          fmt::format("{}: cannot rename {} into place: {}", path.string(), temporary.string(), errno_message(errno)));
    }
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // best effort: makes the rename durable
    ::close(dir_fd);
  }
}

}  // namespace tensoracle
