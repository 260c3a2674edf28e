// The programmatic wait that every step kernel begins with, and the launch attribute that lets a kernel start before
// it (step_launch.cuh launches them), in a header of its own so that the CUTLASS files (C++17, no engine headers) can
// use them too.
#pragma once

#include <cuda_runtime.h>

namespace tensoracle::cuda::kernels {

// The first statement of every kernel that launch_kernel starts (scripts/check-step-kernels.py checks it): waits
// until the kernel before it in the stream has finished and its memory writes are visible (griddepcontrol.wait),
// then lets the next step's kernel start launching (griddepcontrol.launch_dependents), whose blocks take the
// multiprocessors this kernel's blocks leave and wait there in turn. Nothing of this kernel touches global memory
// before the wait, so reading the previous results and overwriting buffers the previous kernels read are both
// ordered. Launched without the attribute (or before sm_90) both instructions do nothing.
__device__ __forceinline__ void wait_for_preceding_steps() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The first statement of a kernel that reads, before its wait, only what the steps before the preceding one wrote
// (scripts/check-step-kernels.py accepts it in wait_for_preceding_steps()'s place, with that wait later in the body).
// Correct when the preceding kernel lets this one launch only after its own wait, as wait_for_preceding_steps() and
// programmatic_device_kernel (cutlass_attention_sm90.cuh) do: this kernel's blocks then start after every kernel
// before the preceding one has finished. Such early reads bypass L1 (__ldcg), and nothing is written before the wait.
// A marker for the reader and the check; it does nothing.
__device__ __forceinline__ void read_older_results_before_the_wait() {}

// With `programmatic`, lets the kernel launched with `config` start before the kernel before it in the stream has
// finished (cudaLaunchAttributeProgrammaticStreamSerialization; captured into CUDA graphs as a programmatic edge). That
// kernel must begin with one of the two statements above. `attribute` must outlive the launch.
inline void allow_programmatic_start(cudaLaunchConfig_t& config, cudaLaunchAttribute& attribute, bool programmatic) {
  if (!programmatic) return;
  attribute = cudaLaunchAttribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
}

}  // namespace tensoracle::cuda::kernels
