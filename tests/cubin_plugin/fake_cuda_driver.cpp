// The fake CUDA driver of fake_cuda_driver.hpp: defines the driver entry points cubin_plugin.cpp calls.
#include "fake_cuda_driver.hpp"

#include <deque>
#include <memory>

namespace fake_cuda {
namespace {

struct FakeContext {
  unsigned long long id;
  int sm;
  bool destroyed;
};

struct FakeModule {
  CUcontext context;
};

struct FakeFunction {
  CUmodule module;
  std::string entry;
};

struct State {
  Driver driver;
  std::deque<FakeContext> contexts;  // stable addresses: a CUcontext is a FakeContext*
  std::deque<FakeModule> modules;
  std::deque<FakeFunction> functions;
  std::vector<CUcontext> stack;  // the thread's context stack; back() is current
  unsigned long long next_id = 1;
};

State& state() {
  static State s;
  return s;
}

FakeContext* as_context(CUcontext c) { return reinterpret_cast<FakeContext*>(c); }
CUcontext current() { return state().stack.empty() ? nullptr : state().stack.back(); }

}  // namespace

void reset() {
  state().driver = Driver{};
  state().stack.clear();
  // Contexts and modules stay allocated (handles held by earlier tests' objects must stay readable) but are destroyed.
  for (auto& c : state().contexts) c.destroyed = true;
}
Driver& driver() { return state().driver; }

CUcontext make_context(int sm) {
  state().contexts.push_back(FakeContext{state().next_id++, sm, false});
  return reinterpret_cast<CUcontext>(&state().contexts.back());
}

void set_current(CUcontext context) {
  state().stack.clear();
  if (context) state().stack.push_back(context);
}

void destroy_context(CUcontext context) { as_context(context)->destroyed = true; }

void recreate_context(CUcontext context, int sm) { *as_context(context) = FakeContext{state().next_id++, sm, false}; }

}  // namespace fake_cuda

using fake_cuda::as_context;
using fake_cuda::state;

extern "C" {

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  *pStr = error == CUDA_ERROR_NOT_FOUND                 ? "CUDA_ERROR_NOT_FOUND"
          : error == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES ? "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
          : error == CUDA_ERROR_CONTEXT_IS_DESTROYED    ? "CUDA_ERROR_CONTEXT_IS_DESTROYED"
                                                        : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  *pctx = fake_cuda::current();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (as_context(ctx)->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *ctxId = as_context(ctx)->id;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  CUcontext c = fake_cuda::current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = as_context(c)->sm;  // the fake's device ordinal is its SM
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  if (as_context(ctx)->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  state().stack.push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext* pctx) {
  if (state().stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = state().stack.back();
  state().stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = dev / 10; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = dev % 10; return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *pi = state().driver.shared_optin; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  if (image == nullptr || fake_cuda::current() == nullptr) return CUDA_ERROR_INVALID_VALUE;
  state().modules.push_back(fake_cuda::FakeModule{fake_cuda::current()});
  state().driver.module_loads++;
  *module = reinterpret_cast<CUmodule>(&state().modules.back());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (std::string(name) == "missing_entry") return CUDA_ERROR_NOT_FOUND;
  state().driver.loaded_entries.push_back(name);
  state().functions.push_back(fake_cuda::FakeFunction{hmod, name});
  *hfunc = reinterpret_cast<CUfunction>(&state().functions.back());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  state().driver.unloads.push_back(fake_cuda::UnloadRecord{hmod, fake_cuda::current()});
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction) {
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = state().driver.max_threads_per_block; return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = state().driver.static_shared; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
  state().driver.dynamic_shared_set.emplace_back(hfunc, value);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  if (extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (state().driver.launch_result != CUDA_SUCCESS) return state().driver.launch_result;
  fake_cuda::LaunchRecord r{f,
                            reinterpret_cast<fake_cuda::FakeFunction*>(f)->entry,
                            fake_cuda::current(),
                            {gridDimX, gridDimY, gridDimZ},
                            {blockDimX, blockDimY, blockDimZ},
                            sharedMemBytes,
                            hStream,
                            {}};
  const auto sizes = state().driver.param_sizes.find(r.entry);
  const bool known = sizes != state().driver.param_sizes.end();
  const int count = known ? int(sizes->second.size()) : state().driver.expected_params;
  for (int i = 0; i < count; ++i) {
    std::size_t size = 8;
    if (known) size = sizes->second[std::size_t(i)];
    const auto* bytes = static_cast<const unsigned char*>(kernelParams[i]);
    r.values.emplace_back(bytes, bytes + size);
  }
  state().driver.launches.push_back(r);
  return CUDA_SUCCESS;
}

}  // extern "C"
