// cuBLASLt opened at run time (backends/cuda/cublaslt_library.hpp): it opens without a GPU, every entry point
// resolves, and the version system_info reports is the opened library's, of the major version this build compiled
// against.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cublaslt_library.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle::cuda {
namespace {

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
