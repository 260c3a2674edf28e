// A fake CUDA driver for the cubin plugin base's unit tests: the driver calls cubin_plugin.cpp makes, recorded, with
// contexts, devices and limits the test sets (no GPU and no libcuda needed).
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace fake_cuda {

struct LaunchRecord {
  CUfunction function;
  std::string entry;  // the function's name in its module
  CUcontext context;
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  CUstream stream;
  std::vector<std::vector<unsigned char>> values;  // the parameter values, copied at the launch as the driver does

  // Parameter i's value as a T (its size as param_sizes gives it).
  template <typename T>
  T value(std::size_t i) const {
    T v{};
    std::memcpy(&v, values.at(i).data(), std::min(sizeof(T), values.at(i).size()));
    return v;
  }
};

struct UnloadRecord {
  CUmodule module;
  CUcontext context;  // current when it was unloaded
};

struct Driver {
  int max_threads_per_block = 1024;  // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK of every function
  int static_shared = 0;             // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
  int shared_optin = 100 * 1024;     // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
  int expected_params = 0;           // how many parameter values cuLaunchKernel copies (8 bytes each) ...
  // ... unless the entry is here: the bytes of each of its parameters (the fake can't read a cubin's parameter list).
  std::map<std::string, std::vector<std::size_t>> param_sizes;
  CUresult launch_result = CUDA_SUCCESS;
  std::vector<std::string> loaded_entries;  // cuModuleGetFunction names
  int module_loads = 0;
  std::vector<LaunchRecord> launches;
  std::vector<UnloadRecord> unloads;
  std::vector<std::pair<CUfunction, int>> dynamic_shared_set;  // cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)
};

// Forgets every context, module and record.
void reset();
Driver& driver();
// A new context on a device of this SM (10 * major + minor).
CUcontext make_context(int sm);
void set_current(CUcontext context);  // nullptr: none
void destroy_context(CUcontext context);
// Reuses a destroyed context's handle for a new context (as a driver may hand out the same address again).
void recreate_context(CUcontext context, int sm);

}  // namespace fake_cuda
