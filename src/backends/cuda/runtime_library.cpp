// Opens the CUDA backend's run-time libraries with dlopen and resolves their symbols (runtime_library.hpp).
#include "backends/cuda/runtime_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

namespace tensoracle::cuda {

RuntimeLibrary open_runtime_library(const std::vector<std::string>& names) {
  RuntimeLibrary library;
  for (const std::string& name : names) {
    if (name.empty()) continue;
    library.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library.handle != nullptr) {
      library.name = name;
      break;
    }
    const char* why = dlerror();
    library.tried.push_back(fmt::format("{} ({})", name, why != nullptr ? why : "not found"));
  }
  return library;
}

void* RuntimeLibrary::find_symbol(const char* symbol) const {
  return handle != nullptr ? dlsym(handle, symbol) : nullptr;
}

}  // namespace tensoracle::cuda
