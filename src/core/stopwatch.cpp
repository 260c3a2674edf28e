// Stopwatch's common origin: the time the library was loaded.
#include "core/stopwatch.hpp"

namespace tensoracle {

namespace {
const std::chrono::steady_clock::time_point kLibraryLoaded = std::chrono::steady_clock::now();
}  // namespace

double Stopwatch::since_library_load_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - kLibraryLoaded).count();
}

}  // namespace tensoracle
