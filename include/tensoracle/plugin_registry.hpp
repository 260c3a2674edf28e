// Plugin libraries in this process: loading one (dlopen, its entry point, its creators) and listing what is loaded.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tensoracle {

// A plugin type that a loaded library provides.
struct LoadedPlugin {
  std::string type;
  std::string version;
  std::filesystem::path library;  // as it was loaded (absolute)
  std::string library_sha256;     // of the library file when it was loaded
};

// Loads a plugin library (a shared library exporting tensoracle_get_plugin_creators, include/tensoracle/plugin.hpp)
// and registers its creators for this process; returns the plugins it provides. Loading a library again is a no-op
// (it returns the same plugins). Libraries stay loaded until the process ends.
//
// Errors: IoError (no such file), InvalidArgumentError naming the library when it can't be loaded (dlopen's message),
// exports no entry point, was built for another plugin ABI version, returns no or unnamed creators, provides a
// plugin type and version that another loaded library already provides, or has changed on disk since this process
// loaded it (a process keeps the first version it loaded: start a new process to use the new one).
// Thread-safe.
std::vector<LoadedPlugin> load_plugin_library(const std::filesystem::path& library);

// Every plugin loaded so far, sorted by type and version. Thread-safe.
std::vector<LoadedPlugin> loaded_plugins();

}  // namespace tensoracle
