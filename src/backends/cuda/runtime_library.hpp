// Libraries the CUDA backend opens at run time (cuBLASLt, NVRTC): the first of their names that loads, and their entry
// points resolved into typed slots.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

namespace tensoracle::cuda {

// A library opened with dlopen (RTLD_NOW | RTLD_LOCAL) and never closed.
struct RuntimeLibrary {
  void* handle = nullptr;          // nullptr: none of the names loaded
  std::string name;                // the name it was opened by
  std::vector<std::string> tried;  // "<name> (<dlerror>)" for each name that did not load, in order

  // Resolves `symbol` into `slot`; a missing one is recorded in `missing` (the first only).
  template <typename Fn>
  void resolve(Fn& slot, const char* symbol, std::string& missing) const {
    static_assert(std::is_pointer_v<Fn>, "a function pointer slot");
    slot = reinterpret_cast<Fn>(find_symbol(symbol));
    if (slot == nullptr && missing.empty()) missing = symbol;
  }

 private:
  void* find_symbol(const char* symbol) const;
};

// Opens the first of `names` that loads (empty names are skipped): a soname first (the loader's search path, and a
// copy already loaded), then a full path.
RuntimeLibrary open_runtime_library(const std::vector<std::string>& names);

}  // namespace tensoracle::cuda
