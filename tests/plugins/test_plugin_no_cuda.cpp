// The test plugin without CUDA kernels (builds without the CUDA backend): every CUDA entry refuses.
#include "test_plugin_cuda.hpp"

namespace test_plugin_cuda {

namespace {
const char* kNoCuda = "the test plugin was built without CUDA";
}

bool built() { return false; }
const char* scale_bias(bool, const void*, const void*, void*, std::int64_t, std::int64_t, float, void*, void*) {
  return kNoCuda;
}
const char* outer(const void*, const void*, void*, void*, std::int64_t, std::int64_t, void*) { return kNoCuda; }
const char* copy(void*, const void*, std::size_t, void*) { return kNoCuda; }

}  // namespace test_plugin_cuda
