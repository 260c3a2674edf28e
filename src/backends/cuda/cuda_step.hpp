// The CUDA backend's kernel interface: what a step's launch function receives, and the per-family registration lists.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/dims.hpp"

namespace tensoracle::cuda {

// A tensor in device memory with its concrete shape (row-major, contiguous).
struct DeviceTensor {
  DataType dtype = DataType::kF32;
  Dims shape;
  void* data = nullptr;  // nullptr for an absent optional input
};

// Library handles owned by an execution context (one per context; used by one thread at a time).
struct LibraryHandles {
  cublasLtHandle_t cublaslt = nullptr;
};

// Everything a kernel needs to launch one step. Attributes are read through `attrs`
// (graph::AttrReader: get_int, get_ints, get_float, get_string, get_dtype, fail).
struct StepLaunch {
  const graph::Layer* layer = nullptr;
  const graph::AttrReader* attrs = nullptr;
  std::vector<DeviceTensor> inputs;
  std::vector<DeviceTensor> outputs;
  void* workspace = nullptr;  // scratch of `workspace_bytes`, private to this context
  std::size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
  LibraryHandles* handles = nullptr;
  Precision precision = Precision::kFp32;  // kTf32 allows TF32 tensor cores for f32 products
  // Entry points generated and compiled for this step at build time (NVRTC) and loaded with the engine, in the order
  // of the step's manifest entry list (each a cudaKernel_t as const void*, for cudaLaunchKernel); nullptr for the
  // hand-written kernels.
  const std::vector<const void*>* compiled = nullptr;
};

// A launch function enqueues the step's work on launch.stream and returns: it must not allocate
// device memory, synchronize, or copy to/from the host (the enqueue may be captured in a CUDA
// graph). Errors are thrown as CudaError naming the call and the layer (see check.hpp).
using LaunchFn = void (*)(const StepLaunch& launch);

// Whether the kernel can run this layer (dtypes, ranks, attributes) at this precision.
using SupportsFn = bool (*)(const graph::Graph& graph, const graph::Layer& layer, Precision precision);

// The scratch the kernel needs for this layer at these concrete shapes (every tensor id of the graph), at most
// KernelEntry::workspace_bytes; called by the builder with the target device current. Host-only queries (library
// heuristics), no device work.
using WorkspaceFn = std::size_t (*)(const graph::Graph& graph, const graph::Layer& layer,
                                    const std::vector<Dims>& shapes, Precision precision);

struct KernelEntry {
  const char* name;  // stable, "<op>_<dtypes>_<variant>" (recorded in engines)
  const char* op;
  SupportsFn supports;
  LaunchFn launch;
  std::size_t workspace_bytes = 0;      // scratch the kernel may use at most
  WorkspaceFn workspace_for = nullptr;  // what it needs for a given problem (none: workspace_bytes)
};

// Each family lists its kernels; the registry calls these once (no static initializers).
void register_elementwise_kernels(std::vector<KernelEntry>& kernels);        // kernels/elementwise.cu
void register_linear_algebra_kernels(std::vector<KernelEntry>& kernels);     // kernels/linear_algebra.cu
void register_normalization_kernels(std::vector<KernelEntry>& kernels);      // kernels/normalization.cu
void register_data_movement_kernels(std::vector<KernelEntry>& kernels);      // kernels/data_movement.cu
void register_reduction_kernels(std::vector<KernelEntry>& kernels);          // kernels/reduction.cu
void register_transformer_kernels(std::vector<KernelEntry>& kernels);        // kernels/transformer.cu
void register_convolution_kernels(std::vector<KernelEntry>& kernels);        // kernels/convolution.cu
void register_quantization_kernels(std::vector<KernelEntry>& kernels);       // kernels/quantization.cu
void register_fused_elementwise_kernels(std::vector<KernelEntry>& kernels);  // kernels/fused_elementwise.cu

// All registered kernels, sorted by op then in preference order.
const std::vector<KernelEntry>& kernel_registry();
const KernelEntry* find_kernel_entry(const std::string& name);

}  // namespace tensoracle::cuda
