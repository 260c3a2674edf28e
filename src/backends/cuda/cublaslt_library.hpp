// cuBLASLt opened at run time: the entry points tensoracle calls, and the load begun beside the GPU's start.
//
// libcublasLt is half a gigabyte; linked, the dynamic loader spends 50-80 ms on it before main in every process (a CPU
// engine's too). Opened here instead, on a thread of its own as soon as a CUDA device is queried or started, it loads
// beside cuInit and the engine's reading, and processes that never use a CUDA engine never load it.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <string>

namespace tensoracle::cuda {

// The cuBLASLt functions tensoracle calls, resolved from the opened library (each named as the C function).
struct CublasLtLibrary {
  std::string path;  // the name it was opened by
  decltype(&::cublasLtCreate) cublasLtCreate = nullptr;
  decltype(&::cublasLtDestroy) cublasLtDestroy = nullptr;
  decltype(&::cublasLtGetVersion) cublasLtGetVersion = nullptr;
  decltype(&::cublasLtGetStatusName) cublasLtGetStatusName = nullptr;
  decltype(&::cublasLtGetStatusString) cublasLtGetStatusString = nullptr;
  decltype(&::cublasLtMatmul) cublasLtMatmul = nullptr;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) cublasLtMatrixLayoutSetAttribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic = nullptr;
};

// Begins opening cuBLASLt on a thread of its own, once per process; returns at once.
void start_loading_cublaslt();

// The opened library, waiting for a load already begun (or loading it now). Throws UnsupportedError naming the files
// tried and what to install where it cannot be opened or lacks an entry point.
const CublasLtLibrary& cublaslt_library();

// cublasLtGetVersion() of the opened library; 0 where it cannot be opened.
std::size_t cublaslt_version() noexcept;

}  // namespace tensoracle::cuda
