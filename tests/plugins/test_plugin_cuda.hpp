// The test plugin's CUDA kernels (test_plugin_cuda.cu), or their absence (test_plugin_no_cuda.cpp): each returns
// nullptr, or what failed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace test_plugin_cuda {

bool built();
const char* scale_bias(bool f16, const void* x, const void* b, void* y, std::int64_t n, std::int64_t channels,
                       float alpha, void* workspace, void* stream);
const char* outer(const void* x, const void* y, void* outer, void* joined, std::int64_t n, std::int64_t m,
                  void* stream);
const char* copy(void* destination, const void* source, std::size_t bytes, void* stream);

}  // namespace test_plugin_cuda
