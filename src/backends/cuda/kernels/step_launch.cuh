// How a step launches its kernels: programmatic dependent launch on sm_90 (a kernel starts while the one before it in
// the stream finishes, and waits for that kernel's results itself, with step_wait.cuh's wait).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/step_wait.cuh"
#include "graph/graph.hpp"

namespace tensoracle::cuda::kernels {

// The launch configuration of a step's kernel: with launch.programmatic (set by the execution context on sm_90
// devices) it may start before the previous kernel in the stream has finished (allow_programmatic_start,
// step_wait.cuh). `attribute` must outlive the launch.
inline cudaLaunchConfig_t step_launch_config(const StepLaunch& launch, dim3 grid, dim3 block, std::size_t shared_bytes,
                                             cudaLaunchAttribute& attribute) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = launch.stream;
  allow_programmatic_start(config, attribute, launch.programmatic);
  return config;
}

inline const std::string& layer_name(const StepLaunch& launch) {
  static const std::string kUnnamed = "(unnamed layer)";
  return launch.layer != nullptr ? launch.layer->name : kUnnamed;
}

// Launches one of the step's kernels (whose first statement is wait_for_preceding_steps()) on launch.stream; throws
// CudaError naming the layer when the launch fails.
template <typename... Params, typename... Args>
void launch_kernel(const StepLaunch& launch, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes,
                   Args&&... args) {
  cudaLaunchAttribute attribute{};
  const cudaLaunchConfig_t config = step_launch_config(launch, grid, block, shared_bytes, attribute);
  TENSORACLE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), layer_name(launch));
}

}  // namespace tensoracle::cuda::kernels
