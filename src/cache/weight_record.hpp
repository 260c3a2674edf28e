// Internal parts of the weight digest records: Python's os.path.abspath and a progress threshold tests can lower.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace tensoracle::cache_detail {

// Files at least this large report hashing progress at kInfo.
inline constexpr std::uint64_t kHashProgressThreshold = std::uint64_t{256} << 20;

// os.path.abspath: joined with the working directory when relative, then posixpath.normpath
// (lexical: no symlinks resolved, "//" kept at the start as POSIX allows).
std::string python_abspath(const std::string& path);

std::string weight_file_sha256(const std::filesystem::path& weight_file, const std::filesystem::path& cache_directory,
                               bool force_rehash, std::uint64_t progress_threshold);

}  // namespace tensoracle::cache_detail
