// Libraries opened at run time (backends/cuda/runtime_library.hpp): the first name that loads, what was tried, missing
// symbols; cuBLASLt (cublaslt_library.hpp) opens without a GPU, every entry point resolves, and the version
// system_info reports is the opened library's, of the major version this build compiled against.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cublaslt_library.hpp"
#include "backends/cuda/runtime_library.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle::cuda {
namespace {

TEST(CudaLibraries, RuntimeLibraryOpensTheFirstNameThatLoadsAndSaysWhatWasTried) {
  const RuntimeLibrary none = open_runtime_library({"libtensoracle_no_such_library.so.7", ""});
  EXPECT_EQ(none.handle, nullptr);
  ASSERT_EQ(none.tried.size(), 1u);  // the empty name is skipped
  EXPECT_NE(none.tried[0].find("libtensoracle_no_such_library.so.7 ("), std::string::npos) << none.tried[0];

  const RuntimeLibrary libc = open_runtime_library({"libtensoracle_no_such_library.so.7", "libc.so.6"});
  ASSERT_NE(libc.handle, nullptr);
  EXPECT_EQ(libc.name, "libc.so.6");
  EXPECT_EQ(libc.tried.size(), 1u);
  std::string missing;
  std::size_t (*length)(const char*) = nullptr;
  libc.resolve(length, "strlen", missing);
  ASSERT_NE(length, nullptr);
  EXPECT_EQ(length("four"), 4u);
  EXPECT_TRUE(missing.empty());
  void (*absent)() = nullptr;
  libc.resolve(absent, "tensoracle_no_such_symbol", missing);
  libc.resolve(absent, "tensoracle_another_missing_symbol", missing);
  EXPECT_EQ(absent, nullptr);
  EXPECT_EQ(missing, "tensoracle_no_such_symbol");  // the first one missing
}

TEST(CudaLibraries, CublasLtOpensWithEveryEntryPointAndItsVersion) {
  start_loading_cublaslt();
  start_loading_cublaslt();  // once per process, however often it is asked
  const CublasLtLibrary& lt = cublaslt_library();
  EXPECT_NE(lt.path.find("libcublasLt.so"), std::string::npos) << lt.path;
  for (const void* entry :
       {reinterpret_cast<const void*>(lt.cublasLtCreate), reinterpret_cast<const void*>(lt.cublasLtDestroy),
        reinterpret_cast<const void*>(lt.cublasLtGetVersion), reinterpret_cast<const void*>(lt.cublasLtGetStatusName),
        reinterpret_cast<const void*>(lt.cublasLtGetStatusString), reinterpret_cast<const void*>(lt.cublasLtMatmul),
        reinterpret_cast<const void*>(lt.cublasLtMatmulDescCreate),
        reinterpret_cast<const void*>(lt.cublasLtMatmulDescDestroy),
        reinterpret_cast<const void*>(lt.cublasLtMatmulDescSetAttribute),
        reinterpret_cast<const void*>(lt.cublasLtMatrixLayoutCreate),
        reinterpret_cast<const void*>(lt.cublasLtMatrixLayoutDestroy),
        reinterpret_cast<const void*>(lt.cublasLtMatrixLayoutSetAttribute),
        reinterpret_cast<const void*>(lt.cublasLtMatmulPreferenceCreate),
        reinterpret_cast<const void*>(lt.cublasLtMatmulPreferenceDestroy),
        reinterpret_cast<const void*>(lt.cublasLtMatmulPreferenceSetAttribute),
        reinterpret_cast<const void*>(lt.cublasLtMatmulAlgoGetHeuristic)}) {
    EXPECT_NE(entry, nullptr);
  }
  const std::size_t version = lt.cublasLtGetVersion();
  EXPECT_EQ(version / 10000, static_cast<std::size_t>(CUBLAS_VER_MAJOR));
  EXPECT_EQ(cublaslt_version(), version);
  EXPECT_EQ(system_info().cublaslt_version, version);
  EXPECT_EQ(std::string(lt.cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_EQ(&cublaslt_library(), &lt);  // one library for the process
}

}  // namespace
}  // namespace tensoracle::cuda
