// The CUDA backend's kernel interface: prepare and launch functions, what they receive, the registration lists.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "graph/graph.hpp"
#include "graph/op_def.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/dims.hpp"

struct cudnnContext;  // cuDNN's handle type (cudnnHandle_t), declared so this header needs no cudnn.h

namespace tensoracle::cuda {

// A tensor in device memory with its concrete shape (row-major, contiguous).
struct DeviceTensor {
  DataType dtype = DataType::kF32;
  Dims shape;
  void* data = nullptr;  // nullptr for an absent optional input, and for a caller buffer while the step is prepared
  // The caller's buffer (an engine input or output): its address is bound at each enqueue, so a prepare function sees
  // nullptr and must not assume more than the dtype's alignment of it.
  bool caller_buffer = false;
};

// Library handles owned by an execution context (one per context; used by one thread at a time). The cuBLASLt handle
// exists from the context's creation; cuDNN's is created by the first prepare function that asks (cudnn), so
// contexts of engines without a cuDNN step never create one. Both are destroyed with the context
// (library_handles.cpp).
class LibraryHandles {
 public:
  LibraryHandles();  // creates the cuBLASLt handle on the current device
  ~LibraryHandles();
  LibraryHandles(const LibraryHandles&) = delete;
  LibraryHandles& operator=(const LibraryHandles&) = delete;

  cublasLtHandle_t cublaslt() const noexcept { return cublaslt_; }
  // Asks cuBLASLt's heuristic about one small f16 product: the first query of a process loads what the heuristic
  // needs (about 0.1 s on the H200 machine), which the first prepare would otherwise wait for. Failures are ignored.
  void warm_up_cublaslt() const noexcept;
  // cuDNN's handle, created on first use: call it from prepare functions (cudnnCreate is not capture safe) and keep
  // the handle in the step's state. `context` names the layer in errors.
  ::cudnnContext* cudnn(const std::string& context);

 private:
  cublasLtHandle_t cublaslt_ = nullptr;
  ::cudnnContext* cudnn_ = nullptr;
};

// What a step sees, both when it is prepared and when it launches. Attributes are read through `attrs`
// (graph::AttrReader: get_int, get_ints, get_float, get_string, get_dtype, fail) in prepare functions only.
struct StepLaunch {
  const graph::Layer* layer = nullptr;
  const graph::AttrReader* attrs = nullptr;
  std::vector<DeviceTensor> inputs;
  std::vector<DeviceTensor> outputs;
  void* workspace = nullptr;  // scratch of `workspace_bytes`, private to this context
  std::size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;  // nullptr while the step is prepared
  LibraryHandles* handles = nullptr;
  Precision precision = Precision::kFp32;  // kTf32 allows TF32 tensor cores for f32 products
  // Entry points generated and compiled for this step at build time (NVRTC) and loaded with the engine, in the order
  // of the step's manifest entry list (each a cudaKernel_t as const void*, for cudaLaunchKernel); nullptr for the
  // hand-written kernels.
  const std::vector<const void*>* compiled = nullptr;
  // Launch the step's own kernels with programmatic dependent launch (kernels::launch_kernel): set by the execution
  // context where programmatic_launch_wanted, and for generated kernels only when their binary waits for the preceding
  // steps (engines built before it did launch them plainly); kernel timing sets it as the execution context would.
  bool programmatic = false;
};

// Whether the steps' kernels launch programmatically on `device` (StepLaunch::programmatic): a compute capability 9.0
// or newer GPU, unless the environment sets TENSORACLE_PROGRAMMATIC_LAUNCH=0 (to compare, or to rule it out).
bool programmatic_launch_wanted(int device);

// What a kernel's prepare function computes for one step at one set of shapes, owned by the execution context until
// the next set_input_shapes: attribute values, geometry, strides, library descriptors and plans.
class StepState {
 public:
  virtual ~StepState() = default;
};

// Runs in set_input_shapes (and at context creation for fixed shapes), on the engine's device, with every shape,
// dtype, constant and arena address known and caller buffers still unbound (DeviceTensor::caller_buffer). Reads the
// attributes, validates them (attrs->fail), and plans the launch. It may allocate host memory and create library
// descriptors, but not launch work.
using PrepareFn = std::unique_ptr<StepState> (*)(const StepLaunch& launch);

// A launch function enqueues the step's work on launch.stream and returns: it only binds the addresses of `launch`
// and launches what `state` planned. It must not allocate device memory, synchronize, copy to/from the host, read
// attributes, look anything up in maps, or query the device (the enqueue may be captured in a CUDA graph). Errors are
// thrown as CudaError naming the call and the layer (see check.hpp).
using LaunchFn = void (*)(const StepLaunch& launch, const StepState& state);

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
  PrepareFn prepare;
  LaunchFn launch;
  std::size_t workspace_bytes = 0;      // scratch the kernel may use at most (0 with a workspace_for: no fixed bound)
  WorkspaceFn workspace_for = nullptr;  // what it needs for a given problem (none: workspace_bytes)
};

// The state of a kernel whose prepare function returns a plain value (a "plan").
template <typename Plan>
class PlanState final : public StepState {
 public:
  explicit PlanState(Plan value) : plan(std::move(value)) {}
  Plan plan;
};

// A registry entry from a typed pair: `Plan kPrepare(const StepLaunch&)` and
// `void kLaunch(const StepLaunch&, const Plan&)`. The one way families write their entries.
template <auto kPrepare, auto kLaunch>
KernelEntry prepared_kernel(const char* name, const char* op, SupportsFn supports, std::size_t workspace_bytes = 0,
                            WorkspaceFn workspace_for = nullptr) {
  using Plan = std::decay_t<decltype(kPrepare(std::declval<const StepLaunch&>()))>;
  PrepareFn prepare = [](const StepLaunch& step) -> std::unique_ptr<StepState> {
    return std::make_unique<PlanState<Plan>>(kPrepare(step));
  };
  LaunchFn launch = [](const StepLaunch& step, const StepState& state) {
    kLaunch(step, static_cast<const PlanState<Plan>&>(state).plan);
  };
  return KernelEntry{name, op, supports, prepare, launch, workspace_bytes, workspace_for};
}

// Each family lists its kernels; the registry calls these once (no static initializers).
void register_elementwise_kernels(std::vector<KernelEntry>& kernels);     // kernels/elementwise.cu
void register_linear_algebra_kernels(std::vector<KernelEntry>& kernels);  // kernels/linear_algebra.cu
void register_normalization_kernels(std::vector<KernelEntry>& kernels);   // kernels/normalization.cu
void register_data_movement_kernels(std::vector<KernelEntry>& kernels);   // kernels/data_movement.cu
void register_reduction_kernels(std::vector<KernelEntry>& kernels);       // kernels/reduction.cu
void register_transformer_kernels(std::vector<KernelEntry>& kernels);     // kernels/transformer.cu
void register_convolution_kernels(std::vector<KernelEntry>& kernels);     // kernels/convolution.cu
// 1x1 channels-last convs as cuBLASLt products, after cuDNN's entries (kernels/linear_algebra.cu).
void register_pointwise_convolution_kernels(std::vector<KernelEntry>& kernels);
void register_pooling_kernels(std::vector<KernelEntry>& kernels);                // kernels/pooling.cu
void register_resize_kernels(std::vector<KernelEntry>& kernels);                 // kernels/resize.cu
void register_quantization_kernels(std::vector<KernelEntry>& kernels);           // kernels/quantization.cu
void register_quantized_linear_kernels(std::vector<KernelEntry>& kernels);       // kernels/quantized_linear.cu
void register_quantized_convolution_kernels(std::vector<KernelEntry>& kernels);  // kernels/quantized_convolution.cu
void register_fused_elementwise_kernels(std::vector<KernelEntry>& kernels);      // kernels/fused_elementwise.cu
void register_plugin_kernels(std::vector<KernelEntry>& kernels);                 // kernels/plugin.cpp

// All registered kernels, sorted by op then in preference order.
const std::vector<KernelEntry>& kernel_registry();
const KernelEntry* find_kernel_entry(const std::string& name);

}  // namespace tensoracle::cuda
