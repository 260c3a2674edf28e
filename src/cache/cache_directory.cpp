// Where the engine cache lives ($XDG_CACHE_HOME/tensoracle or ~/.cache/tensoracle) and its creation with mode 0700.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/posix_file.hpp"
#include "tensoracle/cache.hpp"

namespace tensoracle {

std::filesystem::path default_cache_directory() {
  // As the reference: an empty XDG_CACHE_HOME counts as unset.
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return std::filesystem::path(xdg) / "tensoracle";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return std::filesystem::path(home) / ".cache" / "tensoracle";
  std::vector<char> buffer(16384);
  struct passwd entry {};
  struct passwd* found = nullptr;
  if (::getpwuid_r(::getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr && *found->pw_dir != '\0') {
    return std::filesystem::path(found->pw_dir) / ".cache" / "tensoracle";
  }
  throw IoError(
      "cannot find the engine cache directory: neither XDG_CACHE_HOME nor HOME is set and the user has no home "
      "directory; set XDG_CACHE_HOME");
}

void ensure_cache_directory(const std::filesystem::path& directory) {
  // Create each missing component with 0700 (std::filesystem::create_directories would use 0777).
  std::filesystem::path prefix;
  for (const auto& part : directory) {
    prefix /= part;
    if (part.empty() || part == "/" || part == "." || part == "..") continue;
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      throw IoError(
          fmt::format("{}: cannot create the engine cache directory: {}", prefix.string(), errno_message(errno)));
    }
  }
  struct stat st {};
  if (::stat(directory.c_str(), &st) != 0) {
    throw IoError(
        fmt::format("{}: cannot use the engine cache directory: {}", directory.string(), errno_message(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw IoError(
        fmt::format("{}: the engine cache directory exists but is not a directory; remove it or set "
                    "XDG_CACHE_HOME to another location",
                    directory.string()));
  }
}

}  // namespace tensoracle
