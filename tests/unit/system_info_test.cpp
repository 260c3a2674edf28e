// Tests for system_info(): it never throws, and reports either usable GPUs or the reason there are none.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tensoracle/system_info.hpp"
#include "tensoracle/version.hpp"

namespace tensoracle {
namespace {

TEST(SystemInfo, ReportsVersionAndCudaState) {
  SystemInfo info = system_info();
  EXPECT_EQ(info.library_version, TENSORACLE_VERSION_STRING);
  if (info.cuda_devices.empty()) {
    EXPECT_FALSE(info.cuda_unavailable_reason.empty());
  } else {
    EXPECT_TRUE(info.cuda_backend_built);
    for (const auto& d : info.cuda_devices) {
      EXPECT_FALSE(d.name.empty());
      EXPECT_GT(d.multiprocessor_count, 0);
      EXPECT_GT(d.total_memory_bytes, 0u);
      EXPECT_GT(d.memory_bus_width_bits, 0);
      EXPECT_GT(d.l2_cache_bytes, 0);
      EXPECT_GT(d.shared_memory_per_block_optin_bytes, 0u);
    }
  }
  if (info.cuda_backend_built) {
    EXPECT_GT(info.cuda_runtime_version, 0);
  }
}

// On the GPU machine the test script sets TENSORACLE_REQUIRE_GPU=1: there a missing device is a
// failure, not a skip.
TEST(SystemInfo, GpuVisibleWhereRequired) {
  const char* required = std::getenv("TENSORACLE_REQUIRE_GPU");
  if (required == nullptr || std::string(required) != "1")
    GTEST_SKIP() << "no GPU required (TENSORACLE_REQUIRE_GPU unset)";
  SystemInfo info = system_info();
  ASSERT_TRUE(info.cuda_backend_built);
  ASSERT_FALSE(info.cuda_devices.empty()) << info.cuda_unavailable_reason;
}

}  // namespace
}  // namespace tensoracle
